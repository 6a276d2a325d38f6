"""kubernetes_asyncio's REST layer and kubeconfig loader, without its generated API and model classes.

The agent and the proxy send and receive plain dicts (kube/client.py): of kubernetes_asyncio they
use ApiClient (connections, TLS, auth headers), Configuration, ApiException and load_kube_config
(credential plugins, token refresh), never its typed API and model classes. The __init__ of
kubernetes_asyncio.client and of its models package import all of those eagerly, which costs a
start ~0.3 s and ~30 MB, so both are deferred (util/deferred_init.py), and so is the library's own
__init__, which imports the rest of it (dynamic, stream, utils, watch). ApiClient asks the models
for a class only when it deserializes, which raw calls never ask for.
"""

from __future__ import annotations

import sys

from pykubelet.util.deferred_init import init_on_first_miss, package_unrun


def _import_without_models() -> None:
    # The package's own __init__ imports all of it (config, dynamic, stream, utils, watch: ~0.7 MB
    # and a dozen modules the agent never calls): deferred too, until a name is asked of it.
    init_on_first_miss(package_unrun("kubernetes_asyncio"))
    # Configuration imports urllib3 only to build a basic-auth header (a kubeconfig's username and
    # password): its ~45 modules (~1.8 MB) wait for that.
    if "urllib3" not in sys.modules:
        init_on_first_miss(package_unrun("urllib3"))
    client = init_on_first_miss(package_unrun("kubernetes_asyncio.client"))
    init_on_first_miss(package_unrun("kubernetes_asyncio.client.models"))
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    # The kubeconfig loader imports these two from the package itself.
    client.ApiClient, client.Configuration = ApiClient, Configuration


if "kubernetes_asyncio" not in sys.modules:  # else the whole library is imported already
    _import_without_models()

from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402 (after the registration above)
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402
from kubernetes_asyncio.client.exceptions import ApiException  # noqa: E402
from kubernetes_asyncio.config import load_kube_config  # noqa: E402

__all__ = ["ApiClient", "ApiException", "Configuration", "load_kube_config"]
