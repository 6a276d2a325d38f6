"""kubectl debug --target on the fake runtime: the debugger is created in the PID namespace of
the target's running instance; a target that has no instance yet is a config error until it has."""

from __future__ import annotations

import pytest

from pykubelet.cri.v1 import api_pb2 as api
from tests.unit.core.harness import pod, until

pytestmark = pytest.mark.looptime

DEBUGGER = {"name": "debugger", "image": "busybox:1.36", "stdin": True, "tty": True, "targetContainerName": "app"}


def record_configs(node, monkeypatch) -> dict[str, api.ContainerConfig]:
    """Container name -> the config it was last created with."""
    configs: dict[str, api.ContainerConfig] = {}
    create = node.runtime.create_container

    async def recording(sandbox_id, config, sandbox_config):
        configs[config.metadata.name] = config
        return await create(sandbox_id, config, sandbox_config)
    monkeypatch.setattr(node.runtime, "create_container", recording)
    return configs


def debugger_status(node) -> dict:
    return (node.status().get("ephemeralContainerStatuses") or [{}])[0]


async def test_a_targeted_debugger_shares_the_pid_namespace_of_the_targets_running_instance(node, monkeypatch):
    configs = record_configs(node, monkeypatch)
    node.dispatcher.set_pods([pod()])
    await until(lambda: node.status().get("phase") == "Running")
    (app,) = node.runtime.running("app")
    node.dispatcher.set_pods([pod(ephemeralContainers=[DEBUGGER])])
    await until(lambda: node.runtime.running("debugger"), what="the debugger running")
    namespaces = configs["debugger"].linux.security_context.namespace_options
    assert (namespaces.pid, namespaces.target_id) == (api.TARGET, app.id)
    own = configs["app"].linux.security_context.namespace_options
    assert (own.pid, own.target_id) == (api.CONTAINER, "")
    assert len(node.runtime.started("app")) == 1  # the target was not restarted


async def test_a_target_never_created_keeps_the_debugger_waiting_with_the_kubelets_reason(node, monkeypatch):
    configs = record_configs(node, monkeypatch)
    node.runtime.fail("PullImage", times=1000, details='pull access denied: "nosuch:1"')
    containers = [{"name": "app", "image": "nosuch:1"}, {"name": "side", "image": "busybox:1.36"}]
    node.dispatcher.set_pods([pod(containers=containers)])
    await until(lambda: node.runtime.running("side"), what="the other container running")
    node.dispatcher.set_pods([pod(containers=containers, ephemeralContainers=[DEBUGGER])])
    await until(lambda: debugger_status(node).get("state", {}).get("waiting", {}).get("reason")
                == "CreateContainerConfigError", what="the debugger refused")
    assert debugger_status(node)["state"]["waiting"]["message"] == "unable to find target container app"
    assert "debugger" not in configs and not node.runtime.named("debugger")
