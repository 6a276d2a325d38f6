"""Pod cgroups under both drivers (cgroupfs, systemd) and both cgroup versions, on fake cgroup
trees in a temporary directory: the names the runtime gets, where the pods' cgroups are found,
the limits written (files, or systemd properties), the stats read back, and the driver check."""

from __future__ import annotations

import json

import pytest

from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import cgroup_driver, cgroup_limits, cgroups, systemd_units
from pykubelet.server import cgroup_stats

UID = "0c1d2e3f-aaaa-bbbb-cccc-123456789abc"
ESCAPED = UID.replace("-", "_")
LIMITED = api.LinuxContainerResources(cpu_shares=307, cpu_period=100000, cpu_quota=30000,
                                      memory_limit_in_bytes=48 * 2**20)


def v2_tree(tmp_path, controllers="cpuset cpu io memory pids"):
    (tmp_path / "cgroup.controllers").write_text(controllers + "\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    return tmp_path


@pytest.mark.parametrize("qos, cgroupfs, systemd", [
    ("Guaranteed", f"/kubepods/pod{UID}", f"kubepods-pod{ESCAPED}.slice"),
    ("Burstable", f"/kubepods/burstable/pod{UID}", f"kubepods-burstable-pod{ESCAPED}.slice"),
    ("BestEffort", f"/kubepods/besteffort/pod{UID}", f"kubepods-besteffort-pod{ESCAPED}.slice"),
])
def test_the_cgroup_parent_is_a_path_or_a_slice_name_per_qos_tier(qos, cgroupfs, systemd):
    assert cgroups.pod_cgroup_parent(UID, qos, "cgroupfs") == cgroupfs
    assert cgroups.pod_cgroup_parent(UID, qos, "systemd") == systemd


def test_a_slice_lives_under_each_of_its_prefixes():
    assert cgroups.relative_path(f"kubepods-burstable-pod{ESCAPED}.slice") == \
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{ESCAPED}.slice"
    assert cgroups.relative_path(f"kubepods-pod{ESCAPED}.slice") == f"kubepods.slice/kubepods-pod{ESCAPED}.slice"
    assert cgroups.relative_path("/kubepods/besteffort/podx") == "kubepods/besteffort/podx"


def test_v1_pod_cgroups_of_either_driver_are_found_in_every_hierarchy(tmp_path):
    for hierarchy in ("cpu", "memory", "systemd"):
        (tmp_path / hierarchy / "kubepods.slice" / "kubepods-burstable.slice" /
         f"kubepods-burstable-pod{ESCAPED}.slice" / "cri-containerd-abc.scope").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / "besteffort" / "podother").mkdir(parents=True)
    found = cgroups.pod_cgroup_dirs(UID, str(tmp_path))
    assert sorted(found) == [str(tmp_path / h / "kubepods.slice" / "kubepods-burstable.slice" /
                                 f"kubepods-burstable-pod{ESCAPED}.slice") for h in ("cpu", "memory", "systemd")]
    assert set(cgroups.pod_cgroups(str(tmp_path))) == {UID, "other"}
    assert cgroups.pod_cgroup_relative(UID, str(tmp_path)) == \
        f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{ESCAPED}.slice"


def test_v2_has_one_tree_and_a_removed_pod_leaves_no_directory(tmp_path):
    root = v2_tree(tmp_path)
    pod = root / "kubepods.slice" / f"kubepods-pod{ESCAPED}.slice"
    (pod / "cri-containerd-abc.scope").mkdir(parents=True)
    (root / "kubepods" / "burstable" / "podold").mkdir(parents=True)  # a cgroupfs leftover
    assert cgroups.hierarchies(str(root)) == [str(root)]
    assert cgroups.pod_cgroup_dirs(UID, str(root)) == [str(pod)]
    assert set(cgroups.pod_cgroups(str(root))) == {UID, "old"}
    # no systemd runs this fake tree: the directories go with rmdir, the pod's own last
    cgroups.remove_pod_cgroups(UID, str(root))
    assert not pod.exists() and (root / "kubepods.slice").is_dir()


def test_orphans_are_found_in_the_systemd_layout(tmp_path):
    root = v2_tree(tmp_path)
    (root / "kubepods.slice" / "kubepods-besteffort.slice" / "kubepods-besteffort-podgone.slice").mkdir(parents=True)
    assert cgroups.orphaned_pod_cgroups(set(), 0, root=str(root)) == ["gone"]
    assert cgroups.orphaned_pod_cgroups({"gone"}, 0, root=str(root)) == []


def test_a_cgroup_root_goes_in_front_of_either_drivers_names():
    kubepods = cgroups.kubepods_under("/pkl-a/node")
    assert cgroups.pod_cgroup_parent(UID, "Burstable", "cgroupfs", kubepods) == \
        f"/pkl-a/node/kubepods/burstable/pod{UID}"
    parent = cgroups.pod_cgroup_parent(UID, "Burstable", "systemd", kubepods)
    assert parent == f"pkl_a-node-kubepods-burstable-pod{ESCAPED}.slice"
    assert cgroups.relative_path(parent) == (
        f"pkl_a.slice/pkl_a-node.slice/pkl_a-node-kubepods.slice/pkl_a-node-kubepods-burstable.slice/{parent}")
    assert cgroups.pod_cgroup_parent(UID, "Guaranteed", "systemd", cgroups.kubepods_under("/")) == \
        f"kubepods-pod{ESCAPED}.slice"


@pytest.mark.parametrize("unified", [True, False])
def test_under_a_cgroup_root_only_that_roots_pods_are_found_orphaned_and_removed(tmp_path, unified):
    root = v2_tree(tmp_path) if unified else tmp_path
    hierarchy = root if unified else root / "memory"
    kubepods = cgroups.kubepods_under("/pkl-a")
    mine = hierarchy / "pkl_a.slice" / "pkl_a-kubepods.slice" / "pkl_a-kubepods-besteffort.slice" / \
        f"pkl_a-kubepods-besteffort-pod{ESCAPED}.slice"
    (mine / "cri-containerd-abc.scope").mkdir(parents=True)
    (hierarchy / "pkl-a" / "kubepods" / "burstable" / "podcgroupfs").mkdir(parents=True)
    (hierarchy / "kubepods.slice" / "kubepods-podothernode.slice").mkdir(parents=True)  # another node's
    assert cgroups.pod_cgroup_dirs(UID, str(root), kubepods) == [str(mine)]
    assert cgroups.pod_cgroup_relative(UID, str(root), kubepods) == str(mine.relative_to(hierarchy))
    assert cgroup_stats.pod_cgroup(UID, str(root), kubepods) == str(mine.relative_to(hierarchy))
    assert cgroups.pod_cgroup_dirs(UID, str(root)) == []
    assert sorted(cgroups.orphaned_pod_cgroups(set(), 0, root=str(root), kubepods=kubepods)) == \
        sorted([UID, "cgroupfs"])
    cgroups.remove_pod_cgroups(UID, str(root), kubepods)  # no systemd runs this fake tree: rmdir
    assert not mine.exists() and (hierarchy / "kubepods.slice" / "kubepods-podothernode.slice").is_dir()


def test_cgroupfs_on_v1_writes_shares_quota_and_limit(tmp_path):
    cgroups.ensure_pod_cgroup("/kubepods/podu", LIMITED, str(tmp_path))
    cpu, memory = tmp_path / "cpu" / "kubepods" / "podu", tmp_path / "memory" / "kubepods" / "podu"
    assert (cpu / "cpu.shares").read_text() == "307"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "30000"
    assert (memory / "memory.limit_in_bytes").read_text() == str(48 * 2**20)


def test_cgroupfs_on_v2_enables_the_controllers_down_the_path_and_writes_weight_max_and_memory(tmp_path):
    root = v2_tree(tmp_path)
    # the kernel lists in each child what its parent handed on; the fake tree does it by hand
    for level in ("kubepods", "kubepods/burstable"):
        (root / level).mkdir(parents=True)
        (root / level / "cgroup.controllers").write_text("cpu memory pids")
        (root / level / "cgroup.subtree_control").write_text("")
    cgroups.ensure_pod_cgroup("/kubepods/burstable/podu", LIMITED, str(root))
    pod = root / "kubepods" / "burstable" / "podu"
    assert (pod / "cpu.weight").read_text() == str(cgroup_limits.shares_to_weight(307)) == "12"
    assert (pod / "cpu.max").read_text() == "30000 100000"
    assert (pod / "memory.max").read_text() == str(48 * 2**20)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"  # cpuset, io: not ours
    assert (root / "kubepods" / "burstable" / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    cgroups.ensure_pod_cgroup("/kubepods/besteffort/podv", api.LinuxContainerResources(cpu_shares=2), str(root))
    besteffort = root / "kubepods" / "besteffort" / "podv"
    assert (besteffort / "cpu.max").read_text() == "max 100000"
    assert (besteffort / "memory.max").read_text() == "max"
    assert (besteffort / "cpu.weight").read_text() == "1"


@pytest.mark.parametrize("shares, weight", [(2, 1), (1024, 39), (262144, 10000), (1, 1), (10**6, 10000)])
def test_shares_map_onto_weights_as_runc_maps_them(shares, weight):
    assert cgroup_limits.shares_to_weight(shares) == weight


def test_a_pod_slice_gets_its_limits_as_systemd_properties_in_each_versions_names():
    v2 = dict(cgroup_limits.slice_properties(LIMITED, unified=True))
    assert v2["CPUWeight"] == ("t", 12) and v2["MemoryMax"] == ("t", 48 * 2**20)
    assert v2["CPUQuotaPerSecUSec"] == ("t", 300_000) and v2["CPUQuotaPeriodUSec"] == ("t", 100_000)
    assert v2["DefaultDependencies"] == ("b", False) and v2["MemoryAccounting"] == ("b", True)
    v1 = dict(cgroup_limits.slice_properties(LIMITED, unified=False))
    assert v1["CPUShares"] == ("t", 307) and v1["MemoryLimit"] == ("t", 48 * 2**20) and "CPUWeight" not in v1
    # systemd counts quota in 1% of a CPU: 1 ms per 100 ms period is 10 ms/s, 1.5 ms rounds up to 20 ms/s
    small = api.LinuxContainerResources(cpu_shares=2, cpu_period=100000, cpu_quota=1500)
    assert dict(cgroup_limits.slice_properties(small, True))["CPUQuotaPerSecUSec"] == ("t", 20_000)
    unlimited = dict(cgroup_limits.slice_properties(api.LinuxContainerResources(cpu_shares=2), True))
    assert "MemoryMax" not in unlimited and "CPUQuotaPerSecUSec" not in unlimited


def test_a_systemd_parent_is_made_by_systemd_and_waited_for(tmp_path, monkeypatch):
    root = v2_tree(tmp_path)
    asked = []

    def start_slice(name, properties):  # systemd makes the cgroup a moment after it answers
        asked.append((name, dict(properties)))
        (root / cgroups.relative_path(name)).mkdir(parents=True)
    monkeypatch.setattr(systemd_units, "start_slice", start_slice)
    parent = cgroups.pod_cgroup_parent(UID, "Burstable", "systemd")
    cgroups.ensure_pod_cgroup(parent, LIMITED, str(root))
    assert asked == [(parent, dict(cgroup_limits.slice_properties(LIMITED, True)))]
    assert cgroups.pod_cgroup_dirs(UID, str(root))

    monkeypatch.setattr(systemd_units, "start_slice", lambda name, properties: None)
    monkeypatch.setattr(systemd_units, "JOB_SECONDS", 0.1)
    with pytest.raises(OSError, match="did not appear"):
        cgroups.ensure_pod_cgroup(cgroups.pod_cgroup_parent("other", "Burstable", "systemd"), LIMITED, str(root))


def test_v2_stats_read_cpu_stat_memory_current_and_memory_stat(tmp_path):
    root = v2_tree(tmp_path)
    pod = root / "kubepods.slice" / "kubepods-burstable.slice" / f"kubepods-burstable-pod{ESCAPED}.slice"
    pod.mkdir(parents=True)
    (pod / "cpu.stat").write_text("usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    (pod / "memory.current").write_text("10000\n")
    (pod / "memory.stat").write_text("anon 6000\nfile 4000\ninactive_file 3000\npgfault 7\npgmajfault 1\n")
    relative = cgroup_stats.pod_cgroup(UID, str(root))
    usage = cgroup_stats.cgroup_usage(relative, str(root))
    assert usage == cgroup_stats.CgroupUsage(cpu_ns=2_500_000, memory_usage=10000, working_set=7000, rss=6000,
                                             page_faults=7, major_page_faults=1)
    (root / "cpu.stat").write_text("usage_usec 9000\n")  # the root: memory from /proc/meminfo
    node = cgroup_stats.cgroup_usage("", str(root))
    assert node is not None and node.cpu_ns == 9_000_000 and node.memory_usage > 0


CONTAINERD_16_INFO = {"config": json.dumps({"containerd": {"defaultRuntimeName": "runc", "runtimes": {
    "runc": {"runtimeType": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}}}, "systemdCgroup": False})}


def test_the_runtimes_driver_comes_from_runtime_config_else_its_reported_configuration():
    assert cgroup_driver.runtime_driver(api.CGROUPFS, CONTAINERD_16_INFO)[0] == "cgroupfs"
    assert cgroup_driver.runtime_driver(None, CONTAINERD_16_INFO)[0] == "systemd"
    no_options = {"config": json.dumps({"containerd": {"defaultRuntimeName": "runc", "runtimes": {
        "runc": {"runtimeType": "io.containerd.runc.v2", "options": None}}}})}
    assert cgroup_driver.runtime_driver(None, no_options)[0] == "cgroupfs"  # runc's default
    assert cgroup_driver.runtime_driver(None, {}) == (None, "")
    assert cgroup_driver.runtime_driver(None, {"config": "not json"}) == (None, "")


def test_a_mismatch_is_one_error_naming_both_sides_and_the_fix():
    problem = cgroup_driver.mismatch("cgroupfs", "systemd", "the runtime's RuntimeConfig", systemd_running=True)
    assert problem is not None
    assert "'cgroupfs'" in problem and "'systemd'" in problem and "SystemdCgroup = false" in problem
    assert cgroup_driver.mismatch("systemd", "systemd", "x", systemd_running=True) is None
    assert cgroup_driver.mismatch("cgroupfs", None, "", systemd_running=False) is None
    no_systemd = cgroup_driver.mismatch("systemd", "systemd", "x", systemd_running=False)
    assert no_systemd is not None and "not the init system" in no_systemd


def test_a_slice_that_exists_already_gets_the_properties_systemd_lets_one_change(monkeypatch):
    calls = []

    def call(method, signature, body):
        calls.append((method, body))
        if method == "StartTransientUnit":
            raise systemd_units.SystemdError("systemd refused StartTransientUnit: org.freedesktop.systemd1.UnitExists")
        return ()
    monkeypatch.setattr(systemd_units, "_call", call)
    properties = cgroup_limits.slice_properties(LIMITED, unified=True)
    systemd_units.start_slice("kubepods-podx.slice", properties)
    assert [c[0] for c in calls] == ["StartTransientUnit", "SetUnitProperties", "StartUnit"]
    name, runtime, changed = calls[1][1]
    assert (name, runtime) == ("kubepods-podx.slice", True)
    assert {p[0] for p in changed} == {p[0] for p in properties} - {"Description", "DefaultDependencies"}


def test_stopping_a_slice_systemd_does_not_know_is_not_an_error(monkeypatch):
    def call(method, signature, body):
        raise systemd_units.SystemdError("systemd refused StopUnit: org.freedesktop.systemd1.NoSuchUnit: x")
    monkeypatch.setattr(systemd_units, "_call", call)
    systemd_units.stop_unit("kubepods-podx.slice")
