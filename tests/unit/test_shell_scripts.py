"""The shell scripts the project ships parse (`bash -n`): the VMs that run them take minutes to
boot, so a syntax error is cheapest found here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*REPO.glob("systemd/*.sh"), *REPO.glob("vagrant/provision/*.sh"), *REPO.glob("tests/bed/*.sh")])


def test_there_are_scripts_to_check():
    assert {p.name for p in SCRIPTS} >= {"install.sh", "node.sh", "control-plane.sh", "worker.sh", "vm_image.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
