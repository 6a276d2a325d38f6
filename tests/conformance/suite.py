"""Running Kubernetes' e2e.test under ginkgo against the run's cluster, and reading its JUnit report.

The selection is a ginkgo focus and skip (regular expressions over the full spec text, labels
included). A dry run first lists what the selection holds, so the run can say how far it is.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from tests.conformance.bed import ADMIN, E2E_BIN, say

FOCUS = r"\[NodeConformance\]"
SKIP = r"\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:[^\]]*\]"
SUITE_TIMEOUT = "4h"  # ginkgo's whole-suite limit (its default, 1h, is shorter than a full run)


@dataclass(frozen=True)
class Result:
    name: str  # the spec's full text, labels included, as JUnit names it (without "[It] ")
    status: str  # passed | failed | skipped
    reason: str = ""  # the first line of the failure or skip message

    @property
    def one_line(self) -> str:
        return f"{self.name}: {self.reason}" if self.reason else self.name


@dataclass(frozen=True)
class Target:
    """Where the suite runs: the cluster's admin kubeconfig, and what the command is run under
    (nsenter into a network namespace from which the apiserver, nodes and pods are reached)."""

    kubeconfig: pathlib.Path = ADMIN
    prefix: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()  # more e2e.test flags


def ginkgo_argv(out: pathlib.Path, focus: str, skip: str, procs: int, dry_run: bool = False,
                timeout: str = SUITE_TIMEOUT, target: Target = Target()) -> list[str]:
    argv = [*target.prefix, str(E2E_BIN / "ginkgo"), f"--procs={procs}", f"--timeout={timeout}", "--no-color",
            f"--focus={focus}", f"--output-dir={out}", "--junit-report=junit.xml", "--silence-skips"]
    if skip:  # an empty --skip would be a pattern that matches, and so skips, every spec
        argv.append(f"--skip={skip}")
    if dry_run:
        argv.append("--dry-run")
    return [*argv, str(E2E_BIN / "e2e.test"), "--", f"--kubeconfig={target.kubeconfig}", "--provider=skeleton",
            f"--report-dir={out}", "--e2e-output-dir", str(out), *target.extra_args]


def selected(out: pathlib.Path, focus: str, skip: str, target: Target = Target()) -> list[str]:
    """The specs the selection holds (a dry run: nothing is created)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(ginkgo_argv(out, focus, skip, 1, dry_run=True, target=target), capture_output=True, text=True,
                   timeout=600)
    return [r.name for r in read_junit(out / "junit.xml")]


def run(out: pathlib.Path, focus: str, skip: str, procs: int, expected: int,
        timeout: str = SUITE_TIMEOUT, target: Target = Target()) -> list[Result]:
    """Run the selection with `procs` ginkgo processes; its output goes to out/ginkgo.log, and a
    progress line to stdout every minute."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "ginkgo.log"
    junit = out / "junit.xml"
    junit.unlink(missing_ok=True)
    say(f"running {expected} specs with {procs} ginkgo processes (output: {log_path})")
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(ginkgo_argv(out, focus, skip, procs, timeout=timeout, target=target), stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, "KUBECONFIG": str(target.kubeconfig)})
        while True:
            try:
                proc.wait(60)
                break
            except subprocess.TimeoutExpired:
                done, failed = _progress(log_path)
                say(f"{done}/{expected} specs done, {failed} failed ({(time.monotonic() - start) / 60:.0f} min)")
    say(f"ginkgo exited with {proc.returncode} after {(time.monotonic() - start) / 60:.1f} min")
    if not junit.exists():
        raise RuntimeError(f"ginkgo wrote no JUnit report; see {log_path}")
    return read_junit(junit)


def _progress(log_path: pathlib.Path) -> tuple[int, int]:
    """(specs finished, specs failed) from ginkgo's output: each finished spec prints a bullet."""
    text = log_path.read_text(errors="replace")
    return text.count("•"), len(re.findall(r"• \[(?:FAILED|PANICKED|TIMEDOUT|INTERRUPTED)\]", text))


def read_junit(path: pathlib.Path) -> list[Result]:
    """The selected specs of a ginkgo JUnit report (the specs the selection left out and the
    suite-level nodes that passed are not listed)."""
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        status = case.get("status", "")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped")
        if not name.startswith("[It] ") and status == "passed":
            continue  # BeforeSuite, ReportAfterSuite... that went well
        name = name.removeprefix("[It] ")
        if problem is not None:
            results.append(Result(name, "failed", _first_line(problem.get("message", "") or problem.text or "")))
        elif skipped is not None or status in ("skipped", "pending"):
            message = skipped.get("message", "") if skipped is not None else status
            if message in ("skipped", "pending"):
                continue  # not selected by the focus and skip: not part of this run
            results.append(Result(name, "skipped", _first_line(message.removeprefix("skipped - "))))
        else:
            results.append(Result(name, "passed"))
    return results


def _first_line(message: str) -> str:
    for line in message.splitlines():
        line = line.strip()
        if line and not line.startswith("["):  # ginkgo's "[FAILED]" banner carries no reason
            return line[:300]
    return message.strip()[:300]


def problems(results: list[Result], specs: tuple[str, ...]) -> list[str]:
    """What keeps a fixed selection from passing: each spec that did not pass (with e2e.test's
    reason) and each named spec the run did not hold (a renamed spec must not pass by vanishing)."""
    ran = {r.name for r in results}
    never_ran = [spec for spec in specs if not any(name.startswith(spec) for name in ran)]
    return [f"{r.status}: {r.one_line}" for r in results if r.status != "passed"] + \
        [f"not selected: {spec}" for spec in never_ran]


def summary(results: list[Result], reference: list[Result] | None = None, reference_name: str = "") -> str:
    """passed/failed/skipped, one line per failure (and per skip, with its reason), and when a
    reference run is given, every spec whose outcome differs from it."""
    counts = {s: sum(r.status == s for r in results) for s in ("passed", "failed", "skipped")}
    lines = [f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
             f"(of {len(results)})"]
    for status in ("failed", "skipped"):
        for r in sorted(results, key=lambda r: r.name):
            if r.status == status:
                lines.append(f"  {status.upper():8} {r.one_line}")
    if reference:
        theirs = {r.name: r for r in reference}
        diffs = [(r, theirs[r.name]) for r in results if r.name in theirs and theirs[r.name].status != r.status]
        lines.append(f"{len(diffs)} specs differ from {reference_name}'s run:")
        for ours, ref in sorted(diffs, key=lambda d: d[0].name):
            lines.append(f"  {ours.status} here, {ref.status} on {reference_name}: {ours.one_line}")
    return "\n".join(lines)


def report(results: list[Result], results_root: pathlib.Path, node: str, results_dir: pathlib.Path, title: str,
           started: float, reference: str = "") -> int:
    """The summary (with what differs from the last run in results_root/`reference`, by default the
    other node type's) into summary.txt and on stdout; the exit status: 1 when a spec failed."""
    other = reference or ("kubelet" if node == "pykubelet" else "pykubelet")
    reference = None
    if (results_root / other / "junit.xml").exists():
        reference = read_junit(results_root / other / "junit.xml")
    text = summary(results, reference, other)
    (results_dir / "summary.txt").write_text(text + "\n")
    print(f"\n=== {title} ({(time.monotonic() - started) / 60:.0f} min; "
          f"JUnit: {results_dir / 'junit.xml'})\n{text}", flush=True)
    return 1 if any(r.status == "failed" for r in results) else 0


def arguments(description: str, nodes: tuple[str, ...], results_default: str) -> argparse.ArgumentParser:
    """The options every conformance runner takes (NODE, CONFORMANCE_PROCS, CONFORMANCE_FOCUS and
    CONFORMANCE_SKIP from the environment by default); the runner adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--node", choices=nodes, default=os.environ.get("NODE", "pykubelet"))
    parser.add_argument("--procs", type=int, default=int(os.environ.get("CONFORMANCE_PROCS", "3")))
    parser.add_argument("--focus", default=os.environ.get("CONFORMANCE_FOCUS") or FOCUS)
    parser.add_argument("--skip", default=os.environ.get("CONFORMANCE_SKIP") or SKIP)
    parser.add_argument("--results", type=pathlib.Path, default=None,
                        help=f"where the JUnit report and logs go (default {results_default})")
    return parser
