"""The node's client identity before it talks to the apiserver: TLS bootstrap, as the kubelet does it.

1. --kubeconfig exists and its client certificate loads and is valid now (or it authenticates
   without one): use it. With rotateCertificates, the cert store is seeded from its certificate
   when the store has no valid one (kubeadm init's kubelet.conf embeds the node's first
   certificate; kubeadm then points kubelet.conf at kubelet-client-current.pem).
2. Otherwise, with --bootstrap-kubeconfig: unless the cert store already holds a valid
   certificate, make an ECDSA P-256 key and a CSR with the bootstrap credentials (kube/csr.py),
   wait for it to be approved and signed, store the pair (kube/certstore.py), then write
   --kubeconfig pointing at kubelet-client-current.pem (kube/kubeconfig.py).
3. Neither: an error naming the file and what is wrong with it.

Failures that can heal (a wrong or expired token someone replaces, an unreachable apiserver, a
CA that does not match, a denied or unanswered CSR) are logged with what to do and retried with
back-off; the bootstrap kubeconfig is read again on every attempt. Pods already running on the
node are not touched meanwhile: the agent starts syncing them once it has an identity.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pykubelet.config.settings import ClusterSettings
from pykubelet.kube import errors
from pykubelet.kube.certstore import CertificateError, CertStore, Pair, load_pair
from pykubelet.kube.client import KubeClient
from pykubelet.kube.csr import CSRDenied, CSRTimeout, import_key_maker, request_certificate
from pykubelet.kube.kubeconfig import Kubeconfig, KubeconfigError, read_kubeconfig, write_node_kubeconfig
from pykubelet.util import durable
from pykubelet.util.log import get_logger

# A node with a usable certificate reads it with the standard library; the key and CSR of a TLS
# bootstrap are made with cryptography (csr_keys), imported (in a thread) only when one is made.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

log = get_logger(__name__)

CSR_WAIT_SECONDS = 15 * 60  # how long one CSR is waited on before a new one is made (the kubelet's)
RETRY_MIN, RETRY_MAX = 2.0, 60.0
PENDING_KEY = "kubelet-client.key.tmp"  # the key of a CSR still waited on, kept across restarts


class BootstrapError(Exception):
    """The node has no way to an identity; the message names the files and what is wrong."""


@dataclass(frozen=True)
class NodeCredentials:
    kubeconfig: str
    client_pem: str
    """The cert store's current pair, used instead of the kubeconfig's own credentials; "" for none."""
    rotate: bool
    """Rotate client_pem before it expires (rotateCertificates with a certificate to rotate)."""


def _usable(path: str) -> tuple[Kubeconfig | None, str]:
    """The kubeconfig if it can authenticate now; else None and why not."""
    if not os.path.exists(path):
        return None, "does not exist"
    try:
        config = read_kubeconfig(path)
        if config.has_client_cert:
            pair = load_pair(config.cert_pem, config.key_pem or config.cert_pem, path)
            if not pair.valid_at(time.time()):
                return None, f"its client certificate is valid only from {_utc(pair.not_before)} to {_utc(pair.not_after)}"
        return config, ""
    except (KubeconfigError, CertificateError) as e:
        return None, str(e)


def _utc(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _valid_current(store: CertStore) -> Pair | None:
    try:
        pair = store.current()
    except CertificateError as e:
        log.warning("Ignoring an unusable client certificate", err=str(e))
        return None
    return pair if pair is not None and pair.valid_at(time.time()) else None


async def node_credentials(cluster: ClusterSettings, node_name: str, user_agent: str) -> NodeCredentials:
    """The credentials the agent joins the cluster with, after TLS bootstrap if it takes one. Every
    file is read and written in a thread: static pods may be running meanwhile."""
    store = CertStore(cluster.cert_dir)
    at_hand, why = await asyncio.to_thread(_credentials_at_hand, cluster, store)
    if at_hand is not None:
        return at_hand
    if not cluster.bootstrap_kubeconfig:
        raise BootstrapError(f"{cluster.kubeconfig}: {why}, and there is no --bootstrap-kubeconfig to get a "
                             "client certificate with")
    log.info("No usable kubeconfig; TLS bootstrap", kubeconfig=cluster.kubeconfig, reason=why,
             bootstrapKubeconfig=cluster.bootstrap_kubeconfig, certDir=cluster.cert_dir)
    if await asyncio.to_thread(_valid_current, store) is None:
        await _bootstrap(cluster, store, node_name, user_agent)
    else:
        log.info("Using the valid client certificate already in the store", file=store.current_path)
    await asyncio.to_thread(_write_node_kubeconfig, cluster, store)
    log.info("Wrote the node's kubeconfig", kubeconfig=cluster.kubeconfig, client=store.current_path)
    return NodeCredentials(cluster.kubeconfig, store.current_path, cluster.rotate_certificates)


def _credentials_at_hand(cluster: ClusterSettings, store: CertStore) -> tuple[NodeCredentials | None, str]:
    """The credentials of a usable --kubeconfig (the store seeded from it, with rotation); else
    None and why it cannot be used."""
    config, why = _usable(cluster.kubeconfig)
    if config is None:
        return None, why
    if not (cluster.rotate_certificates and config.has_client_cert):
        return NodeCredentials(cluster.kubeconfig, "", False), ""
    if _valid_current(store) is None:
        path = store.save(config.cert_pem, config.key_pem or config.cert_pem)
        log.info("Seeded the client certificate store from the kubeconfig", kubeconfig=cluster.kubeconfig, file=path)
    return NodeCredentials(cluster.kubeconfig, store.current_path, True), ""


def _write_node_kubeconfig(cluster: ClusterSettings, store: CertStore) -> None:
    try:
        bootstrap = read_kubeconfig(cluster.bootstrap_kubeconfig)
    except KubeconfigError as e:
        raise BootstrapError(f"cannot write {cluster.kubeconfig}: {e}") from None
    write_node_kubeconfig(cluster.kubeconfig, bootstrap, store.current_path)


async def _bootstrap(cluster: ClusterSettings, store: CertStore, node_name: str, user_agent: str) -> None:
    delay = RETRY_MIN
    while True:
        try:
            await _request(cluster.bootstrap_kubeconfig, store, node_name, user_agent)
            return
        except CSRDenied as e:
            _forget_pending_key(store)  # a new key makes a new CSR (the name follows the key)
            log.error("TLS bootstrap: the certificate signing request was refused; making a new one",
                      err=str(e), retryIn=delay)
        except CSRTimeout as e:
            log.error("TLS bootstrap: no certificate yet; asking again", err=str(e), retryIn=delay)
        except (KubeconfigError, CertificateError) as e:
            log.error("TLS bootstrap: unusable bootstrap kubeconfig; retrying", err=str(e), retryIn=delay)
        except errors.KubeError as e:
            log.error("TLS bootstrap failed; retrying", err=explain(e, cluster.bootstrap_kubeconfig), retryIn=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX)


async def _request(bootstrap_path: str, store: CertStore, node_name: str, user_agent: str) -> None:
    await import_key_maker()
    from pykubelet.kube.csr_keys import bootstrap_csr_name, csr_pem, key_pem_of

    # named errors for a missing or broken file, before kubernetes_asyncio's
    await asyncio.to_thread(read_kubeconfig, bootstrap_path)
    key = await asyncio.to_thread(_pending_key, store)
    kube = await KubeClient.from_kubeconfig(bootstrap_path, user_agent=user_agent)
    try:
        certificate = await request_certificate(kube, csr_pem(key, node_name), name=bootstrap_csr_name(key, node_name),
                                                wait_seconds=CSR_WAIT_SECONDS)
    finally:
        await kube.close()
    path = await asyncio.to_thread(store.save, certificate, key_pem_of(key))
    await asyncio.to_thread(_forget_pending_key, store)
    log.info("TLS bootstrap done: client certificate stored", file=path, node=node_name)


def _pending_key(store: CertStore) -> ec.EllipticCurvePrivateKey:
    from pykubelet.kube.csr_keys import key_pem_of, new_key, read_key  # imported by the caller, in a thread

    path = os.path.join(store.directory, PENDING_KEY)
    try:
        with open(path, "rb") as f:
            key = read_key(f.read())
        if key is not None:
            return key
    except OSError:
        pass
    key = new_key()
    os.makedirs(store.directory, mode=0o700, exist_ok=True)
    durable.write_file(path, key_pem_of(key), 0o600)
    return key


def _forget_pending_key(store: CertStore) -> None:
    try:
        os.unlink(os.path.join(store.directory, PENDING_KEY))
    except FileNotFoundError:
        pass


def explain(e: errors.KubeError, bootstrap_path: str) -> str:
    """What an apiserver error during bootstrap means for the user, naming the file to fix."""
    if e.status == 401:
        return (f"the apiserver rejected the credentials in {bootstrap_path} (401 Unauthorized): the bootstrap "
                "token is wrong or has expired (kubeadm token create makes a new one)")
    if e.status == 403:
        return (f"the credentials in {bootstrap_path} may not create certificate signing requests (403 Forbidden: "
                f"{e.message}); bind their group to the system:node-bootstrapper ClusterRole")
    if isinstance(e, errors.Unreachable) and "certificate" in f"{e.reason} {e.message}".lower():
        return (f"the apiserver's serving certificate is not signed by the CA in {bootstrap_path} "
                f"(certificate-authority / certificate-authority-data): {e.message}")
    if isinstance(e, errors.Unreachable):
        return f"cannot reach the apiserver named in {bootstrap_path}: {e.message}"
    return str(e)
