"""A container's CRI config, as the kubelet's generateContainerConfig: its volumes (emptyDir,
hostPath, the API volumes, claims, subPaths) and block devices (volumeDevices), the pod's files (/etc/hosts, the termination-message
file), its env (ConfigMaps, Secrets, Services), the runAsNonRoot check against its image and
an ephemeral container's target (the PID namespace it joins).

What the pod refers to and cannot be had raises ContainerConfigError (CreateContainerConfigError).
"""

from __future__ import annotations

import asyncio
import os
from typing import Callable

from pykubelet.api.pod import Container, Pod
from pykubelet.api.references import referenced_names
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.kube.objects import NotSynced, ObjectNotFound
from pykubelet.runtime import data_dirs, podfiles, security, specs
from pykubelet.runtime.env import ContainerConfigError, EnvSources
from pykubelet.runtime.service import Runtime
from pykubelet.runtime.state import ContainerState
from pykubelet.runtime.service_env import service_env, services_for_pod
from pykubelet.volumes import api as api_volumes
from pykubelet.volumes import local as local_volumes
from pykubelet.volumes.claim_volumes import ClaimMount


def block_devices(container: Container, claims: dict[str, ClaimMount]) -> list[api.Device]:
    """The container's volumeDevices as CRI devices: each names a block claim volume set up for
    the pod, at an absolute path in the container (the kubelet's makeBlockVolumes)."""
    devices = []
    listed = container.raw.get("volumeDevices")
    for device in listed if isinstance(listed, list) else []:
        name = device.get("name") if isinstance(device, dict) else None
        path = device.get("devicePath") if isinstance(device, dict) else None
        if not isinstance(path, str) or not path.startswith("/"):
            raise ContainerConfigError(f"error DevicePath `{path}` must be an absolute path")
        claim = claims.get(name) if isinstance(name, str) else None
        if claim is None or not claim.block:
            raise ContainerConfigError(f"cannot find volume {name!r} to pass into container {container.name!r}")
        devices.append(api.Device(container_path=path, host_path=claim.host_path,
                                  permissions="r" if claim.read_only else "mrw"))
    return devices


def pid_target_id(container: Container, target: ContainerState | None) -> str:
    """The runtime ID of the instance an ephemeral container's targetContainerName names ("" when it
    names none). Like the kubelet, the newest instance whatever its state: the runtime refuses to
    create the debugger next to a target that is not running, and it is tried again next sync."""
    if not container.target_container_name:
        return ""
    if target is None:
        raise ContainerConfigError(f"unable to find target container {container.target_container_name}")
    return target.id


class ContainerConfigs:
    def __init__(self, cri: Runtime, node: specs.NodeFacts, api: api_volumes.ApiClients | None,
                 claim_mounts: Callable[[str], dict[str, ClaimMount]]):
        self.cri = cri
        self.node = node
        self.api = api  # None: standalone, no ConfigMaps, Secrets, tokens or Services
        self.claim_mounts = claim_mounts  # pod UID -> its claim volumes set up (the volume step's)

    async def build(self, pod: Pod, container: Container, image_ref: str, restart_count: int, pod_ip: str,
                    sandbox_config: api.PodSandboxConfig, target: ContainerState | None = None) -> api.ContainerConfig:
        """The config to create the container with (its log directory made first).

        `target`: the newest instance of the container an ephemeral container's
        targetContainerName names (None when there is none)."""
        target_id = pid_target_id(container, target)
        await asyncio.to_thread(os.makedirs, os.path.join(sandbox_config.log_directory, container.name), mode=0o755,
                                exist_ok=True)
        env_sources = await self._env_sources(pod, container)
        volumes = await asyncio.to_thread(self._local_volumes, pod)
        projected = api_volumes.volume_paths(self.node.root_dir, pod)
        env = (dict(specs.container_env_of(pod, container, self.node, pod_ip, env_sources))
               if any(m.sub_path_expr for m in container.volume_mounts) else {})
        claims = self.claim_mounts(pod.uid)
        read_only = set(projected) | {name for name, claim in claims.items() if claim.read_only}
        mounts = await asyncio.to_thread(local_volumes.container_mounts, self.node.root_dir, pod, container,
                                         {**volumes, **projected,
                                          **{n: c.host_path for n, c in claims.items() if not c.block}},
                                         read_only, env)
        mounts += await asyncio.to_thread(self._pod_file_mounts, pod, container, pod_ip)
        config = specs.container_config(pod, container, image_ref, restart_count, self.node, pod_ip, mounts,
                                        env_sources, target_id)
        config.devices.extend(block_devices(container, claims))
        if security.effective(pod, container).get("runAsNonRoot"):
            image = await self.cri.image_status(image_ref)
            username = image.username if image is not None else ""
            # An image that names no user runs as root; a user name alone cannot be checked.
            uid = image.uid.value if image is not None and image.HasField("uid") else (None if username else 0)
            security.check_run_as_non_root(pod, container, uid, username)
        return config

    async def _env_sources(self, pod: Pod, container: Container) -> EnvSources:
        """The ConfigMaps, Secrets and Service variables the container's env reads."""
        sources = EnvSources(has_api=self.api is not None)
        if self.api is None:
            return sources
        names = referenced_names({"spec": {"containers": [container.raw]}})
        try:
            for resource, known in (("configmaps", sources.config_maps), ("secrets", sources.secrets)):
                for name in names[resource]:
                    try:
                        known[name] = await self.api.objects.get(resource, pod.namespace, name)
                    except ObjectNotFound:
                        known[name] = None
            if not pod.is_static:  # the kubelet waits for Services only for API pods
                await self.api.services.wait_synced()
        except NotSynced as e:
            raise ContainerConfigError(str(e)) from None
        links = pod.raw.get("spec", {}).get("enableServiceLinks", True) is not False
        sources.services = service_env(services_for_pod(self.api.services.services(), pod.namespace, links))
        return sources

    def _local_volumes(self, pod: Pod) -> dict[str, str]:
        """The pod's directories (0750, before anything below them), then its emptyDir and hostPath volumes."""
        data_dirs.ensure_pod_dirs(self.node.root_dir, pod.uid)
        return local_volumes.setup_volumes(self.node.root_dir, pod)

    def _pod_file_mounts(self, pod: Pod, container: Container, pod_ip: str) -> list[api.Mount]:
        """The managed /etc/hosts and this instance's termination-message file."""
        try:
            hosts = podfiles.hosts_mount(self.node.root_dir, pod, container, pod_ip, self.node.dns.domain)
            message = podfiles.termination_message_mount(self.node.root_dir, pod, container)
        except OSError as e:
            raise ContainerConfigError(f"cannot write the pod's files under {self.node.root_dir}: {e}") from e
        return [m for m in (hosts, message) if m is not None]

