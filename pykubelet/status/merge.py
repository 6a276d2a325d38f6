"""What a new pod status keeps of the previous one (the kubelet's status manager rules).

The previous status is the one this agent last computed, or, for a pod it has not computed one
for yet (just restarted), the one the apiserver holds: the pod's own, or its mirror pod's for a
static pod. So an agent restart changes none of these:
- `startTime` never changes once set;
- a condition whose status did not change keeps its `lastTransitionTime`;
- a container the runtime holds nothing of (yet) keeps its `restartCount` and `lastState`, and
  a terminated state stays terminated (regular, init and ephemeral containers alike).

Why on the v1 JSON (dicts) and not on the typed PodStatus: the previous status is the
apiserver's as often as ours, and the status manager re-bases a status it already stored (sent
form) on the mirror pod's once the mirror pods are listed; both sides of every comparison are
that JSON. Merging there needs no parser of what other writers may have put in a status, and
what is carried over (a container status the runtime lost, say) stays exactly as the apiserver
holds it, so the manager's "did it change since we sent it" comparison stays exact.
"""

from __future__ import annotations

import copy
from typing import Any

Status = dict[str, Any]


def _carry_containers(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> list[dict[str, Any]]:
    before = {c.get("name"): c for c in old}
    out = []
    for status in new:
        previous = before.get(status.get("name"))
        if "containerID" not in status and previous is not None and previous.get("containerID"):
            if "terminated" in (previous.get("state") or {}):
                status = copy.deepcopy(previous)
            else:
                status = {**status, "restartCount": previous.get("restartCount", 0),
                          "lastState": copy.deepcopy(previous.get("lastState") or {})}
        out.append(status)
    return out


def carry_over(previous: Status | None, status: Status) -> Status:
    """`status` with what it keeps of `previous` (changed in place and returned)."""
    if not previous:
        return status
    if previous.get("startTime"):
        status["startTime"] = previous["startTime"]
    before = {c.get("type"): c for c in previous.get("conditions") or []}
    for condition in status.get("conditions") or []:
        old = before.get(condition["type"])
        if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
            condition["lastTransitionTime"] = old["lastTransitionTime"]
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        if key in status and previous.get(key):
            status[key] = _carry_containers(status[key], previous[key])
    return status
