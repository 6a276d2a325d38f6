"""KubeletConfiguration file + flags -> Settings, with the kubelet's precedence and errors that name the field."""

from __future__ import annotations

import logging
import pathlib
import re
import subprocess
import sys

import pytest

from pykubelet import config
from pykubelet.config import ConfigError, Settings, build_parser, load_config_file, settings_from_args

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADER = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def write_config(tmp_path: pathlib.Path, body: str, name: str = "kubelet.yaml") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(HEADER + body)
    return path


def settings(*argv: str) -> Settings:
    return settings_from_args(build_parser().parse_args(list(argv)))


def test_config_file_applies_its_fields(tmp_path):
    path = write_config(tmp_path, "staticPodPath: /etc/kubernetes/manifests\n"
                                  "fileCheckFrequency: 1m30s\n"
                                  "maxPods: 12\n"
                                  "containerRuntimeEndpoint: unix:///run/k3s/containerd.sock\n"
                                  "healthzPort: 0\n")
    s = settings("--config", str(path), "--hostname-override", "n1")
    assert s.pods.static_pod_path == "/etc/kubernetes/manifests"
    assert s.pods.file_check_frequency == 90.0
    assert s.pods.max_pods == 12
    assert s.runtime.endpoint == "unix:///run/k3s/containerd.sock"
    assert s.server.healthz_port == 0


def test_relative_static_pod_path_is_resolved_against_the_config_files_directory(tmp_path, monkeypatch):
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    path = write_config(conf_dir, "staticPodPath: manifests\n")
    monkeypatch.chdir(tmp_path)  # somewhere else than the file's directory
    s = settings("--config", str(path), "--hostname-override", "n1")
    assert s.pods.static_pod_path == str(conf_dir / "manifests")


def test_relative_pod_manifest_path_flag_is_resolved_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = settings("--pod-manifest-path", "manifests", "--hostname-override", "n1")
    assert s.pods.static_pod_path == str(tmp_path / "manifests")


def test_fields_not_in_the_file_keep_the_kubelet_defaults(tmp_path):
    s = settings("--config", str(write_config(tmp_path, "maxPods: 5\n")), "--hostname-override", "n1")
    assert s.pods.file_check_frequency == 20.0
    assert s.runtime.endpoint == "unix:///run/containerd/containerd.sock"
    assert s.server.healthz_port == 10248


def test_flags_override_the_config_file(tmp_path):
    path = write_config(tmp_path, "staticPodPath: /from/file\n"
                                  "fileCheckFrequency: 30s\n"
                                  "maxPods: 50\n"
                                  "containerRuntimeEndpoint: unix:///from/file.sock\n"
                                  "syncFrequency: 2m\n")
    s = settings("--config", str(path), "--pod-manifest-path", "/from/flag", "--file-check-frequency", "5s",
                 "--max-pods", "20", "--container-runtime-endpoint", "unix:///from/flag.sock",
                 "--hostname-override", "n1")
    assert s.pods.static_pod_path == "/from/flag"
    assert s.pods.file_check_frequency == 5.0
    assert s.pods.max_pods == 20
    assert s.runtime.endpoint == "unix:///from/flag.sock"
    assert s.pods.sync_frequency == 120.0  # not given as a flag: the file's value stays


def test_bare_socket_path_endpoint_gets_the_unix_scheme(tmp_path):
    s = settings("--container-runtime-endpoint", "/run/containerd/containerd.sock", "--hostname-override", "n1")
    assert s.runtime.endpoint == "unix:///run/containerd/containerd.sock"


@pytest.mark.parametrize("line, field", [
    ("maxPods: -1", "maxPods"),
    ("maxPods: 1.5", "maxPods"),
    ("maxPods: '10'", "maxPods"),
    ("fileCheckFrequency: soon", "fileCheckFrequency"),
    ("fileCheckFrequency: 20", "fileCheckFrequency"),
    ("fileCheckFrequency: -5s", "fileCheckFrequency"),
    ("syncFrequency: -1m", "syncFrequency"),
    ("runtimeRequestTimeout: 2", "runtimeRequestTimeout"),
    ("healthzPort: 70000", "healthzPort"),
    ("healthzPort: -1", "healthzPort"),
    ("healthzPort: true", "healthzPort"),
    ("containerRuntimeEndpoint: tcp://127.0.0.1:1234", "containerRuntimeEndpoint"),
    ("containerRuntimeEndpoint: 5", "containerRuntimeEndpoint"),
    ("failSwapOn: 'no'", "failSwapOn"),              # a field pykubelet does not act on is checked too
    ("registerWithTaints: [{key: a, effect: Sometimes}]", "registerWithTaints"),
    ("staticPodPath: [a, b]", "staticPodPath"),
])
def test_invalid_field_raises_config_error_naming_the_file_and_the_field(tmp_path, line, field):
    path = write_config(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path), Settings())
    assert str(path) in str(caught.value)
    assert f"field {field}" in str(caught.value)


@pytest.mark.parametrize("text", [
    "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n",
    "maxPods: 10\n",  # neither
])
def test_wrong_api_version_or_kind_is_a_config_error(tmp_path, text):
    path = tmp_path / "kubelet.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="apiVersion/kind") as caught:
        load_config_file(str(path), Settings())
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("text", ["maxPods: [\n", "- a list\n", ""])
def test_config_file_that_is_not_an_object_is_a_config_error(tmp_path, text):
    path = tmp_path / "kubelet.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config_file(str(path), Settings())


def test_missing_config_file_is_a_config_error_naming_it(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_config_file(str(path), Settings())


@pytest.mark.parametrize("line, field", [
    ("cpuManagerPolicy: static", "cpuManagerPolicy"),  # a real kubelet field pykubelet does not act on
    ("protectKernelDefaults: true", "protectKernelDefaults"),
    ("fooBar: 1", "fooBar"),                     # not a kubelet field at all
])
def test_unknown_and_unimplemented_fields_only_warn_naming_the_field(tmp_path, caplog, line, field):
    path = write_config(tmp_path, line + "\nmaxPods: 7\n")
    s = Settings()
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        load_config_file(str(path), s)
    assert s.pods.max_pods == 7  # the rest of the file still applies
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f'field="{field}"' in w for w in warnings), warnings


@pytest.mark.parametrize("flag, value", [
    ("--max-pods", "0"),
    ("--file-check-frequency", "soon"),
    ("--healthz-port", "70000"),
    ("--container-runtime-endpoint", "tcp://127.0.0.1:1"),
])
def test_invalid_flag_raises_config_error_naming_the_flag(flag, value):
    with pytest.raises(ConfigError, match=flag):
        settings(flag, value, "--hostname-override", "n1")


@pytest.mark.parametrize("argv, flag", [
    (["--runtime-cgroups", "/system.slice/containerd.service"], "--runtime-cgroups"),
    (["--runtime-cgroups=/system.slice/containerd.service"], "--runtime-cgroups"),
    (["--cloud-provider=external"], "--cloud-provider"),
    (["--protect-kernel-defaults"], "--protect-kernel-defaults"),  # a bare boolean flag
])
def test_unimplemented_kubelet_flags_are_accepted_with_a_warning_naming_them(caplog, argv, flag):
    with caplog.at_level(logging.WARNING, logger=config.__name__):
        s = settings(*argv, "--hostname-override", "n1")
    assert s.node_name == "n1"
    assert any(f'flag="{flag}"' in r.getMessage() for r in caplog.records)


def test_zero_values_in_the_config_file_keep_the_kubelets_defaults(tmp_path):
    """kubeadm writes the zero value of many fields; the kubelet's defaulting turns them into defaults."""
    path = write_config(tmp_path, "syncFrequency: 0s\nfileCheckFrequency: 0s\nmaxPods: 0\nport: 0\n"
                                  "containerRuntimeEndpoint: ''\nauthentication: {webhook: {cacheTTL: 0s}}\n"
                                  "authorization: {mode: '', webhook: {cacheAuthorizedTTL: 0s}}\n"
                                  "nodeStatusUpdateFrequency: 0s\nnodeStatusReportFrequency: 0s\nhealthzPort: 0\n")
    s, defaults = settings("--config", str(path), "--hostname-override", "n1"), Settings()
    assert (s.pods.sync_frequency, s.pods.file_check_frequency, s.pods.max_pods, s.server.port) == \
        (defaults.pods.sync_frequency, defaults.pods.file_check_frequency, defaults.pods.max_pods, defaults.server.port)
    assert s.runtime.endpoint == defaults.runtime.endpoint
    assert (s.authn.webhook_cache_ttl, s.authz.mode, s.authz.cache_authorized_ttl) == (120.0, "Webhook", 300.0)
    assert (s.cluster.status_update_seconds, s.cluster.status_report_seconds) == (10.0, 300.0)
    assert s.server.healthz_port == 0  # a pointer field: 0 is a value (disabled), not "unset"


def test_only_the_update_frequency_given_makes_it_the_report_frequency_too(tmp_path):
    s = settings("--config", str(write_config(tmp_path, "nodeStatusUpdateFrequency: 20s\n")), "--hostname-override", "n1")
    assert (s.cluster.status_update_seconds, s.cluster.status_report_seconds) == (20.0, 20.0)


def test_node_name_is_the_hostname_override_lowercased():
    assert settings("--hostname-override", "Worker-01.Example").node_name == "worker-01.example"


def test_node_name_defaults_to_the_host_name_lowercased(monkeypatch):
    monkeypatch.setattr(config.socket, "gethostname", lambda: "BuildHost")
    assert settings().node_name == "buildhost"


@pytest.mark.parametrize("line, field", [
    ("maxPods: -1", "maxPods"),
    ("healthzPort: 70000", "healthzPort"),
])
def test_cli_exits_2_on_a_bad_config_file_naming_the_field(tmp_path, line, field):
    path = write_config(tmp_path, line + "\n")
    done = subprocess.run([sys.executable, "-m", "pykubelet.cli", "--config", str(path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert field in done.stderr
    assert str(path) in done.stderr


def test_cluster_flags_and_fields_are_applied(tmp_path):
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                   "nodeStatusUpdateFrequency: 5s\nkubeAPIQPS: 10\nkubeAPIBurst: 20\n"
                   "evictionHard: {memory.available: 200Mi, nodefs.available: 5%}\n")
    s = settings("--config", str(cfg), "--kubeconfig", "node.conf", "--node-ip", "10.0.0.5",
                 "--node-labels", "zone=a,tier=web", "--hostname-override", "n1")
    assert s.cluster.kubeconfig.endswith("/node.conf") and s.cluster.kubeconfig.startswith("/")
    assert s.cluster.node_ip == "10.0.0.5" and s.cluster.node_labels == {"zone": "a", "tier": "web"}
    assert (s.cluster.status_update_seconds, s.cluster.api_qps, s.cluster.api_burst) == (5.0, 10.0, 20)
    assert s.cluster.eviction_hard["memory.available"].quantity == 200 * 2**20
    assert s.cluster.eviction_hard["nodefs.available"].percent == 5.0


def test_bad_eviction_signal_names_the_field(tmp_path):
    cfg = tmp_path / "kubelet.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                   "evictionHard: {memory.free: 1Gi}\n")
    with pytest.raises(ConfigError, match="evictionHard.*memory.free"):
        settings("--config", str(cfg), "--hostname-override", "n1")


def test_kubelet_api_settings_from_nested_fields_and_flags(tmp_path):
    path = write_config(tmp_path, "port: 10260\naddress: 127.0.0.1\n"
                                  "authentication:\n  anonymous: {enabled: true}\n"
                                  "  webhook: {enabled: false, cacheTTL: 1m}\n  x509: {clientCAFile: ca.crt}\n"
                                  "authorization:\n  mode: AlwaysAllow\n  webhook: {cacheUnauthorizedTTL: 5s}\n"
                                  "tlsMinVersion: VersionTLS13\n")
    s = settings("--config", str(path), "--hostname-override", "n1", "--authorization-mode", "Webhook")
    assert (s.server.port, s.server.address, s.server.tls_min_version) == (10260, "127.0.0.1", "VersionTLS13")
    assert (s.authn.anonymous_enabled, s.authn.webhook_enabled, s.authn.webhook_cache_ttl) == (True, False, 60.0)
    assert s.authn.client_ca_file == str(tmp_path / "ca.crt")
    assert (s.authz.mode, s.authz.cache_unauthorized_ttl, s.authz.cache_authorized_ttl) == ("Webhook", 5.0, 300.0)
    defaults = settings("--hostname-override", "n1")
    assert (defaults.authn.anonymous_enabled, defaults.authn.webhook_enabled, defaults.authz.mode) == \
        (False, True, "Webhook")
    assert settings("--hostname-override", "n1", "--anonymous-auth").authn.anonymous_enabled is True


@pytest.mark.parametrize("body, where", [
    ("authorization: {mode: RBAC}\n", "field authorization.mode"),
    ("tlsCipherSuites: [TLS_FAKE]\n", "field tlsCipherSuites"),
    ("authentication: {webhook: {cacheTTL: soon}}\n", "field authentication.webhook.cacheTTL"),
    ("port: 70000\n", "field port"),
])
def test_bad_kubelet_api_fields_name_the_nested_field(tmp_path, body, where):
    with pytest.raises(ConfigError, match=where):
        settings("--config", str(write_config(tmp_path, body)), "--hostname-override", "n1")


def test_cgroup_root_from_the_file_or_the_flag():
    assert Settings().pods.cgroup_root == ""
    assert settings("--cgroup-root", "/pkl-conformance").pods.cgroup_root == "/pkl-conformance"


def test_cgroup_root_field_is_applied(tmp_path):
    s = settings("--config", str(write_config(tmp_path, "cgroupRoot: /node-b\n")))
    assert s.pods.cgroup_root == "/node-b"


def test_a_cgroup_root_written_as_a_slice_is_refused_with_the_systemd_driver_only():
    # the kubelet reads cgroupRoot as a cgroupfs path whose parts name the slices: /kube, not /kube.slice
    with pytest.raises(ConfigError, match=r"cgroupRoot '/kube.slice'.*write '/kube'"):
        settings("--cgroup-driver", "systemd", "--cgroup-root", "/kube.slice")
    with pytest.raises(ConfigError, match=r"write '/a/b'"):
        settings("--cgroup-driver", "systemd", "--cgroup-root", "a-b.slice")
    with pytest.raises(ConfigError, match=r"write '/a/b/c'"):
        settings("--cgroup-driver", "systemd", "--cgroup-root", "/x.slice/a-b.slice/c")
    assert settings("--cgroup-driver", "systemd", "--cgroup-root", "/kube").pods.cgroup_root == "/kube"
    assert settings("--cgroup-driver", "systemd", "--cgroup-root", "/").pods.cgroup_root == "/"
    assert settings("--cgroup-root", "/kube.slice").pods.cgroup_root == "/kube.slice"  # cgroupfs: a name like any
