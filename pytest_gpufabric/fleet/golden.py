"""Golden thresholds from a fleet: ``gpufabric profile init --from-fleet DIR``.

A vendor that has accepted a fleet of one machine class knows what that class does better than a datasheet: the
new profile extends the one the nodes ran and sets each floor the fleet measured (bandwidth per op and size,
copies, burn-in TFLOP/s) to a stated percentile of the passing nodes times a stated margin (ceilings, for times:
the opposite percentile over the margin). The numbers, the percentile, the margin and the node count go into
the profile's comment block, so whoever reads it later knows where each number came from.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

from ..errors import GpuFabricError
from ..formats.clean import yaml_comment
from ..kinds.bandwidth import SECTION as BANDWIDTH_SECTION
from ..kinds.burn_in import BURN_IN_GPU
from ..kinds.burn_in import SECTION as BURN_IN_SECTION
from ..profile.loader import load_profile
from .analysis import duplicate_serials
from .nodes import Node
from .report import judged_nodes

__all__ = ["golden_profile_yaml"]


def _percentile(values: list[float], percent: float) -> float:
    """Nearest-rank percentile: a value some node measured, never an interpolation between two."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def _values(nodes: list[Node], check: str, subject: str | None, metric: str | None) -> list[float]:
    """One value per node: the node's worst over the matching subjects/labels (a floor must hold for each)."""
    out = []
    for node in nodes:
        mine = [v for (c, s, m), v in node.metrics.items()
                if c == check and (subject is None or s == subject) and (metric is None or m == metric)]
        if mine:
            out.append(min(mine) if metric != "time_us" else max(mine))
    return out


def golden_profile_yaml(directory: Path, name: str, percentile: float, margin: float,
                        allow_replays: bool = False) -> tuple[str, dict, list[str], list[str]]:
    """(the YAML text, the parsed document, the nodes its floors come from, the nodes left out as not accepted) of
    a profile named ``name`` extending the profile the fleet's accepted nodes ran. Raises ValueError when there is
    nothing to derive or nothing to trust: GPU serials on two nodes, no accepted node, nodes of several profiles,
    or no measurement a floor could come from."""
    import yaml

    if not 0 < percentile < 50 or not 0 < margin <= 1:
        raise ValueError(f"--percentile must be in (0, 50) and --margin in (0, 1], got {percentile:g} and {margin:g}")
    nodes, yardstick, unlisted, _ = judged_nodes([directory], allow_replays=allow_replays)
    if unlisted:
        raise ValueError(f"{directory}: folder(s) that could not be listed ({'; '.join(unlisted[:3])}): a golden "
                         "profile comes from a fleet read whole")
    duplicates = duplicate_serials(nodes)
    if duplicates:
        shown = "; ".join(f"{d['serial']} on {' and '.join(d['nodes'])}" for d in duplicates[:5])
        raise ValueError(f"{directory}: GPU serials on more than one node ({shown}): the results were copied or "
                         "mixed up, and floors taken from them could be one machine's counted twice; fix the fleet's "
                         "results first (`gpufabric fleet report` names them)")
    if yardstick.problem:
        raise ValueError(f"{directory}: {yardstick.problem}; floors come from one machine class")
    passing = [n for n in nodes if n.verdict == "ACCEPTED"]
    if not passing:
        raise ValueError(f"{directory}: no accepted node ({len(nodes)} node folder(s)): nothing to take floors from")
    base = yardstick.profile
    if base is None:
        raise ValueError(f"{directory}: {yardstick.said}")
    low, high = percentile, 100 - percentile
    notes: list[str] = []
    # by name where that finds the same file (a shipped profile: the new one then works on any machine)
    same = _loads(base.name) and load_profile(base.name).path.resolve() == base.path.resolve()
    doc: dict = {"name": name, "extends": base.name if same else str(base.path),
                 "description": f"{base.data.get('description', base.name)}; floors from a fleet of {len(passing)} "
                                f"accepted node(s)"}

    collectives: dict[str, list[dict]] = {}
    for op, threshold in base.collective_thresholds():
        size = threshold["size"]
        subject = f"{op} {size.replace(' ', '')}"
        if "max_time" in threshold:
            values = _values(passing, f"bandwidth-{op}", subject, "time_us")
            if values:
                ceiling = _percentile(values, high) / margin
                collectives.setdefault(op, []).append({"size": size, "max_time": f"{ceiling:.1f} us"})
                notes.append(f"{subject} time: p{high:g} {_percentile(values, high):.1f} us / {margin:g} over "
                             f"{len(values)} node(s) -> max {ceiling:.1f} us")
                continue
        values = _values(passing, f"bandwidth-{op}", subject, "busbw_gbps")
        if values:
            floor = _percentile(values, low) * margin
            collectives.setdefault(op, []).append({"size": size, "min_busbw": f"{floor:.1f} GB/s"})
            notes.append(f"{subject} busbw: p{low:g} {_percentile(values, low):.1f} GB/s x {margin:g} over "
                         f"{len(values)} node(s) -> min {floor:.1f} GB/s")
        else:
            collectives.setdefault(op, []).append(dict(threshold))  # not measured by the fleet: kept as it was
    copy: dict[str, dict] = {}
    for kind in base.copy_thresholds():
        values = _values(passing, f"copy-{kind}", None, None)
        if values:
            floor = _percentile(values, low) * margin
            copy[kind] = {"min": f"{floor:.1f} GB/s"}
            notes.append(f"copy {kind} (slowest GPU or pair of each node): p{low:g} "
                         f"{_percentile(values, low):.1f} GB/s x {margin:g} over {len(values)} node(s) -> "
                         f"min {floor:.1f} GB/s")
    bandwidth = {}
    if collectives:
        bandwidth["collectives"] = collectives
    if copy:
        bandwidth["copy"] = copy
    if bandwidth:
        doc[BANDWIDTH_SECTION] = bandwidth
    tflops = _values(passing, BURN_IN_GPU.name, None, "tflops")
    if tflops and BURN_IN_SECTION in base.data:
        floor = _percentile(tflops, low) * margin
        doc[BURN_IN_SECTION] = {"min_tflops": round(floor, 1)}
        notes.append(f"burn-in TFLOP/s (slowest GPU of each node): p{low:g} {_percentile(tflops, low):.1f} x "
                     f"{margin:g} over {len(tflops)} node(s) -> min {floor:.1f}")
    if not notes:
        raise ValueError(f"{directory}: the accepted nodes measured nothing a floor of profile {base.name} "
                         "comes from (bandwidth, copies, burn-in)")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    left_out = [n for n in nodes if n.verdict != "ACCEPTED"]
    # comments from values (a folder's name may hold a newline): each is cleaned into comment lines (yaml_comment)
    header = [f"{name}: written by `gpufabric profile init --from-fleet` on {stamp} from {directory}:",
              f"{len(passing)} accepted node(s) of {len(nodes)}, profile {base.name}; floors from: "
              + ", ".join(n.name for n in passing) + "."]
    if left_out:
        header.append("Left out, not accepted: " + ", ".join(f"{n.name} ({n.verdict or 'unreadable'})"
                                                           for n in left_out) + ".")
    header += [
              f"Each floor is the p{low:g} of the accepted nodes times {margin:g} (each ceiling the p{high:g} "
              f"over {margin:g}); nearest-rank percentiles:"] + [f"  {note}" for note in notes]
    text = "".join(yaml_comment(line) for line in header) + yaml.safe_dump(doc, sort_keys=False, width=118)
    return text, doc, [n.name for n in passing], [n.name for n in left_out]


def _loads(spec: str) -> bool:
    try:
        load_profile(spec)
    except GpuFabricError:
        return False
    return True
