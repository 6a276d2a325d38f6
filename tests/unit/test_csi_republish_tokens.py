"""A CSIDriver's requiresRepublish (its volumes published again periodically, never after their
teardown, a refusal leaving the published volume alone) and tokenRequests (the pod's service
account tokens, one per audience, handed to the driver at NodePublishVolume)."""

from __future__ import annotations

import json
import os
from typing import Any

import grpc
import pytest

from pykubelet.api.pod import Pod
from pykubelet.kube.errors import KubeError
from pykubelet.kube.tokens import TokenManager
from pykubelet.volumes.claim_model import parse_volume
from pykubelet.volumes.csi.csidriver import CsiDriverError, TokenRequest, parse_csidriver
from pykubelet.volumes.csi.inline import CsiInlineSource
from pykubelet.volumes.csi.operations import CsiNodeOperations
from pykubelet.volumes.csi.pod_volumes import CsiPodVolumes
from pykubelet.volumes.csi.pv_setup import CsiPersistentVolumes, CsiSetupError
from tests.unit.csi_fakes import FakeApi, FakeNodeDriver, served_node_driver

DRIVER = "secrets-store.csi.k8s.io"
CSIDRIVER = f"/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"
TOKENS = "csi.storage.k8s.io/serviceAccount.tokens"
PV = parse_volume({"metadata": {"name": "pvc-1"}, "spec": {
    "accessModes": ["ReadWriteOnce"], "claimRef": {"uid": "c"}, "csi": {"driver": DRIVER, "volumeHandle": "vol-1"}}})
POD = Pod(name="web", namespace="shop", uid="u1", containers=(), raw={"spec": {"serviceAccountName": "app"}})


class TokenKube:
    """The TokenRequest API: each request answered with a new token, expiring an hour from the epoch's 1e9."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.refuse = False

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        if self.refuse:
            raise KubeError("POST", path, 500, "InternalError", "etcd is down")
        self.requests.append((path, body))
        seconds = body["spec"]["expirationSeconds"]
        return {"spec": {"expirationSeconds": seconds},
                "status": {"token": f"token-{len(self.requests)}", "expirationTimestamp": "2001-09-09T02:46:40Z"}}


@pytest.fixture
async def bed():
    node = FakeNodeDriver(capabilities=())
    async with served_node_driver(node, DRIVER) as served:
        api, kube = FakeApi(), TokenKube()
        tokens = TokenManager(kube, clock=lambda: 1e9 - 3600)  # the tokens are fresh
        ops = CsiNodeOperations(os.path.join(served.root, "kubelet"), "node1", served.drivers)
        yield node, api, kube, CsiPodVolumes(CsiPersistentVolumes(ops, api.get, tokens), api.get)


def csidriver(api: FakeApi, **spec: Any) -> None:
    api.put(CSIDRIVER, {"metadata": {"name": DRIVER}, "spec": {
        "attachRequired": False, "volumeLifecycleModes": ["Persistent", "Ephemeral"], **spec}})


async def test_a_requires_republish_drivers_volume_is_published_again(bed):
    node, api, _, volumes = bed
    csidriver(api, requiresRepublish=True)
    path = await volumes.set_up_pv(POD, "data", "data", PV, read_only=False)
    await volumes.set_up_inline(POD, CsiInlineSource("scratch", DRIVER))
    await volumes.republish()
    assert sorted(r.target_path for r in node.calls("NodePublishVolume")) == sorted(
        [path, path, path.replace("pvc-1", "scratch"), path.replace("pvc-1", "scratch")])


async def test_a_driver_without_requires_republish_is_not_asked_again(bed):
    node, api, _, volumes = bed
    csidriver(api)
    await volumes.set_up_pv(POD, "data", "data", PV, read_only=False)
    await volumes.republish()
    assert len(node.calls("NodePublishVolume")) == 1


async def test_a_refused_republish_leaves_the_published_volume_and_a_torn_down_one_is_not_republished(bed):
    node, api, _, volumes = bed
    csidriver(api, requiresRepublish=True)
    path = await volumes.set_up_pv(POD, "data", "data", PV, read_only=False)
    node.fail["NodePublishVolume"] = grpc.StatusCode.INVALID_ARGUMENT  # final: a first publish would be undone
    await volumes.republish()
    assert len(node.calls("NodePublishVolume")) == 2
    assert os.path.isdir(path) and os.path.isfile(os.path.join(os.path.dirname(path), "vol_data.json"))
    assert [v.target_path for v in volumes.in_use("u1")] == [path]

    assert await volumes.unpublish("u1", "shop/web")
    await volumes.republish()
    assert len(node.calls("NodePublishVolume")) == 2


async def test_the_tokens_a_driver_asks_for_are_in_its_volume_context(bed):
    node, api, kube, volumes = bed
    csidriver(api, tokenRequests=[{"audience": "vault", "expirationSeconds": 600}, {"audience": ""}])
    await volumes.set_up_pv(POD, "data", "data", PV, read_only=False)
    [publish] = node.calls("NodePublishVolume")
    assert publish.volume_context[TOKENS] == (
        '{"":{"token":"token-2","expirationTimestamp":"2001-09-09T02:46:40Z"},'
        '"vault":{"token":"token-1","expirationTimestamp":"2001-09-09T02:46:40Z"}}')
    assert TOKENS not in publish.secrets
    [(path, vault), (_, default)] = kube.requests
    assert path == "/api/v1/namespaces/shop/serviceaccounts/app/token"
    assert vault["spec"] == {"expirationSeconds": 600, "audiences": ["vault"],
                             "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u1"}}
    assert "audiences" not in default["spec"] and default["spec"]["expirationSeconds"] == 3600


async def test_tokens_go_in_the_secrets_when_the_driver_says_so_and_to_inline_volumes_too(bed):
    node, api, _, volumes = bed
    csidriver(api, tokenRequests=[{"audience": "vault"}], serviceAccountTokenInSecrets=True)
    await volumes.set_up_inline(POD, CsiInlineSource("scratch", DRIVER))
    [publish] = node.calls("NodePublishVolume")
    assert json.loads(publish.secrets[TOKENS])["vault"]["token"] == "token-1"
    assert TOKENS not in publish.volume_context


async def test_a_token_that_cannot_be_had_fails_the_mount_before_the_driver_is_asked(bed):
    node, api, kube, volumes = bed
    csidriver(api, tokenRequests=[{"audience": "vault"}])
    kube.refuse = True
    with pytest.raises(CsiSetupError) as failed:
        await volumes.set_up_pv(POD, "data", "data", PV, read_only=False)
    assert failed.value.operation == "MountVolume.SetUp"
    assert str(failed.value) == ("kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token "
                                 "attributes: etcd is down")
    assert node.calls("NodePublishVolume") == []


def test_a_csidrivers_token_requests_are_read_and_checked():
    policy = parse_csidriver("d", {"spec": {"tokenRequests": [{"audience": "a", "expirationSeconds": 700}, {}]}})
    assert policy.token_requests == (TokenRequest("a", 700), TokenRequest("", None))
    assert not policy.token_in_secrets and not policy.requires_republish
    for spec, field in (({"tokenRequests": {}}, "spec.tokenRequests: expected a list"),
                        ({"tokenRequests": [{"audience": 3}]}, "spec.tokenRequests[0].audience: expected a string"),
                        ({"tokenRequests": [{"expirationSeconds": "1h"}]},
                         "spec.tokenRequests[0].expirationSeconds: expected a positive integer"),
                        ({"serviceAccountTokenInSecrets": "yes"}, "spec.serviceAccountTokenInSecrets: expected a boolean")):
        with pytest.raises(CsiDriverError) as failed:
            parse_csidriver("d", {"spec": spec})
        assert str(failed.value) == f"CSIDriver d: {field}"
