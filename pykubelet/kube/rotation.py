"""Client certificate rotation (rotateCertificates): renew before the certificate expires.

The deadline is a random point between 70% and 90% of the current certificate's lifetime, as the
kubelet's certificate manager picks it, so a fleet of nodes bootstrapped together does not renew
together. Renewal is a new ECDSA P-256 key and CSR sent with the node's own (still valid)
credentials, which the csrapproving controller approves as selfnodeclient; the new pair goes
into the cert store and the client switches to it without a restart and without cutting its
watches short (KubeClient.reload_credentials). Failures are retried with back-off; once the
current certificate has been expired for EXIT_AFTER_EXPIRY, the agent exits (its pods keep
running), as the kubelet does, so that its restart bootstraps again with --bootstrap-kubeconfig.
"""

from __future__ import annotations

import asyncio
import random
import time

from pykubelet.kube import errors
from pykubelet.kube.certstore import CertificateError, CertStore, Pair, key_pem_of
from pykubelet.kube.client import KubeClient
from pykubelet.kube.csr import CSRDenied, CSRTimeout, csr_pem, new_key, request_certificate
from pykubelet.util.log import get_logger

log = get_logger(__name__)

JITTER = (0.7, 0.9)
CSR_WAIT_SECONDS = 15 * 60
RETRY_MIN, RETRY_MAX = 2.0, 60.0
EXIT_AFTER_EXPIRY = 5 * 60.0


class CertificateExpired(RuntimeError):
    """The client certificate expired and could not be renewed: only a restart (bootstrap) helps."""


def rotation_deadline(pair: Pair, rng: random.Random) -> float:
    lifetime = pair.not_after - pair.not_before
    return pair.not_before + lifetime * rng.uniform(*JITTER)


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


class ClientCertificateRotation:
    def __init__(self, kube: KubeClient, store: CertStore, node_name: str, rng: random.Random | None = None):
        self.kube = kube
        self.store = store
        self.node_name = node_name
        self.rng = rng or random.Random()
        self.rotations = 0

    async def run(self) -> None:
        while True:
            try:
                pair = self.store.current()
            except CertificateError as e:
                log.error("The current client certificate does not load; renewing it now", err=str(e))
                pair = None
            if pair is not None:
                deadline = rotation_deadline(pair, self.rng)
                log.info("Client certificate rotation scheduled", expires=_utc(pair.not_after),
                         rotateAt=_utc(deadline), file=self.store.current_path)
                await asyncio.sleep(max(0.0, deadline - time.time()))
            await self.rotate(pair.not_after if pair is not None else 0.0)

    async def rotate(self, expires: float = 0.0) -> None:
        """Get a new certificate with the node's credentials and switch to it; retried until done,
        or until the current one (expiring at `expires`) has been expired for EXIT_AFTER_EXPIRY."""
        delay = RETRY_MIN
        while True:
            if expires and time.time() > expires + EXIT_AFTER_EXPIRY:
                raise CertificateExpired(f"the client certificate {self.store.current_path} expired at "
                                         f"{_utc(expires)} and could not be renewed; exiting so that a restart "
                                         "bootstraps a new one")
            try:
                key = new_key()
                certificate = await request_certificate(self.kube, csr_pem(key, self.node_name),
                                                        wait_seconds=CSR_WAIT_SECONDS)
                path = await asyncio.to_thread(self.store.save, certificate, key_pem_of(key))  # fsyncs
                await self.kube.reload_credentials()
                self.rotations += 1
                log.info("Client certificate rotated", file=path, node=self.node_name)
                return
            except (errors.KubeError, CSRDenied, CSRTimeout, CertificateError) as e:
                log.error("Client certificate rotation failed; retrying", err=str(e), retryIn=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
