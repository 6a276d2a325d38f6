"""The host under the agent: resources against evictionHard (the Memory/Disk/PIDPressure
conditions), the clock, and the certificates the node presents and trusts.

Pressure is measured as the agent's eviction manager measures it, from the same figures its
/stats/summary gives (memory.available is the machine's memory less the root cgroup's working
set, nodefs the root dir's filesystem, imagefs containerd's, pid.available what is left of
pid_max); each signal is shown with its numbers, so "why DiskPressure?" has an answer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from datetime import datetime, timezone

from cryptography import x509
from cryptography.x509.oid import NameOID

from pykubelet.api.eviction import Threshold
from pykubelet.diagnose.checks import FAIL, OK, WARN, Node, size
from pykubelet.node.eviction_signals import observe
from pykubelet.server.stats import IMAGEFS_DIR, node_signal_stats
from pykubelet.server.tls import CERT_NAME, SERVING_PREFIX

EXPIRY_WARNING_DAYS = 30
CLOCK_WARN_SECONDS, CLOCK_FAIL_SECONDS = 2.0, 60.0
TIME_ERROR = 5  # adjtimex(2): the kernel clock is not synchronized
CONDITIONS = {"MemoryPressure": ("memory.available",),
              "DiskPressure": ("nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree"),
              "PIDPressure": ("pid.available",)}


UNITS = {"memory.available": "bytes", "nodefs.available": "bytes", "imagefs.available": "bytes",
         "nodefs.inodesFree": "inodes", "imagefs.inodesFree": "inodes", "pid.available": "pids"}


def existing(path: str) -> str:
    """The path, or its nearest existing parent: the filesystem it is (or will be) on."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _amount(n: float, unit: str) -> str:
    return size(n) if unit == "bytes" else f"{n:,.0f} {unit}"


def pressure(node: Node) -> None:
    s = node.settings
    thresholds: dict[str, Threshold] = s.cluster.eviction_hard
    observed = observe({"node": node_signal_stats(existing(s.root_dir))})
    for condition, signals in CONDITIONS.items():
        lines, crossed, close = [], [], []
        for signal in signals:
            threshold = thresholds.get(signal)
            if threshold is None:
                continue
            seen = observed.get(signal)
            if seen is None:
                lines.append(f"{signal}: cannot measure it")
                continue
            available, capacity, unit = seen.available, max(seen.capacity, 1), UNITS[signal]
            limit = threshold.limit(capacity)
            hard = f"{threshold.percent:g}% = {_amount(limit, unit)}" if threshold.percent else _amount(limit, unit)
            where = f" on {s.root_dir if signal.startswith('nodefs') else IMAGEFS_DIR}" if "fs." in signal else ""
            lines.append(f"{signal}{where}: {_amount(available, unit)} of {_amount(capacity, unit)} "
                         f"({100 * available / capacity:.0f}%); evictionHard {hard}")
            if threshold.crossed(available, capacity):
                crossed.append(signal)
            elif available < 1.5 * limit:
                close.append(signal)
        if not lines:
            continue
        more = {"MemoryPressure": "free -h", "PIDPressure": "ps -e --no-headers | wc -l"}.get(
            condition, f"df -h {s.root_dir} {IMAGEFS_DIR}; df -i {s.root_dir}")
        if crossed:
            node.add("Resources", FAIL, f"{condition}: {', '.join(crossed)} below its evictionHard threshold", lines,
                     more)
        elif close:
            node.add("Resources", WARN, f"{condition} soon: {', '.join(close)} close to its evictionHard threshold",
                     lines, more)
        else:
            node.add("Resources", OK, f"no {condition}", lines)


def _kernel_synchronized() -> bool | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        timex = ctypes.create_string_buffer(512)  # struct timex with modes 0: read only
        return libc.adjtimex(timex) != TIME_ERROR
    except (OSError, AttributeError):
        return None


def clock(node: Node) -> None:
    synced = _kernel_synchronized()
    kernel = {True: "the kernel clock is NTP-synchronized", False: "the kernel clock is not synchronized (no NTP?)",
              None: "cannot ask the kernel whether the clock is synchronized"}[synced]
    offset = node.apiserver_offset
    more = "timedatectl  (or: chronyc tracking)"
    if offset is None:
        status = WARN if synced is False else OK
        node.add("Clock", status, f"{kernel}; no apiserver clock to compare with", more=more)
    elif abs(offset) > CLOCK_FAIL_SECONDS or abs(offset) > CLOCK_WARN_SECONDS:
        status = FAIL if abs(offset) > CLOCK_FAIL_SECONDS else WARN
        node.add("Clock", status, f"this node's clock is {abs(offset):.0f}s {'behind' if offset > 0 else 'ahead of'} "
                                  "the apiserver's", [kernel, "skew breaks certificate validity and token times"], more)
    else:
        node.add("Clock", OK, f"agrees with the apiserver's (within {max(abs(offset), 1):.0f}s); {kernel}")


def read_certificates(path: str) -> list[x509.Certificate]:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())


def certificate_check(node: Node, area: str, what: str, path: str, label: str = "", expect_cn: str = "",
                      more: str = "") -> None:
    """One certificate file (the soonest to expire of a bundle): OK, WARN within 30 days, FAIL expired.
    `label` names where it comes from when `path` is only a copy (a kubeconfig's embedded data)."""
    more = more or f"openssl x509 -noout -subject -dates -in {path}"
    try:
        certs = read_certificates(path)
    except (OSError, ValueError) as e:
        node.add(area, FAIL, f"{what} {label or path}: cannot read it: {e}", more=more)
        return
    cert = min(certs, key=lambda c: c.not_valid_after_utc)
    cn = ", ".join(a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME))
    groups = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    who = f"{what} {cn!r}" + (f" (groups {', '.join(groups)})" if groups else "") + (f" from {label}" if label else "")
    now = datetime.now(timezone.utc)
    left = cert.not_valid_after_utc - now
    evidence = [f"valid {cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
                + ("" if label else f" ({path})")]
    if expect_cn and cn != expect_cn:
        evidence.append(f"the Node authorizer expects {expect_cn!r} for this node")
    if now < cert.not_valid_before_utc:
        node.add(area, FAIL, f"{who} is not valid yet (from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC): "
                             "is this clock right?", evidence, more)
    elif left.total_seconds() <= 0:
        node.add(area, FAIL, f"{who} expired {(-left).days} days ago", evidence, more)
    elif left.days < EXPIRY_WARNING_DAYS:
        node.add(area, WARN, f"{who} expires in {left.days} days", evidence, more)
    else:
        node.add(area, WARN if expect_cn and cn != expect_cn else OK, f"{who}, valid for {left.days} more days",
                 evidence, more)


def certificates(node: Node) -> None:
    s = node.settings
    cert_dir = s.certificate_dir()
    serving = s.server.tls_cert_file or os.path.join(cert_dir, CERT_NAME)
    if s.server.server_tls_bootstrap:
        serving = os.path.join(cert_dir, f"{SERVING_PREFIX}-current.pem")
    files = [("serving certificate (:10250)", serving)]
    if s.authn.client_ca_file:
        files.append(("client CA", s.authn.client_ca_file))
    rotated = os.path.join(cert_dir, "kubelet-client-current.pem")
    if os.path.exists(rotated):
        files.append(("client certificate", rotated))
    for what, path in files:
        if what.startswith("serving") and s.server.server_tls_bootstrap and not os.path.exists(path):
            node.add("Certificates", WARN, f"{what}: none issued yet (serverTLSBootstrap: the node's "
                                           "kubelet-serving CSR waits for approval: kubectl get csr)")
            continue
        if what.startswith("serving") and not s.server.tls_cert_file and not os.path.exists(path):
            node.add("Certificates", OK, f"{what}: none yet (the agent makes a self-signed one at {path})")
            continue
        certificate_check(node, "Certificates", what, path)
