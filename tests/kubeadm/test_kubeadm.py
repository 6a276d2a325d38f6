"""pykubelet as the node's kubelet for kubeadm: `kubeadm init` with the control plane as static
pods it runs, `kubeadm join` of a second node with TLS bootstrap, a forced certificate rotation,
a broken config.yaml that heals, and `kubeadm reset`. The tests run in order on one cluster."""

from __future__ import annotations

import base64
import datetime
import json
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.kube.certstore import load_pair
from pykubelet.kube.csr_keys import key_pem_of, node_subject
from tests.helpers import wait_for
from tests.kubeadm.conftest import ControlPlane, pod_uids, read_yaml, reset
from tests.kubeadm.node import KubeadmNode

CONTROL_PLANE_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
CURRENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


def pod_ready(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


async def test_init_runs_the_control_plane_as_mirrored_static_pods_with_passing_probes(control_plane: ControlPlane):
    cp = control_plane.node

    def control_plane_pods():
        pods = {p["metadata"]["name"]: p for p in control_plane.kubectl_json("get", "pods", "-n", "kube-system")["items"]}
        wanted = [pods.get(f"{name}-{cp.name}") for name in CONTROL_PLANE_PODS]
        return wanted if all(p is not None and pod_ready(p) for p in wanted) else None
    def conditions() -> str:
        pods = control_plane.kubectl_json("get", "pods", "-n", "kube-system")["items"]
        return "\n".join(f"{p['metadata']['name']}: phase={p['status'].get('phase')} conditions="
                         f"{[(c['type'], c['status']) for c in p['status'].get('conditions') or []]}" for p in pods)
    pods = await wait_for(control_plane_pods, 120, "the control-plane pods Running and Ready", interval=1,
                          describe=lambda: f"{conditions()}\n{control_plane.describe()}")
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert "kubernetes.io/config.mirror" in annotations and annotations["kubernetes.io/config.source"] == "file"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Node"
        container = pod["spec"]["containers"][0]
        assert container.get("livenessProbe") or container.get("startupProbe")  # kubeadm's, run by pykubelet
        assert all(s["ready"] and s["started"] for s in pod["status"]["containerStatuses"])
    # kubeadm's files, as pykubelet read them
    config = read_yaml(cp, "/var/lib/kubelet/config.yaml")
    assert config["staticPodPath"] == "/etc/kubernetes/manifests" and config["rotateCertificates"] is True
    assert read_yaml(cp, "/var/lib/kubelet/instance-config.yaml")["containerRuntimeEndpoint"] == \
        "unix:///run/containerd/containerd.sock"
    flags = cp.read("/var/lib/kubelet/kubeadm-flags.env").decode()
    assert f"--hostname-override={cp.name}" in flags and f"--node-ip={cp.ip}" in flags
    log = cp.kubelet_log()
    assert "Unknown kubelet config field" not in log
    assert "invalid configuration" not in log
    # kubelet-finalize found the seeded cert store and pointed kubelet.conf at it
    kubelet_conf = read_yaml(cp, "/etc/kubernetes/kubelet.conf")
    assert kubelet_conf["users"][0]["user"]["client-certificate"] == CURRENT
    node = control_plane.kubectl_json("get", "node", cp.name)
    labels = node["metadata"]["labels"]
    assert labels["pykubelet.test/from"] == "kubeadm" and labels["pykubelet.test/extra-args"] == "yes"
    assert "node-role.kubernetes.io/control-plane" in labels  # mark-control-plane found the Node in time
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


async def test_join_bootstraps_a_second_node_that_runs_pods(control_plane: ControlPlane, worker: KubeadmNode):
    wide = control_plane.node.kubectl("get", "nodes", "-o", "wide").stdout
    rows = {line.split()[0]: line for line in wide.splitlines()[1:]}
    for node in (control_plane.node, worker):
        assert " Ready " in rows[node.name] and node.ip in rows[node.name] and "containerd://" in rows[node.name]
    # TLS bootstrap: kubeadm's bootstrap kubeconfig is gone, the node's own points at its cert store
    assert not worker.exists("/etc/kubernetes/bootstrap-kubelet.conf")
    conf = read_yaml(worker, "/etc/kubernetes/kubelet.conf")
    assert conf["users"][0]["user"] == {"client-certificate": CURRENT, "client-key": CURRENT}
    pem = worker.read(CURRENT)
    load_pair(pem, pem, CURRENT)  # its key matches
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject == node_subject(worker.name)  # CN=system:node:<name>, O=system:nodes
    token_id = control_plane.token.split(".")[0]
    # this node's (the conformance sample's second worker joined with the same token)
    csrs = [c for c in control_plane.kubectl_json("get", "csr")["items"]
            if c["spec"]["username"] == f"system:bootstrap:{token_id}"
            and x509.load_pem_x509_csr(base64.b64decode(c["spec"]["request"])).subject == cert.subject]
    assert [c["status"]["conditions"][0]["reason"] for c in csrs] == ["AutoApproved"]
    node = control_plane.kubectl_json("get", "node", worker.name)
    assert {"key": "pykubelet.test/joined", "value": "yes", "effect": "PreferNoSchedule"} in node["spec"]["taints"]
    # the node runs what the scheduler gives it, on the pod network
    control_plane.node.kubectl("run", "hello", "--image=docker.io/library/busybox:1.36", "--restart=Never",
                               f"--overrides={json.dumps({'spec': {'nodeName': worker.name}})}", "--",
                               "sh", "-c", "echo hello from $(hostname); sleep 3600")
    pod = await wait_for(lambda: (lambda p: p if pod_ready(p) else None)(
        control_plane.kubectl_json("get", "pod", "hello")), 90, "pod hello Running on the worker",
        describe=lambda: control_plane.describe(control_plane.node, worker))
    assert pod["status"]["podIP"].startswith("10.244.")  # flannel's network, from the worker's podCIDR
    logs = control_plane.node.kubectl("logs", "hello").stdout  # the apiserver reaches the worker's kubelet API
    assert logs.strip() == "hello from hello"


def short_lived_pair(control_plane: ControlPlane, node_name: str, seconds: int) -> bytes:
    """A certificate for the node from the cluster's CA (on the init node) that expires in `seconds`."""
    ca_key = serialization.load_pem_private_key(control_plane.node.read("/etc/kubernetes/pki/ca.key"), None)
    ca = x509.load_pem_x509_certificate(control_plane.node.read("/etc/kubernetes/pki/ca.crt"))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=1)).not_valid_after(now + datetime.timedelta(seconds=seconds))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    return cert.public_bytes(serialization.Encoding.PEM) + key_pem_of(key)


async def test_a_forced_rotation_renews_the_joined_nodes_certificate(control_plane: ControlPlane,
                                                                     worker: KubeadmNode):
    """The worker restarts with a certificate that expires in 30 s and renews it itself."""
    lifetime = 30
    pem = short_lived_pair(control_plane, worker.name, lifetime)
    old = load_pair(pem, pem, "short-lived")
    staged = worker.state / "short-lived.pem"
    staged.write_bytes(pem)
    worker.sh("sh", "-c", f"cp {staged} /var/lib/kubelet/pki/kubelet-client-short.pem && "
                          f"ln -sfn kubelet-client-short.pem {CURRENT} && systemctl restart kubelet")

    def current_target() -> str:
        return worker.sh("readlink", CURRENT).stdout.strip()
    await wait_for(lambda: current_target() not in ("kubelet-client-short.pem", ""), lifetime + 15,
                   "the certificate to rotate", interval=0.5,
                   describe=lambda: control_plane.describe(worker))
    new_pem = worker.read(CURRENT)
    new = load_pair(new_pem, new_pem, "rotated")
    assert new.not_after - new.not_before > 300 * 24 * 3600
    # The new pair is in place before the client switches to it; the agent says so once it has.
    await wait_for(lambda: "Client certificate rotated" in worker.kubelet_log(), 30,
                   "the agent to switch its client to the rotated certificate",
                   describe=lambda: control_plane.describe(worker))
    await wait_for(lambda: datetime.datetime.now(datetime.timezone.utc).timestamp() > old.not_after + 12,
                   lifetime + 20, "the old certificate to expire")
    await wait_for(lambda: control_plane.node_ready(worker.name), 30, "the worker still Ready",
                   describe=lambda: control_plane.describe(worker))
    kubelet_log = worker.kubelet_log().split("--- start ")[-1]
    assert "Unauthorized" not in kubelet_log


async def test_a_config_yaml_field_of_the_wrong_type_is_named_and_pods_keep_running(control_plane: ControlPlane,
                                                                                    worker: KubeadmNode):
    config = worker.read("/var/lib/kubelet/config.yaml").decode()
    running_before = set(pod_uids(worker))
    worker.sh("sh", "-c", "sed -i 's/^maxPods: .*$//' /var/lib/kubelet/config.yaml && "
                          "echo 'maxPods: plenty' >> /var/lib/kubelet/config.yaml && systemctl restart kubelet")
    try:
        await wait_for(lambda: worker.kubelet_log().count("field maxPods") >= 2, 60,
                       "the error, once per restart by the init system", describe=worker.kubelet_log)
        line = next(line for line in worker.kubelet_log().splitlines() if "field maxPods" in line)
        assert "/var/lib/kubelet/config.yaml" in line and "must be a positive integer" in line
        assert set(pod_uids(worker)) == running_before  # nothing stopped while the agent cannot start
    finally:
        staged = worker.state / "config.yaml"
        staged.write_text(config)
        worker.sh("sh", "-c", f"cp {staged} /var/lib/kubelet/config.yaml")
    await wait_for(lambda: "Node registered" in worker.kubelet_log().split("--- start ")[-1], 60,
                   "the agent back with the fixed file", describe=worker.kubelet_log)
    await wait_for(lambda: control_plane.node_ready(worker.name), 60, "the worker Ready again")
    pod = control_plane.kubectl_json("get", "pod", "hello")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0 and pod_ready(pod)


def leftovers(node: KubeadmNode) -> list[str]:
    """What kubeadm reset must not leave: pods, kubelet mounts, pod network namespaces, the agent."""
    out = [f"pod {uid}" for uid in pod_uids(node)]
    mounts = node.sh("cat", "/proc/mounts").stdout.splitlines()
    out += [f"mount {m.split()[1]}" for m in mounts if m.split()[1].startswith("/var/lib/kubelet")]
    # pod network namespaces the node's containerd made: mounts only the node's namespace has
    with open("/proc/mounts") as f:
        machine = {line.split()[1] for line in f}
    out += [f"netns {m.split()[1]}" for m in mounts if "/netns/" in m.split()[1] and m.split()[1] not in machine]
    if node.sh("systemctl", "is-active", "kubelet", check=False).returncode == 0:
        out.append("kubelet still active")
    for path in ("/etc/kubernetes/kubelet.conf", "/etc/kubernetes/manifests/kube-apiserver.yaml",
                 "/var/lib/kubelet/config.yaml", "/var/lib/etcd/member"):
        if node.exists(path):
            out.append(f"file {path}")
    return out


async def test_reset_leaves_no_pods_mounts_or_network_state(control_plane: ControlPlane, worker: KubeadmNode):
    control_plane.node.kubectl("delete", "pod", "hello", "--grace-period=1")
    control_plane.node.kubectl("drain", worker.name, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                               "--timeout=60s")  # metrics-server has an emptyDir
    for node in (worker, control_plane.node):
        result = reset(node)
        assert result.returncode == 0, result.stderr
        assert leftovers(node) == [], f"kubeadm reset on {node.name} left these"
        assert os.path.isdir(node.state)  # (the node itself goes with the fixture)
