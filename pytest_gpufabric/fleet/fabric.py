"""The fabric between a fleet's nodes, judged: the all-node collective against the profile's ``fabric:`` floors,
and the pairwise rounds (workloads/fabric_pairs.py) to name the node or the pair that falls short.

A pair is slow when its busbw is below ``min_fraction_of_median`` of the median over all pairs. A node is slow
when every pair it was in is slow: it is slow with every partner, so the cause is on its side (its NIC, cable,
switch port, settings); its pairs are then explained by it. A slow pair between two nodes that are not slow is
named as a pair: each is fine with everyone else, so the cause is between them (a path through the switches, a
port pair, a route). With fewer than three nodes no pair can be told from a node, and the rounds only report.
"""

from __future__ import annotations

import statistics

from ..units import parse_bytes, parse_gbit, parse_gbps

__all__ = ["FABRIC_FILE", "judge_fabric"]

FABRIC_FILE = "fabric.json"


def _line_rate_gbps(section: dict, profile_data: dict) -> tuple[float | None, str]:
    """GB/s of the inter-node link (1e9 bytes/s): the fabric section's line_rate, else the slowest RDMA device the
    profile promises (what the RDMA suite judges each port against)."""
    if "line_rate" in section:
        return parse_gbit(section["line_rate"]) / 8, f"line rate {section['line_rate']} (fabric.line_rate)"
    rates = [parse_gbit(d["rate"]) for d in (profile_data.get("rdma") or {}).get("devices", []) if "rate" in d]
    if rates:
        return min(rates) / 8, f"line rate {min(rates):g} Gb/s (the slowest RDMA port the profile promises)"
    return None, "no line rate (neither fabric.line_rate nor rdma.devices)"


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
    slow = [p for p in pairs if median and p["busbw"] < fraction * median]
    slow_nodes, slow_pairs = [], []
    if median and len(nodes) >= 3:
        for node in nodes:
            mine = [p for p in pairs if node in (p["a"], p["b"])]
            if mine and all(p in slow for p in mine):
                partners = {p["b"] if p["a"] == node else p["a"]: p["busbw"] for p in mine}
                slow_nodes.append({"node": node, "median_busbw": statistics.median(partners.values()),
                                   "partners": partners, "fleet_median": median,
                                   "message": f"{node} is slow with every partner: "
                                              f"{statistics.median(partners.values()):.3g} GB/s median over "
                                              f"{len(partners)} pair(s), the fleet's pairs {median:.3g} GB/s (its "
                                              "NIC, cable, switch port or settings)"})
        named = {s["node"] for s in slow_nodes}
        for p in slow:
            if p["a"] not in named and p["b"] not in named:
                slow_pairs.append({**p, "fleet_median": median,
                                   "message": f"{p['a']} and {p['b']} are slow together only: {p['busbw']:.3g} GB/s, "
                                              f"the fleet's pairs {median:.3g} GB/s (the path between them)"})
    problems += [s["message"] for s in slow_nodes] + [s["message"] for s in slow_pairs]
    transports = {node: view for node, view in (result.get("nccl") or {}).items()}
    sockets = sorted(node for node, view in transports.items() if "NET/Socket" in (view or {}).get("transports", {}))
    if sockets and (profile_data.get("rdma") or {}).get("devices"):
        problems.append(f"NCCL fell back to TCP sockets (NET/Socket) on {', '.join(sockets)} although the profile "
                        "promises RDMA: check NCCL_IB_HCA, the peer-memory module and the HCA's state")
    verdict = "failed" if problems else ("passed" if checks or pairs else "not judged")
    return {"verdict": verdict, "problems": problems, "checks": checks, "nodes": nodes,
            "pair_median": median, "min_fraction_of_median": fraction, "slow_nodes": slow_nodes,
            "slow_pairs": slow_pairs, "matrix": matrix, "rounds": result.get("rounds"),
            "rounds_for_every_pair": result.get("rounds_for_every_pair"), "backend": result.get("backend"),
            "pair_size": result.get("pair_size"), "nccl": transports, "line_rate": line_rate_from}
