"""The CNI client driving Debian's real plugins (bridge, host-local, portmap, loopback).

Pods and nodes are network namespaces made by the fixtures; the plugins run inside the node
netns (plugin_netns), so the bridge and the iptables rules stay there and vanish with it.
Traffic only goes to addresses inside those namespaces.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets

import pytest

from pykubelet.cni import CNI, Attachment, CNIError, PluginNotFound, parse_conflist
from tests.helpers import wait_for
from tests.network.conftest import (CNI_BIN, default_gateway, delete_link, iptables_nat, links, pod_ip_files,
                                    run_in, set_link_state)


def bridge_network(name: str, bridge: str, subnet, data_dir, *, portmap: bool = True, gateway: bool = True,
                   ip_masq: bool = True, range_start: str = "", range_end: str = ""):
    ipam = {"type": "host-local", "subnet": str(subnet), "dataDir": str(data_dir),
            "routes": [{"dst": "0.0.0.0/0"}]}
    if range_start:
        ipam["rangeStart"], ipam["rangeEnd"] = range_start, range_end
    plugins = [{"type": "bridge", "bridge": bridge, "isGateway": gateway, "ipMasq": ip_masq,
                "hairpinMode": True, "ipam": ipam}]
    if portmap:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}})
    return parse_conflist({"cniVersion": "1.0.0", "name": name, "plugins": plugins})


def pod(netns: str, container_id: str | None = None, **kwargs) -> Attachment:
    container_id = container_id or secrets.token_hex(16)
    args = (("K8S_POD_NAMESPACE", "default"), ("K8S_POD_NAME", "web"), ("K8S_POD_INFRA_CONTAINER_ID", container_id),
            ("K8S_POD_UID", "6f1c0e4a-0000-4000-8000-000000000001"))
    return Attachment(container_id, netns, args=args, **kwargs)


@pytest.fixture
def cni(node) -> CNI:
    return CNI([CNI_BIN], timeout=30, plugin_netns=node)


@pytest.fixture
def net(unique, subnet, tmp_path):
    return bridge_network(f"pkltcni-{unique}", f"pkc{unique}", subnet, tmp_path / "ipam")


async def test_add_gives_the_pod_eth0_with_an_ip_and_a_default_route(cni, net, make_netns, subnet):
    pod_ns = await make_netns("pod")
    result = await cni.add(net, pod(pod_ns))

    ip = result.ip_of("eth0")
    assert ip is not None and ip.address in ip.address.network and ip.address.ip in subnet
    assert ip.gateway == subnet.network_address + 1
    inside = await links(pod_ns)
    assert inside["eth0"].up and inside["eth0"].addresses == (ip.address,)
    assert await default_gateway(pod_ns) == str(ip.gateway)
    assert result.interfaces[ip.interface].sandbox == pod_ns


async def test_two_pods_get_different_ips(cni, net, make_netns):
    first = await cni.add(net, pod(await make_netns("pod1")))
    second = await cni.add(net, pod(await make_netns("pod2")))
    assert first.ip_of().address.ip != second.ip_of().address.ip


async def test_del_frees_the_ip_for_the_next_pod(cni, unique, subnet, tmp_path, make_netns):
    only = str(subnet.network_address + 10)
    net = bridge_network(f"pkltcni-{unique}", f"pkc{unique}", subnet, tmp_path / "ipam", range_start=only, range_end=only)
    first, second = pod(await make_netns("pod1")), pod(await make_netns("pod2"))
    result = await cni.add(net, first)
    assert str(result.ip_of().address.ip) == only

    with pytest.raises(CNIError) as caught:  # a one-address range is full
        await cni.add(net, second)
    assert caught.value.plugin == "bridge" and "no IP addresses available" in str(caught.value)
    await cni.delete(net, second)  # the spec: a failed ADD is followed by a DEL

    await cni.delete(net, first, result)
    assert pod_ip_files(tmp_path / "ipam") == []
    again = await cni.add(net, second)
    assert str(again.ip_of().address.ip) == only


async def test_del_is_idempotent_with_or_without_netns_and_result(cni, net, make_netns, tmp_path, node):
    pod_ns = await make_netns("pod")
    att = pod(pod_ns, capability_args={"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp",
                                                          "hostIP": ""}]})
    result = await cni.add(net, att)
    assert pod_ip_files(tmp_path / "ipam") == [str(result.ip_of().address.ip)]

    await cni.delete(net, att, result)
    assert "eth0" not in await links(pod_ns)
    assert pod_ip_files(tmp_path / "ipam") == []
    assert att.container_id not in await iptables_nat(node)

    await cni.delete(net, att, result)  # again
    await cni.delete(net, att)  # without the ADD result
    await cni.delete(net, Attachment(att.container_id, "", args=att.args))  # netns already gone, as containerd does
    await cni.delete(net, pod(pod_ns))  # a container that was never added
    await cni.delete(net, pod("/run/netns/pkltcni-never-created"))


async def test_check_passes_after_add_and_fails_clearly_without_eth0(cni, unique, subnet, tmp_path, make_netns):
    # bridge alone: Debian's portmap 1.1.1 fails CHECK on IPv4-only pods (containernetworking/plugins#819).
    net = bridge_network(f"pkltcni-{unique}", f"pkc{unique}", subnet, tmp_path / "ipam", portmap=False)
    pod_ns = await make_netns("pod")
    att = pod(pod_ns)
    result = await cni.add(net, att)
    await cni.check(net, att, result)

    await delete_link(pod_ns, "eth0")
    with pytest.raises(CNIError) as caught:
        await cni.check(net, att, result)
    assert caught.value.plugin == "bridge" and caught.value.command == "CHECK"
    assert "eth0" in caught.value.msg, str(caught.value)


async def test_port_mappings_dnat_a_host_port_to_the_pod(cni, net, make_netns, node, python):
    pod_ns = await make_netns("pod")
    host_port = 20000 + secrets.randbelow(10000)
    att = pod(pod_ns, capability_args={"portMappings": [{"hostPort": host_port, "containerPort": 8080,
                                                          "protocol": "tcp", "hostIP": ""}]})
    result = await cni.add(net, att)
    pod_ip, gateway = result.ip_of().address.ip, result.ip_of().gateway

    rules = await iptables_nat(node)
    assert f"--dport {host_port} -j DNAT --to-destination {pod_ip}:8080" in rules, rules
    assert f"--to-destination {pod_ip}:8080" not in await iptables_nat(None)  # not in the root netns

    # A listener in the pod, reached from the node through the node's own address and the host port.
    server = await asyncio.create_subprocess_exec(
        "nsenter", f"--net={pod_ns}", "--", python, "-c",
        "import socket,sys; s=socket.create_server(('0.0.0.0', 8080)); print('ready', flush=True); "
        "c,_=s.accept(); c.sendall(b'hello from the pod'); c.close()",
        stdout=asyncio.subprocess.PIPE)
    try:
        assert await asyncio.wait_for(server.stdout.readline(), 20) == b"ready\n"
        answer = await run_in(node, python, "-c",
                              "import socket; c=socket.create_connection((%r, %d), timeout=10); "
                              "print(c.recv(100).decode())" % (str(gateway), host_port))
        assert answer.strip() == "hello from the pod"
    finally:
        if server.returncode is None:
            server.kill()
        await server.wait()

    await cni.delete(net, att, result)
    assert f"--to-destination {pod_ip}:8080" not in await iptables_nat(node)


async def test_a_missing_plugin_and_a_plugin_error_are_clear(cni, unique, tmp_path, make_netns):
    pod_ns = await make_netns("pod")
    missing = parse_conflist({"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "pkltcni-no-such-plugin"}]})
    with pytest.raises(PluginNotFound, match=r"^cni plugin pkltcni-no-such-plugin ADD failed: failed to find plugin "
                                             r"'pkltcni-no-such-plugin' in path \['/usr/lib/cni'\]$"):
        await cni.add(missing, pod(pod_ns))

    bad = bridge_network(f"pkltcni-{unique}", f"pkc{unique}", "10.199.0.0/33", tmp_path / "ipam", portmap=False)
    with pytest.raises(CNIError) as caught:
        await cni.add(bad, pod(pod_ns))
    assert str(caught.value).startswith("cni plugin bridge ADD failed")
    assert "10.199.0.0/33" in str(caught.value)


async def test_plugin_netns_puts_the_bridge_in_the_node_not_the_root_netns(cni, net, make_netns, node, unique):
    result = await cni.add(net, pod(await make_netns("pod")))
    node_links = await links(node)
    assert node_links[f"pkc{unique}"].addresses == (ipaddress.ip_interface(f"{result.ip_of().gateway}/24"),)
    assert f"pkc{unique}" not in await links(None)
    # The veth's host end is in the node too.
    host_ends = [i.name for i in result.interfaces if not i.sandbox and i.name != f"pkc{unique}"]
    assert host_ends and all(name in node_links for name in host_ends)


async def test_loopback_brings_lo_up_in_the_pod(cni, make_netns):
    pod_ns = await make_netns("pod")
    await set_link_state(pod_ns, "lo", "down")  # the fixture brought it up
    net = parse_conflist({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"})
    att = Attachment(secrets.token_hex(16), pod_ns, ifname="lo")
    result = await cni.add(net, att)
    inside = await links(pod_ns)
    assert inside["lo"].up and ipaddress.ip_interface("127.0.0.1/8") in inside["lo"].addresses
    assert result.interfaces[0].name == "lo"
    await cni.delete(net, att, result)
    await cni.delete(net, att, result)


async def test_the_debian_plugins_speak_1_0_0_so_gc_is_a_no_op(cni, net, make_netns, tmp_path):
    versions = await cni.version("bridge")
    assert "1.0.0" in versions and "1.1.0" not in versions
    result = await cni.add(net, pod(await make_netns("pod")))
    await cni.gc(net, [])  # nothing is valid, but no plugin here knows GC
    assert pod_ip_files(tmp_path / "ipam") == [str(result.ip_of().address.ip)]
    await cni.status(net)  # and no STATUS: ready


async def test_without_plugin_netns_plugins_run_in_our_netns(unique, tmp_path, make_netns):
    # The root netns: a bridge without gateway, masquerade or port mappings, so nothing but the
    # bridge itself is left behind, and the fixture removes it.
    bridge = f"pkc{unique}"
    net = bridge_network(f"pkltcni-{unique}", bridge, "10.199.250.0/24", tmp_path / "ipam", portmap=False,
                         gateway=False, ip_masq=False)
    cni = CNI([CNI_BIN], timeout=30)
    pod_ns = await make_netns("pod")
    att = pod(pod_ns)
    try:
        result = await cni.add(net, att)
        assert bridge in await links(None)
        assert (await links(pod_ns))["eth0"].addresses == (result.ip_of().address,)
        await cni.delete(net, att, result)
        assert pod_ip_files(tmp_path / "ipam") == []
    finally:
        await delete_link(None, bridge)
    await wait_for(lambda: _absent(bridge), 5, f"bridge {bridge} removed from the root netns")


async def _absent(bridge: str) -> bool:
    return bridge not in await links(None)


async def test_a_1_1_0_network_is_refused_by_the_1_0_0_plugins_with_code_1(cni, unique, subnet, tmp_path, make_netns):
    net = bridge_network(f"pkltcni-{unique}", f"pkc{unique}", subnet, tmp_path / "ipam", portmap=False)
    newer = parse_conflist({"cniVersion": "1.1.0", "name": net.name, "plugins": list(net.plugins)})
    with pytest.raises(CNIError) as caught:
        await cni.add(newer, pod(await make_netns("pod")))
    assert caught.value.code == 1 and caught.value.msg == "incompatible CNI versions", str(caught.value)
