"""containerd's own event stream (not CRI): task exits and OOM kills pushed the moment they happen.

containerd 1.6 answers CRI GetContainerEvents with UNIMPLEMENTED, but its events service on
the same socket streams every task event. The PLEG uses it to relist at once instead of on
its next tick, so a container exit shows in pod status in milliseconds, not up to a second.
"""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from pykubelet.containerd import events_pb2, events_pb2_grpc
from pykubelet.cri import errors

# In the CRI plugin's namespace, what the agent does not cause itself: exits and OOM kills.
# (Starts are the agent's own doing; relisting on them would only compete with its next call.)
FILTERS = ('namespace=="k8s.io",topic=="/tasks/exit"', 'namespace=="k8s.io",topic=="/tasks/oom"')


async def task_events(channel: grpc.aio.Channel) -> AsyncIterator[str]:
    """Topics of task events on the runtime socket's channel as they happen, until the stream
    breaks (a CRIError)."""
    stub = events_pb2_grpc.EventsStub(channel)
    stream = stub.Subscribe(events_pb2.SubscribeRequest(filters=list(FILTERS)))
    try:
        async for envelope in stream:
            yield envelope.topic
    except grpc.aio.AioRpcError as e:
        raise errors.from_rpc_error("Events.Subscribe", e) from None
    finally:
        stream.cancel()
