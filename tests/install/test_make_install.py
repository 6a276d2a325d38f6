"""`make install` and `make uninstall` on this machine, for real, in a mount namespace whose /usr,
/etc and /opt are overlays: the files land in the overlays' upper directories, so the test sees
exactly what the targets wrote and removed, and the machine's own /usr/bin and /etc stay as
they are. pykubelet comes from the wheelhouse (tests/bed/wheelhouse.py), as in the VM images.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bed import wheelhouse

REPO = Path(__file__).resolve().parents[2]
OVERLAID = ("/usr", "/etc", "/opt")
UNITS = "/usr/local/lib/systemd/system"


@pytest.fixture(scope="module")
def wheels() -> Path:
    return wheelhouse.build()


def in_overlays(tmp: Path, script: str, wheels: Path) -> subprocess.CompletedProcess[str]:
    """Run `script` (bash) in a private mount namespace with /usr, /etc and /opt overlaid."""
    setup = ["set -e"]
    for path in OVERLAID:
        key = path.strip("/")
        for part in ("upper", "work"):
            (tmp / f"{key}.{part}").mkdir(exist_ok=True)
        setup.append(f"mount -t overlay overlay -o lowerdir={path},upperdir={tmp}/{key}.upper,"
                     f"workdir={tmp}/{key}.work {path}")
    setup += ["set +e", script]
    env = {**os.environ, "PYKUBELET_WHEELS": str(wheels), "PYTHON": "/usr/bin/python3"}
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", "\n".join(setup)],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)


def written(tmp: Path) -> list[str]:
    """Every file (not directory) left in the overlays: what the targets added or deleted."""
    out = []
    for path in OVERLAID:
        upper = tmp / f"{path.strip('/')}.upper"
        for dirpath, _, files in os.walk(upper):
            out += [os.path.join(path, os.path.relpath(dirpath, upper), f).replace("/./", "/") for f in files]
    return sorted(out)


def test_install_twice_then_uninstall_twice_leaves_nothing(tmp_path, wheels):
    script = f"""
    check() {{ echo "== $1"; }}
    make -s install >install1.log 2>&1; echo "install1=$?"
    make -s install >install2.log 2>&1; echo "install2=$?"
    echo "version=$(/usr/bin/kubelet --version)"
    echo "proxy-link=$(readlink /usr/bin/pykubelet)"
    echo "kubelet-link=$(readlink /usr/bin/kubelet)"
    echo "exec=$(grep -h '^ExecStart=/' {UNITS}/kubelet.service.d/10-kubeadm.conf)"
    echo "enabled=$(readlink /etc/systemd/system/multi-user.target.wants/kubelet.service)"
    cat install1.log install2.log >&2
    rm -f install1.log install2.log
    find /usr /etc /opt -newer {tmp_path} -not -type d 2>/dev/null | grep -v '^/opt/pykubelet/venv/' | sort >&2
    make -s uninstall >&2; echo "uninstall1=$?"
    make -s uninstall >&2; echo "uninstall2=$?"
    """
    result = in_overlays(tmp_path, script, wheels)
    out = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    context = f"{result.stdout}\n{result.stderr[-4000:]}"
    assert out.get("install1") == "0" and out.get("install2") == "0", context
    assert out["version"].startswith("Kubernetes v1.36") and "pykubelet" in out["version"], context
    assert out["kubelet-link"] == out["proxy-link"] == "/opt/pykubelet/venv/bin/pykubelet", context
    assert "$KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS" in out["exec"]
    assert out["enabled"] == f"{UNITS}/kubelet.service", context
    assert out.get("uninstall1") == "0" and out.get("uninstall2") == "0", context
    assert written(tmp_path) == [], context


def test_a_kubelet_that_is_not_ours_is_never_overwritten(tmp_path, wheels):
    script = """
    printf '#!/bin/sh\\necho the real kubelet\\n' > /usr/bin/kubelet && chmod +x /usr/bin/kubelet
    make -s install; echo "install=$?"
    echo "kubelet=$(/usr/bin/kubelet)"
    echo "venv=$(test -e /opt/pykubelet && echo yes || echo no)"
    """
    result = in_overlays(tmp_path, script, wheels)
    out = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert out.get("install") == "2" and out.get("kubelet") == "the real kubelet", result.stdout + result.stderr
    assert "/usr/bin/kubelet exists and is not pykubelet's" in result.stderr
    assert out.get("venv") == "no"
