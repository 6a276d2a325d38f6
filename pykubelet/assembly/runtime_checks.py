"""The container runtime at start, before any part is made: wait until it answers, then agree
on the cgroup driver with it (the kubelet's RuntimeConfig check)."""

from __future__ import annotations

import tenacity

from pykubelet.config import Settings
from pykubelet.cri import errors
from pykubelet.cri.client import CRIClient
from pykubelet.util import metrics
from pykubelet.util.log import get_logger
from pykubelet.util.tasks import LoopDied

log = get_logger(__name__)


async def wait_for_runtime(cri: CRIClient) -> str:
    """Block until the runtime answers Version; returns "<name>://<version>"."""
    async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(errors.CRIError),
            wait=tenacity.wait_exponential(multiplier=0.2, max=10),
            before_sleep=lambda state: log.warning(
                "Container runtime not answering yet; retrying", endpoint=cri.endpoint,
                err=str(state.outcome.exception()) if state.outcome else "")):
        with attempt:
            version = await cri.version()
    return f"{version.runtime_name}://{version.runtime_version}"


async def check_cgroup_driver(s: Settings, cri: CRIClient) -> None:
    """Adopt the runtime's cgroup driver when it names one (RuntimeConfig), as the kubelet does;
    otherwise refuse to start when ours is not the one it runs with (runtime/cgroup_driver.py)."""
    from pykubelet.runtime import cgroup_driver

    reported, info = None, {}
    try:
        try:
            reported = cgroup_driver.from_runtime_config(await cri.runtime_config())
        except errors.Unimplemented:
            metrics.CRI_LOSING_SUPPORT.labels("1.37.0").set(1)
            log.info("CRI implementation should be updated to support RuntimeConfig. "
                     "Falling back to using cgroupDriver from kubelet config.")
            info = dict((await cri.status(verbose=True)).info)
    except errors.CRIError as e:
        log.warning("Could not ask the runtime for its cgroup driver; trusting cgroupDriver", err=str(e))
    except ValueError as e:
        raise LoopDied(str(e)) from None
    if reported is not None:
        log.info("Using cgroup driver setting received from the CRI runtime", cgroupDriver=reported)
        s.runtime.cgroup_driver = reported
    theirs, source = cgroup_driver.runtime_driver(None, info) if reported is None else (reported, "")
    problem = cgroup_driver.mismatch(s.runtime.cgroup_driver, theirs, source)
    if problem:
        raise LoopDied(problem)
