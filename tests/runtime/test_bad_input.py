"""Bad manifests and images get clear errors and never touch the other pods."""

from __future__ import annotations

from tests.helpers import wait_for
from tests.runtime.conftest import AgentProcess, NODE, containers_of, main_status, phase, pod_manifest, write_manifest


async def test_bad_manifests_beside_good_ones_are_reported_and_fixable(agent, manifests):
    write_manifest(manifests, "good", pod_manifest("good", "sleep 3600"))
    write_manifest(manifests, "broken-yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n")
    no_image = pod_manifest("noimage", "sleep 3600")
    del no_image["spec"]["containers"][0]["image"]
    write_manifest(manifests, "noimage", no_image)
    write_manifest(manifests, "policy", pod_manifest("policy", "sleep 3600", restart_policy="Sometimes"))

    await agent.wait_pod(f"good-{NODE}", lambda p: phase(p) == "Running", 30, "the good pod Running")
    await wait_for(lambda: "noimage.yaml" in agent.log() and "policy.yaml" in agent.log(), 10,
                   "errors for the bad files in the agent log", describe=agent.describe)
    log = agent.log()
    assert "broken-yaml.yaml: not valid YAML" in log
    assert "noimage.yaml" in log and "spec.containers[0].image: Required value" in log
    assert "spec.restartPolicy: Unsupported value: 'Sometimes'" in log
    assert set(agent.pods()) == {f"good-{NODE}"}

    write_manifest(manifests, "noimage", pod_manifest("noimage", "sleep 3600"))  # the user fixes it
    await agent.wait_pod(f"noimage-{NODE}", lambda p: phase(p) == "Running", 30, "the fixed pod Running")
    assert log.count("spec.containers[0].image: Required value") == 1, "a bad file's error is logged once"
    assert phase(agent.pods()[f"good-{NODE}"]) == "Running"


async def test_missing_image_with_pull_policy_never_waits_with_err_image_never_pull(agent, manifests):
    write_manifest(manifests, "never", pod_manifest("never", "true", image="example.invalid/none:1",
                                                    imagePullPolicy="Never"))
    pod = await agent.wait_pod(f"never-{NODE}", lambda p: "waiting" in main_status(p)["state"]
                               and main_status(p)["state"]["waiting"]["reason"] == "ErrImageNeverPull",
                               30, "waiting ErrImageNeverPull")
    assert phase(pod) == "Pending"
    assert "not present with pull policy of Never" in main_status(pod)["state"]["waiting"]["message"]


async def test_failed_pull_shows_err_image_pull_then_image_pull_backoff(agent, manifests):
    # A registry on a closed loopback port: the pull fails at once, and no traffic leaves the host.
    write_manifest(manifests, "pull", pod_manifest("pull", "true", image="127.0.0.1:9/missing/image:1"))
    name = f"pull-{NODE}"

    def reason(p):
        return main_status(p)["state"].get("waiting", {}).get("reason")
    await agent.wait_pod(name, lambda p: reason(p) == "ErrImagePull", 30, "waiting ErrImagePull")
    pod = await agent.wait_pod(name, lambda p: reason(p) == "ImagePullBackOff", 30, "waiting ImagePullBackOff")
    assert phase(pod) == "Pending"
    assert 'Back-off pulling image "127.0.0.1:9/missing/image:1"' in main_status(pod)["state"]["waiting"]["message"]


async def test_pods_over_max_pods_are_rejected_with_out_of_pods(cri, tmp_path, manifests):
    write_manifest(manifests, "first", pod_manifest("first", "sleep 3600"))
    write_manifest(manifests, "second", pod_manifest("second", "sleep 3600"))
    agent = AgentProcess(tmp_path, manifests).start("--max-pods", "1")
    try:
        rejected = await wait_for(
            lambda: [p for p in (agent.pods() or {}).values() if p["status"].get("reason") == "OutOfpods"],
            30, "one pod rejected with OutOfpods", describe=agent.describe)
        (pod,) = rejected
        assert phase(pod) == "Failed"
        assert "capacity: 1" in pod["status"]["message"]
        admitted = ({f"first-{NODE}", f"second-{NODE}"} - {pod["metadata"]["name"]}).pop()
        await agent.wait_pod(admitted, lambda p: phase(p) == "Running", 30, "the admitted pod Running")
        assert not await containers_of(cri, pod["metadata"]["name"])
    finally:
        agent.stop()


async def test_a_network_that_cannot_be_set_up_stops_neither_the_agent_nor_its_pods(cri, manifests, tmp_path):
    write_manifest(manifests, "steady", pod_manifest("steady", "sleep 3600"))
    agent = AgentProcess(tmp_path, manifests).start()
    try:
        before = await agent.wait_pod(f"steady-{NODE}", lambda p: phase(p) == "Running", 30, "steady Running")
        agent.stop()
        missing = tmp_path / "no-cni-plugins"
        agent.start("--cni-bin-dir", str(missing))
        await wait_for(lambda: "Cannot set up the pod network" in agent.log().split("agent run 2")[-1], 30,
                       "the network error in the log", describe=agent.describe)
        assert str(missing) in agent.log().split("agent run 2")[-1]  # it says where it looked
        write_manifest(manifests, "late", pod_manifest("late", "sleep 3600"))
        # containerd asks the shim, the shim finds no agent answering: "try again later"
        refused = "pykubelet agent is not reachable; try again later"
        await wait_for(lambda: refused in agent.log().split("agent run 2")[-1], 30,
                       "the new pod's sandbox refused for want of a network", describe=agent.describe)
        assert "waiting" in main_status(agent.pods()[f"late-{NODE}"])["state"]
        steady = agent.pods()[f"steady-{NODE}"]
        assert phase(steady) == "Running" and main_status(steady) == main_status(before)
        agent.stop()
        agent.start()  # fixed
        await agent.wait_pod(f"late-{NODE}", lambda p: phase(p) == "Running", 60, "late Running once it can be")
    finally:
        agent.shutdown()
