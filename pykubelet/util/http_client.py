"""aiohttp's HTTP client, loaded when a request is first made, for an agent that has no apiserver.

aiohttp's package __init__ imports its client, whose connector makes two default SSL contexts
when it loads (the system's CA bundle read twice: ~50 ms and most of the client's ~80 ms of a
start). A standalone agent serves HTTP from its start (aiohttp.web) but makes requests only for a
pod's httpGet probe or hook, so `defer_client` registers the package with its __init__ not run
(util/deferred_init.py) and `client` imports the client module in a thread when it is first
needed, never on the event loop. An agent with a kubeconfig talks to its apiserver at once and
loads all of aiohttp as usual.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
import types

from pykubelet.util.deferred_init import init_on_first_miss, package_unrun

CLIENT = "aiohttp.client"
_VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


def defer_client() -> None:
    """Until something asks for it, no aiohttp client; call before anything imports aiohttp."""
    if "aiohttp" in sys.modules:
        return
    package = package_unrun("aiohttp")
    spec = package.__spec__
    # aiohttp.http (the server's too) takes the version from the package, which its __init__ sets.
    found = _VERSION.search(spec.loader.get_data(spec.origin).decode())  # type: ignore[union-attr]
    if found is None:  # a layout this does not know: the whole package, as usual
        del sys.modules["aiohttp"]
        importlib.import_module("aiohttp")
        return
    package.__version__ = found.group(1)
    init_on_first_miss(package)


_loaded: list[types.ModuleType] = []  # the module, once an import of it has returned


async def client() -> types.ModuleType:
    """aiohttp.client (ClientSession, ClientTimeout), imported in a thread the first time. Not
    looked up in sys.modules: a module another thread is still importing is there already; the
    import in the thread waits for it."""
    if not _loaded:
        _loaded.append(await asyncio.to_thread(importlib.import_module, CLIENT))
    return _loaded[0]
