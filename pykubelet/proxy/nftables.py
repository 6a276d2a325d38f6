"""The nftables mode: one table of our own (`ip kube-proxy`), each sync one `nft -f` transaction.

Nothing outside the table is touched, so other tables (iptables-nft's `ip nat`/`ip filter`,
the user's) are never in the way. A full sync re-declares the table's fixed chains, maps and
sets, refills the maps and sets (within the one transaction, so no packet ever sees them empty)
and rewrites every Service port's chains; a partial sync writes only the element changes and the
changed ports' chains. Chains and affinity sets nothing refers to any more are deleted in the same
transaction, after the elements that pointed at them (Linux >= 6.2 allows that in one batch; on
an older kernel such a sync fails and the next, full, sync tries again). The affinity sets hold
the ClientIP choices with their timeouts; they are never flushed, so stickiness survives syncs
and restarts.
"""

from __future__ import annotations

import json

from pykubelet.proxy import metrics, names
from pykubelet.proxy.commands import CommandFailed, run
from pykubelet.proxy.model import ServicePort, ServicePortName, rules_to_write
from pykubelet.proxy.nftables_rules import (CONTAINERS, TABLE, Elements, PortRules, RuleSettings, affinity_set_text,
                                            chain_head, element_text, fixed_table, port_rules)
from pykubelet.util.log import get_logger

log = get_logger(__name__)

ELEMENTS_PER_LINE = 1000  # one `add element` per thousand: nft parses a long list much faster than lines


class SyncFailed(RuntimeError):
    pass


def desired_elements(rules: dict[ServicePortName, PortRules]) -> Elements:
    out: Elements = {name: {} for name in CONTAINERS}
    for r in rules.values():
        for container, key, value in r.elements:
            out[container][key] = value
    return out


def _add_elements(container: str, items: list[tuple[str, str]]) -> list[str]:
    lines = []
    for i in range(0, len(items), ELEMENTS_PER_LINE):
        chunk = items[i:i + ELEMENTS_PER_LINE]
        body = ", ".join(f"{k} : {v}" if v else k for k, v in chunk)
        lines.append(f"add element {TABLE} {container} {{ {body} }}")
    return lines


class NftablesBackend:
    mode = "nftables"

    def __init__(self, settings: RuleSettings):
        self.settings = settings
        self._first = True
        self._rules: dict[ServicePortName, PortRules] = {}
        self._elements: Elements = {}
        self._chains: set[str] = set()
        self._affinity_sets: set[str] = set()

    async def _existing(self) -> tuple[set[str], set[str]]:
        """Our table's per-Service chains and affinity sets, as the kernel has them."""
        chains, sets = set(), set()
        for what, found in (("chains", chains), ("sets", sets)):
            try:
                listing = json.loads(await run("nft", "-j", "-t", "list", what, "ip"))
            except (CommandFailed, ValueError) as e:
                log.warning("Cannot list the nftables objects; stale ones stay until the next full sync",
                            what=what, err=str(e))
                continue
            for item in listing.get("nftables", []):
                obj = item.get("chain") or item.get("set") or {}
                if obj.get("table") == "kube-proxy":
                    found.add(obj["name"])
        return ({c for c in chains if names.is_nft_service_chain(c)},
                {s for s in sets if s.startswith("affinity-")})

    async def sync(self, ports: dict[ServicePortName, ServicePort], changed: set[ServicePortName] | None,
                   large: bool) -> dict[ServicePortName, PortRules]:
        full = changed is None
        if full:
            chains, sets = await self._existing()
        else:
            chains, sets = set(self._chains), set(self._affinity_sets)
        rules, written = rules_to_write(ports, changed, self._rules, lambda port: port_rules(port, self.settings))
        want = desired_elements(rules)
        active_chains = {c for r in rules.values() for c in r.chains}
        active_sets = {s: t for r in rules.values() for s, t in r.affinity_sets.items()}
        lines = fixed_table(self.settings, self._first) if full else []
        # Every chain and set first (emptied), then the rules: a rule may jump to a chain made later.
        for name in written:
            for set_name, seconds in rules[name].affinity_sets.items():
                lines.append(affinity_set_text(set_name, seconds))  # `add` keeps an existing set's entries
            for chain in rules[name].chains:
                lines += chain_head(chain)
        for name in written:
            for chain, chain_rules in rules[name].chains.items():
                lines += [f"add rule {TABLE} {chain} {rule}" for rule in chain_rules]
        lines += self._element_changes(want, full)
        stale_chains = sorted(chains - active_chains)
        lines += [f"flush chain {TABLE} {c}" for c in stale_chains]
        lines += [f"delete chain {TABLE} {c}" for c in stale_chains]
        lines += [f"delete set {TABLE} {s}" for s in sorted(sets - active_sets.keys())]
        try:
            await run("nft", "-f", "-", stdin="\n".join(lines) + "\n")
        except CommandFailed as e:
            metrics.NFTABLES_SYNC_FAILURES.labels(metrics.IP_FAMILY).inc()
            self._rules, self._elements = {}, {}
            raise SyncFailed(str(e)) from None
        self._first = False
        self._rules, self._elements = rules, want
        self._chains, self._affinity_sets = active_chains, set(active_sets)
        if stale_chains:
            log.info("Removed the chains of Service ports that are gone", chains=len(stale_chains))
        return rules

    def _element_changes(self, want: Elements, full: bool) -> list[str]:
        lines = []
        if full:
            for container, (kind, _, _) in CONTAINERS.items():
                lines.append(f"flush {kind} {TABLE} {container}")
                lines += _add_elements(container, sorted(want[container].items()))
            return lines
        for container in CONTAINERS:
            have, need = self._elements.get(container, {}), want[container]
            gone = [k for k, v in have.items() if need.get(k) != v]
            new = [(k, v) for k, v in need.items() if have.get(k) != v]
            lines += [element_text(container, k, "", "delete") for k in sorted(gone)]
            lines += _add_elements(container, sorted(new))
        return lines

    async def lost_rules(self) -> bool:
        """Our table is gone (someone ran `nft flush ruleset`, say)."""
        try:
            await run("nft", "-t", "list", "table", *TABLE.split())
            return False
        except CommandFailed:
            return True


async def cleanup() -> bool:
    """Remove the nftables mode's table; whether there was one."""
    try:
        await run("nft", "-t", "list", "table", *TABLE.split())
    except CommandFailed:
        return False
    await run("nft", "-f", "-", stdin=f"add table {TABLE}\ndelete table {TABLE}\n")
    return True
