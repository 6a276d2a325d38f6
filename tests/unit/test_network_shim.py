"""The CNI shim (cni/pykubelet-cni, run as containerd runs it) and the agent's socket end."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys

import pytest

from pykubelet.cni.errors import CNIError
from pykubelet.network.shim_server import BadRequest, ShimServer, parse_cni_args, parse_request

SHIM = pathlib.Path(__file__).resolve().parents[2] / "cni" / "pykubelet-cni"
RESULT = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
          "ips": [{"address": "10.88.0.5/16", "gateway": "10.88.0.1", "interface": 0}]}
ENV = {"CNI_CONTAINERID": "abc123", "CNI_NETNS": "/var/run/netns/cni-1", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin",
       "CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc123"}


async def run_shim(command: str, socket_path: str, env: dict[str, str] | None = None,
                   runtime_config: dict | None = None) -> tuple[int, dict]:
    config = {"cniVersion": "1.0.0", "name": "pykubelet", "type": "pykubelet-cni", "socket": socket_path}
    if runtime_config is not None:
        config["runtimeConfig"] = runtime_config
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SHIM), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **(env if env is not None else ENV), "CNI_COMMAND": command})
    out, _ = await proc.communicate(json.dumps(config).encode())
    return proc.returncode, json.loads(out) if out.strip() else {}


@pytest.fixture
async def served(tmp_path):
    """A ShimServer on a temp socket; calls[] records what reached the agent's handler."""
    calls = []

    async def handle(command, attachment):
        calls.append((command, attachment))
        if attachment.container_id == "broken":
            raise CNIError("bridge", command, 11, "bridge busy", "try later")
        if attachment.container_id == "crash":
            raise RuntimeError("disk on fire")
        return RESULT if command == "ADD" else None

    server = ShimServer(str(tmp_path / "cni.sock"), handle)
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.ready.wait(), 5)
    yield server.path, calls
    task.cancel()


async def test_add_goes_to_the_agent_and_its_result_comes_back_to_containerd(served):
    path, calls = served
    code, out = await run_shim("ADD", path, runtime_config={"portMappings": [{"hostPort": 80, "containerPort": 8080,
                                                                               "protocol": "tcp"}]})
    assert (code, out) == (0, RESULT)
    ((command, att),) = calls
    assert command == "ADD" and att.container_id == "abc123" and att.netns == "/var/run/netns/cni-1"
    assert dict(att.args)["K8S_POD_NAME"] == "web"
    assert att.capability_args["portMappings"][0]["hostPort"] == 80


async def test_plugin_errors_reach_containerd_as_cni_error_objects(served):
    path, _ = served
    code, out = await run_shim("ADD", path, env={**ENV, "CNI_CONTAINERID": "broken"})
    assert code == 1 and out == {"cniVersion": "1.0.0", "code": 11, "msg": "bridge busy", "details": "try later"}
    code, out = await run_shim("ADD", path, env={**ENV, "CNI_CONTAINERID": "crash"})
    assert code == 1 and out["code"] == 999 and "disk on fire" in out["msg"]


async def test_del_without_a_netns_is_passed_on(served):
    path, calls = served
    code, out = await run_shim("DEL", path, env={**ENV, "CNI_NETNS": ""})
    assert (code, out) == (0, {})
    assert calls[0][0] == "DEL" and calls[0][1].netns == ""


async def test_agent_down_add_says_try_again_later_and_del_succeeds(tmp_path):
    missing = str(tmp_path / "nobody.sock")
    code, out = await run_shim("ADD", missing)
    assert code == 1 and out["code"] == 11
    assert "pykubelet agent is not reachable" in out["msg"] and missing in out["details"]
    assert (await run_shim("DEL", missing))[0] == 0


async def test_version_needs_no_agent(tmp_path):
    code, out = await run_shim("VERSION", str(tmp_path / "nobody.sock"))
    assert code == 0 and "1.0.0" in out["supportedVersions"]


def test_cni_args_are_split_into_pairs():
    assert parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=web;;X=a=b") == (
        ("IgnoreUnknown", "1"), ("K8S_POD_NAME", "web"), ("X", "a=b"))
    with pytest.raises(BadRequest, match="not KEY=VALUE"):
        parse_cni_args("oops")


@pytest.mark.parametrize("env, message", [
    ({**ENV, "CNI_CONTAINERID": ""}, "CNI_CONTAINERID is required"),
    ({**ENV, "CNI_NETNS": ""}, "CNI_NETNS is required for ADD"),
])
def test_requests_missing_what_the_spec_requires_are_refused(env, message):
    with pytest.raises(BadRequest, match=message) as caught:
        parse_request({"command": "ADD", "env": env, "config": {}})
    assert caught.value.code == 4


def test_only_add_del_check_are_handed_over():
    with pytest.raises(BadRequest, match="GC"):
        parse_request({"command": "GC", "env": ENV, "config": {}})
