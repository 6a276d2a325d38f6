"""The test bed's apiserver relay (tests/bed/relay.py) passes a client's half-close on and still
brings the answer back: busybox nc shuts its sending side as soon as the request is written, and the
pods of the cluster tier ask the apiserver that way."""

from __future__ import annotations

import asyncio

from tests.bed.relay import listener, relay


async def upstream_answering_after_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    # Read until the client's half-close reaches here: the relay has seen that end by then, and
    # the answer comes after it.
    request = await reader.read()
    writer.write(b"answer to " + request)
    await writer.drain()
    writer.close()


async def test_an_answer_after_the_clients_half_close_reaches_the_client():
    upstream = await asyncio.start_server(upstream_answering_after_eof, "127.0.0.1", 0)
    up_port = upstream.sockets[0].getsockname()[1]
    sock = listener("127.0.0.1", 0)
    relaying = asyncio.create_task(relay(sock, "127.0.0.1", up_port))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        writer.write(b"GET /healthz")
        writer.write_eof()
        reply = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert reply == b"answer to GET /healthz"
    finally:
        relaying.cancel()
        await asyncio.gather(relaying, return_exceptions=True)
        upstream.close()
        await upstream.wait_closed()
