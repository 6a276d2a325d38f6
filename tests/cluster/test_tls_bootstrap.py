"""TLS bootstrap and client certificate rotation against the real control plane: a bootstrap
token (as `kubeadm token create` makes it), the CSR the csrapproving and csrsigning controllers
approve and sign, the node's own kubeconfig and cert store, and a forced rotation under a running
agent. Bad bootstrap input (wrong or expired token, a CA that does not match, a denied CSR) gives
one clear error and heals once fixed, and never takes down the pods already running."""

from __future__ import annotations

import base64
import datetime
import os
import pathlib
import subprocess
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.kube.certstore import CertStore
from pykubelet.kube.csr_keys import key_pem_of, node_subject
from pykubelet.kube.kubeconfig import read_kubeconfig
from tests.cluster.conftest import (CLUSTER_SH, STATE, apply, kubectl, kubectl_json, node_condition, node_object,
                                    running_pods, sleeper_deployment, wait_ready)
from tests.helpers import unmount_under, wait_for
from tests.runtime.conftest import NODE, AgentProcess, containers_of, phase, pod_manifest, write_manifest

CA_CRT, CA_KEY = STATE / "pki" / "ca.crt", STATE / "pki" / "ca.key"
MANUAL_GROUP = "system:bootstrappers:pykubelet:manual-approval"


def cluster_out(*args: str) -> str:
    result = subprocess.run(["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def bootstrap_kubeconfig(path: pathlib.Path, *extra: str, token: str = "") -> pathlib.Path:
    cluster_out("bootstrap-kubeconfig", token or cluster_out("bootstrap-token", *extra), str(path))
    return path


def csrs_of(user_prefix: str) -> list[dict]:
    return [c for c in kubectl_json("get", "csr")["items"] if c["spec"].get("username", "").startswith(user_prefix)]


def bootstrap_agent(tmp_path: pathlib.Path, boot: pathlib.Path, *extra: str) -> AgentProcess:
    (tmp_path / "manifests").mkdir(exist_ok=True)
    return AgentProcess(tmp_path, tmp_path / "manifests", "--bootstrap-kubeconfig", str(boot),
                        "--kubeconfig", str(tmp_path / "kubelet.conf"), "--cert-dir", str(tmp_path / "pki"),
                        "--client-ca-file", str(CA_CRT), *extra)


async def ready(agent: AgentProcess, timeout: float = 90) -> None:
    """This agent registered the Node (an earlier agent's Node may still look Ready), and it is Ready."""
    await wait_for(lambda: "Node registered" in agent.log().split(f"--- agent run {agent.runs} ---")[-1], timeout,
                   "the agent to register its Node", describe=agent.describe)
    await wait_ready(agent, timeout)


def stopped(agent: AgentProcess, tmp_path: pathlib.Path) -> None:
    agent.shutdown()
    unmount_under(str(tmp_path))


async def test_a_node_joins_with_a_bootstrap_token_and_keeps_its_identity(cluster, cri, tmp_path):
    before = {c["metadata"]["name"] for c in kubectl_json("get", "csr")["items"]}
    boot = bootstrap_kubeconfig(tmp_path / "bootstrap-kubelet.conf")
    token_id = read_kubeconfig(str(boot)).token.split(".")[0]
    agent = bootstrap_agent(tmp_path, boot, "--rotate-certificates").start()
    try:
        await ready(agent)
        # the CSR: the kubelet's, sent as the bootstrap token, auto-approved and signed
        (made,) = [c for c in csrs_of(f"system:bootstrap:{token_id}") if c["metadata"]["name"] not in before]
        assert made["metadata"]["name"].startswith("node-csr-")
        assert made["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        assert sorted(made["spec"]["usages"]) == ["client auth", "digital signature"]
        assert {"type": "Approved", "reason": "AutoApproved"}.items() <= made["status"]["conditions"][0].items()
        # the cert store and the kubeconfig written for the node
        pki = tmp_path / "pki"
        current = pki / "kubelet-client-current.pem"
        assert current.is_symlink() and os.readlink(current).startswith("kubelet-client-2")
        assert CertStore(str(pki)).current() is not None  # a pair that loads, its key matching
        cert = x509.load_pem_x509_certificate(current.read_bytes())
        assert cert.subject == node_subject(NODE)  # CN=system:node:<name>, O=system:nodes
        assert cert.issuer == x509.load_pem_x509_certificate(CA_CRT.read_bytes()).subject
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
        written = read_kubeconfig(str(tmp_path / "kubelet.conf"))
        assert written.server == read_kubeconfig(str(boot)).server and written.ca_pem == CA_CRT.read_bytes()
        assert b"BEGIN CERTIFICATE" in written.cert_pem  # both point at kubelet-client-current.pem
        assert "TLS bootstrap done" in agent.log()

        # kubeadm deletes the bootstrap kubeconfig after the join: the next start needs none, makes no CSR
        boot.unlink()
        stopped(agent, tmp_path)
        agent.start()
        await ready(agent)
        assert len(csrs_of(f"system:bootstrap:{token_id}")) == 1
        assert agent.proc is not None and agent.proc.poll() is None
    finally:
        stopped(agent, tmp_path)


def short_lived_node_pair(seconds: int) -> tuple[bytes, bytes]:
    """A client certificate for the node from the cluster's CA that expires in `seconds`."""
    ca_key = serialization.load_pem_private_key(CA_KEY.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(CA_CRT.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{NODE}")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=1)).not_valid_after(now + datetime.timedelta(seconds=seconds))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM), key_pem_of(key)


def lease_renewed_at() -> float:
    lease = kubectl_json("get", "lease", NODE, "-n", "kube-node-lease")
    renew = lease["spec"]["renewTime"]
    return datetime.datetime.strptime(renew[:19], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()


async def test_a_forced_rotation_swaps_the_certificate_under_the_running_agent(cluster, cri, namespace, tmp_path):
    """The node starts with a certificate that expires in 40 s: it renews at 70-90% of that with
    its own credentials, switches without restarting, and keeps working after the old one expired."""
    lifetime = 40
    store = CertStore(str(tmp_path / "pki"))
    first = store.save(*short_lived_node_pair(lifetime))
    old = store.current()
    assert old is not None
    kubeconfig = tmp_path / "kubelet.conf"
    cluster_out("bootstrap-kubeconfig", "unused", str(kubeconfig))  # server and CA of the cluster...
    text = kubeconfig.read_text().replace("    token: unused", f"    client-certificate: {store.current_path}\n"
                                                                f"    client-key: {store.current_path}")
    kubeconfig.write_text(text)  # ...and the cert store's current pair as the node's identity
    agent = AgentProcess(tmp_path, tmp_path / "manifests", "--kubeconfig", str(kubeconfig), "--cert-dir",
                         str(tmp_path / "pki"), "--rotate-certificates", "--client-ca-file", str(CA_CRT))
    (tmp_path / "manifests").mkdir()
    agent.start()
    try:
        await ready(agent)
        pid = agent.proc.pid  # type: ignore[union-attr]
        await wait_for(lambda: os.path.realpath(store.current_path) != first, lifetime, "the certificate to rotate",
                       interval=0.5, describe=agent.describe)
        rotated_at = time.time()
        new = store.current()
        assert new is not None
        # renewed within 70-90% of the old lifetime (plus the time to get a CSR signed)
        assert old.not_before + 0.7 * (old.not_after - old.not_before) - 1 <= rotated_at <= old.not_after
        assert new.not_after - new.not_before > 300 * 24 * 3600  # the signer's own duration (a year)
        (renewal,) = [c for c in csrs_of(f"system:node:{NODE}")
                      if x509.load_pem_x509_csr(base64.b64decode(c["spec"]["request"])).public_key()
                      == x509.load_pem_x509_certificate(open(store.current_path, "rb").read()).public_key()]
        assert renewal["status"]["conditions"][0]["reason"] == "AutoApproved"  # selfnodeclient

        # after the old certificate expired: heartbeats, watches and status writes all still work
        await wait_for(lambda: time.time() > old.not_after + 12, lifetime + 20, "the old certificate to expire")
        await wait_for(lambda: lease_renewed_at() > old.not_after + 1, 30, "a heartbeat with the new certificate",
                       describe=agent.describe)
        apply(sleeper_deployment(namespace, 1))
        await wait_for(lambda: running_pods(namespace, 1), 90, "a new pod Running on the node",
                       describe=agent.describe)
        assert agent.proc.pid == pid and agent.proc.poll() is None  # type: ignore[union-attr]
        log = agent.log()
        assert "Client certificate rotated" in log
        assert "Watch failed" not in log.split("Client certificate rotated")[-1]
        assert node_condition(node_object()).get("status") == "True"
        kubectl("delete", "deployment", "sleeper", "-n", namespace)
        await wait_for(lambda: not kubectl_json("get", "pods", "-n", namespace)["items"], 60, "the pod to go",
                       describe=agent.describe)
    finally:
        stopped(agent, tmp_path)


async def errors_logged(agent: AgentProcess, text: str, count: int, timeout: float = 60) -> list[str]:
    def lines() -> list[str]:
        return [line for line in agent.log().splitlines() if text in line]
    await wait_for(lambda: len(lines()) >= count, timeout, f"{count} log lines with {text!r}",
                   describe=agent.describe)
    return lines()


async def test_a_wrong_token_is_named_retried_and_heals_once_replaced_and_running_pods_stay(cluster, cri, tmp_path):
    """A pod the node already runs keeps running while the agent cannot get an identity."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifest(manifests, "keeper", pod_manifest("keeper", "sleep 3600"))
    standalone = AgentProcess(tmp_path, manifests).start()
    await standalone.wait_pod(f"keeper-{NODE}", lambda p: phase(p) == "Running", 60, "Running")
    standalone.shutdown()
    (keeper,) = await containers_of(cri, f"keeper-{NODE}")

    boot = tmp_path / "bootstrap-kubelet.conf"
    bootstrap_kubeconfig(boot, token="abcdef.0123456789abcdef")  # no such token
    agent = bootstrap_agent(tmp_path, boot).start()
    try:
        lines = await errors_logged(agent, "TLS bootstrap failed", 2)
        assert "401 Unauthorized" in lines[0] and "bootstrap token is wrong or has expired" in lines[0]
        assert str(boot) in lines[0]
        assert agent.proc.poll() is None  # type: ignore[union-attr]
        (still,) = await containers_of(cri, f"keeper-{NODE}")
        assert still.id == keeper.id and still.state == 1  # CONTAINER_RUNNING, never restarted

        bootstrap_kubeconfig(boot)  # the admin hands out a good token: the next attempt works
        await ready(agent, 120)
    finally:
        stopped(agent, tmp_path)
        for manifest in manifests.iterdir():
            manifest.unlink()


async def test_an_expired_token_is_named(cluster, cri, tmp_path):
    boot = bootstrap_kubeconfig(tmp_path / "bootstrap-kubelet.conf", "--ttl", "-3600")
    agent = bootstrap_agent(tmp_path, boot).start()
    try:
        (line, *_) = await errors_logged(agent, "TLS bootstrap failed", 1)
        assert "401 Unauthorized" in line and "expired" in line and str(boot) in line
        assert not (tmp_path / "kubelet.conf").exists()
    finally:
        stopped(agent, tmp_path)


async def test_a_ca_that_does_not_match_is_named(cluster, cri, tmp_path):
    boot = bootstrap_kubeconfig(tmp_path / "bootstrap-kubelet.conf")
    other_ca, _ = short_lived_node_pair(3600)  # any certificate that did not sign the apiserver's
    text = boot.read_text()
    ca_line = next(line for line in text.splitlines() if "certificate-authority-data" in line)
    boot.write_text(text.replace(ca_line, f"    certificate-authority-data: {base64.b64encode(other_ca).decode()}"))
    agent = bootstrap_agent(tmp_path, boot).start()
    try:
        (line, *_) = await errors_logged(agent, "TLS bootstrap failed", 1)
        assert "not signed by the CA in" in line and str(boot) in line
    finally:
        stopped(agent, tmp_path)


async def test_a_pending_csr_is_reported_and_a_denied_one_replaced(cluster, cri, tmp_path):
    """Tokens of a group nothing auto-approves: the agent waits (saying so, naming the CSR), a
    denial makes it ask again with a new key, and an admin's approval lets the node in."""
    boot = bootstrap_kubeconfig(tmp_path / "bootstrap-kubelet.conf", "--group", MANUAL_GROUP)
    token_id = read_kubeconfig(str(boot)).token.split(".")[0]
    agent = bootstrap_agent(tmp_path, boot).start()
    try:
        first = await wait_for(lambda: csrs_of(f"system:bootstrap:{token_id}"), 30, "the first CSR",
                               describe=agent.describe)
        name = first[0]["metadata"]["name"]
        await errors_logged(agent, "pending approval", 1, timeout=30)
        kubectl("certificate", "deny", name)
        (line, *_) = await errors_logged(agent, "was refused", 1)
        assert f"{name} was denied" in line
        second = await wait_for(lambda: [c for c in csrs_of(f"system:bootstrap:{token_id}")
                                         if c["metadata"]["name"] != name], 60, "a new CSR", describe=agent.describe)
        kubectl("certificate", "approve", second[0]["metadata"]["name"])
        await ready(agent)
        assert agent.runs == 1 and agent.proc.poll() is None  # type: ignore[union-attr]
    finally:
        stopped(agent, tmp_path)
