"""The layering of docs/ARCHITECTURE.md holds: outer layers import inner ones, never the reverse;
inside pods/, the pod path's order; the pure modules do no I/O (pyproject.toml's contracts)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tomllib

REPO = pathlib.Path(__file__).resolve().parents[2]


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _layered(contract: dict) -> set[str]:
    return {name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}


def test_no_module_imports_an_outer_layer():
    lint_imports = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    result = subprocess.run([lint_imports, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"{len(_contracts())} kept, 0 broken" in result.stdout


def test_every_package_and_every_pods_module_has_a_layer():
    """A module no contract names is constrained by none: a new one must be given its place."""
    contracts = [c for c in _contracts().values() if c["type"] == "layers"]
    top = next(c for c in contracts if "containers" not in c)
    pods = next(c for c in contracts if c.get("containers") == ["pykubelet.pods"])
    packages = {f"pykubelet.{p.stem}" for p in (REPO / "pykubelet").iterdir()
                if p.name != "__init__.py" and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert packages - _layered(top) == set()
    modules = {p.stem for p in (REPO / "pykubelet" / "pods").glob("*.py") if p.name != "__init__.py"}
    assert modules - _layered(pods) == set()
