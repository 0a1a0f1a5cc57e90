"""`gpufabric fleet rack`'s ``rack-imex`` promise: the IMEX domain (`nvidia-imex-ctl -N` saved on one tray,
formats/imex.py) UP, one READY node per tray, every pair connected, and its nodes the rack's trays, one each.

A node listed by IP address (as nodes_config.cfg usually lists them) is the tray whose recorded addresses hold it
(`gpufabric snapshot`'s ip-addr.json, fabric/host_addresses.py); a node listed by hostname is the tray whose bundle
was recorded on that host. A node no tray holds fails, naming it and the trays' addresses; a tray no node names
fails, naming the tray. Where a node matches no tray but could be a tray whose evidence lacks the addresses (or
hostname), or a tray that did not report, the match is not checked, naming those trays: never passed.

``trays`` are fleet/rack.py's Tray objects (``name``, ``hostname``, ``addresses``, ``addresses_why``).
"""

from __future__ import annotations

import ipaddress

from ..formats.imex import CONNECTED
from ..verdict import FAILED, NOT_CHECKED, PASSED

__all__ = ["imex_promise"]

_IP, _HOST = "address", "hostname"


def imex_promise(imex: dict | None, tray_count: int, trays: list | None = None,
                 expected: list[str] | None = None) -> dict:
    """The IMEX domain: UP, one READY node per tray, every pair Connected, each node one tray of the rack."""
    if imex is None:
        return {"id": "rack-imex", "outcome": NOT_CHECKED,
                "reason": "no IMEX status given (--imex: `nvidia-imex-ctl -N` saved on one tray)"}
    failed = []
    if imex["domain_state"] not in (None, "UP"):
        failed.append(f"IMEX domain state {imex['domain_state']}, not UP")
    failed += [f"IMEX node #{n['node']} ({n['address']}) {n['state']}, not READY" for n in imex["nodes"]
               if n["state"] != "READY"]
    failed += [f"IMEX node {a} to node {b}: {code}, not C (connected)" for a, row in imex["connectivity"].items()
               for b, code in row.items() if code != CONNECTED]
    if len(imex["nodes"]) > tray_count or (not imex["unknown"] and len(imex["nodes"]) < tray_count):
        failed.append(f"the IMEX domain has {len(imex['nodes'])} nodes, the rack {tray_count} trays")
    mismatched, unmatched, matched = _match_nodes(imex["nodes"], trays or [], tray_count, expected)
    failed += mismatched
    if failed:
        more = f" (+{len(failed) - 6} more)" if len(failed) > 6 else ""
        return {"id": "rack-imex", "outcome": FAILED, "reason": "; ".join(failed[:6]) + more}
    if imex["unknown"] or unmatched:
        return {"id": "rack-imex", "outcome": NOT_CHECKED, "reason": "; ".join([*imex["unknown"], *unmatched])}
    return {"id": "rack-imex", "outcome": PASSED,
            "reason": f"IMEX domain UP: {len(imex['nodes'])} nodes READY, every pair connected, each node one tray "
                      f"({matched})"}


def _ip(words) -> str | None:
    try:
        return str(ipaddress.ip_address(str(words)))
    except ValueError:
        return None


def _listed(names: list[str], shown: int = 6) -> str:
    return ", ".join(names[:shown]) + (f" (+{len(names) - shown} more)" if len(names) > shown else "")


def _own_addresses(tray) -> list[str]:
    """A tray's addresses worth naming: not loopback, not link-local (every host has those)."""
    return [a for a in tray.addresses or []
            if not (ipaddress.ip_address(a).is_loopback or ipaddress.ip_address(a).is_link_local)]


def _trays_addresses(trays: list) -> str:
    said = [f"{t.name} {' '.join(_own_addresses(t)) or 'none but loopback'}" for t in trays
            if t.addresses is not None]
    return _listed(said, 3) if said else "none recorded"


def _match_nodes(nodes: list[dict], trays: list, tray_count: int,
                 expected: list[str] | None) -> tuple[list[str], list[str], str]:
    """(what fails, what is not checked, how the nodes matched): each IMEX node to the one tray that holds its
    address or hostname, and each tray to the one node that names it."""
    names = [t.name for t in trays]
    unreported = [n for n in expected if n not in names] if expected is not None else []
    unreported_count = max(len(unreported), tray_count - len(trays), 0)  # a node may be one of them
    without = {_IP: {t.name for t in trays if t.addresses is None}, _HOST: {t.name for t in trays if not t.hostname}}
    failed, unresolved, by_tray, counted = [], [], {}, {_IP: 0, _HOST: 0}
    shared: set[str] = set()  # trays a node names together with another: named, if not alone
    hosts = sorted({t.hostname for t in trays if t.hostname})
    for node in nodes:
        words = f"IMEX node #{node['node']} ({node['address']})"
        ip = _ip(node["address"])
        kind = _IP if ip is not None else _HOST
        holders = [t.name for t in trays if (ip in (t.addresses or []) if ip is not None
                                              else t.hostname == node["address"])]
        if len(holders) == 1:
            by_tray.setdefault(holders[0], []).append(words)
            counted[kind] += 1
        elif holders:
            shared.update(holders)
            failed.append(f"{words} is {'an address' if kind == _IP else 'the hostname'} of trays "
                          f"{_listed(holders, 3)}: one node, several trays")
        elif without[kind] or unreported_count:
            unresolved.append((words, kind))
        elif kind == _IP:
            failed.append(f"{words} is no tray's address (the trays' addresses: {_trays_addresses(trays)})")
        else:
            failed.append(f"{words} is no tray of the rack (their hosts: {', '.join(hosts[:3])}"
                          f"{' ...' if len(hosts) > 3 else ''})")
    failed += [f"tray {name} is {' and '.join(said)}: one tray, several IMEX nodes"
               for name, said in by_tray.items() if len(said) > 1]
    for tray in trays:
        could_be = [words for words, kind in unresolved if tray.name in without[kind]]
        if tray.name not in by_tray and tray.name not in shared and not could_be:
            failed.append(f"tray {tray.name} is in no IMEX node (its addresses: "
                          f"{' '.join(_own_addresses(tray)) or 'none but loopback'})"
                          if tray.addresses is not None else f"tray {tray.name} is in no IMEX node")
    not_checked = []
    if unresolved:
        reasons: dict[str, list[str]] = {}  # why a tray cannot show it -> the trays
        for tray in trays:
            if tray.name in by_tray:
                continue
            if tray.name in without[_IP] and any(kind == _IP for _, kind in unresolved):
                reasons.setdefault(tray.addresses_why or "no addresses recorded", []).append(tray.name)
            elif tray.name in without[_HOST] and any(kind == _HOST for _, kind in unresolved):
                reasons.setdefault("its evidence names no host", []).append(tray.name)
        groups = [f"tray{'s' if len(named) > 1 else ''} {_listed(named)}: {why}" for why, named in reasons.items()]
        if unreported:
            groups.append(f"tray{'s' if len(unreported) > 1 else ''} {_listed(unreported)}: did not report")
        elif unreported_count:
            groups.append(f"{unreported_count} tray(s) that did not report")
        not_checked.append(f"{_listed([words for words, _ in unresolved], 3)} matched to no tray: not checked "
                           f"for {'; '.join(groups)}")
    matched = ", ".join(f"{count} by {kind}" for kind, count in counted.items() if count)
    return failed, not_checked, matched
