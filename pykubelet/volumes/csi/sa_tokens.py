"""The pod's service account tokens a CSI driver asks for in its CSIDriver's tokenRequests.

As the kubelet does at NodePublishVolume: one token per listed audience, from the TokenRequest
API, bound to the pod (the agent's token manager, so they are cached and refreshed as projected
tokens are), handed to the driver as one entry "csi.storage.k8s.io/serviceAccount.tokens": the
JSON map audience -> {"token", "expirationTimestamp"}. A driver that republishes gets fresh ones.
"""

from __future__ import annotations

from typing import Protocol

from pykubelet.api.pod import Pod
from pykubelet.api.times import rfc3339
from pykubelet.kube.errors import KubeError
from pykubelet.kube.tokens import DEFAULT_EXPIRATION_SECONDS, Token
from pykubelet.volumes.csi.csidriver import CsiDriverPolicy
from pykubelet.volumes.csi.vol_data import go_json

TOKENS_KEY = "csi.storage.k8s.io/serviceAccount.tokens"
_WHY = "kubernetes.io/csi: mounter.SetUpAt failed to get service accoount token attributes: "  # sic, the kubelet's


class TokenSource(Protocol):
    async def token(self, namespace: str, service_account: str, pod_name: str, pod_uid: str,
                    audience: str = "", expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS) -> Token: ...


class ServiceAccountTokenError(Exception):
    """A token could not be had; the message is the kubelet's."""


async def service_account_tokens(tokens: TokenSource | None, policy: CsiDriverPolicy, pod: Pod) -> dict[str, str]:
    """{TOKENS_KEY: the tokens' JSON} for a driver with tokenRequests, else {}."""
    if not policy.token_requests:
        return {}
    if tokens is None:
        raise ServiceAccountTokenError(f"{_WHY}ServiceAccountTokenGetter is nil")
    account = pod.raw.get("spec", {}).get("serviceAccountName") or "default"
    statuses = {}
    for request in policy.token_requests:
        try:
            token = await tokens.token(pod.namespace, account, pod.name, pod.uid, request.audience,
                                       request.expiration_seconds or DEFAULT_EXPIRATION_SECONDS)
        except KubeError as e:
            raise ServiceAccountTokenError(f"{_WHY}{e.message or e}") from None
        statuses[request.audience] = {"token": token.token, "expirationTimestamp": rfc3339(token.expires_at)}
    return {TOKENS_KEY: go_json(dict(sorted(statuses.items())))}
