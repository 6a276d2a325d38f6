"""Running iptables-save/-restore, nft and friends: text in, text out, a deadline, a clear error.

The proxy runs in the node's network namespace (a real node's root namespace, or a test bed's
node namespace entered with `ip netns exec`), so the commands act on the node's netfilter as is.
"""

from __future__ import annotations

import asyncio

from pykubelet.util.timeouts import within

# Debian 12's iptables-nft restores tens of thousands of chains in minutes (5,000 Services with 10
# endpoints each: about five), kube-proxy's restores too; only a command hung for longer fails.
COMMAND_TIMEOUT = 1800.0


class CommandFailed(RuntimeError):
    def __init__(self, argv: tuple[str, ...], code: int, stderr: str):
        self.argv, self.code, self.stderr = argv, code, stderr
        super().__init__(f"{' '.join(argv)} failed (exit {code}): {stderr.strip()[:2000]}")


async def run(*argv: str, stdin: str | None = None, timeout: float = COMMAND_TIMEOUT) -> str:
    """argv's stdout; CommandFailed (with its stderr) when it exits non-zero or outlives timeout."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as e:
        raise CommandFailed(argv, 127, f"cannot run {argv[0]}: {e.strerror}") from None
    try:
        out, err = await within(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise CommandFailed(argv, -1, f"did not finish within {timeout:.0f}s") from None
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode or 0, err.decode(errors="replace"))
    return out.decode(errors="replace")
