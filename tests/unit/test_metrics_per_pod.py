"""Per-pod Prometheus series go with their pod: a node that runs many short-lived pods must not
serve (and hold in memory) a series for every pod it ever ran."""

from __future__ import annotations

from pykubelet.util import metrics


def probe_series(uid: str) -> list[dict[str, str]]:
    return [sample.labels for family in metrics.PROBES.collect() for sample in family.samples
            if sample.labels.get("pod_uid") == uid]


def test_forgetting_a_pod_removes_its_probe_series_and_its_start_and_leaves_the_other_pods():
    for uid, pod in (("uid-gone-1", "gone"), ("uid-kept-1", "kept")):
        metrics.observe_probe("readinessProbe", True, "app", pod, "default", uid)
        metrics.observe_probe("readinessProbe", False, "app", pod, "default", uid)
        metrics.observe_probe("livenessProbe", True, "sidecar", pod, "default", uid)
        metrics.observe_pod_running(uid, 0.0, "Running")
    assert len(probe_series("uid-gone-1")) == 3
    starts = metrics.POD_START_DURATION.collect()[0]
    count = next(s.value for s in starts.samples if s.name.endswith("_count"))

    metrics.forget_pod("uid-gone-1")

    assert probe_series("uid-gone-1") == []
    assert len(probe_series("uid-kept-1")) == 3
    # Seen Running again (the same UID run anew), it counts as a start again; the kept one does not.
    metrics.observe_pod_running("uid-gone-1", 0.0, "Running")
    metrics.observe_pod_running("uid-kept-1", 0.0, "Running")
    starts = metrics.POD_START_DURATION.collect()[0]
    assert next(s.value for s in starts.samples if s.name.endswith("_count")) == count + 1
    metrics.forget_pod("uid-gone-1")
    metrics.forget_pod("uid-kept-1")
    assert probe_series("uid-kept-1") == []


def test_forgetting_a_pod_the_metrics_never_saw_changes_nothing():
    metrics.forget_pod("uid-never-seen")
