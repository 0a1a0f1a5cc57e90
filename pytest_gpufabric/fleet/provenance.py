"""Where each node's evidence came from, and which fleet run it is of: a node is accepted only as a live run of
this fleet.

A replay of a recorded bundle judges the bundle, not the node it was run on (``gpufabric accept`` replays a shipped
bundle by itself on a node without a driver), so the fleet never accepts one unless its operator asks for replays to
be judged (``--allow-replays``: a rehearsal on recorded bundles, said in the verdict). A live node's results name
the host and the boot they measured (report/provenance.live_source). A node of no fleet run, or of another one
than the fleet's, is not accepted either, nor two nodes of one boot (one machine's results filed twice). Each such
node is named with why; a node its own evidence rejects stays rejected.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .nodes import Node

__all__ = ["FleetRun", "fleet_run", "hold_to_source", "replayed_nodes"]


@dataclass
class FleetRun:
    """The fleet run the nodes must be of (--fleet-id, else the one a strict majority of the nodes name), where it
    came from in words, and why there is none (the nodes name none, or several without a majority)."""

    fleet_id: str | None
    said: str
    problem: str | None = None


def fleet_run(given: str | None, nodes: list[Node]) -> FleetRun:
    """The fleet run to hold the nodes to: ``given`` (--fleet-id), else the fleet id a strict majority of the
    nodes that reported name."""
    if given:
        return FleetRun(given, f"fleet run {given} (--fleet-id)")
    named = Counter(n.fleet_id for n in nodes if n.state == "reported")
    ids = Counter({fleet_id: count for fleet_id, count in named.items() if fleet_id})
    if not ids:
        return FleetRun(None, "none", "no node's results name a fleet run (--gpu-fleet-id, or SLURM_JOB_ID)")
    fleet_id, count = ids.most_common(1)[0]
    if count * 2 <= sum(named.values()):
        return FleetRun(None, "none", f"no fleet run holds a majority of the nodes ({', '.join(sorted(ids))}): "
                                      "name the fleet's with --fleet-id")
    return FleetRun(fleet_id, f"fleet run {fleet_id} (named by {count} of {sum(named.values())} nodes)")


def _why_not_accepted(node: Node, run: FleetRun, allow_replays: bool, boot_owners: dict[str, list[str]]) \
        -> list[str]:
    why = []
    source = node.source or {}
    if source.get("kind") == "replay" and not allow_replays:
        digest = source.get("bundle_sha256")
        why.append(f"a replay of bundle {source.get('bundle') or '?'}"
                   + (f" (sha256 {digest[:12]})" if digest else "")
                   + ": recorded evidence, not a live run of this node (--allow-replays judges replays)")
    elif node.source_problem:
        why.append(node.source_problem)
    if not node.fleet_id:
        why.append("of no fleet run: its results name no fleet id (--gpu-fleet-id, or SLURM_JOB_ID)")
    elif run.fleet_id is None:
        why.append(run.problem or "the fleet's run is not known")
    elif node.fleet_id != run.fleet_id:
        why.append(f"of fleet run {node.fleet_id}, not this fleet's {run.fleet_id}")
    boot = source.get("boot_id")
    others = [name for name in boot_owners.get(boot, []) if name != node.name] if boot else []
    if others:
        why.append(f"its boot ({boot}) is also the one {', '.join(others[:3])} measured: one machine's results filed "
                   "as several nodes")
    return why


def hold_to_source(nodes: list[Node], run: FleetRun, allow_replays: bool = False) -> None:
    """Every node held to where its evidence came from and to the fleet's run: a node that is not a live run of
    this fleet (or a replay, with ``allow_replays``) is not accepted, with why; one its evidence rejects stays
    rejected."""
    boot_owners: dict[str, list[str]] = {}
    for node in nodes:
        boot = (node.source or {}).get("boot_id") if node.state == "reported" else None
        if boot:
            boot_owners.setdefault(boot, []).append(node.name)
    for node in nodes:
        if node.state != "reported":
            continue
        why = _why_not_accepted(node, run, allow_replays, boot_owners)
        if not why:
            continue
        if node.verdict != "REJECTED":
            node.verdict = "INCOMPLETE"
        node.reason = f"{'; '.join(why)}; {node.reason}"


def replayed_nodes(nodes: list[Node]) -> list[str]:
    """The names of the nodes whose results are replays of recorded bundles."""
    return [n.name for n in nodes if n.state == "reported" and (n.source or {}).get("kind") == "replay"]
