"""Docker's runtime for kind (tests/bed/runc_bounded.py): a privileged container, or a privileged
`docker exec`, gets every capability but those the machine's bounding set lacks, and runc is then
run with exactly the arguments it was given."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from tests.bed import runc_bounded

ALL = 0x1FFFFFFFFFF  # the 41 capabilities up to CAP_CHECKPOINT_RESTORE
WITHOUT_SYS_RESOURCE = ALL & ~(1 << 24)


def status(bounding: int) -> str:
    return f"Name:\tx\nCapInh:\t0000000000000000\nCapBnd:\t{bounding:016x}\nCapAmb:\t0000000000000000\n"


def test_the_capabilities_missing_from_the_bounding_set():
    assert runc_bounded.missing_capabilities(status(WITHOUT_SYS_RESOURCE)) == {"CAP_SYS_RESOURCE"}
    assert runc_bounded.missing_capabilities(status(ALL)) == set()


def test_which_file_holds_the_process_for_each_command():
    global_options = ["--root", "/run/docker/runtime-runc/moby", "--log", "/b/log.json", "--log-format", "json"]
    assert runc_bounded.command_and_file([*global_options, "create", "--bundle", "/b", "--pid-file", "/b/pid", "c1"]) \
        == ("create", runc_bounded.Path("/b/config.json"))
    assert runc_bounded.command_and_file([*global_options, "exec", "--process", "/tmp/p.json", "--detach", "c1"]) \
        == ("exec", runc_bounded.Path("/tmp/p.json"))
    assert runc_bounded.command_and_file(["--systemd-cgroup", "run", "c1"]) == ("run", runc_bounded.Path("config.json"))
    assert runc_bounded.command_and_file([*global_options, "delete", "c1"]) == ("delete", None)


def fake_runc(tmp_path):
    """A runc that records its arguments and the capabilities it was handed."""
    script = tmp_path / "runc"
    script.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$RECORD\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def run_wrapper(tmp_path, *args):
    record = tmp_path / "args"
    env = {**os.environ, "PYKUBELET_REAL_RUNC": str(fake_runc(tmp_path)), "RECORD": str(record)}
    subprocess.run([sys.executable, runc_bounded.__file__, *args], env=env, check=True)
    return record.read_text().splitlines()


def privileged_caps() -> dict:
    return {kind: list(runc_bounded.CAPABILITIES) for kind in ("bounding", "effective", "permitted")}


def test_a_privileged_container_gets_what_this_process_may_grant(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {
        "args": ["/sbin/init"], "capabilities": privileged_caps()}}))
    args = ["--root", "/run/r", "create", "--bundle", str(bundle), "c1"]
    assert run_wrapper(tmp_path, *args) == args
    spec = json.loads((bundle / "config.json").read_text())
    missing = runc_bounded.missing_capabilities(open("/proc/self/status").read())
    for names in spec["process"]["capabilities"].values():
        assert set(names) == set(runc_bounded.CAPABILITIES) - missing
    assert spec["process"]["args"] == ["/sbin/init"] and spec["ociVersion"] == "1.0.2"


def test_a_privileged_exec_gets_the_same(tmp_path):
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["kubeadm", "init"], "capabilities": privileged_caps()}))
    run_wrapper(tmp_path, "exec", "--process", str(process), "--detach", "c1")
    missing = runc_bounded.missing_capabilities(open("/proc/self/status").read())
    assert set(json.loads(process.read_text())["capabilities"]["effective"]) == set(runc_bounded.CAPABILITIES) - missing
