"""kubernetes_asyncio's REST layer and kubeconfig loader, without its generated API and model classes.

The agent and the proxy send and receive plain dicts (kube/client.py): of kubernetes_asyncio they
use ApiClient (connections, TLS, auth headers), Configuration, ApiException and load_kube_config
(credential plugins, token refresh), never its typed API and model classes. The __init__ of
kubernetes_asyncio.client and of its models package import all of those eagerly, which costs a
start ~0.3 s and ~20 MB. So these two packages are registered with their __init__ not run yet:
each runs it the first time it is asked for a name that is not one of its submodules (ApiClient
asks the models for a class only when it deserializes, which raw calls never ask for), so the
library behaves as it always does, only later.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any


def _registered_unrun(name: str) -> types.ModuleType:
    """The package `name` in sys.modules and on its parent, its __init__ not run."""
    spec = importlib.util.find_spec(name)  # through the parent's __path__: the parent's __init__ does not run
    assert spec is not None and spec.loader is not None, f"{name} is not installed"
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
    return package


def _init_on_first_miss(package: types.ModuleType) -> None:
    """Run the package's __init__ the first time a name it lacks is looked up (PEP 562); a
    submodule asked for by name (`from package import submodule`) is imported by itself."""
    def load(name: str) -> Any:
        submodule = f"{package.__name__}.{name}"
        if importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        del package.__getattr__
        package.__spec__.loader.exec_module(package)
        return getattr(package, name)
    package.__getattr__ = load  # type: ignore[method-assign]


def _import_without_models() -> None:
    top = _registered_unrun("kubernetes_asyncio")  # until the two below are in place: its __init__ imports them
    client = _registered_unrun("kubernetes_asyncio.client")
    _init_on_first_miss(client)
    _init_on_first_miss(_registered_unrun("kubernetes_asyncio.client.models"))
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration

    # The kubeconfig loader imports these two from the package itself.
    client.ApiClient, client.Configuration = ApiClient, Configuration
    top.__spec__.loader.exec_module(top)  # the rest of the library (config, watch...), as it always loads


if "kubernetes_asyncio" not in sys.modules:  # else the whole library is imported already
    _import_without_models()

from kubernetes_asyncio.client.api_client import ApiClient  # noqa: E402 (after the registration above)
from kubernetes_asyncio.client.configuration import Configuration  # noqa: E402
from kubernetes_asyncio.client.exceptions import ApiException  # noqa: E402
from kubernetes_asyncio.config import load_kube_config  # noqa: E402

__all__ = ["ApiClient", "ApiException", "Configuration", "load_kube_config"]
