"""Running one CNI plugin binary: find it, exec it with a deadline, decode its answer.

Plugins run as asyncio subprocesses (the event loop never blocks), in their own process
group so a timeout kills the delegated IPAM plugin too, and, with `netns`, inside another
network namespace through nsenter: the bridge, routes and iptables rules then land in that
namespace (a "node" that is a netns on this machine). nsenter execs the plugin, so no
preexec_fn runs between fork and exec: that is unsafe in a process with threads (gRPC).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any, Mapping, Sequence

from pykubelet.cni import errors
from pykubelet.util.log import get_logger
from pykubelet.util.timeouts import within

log = get_logger(__name__)

NSENTER = "nsenter"
# Enough of stderr to explain a failure without flooding a log line.
_STDERR_LIMIT = 2000


def find_plugin(plugin_type: str, bin_dirs: Sequence[str], command: str = "") -> str:
    """The executable named `plugin_type` in the first bin dir that has it."""
    if not plugin_type or "/" in plugin_type or plugin_type in (".", ".."):
        raise errors.PluginNotFound(plugin_type or "<empty>", command, 0, f"invalid plugin type {plugin_type!r}")
    for directory in bin_dirs:
        path = os.path.join(directory, plugin_type)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise errors.PluginNotFound(plugin_type, command, 0,
                                f"failed to find plugin {plugin_type!r} in path {list(bin_dirs)}")


async def run_plugin(path: str, plugin: str, command: str, stdin: Mapping[str, Any],
                     env: Mapping[str, str], timeout: float, netns: str | None = None) -> bytes:
    """Exec the plugin; its stdout on success, CNIError otherwise (killed after `timeout` s)."""
    if netns and not os.path.exists(netns):
        # Said plainly, so DEL's "already gone" reading cannot mistake it for a gone pod netns.
        raise errors.CNIError(plugin, command, 0, f"plugin network namespace {netns} does not exist")
    argv = [NSENTER, f"--net={netns}", "--", path] if netns else [path]
    # Our environment plus the CNI_* values (the plugin needs PATH for iptables, etc.).
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CNI_")}
    full_env.update(env)
    payload = json.dumps(stdin).encode()
    started = time.monotonic()
    log.debug("Running CNI plugin", plugin=plugin, command=command, path=path,
              containerID=env.get("CNI_CONTAINERID", ""), netns=env.get("CNI_NETNS", ""),
              ifname=env.get("CNI_IFNAME", ""), pluginNetns=netns or "")
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=full_env, start_new_session=True)
    except OSError as e:
        raise errors.CNIError(plugin, command, 0, f"cannot execute {argv[0]}", str(e)) from None
    try:
        stdout, stderr = await within(proc.communicate(payload), timeout)
    except asyncio.TimeoutError:
        _kill_group(proc)
        await proc.wait()
        log.debug("CNI plugin timed out", plugin=plugin, command=command, timeout=timeout)
        raise errors.PluginTimeout(plugin, command, 0, f"timed out after {timeout:g}s and was killed") from None
    except BaseException:
        # Cancelled: do not leave the plugin running behind our back.
        _kill_group(proc)
        raise
    elapsed_ms = round((time.monotonic() - started) * 1000)
    log.debug("CNI plugin finished", plugin=plugin, command=command, exitCode=proc.returncode,
              durationMs=elapsed_ms, containerID=env.get("CNI_CONTAINERID", ""),
              stderr=stderr.decode(errors="replace").strip()[-_STDERR_LIMIT:])
    if proc.returncode != 0:
        raise plugin_error(plugin, command, proc.returncode, stdout, stderr)
    return stdout


def plugin_error(plugin: str, command: str, returncode: int | None, stdout: bytes, stderr: bytes) -> errors.CNIError:
    """The plugin's error object from stdout if it printed one, else what stderr says."""
    text = stdout.strip()
    if text:
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and ("msg" in obj or "code" in obj):
            code = obj.get("code")
            return errors.CNIError(plugin, command, code if isinstance(code, int) else 0,
                                   str(obj.get("msg") or "error"), str(obj.get("details") or ""))
    err_text = stderr.decode(errors="replace").strip()[-_STDERR_LIMIT:]
    out_text = text.decode(errors="replace")[-_STDERR_LIMIT:]
    how = f"exited with status {returncode}" if returncode and returncode > 0 else f"killed by signal {-(returncode or 0)}"
    return errors.CNIError(plugin, command, 0, how, err_text or out_text or "no error message")


def decode_json(plugin: str, command: str, stdout: bytes) -> Any:
    try:
        return json.loads(stdout)
    except ValueError as e:
        snippet = stdout[:200].decode(errors="replace")
        raise errors.CNIError(plugin, command, errors.DECODING_FAILURE, "invalid JSON on stdout",
                              f"{e}: {snippet!r}") from None


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
