"""`pykubelet proxy`: kube-proxy's job on the node, as a command of its own.

It watches Services and EndpointSlices, picks each Service port's endpoints the way kube-proxy
does, and programs the node's netfilter so that a Service's virtual IP (and its NodePorts) lead
to those endpoints: with iptables (the default mode), nftables or IPVS. The parts, each with one job:

    config.py        KubeProxyConfiguration file and kube-proxy's flags -> ProxySettings (config_values.py: parsers)
    model.py         a Service port and an endpoint, as the rules see them
    inputs.py        Service / EndpointSlice objects -> model (kube-proxy's filters), cached by version
    selection.py     which endpoints serve cluster and local traffic (ready, else serving+terminating)
    names.py         chain names (kube-proxy's hashes)
    iptables_rules.py, iptables.py   the iptables mode: rule text, and one iptables-restore per sync
    nftables_rules.py, nftables.py   the nftables mode: one table, one `nft -f` transaction per sync
    ipvs_state.py, ipvs_rules.py, ipvs_diff.py   the IPVS mode's desired state, ipsets and rules, sync diff
    ipvs_kernel.py, ipvs_ipsets.py, ipvs.py      ... and its netlink side (IPVS, kube-ipvs0, ipsets), the backend
    proxier.py       what one sync is: inputs -> backend, full or partial, metrics, health
    conntrack.py     stale UDP flows cleared after a UDP Service's endpoints change
    runner.py        coalesced syncs: minSyncPeriod apart, at least every syncPeriod, retries
    health.py        /healthz and /livez; /metrics (metrics.py, kube-proxy's metric names)
    server.py        the wiring: client, watches, the node's identity, the sync loop; --cleanup
    commands.py      running iptables-save/-restore and nft: text in, text out, a deadline
    rbac.yaml        its identity's grant: system:node-proxier for a kube-proxy ServiceAccount

It is IPv4 only, like the rest of pykubelet's pod network.
"""
