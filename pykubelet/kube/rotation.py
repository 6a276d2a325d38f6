"""Certificate rotation: keep one of the node's certificates valid, as the kubelet's certificate
manager does, for the client certificate (rotateCertificates) and the serving certificate
(serverTLSBootstrap) alike.

The deadline is a random point between 70% and 90% of the current certificate's lifetime, so a
fleet of nodes bootstrapped together does not renew together. Renewal is a new ECDSA P-256 key and
CSR sent with the node's own (still valid) credentials; the new pair goes into the cert store and
`on_rotated` puts it to use without a restart (the client: KubeClient.reload_credentials, which
does not cut watches short; the kubelet API: its TLS context). Failures are retried with back-off.

The serving certificate's CSR follows the node's addresses (a template that can change): with
none yet, or with a current certificate whose names differ from the addresses now, a new one is
requested at once; a change while waiting on a CSR abandons that CSR for one with the new names.
The client certificate's CSR never changes; once it has been expired for EXIT_AFTER_EXPIRY the
agent exits (its pods keep running), as the kubelet does, so that its restart bootstraps again
with --bootstrap-kubeconfig.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Awaitable, Callable

from pykubelet.kube import errors
from pykubelet.kube.certstore import CertificateError, CertStore, Pair
from pykubelet.kube.client import KubeClient
from pykubelet.kube.csr import (CLIENT, CSRDenied, CSRTemplate, CSRTimeout, import_key_maker, request_certificate,
                                satisfies)
from pykubelet.util.log import get_logger

log = get_logger(__name__)

JITTER = (0.7, 0.9)
CSR_WAIT_SECONDS = 15 * 60
RETRY_MIN, RETRY_MAX = 2.0, 60.0
EXIT_AFTER_EXPIRY = 5 * 60.0
TEMPLATE_CHECK_SECONDS = 1.0  # how often the node's addresses are compared with the certificate's (the kubelet's)


class CertificateExpired(RuntimeError):
    """The client certificate expired and could not be renewed: only a restart (bootstrap) helps."""


def rotation_deadline(pair: Pair, rng: random.Random) -> float:
    lifetime = pair.not_after - pair.not_before
    return pair.not_before + lifetime * rng.uniform(*JITTER)


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


class CertificateRotation:
    """Requests, stores and rotates one certificate of the node (see the module's docstring)."""

    def __init__(self, kube: KubeClient, store: CertStore, node_name: str, what: str,
                 template: Callable[[], CSRTemplate | None], on_rotated: Callable[[str], Awaitable[None]], *,
                 dynamic: bool = True, exit_on_expiry: bool = False, rng: random.Random | None = None):
        self.kube = kube
        self.store = store
        self.node_name = node_name
        self.what = what
        """How logs name it: "client certificate", "serving certificate"."""
        self.template = template
        """The CSR to ask for now; None while there is nothing to ask for (no IP address yet)."""
        self.on_rotated = on_rotated
        """Called with the new pair's file once it is stored."""
        self.dynamic = dynamic
        """The template can change (the node's addresses): watch it."""
        self.exit_on_expiry = exit_on_expiry
        self.rng = rng or random.Random()
        self.rotations = 0

    async def run(self) -> None:
        while True:
            pair = await self._current()
            template = self.template()
            if template is None:
                if pair is None:
                    log.info(f"No {self.what} yet, and nothing to ask for: waiting for the node to have an IP "
                             "address", node=self.node_name)
                await self._template_change(None)
                continue
            if pair is None or not satisfies(pair.cert, self.node_name, template):
                if pair is not None:
                    log.info(f"The {self.what} does not name the node's addresses; requesting a new one",
                             file=self.store.current_path, dnsNames=",".join(template.dns_names),
                             ips=",".join(template.ips))
            else:
                deadline = rotation_deadline(pair, self.rng)
                log.info(f"{self.what.capitalize()} rotation scheduled", expires=_utc(pair.not_after),
                         rotateAt=_utc(deadline), file=self.store.current_path)
                if await self._first(asyncio.sleep(max(0.0, deadline - time.time())),
                                     self._template_change(template)) == 1:
                    continue  # the addresses changed before the deadline: decide again
            await self.rotate(pair.not_after if pair is not None else 0.0)

    async def rotate(self, expires: float = 0.0) -> None:
        """Get a new certificate with the node's credentials and switch to it; retried until done,
        or (the client's) until the current one, expiring at `expires`, has been expired for
        EXIT_AFTER_EXPIRY."""
        delay = RETRY_MIN
        while True:
            if self.exit_on_expiry and expires and time.time() > expires + EXIT_AFTER_EXPIRY:
                raise CertificateExpired(f"the {self.what} {self.store.current_path} expired at "
                                         f"{_utc(expires)} and could not be renewed; exiting so that a restart "
                                         "bootstraps a new one")
            template = self.template()
            if template is None:
                return  # nothing to ask for any more; run() waits for addresses
            try:
                if await self._first(self._request(template), self._template_change(template)) == 0:
                    return
                log.info(f"The node's addresses changed while waiting for the {self.what}; asking again "
                         "with the new ones")
                continue
            except (errors.KubeError, CSRDenied, CSRTimeout, CertificateError, OSError) as e:
                log.error(f"{self.what.capitalize()} rotation failed; retrying", err=str(e), retryIn=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)

    async def _request(self, template: CSRTemplate) -> None:
        await import_key_maker()  # a node waiting for its rotation deadline has not loaded cryptography
        from pykubelet.kube.csr_keys import csr_pem, key_pem_of, new_key

        key = new_key()
        certificate = await request_certificate(self.kube, csr_pem(key, self.node_name, template),
                                                wait_seconds=CSR_WAIT_SECONDS, template=template)
        path = await asyncio.to_thread(self.store.save, certificate, key_pem_of(key))
        await self.on_rotated(path)
        self.rotations += 1
        log.info(f"{self.what.capitalize()} rotated", file=path, node=self.node_name)

    async def _current(self) -> Pair | None:
        try:
            return await asyncio.to_thread(self.store.current)
        except CertificateError as e:
            log.error(f"The current {self.what} does not load; renewing it now", err=str(e))
            return None

    async def _template_change(self, template: CSRTemplate | None) -> None:
        """Returns once the template differs from `template` (never for a template that cannot change)."""
        if not self.dynamic:
            await asyncio.Event().wait()
        while self.template() == template:
            await asyncio.sleep(TEMPLATE_CHECK_SECONDS)

    @staticmethod
    async def _first(*aws: Awaitable[None]) -> int:
        """Run the awaitables until one of them finishes; its index (its exception, if it raised)."""
        tasks = [asyncio.ensure_future(a) for a in aws]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        first = next(i for i, task in enumerate(tasks) if task in done)
        tasks[first].result()
        return first


class ClientCertificateRotation(CertificateRotation):
    """rotateCertificates: the client certificate, renewed with the node's credentials; the client
    switches to it without a restart."""

    def __init__(self, kube: KubeClient, store: CertStore, node_name: str, rng: random.Random | None = None):
        async def reload(_path: str) -> None:
            await kube.reload_credentials()

        super().__init__(kube, store, node_name, CLIENT.what, lambda: CLIENT, reload, dynamic=False, exit_on_expiry=True,
                         rng=rng)
