"""The node as the control plane sees it: can the agent reach the apiserver with its credentials,
when do they expire, is its Lease fresh, what do the Node's conditions say, and do the two
clocks agree (the apiserver's Date header against ours).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from pykubelet.diagnose.checks import FAIL, OK, WARN, Node, ago, span
from pykubelet.diagnose.doctor_host import certificate_check
from pykubelet.util.timeouts import within

AREA = "API server"
TIMEOUT = 5.0
LEASE_NAMESPACE = "kube-node-lease"


class Apiserver:
    """GETs with the node's own kubeconfig (kubernetes_asyncio does TLS and credential plugins)."""

    def __init__(self, api: Any):
        self.api = api
        self.host = api.configuration.host

    @classmethod
    async def connect(cls, kubeconfig: str) -> "Apiserver":
        from pykubelet.kube.rest_layer import ApiClient, Configuration, load_kube_config

        configuration = Configuration()
        await load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return cls(ApiClient(configuration))

    async def get(self, path: str) -> tuple[int, Any, float | None]:
        """(HTTP status, decoded body, seconds the server's clock is ahead of ours)."""
        sent = time.time()
        response = await within(self.api.call_api(
            path, "GET", header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=TIMEOUT), TIMEOUT + 1)
        try:
            body = await response.read()
        finally:
            response.release()
        offset = None
        if response.headers.get("Date"):
            # Date has whole seconds: the server's time lies in [date, date + 1).
            server = parsedate_to_datetime(response.headers["Date"]).timestamp() + 0.5
            offset = server - (sent + time.time()) / 2
        try:
            return response.status, json.loads(body) if body else None, offset
        except ValueError:
            return response.status, body.decode(errors="replace"), offset

    async def close(self) -> None:
        await self.api.close()


def _message(body: Any) -> str:
    return body.get("message", "") if isinstance(body, dict) else str(body)[:200]


def _rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def _credentials(node: Node, api: Apiserver) -> None:
    configuration = api.api.configuration
    kubeconfig = node.settings.cluster.kubeconfig
    if configuration.cert_file:
        try:
            named = configuration.cert_file in open(kubeconfig, encoding="utf-8").read()
        except OSError:
            named = False
        # Embedded data (client-certificate-data) is copied to a file of kubernetes_asyncio's: name the kubeconfig.
        more = "" if named else (f"kubectl config view --raw --minify --kubeconfig {kubeconfig} -o jsonpath="
                                 "'{.users[0].user.client-certificate-data}' | base64 -d | openssl x509 -noout "
                                 "-subject -dates")
        certificate_check(node, AREA, "client certificate", configuration.cert_file, label="" if named else kubeconfig,
                          expect_cn=f"system:node:{node.settings.node_name}", more=more)
        return
    token = (configuration.api_key or {}).get("BearerToken") or (configuration.api_key or {}).get("authorization")
    if token:
        node.add(AREA, OK, f"credentials: a bearer token from {kubeconfig} (its expiry is the apiserver's to know)")
    else:
        node.add(AREA, WARN, f"{kubeconfig} holds no client certificate or token: requests are anonymous")


async def _node_conditions(node: Node, api: Apiserver, more: str) -> None:
    name = node.settings.node_name
    code, body, node.apiserver_offset = await api.get(f"/api/v1/nodes/{name}")
    if code == 401:
        node.add(AREA, FAIL, f"the apiserver at {api.host} rejects the node's credentials (401 Unauthorized)",
                 ["expired or revoked, or signed by a CA this cluster does not trust: see Certificates"], more)
        return
    if code == 403:
        node.add(AREA, FAIL, f"the apiserver forbids reading Node {name} (403): {_message(body)}",
                 [f"a node may read only its own Node: are the credentials system:node:{name}'s?"], more)
        return
    if code == 404:
        node.add(AREA, OK if node.agent is None else WARN, f"the apiserver at {api.host} answers; Node {name} does "
                                                           "not exist yet (the agent registers it when it starts)",
                 more=more)
        return
    if code != 200:
        node.add(AREA, FAIL, f"the apiserver at {api.host} answers HTTP {code}: {_message(body)}", more=more)
        return
    node.node_object = body
    node.add(AREA, OK, f"the apiserver at {api.host} answers and accepts the node's credentials", more=more)
    conditions = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready", {})
    heartbeat = f"; last heartbeat {ago(_rfc3339(ready['lastHeartbeatTime']))}" if ready.get("lastHeartbeatTime") else ""
    text = f"Node {name}: Ready={ready.get('status', 'missing')} ({ready.get('reason', '')}: {ready.get('message', '')}" \
           f"){heartbeat}"
    pressure = [f"{kind}=True: {c.get('message', '')}" for kind, c in conditions.items()
                if kind != "Ready" and c.get("status") == "True"]
    node.add(AREA, OK if ready.get("status") == "True" else FAIL, text, pressure,
             f"kubectl describe node {name}")


async def _lease(node: Node, api: Apiserver) -> None:
    name = node.settings.node_name
    code, body, _ = await api.get(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}")
    more = f"kubectl -n {LEASE_NAMESPACE} get lease {name} -o yaml"
    if code == 404:
        node.add(AREA, FAIL if node.node_object else WARN, f"no Lease {LEASE_NAMESPACE}/{name}: the agent has not "
                                                          "heartbeated yet", more=more)
        return
    if code != 200:
        node.add(AREA, WARN, f"cannot read Lease {LEASE_NAMESPACE}/{name}: HTTP {code}: {_message(body)}", more=more)
        return
    spec = body.get("spec") or {}
    duration = spec.get("leaseDurationSeconds") or node.settings.cluster.lease_duration_seconds
    if not spec.get("renewTime"):
        node.add(AREA, FAIL, f"Lease {LEASE_NAMESPACE}/{name} was never renewed", more=more)
        return
    age = time.time() - _rfc3339(spec["renewTime"])
    if age > duration:
        node.add(AREA, FAIL, f"Lease last renewed {span(age)} ago, longer than its {duration}s: the control plane "
                             "sees the node as gone (Ready=Unknown)", [f"holder {spec.get('holderIdentity', '?')}"], more)
    elif age > duration / 2:
        node.add(AREA, WARN, f"Lease last renewed {span(age)} ago (renewed every {duration / 4:g}s, expires after "
                             f"{duration}s)", more=more)
    else:
        node.add(AREA, OK, f"Lease renewed {ago(time.time() - age)} (every {duration / 4:g}s; expires after {duration}s)")


async def _all_nodes(node: Node, api: Apiserver) -> None:
    code, body, _ = await api.get("/api/v1/nodes")
    if code == 200:
        node.nodes = body.get("items") or []
    else:
        node.add(AREA, WARN, f"the node may not list Nodes (HTTP {code}): it cannot route to other nodes' pods",
                 ["grant it once per cluster: kubectl apply -f cni/node-network-rbac.yaml"])


async def check(node: Node) -> None:
    s = node.settings
    if not s.cluster.kubeconfig:
        node.add(AREA, OK, "standalone (no --kubeconfig): no apiserver, Node or Lease to check")
        return
    more = f"kubectl --kubeconfig {s.cluster.kubeconfig} get --raw /readyz"
    try:
        api = await Apiserver.connect(s.cluster.kubeconfig)
    except Exception as e:  # kubernetes_asyncio raises many kinds for a bad kubeconfig
        node.add(AREA, FAIL, f"cannot use the kubeconfig {s.cluster.kubeconfig}: {e}", more=f"cat {s.cluster.kubeconfig}")
        return
    try:
        _credentials(node, api)
        await _node_conditions(node, api, more)
        await _lease(node, api)
        if node.node_object is not None and (s.network.mode == "agent" or s.network.write_runtime_config):
            await _all_nodes(node, api)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        node.add(AREA, FAIL, f"cannot reach the apiserver at {api.host}: {e or type(e).__name__}", [
            "the agent cannot renew its Lease or report status: the node turns NotReady (Unknown)",
            "pods keep running; new ones are not started here"], more)
    finally:
        await api.close()

