"""Files the kubelet writes under a pod's directory and bind-mounts into its containers:
the managed /etc/hosts and each container instance's termination-message file (where they
go: runtime/paths.py).
"""

from __future__ import annotations

import os
import secrets

from pykubelet.api.pod import DEFAULT_TERMINATION_MESSAGE_PATH, Container, Pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import data_dirs, paths

ETC_HOSTS = "/etc/hosts"
MANAGED_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HOSTS_HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
TERMINATION_MESSAGE_FILE_MODE = 0o666


def _aliases(host_aliases: list[tuple[str, list[str]]]) -> str:
    if not host_aliases:
        return ""
    return "\n# Entries added by HostAliases.\n" + "".join(
        f"{ip}\t{chr(9).join(names)}\n" for ip, names in host_aliases)


def managed_hosts(pod_ips: list[str], hostname: str, domain: str, host_aliases: list[tuple[str, list[str]]]) -> str:
    """A pod-network pod's /etc/hosts: localhost entries, the pod's own name on each of its IPs,
    then hostAliases (one line per IP)."""
    lines = [MANAGED_HOSTS_HEADER, "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n",
             "fe00::0\tip6-localnet\n", "fe00::0\tip6-mcastprefix\n", "fe00::1\tip6-allnodes\n",
             "fe00::2\tip6-allrouters\n"]
    names = f"{hostname}.{domain}\t{hostname}" if domain else hostname
    lines += [f"{ip}\t{names}\n" for ip in pod_ips]
    return "".join(lines) + _aliases(host_aliases)


def host_network_hosts(node_hosts: str, host_aliases: list[tuple[str, list[str]]]) -> str:
    """A host-network pod's /etc/hosts: the node's own file, plus hostAliases."""
    return MANAGED_HOSTS_HEADER_HOST_NETWORK + node_hosts + _aliases(host_aliases)


def _write(path: str, content: str, mode: int) -> None:
    data_dirs.make_dir(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    os.chmod(path, mode)


def hosts_mount(root_dir: str, pod: Pod, container: Container, pod_ip: str, cluster_domain: str,
                node_hosts_path: str = ETC_HOSTS) -> api.Mount | None:
    """(Re)write the pod's hosts file and mount it at /etc/hosts; None when the kubelet would not:
    the pod has no IP yet, or the container mounts something of its own there."""
    ip = pod_ip
    if not ip or any(m.mount_path == ETC_HOSTS for m in container.volume_mounts):
        return None
    path = paths.etc_hosts(root_dir, pod.uid)
    if pod.host_network:
        with open(node_hosts_path, encoding="utf-8") as f:
            content = host_network_hosts(f.read(), pod.host_aliases)
    else:
        hostname, domain = pod.hostname_and_domain(cluster_domain)
        content = managed_hosts([ip], hostname, domain, pod.host_aliases)
    _write(path, content, 0o644)
    return api.Mount(container_path=ETC_HOSTS, host_path=path)


def termination_message_path(container: Container) -> str:
    return container.raw.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH


def termination_message_mount(root_dir: str, pod: Pod, container: Container) -> api.Mount:
    """A fresh, empty, world-writable file for this container instance, at its terminationMessagePath.

    A random name per instance, so a restarted container does not see its predecessor's message.
    """
    directory = paths.termination_message_dir(root_dir, pod.uid, container.name)
    data_dirs.make_dir(directory)
    path = os.path.join(directory, f"{secrets.randbits(32):08x}")
    # A new file of the agent's own, never one that was there: the only file it will read back.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, TERMINATION_MESSAGE_FILE_MODE)  # any container user may write it; past the umask
    finally:
        os.close(fd)
    return api.Mount(container_path=termination_message_path(container), host_path=path)
