"""kubectl debug --target: an ephemeral container's targetContainerName is validated as the
apiserver does, resolved to the target's runtime ID, and puts the debugger in the target's PID
namespace (CRI NamespaceMode TARGET) unless the pod already shares one."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import Pod, parse_pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.pods.container_config import pid_target_id
from pykubelet.runtime import specs
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.runtime.state import EXITED, RUNNING, ContainerState


def debugged_pod(target: Any = "app", **spec: Any) -> Pod:
    debugger: dict[str, Any] = {"name": "debugger", "image": "busybox:1.36", "stdin": True, "tty": True}
    if target is not None:
        debugger["targetContainerName"] = target
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"}, "spec": {
        "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
        "containers": [{"name": "app", "image": "busybox:1.36"}],
        "ephemeralContainers": [debugger], **spec}}, where="test")


def debugger_namespaces(pod: Pod, target_id: str) -> api.NamespaceOption:
    config = specs.container_config(pod, pod.ephemeral_containers[0], "sha256:busybox", 0, pid_target_id=target_id)
    return config.linux.security_context.namespace_options


def instance(state: str, container_id: str = "c-app-2") -> ContainerState:
    return ContainerState(id=container_id, name="app", state=state, restart_count=0, hash="h", created_at=1.0)


# --- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["app", "setup"])
def test_the_target_may_be_a_regular_or_an_init_container(target):
    assert debugged_pod(target).ephemeral_containers[0].target_container_name == target


def test_without_a_target_the_debugger_names_none():
    assert debugged_pod(None).ephemeral_containers[0].target_container_name == ""


@pytest.mark.parametrize("target", ["nosuch", "debugger"])  # another ephemeral container is no target
def test_a_target_that_is_not_a_container_of_the_pod_is_refused_naming_the_field(target):
    with pytest.raises(InvalidObject) as refused:
        debugged_pod(target)
    assert f"spec.ephemeralContainers[0].targetContainerName: Not found: {target!r}" in str(refused.value)


def test_a_target_that_is_not_a_string_is_refused_naming_the_field():
    with pytest.raises(InvalidObject, match=r"spec\.ephemeralContainers\[0\]\.targetContainerName: must be a string"):
        debugged_pod(["app"])


# --- the target's runtime ID ---------------------------------------------------------------------

def test_the_target_is_the_newest_instance_of_the_named_container_whatever_its_state():
    debugger = debugged_pod().ephemeral_containers[0]
    assert pid_target_id(debugger, instance(RUNNING)) == "c-app-2"
    # As the kubelet: an exited target is still named; the runtime refuses it, and the next sync tries again.
    assert pid_target_id(debugger, instance(EXITED, "c-app-1")) == "c-app-1"


def test_a_target_with_no_instance_is_a_config_error_as_the_kubelets():
    with pytest.raises(ContainerConfigError, match="^unable to find target container app$"):
        pid_target_id(debugged_pod().ephemeral_containers[0], None)


def test_a_debugger_without_a_target_and_a_regular_container_need_no_instance():
    pod = debugged_pod(None)
    assert pid_target_id(pod.ephemeral_containers[0], None) == ""
    assert pid_target_id(pod.containers[0], None) == ""


# --- the CRI config ------------------------------------------------------------------------------

def test_the_debugger_joins_the_targets_pid_namespace():
    namespaces = debugger_namespaces(debugged_pod(), "c-app-2")
    assert (namespaces.pid, namespaces.target_id) == (api.TARGET, "c-app-2")
    assert (namespaces.network, namespaces.ipc) == (api.POD, api.POD)  # the rest is the pod's, as before


def test_without_a_target_the_debugger_has_its_own_pid_namespace():
    namespaces = debugger_namespaces(debugged_pod(None), "")
    assert (namespaces.pid, namespaces.target_id) == (api.CONTAINER, "")


@pytest.mark.parametrize("spec, mode", [({"shareProcessNamespace": True}, api.POD), ({"hostPID": True}, api.NODE)])
def test_a_pod_that_shares_a_pid_namespace_keeps_it_for_a_targeted_debugger(spec, mode):
    namespaces = debugger_namespaces(debugged_pod(**spec), "c-app-2")
    assert (namespaces.pid, namespaces.target_id) == (mode, "")
