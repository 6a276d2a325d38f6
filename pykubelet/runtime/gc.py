"""Which dead containers and sandboxes of a live pod to remove (the kubelet's GC policy).

Kept: every running container, the newest instance of each container name (so `logs
--previous` and lastState work), and any sandbox that is ready or still holds a kept container.
"""

from __future__ import annotations

from pykubelet.runtime.state import PodRuntimeState


def dead_to_remove(state: PodRuntimeState, keep_per_container: int = 1) -> tuple[list[str], list[str]]:
    """(container IDs, sandbox IDs) that can go; `state` lists newest first."""
    kept: list[str] = []
    remove: list[str] = []
    seen: dict[str, int] = {}
    for c in state.containers:
        if c.state in ("running", "unknown"):
            kept.append(c.id)
            continue
        seen[c.name] = seen.get(c.name, 0) + 1
        (kept if seen[c.name] <= keep_per_container else remove).append(c.id)
    used = {c.sandbox_id for c in state.containers if c.id in kept}
    newest = state.sandboxes[0].id if state.sandboxes else ""
    sandboxes = [s.id for s in state.sandboxes if not s.ready and s.id not in used and s.id != newest]
    return remove, sandboxes
