"""The managed /etc/hosts and the termination-message file, and the pod fields behind them."""

from __future__ import annotations

import pytest

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import parse_pod
from pykubelet.runtime import podfiles


def pod(**spec):
    body = {"containers": [{"name": "app", "image": "busybox:1.36"}], **spec}
    return parse_pod({"metadata": {"name": "web-abc", "namespace": "shop", "uid": "u1"}, "spec": body}, where="t")


def test_managed_hosts_file_for_a_pod_network_pod():
    text = podfiles.managed_hosts(["10.88.0.7"], "web-0", "web.shop.svc.cluster.local",
                                  [("10.1.2.3", ["foo.local", "bar.local"])])
    assert text == ("# Kubernetes-managed hosts file.\n"
                    "127.0.0.1\tlocalhost\n"
                    "::1\tlocalhost ip6-localhost ip6-loopback\n"
                    "fe00::0\tip6-localnet\n"
                    "fe00::0\tip6-mcastprefix\n"
                    "fe00::1\tip6-allnodes\n"
                    "fe00::2\tip6-allrouters\n"
                    "10.88.0.7\tweb-0.web.shop.svc.cluster.local\tweb-0\n"
                    "\n"
                    "# Entries added by HostAliases.\n"
                    "10.1.2.3\tfoo.local\tbar.local\n")


def test_without_a_subdomain_the_pod_ip_maps_to_the_bare_hostname_and_no_alias_section():
    text = podfiles.managed_hosts(["10.88.0.7"], "web-abc", "", [])
    assert text.endswith("fe00::2\tip6-allrouters\n10.88.0.7\tweb-abc\n")
    assert "HostAliases" not in text


def test_host_network_pods_get_the_nodes_file_with_their_aliases():
    assert podfiles.host_network_hosts("127.0.0.1 localhost\n", [("10.9.9.9", ["x"])]) == (
        "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        "\n# Entries added by HostAliases.\n10.9.9.9\tx\n")


def test_hostname_and_domain_follow_the_kubelet():
    assert pod().hostname_and_domain("cluster.local") == ("web-abc", "")
    assert pod(hostname="db-0", subdomain="db").hostname_and_domain("cluster.local") == \
        ("db-0", "db.shop.svc.cluster.local")


def test_hostname_override_is_the_hostname_with_no_domain_whatever_hostname_and_subdomain_say():
    assert pod(hostnameOverride="override-host").hostname_and_domain("cluster.local") == ("override-host", "")
    assert pod(hostname="db-0", subdomain="db", hostnameOverride="a.b.c").hostname_and_domain("cluster.local") == \
        ("a.b.c", "")
    assert pod(hostnameOverride="x" * 62 + "-y").hostname_and_domain("") == ("x" * 62, "")  # cut to 63, no dash


@pytest.mark.parametrize("spec, message", [
    ({"hostnameOverride": "Not_A_Name"}, "spec.hostnameOverride: Invalid value: 'Not_A_Name'"),
    ({"hostnameOverride": "h", "hostNetwork": True}, "hostnameOverride cannot be set when hostNetwork is true"),
])
def test_an_invalid_hostname_override_is_refused_naming_the_field(spec, message):
    with pytest.raises(InvalidObject, match=message):
        pod(**spec)


def test_hosts_file_is_written_under_the_pod_dir_and_skipped_without_ip_or_when_mounted(tmp_path):
    p = pod(hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo"]}])
    mount = podfiles.hosts_mount(str(tmp_path), p, p.containers[0], "10.88.0.7", "cluster.local")
    assert mount.container_path == "/etc/hosts"
    assert mount.host_path == str(tmp_path / "pods" / "u1" / "etc-hosts")
    assert "10.88.0.7\tweb-abc\n" in (tmp_path / "pods" / "u1" / "etc-hosts").read_text()
    assert podfiles.hosts_mount(str(tmp_path), p, p.containers[0], "", "cluster.local") is None
    own = parse_pod({"metadata": {"name": "w", "uid": "u2"}, "spec": {
        "volumes": [{"name": "h", "emptyDir": {}}],
        "containers": [{"name": "app", "image": "b", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]}]}},
        where="t")
    assert podfiles.hosts_mount(str(tmp_path), own, own.containers[0], "10.88.0.8", "cluster.local") is None


def test_each_container_instance_gets_a_fresh_termination_message_file(tmp_path):
    p = pod()
    first = podfiles.termination_message_mount(str(tmp_path), p, p.containers[0])
    second = podfiles.termination_message_mount(str(tmp_path), p, p.containers[0])
    assert first.container_path == "/dev/termination-log"
    assert first.host_path != second.host_path
    assert first.host_path.startswith(str(tmp_path / "pods" / "u1" / "containers" / "app") + "/")
    assert (tmp_path / first.host_path).stat().st_mode & 0o777 == 0o666


@pytest.mark.parametrize("spec, field", [
    ({"hostAliases": [{"ip": "not-an-ip", "hostnames": ["a"]}]}, "spec.hostAliases[0].ip"),
    ({"hostAliases": [{"ip": "10.0.0.1", "hostnames": ["UPPER"]}]}, "spec.hostAliases[0].hostnames[0]"),
    ({"hostname": "Bad_Name"}, "spec.hostname"),
    ({"hostPID": True, "shareProcessNamespace": True}, "spec.shareProcessNamespace"),
    ({"containers": [{"name": "a", "image": "b", "terminationMessagePolicy": "Sometimes"}]},
     "spec.containers[0].terminationMessagePolicy"),
    ({"containers": [{"name": "a", "image": "b", "lifecycle": {"preStop": {}}}]}, None),
    ({"containers": [{"name": "a", "image": "b", "lifecycle": {
        "preStop": {"exec": {"command": ["x"]}, "sleep": {"seconds": 1}}}}]}, "spec.containers[0].lifecycle.preStop"),
])
def test_bad_node_local_fields_are_named(spec, field):
    if field is None:
        pod(**spec)  # an empty handler is simply no hook
        return
    with pytest.raises(InvalidObject) as e:
        pod(**spec)
    assert field in str(e.value)
