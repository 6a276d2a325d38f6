"""A malformed probe in a static manifest is refused, naming the file and the field, while the
pod beside it runs (before, it passed validation and killed its probe task unseen)."""

from __future__ import annotations

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, phase, pod_manifest, write_manifest


async def test_a_malformed_probe_is_refused_naming_its_field_while_the_pod_beside_it_runs(agent, manifests):
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    write_manifest(manifests, "fine", pod_manifest("fine", "sleep 3600", readinessProbe=probe))
    write_manifest(manifests, "badprobe", pod_manifest("badprobe", "sleep 3600",
                                                       readinessProbe={**probe, "periodSeconds": "abc"}))

    def running_and_ready(pod):
        return phase(pod) == "Running" and pod["status"]["containerStatuses"][0]["ready"]
    await agent.wait_pod(f"fine-{NODE}", running_and_ready, 30, "the good pod Running and ready")
    field = "spec.containers[0].readinessProbe.periodSeconds"
    await wait_for(lambda: any("badprobe.yaml" in line and field in line for line in agent.log().splitlines()), 10,
                   "the bad file's error naming the file and the field", describe=agent.describe)
    assert set(agent.pods()) == {f"fine-{NODE}"}
    assert "Task exception was never retrieved" not in agent.log()
