"""The static pod source: one Pod per file in a directory, watched with inotify and rescanned.

Each scan produces the whole set of pods from the directory (the kubelet's SET semantics): a
removed file removes its pod; a file that stops parsing removes its pod too, and its error is
logged once until the file changes again.

inotify is read on the event loop as the kernel reports a change (asyncinotify), as the
kubelet's fsnotify watch does: no polling thread, no settling delay before a new manifest is
read. The changes that arrive while a scan runs are taken together by the next one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Callable

import asyncinotify
import yaml

from pykubelet.api.errors import InvalidObject
from pykubelet.api.pod import Pod, parse_pod
from pykubelet.api.references import static_pod_api_reference
from pykubelet.sources.static_naming import apply_static_defaults
from pykubelet.util import yamlfile
from pykubelet.util.log import get_logger

log = get_logger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
Mask = asyncinotify.Mask
# A file written (closed after writing: a half-written file is not read), created, renamed in or
# out, removed, its mode or link target changed; the directory itself removed or renamed.
CHANGES = (Mask.CLOSE_WRITE | Mask.CREATE | Mask.MOVED_TO | Mask.MOVED_FROM | Mask.DELETE | Mask.ATTRIB
           | Mask.DELETE_SELF | Mask.MOVE_SELF)
GONE = Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.IGNORED  # the watch ends: watch the path anew


class ManifestError(ValueError):
    """A file that does not hold exactly one valid Pod; the message names the file."""


def read_manifest(path: str, node_name: str) -> tuple[Pod, str]:
    """The pod in one file, and a digest of the file's bytes (what changes when the file does)."""
    data = _read_bytes(path)
    return parse_manifest(path, data, node_name), _digest(data)


def _read_bytes(path: str) -> bytes:
    try:
        return yamlfile.read_bytes(path)
    except OSError as e:
        raise ManifestError(f"{path}: cannot read: {e.strerror}") from e
    except yamlfile.TooLarge as e:
        raise ManifestError(f"{path}: cannot read: {e}") from e


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_manifest(path: str, data: bytes, node_name: str) -> Pod:
    """The pod in the bytes read from path (named in every error)."""
    try:
        # JSON is YAML, but JSON files get JSON's clearer error messages.
        docs = [json.loads(data)] if path.endswith(".json") else yamlfile.load_all(data)
    except (ValueError, yaml.YAMLError) as e:
        raise ManifestError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'YAML'}: {e}") from e
    docs = [d for d in docs if d is not None]
    if len(docs) != 1:
        raise ManifestError(f"{path}: must hold exactly one Pod, found {len(docs)} documents")
    if not isinstance(docs[0], dict):
        raise ManifestError(f"{path}: must hold a Pod object, found a {type(docs[0]).__name__}")
    reference = static_pod_api_reference(docs[0])
    if reference is not None:
        # The kubelet's rule: a static pod runs without the apiserver, so it may not need it.
        raise ManifestError(f"{path}: static pods may not reference {reference[0]} ({reference[1]})")
    try:
        return parse_pod(apply_static_defaults(docs[0], node_name, path), where=path)
    except InvalidObject as e:
        raise ManifestError(str(e)) from e


def list_manifest_files(path: str) -> list[str]:
    """Files the kubelet would read: every non-hidden regular file (a single file path is itself).

    A symlink that leads nowhere (dangling, or a loop) is listed too, so that reading it fails
    with an error naming it, as the kubelet logs one; directories are not descended into.
    """
    if os.path.isfile(path):
        return [path]
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return []
    paths = (os.path.join(path, n) for n in names if not n.startswith("."))
    return [p for p in paths if os.path.isfile(p) or (os.path.islink(p) and not os.path.exists(p))]


class StaticPodSource:
    """Reads `path` now, on every change inotify reports, and every `rescan_seconds`."""

    def __init__(self, path: str, node_name: str, rescan_seconds: float,
                 on_pods: Callable[[list[Pod]], None]):
        self.path = path
        self.node_name = node_name
        self.rescan_seconds = rescan_seconds
        self.on_pods = on_pods
        self.ready = asyncio.Event()
        self._reported: dict[str, str] = {}  # file -> last error logged, so each is logged once
        self._last_fingerprint: frozenset[tuple[str, str]] | None = None
        # file -> (digest of its bytes, its pod): a file whose bytes did not change is not parsed
        # again, and keeps its Pod object, so that the workers of unchanged pods are not woken
        # (the kubelet's file source, too, passes on only the files that changed).
        self._parsed: dict[str, tuple[str, Pod]] = {}

    def scan(self) -> tuple[list[Pod], frozenset[tuple[str, str]]]:
        """Every valid pod in the path, and a fingerprint of what they were read from."""
        pods: dict[str, Pod] = {}
        files: dict[str, str] = {}  # uid -> file it came from
        digests: set[tuple[str, str]] = set()
        errors: dict[str, str] = {}
        parsed: dict[str, tuple[str, Pod]] = {}
        for file in list_manifest_files(self.path):
            try:
                pod, digest = self._read(file)
            except ManifestError as e:
                errors[file] = str(e)
                continue
            except Exception as e:  # noqa: BLE001 - a bug meeting odd input; never the other pods' end
                errors[file] = f"{file}: could not be processed ({type(e).__name__}: {e}); this is a pykubelet bug"
                continue
            if pod.uid in pods:
                errors[file] = f"{file}: the same pod (uid {pod.uid}) as {files[pod.uid]}; ignored"
                continue
            parsed[file] = digest, pod
            pods[pod.uid], files[pod.uid] = pod, file
            digests.add((file, digest))
        self._parsed = parsed  # files gone, or no longer valid, are forgotten
        for file, message in errors.items():
            if self._reported.get(file) != message:
                log.error("Could not process manifest file", file=file, err=message)
        for file in set(self._reported) - set(errors):
            log.info("Manifest file is valid again or gone", file=file)
        self._reported = errors
        return list(pods.values()), frozenset(digests)

    def _read(self, file: str) -> tuple[Pod, str]:
        """The pod in file and its digest; parsed again only when its bytes changed."""
        data = _read_bytes(file)
        digest = _digest(data)
        known = self._parsed.get(file)
        if known is not None and known[0] == digest:
            return known[1], digest
        return parse_manifest(file, data, self.node_name), digest

    async def _publish(self) -> None:
        # Reading and parsing the files happens off the event loop: a large or hostile manifest
        # must not hold up the Lease, the API or other pods.
        pods, fingerprint = await asyncio.to_thread(self.scan)
        if fingerprint != self._last_fingerprint:
            self._last_fingerprint = fingerprint
            self.on_pods(pods)
        self.ready.set()

    async def run(self) -> None:
        if not os.path.exists(self.path):
            log.warning("Static pod path does not exist yet; will keep looking", path=self.path)
        while True:
            await self._publish()
            # A single manifest file is watched through its directory: an editor or an atomic
            # write replaces the file, and a watch on the file would end with it.
            watched = self.path if os.path.isdir(self.path) else os.path.dirname(self.path) or "."
            if not os.path.exists(self.path):
                await asyncio.sleep(self.rescan_seconds)
                continue
            try:
                with asyncinotify.Inotify(sync_timeout=0) as inotify:
                    inotify.add_watch(watched, CHANGES)
                    await self._publish()  # what changed before the watch began
                    await self._follow(inotify)
            except OSError as e:  # the path went between the check and the watch; no inotify
                log.warning("Watching the static pod path failed; rescanning", path=self.path, err=str(e))
                await asyncio.sleep(min(self.rescan_seconds, 1.0))

    async def _follow(self, inotify: asyncinotify.Inotify) -> None:
        """Scan on every batch of changes and every rescan_seconds, until the watch ends."""
        next_event: asyncio.Task[asyncinotify.Event] | None = None
        try:
            while True:
                next_event = next_event or asyncio.ensure_future(inotify.get())
                await asyncio.wait({next_event}, timeout=self.rescan_seconds)  # or the periodic rescan
                gone = False
                if next_event.done():
                    gone = bool(next_event.result().mask & GONE)
                    next_event = None
                    while (queued := inotify.sync_get()) is not None:  # the rest of the batch
                        gone |= bool(queued.mask & GONE)
                await self._publish()
                if gone or not os.path.exists(self.path):
                    return
        finally:
            if next_event is not None:
                # Its reader leaves the event loop before the descriptor closes (which could be
                # reused by the next one).
                next_event.cancel()
                await asyncio.wait({next_event})
