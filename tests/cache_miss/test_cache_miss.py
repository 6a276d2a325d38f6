"""Every cached build of the test bed runs its cache-miss path in CI, every run.

CI's machine keeps its caches (/var/cache/pykubelet), so `make test` finds every build done and
skips each build script's whole path: a script broken there would pass CI for days and fail
every new machine. `tests/bed/fresh-check.sh --link-only` runs each build into an empty cache,
reusing only Go's module and build caches (the linker runs, the compiler finds its work done),
then `make run` until the example pods run. A second test shows the check turns red when a build
script is broken, by breaking one the way it once broke, in a copy of the tree.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

from tests import progress

REPO = Path(__file__).resolve().parents[2]
FRESH_CHECK = Path("tests/bed/fresh-check.sh")
STEPS = ("make-run", "control-plane", "kube-proxy", "containerd2", "e2e", "images", "e2e-images", "wheelhouse", "vm-setup",
         "vagrant-box")


def fresh_check(tree: Path, *args: str, timeout: float) -> tuple[int, str]:
    """Run TREE's fresh-check.sh, its progress shown past pytest's capture; (exit code, output).
    Past TIMEOUT seconds it is interrupted (it cleans up after itself on SIGTERM)."""
    lines = []
    with subprocess.Popen(["bash", str(FRESH_CHECK), "--link-only", *args], cwd=tree, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) as check:
        timed_out = threading.Event()

        def interrupt() -> None:
            timed_out.set()
            check.terminate()
        deadline = threading.Timer(timeout, interrupt)
        deadline.start()
        try:
            assert check.stdout is not None
            for line in check.stdout:
                lines.append(line)
                if line.startswith(("[fresh-check", "[build-", "[make-run-check", "setup:")):
                    progress.say("fresh-check", line.rstrip())
            rc = check.wait()
        finally:
            deadline.cancel()
    if timed_out.is_set():
        lines.append(f"\n(interrupted after {timeout:.0f}s)\n")
    return rc, "".join(lines)


def test_every_cached_build_runs_its_cache_miss_path():
    rc, output = fresh_check(REPO, timeout=3600)
    assert rc == 0, output[-6000:]
    for step in STEPS:
        assert f"] {step} done in" in output, f"step {step} did not run:\n{output[-3000:]}"
    assert "every build ran its cache-miss path (link-only)" in output


def test_a_broken_build_script_turns_the_check_red(tmp_path):
    """The bug this check exists for: the etcd part of build-control-plane.sh read a variable
    that had become a local of k8s-module.sh's k8s_module. Put it back in a copy of the tree."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO, tree, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", ".cluster", "build", "__pycache__", "*.egg-info"))
    script = tree / "tests/bed/build-control-plane.sh"
    text = script.read_text()
    assert "go $etcd_go" in text
    script.write_text(text.replace("go $etcd_go", "go $go_directive"))
    (tree / ".venv").symlink_to(REPO / ".venv")  # --link-only runs the tree's own virtualenv

    rc, output = fresh_check(tree, "--only", "control-plane", timeout=900)

    assert rc != 0, output[-3000:]
    assert "go_directive: unbound variable" in output, output[-3000:]
    assert "control-plane FAILED" in output, output[-3000:]
    lint = subprocess.run(["shellcheck", "--severity=warning", str(script)], capture_output=True, text=True)
    assert "SC2154" in lint.stdout and "go_directive" in lint.stdout, lint.stdout

