"""A resize changes no container hash that replaces containers; an agent upgrade replaces none."""

from __future__ import annotations

from pykubelet.api.pod import parse_pod
from pykubelet.pods.actions import compute_pod_actions
from pykubelet.runtime.specs import container_hash, container_hash_without_resources, spec_changed
from pykubelet.runtime.state import RUNNING, ContainerState, PodRuntimeState, SandboxState


def pod(resources: dict, image: str = "busybox:1.36", policy: list | None = None):
    container = {"name": "app", "image": image, "resources": resources}
    if policy is not None:
        container["resizePolicy"] = policy
    return parse_pod({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [container]}}, where="test")


SMALL = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
BIG = {"requests": {"cpu": "300m", "memory": "128Mi"}, "limits": {"cpu": "400m", "memory": "128Mi"}}


def running(recorded_hash: str, without_resources: str) -> PodRuntimeState:
    return PodRuntimeState(uid="u1", sandboxes=[SandboxState("sb", 0, True, 1.0)], containers=[
        ContainerState("c1", "app", RUNNING, 0, recorded_hash, 2.0, sandbox_id="sb",
                       hash_without_resources=without_resources)])


def test_a_resize_keeps_the_hash_without_resources_and_the_container():
    before, after = pod(SMALL).containers[0], pod(BIG, policy=[{"resourceName": "cpu",
                                                                 "restartPolicy": "NotRequired"}]).containers[0]
    assert container_hash_without_resources(before) == container_hash_without_resources(after)
    state = running(container_hash(before), container_hash_without_resources(before))
    assert compute_pod_actions(pod(BIG), state).is_noop()


def test_a_new_image_still_replaces_the_container():
    before = pod(SMALL).containers[0]
    state = running(container_hash(before), container_hash_without_resources(before))
    actions = compute_pod_actions(pod(SMALL, image="busybox:1.37"), state)
    assert actions.kill == {"c1": "Container definition changed"} and actions.start == ["app"]


def test_a_container_made_before_the_upgrade_is_kept_while_its_spec_is_unchanged():
    before = pod(SMALL).containers[0]
    assert not spec_changed(container_hash(before), "", before)
    assert compute_pod_actions(pod(SMALL), running(container_hash(before), "")).is_noop()


def test_a_container_made_before_the_upgrade_compares_by_its_whole_spec_hash():
    before = pod(SMALL).containers[0]
    assert spec_changed(container_hash(before), "", pod(BIG).containers[0])
