"""Seeded mutations of JSON-like documents, for feeding a running agent many odd inputs.

(The unit tests use hypothesis, which also shrinks a failure; a running agent is fed in bulk,
from a fixed seed so a failing run can be replayed.)
"""

from __future__ import annotations

import copy
import random
from typing import Any


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**63, 3.5, float("inf")])
    if kind in (3, 4, 5):
        return rng.choice(["", "x", "Always", "-1", "10Mi", "/", "../etc", "a" * 300, "\u00e9\u0000", "true", "80"])
    if kind in (6, 7):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["name", "image", "x", "", "value"]): random_json(rng, depth + 1) for _ in range(rng.randrange(3))}


def _places(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _places(value, prefix + (key,))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _places(value, prefix + (i,))
    return out


def mutate(doc: dict[str, Any], rng: random.Random, changes: int = 2) -> dict[str, Any]:
    """A copy of doc with `changes` places replaced by random values, dropped, or given a key."""
    doc = copy.deepcopy(doc)
    for _ in range(changes):
        places = _places(doc)
        if not places:
            break
        path = rng.choice(places)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = rng.choice(("replace", "replace", "drop", "add"))
        if action == "drop":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][rng.choice(["extra", "name", "value"])] = random_json(rng)
        else:
            parent[path[-1]] = random_json(rng)
    return doc
