"""A pod's inline CSI volume (spec.volumes[].csi): an ephemeral volume its driver makes for the
pod alone and removes with it, set up as the kubelet's CSI plugin does.

No stage and no attach: the volume is only published into the pod (NodePublishVolume), with a
volume ID unique to the pod and volume ("csi-" + sha256 of pod UID and volume name), the
volume's attributes as volume_context and the data of its nodePublishSecretRef (a Secret in the
pod's namespace). The driver's CSIDriver must exist and list the Ephemeral lifecycle mode; when
it sets podInfoOnMount the driver is also told the pod's name, namespace, UID and service account
(with csi.storage.k8s.io/ephemeral=true), and the pod's service account tokens it lists in its
tokenRequests. Each failure is a CsiSetupError for the volume's
FailedMount event; a driver not registered on the node is one of them, so the pod waits for it.
Teardown is NodeUnpublishVolume of what the pod's vol_data.json records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pykubelet.api.pod import Pod, Volume
from pykubelet.volumes.csi import paths
from pykubelet.volumes.csi.csidriver import EPHEMERAL, Get
from pykubelet.volumes.csi.operations import CsiNodeOperations, CsiOperationError, CsiVolume
from pykubelet.volumes.csi.pv_setup import (CsiSetupError, add_tokens, apply_fs_group, driver_policy, pod_info,
                                            secrets_of, token_attributes)
from pykubelet.volumes.csi.sa_tokens import TokenSource
from pykubelet.volumes.csi.source import SecretRef

ACCESS_MODE = "ReadWriteOnce"
"""The kubelet publishes every inline volume as ReadWriteOnce."""


class InlineSourceError(ValueError):
    """A pod's csi volume with a field of the wrong shape; the message names pod, volume and field."""


@dataclass(frozen=True)
class CsiInlineSource:
    """One pod volume's `csi` object as the node reads it."""

    volume: str
    """The pod's volume name: the directory under the pod's kubernetes.io~csi, and the spec name."""
    driver: str
    read_only: bool = False
    fs_type: str = ""
    volume_attributes: dict[str, str] = field(default_factory=dict)
    node_publish_secret: str = ""
    """nodePublishSecretRef.name, a Secret in the pod's namespace ("" when none)."""


def parse_inline_source(pod: Pod, index: int, volume: Volume) -> CsiInlineSource:
    """spec.volumes[index].csi of the pod; InlineSourceError for a field of the wrong shape."""
    where = f"pod {pod.namespace}/{pod.name}: volume {volume.name!r}: spec.volumes[{index}].csi"

    def fail(path: str, why: str) -> InlineSourceError:
        return InlineSourceError(f"{where}{path}: {why}")
    source: Any = volume.source
    if not isinstance(source, dict):
        raise fail("", "expected an object")

    def text(key: str) -> str:
        value = source.get(key)
        if value is not None and not isinstance(value, str):
            raise fail(f".{key}", "expected a string")
        return value or ""
    driver = text("driver")
    if not driver:
        raise fail(".driver", "required")
    read_only = source.get("readOnly", False)
    if read_only is not None and not isinstance(read_only, bool):
        raise fail(".readOnly", "expected a boolean")
    attributes = source.get("volumeAttributes") or {}
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise fail(".volumeAttributes", "expected an object of strings")
    secret_ref = source.get("nodePublishSecretRef")
    secret = ""
    if secret_ref is not None:
        secret = secret_ref.get("name") if isinstance(secret_ref, dict) else None
        if not isinstance(secret, str) or not secret:
            raise fail(".nodePublishSecretRef.name", "required: the name of a Secret in the pod's namespace")
    return CsiInlineSource(volume.name, driver, bool(read_only), text("fsType"), dict(attributes), secret)


class CsiInlineVolumes:
    """The inline CSI volumes of this node's pods; `get` reads API objects (CSIDriver, Secret)."""

    def __init__(self, operations: CsiNodeOperations, get: Get, tokens: TokenSource | None = None):
        self.operations = operations
        self.get = get
        self.tokens = tokens

    async def set_up(self, pod: Pod, source: CsiInlineSource, remount: bool = False) -> str:
        """Publish the volume into the pod; the host path its containers mount. remount: it was
        published before (see CsiNodeOperations.publish)."""
        try:
            # First, as the kubelet: a driver not registered (yet) is what the pod waits for.
            self.operations.client(source.driver, "mounter.SetUpAt failed to get CSI client")
        except CsiOperationError as e:
            raise CsiSetupError("MountVolume.SetUp", str(e)) from None
        policy = await driver_policy(self.get, source.driver, EPHEMERAL)
        ref = SecretRef(pod.namespace, source.node_publish_secret) if source.node_publish_secret else None
        secrets = await secrets_of(self.get, ref, "NodePublishSecretRef", "MountVolume.SetUp")
        context = dict(source.volume_attributes)
        if policy.pod_info_on_mount:
            context.update(pod_info(pod, ephemeral=True))
        add_tokens(context, secrets, policy, await token_attributes(self.tokens, policy, pod))
        volume = CsiVolume(source.volume, source.driver, paths.inline_volume_handle(pod.uid, source.volume),
                           EPHEMERAL, ACCESS_MODE, source.fs_type, (), source.volume_attributes)
        try:
            published = await self.operations.publish(pod.uid, volume, source.read_only, secrets, context,
                                                      fs_group=pod.fs_group, remount=remount)
        except CsiOperationError as e:
            raise CsiSetupError("MountVolume.SetUp", str(e)) from None
        await apply_fs_group(pod, published, policy, source.fs_type, (ACCESS_MODE,), source.read_only)
        return published.target_path

    async def tear_down(self, pod_uid: str, volume: str) -> None:
        """Unpublish the pod's inline volume; CsiOperationError when the driver refused (the
        caller retries)."""
        await self.operations.unpublish(pod_uid, volume)
