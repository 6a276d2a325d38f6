"""serverTLSBootstrap against the real control plane: the agent asks for its serving certificate
with a kubelet-serving CSR naming the node's addresses, serves no TLS until an admin approves it,
then serves the cluster-signed certificate on the kubelet API (verifiable against the cluster CA,
also after a restart, without a new CSR), and the apiserver still reaches it (`kubectl logs`)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
import stat

from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.cluster.conftest import STATE, cluster_sh, kubectl, kubectl_json, node_object, wait_ready
from tests.helpers import unmount_under, wait_for
from tests.runtime.conftest import BUSYBOX, NODE, AgentProcess

CA_CRT = STATE / "pki" / "ca.crt"
SIGNER = "kubernetes.io/kubelet-serving"


def serving_csrs() -> list[dict]:
    return [c for c in kubectl_json("get", "csr")["items"]
            if c["spec"].get("signerName") == SIGNER and c["spec"].get("username") == f"system:node:{NODE}"]


def node_ips() -> list[str]:
    addresses = (node_object() or {}).get("status", {}).get("addresses", [])
    return sorted(a["address"] for a in addresses if a["type"] in ("InternalIP", "ExternalIP"))


def served_certificate(ip: str, port: int) -> x509.Certificate | str:
    """The certificate the kubelet API serves at ip:port, verified against the cluster CA and for
    that IP; or why the handshake failed."""
    context = ssl.create_default_context(cafile=str(CA_CRT))
    try:
        with socket.create_connection((ip, port), timeout=5) as sock, \
                context.wrap_socket(sock, server_hostname=ip) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True))  # type: ignore[arg-type]
    except (ssl.SSLError, OSError) as e:
        return f"{type(e).__name__}: {e}"


async def certificate_at(ip: str, port: int) -> x509.Certificate | None:
    cert = await asyncio.to_thread(served_certificate, ip, port)
    return cert if isinstance(cert, x509.Certificate) else None


async def test_the_serving_certificate_comes_from_an_approved_kubelet_serving_csr(cluster, cri, namespace, tmp_path):
    before = {c["metadata"]["name"] for c in serving_csrs()}
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    kubeconfig = tmp_path / "node.kubeconfig"
    cluster_sh("node-kubeconfig", NODE, str(kubeconfig), timeout=60)
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                      "serverTLSBootstrap: true\n")
    agent = AgentProcess(tmp_path, manifests, "--config", str(config), "--kubeconfig", str(kubeconfig),
                         "--client-ca-file", str(CA_CRT)).start()
    try:
        await wait_ready(agent, 90)
        (csr,) = await wait_for(lambda: [c for c in serving_csrs() if c["metadata"]["name"] not in before], 60,
                                "a kubelet-serving CSR from the node", describe=agent.describe)
        name = csr["metadata"]["name"]
        # the CSR: the kubelet's, for the node's addresses
        assert sorted(csr["spec"]["usages"]) == ["digital signature", "server auth"]
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        assert request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
        assert [a.value for a in request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:nodes"]
        sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = node_ips()
        assert ips and sorted(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)) == ips
        assert sans.get_values_for_type(x509.DNSName) == [NODE]
        assert not csr.get("status", {}).get("conditions")  # nothing in the cluster approves it by itself

        # until it is approved, no TLS on the kubelet API, and the log says what to do
        await wait_for(lambda: f"kubectl certificate approve {name}" in agent.log(), 30, "the agent to name the CSR",
                       describe=agent.describe)
        refused = await asyncio.to_thread(served_certificate, ips[0], agent.api_port)
        assert isinstance(refused, str), "a certificate was served before the CSR was approved"

        kubectl("certificate", "approve", name)
        cert = await wait_for(lambda: certificate_at(ips[0], agent.api_port), 60,
                              "the kubelet API to serve the approved certificate", describe=agent.describe)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{NODE}"
        current = tmp_path / "root" / "pki" / "kubelet-server-current.pem"
        assert current.is_symlink() and os.readlink(current).startswith("kubelet-server-2")
        assert stat.S_IMODE(os.stat(current).st_mode) == 0o600
        assert not (tmp_path / "root" / "pki" / "kubelet.crt").exists()  # no self-signed one in this mode

        # the apiserver still reaches the node: kubectl logs goes through the kubelet API
        kubectl("apply", "-f", "-", stdin=_talker(namespace))
        await wait_for(lambda: "served-over-tls" in kubectl("logs", "-n", namespace, "talker", check=False).stdout,
                       90, "kubectl logs through the apiserver", describe=agent.describe)

        # a restart serves the stored certificate at once, without a new CSR
        agent.shutdown()
        agent.start()
        again = await wait_for(lambda: certificate_at(ips[0], agent.api_port), 60,
                               "the restarted agent to serve the stored certificate", describe=agent.describe)
        assert again.serial_number == cert.serial_number
        assert {c["metadata"]["name"] for c in serving_csrs()} - before == {name}
        kubectl("delete", "pod", "talker", "-n", namespace, "--wait=false")
        await wait_for(lambda: not kubectl_json("get", "pods", "-n", namespace)["items"], 60, "the pod to go",
                       describe=agent.describe)
    finally:
        agent.shutdown()
        unmount_under(str(tmp_path))
        for made in {c["metadata"]["name"] for c in serving_csrs()} - before:
            kubectl("delete", "csr", made, check=False)


def _talker(namespace: str) -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: talker, namespace: {namespace}}}\n"
            f"spec:\n  nodeName: {NODE}\n  terminationGracePeriodSeconds: 1\n"
            f"  containers: [{{name: main, image: '{BUSYBOX}', command: [sh, -c, 'echo served-over-tls; sleep 3600']}}]\n")
