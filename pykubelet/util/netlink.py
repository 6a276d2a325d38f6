"""pyroute2's rtnetlink socket, without its package __init__, which imports every netlink family
pyroute2 knows (IPDB, NDB and its sqlite, wireguard, nl80211...): ~0.1 s and ~6 MB of every start
(util/deferred_init.py). The names the agent uses are imported from here."""

from __future__ import annotations

import sys

from pykubelet.util.deferred_init import init_on_first_miss, package_unrun

if "pyroute2" not in sys.modules:  # else the whole library is imported already
    init_on_first_miss(package_unrun("pyroute2"))
# Its rtnetlink socket imports unittest.mock (for its mock engine, never ours); the unittest
# package's own __init__ (the test runner, loader and difflib: ~0.9 MB) waits until asked for.
if "unittest" not in sys.modules:
    init_on_first_miss(package_unrun("unittest"))

from pyroute2.iproute import AsyncIPRoute  # noqa: E402 (after the registration above)
from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402
from pyroute2.netns import setns  # noqa: E402

__all__ = ["AsyncIPRoute", "NetlinkError", "setns"]
