"""Which sysctls a pod may set: the kubelet's safe list, allowedUnsafeSysctls, host namespaces."""

from __future__ import annotations

import pytest

from pykubelet.api.pod import parse_pod
from pykubelet.api.sysctls import SysctlAllowlist, kernel_version, namespace_of, normalize, safe_sysctls
from pykubelet.config import ConfigError, build_parser, settings_from_args
from pykubelet.pods.admission import Allocatable, Rejection, admit

NEW_KERNEL = (6, 1)
NODE_SIZE = Allocatable(pods=110, cpu_millis=2000, memory_bytes=2**32)


def pod_with(*names: str, host_network: bool = False, host_ipc: bool = False):
    spec = {"containers": [{"name": "app", "image": "busybox:1.36"}], "hostNetwork": host_network,
            "hostIPC": host_ipc, "securityContext": {"sysctls": [{"name": n, "value": "1"} for n in names]}}
    return parse_pod({"metadata": {"name": "p", "uid": "u"}, "spec": spec}, where="test")


def test_safe_sysctls_depend_on_the_kernel():
    assert "net.ipv4.tcp_keepalive_time" in safe_sysctls(NEW_KERNEL)
    old = safe_sysctls((4, 4))
    assert "net.ipv4.ip_local_reserved_ports" in old and "net.ipv4.tcp_keepalive_time" not in old
    assert "net.ipv4.tcp_rmem" not in safe_sysctls((4, 14)) and "net.ipv4.tcp_rmem" in safe_sysctls((4, 15))
    assert safe_sysctls(())[:5] == ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                                    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                                    "net.ipv4.ip_unprivileged_port_start"]


@pytest.mark.parametrize("release, version", [("6.1.0-18-amd64", (6, 1)), ("4.15.0", (4, 15)), ("weird", ())])
def test_kernel_version_from_uname(release, version):
    assert kernel_version(release) == version


@pytest.mark.parametrize("name, dotted", [
    ("kernel.shm_rmid_forced", "kernel.shm_rmid_forced"),
    ("kernel/shm_rmid_forced", "kernel.shm_rmid_forced"),
    ("net/ipv4/conf/eth0.100/forwarding", "net.ipv4.conf.eth0/100.forwarding"),
])
def test_slash_separated_names_are_normalized(name, dotted):
    assert normalize(name) == dotted


@pytest.mark.parametrize("name, namespace", [
    ("kernel.shm_rmid_forced", "IPC"), ("kernel.msgmax", "IPC"), ("kernel.sem", "IPC"),
    ("fs.mqueue.msg_max", "IPC"), ("net.core.somaxconn", "Net"), ("vm.swappiness", ""), ("kernel.semx", ""),
])
def test_namespace_of(name, namespace):
    assert namespace_of(name) == namespace


def test_safe_sysctls_are_allowed_and_others_are_not():
    allow = SysctlAllowlist.build(kernel=NEW_KERNEL)
    assert allow.forbidden(["net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"], False, False) == ""
    assert allow.forbidden(["kernel.msgmax"], False, False) == 'forbidden sysctl: "kernel.msgmax" not allowlisted'


def test_namespaced_sysctls_are_refused_with_the_host_namespace():
    allow = SysctlAllowlist.build(kernel=NEW_KERNEL)
    assert allow.check("net.ipv4.tcp_syncookies", host_network=True, host_ipc=False) == \
        '"net.ipv4.tcp_syncookies" not allowed with host Net enabled'
    assert allow.check("kernel.shm_rmid_forced", host_network=False, host_ipc=True) == \
        '"kernel.shm_rmid_forced" not allowed with host IPC enabled'
    assert allow.check("kernel.shm_rmid_forced", host_network=True, host_ipc=False) == ""


def test_allowed_unsafe_sysctls_add_names_and_prefixes():
    allow = SysctlAllowlist.build(["kernel.msg*", "net.core.somaxconn"], kernel=NEW_KERNEL)
    assert allow.check("kernel.msgmax", False, False) == ""
    assert allow.check("net.core.somaxconn", False, False) == ""
    assert allow.check("net.core.rmem_max", False, False) != ""


def test_an_unsafe_sysctl_that_is_not_namespaced_cannot_be_allowed():
    with pytest.raises(ValueError, match="vm.swappiness"):
        SysctlAllowlist.build(["vm.swappiness"], kernel=NEW_KERNEL)


def test_admission_rejects_a_forbidden_sysctl_with_sysctl_forbidden():
    allow = SysctlAllowlist.build(kernel=NEW_KERNEL)
    assert admit(pod_with("net.ipv4.ip_local_port_range"), [], "", NODE_SIZE, allow) is None
    assert admit(pod_with("kernel.msgmax"), [], "", NODE_SIZE, allow) == \
        Rejection("SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted')
    assert admit(pod_with("net.ipv4.tcp_syncookies", host_network=True), [], "", NODE_SIZE, allow).reason == \
        "SysctlForbidden"


def test_the_flag_and_the_config_field_take_patterns(tmp_path):
    args = build_parser().parse_args(["--allowed-unsafe-sysctls", "kernel.msg*,net.core.somaxconn"])
    assert settings_from_args(args).pods.allowed_unsafe_sysctls == ["kernel.msg*", "net.core.somaxconn"]
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "allowedUnsafeSysctls: [vm.swappiness]\n")
    with pytest.raises(ConfigError, match="allowedUnsafeSysctls.*vm.swappiness.*not known to be namespaced"):
        settings_from_args(build_parser().parse_args(["--config", str(config)]))


def test_sysctl_names_are_validated_in_the_manifest():
    from pykubelet.api.errors import InvalidObject

    with pytest.raises(InvalidObject, match=r"spec.securityContext.sysctls\[0\].name"):
        pod_with("Not A Sysctl")
