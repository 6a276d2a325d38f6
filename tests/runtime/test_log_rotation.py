"""Container log rotation against real containerd: a chatty container's log files stay few and
bounded, the older ones gzipped, the container writes on into the new file, `kubectl logs` shows
the live file only, and a follower goes on across rotations without losing or repeating a line."""

from __future__ import annotations

import gzip
import os
import pathlib
import ssl
import threading
import urllib.request

from tests.helpers import wait_for
from tests.runtime.conftest import NODE, AgentProcess, main_status, pod_manifest, write_manifest

MAX_SIZE = 100 * 1024
MAX_FILES = 3
INTERVAL = 3  # the kubelet's smallest containerLogMonitorInterval
# ~40 KB/s: bursts of 20 lines of ~200 bytes, ten bursts a second
CHATTY = ("i=0; pad=$(printf '%0180d' 0); while true; do for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; "
          "do echo n-$i-$pad; i=$((i+1)); done; sleep 0.1; done")
# The most a file can grow past MAX_SIZE before the next check, with a wide margin for a slow machine.
LARGEST_FILE = MAX_SIZE + 4 * INTERVAL * 40 * 1024
OPEN = ("--anonymous-auth", "--authorization-mode", "AlwaysAllow")


def numbers(lines: list[str]) -> list[int]:
    return [int(line.split("-")[1]) for line in lines if line.startswith("n-")]


def cri_lines(data: bytes) -> list[str]:
    """The content of CRI log lines (time, stream, tag, content)."""
    return [line.split(" ", 3)[3] for line in data.decode().splitlines() if line.count(" ") >= 3]


def https(agent: AgentProcess, path: str) -> urllib.request.Request:
    return urllib.request.Request(f"https://127.0.0.1:{agent.api_port}{path}")


def insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def log_files(directory: pathlib.Path) -> dict[str, int]:
    """name -> size of the container's log files; files come and go while it is listed."""
    out = {}
    for name in os.listdir(directory):
        try:
            out[name] = (directory / name).stat().st_size
        except FileNotFoundError:
            continue
    return out


async def test_a_chatty_containers_logs_are_rotated_bounded_and_followed(cri, tmp_path, manifests):
    kubelet_config = tmp_path / "kubelet.yaml"
    kubelet_config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                              f"containerLogMaxSize: 100Ki\ncontainerLogMaxFiles: {MAX_FILES}\n"
                              f"containerLogMonitorInterval: {INTERVAL}s\n")
    agent = AgentProcess(tmp_path, manifests, *OPEN, "--config", str(kubelet_config)).start()
    try:
        write_manifest(manifests, "chatty", pod_manifest("chatty", CHATTY))
        pod = await agent.wait_pod(f"chatty-{NODE}", lambda p: "running" in main_status(p)["state"], 60, "running")
        container_id = main_status(pod)["containerID"].split("://")[1]
        live = pathlib.Path((await cri.container_status(container_id)).status.log_path)
        received: list[str] = []

        def follow() -> None:
            url = f"/containerLogs/default/chatty-{NODE}/main?follow=true"
            try:
                with urllib.request.urlopen(https(agent, url), context=insecure(), timeout=60) as r:
                    for line in r:
                        received.append(line.decode().strip())
            except OSError:
                pass
        threading.Thread(target=follow, daemon=True).start()
        await wait_for(lambda: len(received) >= 20, 20, "the follower's first lines", describe=agent.describe)

        seen: list[dict[str, int]] = []

        def rotated_thrice() -> bool:
            seen.append(log_files(live.parent))
            rotations = {name.removesuffix(".gz") for s in seen for name in s if name != live.name}
            return len(rotations) >= 3
        await wait_for(rotated_thrice, 90, "three rotations", describe=lambda: f"{seen[-1:]}\n{agent.describe()}")

        # Bounded all along: never more than MAX_FILES files (a compression's .tmp included), none huge.
        assert max(len(s) for s in seen) <= MAX_FILES, [s for s in seen if len(s) > MAX_FILES][:3]
        assert max(size for s in seen for name, size in s.items() if not name.endswith(".gz")) <= LARGEST_FILE

        def rotated_lines() -> tuple[list[int], list[int]] | None:
            """(the gzipped file's numbers, the plain rotated file's), both read between two rotations."""
            files = sorted(n for n in log_files(live.parent) if n != live.name)
            if len(files) != 2 or not files[0].endswith(".gz") or files[1].endswith((".gz", ".tmp")):
                return None
            try:
                return (numbers(cri_lines(gzip.decompress((live.parent / files[0]).read_bytes()))),
                        numbers(cri_lines((live.parent / files[1]).read_bytes())))
            except FileNotFoundError:
                return None  # a rotation meanwhile
        compressed, plain = await wait_for(rotated_lines, 20, "a gzipped and a plain rotated file")
        # The gzipped file holds the lines before the plain rotated one's, which come before the live file's.
        assert compressed == list(range(compressed[0], plain[0])) and plain == list(range(plain[0], plain[-1] + 1))

        # The container writes on into the new file; `kubectl logs` shows that file only.
        await wait_for(lambda: live.exists() and live.stat().st_size > 4096, 20, "the new live file to fill")
        with urllib.request.urlopen(https(agent, f"/containerLogs/default/chatty-{NODE}/main"),
                                    context=insecure(), timeout=20) as r:
            shown = numbers(r.read().decode().splitlines())
        assert shown[0] > plain[-1] and shown == list(range(shown[0], shown[0] + len(shown)))

        # The follower went on across every rotation: none lost, none twice.
        await wait_for(lambda: numbers(received[-1:]) and numbers(received[-1:])[0] > shown[-1], 20,
                       "the follower to pass what `kubectl logs` showed")
        followed = numbers(list(received))
        assert followed == list(range(followed[0], followed[0] + len(followed)))
        assert followed[0] < compressed[0]  # it started before the rotations it followed across
    finally:
        agent.shutdown()
