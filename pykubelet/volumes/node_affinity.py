"""Whether a PersistentVolume's required node affinity lets this node mount it (pure).

The kubelet checks it before every mount of a PV, against its Node's labels only (the node it
builds for the check has no name, so a matchFields term on metadata.name never matches). The
terms are ORed, the requirements of one term ANDed; an empty term matches nothing.
"""

from __future__ import annotations

from pykubelet.volumes.claim_model import NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume

NO_MATCH = "no matching NodeSelectorTerms"


class InvalidRequirement(ValueError):
    pass


def _integer(value: str, requirement: NodeSelectorRequirement) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidRequirement(f"invalid label value {value!r} for operator {requirement.operator}") from None


def _requirement_matches(requirement: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    op, key, values = requirement.operator, requirement.key, requirement.values
    if op in ("In", "NotIn"):
        if not values:
            raise InvalidRequirement(f"values for operator {op} must be non-empty")
        inside = key in labels and labels[key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            raise InvalidRequirement(f"values for operator {op} must be empty")
        return (key in labels) == (op == "Exists")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise InvalidRequirement(f"operator {op} needs exactly one value")
        bound = _integer(values[0], requirement)
        if key not in labels:
            return False
        try:
            have = int(labels[key])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    raise InvalidRequirement(f"{op!r} is not a valid node selector operator")


def _term_matches(term: NodeSelectorTerm, labels: dict[str, str]) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": ""}  # the kubelet's check node has labels only
    return (all(_requirement_matches(r, labels) for r in term.match_expressions)
            and all(_requirement_matches(r, fields) for r in term.match_fields))


def affinity_error(volume: PersistentVolume, labels: dict[str, str]) -> str | None:
    """None when the node may mount the volume; else the kubelet's reason."""
    if volume.node_affinity is None:
        return None
    problems = []
    for term in volume.node_affinity:
        try:
            if _term_matches(term, labels):
                return None
        except InvalidRequirement as e:
            problems.append(str(e))
    return "; ".join(problems) if problems else NO_MATCH
