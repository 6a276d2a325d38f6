"""The iptables mode: each sync is one `iptables-restore --noflush` batch, never rule by rule.

--noflush leaves alone every chain the batch does not name, so the node's other rules (the
agent's PYKUBELET-POSTROUTING, portmap's, Docker's, the user's) survive; naming one of our chains
(`:KUBE-SERVICES - [0:0]`) empties it before it is filled again, all in one kernel transaction.

A full sync (the first, after a failure, periodically) reads the tables once (`iptables-save`),
writes every chain, adds the jumps from the built-in chains that are missing, and deletes the
per-Service chains nothing uses any more — also those of Services deleted while the proxy was
down. A partial sync rewrites the top-level chains and only the changed Service ports' chains.
A canary chain in the mangle table tells whether someone flushed the tables since (then the next
sync is a full one), as kube-proxy's does.
"""

from __future__ import annotations

from pykubelet.proxy import metrics, names
from pykubelet.proxy.commands import CommandFailed, run
from pykubelet.proxy.iptables_rules import (CANARY, FILTER_CHAINS, JUMPS, KUBELET_FIREWALL, KUBELET_JUMPS, NAT_CHAINS,
                                            Jump, PortRules, RuleSettings, fixed_rules, forward_rules, nodeports_jump,
                                            port_rules)
from pykubelet.proxy.model import ServicePort, ServicePortName, rules_to_write
from pykubelet.util.log import get_logger

log = get_logger(__name__)

RESTORE = ("iptables-restore", "-w", "5", "--noflush")
BUILTIN_CHAINS = {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}


class SyncFailed(RuntimeError):
    pass


def tables(saved: str) -> dict[str, list[str]]:
    """iptables-save text -> table name -> its chain (":") and rule ("-A") lines."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in saved.splitlines():
        if line.startswith("*"):
            current = out.setdefault(line[1:].strip(), [])
        elif current is not None and line[:1] in (":", "-"):
            current.append(line)
    return out


def chains_of(lines: list[str]) -> set[str]:
    return {line[1:].split(" ", 1)[0] for line in lines if line.startswith(":")}


def has_jump(lines: list[str], jump: Jump) -> bool:
    comment = f'--comment "{jump.comment}"'
    return any(line.startswith(f"-A {jump.source} ") and line.endswith(f"-j {jump.target}")
               and (not jump.comment or comment in line) for line in lines)


class IptablesBackend:
    mode = "iptables"

    def __init__(self, settings: RuleSettings):
        self.settings = settings
        self._rules: dict[ServicePortName, PortRules] = {}
        self._chains: set[str] = set()  # our per-Service nat chains, as of the last sync
        self._large = False

    async def sync(self, ports: dict[ServicePortName, ServicePort], changed: set[ServicePortName] | None,
                   large: bool) -> dict[ServicePortName, PortRules]:
        """Make the kernel's rules say what `ports` say; changed=None: a full sync. The rules
        each port got (its no-local-endpoints flags are the metrics' business)."""
        full = changed is None or large != self._large
        saved = tables(await run("iptables-save")) if full else {}
        existing = ({c for c in chains_of(saved.get("nat", [])) if names.is_iptables_service_chain(c)}
                    if full else set(self._chains))
        rules, written = rules_to_write(ports, None if full else changed, self._rules,
                                        lambda port: port_rules(port, self.settings, large))
        active = {chain for r in rules.values() for chain in r.chains}
        stale = sorted(existing - active)
        text, counts = self._text(rules, written, stale, saved if full else None)
        try:
            await run(*RESTORE, stdin=text)
        except CommandFailed as e:
            metrics.IPTABLES_RESTORE_FAILURES.labels(metrics.IP_FAMILY).inc()
            if not full:
                metrics.IPTABLES_PARTIAL_RESTORE_FAILURES.labels(metrics.IP_FAMILY).inc()
            self._rules, self._chains = {}, set()  # unknown now: the next sync is a full one
            raise SyncFailed(str(e)) from None
        self._rules, self._chains, self._large = rules, active, large
        for table, count in counts.items():
            metrics.IPTABLES_RULES_LAST.labels(table, metrics.IP_FAMILY).set(count)
        metrics.IPTABLES_RULES_TOTAL.labels("filter", metrics.IP_FAMILY).set(counts["filter"])
        metrics.IPTABLES_RULES_TOTAL.labels("nat", metrics.IP_FAMILY).set(
            sum(len(r.nat_top) + sum(map(len, r.chains.values())) for r in rules.values()) + counts["nat_fixed"])
        if stale:
            log.info("Removed the chains of Service ports that are gone", chains=len(stale))
        return rules

    def _text(self, rules: dict[ServicePortName, PortRules], written: list[ServicePortName], stale: list[str],
              saved: dict[str, list[str]] | None) -> tuple[str, dict[str, int]]:
        s = self.settings
        full = saved is not None
        nat_fixed, filter_fixed = fixed_rules(s)
        filt = [f":{c} - [0:0]" for c in FILTER_CHAINS]
        if s.localhost_nodeports:
            filt.append(f":{KUBELET_FIREWALL} - [0:0]")
        filter_rules = filter_fixed + [line for r in rules.values() for line in r.filter_top] + forward_rules(s)
        nat = [f":{c} - [0:0]" for c in NAT_CHAINS]
        nat_rules = nat_fixed + [line for r in rules.values() for line in r.nat_top] + nodeports_jump(s)
        nat_fixed_count = len(nat_fixed) + len(nodeports_jump(s))
        for name in written:
            for chain, lines in rules[name].chains.items():
                nat.append(f":{chain} - [0:0]")
                nat_rules += lines
        nat += [f":{c} - [0:0]" for c in stale]
        nat_rules += [f"-X {c}" for c in stale]
        counts = {"filter": len(filter_rules), "nat": len(nat_rules) - len(stale), "nat_fixed": nat_fixed_count}
        head: list[str] = []
        if full:
            assert saved is not None
            head = ["*mangle", f":{CANARY} - [0:0]", "COMMIT"]
            filt.append(f":{CANARY} - [0:0]")
            nat.append(f":{CANARY} - [0:0]")
            jumps = JUMPS + (KUBELET_JUMPS if s.localhost_nodeports else ())
            filter_rules += [f"-I {j.source} {j.rule()}" for j in jumps
                             if j.table == "filter" and not has_jump(saved.get("filter", []), j)]
            nat_rules += [f"-I {j.source} {j.rule()}" for j in jumps
                          if j.table == "nat" and not has_jump(saved.get("nat", []), j)]
        lines = [*head, "*filter", *filt, *filter_rules, "COMMIT", "*nat", *nat, *nat_rules, "COMMIT", ""]
        return "\n".join(lines), counts

    async def lost_rules(self) -> bool:
        """Someone flushed the tables since our last full sync (the mangle canary is gone)."""
        return not await canary_present()


async def canary_present() -> bool:
    """The iptables mode's canary chain exists: it ran here, and nobody flushed the tables since."""
    try:
        await run("iptables", "-w", "5", "-t", "mangle", "-S", CANARY)
        return True
    except CommandFailed:
        return False


OUR_CHAINS = {
    "mangle": {CANARY},
    "filter": set(FILTER_CHAINS) | {CANARY, KUBELET_FIREWALL},
    "nat": set(NAT_CHAINS) | {CANARY},
}


async def cleanup(chains: dict[str, set[str]] | None = None) -> bool:
    """Remove every chain and jump of the iptables mode (or of `chains`, table -> names: the IPVS
    mode's); whether there was anything to remove."""
    saved = tables(await run("iptables-save"))
    batch: list[str] = []
    for table, ours in (chains or OUR_CHAINS).items():
        lines = saved.get(table, [])
        present = {c for c in chains_of(lines) if c in ours or (table == "nat" and names.is_iptables_service_chain(c))}
        if not present:
            continue
        jumps = [line for line in lines if line.startswith("-A ") and line.split(" ", 2)[1] not in present
                 and line.rsplit(" -j ", 1)[-1] in present]
        batch += [f"*{table}", *(f":{c} - [0:0]" for c in sorted(present)),
                  *("-D" + line[2:] for line in jumps), *(f"-X {c}" for c in sorted(present)), "COMMIT"]
    if not batch:
        return False
    await run(*RESTORE, stdin="\n".join(batch) + "\n")
    return True
