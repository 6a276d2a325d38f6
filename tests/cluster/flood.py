"""Clients without credentials hammering a kubelet API port, as an attacker on the network would:
`python -m tests.cluster.flood bogus-tokens PORT CLIENTS SECONDS` (each request a new TLS
connection with a new random bearer token), or `idle PORT CONNECTIONS SECONDS` (bare TCP connects
that send nothing, reopened when the server drops them). Loopback only; bounded in time and in
requests. Prints what it saw as JSON."""

from __future__ import annotations

import asyncio
import collections
import json
import resource
import secrets
import ssl
import sys
import time

MAX_REQUESTS = 200_000


async def bogus_tokens(port: int, clients: int, seconds: float) -> dict[str, object]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    statuses: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + seconds
    sent = 0

    async def client() -> None:
        nonlocal sent
        while time.monotonic() < deadline and sent < MAX_REQUESTS:
            sent += 1
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=context), 10)
                writer.write(f"GET /pods HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer {secrets.token_hex(16)}"
                             "\r\nConnection: close\r\n\r\n".encode())
                answer = await asyncio.wait_for(reader.read(), 10)
                writer.close()
                statuses[answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "no answer"] += 1
            except (OSError, asyncio.TimeoutError) as e:
                statuses[type(e).__name__] += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"requests": sent, "statuses": dict(statuses)}


async def idle(port: int, connections: int, seconds: float) -> dict[str, object]:
    """Hold `connections` silent TCP connections for `seconds`, reopening each one the server closes."""
    deadline = time.monotonic() + seconds
    opened = refused = 0

    async def holder() -> None:
        nonlocal opened, refused
        while time.monotonic() < deadline:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                refused += 1
                await asyncio.sleep(0.1)
                continue
            opened += 1
            try:
                await asyncio.wait_for(reader.read(), max(0.0, deadline - time.monotonic()))
            except (OSError, asyncio.TimeoutError):
                pass
            writer.close()

    await asyncio.gather(*(holder() for _ in range(connections)))
    return {"opened": opened, "refused": refused}


def main(argv: list[str]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this client needs its descriptors too
    kind, port, count, seconds = argv[0], int(argv[1]), int(argv[2]), float(argv[3])
    run = bogus_tokens if kind == "bogus-tokens" else idle
    print(json.dumps(asyncio.run(run(port, count, seconds))))


if __name__ == "__main__":
    main(sys.argv[1:])
