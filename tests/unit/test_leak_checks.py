"""`pykubelet leaks`: what a pod held is a leak once no live sandbox or pod UID owns it."""

from __future__ import annotations

from pykubelet.tools.leak_checks import (Alive, leaked_attachments, leaked_cgroups, leaked_ips, leaked_log_dirs,
                                         leaked_pod_dirs, leaked_rules)
from pykubelet.tools.leaks import report

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
