"""Reading YAML a user gave us (manifests, config files), with errors that name the file.

YAML aliases let a few hundred bytes stand for gigabytes once expanded (the "billion laughs"
document): PyYAML shares the aliased objects, so loading is cheap, but whatever walks the result
afterwards (json.dumps, a hash of the manifest) pays for every expansion. So documents whose
aliases would expand past a fixed budget are refused while they are still a node graph, before
anything walks them, and no file over MAX_FILE_BYTES is read at all.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml

MAX_FILE_BYTES = 10 * 1024 * 1024  # the kubelet's limit on a static pod manifest (maxConfigLength)
MAX_ALIAS_EXPANSION = 100_000
"""How many nodes aliases may add to a document once expanded: far more than any real manifest
uses, far less than an alias bomb needs."""


class TooLarge(ValueError):
    """A file over MAX_FILE_BYTES."""


def expanded_size(root: yaml.Node) -> int:
    """How many nodes the document has once every alias is expanded; ValueError for an alias that
    contains itself (which no JSON-like object can represent)."""
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    # Iterative post-order walk: a deep document must not exhaust Python's recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes and not children_done:
            continue
        children = _children(node)
        if children_done:
            in_progress.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            continue
        if key in in_progress:
            raise ValueError("a recursive alias (an anchor used inside itself)")
        in_progress.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in in_progress:
                raise ValueError("a recursive alias (an anchor used inside itself)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _distinct_nodes(root: yaml.Node) -> int:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(_children(node))
    return len(seen)


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document whose aliases expand past MAX_ALIAS_EXPANSION nodes."""

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            added = expanded_size(node) - _distinct_nodes(node)
        except ValueError as e:
            raise yaml.YAMLError(f"refused: {e}") from None
        if added > MAX_ALIAS_EXPANSION:
            raise yaml.YAMLError(f"refused: its aliases expand to more than {MAX_ALIAS_EXPANSION} "
                                 "extra nodes (an alias bomb?)")
        return super().construct_document(node)


def load_all(data: bytes | str) -> list[Any]:
    """Every document of a YAML stream, through BoundedLoader; yaml.YAMLError when refused."""
    return list(yaml.load_all(data, Loader=BoundedLoader))


def load_one(data: bytes | str) -> Any:
    """The stream's one document (None for an empty stream), through BoundedLoader."""
    return yaml.load(data, Loader=BoundedLoader)


def read_bytes(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes (symlinks followed), refusing one over `limit` bytes; opened
    non-blocking, so a FIFO or device put in its place fails instead of hanging the reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_yaml(path: str, what: str, error: type[Exception]) -> Any:
    """The parsed document; `error` (the caller's own error type) names the file and what it is."""
    try:
        data = read_bytes(path)
    except OSError as e:
        raise error(f"{path}: cannot read the {what}: {e.strerror}") from None
    except TooLarge as e:
        raise error(f"{path}: cannot read the {what}: {e}") from None
    try:
        return load_one(data)
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None
