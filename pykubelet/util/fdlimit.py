"""Raise the open-files soft limit to the hard limit, as Go's runtime does for every Go program
(the kubelet included): every connection a client opens costs a descriptor, and the default soft
limit (often 1024) would let a few hundred idle clients leave no descriptor for the pods."""

from __future__ import annotations

import resource

from pykubelet.util.log import get_logger

log = get_logger(__name__)


def raise_open_files_limit() -> int:
    """The soft RLIMIT_NOFILE after raising it to the hard limit (unchanged if that is refused)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as e:
        log.warning("Could not raise the open files limit", soft=soft, hard=hard, err=str(e))
        return soft
    log.info("Raised the open files limit", soft=soft, to=hard)
    return hard
