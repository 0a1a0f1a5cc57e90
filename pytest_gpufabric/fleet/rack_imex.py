"""`gpufabric fleet rack`'s ``rack-imex`` promise: the IMEX domain (`nvidia-imex-ctl -N` saved on one tray,
formats/imex.py) UP, one READY node per tray, every pair connected, and its nodes the rack's trays, one each.

A node listed by IP address (as nodes_config.cfg usually lists them) is the tray whose recorded addresses hold it
(`gpufabric snapshot`'s ip-addr.json, fabric/host_addresses.py: tied to the tray's bundle by its manifest); a node
listed by hostname is the tray whose bundle was recorded on that host (names compared ignoring case, as DNS does).
A node no tray holds fails, naming it and the trays' addresses; a tray no node names fails, naming the tray; a node
listed by an address every host has (loopback, link-local) fails. Where a node matches no tray but could be a tray
whose evidence lacks the addresses of its IP version (or hostname), or a tray that did not report, the match is
not checked, naming those trays: never passed. A status that contradicts itself (a node or row twice) fails; a
status whose own timestamp is more than TIE_WINDOW from the trays' recordings, or cannot be compared with them, is
not checked: it is not shown to be this run's.

``trays`` are fleet/rack.py's Tray objects (``name``, ``hostname``, ``addresses``, ``addresses_why``,
``address_families``, ``recorded_at``).
"""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta, timezone

from ..fabric.host_addresses import identifies_one_host, normal_address
from ..formats.imex import CONNECTED
from ..verdict import FAILED, NOT_CHECKED, PASSED

__all__ = ["TIE_WINDOW", "imex_promise"]

_IP4, _IP6, _HOST = "IPv4", "IPv6", "hostname"
#: how far the status's own time may lie from a tray's recording: the status has no zone (up to 14 h either way)
#: and the trays are recorded over a day or so of one acceptance
TIE_WINDOW = timedelta(days=2)


def imex_promise(imex: dict | None, tray_count: int, trays: list | None = None,
                 expected: list[str] | None = None) -> dict:
    """The IMEX domain: UP, one READY node per tray, every pair Connected, each node one tray of the rack."""
    if imex is None:
        return {"id": "rack-imex", "outcome": NOT_CHECKED,
                "reason": "no IMEX status given (--imex: `nvidia-imex-ctl -N` saved on one tray)"}
    if imex.get("contradictions"):
        return {"id": "rack-imex", "outcome": FAILED,
                "reason": "the IMEX status contradicts itself: " + "; ".join(imex["contradictions"][:6])}
    untied = _not_this_run(imex.get("timestamp"), trays or [])
    if untied:
        return {"id": "rack-imex", "outcome": NOT_CHECKED, "reason": untied}
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


def _when(words) -> datetime | None:
    if not isinstance(words, str):
        return None
    try:
        when = datetime.fromisoformat(str(words))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _not_this_run(stamp: str | None, trays: list) -> str | None:
    """Why the status is not shown to be of the trays' recordings (its own time against each tray's bundle's
    recorded_at), None where every tray's recording lies within TIE_WINDOW of it."""
    if stamp is None:
        return ("the IMEX status has no timestamp line (or no date in it): it cannot be tied to the trays' "
                "recordings, not shown to be this run's")
    at = _when(stamp)
    times = [(tray.name, tray.recorded_at, when) for tray in trays if (when := _when(tray.recorded_at))]
    if not times:
        return (f"no tray's bundle records when it was recorded (manifest.json recorded_at): the IMEX status of "
                f"{stamp} (its own clock, no zone) cannot be tied to them, not shown to be this run's")
    undated = [tray.name if tray.recorded_at is None else f"{tray.name} ({tray.recorded_at!r})" for tray in trays
               if _when(tray.recorded_at) is None]
    if undated:  # a tray that cannot be dated may be of another run, whatever the others say
        return (f"tray{'s' if len(undated) > 1 else ''} {_listed(undated)}: no readable recorded_at in the "
                f"bundle's manifest.json: the IMEX status of {stamp} (its own clock, no zone) cannot be tied to "
                f"{'them' if len(undated) > 1 else 'it'}, not shown to be this run's")
    name, said, when = max(times, key=lambda item: abs(item[2] - at))
    if abs(when - at) <= TIE_WINDOW:
        return None
    return (f"the IMEX status is dated {stamp} (its own clock, no zone), tray {name}'s bundle was recorded {said}: "
            f"{abs(when - at).total_seconds() / 86400:.1f} days apart, more than {TIE_WINDOW.days}: the status is "
            "not shown to be this run's")


def _host(words) -> str:
    """A hostname as DNS compares it: case-insensitive, without the root's trailing dot."""
    return str(words).strip().lower().rstrip(".")


def _kind(address: str | None) -> str:
    return _HOST if address is None else _IP4 if ipaddress.ip_address(address).version == 4 else _IP6


def _shared_kind(address: str) -> str:
    parsed = ipaddress.ip_address(address)
    return next(word for word, yes in (("loopback", parsed.is_loopback), ("link-local", parsed.is_link_local),
                                        ("unspecified", parsed.is_unspecified), ("multicast", True)) if yes)


def _listed(names: list[str], shown: int = 6) -> str:
    return ", ".join(names[:shown]) + (f" (+{len(names) - shown} more)" if len(names) > shown else "")


def _trays_addresses(trays: list) -> str:
    said = [f"{t.name} {' '.join(t.addresses) or 'none that names one host'}" for t in trays
            if t.addresses is not None]
    return _listed(said, 3) if said else "none recorded"


def _without(tray, kind: str) -> bool:
    """Whether the tray's evidence cannot show a node of this kind: no hostname, no addresses of that version."""
    if kind == _HOST:
        return not tray.hostname
    return tray.addresses is None or (4 if kind == _IP4 else 6) not in tray.address_families


def _why_without(tray, kind: str) -> str:
    if kind == _HOST:
        return "its evidence names no host"
    if tray.addresses is None:
        return tray.addresses_why or "no addresses recorded"
    return f"its {kind} addresses not recorded (only {', '.join(f'IPv{f}' for f in tray.address_families)})"


def _match_nodes(nodes: list[dict], trays: list, tray_count: int,
                 expected: list[str] | None) -> tuple[list[str], list[str], str]:
    """(what fails, what is not checked, how the nodes matched): each IMEX node to the one tray that holds its
    address or hostname, and each tray to the one node that names it."""
    names = [t.name for t in trays]
    unreported = [n for n in expected if n not in names] if expected is not None else []
    unreported_count = max(len(unreported), tray_count - len(trays), 0)  # a node may be one of them
    without = {kind: {t.name for t in trays if _without(t, kind)} for kind in (_IP4, _IP6, _HOST)}
    failed, unresolved, by_tray, counted = [], [], {}, {"address": 0, "hostname": 0}
    shared: set[str] = set()  # trays a node names together with another: named, if not alone
    hosts = sorted({t.hostname for t in trays if t.hostname})
    for node in nodes:
        words = f"IMEX node #{node['node']} ({node['address']})"
        ip = normal_address(node["address"])
        kind = _kind(ip)
        if ip is not None and not identifies_one_host(ip):
            failed.append(f"{words} is a {_shared_kind(ip)} address: every host has or shares one, it names no "
                          "tray")
            continue
        holders = [t.name for t in trays if (ip in (t.addresses or []) if ip is not None
                                              else t.hostname and _host(t.hostname) == _host(node["address"]))]
        if len(holders) == 1:
            by_tray.setdefault(holders[0], []).append(words)
            counted["hostname" if kind == _HOST else "address"] += 1
        elif holders:
            shared.update(holders)
            failed.append(f"{words} is {'the hostname' if kind == _HOST else 'an address'} of trays "
                          f"{_listed(holders, 3)}: one node, several trays")
        elif without[kind] or unreported_count:
            unresolved.append((words, kind))
        elif kind != _HOST:
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
                          f"{' '.join(tray.addresses) or 'none that names one host'})"
                          if tray.addresses is not None else f"tray {tray.name} is in no IMEX node")
    not_checked = []
    if unresolved:
        reasons: dict[str, list[str]] = {}  # why a tray cannot show it -> the trays
        kinds = [kind for kind in (_IP4, _IP6, _HOST) if any(k == kind for _, k in unresolved)]
        for tray in trays:
            lacking = next((kind for kind in kinds if tray.name in without[kind]), None)
            if tray.name not in by_tray and lacking is not None:
                reasons.setdefault(_why_without(tray, lacking), []).append(tray.name)
        groups = [f"tray{'s' if len(named) > 1 else ''} {_listed(named)}: {why}" for why, named in reasons.items()]
        if unreported:
            groups.append(f"tray{'s' if len(unreported) > 1 else ''} {_listed(unreported)}: did not report")
        elif unreported_count:
            groups.append(f"{unreported_count} tray(s) that did not report")
        not_checked.append(f"{_listed([words for words, _ in unresolved], 3)} matched to no tray: not checked "
                           f"for {'; '.join(groups)}")
    matched = ", ".join(f"{count} by {kind}" for kind, count in counted.items() if count)
    return failed, not_checked, matched
