"""CRI GetContainerEvents: the runtime pushes each container's lifecycle as it happens.

containerd 2.x implements the stream (1.6 answers UNIMPLEMENTED, and the client falls back to
containerd's own task events, cri/task_events.py). Each event carries the sandbox's and its
containers' full status; the PLEG only needs the kick, and relists to see the change.
"""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from pykubelet.cri import errors
from pykubelet.cri.v1 import api_pb2 as api
from pykubelet.cri.v1 import api_pb2_grpc as api_grpc

# What the agent does not cause itself: a container or sandbox stopping (an exit, an OOM kill).
# Created, started and deleted are answers to its own calls; relisting on them would only
# compete with its next call. (For a sandbox, container_id is the sandbox's id.)
PUSHED = {api.CONTAINER_STOPPED_EVENT}


async def container_events(stub: api_grpc.RuntimeServiceStub) -> AsyncIterator[str]:
    """"<event type> <container id>" of every stop as it happens, until the stream breaks (a
    CRIError; `Unimplemented` at once from a runtime without the stream)."""
    stream = stub.GetContainerEvents(api.GetEventsRequest())
    try:
        async for event in stream:
            if event.container_event_type in PUSHED:
                yield f"{api.ContainerEventType.Name(event.container_event_type)} {event.container_id}"
    except grpc.aio.AioRpcError as e:
        raise errors.from_rpc_error("GetContainerEvents", e) from None
    finally:
        stream.cancel()
