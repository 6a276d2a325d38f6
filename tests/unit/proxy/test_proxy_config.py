"""KubeProxyConfiguration and kube-proxy's flags: defaults, precedence, errors that name the field."""

from __future__ import annotations

import pytest
import yaml

from pykubelet.config import ServerSettings
from pykubelet.kube.client import KubeClient
from pykubelet.proxy.config import ConfigError, settings_from_args
from pykubelet.server import tls


def parse(argv: list[str]) -> tuple[object, list[str]]:
    warnings: list[str] = []
    return settings_from_args(argv, warnings.append), warnings


def write(tmp_path, doc) -> str:
    path = tmp_path / "kube-proxy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def config(**fields):
    return {"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": "/etc/kp.conf"}, **fields}


def test_defaults_are_kube_proxys():
    s, warnings = parse(["--kubeconfig", "/k", "--hostname-override", "Node-A"])
    assert (s.mode, s.sync_period, s.min_sync_period, s.masquerade_bit) == ("iptables", 30.0, 1.0, 14)
    assert (s.healthz_bind_address, s.metrics_bind_address) == ("0.0.0.0:10256", "127.0.0.1:10249")
    assert s.node_name == "node-a" and s.localhost_nodeports and not s.masquerade_all and warnings == []


def test_the_flags_the_issue_lists():
    s, _ = parse(["--kubeconfig", "/k", "--proxy-mode", "nftables", "--cluster-cidr", "10.244.0.0/16",
                  "--nodeport-addresses", "10.250.0.0/24,192.168.0.0/16", "--masquerade-all",
                  "--metrics-bind-address", "0.0.0.0", "--healthz-bind-address", "127.0.0.1:9999"])
    assert s.mode == "nftables" and s.cluster_cidrs == ["10.244.0.0/16"] and s.masquerade_all
    assert s.nodeport_addresses == ["10.250.0.0/24", "192.168.0.0/16"]
    assert s.metrics_bind_address == "0.0.0.0:10249" and s.healthz_bind_address == "127.0.0.1:9999"


def test_the_file_takes_the_settings_of_its_mode(tmp_path):
    path = write(tmp_path, config(mode="nftables", clusterCIDR="10.244.0.0/16", nodePortAddresses=["primary"],
                                  iptables={"syncPeriod": "5s", "masqueradeAll": True},
                                  nftables={"syncPeriod": "1m", "minSyncPeriod": "250ms", "masqueradeBit": 10}))
    s, warnings = parse(["--config", path])
    assert (s.mode, s.sync_period, s.min_sync_period, s.masquerade_bit) == ("nftables", 60.0, 0.25, 10)
    assert not s.masquerade_all  # iptables.masqueradeAll is the iptables mode's
    assert s.kubeconfig == "/etc/kp.conf" and s.nodeport_addresses == ["primary"] and warnings == []


def test_the_ipvs_mode_reads_its_section_and_the_iptables_masquerade_settings_as_kube_proxy_does(tmp_path):
    path = write(tmp_path, config(mode="ipvs", iptables={"syncPeriod": "5s", "masqueradeAll": True, "masqueradeBit": 0},
                                  nftables={"syncPeriod": "1m", "masqueradeBit": 10},
                                  ipvs={"syncPeriod": "45s", "minSyncPeriod": "2s", "scheduler": "lc",
                                        "strictARP": True, "excludeCIDRs": ["10.250.0.0/16"], "tcpTimeout": "0s"}))
    s, warnings = parse(["--config", path])
    assert (s.mode, s.sync_period, s.min_sync_period, s.masquerade_all, s.masquerade_bit) == ("ipvs", 45.0, 2.0, True, 0)
    assert (s.ipvs_scheduler, s.ipvs_strict_arp, s.ipvs_exclude_cidrs) == ("lc", True, ["10.250.0.0/16"])
    assert warnings == []
    path = write(tmp_path, config(mode="ipvs", ipvs={"tcpTimeout": "900s"}))
    s, warnings = parse(["--config", path])
    assert s.ipvs_scheduler == "rr" and warnings == [f"{path}: field ipvs.tcpTimeout is not implemented by pykubelet "
                                                     "proxy; ignored"]


def test_a_file_in_ipvs_mode_has_no_min_sync_period_unless_it_sets_one_as_in_kube_proxy(tmp_path):
    unset, _ = parse(["--config", write(tmp_path, config(mode="ipvs", iptables={"minSyncPeriod": "3s"}))])
    zero, _ = parse(["--config", write(tmp_path, config(mode="ipvs", ipvs={"minSyncPeriod": "0s"}))])
    iptables, _ = parse(["--config", write(tmp_path, config(mode="iptables", iptables={"minSyncPeriod": "0s"}))])
    flags, _ = parse(["--kubeconfig", "/k", "--proxy-mode", "ipvs"])
    assert (unset.min_sync_period, zero.min_sync_period) == (0.0, 0.0)  # sync at once
    assert (iptables.min_sync_period, flags.min_sync_period) == (1.0, 1.0)  # kube-proxy's defaults there


def test_the_ipvs_sync_period_flags_count_in_the_ipvs_mode_only():
    argv = ["--kubeconfig", "/k", "--iptables-sync-period", "10s", "--ipvs-sync-period", "20s", "--ipvs-strict-arp"]
    ipvs, _ = parse(argv + ["--proxy-mode", "ipvs", "--ipvs-scheduler", "sh"])
    iptables, _ = parse(argv)
    assert (ipvs.sync_period, ipvs.ipvs_scheduler, ipvs.ipvs_strict_arp) == (20.0, "sh", True)
    assert iptables.sync_period == 10.0


def test_with_a_file_other_flags_are_ignored_as_kube_proxy_does_but_we_say_so(tmp_path):
    path = write(tmp_path, config())
    s, warnings = parse(["--config", path, "--proxy-mode", "nftables", "--hostname-override", "n1"])
    assert s.mode == "iptables" and s.node_name == "n1"
    assert warnings == ["flag --proxy-mode is ignored: with --config the file's value counts (as in kube-proxy)"]


def test_unknown_and_unimplemented_fields_warn(tmp_path):
    path = write(tmp_path, config(conntrack={"maxPerCore": 32768}, fancy=1))
    _, warnings = parse(["--config", path])
    assert any("conntrack.maxPerCore is not implemented" in w for w in warnings)
    assert any("unknown field fancy" in w for w in warnings)


@pytest.mark.parametrize("argv, message", [
    (["--kubeconfig", "/k", "--proxy-mode", "userspace"], "flag --proxy-mode: must be one of iptables, nftables, ipvs"),
    (["--kubeconfig", "/k", "--ipvs-exclude-cidrs", "10.0.0.0/40"], "flag --ipvs-exclude-cidrs: invalid CIDR"),
    (["--kubeconfig", "/k", "--cluster-cidr", "10.244.0.0/33"], "flag --cluster-cidr: invalid CIDR"),
    (["--kubeconfig", "/k", "--iptables-masquerade-bit", "32"], "flag --iptables-masquerade-bit: must be an integer"),
    (["--kubeconfig", "/k", "--healthz-bind-address", "nowhere:1"], "flag --healthz-bind-address: must be IP:port"),
    (["--kubeconfig", "/k", "--iptables-sync-period", "1s", "--iptables-min-sync-period", "2s"], "minSyncPeriod"),
    ([], "--kubeconfig (or clientConnection.kubeconfig) is required"),
])
def test_bad_flags_name_the_flag(argv, message):
    with pytest.raises(ConfigError, match=None) as err:
        parse(argv)
    assert message in str(err.value)


def test_bad_file_values_name_the_file_and_field(tmp_path):
    path = write(tmp_path, config(iptables={"minSyncPeriod": "soon"}))
    with pytest.raises(ConfigError) as err:
        parse(["--config", path])
    assert str(err.value).startswith(f"{path}: field iptables.minSyncPeriod: invalid duration")
    path = write(tmp_path, {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"})
    with pytest.raises(ConfigError, match="field apiVersion/kind: must be kubeproxy.config.k8s.io/v1alpha1"):
        parse(["--config", path])


def test_cleanup_needs_no_kubeconfig():
    s, _ = parse(["--cleanup"])
    assert s.cleanup


def test_kubeadms_file_with_every_unset_field_written_as_zero_gets_kube_proxys_defaults(tmp_path):
    # What `kubeadm init` writes into the kube-proxy ConfigMap: every field, unset ones as zeros.
    path = write(tmp_path, config(
        bindAddress="0.0.0.0", bindAddressHardFail=False, clusterCIDR="", configSyncPeriod="0s",
        clientConnection={"kubeconfig": "/etc/kp.conf", "qps": 0, "burst": 0, "contentType": ""},
        conntrack={"maxPerCore": None, "udpTimeout": "0s", "tcpBeLiberal": False}, detectLocalMode="",
        enableProfiling=False, healthzBindAddress="", metricsBindAddress="", mode="", nodePortAddresses=None,
        iptables={"localhostNodePorts": None, "masqueradeAll": False, "masqueradeBit": None,
                  "minSyncPeriod": "0s", "syncPeriod": "0s"},
        ipvs={"syncPeriod": "0s", "strictARP": False, "excludeCIDRs": None},
        logging={"flushFrequency": 0, "options": {"json": {"infoBufferSize": "0"}}, "verbosity": 0}))
    s, warnings = parse(["--config", path, "--hostname-override", "node-a"])
    defaults, _ = parse(["--kubeconfig", "/etc/kp.conf", "--hostname-override", "node-a"])
    assert s == defaults and warnings == []


def test_a_zero_masquerade_bit_and_false_localhost_nodeports_are_values_not_unset(tmp_path):
    path = write(tmp_path, config(iptables={"masqueradeBit": 0, "localhostNodePorts": False}))
    s, _ = parse(["--config", path])
    assert s.masquerade_bit == 0 and not s.localhost_nodeports


async def test_the_kubeconfig_kubeadm_gives_the_proxy_authenticates_with_the_pods_token_and_ca(tmp_path):
    # kubeadm's kubeconfig.conf for kube-proxy: the Pod's ServiceAccount token and CA, by absolute path.
    secrets = tmp_path / "serviceaccount"
    secrets.mkdir()
    (secrets / "token").write_text("the-pods-token")
    cert, _ = tls.serving_files(ServerSettings(), str(tmp_path / "pki"), "apiserver", ["10.0.0.1"])
    (secrets / "ca.crt").write_bytes(open(cert, "rb").read())  # any certificate serves as a CA here
    kubeconfig = tmp_path / "kubeconfig.conf"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "default",
        "clusters": [{"name": "default", "cluster": {"server": "https://10.0.0.1:6443",
                                                     "certificate-authority": str(secrets / "ca.crt")}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "users": [{"name": "default", "user": {"tokenFile": str(secrets / "token")}}]}))
    client = await KubeClient.from_kubeconfig(str(kubeconfig), user_agent="pykubelet-proxy")
    try:
        configuration = client._api.configuration
        assert await configuration.get_api_key_with_prefix("BearerToken") == "Bearer the-pods-token"
        assert configuration.ssl_ca_cert == str(secrets / "ca.crt") and configuration.verify_ssl
        assert client.host == "https://10.0.0.1:6443"
    finally:
        await client.close()
