"""The client's exec protocol against tiny fake plugins: chains, errors, timeouts, DEL, GC.

The fake plugin is a script that logs what it received (stdin and CNI_* env) and acts as its
config's "on" section tells it for the current command. The real plugins are exercised in
tests/network/test_cni_client.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from pykubelet.cni import errors
from pykubelet.cni.client import CNI, Attachment
from pykubelet.cni.config import parse_conflist
from pykubelet.cni.result import parse_result
from tests.helpers import wait_for

FAKE_PLUGIN = """#!{python}
import json, os, subprocess, sys, time
command = os.environ["CNI_COMMAND"]
conf = json.load(sys.stdin)
me = os.path.basename(sys.argv[0])
with open(os.environ["FAKE_CNI_LOG"], "a") as log:
    log.write(json.dumps({{"plugin": me, "command": command, "stdin": conf, "pid": os.getpid(), "time": time.time(),
                          "env": {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}}}}) + "\\n")
if command == "VERSION":
    print(json.dumps({{"cniVersion": conf["cniVersion"], "supportedVersions": {supported!r}}}))
    sys.exit(0)
act = conf.get("on", {{}}).get(command, {{}})
if "child" in act:  # like a delegated IPAM plugin still running
    child = subprocess.Popen(["sleep", "30"])
    with open(act["child"], "w") as f:
        f.write(str(child.pid))
time.sleep(act.get("sleep", 0))
sys.stderr.write(act.get("stderr", ""))
if "stdout" in act:
    sys.stdout.write(act["stdout"])
elif command == "ADD" and "exit" not in act:
    result = conf.get("prevResult") or {{
        "cniVersion": conf["cniVersion"],
        "interfaces": [{{"name": os.environ["CNI_IFNAME"], "sandbox": os.environ["CNI_NETNS"]}}],
        "ips": [{{"interface": 0, "address": "10.9.0.2/24", "gateway": "10.9.0.1"}}],
        "dns": {{"search": []}}}}
    result["dns"]["search"].append(me)
    print(json.dumps(result))
sys.exit(act.get("exit", 0))
"""

ATT = Attachment("c0ffee", "/run/netns/fake", "eth0", args=(("K8S_POD_NAME", "web"),),
                 capability_args={"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})


@pytest.fixture
def bin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("FAKE_CNI_LOG", str(tmp_path / "calls.jsonl"))
    for name, supported in [("one", ["0.4.0", "1.0.0"]), ("two", ["0.4.0", "1.0.0", "1.1.0"]),
                            ("three", ["1.0.0", "1.1.0"])]:
        path = directory / name
        path.write_text(FAKE_PLUGIN.format(python=sys.executable, supported=supported))
        path.chmod(0o755)
    return directory


def calls(tmp_path) -> list[dict]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def network(*plugins, **extra):
    return parse_conflist({"cniVersion": "1.0.0", "name": "fakenet", "plugins": list(plugins), **extra})


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_add_runs_the_chain_in_order_each_given_the_previous_result(bin_dir, tmp_path):
    net = network({"type": "one"}, {"type": "two", "capabilities": {"portMappings": True}})
    result = await CNI([str(tmp_path / "nothing"), str(bin_dir)]).add(net, ATT)

    assert result.dns["search"] == ["one", "two"]
    assert str(result.ip_of("eth0").address) == "10.9.0.2/24"
    first, second = calls(tmp_path)
    assert (first["plugin"], second["plugin"]) == ("one", "two")
    assert "prevResult" not in first["stdin"] and "runtimeConfig" not in first["stdin"]
    assert second["stdin"]["prevResult"]["dns"]["search"] == ["one"]
    assert second["stdin"]["runtimeConfig"] == {"portMappings": ATT.capability_args["portMappings"]}
    assert second["stdin"]["name"] == "fakenet" and second["stdin"]["cniVersion"] == "1.0.0"
    assert first["env"] == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c0ffee", "CNI_NETNS": "/run/netns/fake",
                            "CNI_IFNAME": "eth0", "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=web",
                            "CNI_PATH": f"{tmp_path}/nothing:{bin_dir}"}


async def test_an_error_object_becomes_a_cni_error_with_its_code(bin_dir, tmp_path):
    net = network({"type": "one"}, {"type": "two", "on": {"ADD": {
        "exit": 1, "stdout": json.dumps({"cniVersion": "1.0.0", "code": 11, "msg": "busy", "details": "lock held"})}}})
    with pytest.raises(errors.CNIError) as caught:
        await CNI([str(bin_dir)]).add(net, ATT)
    error = caught.value
    assert str(error) == "cni plugin two ADD failed (code 11): busy: lock held"
    assert (error.plugin, error.command, error.code, error.msg, error.details) == ("two", "ADD", 11, "busy", "lock held")
    assert error.code == errors.TRY_AGAIN_LATER  # "try again later": the plugin is busy, not broken


async def test_a_failure_without_an_error_object_reports_stderr(bin_dir):
    net = network({"type": "one", "on": {"ADD": {"exit": 2, "stderr": "panic: boom"}}})
    with pytest.raises(errors.CNIError, match=r"^cni plugin one ADD failed: exited with status 2: panic: boom$"):
        await CNI([str(bin_dir)]).add(net, ATT)


@pytest.mark.parametrize("stdout, message", [
    ("not json", "cni plugin one ADD failed \\(code 6\\): invalid JSON on stdout"),
    (json.dumps({"cniVersion": "1.0.0", "ips": [{"address": "nope"}]}),
     "cni plugin one ADD failed \\(code 6\\): invalid result: ips\\[0\\].address: invalid CIDR 'nope'"),
])
async def test_an_unreadable_result_is_a_decoding_error(bin_dir, stdout, message):
    with pytest.raises(errors.CNIError, match=message):
        await CNI([str(bin_dir)]).add(network({"type": "one", "on": {"ADD": {"stdout": stdout}}}), ATT)


async def test_a_plugin_past_its_timeout_is_killed_with_its_children(bin_dir, tmp_path):
    child_file = tmp_path / "child.pid"
    net = network({"type": "one", "on": {"ADD": {"sleep": 30, "child": str(child_file)}}})
    started = time.monotonic()
    with pytest.raises(errors.PluginTimeout, match=r"^cni plugin one ADD failed: timed out after 1s and was killed$"):
        await CNI([str(bin_dir)], timeout=1).add(net, ATT)
    assert time.monotonic() - started < 10
    assert not alive(calls(tmp_path)[0]["pid"])
    child = int(child_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:  # reparented: its reaper needs a moment
        time.sleep(0.05)
    assert not alive(child), "the plugin's child survived the timeout"


async def test_a_missing_plugin_names_the_type_and_the_dirs(bin_dir):
    with pytest.raises(errors.PluginNotFound,
                       match=rf"^cni plugin nosuch ADD failed: failed to find plugin 'nosuch' in path \['{bin_dir}'\]$"):
        await CNI([str(bin_dir)]).add(network({"type": "one"}, {"type": "nosuch"}), ATT)


async def test_delete_runs_in_reverse_with_the_add_result_and_ignores_not_found(bin_dir, tmp_path):
    net = network({"type": "one"}, {"type": "two", "on": {"DEL": {
        "exit": 1, "stdout": json.dumps({"code": 999, "msg": "link eth0 not found"})}}}, {"type": "three"})
    prev = parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.2/24"}]}, "1.0.0")
    await CNI([str(bin_dir)]).delete(net, ATT, prev)
    recorded = calls(tmp_path)
    assert [c["plugin"] for c in recorded] == ["three", "two", "one"]
    assert all(c["stdin"]["prevResult"] == prev.to_dict() for c in recorded)
    assert all(c["env"]["CNI_COMMAND"] == "DEL" for c in recorded)


async def test_delete_without_a_result_or_netns(bin_dir, tmp_path):
    net = network({"type": "one", "on": {"DEL": {"exit": 1, "stderr": "open /run/netns/x: no such file or directory"}}})
    await CNI([str(bin_dir)]).delete(net, Attachment("c0ffee", ""))
    (call,) = calls(tmp_path)
    assert "prevResult" not in call["stdin"] and call["env"]["CNI_NETNS"] == ""


async def test_delete_reports_real_failures(bin_dir):
    net = network({"type": "one", "on": {"DEL": {"exit": 1, "stdout": json.dumps({"code": 5, "msg": "disk full"})}}})
    with pytest.raises(errors.CNIError, match=r"^cni plugin one DEL failed \(code 5\): disk full$"):
        await CNI([str(bin_dir)]).delete(net, ATT)


async def test_check_runs_in_order_with_the_add_result_unless_disabled(bin_dir, tmp_path):
    prev = parse_result({"cniVersion": "1.0.0", "ips": [{"address": "10.9.0.2/24"}]}, "1.0.0")
    failing = {"type": "two", "on": {"CHECK": {"exit": 1, "stdout": json.dumps({"code": 999, "msg": "eth0 gone"})}}}
    await CNI([str(bin_dir)]).check(network({"type": "one"}, failing, disableCheck=True), ATT, prev)
    assert calls(tmp_path) == []
    with pytest.raises(errors.CNIError, match="^cni plugin two CHECK failed \\(code 999\\): eth0 gone$"):
        await CNI([str(bin_dir)]).check(network({"type": "one"}, failing), ATT, prev)
    assert [(c["plugin"], c["stdin"]["prevResult"]) for c in calls(tmp_path)] == [("one", prev.to_dict()),
                                                                                    ("two", prev.to_dict())]


async def test_version_lists_what_the_plugin_supports(bin_dir):
    assert await CNI([str(bin_dir)]).version("two") == ["0.4.0", "1.0.0", "1.1.0"]


async def test_gc_asks_only_plugins_that_speak_1_1_with_the_valid_attachments(bin_dir, tmp_path):
    cni = CNI([str(bin_dir)])
    net = network({"type": "one"}, {"type": "two"}, {"type": "three"})
    await cni.gc(net, [ATT, Attachment("beef", "/run/netns/b", "net1")])
    gcs = [c for c in calls(tmp_path) if c["command"] == "GC"]
    assert [c["plugin"] for c in gcs] == ["two", "three"]
    assert gcs[0]["stdin"]["cni.dev/valid-attachments"] == [{"containerID": "c0ffee", "ifname": "eth0"},
                                                            {"containerID": "beef", "ifname": "net1"}]
    assert gcs[0]["stdin"]["cniVersion"] == "1.1.0"
    assert gcs[0]["env"] == {"CNI_COMMAND": "GC", "CNI_PATH": str(bin_dir)}


async def test_gc_goes_on_after_a_failure_and_reports_it(bin_dir, tmp_path):
    net = network({"type": "two", "on": {"GC": {"exit": 1, "stdout": json.dumps({"code": 5, "msg": "io"})}}},
                  {"type": "three"})
    with pytest.raises(errors.CNIError, match=r"^cni plugin two GC failed \(code 5\): io$"):
        await CNI([str(bin_dir)]).gc(net, [])
    assert [c["plugin"] for c in calls(tmp_path) if c["command"] == "GC"] == ["two", "three"]


async def test_gc_is_skipped_when_disabled(bin_dir, tmp_path):
    await CNI([str(bin_dir)]).gc(network({"type": "two"}, disableGC=True), [])
    assert calls(tmp_path) == []


async def test_status_reports_an_unavailable_plugin(bin_dir):
    net = network({"type": "one"}, {"type": "three", "on": {"STATUS": {
        "exit": 1, "stdout": json.dumps({"code": 50, "msg": "no addresses left"})}}})
    with pytest.raises(errors.CNIError, match=r"^cni plugin three STATUS failed \(code 50\): no addresses left$"):
        await CNI([str(bin_dir)]).status(net)


def test_the_cni_error_message_reads_well():
    assert str(errors.CNIError("bridge", "ADD", 11, "msg", "details")) == "cni plugin bridge ADD failed (code 11): msg: details"
    assert str(errors.CNIError("bridge", "DEL", 7, "bad config")) == "cni plugin bridge DEL failed (code 7): bad config"


async def test_a_missing_plugin_netns_is_an_error_even_for_del(bin_dir, tmp_path):
    net = network({"type": "one"})
    cni = CNI([str(bin_dir)], plugin_netns=str(tmp_path / "no-such-netns"))
    with pytest.raises(errors.CNIError, match=r"^cni plugin one DEL failed: plugin network namespace .* does not exist$"):
        await cni.delete(net, Attachment("c0ffee", ""))
    assert calls(tmp_path) == []


async def test_del_does_not_take_a_missing_executable_for_a_missing_container(bin_dir):
    net = network({"type": "one", "on": {"DEL": {"exit": 1, "stdout": json.dumps(
        {"code": 999, "msg": 'exec: "iptables": executable file not found in $PATH'})}}})
    with pytest.raises(errors.CNIError, match="executable file not found"):
        await CNI([str(bin_dir)]).delete(net, ATT)


async def test_gc_waits_for_adds_in_flight_and_adds_wait_for_gc(bin_dir, tmp_path):
    cni = CNI([str(bin_dir)])
    net = network({"type": "three", "on": {"ADD": {"sleep": 1}, "GC": {"sleep": 1}}})

    add = asyncio.create_task(cni.add(net, ATT))
    await wait_for(lambda: calls(tmp_path), 10, "the ADD to start")
    await cni.gc(net, [])
    add_done_at = time.time() if add.done() else None
    await add
    gc_call = next(c for c in calls(tmp_path) if c["command"] == "GC")
    assert add_done_at is not None and gc_call["time"] >= calls(tmp_path)[0]["time"] + 1

    gc = asyncio.create_task(cni.gc(net, []))
    await wait_for(lambda: sum(c["command"] == "GC" for c in calls(tmp_path)) == 2, 10, "the second GC to start")
    await cni.add(net, Attachment("beef", "/run/netns/b"))
    assert gc.done()
    await gc
    second_gc = [c for c in calls(tmp_path) if c["command"] == "GC"][1]
    second_add = [c for c in calls(tmp_path) if c["command"] == "ADD"][1]
    assert second_add["time"] >= second_gc["time"] + 1  # the ADD started after the GC's second
