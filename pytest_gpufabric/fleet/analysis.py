"""The fleet verdict from its nodes: who failed, who never reported, what drifted, who is slow or hot among the passing.

Outliers are judged per measurement and machine class among the nodes that passed on their own, by median and MAD:
a node is flagged only when a statistical test (more than ``k`` MAD) and a practical one (a fraction of the median,
or degrees for temperatures) agree, and a speed less than ``alone_deviation`` worse only where another measurement
of the node confirms it (no node accused on one noisy number). Nodes shifted together along their name order (a
warm rack) are one group, accusing no node. The rules, their thresholds and why: docs/fleet.md, "How outliers and
groups are found".
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

from .nodes import Node

__all__ = ["DRIFT_FIELDS", "FleetSettings", "analyse", "natural_key"]

#: inventory fields compared across nodes, in the order the report lists them
DRIFT_FIELDS = ("profile", "scope", "gpu_model", "gpu_count", "driver", "cuda", "nccl", "vbios", "pcie",
                "nvlinks_per_gpu", "nvlink_speed_gbps")

#: the standard error of a median of n normal values is 1.2533 sigma / sqrt(n); sigma is 1.4826 MAD
_MEDIAN_SE = 1.2533 * 1.4826


@dataclass(frozen=True)
class FleetSettings:
    """A profile's ``fleet:`` section, with its defaults (profile.schema.json describes each key)."""

    k: float = 5.0  # MADs past the median (about 3.4 robust standard deviations)
    #: practical margin for bandwidths, throughputs and times: worse than the median by at least this share of it
    #: (a fleet whose nodes agree to 0.1 % has a MAD so small that run-to-run noise, 1-2 %, would pass k MAD)
    min_deviation: float = 0.03
    #: a bandwidth, throughput or time worse by less than this share of the median accuses its node only where
    #: another measurement of the node confirms it (SuperBench's variance rule is 5 % against a baseline)
    alone_deviation: float = 0.05
    min_degrees_c: float = 10.0  # practical margin for temperatures: degrees over the median
    slowdown_headroom_c: float = 5.0  # or: fewer degrees than this below the GPU's own NVML slowdown threshold
    group_min_nodes: int = 5  # consecutively named nodes shifted together, at least this many, make a group
    group_min_deviation: float = 0.03  # a group's shift from the fleet's median, bandwidths, throughputs, times
    group_min_degrees_c: float = 4.0  # a group's shift from the fleet's median, temperatures
    min_nodes: int = 3  # passing nodes needed before a median says anything
    fail_on_outlier: bool = False  # flagged nodes reject the fleet (else they are findings)
    fail_on_drift: tuple[str, ...] = ()  # drift in these fields rejects the fleet

    @classmethod
    def from_section(cls, section: dict | None) -> FleetSettings:
        section = section or {}
        return cls(k=float(section.get("k", cls.k)),
                   min_deviation=float(section.get("min_deviation", cls.min_deviation)),
                   alone_deviation=float(section.get("alone_deviation", cls.alone_deviation)),
                   min_degrees_c=float(section.get("min_degrees_c", cls.min_degrees_c)),
                   slowdown_headroom_c=float(section.get("slowdown_headroom_c", cls.slowdown_headroom_c)),
                   group_min_nodes=int(section.get("group_min_nodes", cls.group_min_nodes)),
                   group_min_deviation=float(section.get("group_min_deviation", cls.group_min_deviation)),
                   group_min_degrees_c=float(section.get("group_min_degrees_c", cls.group_min_degrees_c)),
                   min_nodes=int(section.get("min_nodes", cls.min_nodes)),
                   fail_on_outlier=bool(section.get("fail_on_outlier", cls.fail_on_outlier)),
                   fail_on_drift=tuple(section.get("fail_on_drift", cls.fail_on_drift)))

    def as_dict(self) -> dict:
        return {"k": self.k, "min_deviation": self.min_deviation, "alone_deviation": self.alone_deviation,
                "min_degrees_c": self.min_degrees_c,
                "slowdown_headroom_c": self.slowdown_headroom_c, "group_min_nodes": self.group_min_nodes,
                "group_min_deviation": self.group_min_deviation, "group_min_degrees_c": self.group_min_degrees_c,
                "min_nodes": self.min_nodes, "fail_on_outlier": self.fail_on_outlier,
                "fail_on_drift": list(self.fail_on_drift)}


def machine_class(node: Node) -> str:
    """Nodes are compared with nodes of their own kind: a 4-GPU node's all_reduce takes longer than a 2-GPU one's
    without being slower. The kind is the GPU model and count (the inventory says both)."""
    return f"{node.inventory.get('gpu_count', '?')}x {node.inventory.get('gpu_model', '?')}"


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """A node name's sort key with its numbers compared as numbers: node9 before node10, rack2-n9 before rack10-n1."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(name) if part)


def is_temperature(unit: str) -> bool:
    return unit == "C"


@dataclass
class _Distribution:
    machine_class: str
    check: str
    subject: str
    metric: str
    unit: str
    direction: int
    values: dict[str, float] = field(default_factory=dict)  # node -> value, in the nodes' natural name order
    slowdown_c: dict[str, float] = field(default_factory=dict)  # node -> its GPU's NVML slowdown threshold


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _shifted_runs(worse: list[float], margin: float, min_nodes: int) -> list[tuple[int, int]]:
    """[start, end) index ranges where, in every window of 2 x min_nodes - 1 consecutive nodes, at least min_nodes
    are worse than the median by ``margin`` or more (the window's median is past the margin), merged where the
    windows overlap and trimmed to the first and last node past the margin."""
    n, width = len(worse), 2 * min_nodes - 1
    if n < width or min_nodes < 1:
        return []
    past = [w >= margin for w in worse]
    runs: list[list[int]] = []
    count = sum(past[:width])
    for start in range(n - width + 1):
        if start:
            count += past[start + width - 1] - past[start - 1]
        if count >= min_nodes:
            if runs and start <= runs[-1][1]:
                runs[-1][1] = start + width
            else:
                runs.append([start, start + width])
    out = []
    for a, b in runs:
        while not past[a]:
            a += 1
        while not past[b - 1]:
            b -= 1
        out.append((a, b))
    return out


def _judge(distribution: _Distribution, settings: FleetSettings) -> tuple[dict, list[tuple[str, dict]], list[dict]]:
    """(the measurement's summary, its accused nodes with their records, its shifted groups)."""
    names = list(distribution.values)
    values = list(distribution.values.values())
    d, unit = distribution.direction, distribution.unit
    temperature = is_temperature(unit)
    median = statistics.median(values)
    mad = statistics.median([abs(v - median) for v in values])
    measurement = {"class": distribution.machine_class, "check": distribution.check, "subject": distribution.subject,
                   "metric": distribution.metric, "unit": unit}

    # groups: stretches of consecutively named nodes shifted together, each tested against the nodes outside every
    # stretch (the group must not widen its own yardstick)
    groups: list[dict] = []
    group_margin = settings.group_min_degrees_c if temperature else settings.group_min_deviation * abs(median)
    if temperature or median:
        worse = [d * (median - v) for v in values]
        stretches = [(a, b) for a, b in _shifted_runs(worse, group_margin, settings.group_min_nodes)
                     if settings.group_min_nodes <= b - a and 2 * (b - a) < len(values)]
        inside = {i for a, b in stretches for i in range(a, b)}
        outside = [v for i, v in enumerate(values) if i not in inside]
        if stretches and len(outside) >= settings.min_nodes:
            fleet_median = statistics.median(outside)
            fleet_mad = statistics.median([abs(v - fleet_median) for v in outside])
            for a, b in stretches:
                count = b - a
                group_median = statistics.median(values[a:b])
                shift = d * (fleet_median - group_median)
                se = _MEDIAN_SE * fleet_mad / math.sqrt(count)
                margin = settings.group_min_degrees_c if temperature else \
                    settings.group_min_deviation * abs(fleet_median)
                if shift < margin or (fleet_mad > 0 and shift <= settings.k * se):
                    continue
                members = names[a:b]
                headrooms = [distribution.slowdown_c[m] - distribution.values[m] for m in members
                             if m in distribution.slowdown_c]
                share = shift / abs(fleet_median) if fleet_median and not temperature else None
                practical = (f"{_fmt(shift)} C over the median of the other nodes (at least "
                             f"{settings.group_min_degrees_c:g} C)" if temperature else
                             f"{share:.1%} worse than the median of the other nodes (at least "
                             f"{settings.group_min_deviation:.0%})")
                statistical = (f"{shift / se:.1f} standard errors of a median of {count} (more than {settings.k:g})"
                               if fleet_mad > 0 else "the other nodes' MAD is 0")
                groups.append({"members": members, "measurement": {
                    **measurement, "better": "higher" if d > 0 else "lower", "count": count,
                    "median": group_median, "fleet_median": fleet_median, "mad": fleet_mad, "shift": shift,
                    "shift_share": share, "se": se, "rule": f"{practical} and {statistical}",
                    **({"headroom_c_min": min(headrooms) if headrooms else None, "slowdown_known": len(headrooms)}
                       if temperature else {})}})

    # every node against its comparison group: its group's median, else the median of the nodes outside groups;
    # the spread is the MAD of the nodes outside groups for both
    centre_of: dict[str, tuple[float, dict | None]] = {}
    for group in groups:
        for member in group["members"]:
            centre_of[member] = (group["measurement"]["median"], group)
    if groups:
        rest = [v for n, v in distribution.values.items() if n not in centre_of]
        base = statistics.median(rest)
        base_mad = statistics.median([abs(v - base) for v in rest])
    else:
        base, base_mad = median, mad
    flagged = []
    for node, value in distribution.values.items():
        centre, group = centre_of.get(node, (base, None))
        spread = base_mad
        excess = d * (centre - value)
        if excess <= 0:
            continue
        if spread > 0 and excess <= settings.k * spread:
            continue
        slowdown = distribution.slowdown_c.get(node)
        headroom = slowdown - value if slowdown is not None else None
        if temperature:
            near = headroom is not None and headroom < settings.slowdown_headroom_c
            if excess < settings.min_degrees_c and not near:
                continue
            practical = (f"{_fmt(excess)} C over the median (at least {settings.min_degrees_c:g} C)"
                         if excess >= settings.min_degrees_c else
                         f"{_fmt(headroom)} C below its slowdown threshold (less than "
                         f"{settings.slowdown_headroom_c:g} C)")
        else:
            if not centre or excess < settings.min_deviation * abs(centre):
                continue
            practical = f"{excess / abs(centre):.1%} worse than the median (at least {settings.min_deviation:.0%})"
        statistical = (f"{excess / spread:.1f} MAD past it (more than {settings.k:g})" if spread > 0
                       else "the fleet's MAD is 0")
        record = {**measurement, "value": value, "median": centre, "mad": spread,
                  "z": 0.6745 * (value - centre) / spread if spread > 0 else None,
                  "excess": excess, "worse_by": excess / abs(centre) if centre else None,
                  "margin": settings.min_degrees_c if temperature else settings.min_deviation,
                  "compared_with": "fleet", "group": group, "rule": f"{practical} and {statistical}"}
        if temperature:
            record["slowdown_c"], record["headroom_c"] = slowdown, headroom
            record["rule"] += (f"; {_fmt(headroom)} C below its GPU's slowdown threshold ({_fmt(slowdown)} C)"
                               if headroom is not None else "; margin to its slowdown threshold not known (its "
                               "results carry no NVML threshold for this GPU)")
        flagged.append((node, record))

    summary = {**measurement, "better": "higher" if d > 0 else "lower", "n": len(values),
               "median": base, "mad": base_mad, "min": min(values), "max": max(values),
               "limits": {"mad": base - d * settings.k * base_mad if base_mad > 0 else None,
                          "margin": (base + settings.min_degrees_c if temperature
                                     else base * (1 - d * settings.min_deviation))},
               "flagged": [node for node, _ in flagged],
               "values": values}  # for the page's distribution plot; not written to fleet-results.json
    return summary, flagged, groups


def _measurement(record: dict) -> str:
    """One measurement of a node: the figures of one check record are one (a collective's bus bandwidth and time at
    one size come from one run of it; a copy record's directions from one run of the copy test)."""
    return f"{record['check']} {record['subject']}"


def _confirm(outliers: dict[str, list[dict]], metrics: list[dict], settings: FleetSettings) -> None:
    """No node accused on one noisy number: a bandwidth, throughput or time worse than its median by less than
    ``alone_deviation`` stays a finding only where another measurement of the same node is past both tests too
    (the rerun SuperBench confirms a suspect by, found in the node's own results); alone it is dropped. A figure
    worse by ``alone_deviation`` or more stands alone (SuperBench's variance rule). Temperatures are judged in
    degrees, each GPU's once, and stand alone. Each kept record's rule says which held it (``confirmed_by``)."""
    dropped: set[tuple] = set()
    alone = max(settings.alone_deviation, settings.min_deviation)
    for node, records in outliers.items():
        speeds = [r for r in records if not is_temperature(r["unit"])]
        measured = sorted({_measurement(r) for r in speeds})
        for record in speeds:
            others = [m for m in measured if m != _measurement(record)]
            if record["worse_by"] >= alone:
                record["confirmed_by"] = []
                record["rule"] += f"; {record['worse_by']:.1%} worse stands alone (at least {alone:.0%})"
            elif others:
                record["confirmed_by"] = others
                record["rule"] += (f"; under {alone:.0%} worse, confirmed by {len(others)} other measurement(s) of "
                                   f"this node past both tests: " + ", ".join(others[:3])
                                   + (f" and {len(others) - 3} more" if len(others) > 3 else ""))
            else:
                dropped.add((node, record["check"], record["subject"], record["metric"]))
        if dropped:
            records[:] = [r for r in records if (node, r["check"], r["subject"], r["metric"]) not in dropped]
    for summary in metrics if dropped else []:
        summary["flagged"] = [n for n in summary["flagged"]
                              if (n, summary["check"], summary["subject"], summary["metric"]) not in dropped]


def _merge_groups(found: list[dict], order: dict[str, int]) -> list[dict]:
    """One group per stretch of nodes: stretches of one machine class found on several measurements that share
    at least half of the smaller one's nodes are one group (its nodes: all of them)."""
    merged: list[dict] = []
    for group in found:
        kind = group["measurement"]["class"]
        members = set(group["members"])
        home = next((g for g in merged if g["class"] == kind
                     and len(g["_members"] & members) * 2 >= min(len(g["_members"]), len(members))), None)
        if home is None:
            home = {"class": kind, "_members": set(), "measurements": [], "_parts": []}
            merged.append(home)
        home["_members"] |= members
        home["measurements"].append(group["measurement"])
        home["_parts"].append(group)
    merged.sort(key=lambda g: (g["class"], min(order[m] for m in g["_members"])))
    for i, group in enumerate(merged, 1):
        nodes = sorted(group.pop("_members"), key=order.__getitem__)
        group["id"] = f"group {i}"
        group.update(nodes=nodes, count=len(nodes), first=nodes[0], last=nodes[-1])
        group["measurements"].sort(key=lambda m: (is_temperature(m["unit"]), -(m["shift_share"] or m["shift"])))
        shifts = [f"{m['check']} {m['subject']} {m['metric']} "
                  + (f"+{_fmt(m['shift'])} C" if is_temperature(m["unit"]) else f"{m['shift_share']:.1%} worse")
                  for m in group["measurements"]]
        group["summary"] = (f"{len(nodes)} nodes, {nodes[0]} to {nodes[-1]}, shifted together: "
                            + "; ".join(shifts[:4]) + (f" and {len(shifts) - 4} more" if len(shifts) > 4 else ""))
    return merged


def duplicate_serials(nodes: list[Node]) -> list[dict]:
    """GPU serials that more than one node reports ({"serial", "nodes"}): results copied between folders, or a
    board that moved; either way no figure of those nodes can be trusted to be theirs."""
    seen = Counter(serial for n in nodes for serial in set(n.serials))
    twice = {serial for serial, count in seen.items() if count > 1}
    owners: dict[str, list[str]] = {}
    for n in nodes if twice else []:
        for serial in twice.intersection(n.serials):
            owners.setdefault(serial, []).append(n.name)
    return [{"serial": s, "nodes": sorted(o)} for s, o in sorted(owners.items())]


def analyse(nodes: list[Node], expected: list[str] | None, settings: FleetSettings) -> dict:
    """The fleet's verdict and findings, as ``fleet-results.json`` holds them (fleet-results.schema.json)."""
    names = [n.name for n in nodes]
    reported, wanted = set(names), set(expected or [])
    missing = [name for name in (expected or []) if name not in reported]
    unexpected = [name for name in names if expected is not None and name not in wanted]
    passing = [n for n in nodes if n.verdict == "ACCEPTED"]

    # inventory drift: the value of each field against the fleet's strict majority
    drift: dict[str, list[dict]] = {n.name: [] for n in nodes}
    split: list[dict] = []
    for name in DRIFT_FIELDS:
        values = {n.name: n.inventory[name] for n in nodes if name in n.inventory}
        if not values:
            continue
        counts = Counter(values.values())
        majority, count = counts.most_common(1)[0]
        if len(counts) == 1:
            continue
        if count * 2 <= len(values):
            split.append({"field": name, "values": dict(counts.most_common())})
            continue
        for node, value in values.items():
            if value != majority:
                drift[node].append({"field": name, "value": value, "majority": majority})
    duplicates = duplicate_serials(nodes)
    fleet_ids = sorted({n.fleet_id for n in nodes if n.fleet_id})

    # outliers among the passing nodes, each measurement's nodes in their natural name order (groups are stretches)
    passing.sort(key=lambda n: natural_key(n.name))
    order = {n.name: i for i, n in enumerate(passing)}
    by_class: dict[str, dict[tuple[str, str, str], _Distribution]] = {}
    for n in passing:  # the inner loop runs once per node and measurement: a million times in a large fleet
        kind = machine_class(n)
        of_class = by_class.setdefault(kind, {})
        for key, value in n.metrics.items():
            distribution = of_class.get(key)
            if distribution is None:
                check, subject, metric = key
                unit, direction = n.units.get((check, metric), ("", +1))
                distribution = of_class[key] = _Distribution(kind, check, subject, metric, unit, direction)
            distribution.values[n.name] = value
            if n.slowdown_c and key[1] in n.slowdown_c and is_temperature(distribution.unit):
                distribution.slowdown_c[n.name] = n.slowdown_c[key[1]]
    distributions = {(kind, *key): distribution for kind, of_class in by_class.items()
                     for key, distribution in of_class.items()}
    metrics, outliers, found_groups = [], {n.name: [] for n in nodes}, []
    for key in sorted(distributions):
        distribution = distributions[key]
        if len(distribution.values) < settings.min_nodes:
            continue
        summary, flagged, groups = _judge(distribution, settings)
        summary["groups"] = groups  # the parts found here; their merged groups' ids below
        metrics.append(summary)
        found_groups += groups
        for node, record in flagged:
            outliers[node].append(record)
    _confirm(outliers, metrics, settings)
    groups = _merge_groups(found_groups, order)
    group_of = {id(part): g["id"] for g in groups for part in g.pop("_parts")}
    member_of: dict[str, list[str]] = {}
    for g in groups:
        for name in g["nodes"]:
            member_of.setdefault(name, []).append(g["id"])
    for records in outliers.values():
        for record in records:
            part = record.pop("group")
            if part is not None:
                record["compared_with"] = f"{group_of[id(part)]} (its own group's median)"
    for summary in metrics:
        summary["groups"] = sorted({group_of[id(part)] for part in summary["groups"]})

    # what rejects the fleet: a node whose evidence shows a broken promise, and what the fleet itself shows
    reasons = []
    rejected = [n for n in nodes if n.verdict == "REJECTED"]
    if rejected:
        reasons.append(f"{len(rejected)} node(s) rejected: " + ", ".join(n.name for n in rejected[:10])
                       + (" ..." if len(rejected) > 10 else ""))
    if duplicates:
        reasons.append("GPU serial(s) on two nodes (results copied between folders?): "
                       + ", ".join(f"{d['serial']} on {' and '.join(d['nodes'])}" for d in duplicates[:5]))
    if len(fleet_ids) > 1:
        reasons.append(f"results of {len(fleet_ids)} fleet runs mixed: {', '.join(fleet_ids[:5])}")
    flagged_nodes = sorted(name for name, found in outliers.items() if found)
    if settings.fail_on_outlier and flagged_nodes:
        reasons.append(f"{len(flagged_nodes)} outlier node(s) (fleet.fail_on_outlier): {', '.join(flagged_nodes[:10])}")
    failing_drift = sorted({name for name, found in drift.items() for d in found
                            if d["field"] in settings.fail_on_drift})
    if failing_drift:
        reasons.append(f"inventory drift in {', '.join(settings.fail_on_drift)} (fleet.fail_on_drift): "
                       + ", ".join(failing_drift[:10]))
    # what leaves it open: nodes that never reported, or whose own evidence is incomplete or unreadable; a node
    # nothing is known of is named, not accused
    unfinished = []
    if missing:
        unfinished.append(f"{len(missing)} node(s) never reported: {', '.join(missing[:10])}"
                          + (" ..." if len(missing) > 10 else ""))
    open_nodes = [n for n in nodes if n.verdict not in ("ACCEPTED", "REJECTED")]
    if not nodes:
        unfinished.append("no node results found")
    if open_nodes:
        unfinished.append(f"{len(open_nodes)} node(s) not accepted: "
                          + ", ".join(f"{n.name} ({n.verdict or 'no results'})" for n in open_nodes[:10])
                          + (" ..." if len(open_nodes) > 10 else ""))
    if reasons:
        verdict = "REJECTED"
    elif unfinished:
        # nothing examined at all: no node's results could be read
        verdict = "NOT TESTED" if not any(n.state == "reported" for n in nodes) else "INCOMPLETE"
    else:
        verdict = "ACCEPTED"
        reasons.append(f"all {len(nodes)} node(s) accepted"
                       + (f"; {len(flagged_nodes)} outlier(s) reported, not failing" if flagged_nodes else ""))
    if groups:
        reasons.append(f"{len(groups)} group(s) of nodes shifted together, reported once each (a row, a batch; not "
                       f"failing): " + "; ".join(g["summary"] for g in groups[:3]))
    reasons += unfinished
    unsigned = sum(n.signed is False for n in nodes)
    if unsigned:
        reasons.append(f"{unsigned} node(s) unsigned: their results show nothing of who wrote them "
                       "(--gpu-sign-key; fleet report --require-signed refuses them)")

    return {
        "verdict": verdict,
        "reason": "; ".join(reasons),
        "fleet_ids": fleet_ids,
        "counts": {"nodes": len(nodes), "expected": len(expected) if expected is not None else None,
                   "accepted": len(passing), "rejected": sum(n.verdict == "REJECTED" for n in nodes),
                   "incomplete": sum(n.verdict == "INCOMPLETE" for n in nodes),
                   "not_tested": sum(n.verdict == "NOT TESTED" for n in nodes),
                   "unreadable": sum(n.state == "unreadable" for n in nodes),
                   "never_reported": sum(n.state == "never reported" for n in nodes), "missing": len(missing),
                   "unsigned": sum(n.signed is False for n in nodes),
                   "outlier_nodes": len(flagged_nodes), "groups": len(groups),
                   "drifted_nodes": sum(1 for found in drift.values() if found)},
        "missing": missing,
        "unexpected": unexpected,
        "duplicate_serials": duplicates,
        "split_fields": split,
        "settings": settings.as_dict(),
        "groups": groups,
        "nodes": [{"name": n.name, "verdict": n.verdict, "state": n.state, "reason": n.error or n.reason,
                   "profile": n.profile, "profile_sha256": n.profile_sha256, "host": n.host, "promises": n.promises,
                   "waivers": n.waivers,
                   "fleet_id": n.fleet_id, "failed": n.failed, "remedies": n.remedies, "outliers": outliers[n.name],
                   "groups": member_of.get(n.name, []), "drift": drift[n.name],
                   "inventory": n.inventory, "burn_in": n.burn_in, "directory": n.directory, "report": n.report}
                  for n in nodes],
        "metrics": metrics,
    }
