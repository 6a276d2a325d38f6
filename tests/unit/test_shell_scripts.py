"""The shell scripts the project ships parse (`bash -n`) and pass shellcheck: the VMs that run
some of them take minutes to boot, and the build scripts' cache-miss paths run only on a machine
that has never built (a variable that a refactoring left unassigned once broke every fresh
machine's `make test` while warm caches hid it). Both are cheapest found here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Severity warning: SC2154 (a variable referenced but never assigned) is a warning, and it is
# exactly what broke. Without --external-sources shellcheck never follows a `source`, so each
# script is checked on its own: a lower-case variable it reads must be assigned in it.
SHELLCHECK = ["shellcheck", "--severity=warning", "--format=gcc"]


def shell_scripts(root: Path) -> list[Path]:
    """Every file under ROOT that git tracks and that is a shell script: named *.sh or starting
    with a sh/bash shebang."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    scripts = []
    for name in listed.decode().split("\0"):
        path = root / name
        if not name or not path.is_file():
            continue
        with open(path, "rb") as f:
            first = f.readline(200)
        if name.endswith(".sh") or (first.startswith(b"#!") and first.split(b"/")[-1].split()[-1:] in ([b"sh"], [b"bash"])):
            scripts.append(path)
    return sorted(scripts)


def shellcheck(scripts: list[Path], cwd: Path) -> subprocess.CompletedProcess:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: `make setup` installs it (Debian package shellcheck)")
    return subprocess.run([*SHELLCHECK, *map(str, scripts)], cwd=cwd, capture_output=True, text=True)


SCRIPTS = shell_scripts(REPO)


def test_every_shell_script_is_found():
    names = {str(p.relative_to(REPO)) for p in SCRIPTS}
    assert names >= {"systemd/install.sh", "vagrant/provision/node.sh", "vagrant/provision/control-plane.sh",
                     "vagrant/provision/worker.sh", "tests/bed/vm_image.sh", "tests/bed/build-control-plane.sh",
                     "tests/bed/k8s-module.sh", "tests/bed/fresh-check.sh", ".ci/run"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_shellcheck_finds_nothing():
    result = shellcheck(SCRIPTS, REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_finds_a_variable_that_no_longer_exists(tmp_path):
    """What broke fresh machines: a script read a variable that had become a function's local in
    the file it sources. The lint must say so."""
    (tmp_path / "lib.sh").write_text("# shellcheck shell=bash\nf() { local version; version=1; echo \"$version\"; }\n")
    (tmp_path / "build.sh").write_text('#!/usr/bin/env bash\nset -eu\nhere=$(dirname "$0")\n'
                                       'source "$here/lib.sh"\nf\necho "go $version"\n')
    result = shellcheck([tmp_path / "build.sh"], tmp_path)
    assert result.returncode != 0 and "SC2154" in result.stdout and "version" in result.stdout, result.stdout
