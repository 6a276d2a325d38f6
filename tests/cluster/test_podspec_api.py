"""The apiserver-backed PodSpec on a real control plane: configMap, secret, downwardAPI and
projected volumes (service account token included), env from ConfigMaps and Secrets, envFrom,
service links. Containers print what they see; the tests read it from the CRI log files (there
is no 10250 server for `kubectl logs`) and from the volume directories on the host.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import ssl
import stat
import urllib.error
import urllib.request
from typing import Any

from tests.cluster.conftest import STATE, apply, kubectl, kubectl_json
from tests.helpers import wait_for
from tests.runtime.conftest import BUSYBOX, NODE

API = "https://127.0.0.1:6443"


def pod(namespace: str, name: str, script: str, volumes: list[dict[str, Any]] | None = None,
        mounts: list[dict[str, Any]] | None = None, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 1, "nodeSelector": {"kubernetes.io/hostname": NODE},
                 "volumes": volumes or [],
                 "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", script],
                                 "volumeMounts": mounts or [], **container}]},
    }


def config_map(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def secret(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "stringData": data}


def get_pod(namespace: str, name: str) -> dict[str, Any] | None:
    result = kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def running(namespace: str, name: str) -> dict[str, Any] | None:
    p = get_pod(namespace, name)
    if p and p["status"].get("phase") == "Running" and \
            all("running" in c.get("state", {}) for c in p["status"].get("containerStatuses", [])):
        return p
    return None


def waiting(namespace: str, name: str) -> dict[str, Any]:
    p = get_pod(namespace, name) or {}
    statuses = p.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("state", {}).get("waiting", {})


def output(agent, namespace: str, name: str, container: str = "main") -> str:
    """Everything the container wrote, from its CRI log files (<ts> <stream> <tag> <text>)."""
    lines = []
    for path in sorted(agent.logs_dir.glob(f"{namespace}_{name}_*/{container}/*.log")):
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4:
                lines.append(parts[3])
    return "\n".join(lines)


def volume_dir(agent, p: dict[str, Any], plugin: str, volume: str) -> pathlib.Path:
    return agent.workdir / "root" / "pods" / p["metadata"]["uid"] / "volumes" / plugin / volume


def events(namespace: str, reason: str) -> list[str]:
    items = kubectl_json("get", "events", "-n", namespace, "--field-selector", f"reason={reason}")["items"]
    return [e.get("message", "") for e in items]


async def test_config_map_volume_items_modes_optional_and_updates(node_agent, namespace):
    apply(config_map(namespace, "cfg", {"greeting": "hello", "colour": "blue"}))
    apply(pod(namespace, "reader",
              "touch /etc/cfg/x 2>/dev/null && echo writable || echo read-only; "
              "while true; do echo \"greeting=$(cat /etc/cfg/greet/text) colour=$(cat /etc/colour.conf) "
              "all=$(ls /etc/all | tr '\\n' ,)\"; "
              "sleep 0.3; done",
              volumes=[{"name": "cfg", "configMap": {"name": "cfg", "items": [
                           {"key": "greeting", "path": "greet/text", "mode": 0o400}]}},
                       {"name": "all", "configMap": {"name": "cfg", "defaultMode": 0o600}},
                       {"name": "maybe", "configMap": {"name": "not-there", "optional": True}}],
              mounts=[{"name": "cfg", "mountPath": "/etc/cfg"}, {"name": "all", "mountPath": "/etc/all"},
                      {"name": "maybe", "mountPath": "/etc/maybe"},
                      {"name": "all", "mountPath": "/etc/colour.conf", "subPath": "colour"}]))
    p = await wait_for(lambda: running(namespace, "reader"), 60, "the reader pod to run", describe=node_agent.describe)
    await wait_for(lambda: "greeting=hello colour=blue all=colour,greeting," in output(node_agent, namespace, "reader"), 30,
                   "the container to print the configMap", describe=node_agent.describe)
    assert "read-only" in output(node_agent, namespace, "reader")

    # The kubelet's layout on the host: ..data -> ..<timestamp>, one link per top-level path.
    host = volume_dir(node_agent, p, "kubernetes.io~configmap", "cfg")
    assert os.readlink(host / "..data").startswith("..20")
    assert os.readlink(host / "greet") == "..data/greet"
    assert stat.S_IMODE((host / "greet" / "text").stat().st_mode) == 0o400
    everything = volume_dir(node_agent, p, "kubernetes.io~configmap", "all")
    assert stat.S_IMODE((everything / "colour").stat().st_mode) == 0o600
    maybe = volume_dir(node_agent, p, "kubernetes.io~configmap", "maybe")  # optional and missing: empty
    assert (maybe / "..data").is_symlink() and not [e for e in maybe.iterdir() if not e.name.startswith("..")]

    # An update reaches the running container within seconds (the object is watched).
    kubectl("patch", "configmap", "cfg", "-n", namespace, "--type", "merge", "-p",
            json.dumps({"data": {"greeting": "bonjour", "colour": "red", "shape": "round"}}))
    # ...except through a subPath mount, which keeps the file it was given (as with the kubelet).
    await wait_for(lambda: "greeting=bonjour colour=blue all=colour,greeting,shape," in output(node_agent, namespace,
                                                                                               "reader"),
                   20, "the updated configMap in the container", describe=node_agent.describe)

    assert (everything / "colour").read_text() == "red"

    # Removed with the pod.
    kubectl("delete", "pod", "reader", "-n", namespace, "--wait=false")
    await wait_for(lambda: not host.parent.parent.parent.exists(), 60, "the pod's directory to be removed",
                   describe=node_agent.describe)


async def test_secrets_env_env_from_and_service_links(node_agent, namespace):
    apply([secret(namespace, "db", {"password": "s3cret", "user": "admin"}),
           config_map(namespace, "settings", {"mode": "fast", "level": "3"}),
           {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-front", "namespace": namespace},
            "spec": {"selector": {"app": "nothing"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}])
    service_ip = kubectl_json("get", "service", "web-front", "-n", namespace)["spec"]["clusterIP"]
    apply(pod(namespace, "envy", "env | sort; echo file=$(cat /etc/db/password); sleep 3600",
              volumes=[{"name": "db", "secret": {"secretName": "db",
                                                 "items": [{"key": "password", "path": "password"}]}}],
              mounts=[{"name": "db", "mountPath": "/etc/db"}],
              env=[{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                   {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
                   {"name": "MISSING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nope",
                                                                         "optional": True}}},
                   {"name": "URL", "value": "http://$(WEB_FRONT_SERVICE_HOST):$(WEB_FRONT_SERVICE_PORT)"}],
              envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}, {"secretRef": {"name": "db"}}]))
    p = await wait_for(lambda: running(namespace, "envy"), 60, "the envy pod to run", describe=node_agent.describe)
    await wait_for(lambda: "file=s3cret" in output(node_agent, namespace, "envy"), 30, "the container's env",
                   describe=node_agent.describe)
    lines = set(output(node_agent, namespace, "envy").splitlines())
    assert {"PASSWORD=s3cret", "MODE=fast", "CFG_mode=fast", "CFG_level=3", "password=s3cret", "user=admin",
            f"WEB_FRONT_SERVICE_HOST={service_ip}", "WEB_FRONT_SERVICE_PORT=80", "WEB_FRONT_SERVICE_PORT_HTTP=80",
            f"WEB_FRONT_PORT=tcp://{service_ip}:80", f"WEB_FRONT_PORT_80_TCP_ADDR={service_ip}",
            f"URL=http://{service_ip}:80", "KUBERNETES_SERVICE_HOST=10.96.0.1",
            "KUBERNETES_SERVICE_PORT=443"} <= lines
    assert not any(line.startswith("MISSING=") for line in lines)

    # Secrets live on a tmpfs, unmounted when the pod goes.
    host = volume_dir(node_agent, p, "kubernetes.io~secret", "db")
    assert os.path.ismount(host)
    # Other local users get nowhere near it: the pods dir and the pod's own are 0750, root's.
    for directory in (host.parents[3], host.parents[2], host.parents[1]):  # pods/, pods/<uid>, volumes/
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o750, directory
    data = host / os.readlink(host / "..data")
    assert stat.S_IMODE(os.stat(data / "password").st_mode) == 0o644  # the API's defaultMode, set from the start
    kubectl("delete", "pod", "envy", "-n", namespace, "--wait=false")
    await wait_for(lambda: not host.exists(), 60, "the secret volume to be removed", describe=node_agent.describe)
    assert str(host) not in pathlib.Path("/proc/mounts").read_text()


async def test_missing_config_map_for_env_is_a_config_error_until_it_exists(node_agent, namespace):
    apply(pod(namespace, "early", "echo mode=$MODE; sleep 3600",
              env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "mode"}}}]))
    state = await wait_for(lambda: waiting(namespace, "early").get("reason") == "CreateContainerConfigError"
                           and waiting(namespace, "early"), 60, "CreateContainerConfigError",
                           describe=node_agent.describe)
    assert state["message"] == 'configmap "late" not found'
    apply(config_map(namespace, "late", {"mode": "on-time"}))
    await wait_for(lambda: running(namespace, "early"), 60, "the pod to start once its configMap exists",
                   describe=node_agent.describe)
    await wait_for(lambda: "mode=on-time" in output(node_agent, namespace, "early"), 30, "the env from the configMap")


async def test_missing_config_map_volume_waits_with_failed_mount_until_it_exists(node_agent, namespace):
    apply(pod(namespace, "mounter", "cat /etc/late/key; echo; sleep 3600",
              volumes=[{"name": "late", "configMap": {"name": "late-volume"}}],
              mounts=[{"name": "late", "mountPath": "/etc/late"}]))
    message = 'MountVolume.SetUp failed for volume "late" : configmap "late-volume" not found'
    await wait_for(lambda: message in events(namespace, "FailedMount"), 60, "a FailedMount event",
                   describe=node_agent.describe)
    assert waiting(namespace, "mounter").get("reason") == "ContainerCreating"
    apply(config_map(namespace, "late-volume", {"key": "arrived"}))
    await wait_for(lambda: running(namespace, "mounter"), 60, "the pod to start once its configMap exists",
                   describe=node_agent.describe)
    await wait_for(lambda: "arrived" in output(node_agent, namespace, "mounter"), 30, "the mounted configMap")


def call_api(token: str, ca: pathlib.Path, path: str) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(f"{API}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


async def test_service_account_token_volume_works_for_in_cluster_clients(node_agent, namespace):
    # A non-root user reads the token through the pod's fsGroup, as with the kubelet.
    client = pod(namespace, "client", "cd /var/run/secrets/kubernetes.io/serviceaccount; cat namespace; echo; "
                                      "ls | tr '\\n' ,; echo; echo token-bytes=$(wc -c < token); sleep 3600",
                 securityContext={"runAsUser": 1000})
    client["spec"]["securityContext"] = {"fsGroup": 2000}
    apply(client)
    p = await wait_for(lambda: running(namespace, "client"), 60, "the client pod to run", describe=node_agent.describe)
    volume = next(v for v in p["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    host = volume_dir(node_agent, p, "kubernetes.io~projected", volume["name"])
    assert sorted(e.name for e in host.iterdir() if not e.name.startswith("..")) == ["ca.crt", "namespace", "token"]
    assert (host / "namespace").read_text() == namespace
    assert (host / "ca.crt").read_text() == (STATE / "pki" / "ca.crt").read_text()
    token = (host / "token").read_text()
    owner = (host / "token").stat()  # the pod's one user owns it; the fsGroup may read it
    assert (stat.S_IMODE(owner.st_mode), owner.st_uid, owner.st_gid) == (0o640, 1000, 2000)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == f"system:serviceaccount:{namespace}:default"
    assert claims["kubernetes.io"]["pod"]["name"] == "client"  # bound to the pod (TokenRequest boundObjectRef)
    assert call_api(token, host / "ca.crt", "/api") == 200
    assert call_api("not-a-token", host / "ca.crt", "/api") == 401
    seen = f"{namespace}\nca.crt,namespace,token,\ntoken-bytes={len(token)}"
    await wait_for(lambda: seen in output(node_agent, namespace, "client"), 30,
                   "the container to see its service account files", describe=node_agent.describe)


async def test_downward_api_volume_follows_label_changes(node_agent, namespace):
    items = [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
             {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
             {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory",
                                                  "divisor": "1Mi"}}]
    apply(pod(namespace, "info", "while true; do echo \"$(cat /etc/info/name) $(cat /etc/info/mem) "
                                 "$(cat /etc/info/labels | tr '\\n' ' ')\"; sleep 0.3; done",
              volumes=[{"name": "info", "downwardAPI": {"items": items}}],
              mounts=[{"name": "info", "mountPath": "/etc/info"}],
              resources={"limits": {"memory": "64Mi"}}))
    await wait_for(lambda: running(namespace, "info"), 60, "the info pod to run", describe=node_agent.describe)
    await wait_for(lambda: 'info 64 app="info"' in output(node_agent, namespace, "info"), 30,
                   "the downward API files", describe=node_agent.describe)
    kubectl("label", "pod", "info", "-n", namespace, "tier=gold")
    await wait_for(lambda: 'info 64 app="info" tier="gold"' in output(node_agent, namespace, "info"), 20,
                   "the new label in the container", describe=node_agent.describe)


async def test_a_finished_pod_has_its_volumes_unmounted(node_agent, namespace):
    # Run as a user: any user can read a configMap volume.
    apply(config_map(namespace, "job-input", {"task": "sum"}))
    job = pod(namespace, "job", "cat /etc/job/task", volumes=[{"name": "job", "configMap": {"name": "job-input"}}],
              mounts=[{"name": "job", "mountPath": "/etc/job"}],
              securityContext={"runAsUser": 1000, "runAsGroup": 1000})
    job["spec"]["restartPolicy"] = "Never"
    apply(job)
    p = await wait_for(lambda: (get_pod(namespace, "job") or {}).get("status", {}).get("phase") == "Succeeded"
                       and get_pod(namespace, "job"), 60, "the job pod to succeed", describe=node_agent.describe)
    assert "sum" in output(node_agent, namespace, "job")
    volumes = volume_dir(node_agent, p, "kubernetes.io~configmap", "job").parent.parent
    projected = volumes / "kubernetes.io~projected"
    await wait_for(lambda: not (volumes / "kubernetes.io~configmap" / "job").exists()
                   and not any(projected.iterdir()), 30, "the finished pod's volumes to be removed",
                   describe=node_agent.describe)
    assert str(projected) not in pathlib.Path("/proc/mounts").read_text()
