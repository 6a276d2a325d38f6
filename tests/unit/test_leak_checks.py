"""`pykubelet leaks`: what a pod held is a leak once no live sandbox or pod UID owns it."""

from __future__ import annotations

from pykubelet.tools.leak_checks import (Alive, leaked_attachments, leaked_cgroups, leaked_ips, leaked_log_dirs,
                                         leaked_pod_dirs, leaked_rules)
from pykubelet.tools.leaks import report
from pykubelet.tools.shim_checks import Shim, orphan_shims, parse_shim, running_shims

LIVE_SANDBOX = "a" * 64
GONE_SANDBOX = "b" * 64
LIVE_UID = "11111111-1111-1111-1111-111111111111"
GONE_UID = "22222222-2222-2222-2222-222222222222"
ALIVE = Alive(sandbox_ids={LIVE_SANDBOX}, pod_uids={LIVE_UID})


def test_ip_reservations_and_attachment_records_of_gone_sandboxes_leak(tmp_path):
    ipam = tmp_path / "network" / "ipam" / "pykubelet"
    ipam.mkdir(parents=True)
    (ipam / "10.244.1.5").write_text(f"{LIVE_SANDBOX}\r\neth0")
    (ipam / "10.244.1.6").write_text(f"{GONE_SANDBOX}\r\neth0")
    (ipam / "last_reserved_ip.0").write_text("10.244.1.6")  # host-local's bookkeeping, not a reservation
    attachments = tmp_path / "network" / "attachments"
    attachments.mkdir()
    (attachments / f"{LIVE_SANDBOX}.json").write_text("{}")
    (attachments / f"{GONE_SANDBOX}.json").write_text("{}")

    assert [(leak.what, leak.owner) for leak in leaked_ips(ALIVE, str(tmp_path))] == [
        ("10.244.1.6 (pykubelet)", GONE_SANDBOX)]
    assert [leak.owner for leak in leaked_attachments(ALIVE, str(tmp_path))] == [GONE_SANDBOX]


def test_pod_and_log_directories_of_gone_pods_leak(tmp_path):
    for uid in (LIVE_UID, GONE_UID):
        (tmp_path / "root" / "pods" / uid).mkdir(parents=True)
        (tmp_path / "logs" / f"default_web_{uid}").mkdir(parents=True)
    assert [leak.owner for leak in leaked_pod_dirs(ALIVE, str(tmp_path / "root"))] == [GONE_UID]
    assert [leak.owner for leak in leaked_log_dirs(ALIVE, str(tmp_path / "logs"))] == [GONE_UID]


def test_pod_cgroups_of_gone_pods_leak_in_both_drivers_layouts(tmp_path):
    (tmp_path / "memory" / "kubepods" / "burstable" / f"pod{LIVE_UID}" / "c1").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / "besteffort" / f"pod{GONE_UID}" / "c1").mkdir(parents=True)
    systemd_gone = f"kubepods-burstable-pod{GONE_UID.replace('-', '_')}.slice"
    (tmp_path / "cpu" / "kubepods.slice" / "kubepods-burstable.slice" / systemd_gone).mkdir(parents=True)
    (tmp_path / "cpu" / "system.slice").mkdir(parents=True)

    leaks = leaked_cgroups(ALIVE, str(tmp_path))

    assert sorted(leak.what.removeprefix(str(tmp_path)) for leak in leaks) == [
        f"/cpu/kubepods.slice/kubepods-burstable.slice/{systemd_gone}",
        f"/memory/kubepods/besteffort/pod{GONE_UID}"]
    assert {leak.owner for leak in leaks} == {GONE_UID}


def test_portmap_rules_of_gone_sandboxes_leak():
    dump = "\n".join([
        "*nat",
        ":CNI-HOSTPORT-DNAT - [0:0]",
        f'-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"pykubelet\\" id: \\"{LIVE_SANDBOX}\\"" '
        "-m multiport --dports 80 -j CNI-DN-1",
        f'-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"pykubelet\\" id: \\"{GONE_SANDBOX}\\"" '
        "-m multiport --dports 18080 -j CNI-DN-2",
        "-A POSTROUTING -j PYKUBELET-POSTROUTING",
        "COMMIT"])
    (leak,) = leaked_rules(ALIVE, dump)
    assert leak.owner == GONE_SANDBOX and "--dports 18080" in leak.what


def test_the_report_says_each_leak_and_each_pod_cgroup_once(tmp_path):
    (tmp_path / "cpu" / "kubepods" / f"pod{GONE_UID}").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / f"pod{GONE_UID}").mkdir(parents=True)
    text = report(leaked_cgroups(ALIVE, str(tmp_path)))
    (line,) = [line for line in text.splitlines() if GONE_UID in line]
    assert "in 2 hierarchies" in line
    assert report([]).startswith("no leaks")


def test_pod_cgroups_under_a_cgroup_root_are_found_only_when_that_root_is_named(tmp_path):
    (tmp_path / "memory" / "pkl-a" / "kubepods" / f"pod{GONE_UID}").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods" / f"pod{LIVE_UID}").mkdir(parents=True)

    assert leaked_cgroups(ALIVE, str(tmp_path)) == []
    (leak,) = leaked_cgroups(ALIVE, str(tmp_path), cgroup_root="/pkl-a")
    assert leak.what == str(tmp_path / "memory" / "pkl-a" / "kubepods" / f"pod{GONE_UID}")


def shim_argv(sandbox_id: str, socket: str, namespace: str = "k8s.io", *extra: str) -> list[str]:
    """A shim daemon's /proc cmdline, split at its NULs, as containerd starts it."""
    return ["/usr/bin/containerd-shim-runc-v2", "-namespace", namespace, "-id", sandbox_id, "-address", socket,
            *extra, ""]


def test_shim_daemons_are_told_from_other_programs_and_from_containerds_short_lived_runs_of_the_shim():
    assert parse_shim(7, shim_argv(LIVE_SANDBOX, "/run/containerd/containerd.sock")) == Shim(
        7, LIVE_SANDBOX, "/run/containerd/containerd.sock", "k8s.io")
    # containerd 2.x in debug: a switch after the address; Go's "-flag=value" spelling too
    assert parse_shim(8, shim_argv(LIVE_SANDBOX, "/run/c.sock", "k8s.io", "-debug")).id == LIVE_SANDBOX
    assert parse_shim(9, ["/opt/bin/containerd-shim-runc-v2", f"-id={LIVE_SANDBOX}", "--address=/run/c.sock",
                          "-namespace=default"]) == Shim(9, LIVE_SANDBOX, "/run/c.sock", "default")
    start = ["containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/run/c.sock", "-publish-binary",
             "/usr/bin/containerd", "-id", LIVE_SANDBOX, "-debug", "start", ""]
    assert parse_shim(10, start) is None  # it ends once it has forked the daemon
    assert parse_shim(11, ["/usr/bin/containerd", "-address", "/run/c.sock", "-id", LIVE_SANDBOX]) is None
    assert parse_shim(12, ["containerd-shim-runc-v2", "-namespace", "k8s.io"]) is None  # serves nothing named


def test_running_shims_are_read_from_proc_and_those_inside_a_container_are_not_ours(tmp_path):
    proc, machine, container = tmp_path / "proc", tmp_path / "machine", tmp_path / "kind-node"
    machine.mkdir()
    container.mkdir()
    processes = {"41": (shim_argv(GONE_SANDBOX, "/run/c.sock"), machine), "42": (["sleep", "1", ""], machine),
                 "44": (shim_argv(LIVE_SANDBOX, "/run/c.sock"), container), "self": ([], machine)}
    for pid, (argv, root) in processes.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes("\0".join(argv).encode())
        (proc / pid / "root").symlink_to(root)
    (proc / "43").mkdir()  # a process that ended while /proc was read: no cmdline

    assert running_shims(str(proc), str(machine)) == [Shim(41, GONE_SANDBOX, "/run/c.sock", "k8s.io")]


def test_a_shim_leaks_when_its_own_containerd_has_no_sandbox_or_container_with_its_id(tmp_path):
    node, other, silent = (str(tmp_path / f"{name}.sock") for name in ("node", "other", "silent"))
    for socket in (node, other, silent):
        open(socket, "w").close()
    container = "c" * 64
    alive = Alive(ids_by_socket={node: {LIVE_SANDBOX, container}, other: {GONE_SANDBOX}})
    shims = [
        Shim(1, LIVE_SANDBOX, node, "k8s.io"),  # serves a sandbox of its containerd
        Shim(2, container, node, "k8s.io"),  # a container started without a sandbox's shim
        Shim(3, GONE_SANDBOX, node, "k8s.io"),  # the ID is a sandbox of another containerd, not its own
        Shim(4, GONE_SANDBOX, node, "moby"),  # not the CRI plugin's namespace: CRI cannot tell
        Shim(5, "d" * 64, other, "k8s.io"),  # another agent's containerd: not ours to judge while it lives
        Shim(6, "e" * 64, str(tmp_path / "removed.sock"), "k8s.io"),  # its containerd is gone
        Shim(7, "f" * 64, silent, "k8s.io"),  # its containerd is ours but did not answer
    ]

    leaks = orphan_shims(shims, alive, {node, silent})

    assert [(leak.kind, leak.owner) for leak in leaks] == [
        ("shim", GONE_SANDBOX), ("shim", "e" * 64), ("shim", "f" * 64)]
    orphan, gone, silent_one = (leak.what for leak in leaks)
    assert orphan.startswith("pid 3 ") and node in orphan and "no sandbox or container" in orphan
    assert gone.startswith("pid 6 ") and "gone" in gone
    assert silent_one.startswith("pid 7 ") and "does not answer" in silent_one
    (line,) = [line for line in report(leaks[:1]).splitlines() if "pid 3" in line]
    assert line.split()[0] == "shim" and GONE_SANDBOX[:13] in line
