"""A library's modules imported without its package __init__ until something needs it.

Some libraries' package __init__ imports every part of the library (kubernetes_asyncio's client
package, its API and model classes; pyroute2, every netlink family it knows), which a start of
the agent would pay for on every exec. A package registered here is a real package module whose
__init__ has not run: its submodules import as usual, and the first name asked of it that is not
a submodule runs its __init__, so the library behaves as it always does, only later.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


def package_unrun(name: str) -> types.ModuleType:
    """The package `name` in sys.modules and on its parent, its __init__ not run."""
    spec = importlib.util.find_spec(name)  # through the parent's __path__: the parent's __init__ does not run
    assert spec is not None and spec.loader is not None, f"{name} is not installed"
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
    return package


def run_init(package: types.ModuleType) -> None:
    """Run the package's __init__ now, in the registered module (its submodules stay as they are)."""
    package.__dict__.pop("__getattr__", None)
    package.__spec__.loader.exec_module(package)


def init_on_first_miss(package: types.ModuleType) -> types.ModuleType:
    """Run the package's __init__ the first time a name it lacks is looked up (PEP 562); a
    submodule asked for by name (`from package import submodule`) is imported by itself."""
    def load(name: str) -> Any:
        submodule = f"{package.__name__}.{name}"
        if importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        run_init(package)
        return getattr(package, name)
    package.__getattr__ = load  # type: ignore[method-assign]
    return package
