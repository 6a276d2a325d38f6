"""/stats/summary: the node's and every pod's CPU, memory, network and filesystem usage in the
kubelet's Summary API shape (stats/v1alpha1), which `kubectl top`'s metrics pipeline and the e2e
tests read.

Every pod and container is what the runtime runs, as the kubelet's CRI stats provider finds them:
pods are the ready sandboxes (their metadata names the pod), containers the running containers
labelled with the pod's UID (CRI ListContainers, ListContainerStats). Not the agent's pod statuses:
a restarted agent has not rebuilt those yet when its eviction manager first asks, and the
kubelet's eviction message names the containers using more than they requested. Pod usage comes
from the pod's cgroup (v1 or v2, either driver) and its sandbox's network namespace; the node's
from the root cgroup, /proc and statvfs. CPU rates
(usageNanoCores) are the change of the cumulative counter since the previous scrape; the first
scrape of something gives its average over its lifetime so far.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from pykubelet.api.times import rfc3339
from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime import labels, paths
from pykubelet.runtime.cgroups import kubepods_under
from pykubelet.server import cgroup_stats as cg
from pykubelet.server.host import Host
from pykubelet.util.log import get_logger
from pykubelet.volumes.csi import paths as csi_paths

log = get_logger(__name__)

IMAGEFS_DIR = "/var/lib/containerd"


class CPURates:
    """usageNanoCores from successive cumulative samples, per key (node, pod UID, container ID)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}

    def rate(self, key: str, now: float, cumulative_ns: int, started: float) -> int:
        previous = self._last.get(key)
        self._last[key] = (now, cumulative_ns)
        if previous and now - previous[0] > 0.05 and cumulative_ns >= previous[1]:
            return int((cumulative_ns - previous[1]) / (now - previous[0]))
        lifetime = now - started
        return int(cumulative_ns / lifetime) if started and lifetime > 0 else 0

    def retain(self, keys: set[str]) -> None:
        self._last = {k: v for k, v in self._last.items() if k in keys}


def cpu_stats(when: str, cumulative_ns: int, nano_cores: int) -> dict[str, Any]:
    return {"time": when, "usageNanoCores": nano_cores, "usageCoreNanoSeconds": cumulative_ns}


def memory_stats(when: str, usage: cg.CgroupUsage | None, working_set: int, limit: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"time": when, "workingSetBytes": working_set}
    if usage is not None:
        out.update(usageBytes=usage.memory_usage, rssBytes=usage.rss, pageFaults=usage.page_faults,
                   majorPageFaults=usage.major_page_faults)
    if limit:
        out["availableBytes"] = max(limit - working_set, 0)
    return out


def node_memory(when: str, usage: cg.CgroupUsage) -> dict[str, Any]:
    """The node's memory: the root cgroup's working set and what the rest of the machine's memory
    leaves available (the memory.available eviction signal)."""
    return memory_stats(when, usage, usage.working_set, cg.memory_capacity())


def node_filesystems_and_pids(root_dir: str, when: str, image_fs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The node's root-dir filesystem, image filesystem (its statvfs unless given, with the
    runtime's usage) and process figures: what the disk and PID eviction signals come from."""
    return {"fs": {"time": when, **cg.fs_stats(root_dir)},
            "runtime": {"imageFs": {"time": when, **(cg.fs_stats(IMAGEFS_DIR) if image_fs is None else image_fs)}},
            "rlimit": {"time": when, "maxpid": cg.max_pid(), "curproc": cg.process_count()}}


def node_signal_stats(root_dir: str) -> dict[str, Any]:
    """The node section of a summary as far as the eviction signals read it, measured now
    (blocking: /proc, the root cgroup, statvfs)."""
    when = rfc3339(time.time())
    usage = cg.cgroup_usage("")
    return {**({"memory": node_memory(when, usage)} if usage is not None else {}),
            **node_filesystems_and_pids(root_dir, when)}


def network_stats(when: str, interfaces: dict[str, tuple[int, int, int, int]], default: str) -> dict[str, Any]:
    items = [{"name": n, "rxBytes": v[0], "rxErrors": v[1], "txBytes": v[2], "txErrors": v[3]}
             for n, v in sorted(interfaces.items())]
    main = next((i for i in items if i["name"] == default), items[0] if items else {"name": default})
    return {"time": when, **main, "interfaces": items}


class SummaryProvider:
    def __init__(self, host: Host):
        self.host = host
        self.rates = CPURates()
        self._sandbox_pids: dict[str, int] = {}

    async def _sandbox_pid(self, sandbox_id: str) -> int | None:
        if sandbox_id not in self._sandbox_pids:
            try:
                info = (await self.host.cri.pod_sandbox_status(sandbox_id, verbose=True)).info.get("info", "{}")
                self._sandbox_pids[sandbox_id] = int(json.loads(info).get("pid") or 0)
            except (errors.CRIError, ValueError):
                return None
        return self._sandbox_pids[sandbox_id] or None

    async def summary(self, only_cpu_and_memory: bool = False) -> dict[str, Any]:
        container_stats, containers, sandboxes = await asyncio.gather(
            self.host.cri.list_container_stats(), self.host.cri.list_containers(), self.host.cri.list_pod_sandbox())
        image_fs = None if only_cpu_and_memory else await self._image_fs()
        ready = ready_by_pod(sandboxes)
        self._sandbox_pids = {k: v for k, v in self._sandbox_pids.items() if k in {s.id for s in ready.values()}}
        pids = {uid: await self._sandbox_pid(sandbox.id) for uid, sandbox in ready.items()}
        measured = ({} if only_cpu_and_memory or self.host.volume_stats is None
                    else await self.host.volume_stats(list(ready)))
        return await asyncio.to_thread(self._build, container_stats, running_by_pod(containers), ready, pids,
                                       image_fs, only_cpu_and_memory, measured)

    async def _image_fs(self) -> dict[str, Any]:
        out = cg.fs_stats(IMAGEFS_DIR)
        try:
            info = await self.host.cri.image_fs_info()
            if info.image_filesystems:
                usage = info.image_filesystems[0]
                out.update(usedBytes=usage.used_bytes.value, inodesUsed=usage.inodes_used.value)
        except errors.CRIError:
            pass
        return out

    def _build(self, container_stats: list[api.ContainerStats], running: dict[str, list[api.Container]],
               ready: dict[str, api.PodSandbox], pids: dict[str, int | None], image_fs: dict[str, Any] | None,
               only_cpu_and_memory: bool, measured: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        """`measured`: pod UID -> its volumes a driver measured."""
        now = time.time()
        when = rfc3339(now)
        keys: set[str] = set()
        by_id = {s.attributes.id: s for s in container_stats}
        pods = []
        for uid, sandbox in ready.items():
            pods.append(self._pod(sandbox, running.get(uid, []), by_id, pids.get(uid), now, when, keys,
                                  only_cpu_and_memory, measured.get(uid, [])))
        node = self._node(now, when, image_fs, only_cpu_and_memory)
        keys.add("node")
        self.rates.retain(keys)
        return {"node": node, "pods": pods}

    def _node(self, now: float, when: str, image_fs: dict[str, Any] | None, only: bool) -> dict[str, Any]:
        boot = cg.boot_time()
        usage = cg.cgroup_usage("")
        node: dict[str, Any] = {"nodeName": self.host.node_name, "systemContainers": [], "startTime": rfc3339(boot)}
        if usage is not None:
            node["cpu"] = cpu_stats(when, usage.cpu_ns, self.rates.rate("node", now, usage.cpu_ns, boot))
            node["memory"] = node_memory(when, usage)
        if only:
            return node
        node["network"] = network_stats(when, cg.net_dev(None), "eth0")
        node.update(node_filesystems_and_pids(self.host.settings.root_dir, when, image_fs or {}))
        return node

    def _pod(self, sandbox: api.PodSandbox, running: list[api.Container], by_id: dict[str, api.ContainerStats],
             pid: int | None, now: float, when: str, keys: set[str], only: bool,
             measured: list[dict[str, Any]]) -> dict[str, Any]:
        pod = sandbox.metadata
        containers = []
        rootfs_total = logs_total = 0
        log_dir = paths.pod_log_dir(self.host.settings.pods.pod_logs_dir, pod.namespace, pod.name, pod.uid)
        for container in running:
            stats = by_id.get(container.id)
            if stats is None:
                continue
            cid, name = container.id, container.labels[labels.CONTAINER_NAME]
            keys.add(cid)
            started = container.created_at / 1e9  # the kubelet's CRI stats provider: created, not started
            cpu_ns = stats.cpu.usage_core_nano_seconds.value
            entry: dict[str, Any] = {
                "name": name, "startTime": rfc3339(started),
                "cpu": cpu_stats(when, cpu_ns, stats.cpu.usage_nano_cores.value
                                 or self.rates.rate(cid, now, cpu_ns, started)),
                "memory": memory_stats(when, None, stats.memory.working_set_bytes.value)}
            if stats.memory.HasField("usage_bytes"):
                entry["memory"]["usageBytes"] = stats.memory.usage_bytes.value
            if not only:
                rootfs = stats.writable_layer.used_bytes.value
                logs_used, logs_inodes = cg.dir_usage(os.path.join(log_dir, name))
                entry["rootfs"] = {"time": when, "usedBytes": rootfs,
                                   "inodesUsed": stats.writable_layer.inodes_used.value}
                entry["logs"] = {"time": when, "usedBytes": logs_used, "inodesUsed": logs_inodes}
                rootfs_total, logs_total = rootfs_total + rootfs, logs_total + logs_used
            containers.append(entry)
        out: dict[str, Any] = {"podRef": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                               "startTime": rfc3339(sandbox.created_at / 1e9), "containers": containers}
        relative = cg.pod_cgroup(pod.uid, kubepods=kubepods_under(self.host.settings.pods.cgroup_root))
        usage = cg.cgroup_usage(relative) if relative else None
        if usage is not None:
            keys.add(pod.uid)
            started = sandbox.created_at / 1e9
            out["cpu"] = cpu_stats(when, usage.cpu_ns, self.rates.rate(pod.uid, now, usage.cpu_ns, started))
            out["memory"] = memory_stats(when, usage, usage.working_set)
        if not only:
            if pid:
                out["network"] = network_stats(when, cg.net_dev(pid), "eth0")
            volumes = self._volumes(pod.uid, when) + measured
            if volumes:
                out["volume"] = volumes
            out["ephemeral-storage"] = {"time": when, "usedBytes": rootfs_total + logs_total}
        return out

    def _volumes(self, uid: str, when: str) -> list[dict[str, Any]]:
        """Each volume directory of the pod (<root-dir>/pods/<uid>/volumes/<plugin>/<name>), but
        CSI volumes': their drivers measure them (`measured`), never a walk of the driver's mount."""
        base = paths.volumes_dir(self.host.settings.root_dir, uid)
        out = []
        try:
            plugins = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            return out
        for plugin in plugins:
            if plugin.name == csi_paths.ESCAPED_PLUGIN_NAME:
                continue
            for volume in sorted(os.scandir(plugin.path), key=lambda e: e.name):
                used, inodes = cg.dir_usage(volume.path)
                fs = cg.fs_stats(volume.path)
                out.append({"time": when, "name": volume.name, "usedBytes": used, "inodesUsed": inodes,
                            **{k: fs[k] for k in ("availableBytes", "capacityBytes", "inodesFree", "inodes")
                               if k in fs}})
        return out


def ready_by_pod(sandboxes: list[api.PodSandbox]) -> dict[str, api.PodSandbox]:
    """Pod UID -> its newest ready sandbox: the pods the node runs, as the runtime knows them."""
    out: dict[str, api.PodSandbox] = {}
    for sandbox in sorted(sandboxes, key=lambda s: s.created_at):
        if sandbox.state == api.SANDBOX_READY and sandbox.metadata.uid:
            out[sandbox.metadata.uid] = sandbox
    return out


def running_by_pod(containers: list[api.Container]) -> dict[str, list[api.Container]]:
    """Pod UID -> its running containers, oldest first; exited ones have no usage to count."""
    out: dict[str, list[api.Container]] = {}
    for container in sorted(containers, key=lambda c: c.created_at):
        uid = container.labels.get(labels.POD_UID)
        if uid and labels.CONTAINER_NAME in container.labels and container.state == api.CONTAINER_RUNNING:
            out.setdefault(uid, []).append(container)
    return out

