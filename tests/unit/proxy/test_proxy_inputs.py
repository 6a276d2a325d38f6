"""Services and EndpointSlices to Service ports: kube-proxy's filters and joins, parsed once."""

from __future__ import annotations

from typing import Any

from pykubelet.proxy import inputs
from pykubelet.proxy.inputs import Inputs, service_ports

NODE = "node-a"


def service(name: str = "web", namespace: str = "ns", version: str = "1", **spec: Any) -> dict[str, Any]:
    spec = {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "type": "ClusterIP",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}], **spec}
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "resourceVersion": version}, "spec": spec}


def endpoint_slice(name: str, service_name: str = "web", namespace: str = "ns", version: str = "1",
                   endpoints: list[dict[str, Any]] | None = None, port_name: str = "http", port: int = 8080,
                   address_type: str = "IPv4") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": version,
                         "labels": {inputs.SERVICE_NAME_LABEL: service_name}},
            "addressType": address_type, "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": endpoints or []}


def address(ip: str, node: str = "node-b", **conditions: bool) -> dict[str, Any]:
    return {"addresses": [ip], "nodeName": node, "conditions": conditions}


def objects(*items: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["uid"]: item for item in items}


def test_a_service_port_gets_the_endpoints_of_its_named_port_sorted_and_deduplicated():
    slices = objects(
        endpoint_slice("web-1", endpoints=[address("10.244.2.9"), address("10.244.1.3", node=NODE)]),
        endpoint_slice("web-2", endpoints=[address("10.244.2.9", terminating=True), address("10.244.0.5")]),
        endpoint_slice("web-other", port_name="metrics", port=9100, endpoints=[address("10.244.7.7")]))
    ports = Inputs(NODE).service_ports(objects(service()), slices)
    (port,) = ports.values()
    assert str(port.name) == "ns/web:http" and port.cluster_ip == "10.96.0.10" and port.port == 80
    assert [str(e) for e in port.endpoints] == ["10.244.0.5:8080", "10.244.1.3:8080", "10.244.2.9:8080"]
    local = {e.ip: e.local for e in port.endpoints}
    assert local == {"10.244.0.5": False, "10.244.1.3": True, "10.244.2.9": False}
    # The same address in two slices counts once, and the copy that is not terminating wins.
    assert not next(e for e in port.endpoints if e.ip == "10.244.2.9").terminating


def test_unset_conditions_mean_ready_and_serving_but_not_terminating():
    slices = objects(endpoint_slice("s", endpoints=[{"addresses": ["10.244.0.1"]},
                                                    address("10.244.0.2", ready=False, serving=True, terminating=True)]))
    (port,) = Inputs(NODE).service_ports(objects(service()), slices).values()
    first, second = port.endpoints
    assert (first.ready, first.serving, first.terminating, first.local) == (True, True, False, False)
    assert (second.ready, second.serving, second.terminating) == (False, True, True)


def test_services_kube_proxy_does_not_proxy_are_left_out():
    assert service_ports(service(type="ExternalName", clusterIP="", clusterIPs=[])) == []
    assert service_ports(service(clusterIP="None", clusterIPs=["None"])) == []
    assert service_ports(service(clusterIP="fd00::1", clusterIPs=["fd00::1"])) == []  # IPv4 only
    # (Headless slices and Services with a service-proxy-name label never reach us: the watches' selectors.)
    assert inputs.SERVICES_QUERY == {"labelSelector": "!service.kubernetes.io/service-proxy-name",
                                     "fieldSelector": "spec.clusterIP!=None"}
    assert inputs.SLICES_QUERY == {"labelSelector": "!service.kubernetes.io/headless"}
    assert inputs.slice_ports(endpoint_slice("v6", address_type="IPv6")) is None


def test_the_fields_the_rules_need_are_read():
    (port,) = service_ports(service(
        type="NodePort", ports=[{"name": "", "port": 53, "protocol": "UDP", "nodePort": 30053}],
        externalIPs=["192.0.2.7"], externalTrafficPolicy="Local", internalTrafficPolicy="Local",
        sessionAffinity="ClientIP", loadBalancerSourceRanges=[" 198.51.100.0/24 "]))
    assert str(port.name) == "ns/web" and port.protocol == "udp" and port.node_port == 30053
    assert port.external_ips == ("192.0.2.7",) and port.external_local and port.internal_local
    assert port.affinity_seconds == 10800  # the API's default timeout
    assert port.source_ranges == ("198.51.100.0/24",)
    # externalTrafficPolicy only counts for a Service reachable from outside.
    (plain,) = service_ports(service(externalTrafficPolicy="Local"))
    assert not plain.external_local
    (anyone,) = service_ports(service(type="LoadBalancer", loadBalancerSourceRanges=["0.0.0.0/0"]))
    assert anyone.source_ranges == ()


def test_load_balancer_ips_in_vip_mode_only():
    obj = service(type="LoadBalancer")
    obj["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}, {"ip": "203.0.113.2", "ipMode": "Proxy"},
                                                  {"hostname": "lb.example"}]}}
    (port,) = service_ports(obj)
    assert port.load_balancer_ips == ("203.0.113.1",)


def test_a_malformed_object_is_left_out_and_the_others_still_count(caplog):
    bad = service("bad", clusterIP="10.96.0.999", clusterIPs=["10.96.0.999"])
    bad_slice = endpoint_slice("web-bad", endpoints=[address("not-an-ip")])
    good_slice = endpoint_slice("web-good", endpoints=[address("10.244.0.1")])
    ports = Inputs(NODE).service_ports(objects(bad, service()), objects(bad_slice, good_slice))
    assert [str(p.name) for p in ports.values()] == ["ns/web:http"]
    assert [e.ip for e in next(iter(ports.values())).endpoints] == ["10.244.0.1"]
    assert "spec.clusterIP" in caplog.text and "ns/bad" in caplog.text and "endpoints[0].addresses" in caplog.text


def test_unchanged_objects_are_not_parsed_again(monkeypatch):
    calls = []
    real = inputs.service_ports
    monkeypatch.setattr(inputs, "service_ports", lambda obj: calls.append(obj) or real(obj))
    view = Inputs(NODE)
    first = view.service_ports(objects(service()), {})
    second = view.service_ports(objects(service()), {})
    assert len(calls) == 1 and first == second
    view.service_ports(objects(service(version="2", ports=[{"name": "http", "port": 81}])), {})
    assert len(calls) == 2


def test_endpoints_follow_their_slices_and_a_deleted_service_goes():
    view = Inputs(NODE)
    slices = objects(endpoint_slice("web-1", endpoints=[address("10.244.0.1")]))
    (port,) = view.service_ports(objects(service()), slices).values()
    assert [e.ip for e in port.endpoints] == ["10.244.0.1"]
    slices = objects(endpoint_slice("web-1", version="2", endpoints=[address("10.244.0.2")]))
    (port,) = view.service_ports(objects(service()), slices).values()
    assert [e.ip for e in port.endpoints] == ["10.244.0.2"]
    assert view.service_ports({}, slices) == {}
