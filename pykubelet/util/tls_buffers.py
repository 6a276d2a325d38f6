"""Each TLS connection asyncio opens reads into a 32 KiB buffer instead of 256 KiB.

Python 3.11's asyncio gives every TLS connection (sslproto.SSLProtocol) a 256 KiB read buffer, made
when the connection opens and zero-filled, so resident at once. The apiserver client speaks
HTTP/1.1, one request per connection at a time (the kubelet's HTTP/2 multiplexes one): in a burst
(a hundred pods' status writes and Events) it opens up to its pool's 100 connections, whose
buffers alone were ~25 MB, kept by the heap after the connections closed. A TLS record is at most
16 KiB, so 32 KiB still holds two; a large answer (a LIST of every pod) takes more, smaller reads.
The kubelet API's server connections get the same buffer.
"""

from __future__ import annotations

from asyncio import sslproto

READ_BUFFER_BYTES = 32 * 1024


def bound_read_buffers() -> None:
    """For every TLS connection opened from now on, in this process."""
    if getattr(sslproto.SSLProtocol, "max_size", 0) > READ_BUFFER_BYTES:  # a version without it: its own size
        sslproto.SSLProtocol.max_size = READ_BUFFER_BYTES
