"""securityContext (pod and container) -> the CRI's Linux security context, and the checks
the kubelet makes before creating a container (runAsNonRoot)."""

from __future__ import annotations

import os
from typing import Any

from pykubelet.api.pod import Container, Pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime.env import ContainerConfigError

DEFAULT_SECCOMP_ROOT = "/var/lib/kubelet/seccomp"
"""<root-dir>/seccomp: where Localhost seccomp profiles live (the kubelet's seccompProfileRoot)."""

_SECCOMP = {"RuntimeDefault": api.SecurityProfile.RuntimeDefault,
            "Unconfined": api.SecurityProfile.Unconfined,
            "Localhost": api.SecurityProfile.Localhost}


def effective(pod: Pod, container: Container) -> dict[str, Any]:
    """The container's securityContext over the pod's (the fields both may set)."""
    pod_ctx = pod.raw.get("spec", {}).get("securityContext") or {}
    ctx = {k: pod_ctx[k] for k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile",
                                   "supplementalGroups", "fsGroup") if k in pod_ctx}
    ctx.update(container.raw.get("securityContext") or {})
    return ctx


def sandbox_privileged(pod: Pod) -> bool:
    """Whether any of the pod's containers is privileged: the runtime refuses a privileged
    container in a sandbox that is not (containerd: "no privileged container allowed in
    sandbox"), so the kubelet makes the sandbox privileged then."""
    return any((c.raw.get("securityContext") or {}).get("privileged")
               for c in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers))


def check_run_as_non_root(pod: Pod, container: Container, image_uid: int | None, image_user: str) -> None:
    """The kubelet's refusal to start a container that would run as root under runAsNonRoot."""
    ctx = effective(pod, container)
    if not ctx.get("runAsNonRoot"):
        return
    who = f'(pod: "{pod.name}_{pod.namespace}({pod.uid})", container: {container.name})'
    if ctx.get("runAsUser") is not None:
        if int(ctx["runAsUser"]) == 0:
            raise ContainerConfigError(f"container's runAsUser breaks non-root policy {who}")
        return
    if image_uid is None and not image_user:
        image_uid = 0  # an image that names no user runs as root (the kubelet's getImageUser)
    if image_uid == 0:
        raise ContainerConfigError(f"container has runAsNonRoot and image will run as root {who}")
    if image_uid is None:
        raise ContainerConfigError(f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                                   f"cannot verify user is non-root {who}")


def linux_security(pod: Pod, container: Container, namespaces: api.NamespaceOption,
                   seccomp_root: str = DEFAULT_SECCOMP_ROOT) -> api.LinuxContainerSecurityContext:
    ctx = effective(pod, container)
    out = api.LinuxContainerSecurityContext(namespace_options=namespaces,
                                            privileged=bool(ctx.get("privileged", False)),
                                            readonly_rootfs=bool(ctx.get("readOnlyRootFilesystem", False)))
    if "runAsUser" in ctx:
        out.run_as_user.value = int(ctx["runAsUser"])
    if "runAsGroup" in ctx:
        out.run_as_group.value = int(ctx["runAsGroup"])
    groups = list(ctx.get("supplementalGroups") or [])
    if "fsGroup" in ctx:
        groups.append(int(ctx["fsGroup"]))
    out.supplemental_groups.extend(int(g) for g in groups)
    caps = ctx.get("capabilities") or {}
    out.capabilities.add_capabilities.extend(caps.get("add") or [])
    out.capabilities.drop_capabilities.extend(caps.get("drop") or [])
    # allowPrivilegeEscalation defaults to true; false means no_new_privs.
    out.no_new_privs = ctx.get("allowPrivilegeEscalation") is False
    profile = (ctx.get("seccompProfile") or {}).get("type", "Unconfined")  # the kubelet's default
    out.seccomp.profile_type = _SECCOMP.get(profile, api.SecurityProfile.Unconfined)
    if profile == "Localhost":
        profile_file = (ctx.get("seccompProfile") or {}).get("localhostProfile", "")
        out.seccomp.localhost_ref = os.path.join(seccomp_root, profile_file)
    return out
