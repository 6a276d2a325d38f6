"""The imports half of tests/bench/memory.py: what an agent with a kubeconfig imports, RSS and
tracemalloc's bytes per package and per module (each module's own)."""

from __future__ import annotations

import collections
import importlib
import importlib.abc
import sys
import tracemalloc


def rss_mib() -> dict[str, float]:
    """Rss and its anonymous part (the heap), MiB."""
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, *rest = line.split()
            if key in ("Rss:", "Anonymous:"):
                out[key.rstrip(":")] = int(rest[0]) / 1024
    return out


# What `pykubelet --kubeconfig` imports before it serves (assembly/parts.py's cluster branch).
CLUSTER_MODULES = (
    "pykubelet.cli", "pykubelet.agent", "pykubelet.kube.bootstrap", "pykubelet.kube.client",
    "pykubelet.kube.certstore", "pykubelet.kube.rotation", "pykubelet.node.manager", "pykubelet.pods.mirror",
    "pykubelet.kube.objects", "pykubelet.kube.tokens", "pykubelet.volumes.api", "pykubelet.volumes.csi.node",
    "pykubelet.sources.apiserver", "pykubelet.server.kubelet_api", "pykubelet.server.host",
    "pykubelet.node.status", "pykubelet.volumes.csi.volume_stats",
)
def traced_mib() -> float:
    return tracemalloc.get_traced_memory()[0] / 2**20


def owner(filename: str) -> str:
    if "site-packages/" in filename:
        return filename.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if "/pykubelet/" in filename:
        return "pykubelet." + filename.split("/pykubelet/", 1)[1].split("/", 1)[0].removesuffix(".py")
    return "stdlib"


class ModuleCost(importlib.abc.MetaPathFinder):
    """Traced bytes each module's own import allocates (code objects, classes, data): the bytes of
    the modules it imports in turn are theirs, not its."""

    def __init__(self) -> None:
        self.own: collections.Counter[str] = collections.Counter()
        self._stack: list[list[int]] = []  # per import under way: [start bytes, bytes of nested imports]

    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    self._wrap(spec)
                return spec
        return None

    def _wrap(self, spec) -> None:
        loader, cost = spec.loader, self
        real = loader.exec_module

        def exec_module(module):
            cost._stack.append([tracemalloc.get_traced_memory()[0], 0])
            try:
                real(module)
            finally:
                start, nested = cost._stack.pop()
                total = tracemalloc.get_traced_memory()[0] - start
                cost.own[spec.origin or spec.name] += total - nested
                if cost._stack:
                    cost._stack[-1][1] += total
        try:
            loader.exec_module = exec_module
        except AttributeError:  # a loader that will not take an attribute: counted to its importer
            pass


def imports(top: int) -> None:
    before = rss_mib()
    tracemalloc.start(1)
    cost = ModuleCost()
    sys.meta_path.insert(0, cost)
    for name in CLUSTER_MODULES:
        importlib.import_module(name)
    sys.meta_path.remove(cost)
    by_package: collections.Counter[str] = collections.Counter()
    for origin, size in cost.own.items():
        by_package[owner(origin)] += size
    print(f"\n== imports: {len(sys.modules)} modules; RSS {before['Rss']:.1f} -> {rss_mib()['Rss']:.1f} MiB "
          f"(with tracing); traced {traced_mib():.1f} MiB")
    print(f"{'MiB':>7}  package (each module's own bytes)")
    for name, size in by_package.most_common(top):
        print(f"{size / 2**20:7.2f}  {name}")
    print(f"{'MiB':>7}  module")
    for origin, size in cost.own.most_common(top):
        print(f"{size / 2**20:7.2f}  {origin.split('site-packages/')[-1].split('/pykubelet/')[-1]}")
    tracemalloc.stop()
