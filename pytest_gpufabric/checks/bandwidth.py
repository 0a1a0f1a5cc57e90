"""Bandwidth checks: a measured number at a fixed size against the profile's threshold, and against the link's
peak, so that "is this number expected?" has an answer on the page."""

from __future__ import annotations

from ..fabric.model import Fabric
from ..units import GIB, MIB, format_bytes, is_na, non_finite, parse_bytes, parse_gbps, parse_seconds, pcie_peak_gbps
from .result import CheckResult, failed, passed, unknown

_COLLECTIVE_CAUSES = (
    "Usual causes: NCCL took a slower path (NCCL_P2P_DISABLE/NCCL_P2P_LEVEL, NVLink down, or IB/TCP instead of "
    "the fabric: run with NCCL_DEBUG=INFO), another job on the GPUs, clocks throttled (power or temperature: "
    "nvidia-smi -q -d PERFORMANCE), or NCCL_ALGO/NCCL_PROTO forced."
)
_COPY_CAUSES = (
    "Usual causes: peer access not enabled (ACS/IOMMU, a VM without P2P), a link trained down (PCIe gen or width, "
    "NVLinks inactive), or the host copy bound to the far socket."
)


def size_label(size: int) -> str:
    for unit, value in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if size >= value and size % value == 0:
            return f"{size // value}{unit}"
    return f"{size}B"


def link_peak(fabric: Fabric, gpu_indices: list[int]) -> tuple[float | None, str]:
    """Peak bandwidth per direction of the path between these GPUs: NVLink when every pair is NVLink-joined
    (the slowest GPU's active links x speed), else the narrowest PCIe link (gen x width)."""
    gpus = [fabric.gpu(i) for i in gpu_indices]
    if any(g is None for g in gpus):
        return None, "unknown (GPU missing)"
    nvlinked = len(gpus) > 1 and all(
        (fabric.label(a.label, b.label) or "").startswith("NV") for a in gpus for b in gpus if a is not b)
    if nvlinked:
        peaks = []
        for gpu in gpus:
            active = gpu.active_nvlinks() or []
            speeds = [lk.speed_gbps for lk in active if isinstance(lk.speed_gbps, float)]
            if not active or len(speeds) != len(active):
                return None, "NVLink (link speeds not recorded)"
            peaks.append((sum(speeds), f"NVLink {len(active)} x {min(speeds):g} GB/s"))
        return min(peaks)
    return pcie_peak(gpus)


def pcie_peak(gpus: list) -> tuple[float | None, str]:
    known = [(g.pcie_gen_max, g.pcie_width_max) for g in gpus
             if isinstance(g.pcie_gen_max, int) and isinstance(g.pcie_width_max, int)
             and not is_na(g.pcie_gen_max) and not is_na(g.pcie_width_max)]
    if len(known) != len(gpus) or not known:
        return None, "PCIe (generation and width not recorded)"
    gen, width = min(known, key=lambda gw: pcie_peak_gbps(*gw))
    return pcie_peak_gbps(gen, width), f"PCIe gen {gen} x{width}"


def _of_peak(value: float, peak: float | None, what: str) -> str:
    return f" ({value / peak:.0%} of the {peak:.1f} GB/s {what} peak)" if peak else ""


def _floors(threshold: dict, absolute_key: str, peak: float | None, peak_what: str) -> tuple[list, str]:
    """(floor GB/s, how to say it) for each floor the threshold sets, and what could not be judged: a fraction
    of a peak the evidence does not give. Whatever else is judged still counts (a wrong result still fails)."""
    floors = []
    if absolute_key in threshold:
        floors.append((parse_gbps(threshold[absolute_key]), threshold[absolute_key]))
    unjudged = ""
    if "min_fraction_of_peak" in threshold:
        fraction = threshold["min_fraction_of_peak"]
        if peak is None:
            unjudged = f"the link peak is unknown ({peak_what}): {fraction:.0%} of it cannot be judged"
        else:
            floors.append((fraction * peak, f"{fraction:.0%} of the {peak:.1f} GB/s {peak_what} peak"))
    return floors, unjudged


def check_collective(op: str, threshold: dict, row: dict | None, world_size: int, peak: float | None,
                     peak_what: str, source: str) -> CheckResult:
    """One op at one size: busbw (or time) against the threshold; wrong results always fail."""
    size = parse_bytes(threshold["size"])
    name, subject = f"bandwidth-{op}", f"{op} {size_label(size)}"
    expected = {k: v for k, v in threshold.items() if k != "size"} | {"size_bytes": size}
    if row is None:
        return unknown(name, subject, expected, f"{source} has no {op} result at {format_bytes(size)}")
    found = {"busbw_gbps": row["busbw"], "algbw_gbps": row["algbw"], "time_us": row["time_us"],
             "wrong": row.get("wrong"), "peak_gbps": peak, "peak": peak_what, "ranks": world_size}
    bad = non_finite({k: found[k] for k in ("busbw_gbps", "time_us")})
    if bad and not row.get("wrong"):
        return unknown(name, subject, expected, f"{op} at {format_bytes(size)}: not a finite number "
                                                f"({'; '.join(bad)}) [{source}]")
    problems = []
    if row.get("wrong"):
        problems.append(f"{row['wrong']} wrong element(s): the collective computed wrong results")
    floors, unjudged = _floors(threshold, "min_busbw", peak, peak_what)
    for floor, text in floors:
        if row["busbw"] < floor:
            problems.append(f"busbw {row['busbw']:.1f} GB/s < {text}")
    if "max_time" in threshold and row["time_us"] * 1e-6 > parse_seconds(threshold["max_time"]):
        problems.append(f"{row['time_us']:.1f} us per operation > {threshold['max_time']}")
    summary = (f"{op} at {format_bytes(size)} on {world_size} ranks: busbw {row['busbw']:.1f} GB/s, "
               f"{row['time_us']:.1f} us" + _of_peak(row["busbw"], peak, peak_what))
    if not problems and unjudged:
        return unknown(name, subject, expected, f"{summary} [{source}]; {unjudged}")
    if not problems:
        return passed(name, subject, expected, found, summary + f" [{source}]", unit="GB/s")
    return failed(name, subject, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + ". "
                  + _COLLECTIVE_CAUSES, unit="GB/s", details=problems)


def check_copy(kind: str, threshold: dict, rows: list[dict], peak_of, source: str) -> CheckResult:
    """Every pair (or GPU) of one copy kind against the threshold; ``peak_of(row) -> (peak, what)``."""
    name = f"copy-{kind}"
    expected = dict(threshold)
    if not rows:
        return unknown(name, kind, expected, f"{source} has no {kind} copy result")
    bad = non_finite({row["label"]: row["gbps"] for row in rows}, "GB/s")
    if bad:
        return unknown(name, kind, expected, f"{kind}: not a finite number ({'; '.join(bad)}) [{source}]")
    lines, problems, unjudged = [], [], []
    for row in rows:
        gbps = row["gbps"]
        peak, what = peak_of(row)
        floors, cannot = _floors(threshold, "min", peak, what)
        if cannot:
            unjudged.append(f"{row['label']}: {cannot}")
        line = f"{row['label']}: {gbps:.1f} GB/s" + _of_peak(gbps, peak, what)
        lines.append(line)
        for floor, text in floors:
            if gbps < floor:
                problems.append(f"{line} < {text}")
        if row.get("correct") is False:
            problems.append(f"{row['label']}: the copied data was wrong")
    found = {row["label"]: row["gbps"] for row in rows}
    if not problems and unjudged:
        return unknown(name, kind, expected, f"{kind}: " + "; ".join(lines) + f" [{source}]; " + "; ".join(unjudged))
    if not problems:
        return passed(name, kind, expected, found, f"{kind}: " + "; ".join(lines) + f" [{source}]", unit="GB/s",
                      details=lines)
    return failed(name, kind, expected, found, f"{kind} [{source}]: " + "; ".join(problems) + ". " + _COPY_CAUSES,
                  unit="GB/s", details=lines)
