"""The fabric between a fleet's nodes, judged: the all-node collective against the profile's ``fabric:`` floors,
and the pairwise rounds (workloads/fabric_pairs.py) to name the node or the pair that falls short.

A pair is slow when its busbw is below ``min_fraction_of_median`` of the median over all pairs and, where the run
measured the suspects again alone (every result of fabric_pairs.py since it has a ``confirmation``), every one of
those measurements is below the same fraction of typical pairs measured alone: nobody is named on one figure from
one crowded round, and every finding shows the figures it rests on. A node is slow
when every pair it was in is slow: it is slow with every partner, so the cause is on its side (its NIC, cable,
switch port, settings); its pairs are then explained by it. A slow pair between two nodes that are not slow is
named as a pair: each is fine with everyone else, so the cause is between them (a path through the switches, a
port pair, a route). With fewer than three nodes no pair can be told from a node, and the rounds only report.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from ..formats.recordings import FABRIC_FORMAT
from ..formats.strict import load_json_text
from ..kinds.rdma import SECTION as RDMA_SECTION
from ..units import parse_bytes, parse_gbit, parse_gbps

__all__ = ["FABRIC_FILE", "judge_fabric", "load_fabric_result"]

FABRIC_FILE = "fabric.json"


def load_fabric_result(path: Path, max_bytes: int = 64 << 20) -> dict:
    """A fabric run's result (workloads/fabric_pairs.py), read strictly: bounded, UTF-8, no NaN or Infinity, and
    checked to be one (every pair two of its nodes with a finite, non-negative busbw; every all-node row a size
    and a finite busbw). Raises ValueError naming the file and the first problem: the operator gave it."""
    def refuse(token: str):
        raise ValueError(f"{token}, which JSON does not have (a number that is not finite)")

    try:
        if path.stat().st_size > max_bytes:
            raise ValueError(f"over {max_bytes / 1e6:,.0f} MB")
        result = load_json_text(path.read_bytes().decode("utf-8"), parse_constant=refuse)
    except RecursionError:
        raise ValueError(f"{path}: not a fabric result (nested too deep)") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a fabric result ({getattr(exc, 'strerror', None) or exc})") from None
    found = result.get("format") if isinstance(result, dict) else None
    if found != FABRIC_FORMAT:
        raise ValueError(f"{path}: not a fabric result (format {found!r}, expected {FABRIC_FORMAT!r})")
    problem = _fabric_problem(result)
    if problem:
        raise ValueError(f"{path}: not a valid fabric result: {problem}")
    return result


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _fabric_problem(result: dict) -> str | None:
    nodes = result.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes) or len(set(nodes)) != len(nodes):
        return "nodes must be a list of distinct names"
    pairs = result.get("pairs", [])
    if not isinstance(pairs, list):
        return f"pairs must be a list, not {type(pairs).__name__}"
    for number, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            return f"pairs[{number}] is not an object"
        for end in ("a", "b"):
            if pair.get(end) not in nodes:
                return f"pairs[{number}].{end} {pair.get(end)!r} is not one of the run's nodes"
        if not _finite(pair.get("busbw")):
            return f"pairs[{number}] ({pair['a']}-{pair['b']}) has no finite busbw: {pair.get('busbw')!r}"
        measurements = pair.get("measurements", [])
        if not isinstance(measurements, list) or not all(
                isinstance(m, dict) and _finite(m.get("busbw")) for m in measurements):
            return f"pairs[{number}] ({pair['a']}-{pair['b']}) has a measurement without a finite busbw"
    rows = result.get("all_node", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("size"), int)
                                             and _finite(r.get("busbw")) for r in rows):
        return "all_node must be a list of rows, each with an integer size and a finite busbw"
    if not isinstance(result.get("world_size", len(nodes)), int):
        return "world_size must be an integer"
    return None


def _line_rate_gbps(section: dict, profile_data: dict) -> tuple[float | None, str]:
    """GB/s of the inter-node link (1e9 bytes/s): the fabric section's line_rate, else the slowest RDMA device the
    profile promises (what the RDMA suite judges each port against)."""
    if "line_rate" in section:
        return parse_gbit(section["line_rate"]) / 8, f"line rate {section['line_rate']} (fabric.line_rate)"
    rates = [parse_gbit(d["rate"]) for d in (profile_data.get(RDMA_SECTION) or {}).get("devices", []) if "rate" in d]
    if rates:
        return min(rates) / 8, f"line rate {min(rates):g} Gb/s (the slowest RDMA port the profile promises)"
    return None, "no line rate (neither fabric.line_rate nor rdma.devices)"


def _alone(pair: dict) -> list[float]:
    return [m["busbw"] for m in pair.get("measurements") or [] if m.get("phase") == "alone"]


def _figures(pair: dict) -> str:
    """Every figure a finding about a pair rests on: its round, and each time it was measured again alone."""
    alone = _alone(pair)
    text = f"{pair['busbw']:.3g} GB/s in round {pair.get('round')}"
    if alone:
        text += f", alone {', '.join(f'{v:.3g}' for v in alone)} GB/s ({len(alone)} repeat(s))"
    else:
        text += " (measured once)"
    return text


def _confirmed_slow(result: dict, pairs: list[dict], fraction: float,
                    median: float | None) -> tuple[list[dict], list[dict], float | None, str]:
    """(the pairs found slow, the pairs that looked slow in a round but not alone, the yardstick in GB/s, what it
    is). With a confirmation phase (fabric_pairs.py), a pair is slow only when its round AND every measurement of
    it alone fall below ``fraction`` of the yardstick: the typical pairs measured alone the same way (else the
    rounds' median). A result without one (older) is judged on the rounds, and says so."""
    if median is None:
        return [], [], None, "no pairs"
    flagged = [p for p in pairs if p["busbw"] < fraction * median]
    confirmation = result.get("confirmation")
    if not confirmation:
        return flagged, [], median, "the median pair, each pair measured once in a round"
    baseline = {tuple(pair) for pair in confirmation.get("baseline") or []}
    typical = [value for p in pairs if (p["a"], p["b"]) in baseline for value in _alone(p)]
    if typical:
        yardstick = statistics.median(typical)
        what = f"typical pairs measured alone ({len(baseline)} pair(s), median)"
    else:
        yardstick, what = median, "the median pair of the rounds"
    slow = [p for p in flagged if _alone(p) and all(v < fraction * yardstick for v in _alone(p))]
    cleared = [{"a": p["a"], "b": p["b"], "busbw": p["busbw"], "alone": _alone(p),
                "message": f"{p['a']}-{p['b']} looked slow in its round but not when measured alone: {_figures(p)}"}
               for p in flagged if p not in slow]
    return slow, cleared, yardstick, what


def judge_fabric(result: dict, profile_data: dict | None) -> dict:
    """The fabric's verdict and findings from one fabric_pairs.py result: {"verdict": "passed"|"failed"|"not
    judged", "checks": [...], "slow_nodes": [...], "slow_pairs": [...], "matrix": {a: {b: busbw}}, ...}."""
    profile_data = profile_data or {}
    section = profile_data.get("fabric") or {}
    line_rate, line_rate_from = _line_rate_gbps(section, profile_data)
    checks, problems = [], []
    by_size = {row["size"]: row for row in result.get("all_node", [])}
    for threshold in section.get("all_reduce", []):
        size = parse_bytes(threshold["size"])
        row = by_size.get(size)
        if "min_busbw" in threshold:
            floor, what = parse_gbps(threshold["min_busbw"]), f"min_busbw {threshold['min_busbw']}"
        else:
            fraction = float(threshold["min_fraction_of_line_rate"])
            floor = fraction * line_rate if line_rate else None
            what = f"{fraction:g} of the {line_rate_from}"
        check = {"op": "all_reduce", "size": size, "expected": what, "floor_gbps": floor,
                 "busbw": row["busbw"] if row else None}
        if row is None:
            check["verdict"], check["message"] = "failed", f"all_reduce at {size} bytes was not measured"
        elif floor is None:
            check["verdict"], check["message"] = "not judged", f"all_reduce busbw {row['busbw']:.3f} GB/s: {what}"
        elif row["busbw"] < floor:
            check["verdict"] = "failed"
            check["message"] = (f"all_reduce of {size} bytes across {result['world_size']} nodes: busbw "
                                f"{row['busbw']:.3f} GB/s, below {floor:.3f} GB/s ({what})")
        else:
            check["verdict"] = "passed"
            check["message"] = (f"all_reduce of {size} bytes across {result['world_size']} nodes: busbw "
                                f"{row['busbw']:.3f} GB/s (floor {floor:.3f} GB/s, {what})")
        checks.append(check)
        if check["verdict"] == "failed":
            problems.append(check["message"])

    pairs = result.get("pairs", [])
    nodes = list(result.get("nodes", []))
    fraction = float((section.get("pairs") or {}).get("min_fraction_of_median", 0.7))
    median = statistics.median(p["busbw"] for p in pairs) if pairs else None
    matrix = {n: {} for n in nodes}
    for p in pairs:
        matrix[p["a"]][p["b"]] = matrix[p["b"]][p["a"]] = p["busbw"]
    slow, cleared, yardstick, yardstick_what = _confirmed_slow(result, pairs, fraction, median)
    slow_nodes, slow_pairs = [], []
    if median and len(nodes) >= 3:
        for node in nodes:
            mine = [p for p in pairs if node in (p["a"], p["b"])]
            if mine and all(p in slow for p in mine):
                partners = {p["b"] if p["a"] == node else p["a"]: p["busbw"] for p in mine}
                figures = "; ".join(f"with {p['b'] if p['a'] == node else p['a']} {_figures(p)}" for p in mine)
                slow_nodes.append({"node": node, "median_busbw": statistics.median(partners.values()),
                                   "partners": partners, "fleet_median": median, "yardstick": yardstick,
                                   "message": f"{node} is slow with every partner: "
                                              f"{statistics.median(partners.values()):.3g} GB/s median over "
                                              f"{len(partners)} pair(s), against {yardstick:.3g} GB/s for "
                                              f"{yardstick_what} (its NIC, cable, switch port or settings): "
                                              f"{figures}"})
        named = {s["node"] for s in slow_nodes}
        for p in slow:
            if p["a"] not in named and p["b"] not in named:
                slow_pairs.append({**p, "fleet_median": median, "yardstick": yardstick,
                                   "message": f"{p['a']} and {p['b']} are slow together only: {_figures(p)}, "
                                              f"against {yardstick:.3g} GB/s for {yardstick_what} (the path "
                                              "between them)"})
    problems += [s["message"] for s in slow_nodes] + [s["message"] for s in slow_pairs]
    transports = {node: view for node, view in (result.get("nccl") or {}).items()}
    sockets = sorted(node for node, view in transports.items() if "NET/Socket" in (view or {}).get("transports", {}))
    if sockets and (profile_data.get(RDMA_SECTION) or {}).get("devices"):
        problems.append(f"NCCL fell back to TCP sockets (NET/Socket) on {', '.join(sockets)} although the profile "
                        "promises RDMA: check NCCL_IB_HCA, the peer-memory module and the HCA's state")
    verdict = "failed" if problems else ("passed" if checks or pairs else "not judged")
    return {"verdict": verdict, "problems": problems, "checks": checks, "nodes": nodes,
            "pair_median": median, "min_fraction_of_median": fraction, "slow_nodes": slow_nodes,
            "slow_pairs": slow_pairs, "cleared_pairs": cleared, "yardstick": yardstick,
            "yardstick_what": yardstick_what, "matrix": matrix, "rounds": result.get("rounds"),
            "rounds_for_every_pair": result.get("rounds_for_every_pair"), "backend": result.get("backend"),
            "pair_size": result.get("pair_size"), "nccl": transports, "line_rate": line_rate_from}
