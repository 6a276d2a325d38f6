"""securityContext -> what the container runs as (user, groups, capabilities, seccomp, ...) and the
kubelet's refusal to start a root container under runAsNonRoot."""

from __future__ import annotations

from typing import Any

import pytest

from pykubelet.api.pod import Container, Pod, parse_pod
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.runtime.env import ContainerConfigError
from pykubelet.runtime.security import check_run_as_non_root, effective, linux_security

NAMESPACES = api.NamespaceOption(network=api.POD, pid=api.CONTAINER, ipc=api.POD)
WILL_RUN_AS_ROOT = "container has runAsNonRoot and image will run as root"
RUN_AS_USER_BREAKS = "container's runAsUser breaks non-root policy"


def make_pod(pod_ctx: dict[str, Any] | None = None, container_ctx: dict[str, Any] | None = None) -> Pod:
    container: dict[str, Any] = {"name": "app", "image": "busybox:1.36"}
    if container_ctx is not None:
        container["securityContext"] = container_ctx
    spec: dict[str, Any] = {"containers": [container]}
    if pod_ctx is not None:
        spec["securityContext"] = pod_ctx
    return parse_pod({"metadata": {"name": "web", "namespace": "shop", "uid": "uid-1"}, "spec": spec}, where="test")


def app(pod: Pod) -> Container:
    return pod.containers[0]


def security(pod_ctx: dict[str, Any] | None = None,
             container_ctx: dict[str, Any] | None = None) -> api.LinuxContainerSecurityContext:
    pod = make_pod(pod_ctx, container_ctx)
    return linux_security(pod, app(pod), NAMESPACES)


# --- the effective context -----------------------------------------------------------------------------

@pytest.mark.parametrize("field, pod_value, container_value", [
    ("runAsUser", 1000, 2000),
    ("runAsGroup", 3000, 4000),
    ("runAsNonRoot", True, False),
    ("seccompProfile", {"type": "RuntimeDefault"}, {"type": "Unconfined"}),
])
def test_container_security_context_overrides_the_pods(field, pod_value, container_value):
    pod = make_pod({field: pod_value}, {field: container_value})
    assert effective(pod, app(pod))[field] == container_value


@pytest.mark.parametrize("field, value", [
    ("runAsUser", 1000),
    ("runAsGroup", 3000),
    ("runAsNonRoot", True),
    ("seccompProfile", {"type": "RuntimeDefault"}),
])
def test_pod_security_context_applies_when_the_container_does_not_set_it(field, value):
    pod = make_pod({field: value}, {"privileged": False})
    assert effective(pod, app(pod))[field] == value


def test_no_security_context_at_all_is_empty():
    pod = make_pod()
    assert effective(pod, app(pod)) == {}


# --- the CRI's Linux security context ---------------------------------------------------------------------

def test_namespaces_are_passed_through():
    assert security().namespace_options == NAMESPACES


def test_user_and_group_are_left_to_the_image_when_not_given():
    s = security()
    assert not s.HasField("run_as_user")
    assert not s.HasField("run_as_group")


@pytest.mark.parametrize("pod_ctx, container_ctx, uid, gid", [
    ({"runAsUser": 1000, "runAsGroup": 3000}, None, 1000, 3000),
    (None, {"runAsUser": 1000, "runAsGroup": 3000}, 1000, 3000),
    ({"runAsUser": 1000, "runAsGroup": 3000}, {"runAsUser": 2000}, 2000, 3000),
    ({"runAsUser": 0, "runAsGroup": 0}, None, 0, 0),       # root given explicitly is still given
])
def test_run_as_user_and_group_when_given(pod_ctx, container_ctx, uid, gid):
    s = security(pod_ctx, container_ctx)
    assert s.HasField("run_as_user") and s.HasField("run_as_group")
    assert (s.run_as_user.value, s.run_as_group.value) == (uid, gid)


def test_run_as_user_alone_leaves_the_group_to_the_image():
    s = security({"runAsUser": 1000})
    assert s.run_as_user.value == 1000
    assert not s.HasField("run_as_group")


@pytest.mark.parametrize("pod_ctx, groups", [
    ({"supplementalGroups": [100, 200]}, {100, 200}),
    ({"fsGroup": 2000}, {2000}),
    ({"supplementalGroups": [100], "fsGroup": 2000}, {100, 2000}),
    ({}, set()),
])
def test_supplemental_groups_include_the_fs_group(pod_ctx, groups):
    assert set(security(pod_ctx).supplemental_groups) == groups


def test_capabilities_are_added_and_dropped_as_written():
    s = security(container_ctx={"capabilities": {"add": ["NET_ADMIN", "SYS_TIME"], "drop": ["ALL"]}})
    assert list(s.capabilities.add_capabilities) == ["NET_ADMIN", "SYS_TIME"]
    assert list(s.capabilities.drop_capabilities) == ["ALL"]


def test_no_capabilities_keeps_the_runtime_defaults():
    s = security()
    assert list(s.capabilities.add_capabilities) == [] and list(s.capabilities.drop_capabilities) == []


@pytest.mark.parametrize("container_ctx, privileged, readonly_rootfs", [
    (None, False, False),
    ({"privileged": True}, True, False),
    ({"readOnlyRootFilesystem": True}, False, True),
    ({"privileged": False, "readOnlyRootFilesystem": False}, False, False),
])
def test_privileged_and_read_only_root_filesystem(container_ctx, privileged, readonly_rootfs):
    s = security(container_ctx=container_ctx)
    assert (s.privileged, s.readonly_rootfs) == (privileged, readonly_rootfs)


@pytest.mark.parametrize("container_ctx, no_new_privs", [
    (None, False),                                    # allowPrivilegeEscalation defaults to true
    ({"allowPrivilegeEscalation": True}, False),
    ({"allowPrivilegeEscalation": False}, True),
])
def test_disallowing_privilege_escalation_sets_no_new_privs(container_ctx, no_new_privs):
    assert security(container_ctx=container_ctx).no_new_privs is no_new_privs


@pytest.mark.parametrize("pod_ctx, container_ctx, profile_type", [
    (None, None, api.SecurityProfile.Unconfined),     # the kubelet's default without SeccompDefault
    ({"seccompProfile": {"type": "RuntimeDefault"}}, None, api.SecurityProfile.RuntimeDefault),
    (None, {"seccompProfile": {"type": "RuntimeDefault"}}, api.SecurityProfile.RuntimeDefault),
    ({"seccompProfile": {"type": "RuntimeDefault"}}, {"seccompProfile": {"type": "Unconfined"}},
     api.SecurityProfile.Unconfined),
    ({"seccompProfile": {"type": "Unconfined"}}, None, api.SecurityProfile.Unconfined),
])
def test_seccomp_profile_type(pod_ctx, container_ctx, profile_type):
    s = security(pod_ctx, container_ctx)
    assert s.seccomp.profile_type == profile_type
    assert s.seccomp.localhost_ref == ""


def test_localhost_seccomp_profile_is_a_file_under_the_kubelets_seccomp_directory():
    """The kubelet passes <root-dir>/seccomp/<localhostProfile>; containerd reads that path as given."""
    s = security(container_ctx={"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}})
    assert s.seccomp.profile_type == api.SecurityProfile.Localhost
    assert s.seccomp.localhost_ref == "/var/lib/kubelet/seccomp/profiles/audit.json"


# --- runAsNonRoot ---------------------------------------------------------------------------------------------

def refusal(pod_ctx: dict[str, Any] | None, container_ctx: dict[str, Any] | None,
            image_uid: int | None, image_user: str = "") -> str | None:
    pod = make_pod(pod_ctx, container_ctx)
    try:
        check_run_as_non_root(pod, app(pod), image_uid, image_user)
    except ContainerConfigError as e:
        return str(e)
    return None


@pytest.mark.parametrize("pod_ctx, container_ctx", [
    ({"runAsNonRoot": True}, None),
    (None, {"runAsNonRoot": True}),
])
def test_image_running_as_root_is_refused_under_run_as_non_root(pod_ctx, container_ctx):
    message = refusal(pod_ctx, container_ctx, image_uid=0)
    assert message is not None and message.startswith(WILL_RUN_AS_ROOT)
    assert '(pod: "web_shop(uid-1)", container: app)' in message


def test_image_without_a_user_runs_as_root_and_is_refused():
    """An image with no USER runs as root: the kubelet's getImageUser reports uid 0."""
    message = refusal({"runAsNonRoot": True}, None, image_uid=None, image_user="")
    assert message is not None and message.startswith(WILL_RUN_AS_ROOT)


@pytest.mark.parametrize("pod_ctx, container_ctx", [
    ({"runAsNonRoot": True, "runAsUser": 0}, None),
    ({"runAsNonRoot": True}, {"runAsUser": 0}),
    ({"runAsUser": 1000}, {"runAsNonRoot": True, "runAsUser": 0}),
], ids=["pod", "container", "container-overrides-pod"])
def test_run_as_user_root_is_refused_under_run_as_non_root_even_for_a_non_root_image(pod_ctx, container_ctx):
    message = refusal(pod_ctx, container_ctx, image_uid=1000)
    assert message is not None and message.startswith(RUN_AS_USER_BREAKS)
    assert "container: app" in message


def test_non_numeric_image_user_cannot_be_verified_and_is_refused():
    message = refusal({"runAsNonRoot": True}, None, image_uid=None, image_user="nginx")
    assert message is not None
    assert "container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root" \
        in message


@pytest.mark.parametrize("pod_ctx, container_ctx, image_uid, image_user", [
    ({"runAsNonRoot": True, "runAsUser": 1000}, None, 0, ""),       # runAsUser wins over a root image
    ({"runAsNonRoot": True}, {"runAsUser": 1000}, None, "nginx"),   # and over a non-numeric one
    ({"runAsNonRoot": True}, None, 1000, ""),                       # the image's own non-root uid
    (None, {"runAsNonRoot": True}, 65534, ""),
    (None, None, 0, ""),                                            # runAsNonRoot unset
    ({"runAsNonRoot": False}, None, 0, ""),
    ({"runAsNonRoot": True}, {"runAsNonRoot": False}, 0, ""),       # the container opts out
])
def test_allowed_to_start(pod_ctx, container_ctx, image_uid, image_user):
    assert refusal(pod_ctx, container_ctx, image_uid, image_user) is None


def test_a_pod_with_a_privileged_container_gets_a_privileged_sandbox():
    from pykubelet.runtime.specs import sandbox_config
    assert sandbox_config(make_pod(container_ctx={"privileged": True}), 0, "/logs").linux.security_context.privileged
    assert not sandbox_config(make_pod(container_ctx={"privileged": False}), 0, "/logs").linux.security_context.privileged
    assert not sandbox_config(make_pod(), 0, "/logs").linux.security_context.privileged
