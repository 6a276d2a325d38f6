"""Ready reports the network: a node whose runtime has no network config is NotReady with the
kubelet's NetworkPluginNotReady wording, and Ready once the network is configured."""

from __future__ import annotations

from tests.helpers import wait_for
from tests.multinode.conftest import start_node, stop_node


async def test_node_is_not_ready_until_its_network_is_configured(cluster, lan, tmp_path):
    # runtime mode without a config of its own: a kind/kubeadm node before its CNI DaemonSet runs
    node = start_node("pkl-r9", "10.250.0.29", "runtime", tmp_path / "r9", write_config=False)
    try:
        cond = await wait_for(lambda: (c := node.ready()).get("status") == "False" and c, 60,
                              "the node NotReady for its network", describe=node.describe)
        assert cond["reason"] == "KubeletNotReady"
        assert "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady" in \
            cond["message"], cond
        # What a CNI DaemonSet does on such a node, here done by the agent: write the network config.
        node.agent.stop()
        node.agent.start("--cni-write-config", "true")
        await wait_for(lambda: node.ready().get("status") == "True", 60, "the node Ready once its network is",
                       describe=node.describe)
    finally:
        stop_node(node)
