"""Which of a running pod's updates from its source its worker must act on.

The apiserver sends a pod back after every status write this node makes. Like the kubelet (its
config's checkAndUpdatePod: podsDifferSemantically, else a status-only reconcile), the worker is
woken for a change of what the node runs the pod by: its spec, labels, annotations or deletion;
and for a change of a condition someone else owns (a readiness gate's), which the pod's own status
must carry and its Ready condition may depend on. The echo of the node's own status write changes
none of them, and costs no sync.
"""

from __future__ import annotations

from pykubelet.api.pod import Pod
from pykubelet.pods import conditions

# The metadata a pod's sync reads, besides the spec (the kubelet's podsDifferSemantically).
ACTED_ON_METADATA = ("labels", "annotations", "deletionTimestamp", "deletionGracePeriodSeconds")


def needs_sync(old: Pod, new: Pod) -> bool:
    if old != new or old.raw.get("spec") != new.raw.get("spec"):
        return True
    old_meta, new_meta = old.raw.get("metadata") or {}, new.raw.get("metadata") or {}
    if any(old_meta.get(key) != new_meta.get(key) for key in ACTED_ON_METADATA):
        return True
    return conditions.not_ours(old) != conditions.not_ours(new)
