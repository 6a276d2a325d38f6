"""Which pod cgroups housekeeping removes: nobody's, empty, and quiet for a while."""

from __future__ import annotations

import os
import time

from pykubelet.runtime.cgroups import orphaned_pod_cgroups


def make(root, *parts, procs=""):
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    (path / "cgroup.procs").write_text(procs)
    return path


def test_only_unknown_empty_quiet_pod_cgroups_are_orphans(tmp_path):
    for hierarchy in ("cpu", "memory"):
        make(tmp_path, hierarchy, "kubepods", "besteffort", "podgone")
        make(tmp_path, hierarchy, "kubepods", "podknown")
        make(tmp_path, hierarchy, "kubepods", "burstable", "podbusy")
    make(tmp_path, "memory", "kubepods", "burstable", "podbusy", "ctr", procs="4242\n")
    later = time.time() + 60
    assert orphaned_pod_cgroups({"known"}, 10, root=str(tmp_path), clock=lambda: later) == ["gone"]


def test_a_pod_cgroup_made_a_moment_ago_is_left_alone(tmp_path):
    make(tmp_path, "cpu", "kubepods", "besteffort", "podfresh")
    assert orphaned_pod_cgroups(set(), 10, root=str(tmp_path)) == []
    os.utime(tmp_path / "cpu" / "kubepods" / "besteffort" / "podfresh", (0, 0))
    assert orphaned_pod_cgroups(set(), 10, root=str(tmp_path)) == ["fresh"]
