"""The leak accounting counts a Service proxy's chains and table as left behind."""

from __future__ import annotations

from pykubelet.tools.leak_checks import leaked_proxy_rules

SAVED = """*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
COMMIT
*nat
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:PYKUBELET-POSTROUTING - [0:0]
-A KUBE-SERVICES -j KUBE-SVC-XPGD46QRK7WJZT7O
COMMIT
"""


def test_proxy_chains_and_table_leak_and_the_kubelets_and_agents_do_not():
    leaks = leaked_proxy_rules(SAVED, "table ip nat\ntable ip kube-proxy\ntable ip filter\n")
    assert [leak.what for leak in leaks] == ["iptables chain KUBE-SERVICES", "iptables chain KUBE-SEP-SXIVWICOYRO3J4NJ",
                                             "nftables table ip kube-proxy"]
    assert all(leak.kind == "proxy-rule" for leak in leaks)
    assert leaked_proxy_rules("*nat\n:PYKUBELET-POSTROUTING - [0:0]\nCOMMIT\n", "") == []
