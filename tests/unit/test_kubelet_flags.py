"""pykubelet as a drop-in for the kubelet's command line: `--version` as kubeadm reads it, the
flags kubeadm, kind, the deb packages and install guides pass, both spellings, repeated flags."""

from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import sys

import pytest

from pykubelet import config
from pykubelet.config import ConfigError, build_parser, settings_from_args

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# What kubeadm's preflight accepts (cmd/kubeadm/app/preflight/utils.go): the whole trimmed stdout,
# matched exactly once; the captured part must parse as a semantic version.
KUBEADM_VERSION_PATTERN = re.compile(r"^\s*Kubernetes v((?:[0-9]+\.){2}[0-9]+)([-\w.+]*)?\s*$")


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pykubelet.cli", *argv], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)


def settings(*argv: str):
    return settings_from_args(build_parser().parse_args(list(argv)))


def warned(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize("argv", [["--version"], ["--version=true"], ["--version", "--config=/nonexistent.yaml"]])
def test_version_is_what_kubeadm_parses_on_stdout_with_exit_0(argv):
    done = cli(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    matches = KUBEADM_VERSION_PATTERN.findall(done.stdout.strip())
    assert len(matches) == 1, done.stdout
    major, minor, patch = (int(n) for n in matches[0][0].split("."))
    assert (major, minor) == (1, 36) and patch >= 0
    assert "pykubelet" in matches[0][1]


def test_help_still_works_and_lists_the_bootstrap_flags():
    done = cli("--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--bootstrap-kubeconfig", "--cert-dir", "--rotate-certificates", "--register-with-taints",
                 "--provider-id", "--config-dir", "--version"):
        assert flag in done.stdout
    assert "--runtime-cgroups" in done.stdout  # among the accepted-and-ignored flags of the epilog


@pytest.mark.parametrize("argv, named", [
    (["--no-such-flag=1"], "--no-such-flag"),
    (["--kubeconf", "/etc/kubernetes/kubelet.conf"], "--kubeconf"),  # a prefix is not a flag
    (["--hostname-override"], "--hostname-override"),                 # a string flag needs its value
])
def test_a_flag_the_kubelet_does_not_have_exits_2_naming_it(argv, named):
    done = cli(*argv)
    assert done.returncode == 2
    assert named in done.stderr


# What the deb/rpm drop-in (10-kubeadm.conf), kubeadm-flags.env, kind's KUBELET_EXTRA_ARGS and common
# install guides put on the kubelet's command line.
DROP_IN = ["--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
           "--kubeconfig=/etc/kubernetes/kubelet.conf"]
KUBEADM_FLAGS_ENV = ["--hostname-override=worker-1", "--node-ip=10.0.0.5",
                     "--register-with-taints=node-role.kubernetes.io/control-plane:NoSchedule"]
KIND = ["--runtime-cgroups=/system.slice/containerd.service", "--provider-id=kind://docker/kind/kind-worker",
        "--node-labels=topology.kubernetes.io/zone=a"]
GUIDES = ["--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--cgroup-driver=cgroupfs",
          "--fail-swap-on=false", "--container-runtime=remote", "--pod-infra-container-image=registry.k8s.io/pause:3.9",
          "--v=2", "--max-pods=50", "--rotate-certificates", "--cert-dir=/var/lib/kubelet/pki",
          "--resolv-conf=/run/systemd/resolve/resolv.conf", "--cloud-provider=external",
          "--eviction-hard=memory.available<100Mi,nodefs.available<10%", "--kube-reserved=cpu=100m",
          "--feature-gates=KubeletInUserNamespace=true", "--cluster-dns=10.96.0.10", "--cluster-domain=cluster.local"]


def test_the_flags_kubeadm_kind_the_packages_and_guides_pass_are_all_accepted(tmp_path, caplog):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        s = settings(*DROP_IN, f"--config={cfg}", *KUBEADM_FLAGS_ENV, *KIND, *GUIDES)
    # the implemented ones work
    assert s.cluster.bootstrap_kubeconfig == "/etc/kubernetes/bootstrap-kubelet.conf"
    assert s.cluster.kubeconfig == "/etc/kubernetes/kubelet.conf"
    assert (s.node_name, s.cluster.node_ip) == ("worker-1", "10.0.0.5")
    assert s.cluster.register_with_taints == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert s.cluster.provider_id == "kind://docker/kind/kind-worker"
    assert s.cluster.node_labels == {"topology.kubernetes.io/zone": "a"}
    assert (s.cluster.rotate_certificates, s.cluster.cert_dir) == (True, "/var/lib/kubelet/pki")
    assert (s.verbosity, s.pods.max_pods, s.runtime.cgroup_driver) == (2, 50, "cgroupfs")
    assert s.cluster.eviction_hard["memory.available"].quantity == 100 * 2**20
    assert s.cluster.eviction_hard["nodefs.available"].percent == 10.0
    assert s.cluster.resolv_conf == "/run/systemd/resolve/resolv.conf"
    # the rest: one warning each, by name; those that ask for nothing pykubelet lacks stay quiet
    messages = warned(caplog)
    for flag in ("--runtime-cgroups", "--container-runtime", "--pod-infra-container-image", "--cloud-provider",
                 "--kube-reserved", "--feature-gates"):
        assert sum(f'flag="{flag}"' in m for m in messages) == 1, (flag, messages)
    assert not any('flag="--fail-swap-on"' in m for m in messages)  # false is what pykubelet does


def test_both_spellings_give_the_same_settings():
    pairs = ["--node-ip", "10.0.0.7", "--max-pods", "12", "--register-with-taints", "a=b:NoExecute",
             "--provider-id", "x://1", "--cert-dir", "/tmp/pki", "--rotate-certificates", "true"]
    spaced = settings(*pairs, "--hostname-override", "n1")
    joined = settings(*(f"{k}={v}" for k, v in zip(pairs[::2], pairs[1::2])), "--hostname-override=n1")
    assert spaced == joined
    assert spaced.cluster.register_with_taints == [{"key": "a", "value": "b", "effect": "NoExecute"}]


def test_repeated_flags_accumulate_lists_and_maps_and_the_last_scalar_wins(caplog):
    """KUBELET_EXTRA_ARGS appended after kubeadm's flags: pflag merges maps, appends slices, and
    takes the last value of everything else."""
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        s = settings("--hostname-override=a", "--node-labels=x=1", "--max-pods=10", "--cluster-dns=10.0.0.10",
                     "--feature-gates=A=true", "--hostname-override=b", "--node-labels", "y=2,x=3",
                     "--max-pods", "20", "--cluster-dns", "10.0.0.11", "--feature-gates=B=false",
                     "--register-with-taints=a:NoSchedule", "--register-with-taints=b:NoExecute")
    assert s.node_name == "b" and s.pods.max_pods == 20
    assert s.cluster.node_labels == {"x": "3", "y": "2"}
    assert s.cluster.cluster_dns == ["10.0.0.10", "10.0.0.11"]
    assert s.cluster.register_with_taints == [{"key": "b", "effect": "NoExecute"}]  # taints replace, as pflag's
    gates = [m for m in warned(caplog) if 'flag="--feature-gates"' in m]
    assert len(gates) == 1 and "A" in gates[0] and "B" in gates[0]


def test_a_setting_in_the_file_and_on_the_command_line_is_warned_about_once(tmp_path, caplog):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkubeletCgroups: /kubelet\n")
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        settings("--config", str(cfg), "--kubelet-cgroups=/other", "--hostname-override=n1")
    assert len([m for m in warned(caplog) if "kubeletCgroups" in m or "--kubelet-cgroups" in m]) == 1


@pytest.mark.parametrize("argv, flag", [
    (["--register-with-taints=a=b"], "--register-with-taints"),           # no effect
    (["--register-with-taints=a=b:Sometimes"], "--register-with-taints"),
    (["--read-only-port=ten"], "--read-only-port"),                        # ignored, but still checked
    (["--feature-gates=A=maybe"], "--feature-gates"),
    (["--eviction-hard=memory.available=1Gi"], "--eviction-hard"),
    (["--cgroup-driver=upstart"], "--cgroup-driver"),
])
def test_a_bad_value_of_a_kubelet_flag_is_a_config_error_naming_it(argv, flag):
    with pytest.raises(ConfigError, match=re.escape(flag)):
        settings(*argv, "--hostname-override=n1")


def test_config_dir_drop_ins_override_the_config_file_in_name_order(tmp_path):
    header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    (tmp_path / "config.yaml").write_text(header + "maxPods: 10\nsyncFrequency: 30s\n")
    drop_ins = tmp_path / "config.d"
    drop_ins.mkdir()
    (drop_ins / "20-b.conf").write_text(header + "maxPods: 30\n")
    (drop_ins / "10-a.conf").write_text(header + "maxPods: 20\nfileCheckFrequency: 5s\n")
    (drop_ins / "99-ignored.yaml").write_text(header + "maxPods: 99\n")  # only *.conf files count
    s = settings("--config", str(tmp_path / "config.yaml"), "--config-dir", str(drop_ins), "--hostname-override=n1")
    assert (s.pods.max_pods, s.pods.sync_frequency, s.pods.file_check_frequency) == (30, 30.0, 5.0)


def test_cert_dir_defaults_to_pki_under_the_root_dir():
    assert settings("--root-dir=/srv/node", "--hostname-override=n1").cluster.cert_dir == "/srv/node/pki"


def test_cgroup_driver_systemd_is_taken_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        s = settings("--cgroup-driver=systemd", "--hostname-override=n1")
    assert s.runtime.cgroup_driver == "systemd"
    assert warned(caplog) == []


# /var/lib/kubelet/config.yaml as kubeadm v1.36.3 writes it by default
# (`kubeadm config print init-defaults --component-configs KubeletConfiguration`).
KUBEADM_CONFIG_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
"""


def test_the_config_yaml_kubeadm_writes_is_read_with_the_kubelets_defaults(tmp_path, caplog):
    path = tmp_path / "config.yaml"
    path.write_text(KUBEADM_CONFIG_YAML)
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        s = settings("--config", str(path), "--hostname-override=n1")
    assert s.pods.static_pod_path == "/etc/kubernetes/manifests" and s.cluster.rotate_certificates is True
    assert s.authn.client_ca_file == "/etc/kubernetes/pki/ca.crt" and s.authn.webhook_enabled is True
    assert (s.authn.webhook_cache_ttl, s.authz.cache_authorized_ttl, s.authz.cache_unauthorized_ttl) == (120, 300, 30)
    assert (s.server.healthz_bind_address, s.server.healthz_port) == ("127.0.0.1", 10248)
    assert s.cluster.cluster_dns == ["10.96.0.10"] and s.cluster.cluster_domain == "cluster.local"
    assert s.runtime.endpoint == "unix:///run/containerd/containerd.sock"  # "" is the default
    assert (s.pods.sync_frequency, s.pods.file_check_frequency, s.cluster.status_update_seconds) == (60, 20, 10)
    assert s.runtime.cgroup_driver == "systemd"
    assert warned(caplog) == []  # every field is known, and each is one pykubelet acts on or ignores quietly
