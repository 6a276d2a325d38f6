"""The kubelet API on a pykubelet node, used as users use it: kubectl logs, exec, attach, cp and
port-forward through the real apiserver, the stats and metrics the apiserver proxies, and the
node's authentication and authorization seen from outside."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import secrets
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import ADMIN, KUBECTL, STATE, apply, kubectl, kubectl_json, running_pods
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE


def pod(name: str, namespace: str, command: str, restart: str = "Always", **container: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE}, "terminationGracePeriodSeconds": 1,
                     "restartPolicy": restart, "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command],
                                     **container}]}}


def pod_status(namespace: str, name: str) -> dict[str, Any]:
    return kubectl_json("get", "pod", name, "-n", namespace).get("status", {})


def main_state(namespace: str, name: str) -> dict[str, Any]:
    statuses = pod_status(namespace, name).get("containerStatuses") or [{}]
    return statuses[0]


async def start(namespace: str, *manifests: dict[str, Any], agent=None) -> None:
    for manifest in manifests:
        apply(manifest)
    await wait_for(lambda: running_pods(namespace, len(manifests)), 90, "the pods Running",
                   describe=agent.describe if agent else None)


def direct(agent, path: str, token: str | None = None, cert: str | None = None) -> tuple[int, str]:
    """GET https://127.0.0.1:<agent's API port><path> straight to the node, not via the apiserver."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert:
        context.load_cert_chain(STATE / "pki" / f"{cert}.crt", STATE / "pki" / f"{cert}.key")
    request = urllib.request.Request(f"https://127.0.0.1:{agent.api_port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=20) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def api_answers(agent) -> bool:
    try:
        return direct(agent, "/healthz", cert="apiserver-kubelet-client")[0] == 200
    except OSError:
        return False


def raw(path: str) -> subprocess.CompletedProcess[str]:
    return kubectl("get", "--raw", f"/api/v1/nodes/{NODE}/proxy{path}", check=False)


async def test_logs_with_every_option(node_agent, namespace):
    long_line = "x" * 40000  # containerd writes it as partial (P) pieces; they must come back as one line
    apply(pod("talker", namespace, f"echo early; sleep 0.3; echo to-stderr >&2; sleep 2; echo late; echo {long_line}; "
                                   "for i in 1 2 3; do echo tail-$i; done; sleep 3600"))
    apply(pod("waiting", namespace, "true", image="example.invalid/none:1", imagePullPolicy="Never"))
    await wait_for(lambda: "tail-3" in kubectl("logs", "talker", "-n", namespace, check=False).stdout, 90,
                   "the talker's output", describe=node_agent.describe)

    out = kubectl("logs", "talker", "-n", namespace).stdout
    assert out.splitlines() == ["early", "to-stderr", "late", long_line, "tail-1", "tail-2", "tail-3"]
    assert kubectl("logs", "talker", "-n", namespace, "--tail=2").stdout == "tail-2\ntail-3\n"
    assert kubectl("logs", "talker", "-n", namespace, "--limit-bytes=8").stdout == "early\nto"
    stamped = kubectl("logs", "talker", "-n", namespace, "--timestamps").stdout.splitlines()
    assert len(stamped) == 7
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z \S", line) for line in stamped)
    late_time = stamped[2].split(" ", 1)[0]
    since = kubectl("logs", "talker", "-n", namespace, f"--since-time={late_time}").stdout.splitlines()
    assert since[0] == "late" and "early" not in since
    assert "early" in kubectl("logs", "talker", "-n", namespace, "--since=1h").stdout

    missing = kubectl("logs", "ghost", "-n", namespace, check=False)
    assert missing.returncode != 0 and "not found" in missing.stderr
    await wait_for(lambda: main_state(namespace, "waiting").get("state", {}).get("waiting", {}).get("reason")
                   == "ErrImageNeverPull", 60, "the waiting pod's reason")
    waiting = kubectl("logs", "waiting", "-n", namespace, check=False)
    assert waiting.returncode != 0
    assert 'container "main" in pod "waiting" is waiting to start: ErrImageNeverPull' in waiting.stderr
    previous = kubectl("logs", "talker", "-n", namespace, "--previous", check=False)
    assert 'previous terminated container "main" in pod "talker" not found' in previous.stderr


async def test_logs_follow_ends_with_the_container_and_previous_shows_the_last_run(node_agent, namespace):
    apply(pod("ticker", namespace, "for i in 1 2 3 4 5 6; do echo tick-$i; sleep 0.5; done", restart="Never"))
    apply(pod("crasher", namespace, "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 2; exit 1"))
    await wait_for(lambda: main_state(namespace, "ticker").get("started"), 90, "the ticker running",
                   describe=node_agent.describe)
    began = time.monotonic()
    followed = subprocess.run([str(KUBECTL), "--kubeconfig", str(ADMIN), "logs", "-f", "ticker", "-n", namespace],
                              capture_output=True, text=True, timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[-1] == "tick-6"
    assert time.monotonic() - began < 30  # it ended with the container, not at a timeout

    await wait_for(lambda: main_state(namespace, "crasher").get("restartCount", 0) >= 1
                   and main_state(namespace, "crasher").get("lastState", {}).get("terminated"), 90,
                   "the crasher restarted", describe=node_agent.describe)
    status = main_state(namespace, "crasher")
    previous = kubectl("logs", "crasher", "-n", namespace, "--previous").stdout
    assert previous.startswith("run-")
    current = kubectl("logs", "crasher", "-n", namespace, check=False).stdout
    if "running" in status["state"] and current:
        assert current != previous  # another run, another line


async def test_exec_streams_exit_codes_stdin_and_a_terminal(node_agent, namespace):
    await start(namespace, pod("shell", namespace, "sleep 3600"), agent=node_agent)
    split = kubectl("exec", "shell", "-n", namespace, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert (split.returncode, split.stdout, split.stderr.splitlines()[0]) == (3, "out\n", "err")
    piped = kubectl("exec", "-i", "shell", "-n", namespace, "--", "sh", "-c", "tr a-z A-Z", stdin="hello\n")
    assert piped.stdout == "HELLO\n"
    # -it under a real pseudo-terminal: `script` gives kubectl one; we type into it.
    command = f"{KUBECTL} --kubeconfig {ADMIN} exec -it shell -n {namespace} -- sh"
    typed = subprocess.run(["script", "-qec", command, "/dev/null"], input="echo $((6*7))-$(tty)\nexit 7\n",
                           capture_output=True, text=True, timeout=60)
    assert re.search(r"42-/dev/pts/\d+", typed.stdout), typed.stdout + typed.stderr
    assert typed.returncode == 7


async def test_attach_and_cp_both_ways(node_agent, namespace, tmp_path: pathlib.Path):
    # The reader waits for a line, answers and exits: attach ends with it.
    await start(namespace, pod("reader", namespace, "read line; echo got:$line; sleep 1", restart="Never",
                               stdin=True), pod("files", namespace, "sleep 3600"), agent=node_agent)
    # stdin stays open until the answer is back: the runtime ends an attach whose stdin closed.
    attach = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(ADMIN), "attach", "-i", "reader", "-n", namespace],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        attach.stdin.write("hello\n")
        attach.stdin.flush()
        answer = await asyncio.wait_for(asyncio.to_thread(attach.stdout.readline), 30)
        assert answer == "got:hello\n"
    finally:
        attach.kill()
        attach.wait(10)
    assert "got:hello" in kubectl("logs", "reader", "-n", namespace).stdout

    payload = secrets.token_hex(50000)
    local = tmp_path / "up.txt"
    local.write_text(payload)
    kubectl("cp", str(local), f"{namespace}/files:/tmp/up.txt")
    assert kubectl("exec", "files", "-n", namespace, "--", "md5sum", "/tmp/up.txt").stdout.split()[0] == \
        subprocess.run(["md5sum", str(local)], capture_output=True, text=True).stdout.split()[0]
    kubectl("exec", "files", "-n", namespace, "--", "sh", "-c", "echo from-pod > /tmp/down.txt")
    back = tmp_path / "down.txt"
    kubectl("cp", f"{namespace}/files:/tmp/down.txt", str(back))
    assert back.read_text() == "from-pod\n"


async def test_port_forward_reaches_the_pods_server(node_agent, namespace):
    await start(namespace, pod("web", namespace, "mkdir /www; echo served-by-pod > /www/index.html; "
                                                 "httpd -f -p 8080 -h /www"), agent=node_agent)
    forward = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(ADMIN), "port-forward", "web", ":8080", "-n",
                                namespace], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = forward.stdout.readline()  # "Forwarding from 127.0.0.1:NNNNN -> 8080"
        match = re.search(r"127\.0\.0\.1:(\d+) -> 8080", line)
        assert match, line + (forward.stderr.read() if forward.poll() is not None else "")
        with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/index.html", timeout=20) as r:
            assert r.read() == b"served-by-pod\n"
    finally:
        forward.terminate()
        forward.wait(10)


async def test_stats_summary_and_resource_metrics_name_every_running_pod(node_agent, namespace):
    names = [f"busy-{i}" for i in range(3)]
    burn = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; sleep 3600"  # some CPU, then idle
    await start(namespace, *(pod(n, namespace, burn) for n in names),
                agent=node_agent)
    result = raw("/stats/summary")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["node"]["nodeName"] == NODE and summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0
    pods = {p["podRef"]["name"]: p for p in summary["pods"] if p["podRef"]["namespace"] == namespace}
    assert set(pods) == set(names)
    for p in pods.values():
        assert p["cpu"]["usageCoreNanoSeconds"] > 0 and p["cpu"]["usageNanoCores"] > 0
        assert p["memory"]["workingSetBytes"] > 0
        (c,) = p["containers"]
        assert c["name"] == "main" and c["cpu"]["usageCoreNanoSeconds"] > 0 and c["memory"]["workingSetBytes"] > 0
        assert p["network"]["name"] == "eth0" and "rxBytes" in p["network"]

    resource = raw("/metrics/resource")
    assert resource.returncode == 0, resource.stderr
    families = {f.name: f for f in text_string_to_metric_families(resource.stdout)}
    for family, label in (("container_cpu_usage_seconds", "pod"), ("container_memory_working_set_bytes", "pod"),
                          ("pod_cpu_usage_seconds", "pod"), ("container_start_time_seconds", "pod")):
        samples = {s.labels[label]: s.value for s in families[family].samples
                   if s.labels.get("namespace") == namespace}
        assert set(samples) == set(names) and all(v > 0 for v in samples.values()), family
    assert families["node_cpu_usage_seconds"].samples[0].value > 0
    assert families["scrape_error"].samples[0].value == 0


async def test_metrics_healthz_configz_and_node_logs(node_agent, namespace):
    await start(namespace, pod("one", namespace, "sleep 3600"), agent=node_agent)
    result = raw("/metrics")
    assert result.returncode == 0, result.stderr
    families = {f.name: f for f in text_string_to_metric_families(result.stdout)}
    assert families["kubelet_running_pods"].samples[0].value >= 1
    assert families["kubelet_node_name"].samples[0].labels == {"node": NODE}
    operations = {s.labels["operation_type"] for s in families["kubelet_runtime_operations"].samples}
    assert {"run_podsandbox", "create_container", "start_container"} <= operations
    assert families["kubelet_pleg_relist_duration_seconds"].samples
    assert any(s.labels["container_state"] == "running" and s.value >= 1
               for s in families["kubelet_running_containers"].samples)

    assert raw("/healthz").stdout == "ok"
    config = json.loads(raw("/configz").stdout)["kubeletconfig"]
    assert config["port"] == node_agent.api_port and config["authorization"]["mode"] == "Webhook"
    assert config["authentication"]["anonymous"]["enabled"] is False
    pods = json.loads(raw("/pods").stdout)
    assert "one" in {p["metadata"]["name"] for p in pods["items"]}
    node = kubectl_json("get", "node", NODE)
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == node_agent.api_port

    listing = raw("/logs/")
    # The apiserver rewrites the links of HTML it proxies; their text is the entry's name.
    assert listing.returncode == 0 and all(f">{n}" in listing.stdout for n in os.listdir("/var/log")[:5])
    for escape in ("/logs/%2e%2e/etc/passwd", "/logs/..%2fetc/passwd"):
        through_api = raw(escape)
        assert "root:x:0:0" not in through_api.stdout
        status, body = direct(node_agent, escape, cert="apiserver-kubelet-client")
        assert status == 403 and "root:x:0:0" not in body


async def test_authentication_and_authorization(node_agent, namespace):
    # The Node may still be Ready from the previous test's agent: wait for this one's API.
    await wait_for(lambda: api_answers(node_agent), 30, "the agent's kubelet API", describe=node_agent.describe)
    status, body = direct(node_agent, "/pods")
    assert (status, body) == (401, "Unauthorized")
    assert direct(node_agent, "/healthz", token="not-a-real-token") == (401, "Unauthorized")
    assert direct(node_agent, "/healthz", cert="apiserver-kubelet-client") == (200, "ok")

    kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    kubectl("create", "serviceaccount", "reader", "-n", namespace)
    role = f"{namespace}-nodes-proxy"
    apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]}])
    try:
        nobody = kubectl("create", "token", "nobody", "-n", namespace).stdout.strip()
        status, body = direct(node_agent, "/pods", token=nobody)
        assert status == 403
        assert body == (f"Forbidden (user=system:serviceaccount:{namespace}:nobody, verb=get, resource=nodes, "
                        "subresource(s)=[pods proxy])\n")
        status, body = direct(node_agent, "/metrics", token=nobody)
        assert status == 403 and "subresource(s)=[metrics]" in body
        reader = kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
        status, body = await wait_for(lambda: (r := direct(node_agent, "/pods", token=reader))[0] == 200 and r,
                                      45, "the reader allowed once RBAC has the binding")
        assert json.loads(body)["kind"] == "PodList"
    finally:
        kubectl("delete", "clusterrolebinding,clusterrole", role, "--ignore-not-found", check=False)
