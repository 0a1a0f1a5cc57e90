"""The fleet verdict from its nodes: who failed, who never reported, what drifted, who is slow among the passing.

Outliers are judged among the nodes that passed on their own: a node above every floor of the profile can still
be 9 % slower than its siblings, which costs a training job across the fleet as much as a failed one. For every
measurement (check, subject, metric) the fleet's median and MAD (median absolute deviation, robust to the
outliers themselves) are taken over the passing nodes; a node is flagged when it is worse than ``median - k x
MAD`` (``+`` for measurements where less is better: times, temperatures) or worse than ``fraction x median``,
and worse than the median by more than ``min_deviation`` (the run-to-run noise: a fleet agreeing to 0.1 % has a
MAD that would flag noise).
Its robust z-score, 0.6745 (x - median) / MAD, says how far. A measurement the fleet agrees on to the last digit
(MAD 0) is judged by the fraction alone: no deviation can be scaled by nothing.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from .nodes import Node, metric_spec

__all__ = ["DRIFT_FIELDS", "FleetSettings", "analyse"]

#: inventory fields compared across nodes, in the order the report lists them
DRIFT_FIELDS = ("profile", "gpu_model", "gpu_count", "driver", "cuda", "nccl", "vbios", "pcie", "nvlinks_per_gpu",
                "nvlink_speed_gbps")


@dataclass(frozen=True)
class FleetSettings:
    """A profile's ``fleet:`` section, with its defaults."""

    k: float = 5.0  # MADs below the median (about 3.4 robust standard deviations)
    fraction: float = 0.9  # of the median: 10 % worse than the fleet is flagged whatever the spread
    #: worse than the median by less than this share is never flagged: a fleet whose nodes agree to 0.1 % has a MAD
    #: so small that run-to-run noise (1-2 % on these measurements) would flag healthy nodes
    min_deviation: float = 0.03
    min_nodes: int = 3  # passing nodes needed before a median says anything
    fail_on_outlier: bool = False  # flagged nodes reject the fleet (else they are findings)
    fail_on_drift: tuple[str, ...] = ()  # drift in these fields rejects the fleet

    @classmethod
    def from_section(cls, section: dict | None) -> FleetSettings:
        section = section or {}
        return cls(k=float(section.get("k", cls.k)), fraction=float(section.get("fraction", cls.fraction)),
                   min_deviation=float(section.get("min_deviation", cls.min_deviation)),
                   min_nodes=int(section.get("min_nodes", cls.min_nodes)),
                   fail_on_outlier=bool(section.get("fail_on_outlier", cls.fail_on_outlier)),
                   fail_on_drift=tuple(section.get("fail_on_drift", cls.fail_on_drift)))


def _spec(check: str, metric: str) -> tuple[str, int]:
    """(unit, direction) of a metric, from nodes.METRICS."""
    for name, unit, direction in metric_spec(check):
        if name == metric or name is None:
            return unit, direction
    return "", +1


def machine_class(node: Node) -> str:
    """Nodes are compared with nodes of their own kind: a 4-GPU node's all_reduce takes longer than a 2-GPU one's
    without being slower. The kind is the GPU model and count (the inventory says both)."""
    return f"{node.inventory.get('gpu_count', '?')}x {node.inventory.get('gpu_model', '?')}"


@dataclass
class _Distribution:
    machine_class: str
    check: str
    subject: str
    metric: str
    unit: str
    direction: int
    values: dict[str, float] = field(default_factory=dict)  # node -> value


def _outliers(distribution: _Distribution, settings: FleetSettings) -> tuple[dict, list[tuple[str, dict]]]:
    values = list(distribution.values.values())
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    d = distribution.direction
    summary = {"class": distribution.machine_class, "check": distribution.check, "subject": distribution.subject,
               "metric": distribution.metric,
               "unit": distribution.unit, "better": "higher" if d > 0 else "lower", "n": len(values),
               "median": median, "mad": mad, "min": min(values), "max": max(values)}
    limit_mad = median - d * settings.k * mad if mad > 0 else None
    if d > 0:
        limit_fraction = median * settings.fraction
    else:
        limit_fraction = median / settings.fraction if settings.fraction else None
    summary["limits"] = {"mad": limit_mad, "fraction": limit_fraction}
    flagged = []
    for node, value in distribution.values.items():
        if median and d * (median - value) <= settings.min_deviation * abs(median):
            continue  # better than the median, or worse by less than the noise
        rules = []
        if limit_mad is not None and d * (value - limit_mad) < 0:
            rules.append(f"{settings.k:g} MAD")
        if limit_fraction is not None and median > 0 and d * (value - limit_fraction) < 0:
            rules.append(f"{settings.fraction:g} x median" if d > 0 else f"median / {settings.fraction:g}")
        if rules:
            z = 0.6745 * (value - median) / mad if mad > 0 else None
            flagged.append((node, {"check": distribution.check, "subject": distribution.subject,
                                   "metric": distribution.metric, "value": value, "median": median, "z": z,
                                   "mad": mad, "unit": distribution.unit, "rule": " and ".join(rules),
                                   "worse_by": abs(value - median) / abs(median) if median else None}))
    summary["flagged"] = [node for node, _ in flagged]
    summary["values"] = values  # for the page's distribution plot; not written to fleet-results.json
    for _, record in flagged:
        record["class"] = distribution.machine_class
    return summary, flagged


def duplicate_serials(nodes: list[Node]) -> list[dict]:
    """GPU serials that more than one node reports ({"serial", "nodes"}): results copied between folders, or a
    board that moved; either way no figure of those nodes can be trusted to be theirs."""
    owners: dict[str, list[str]] = {}
    for n in nodes:
        for serial in set(n.serials):
            owners.setdefault(serial, []).append(n.name)
    return [{"serial": s, "nodes": sorted(o)} for s, o in sorted(owners.items()) if len(o) > 1]


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

    # outliers among the passing nodes
    distributions: dict[tuple[str, str, str, str], _Distribution] = {}
    for n in passing:
        kind = machine_class(n)
        for (check, subject, metric), value in n.metrics.items():
            key = (kind, check, subject, metric)
            if key not in distributions:
                unit, direction = _spec(check, metric)
                distributions[key] = _Distribution(kind, check, subject, metric, unit, direction)
            distributions[key].values[n.name] = value
    metrics, outliers = [], {n.name: [] for n in nodes}
    for key in sorted(distributions):
        distribution = distributions[key]
        if len(distribution.values) < settings.min_nodes:
            continue
        summary, flagged = _outliers(distribution, settings)
        metrics.append(summary)
        for node, record in flagged:
            outliers[node].append(record)

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
    reasons += unfinished

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
                   "outlier_nodes": len(flagged_nodes),
                   "drifted_nodes": sum(1 for found in drift.values() if found)},
        "missing": missing,
        "unexpected": unexpected,
        "duplicate_serials": duplicates,
        "split_fields": split,
        "settings": {"k": settings.k, "fraction": settings.fraction, "min_deviation": settings.min_deviation,
                     "min_nodes": settings.min_nodes,
                     "fail_on_outlier": settings.fail_on_outlier, "fail_on_drift": list(settings.fail_on_drift)},
        "nodes": [{"name": n.name, "verdict": n.verdict, "state": n.state, "reason": n.error or n.reason,
                   "profile": n.profile, "profile_sha256": n.profile_sha256, "host": n.host, "promises": n.promises,
                   "waivers": n.waivers,
                   "fleet_id": n.fleet_id, "failed": n.failed, "outliers": outliers[n.name], "drift": drift[n.name],
                   "inventory": n.inventory, "burn_in": n.burn_in, "directory": n.directory, "report": n.report}
                  for n in nodes],
        "metrics": metrics,
    }
