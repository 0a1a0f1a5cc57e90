"""NVLink traffic checks: during a data-parallel training step every promised link carries traffic, and a
GPU's links carry (at least a fraction of) the all-reduce volume its rank must send and receive."""

from __future__ import annotations

import math

from ..formats.counters import LinkDelta, sample_problems
from ..units import format_bytes, is_number
from .limits import HIGHER, Limit, figure
from .result import CheckResult, failed, passed, unknown

_CAUSES = (
    "Usual causes: NCCL told not to use peer-to-peer (NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL below NVL), a missing "
    "or badly seated NVLink bridge, ACS or the IOMMU forcing peer traffic through the PCIe root complex, or a "
    "VM whose hypervisor does not pass peer-to-peer through. Check `nvidia-smi topo -p2p n` and NCCL_DEBUG=INFO."
)


def nccl_settings(env: dict[str, str] | None) -> dict[str, str]:
    """The NCCL settings of the run that steer its peer-to-peer path: a failed check's ``found`` keeps them, so that
    what to do next (remedy.py) reads them, not its message."""
    return {k: v for k, v in (env or {}).items() if k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE")}


def _nccl_settings(env: dict[str, str] | None) -> str:
    shown = nccl_settings(env)
    return f" Set for this run: {', '.join(f'{k}={v}' for k, v in shown.items())}." if shown else ""


def traffic_evidence_problems(samples: list, gpu: int, workload: dict | None, promised_gpus: int,
                              source: str) -> list[str]:
    """Why the recorded counters cannot show this GPU's promise (empty: they can): the series itself
    (formats/counters.py sample_problems: order, monotonic, units, counts), the GPU missing from it, and a training
    run on another number of ranks than the profile promises GPUs."""
    problems = sample_problems(samples, gpu)
    missing = [n for n, s in enumerate(samples) if gpu not in s.gpus]
    if samples and missing:
        held = sorted({g for s in samples for g in s.gpus})
        problems.append(f"GPU{gpu} is not in sample(s) {', '.join(map(str, missing[:5]))} (the recording holds "
                        f"{', '.join(f'GPU{g}' for g in held) or 'no GPU'})")
    if workload is not None:
        world = workload.get("world_size")
        if not isinstance(world, int) or isinstance(world, bool) or world != promised_gpus:
            problems.append(f"the training ran on {world!r} ranks; the profile promises {promised_gpus} GPUs")
    return [f"{p} [{source}]" for p in problems]


def allreduce_volume(workload: dict | None) -> tuple[float | None, str | None]:
    """(bytes each rank's all-reduce sends, why it cannot be used): ddp_step's ``allreduce_bytes_per_rank``,
    a finite number above 0 that agrees with 2 (w - 1) / w x gradient bytes x steps where those are recorded."""
    if workload is None:
        return None, None
    value = workload.get("allreduce_bytes_per_rank")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        return None, f"allreduce_bytes_per_rank = {value!r} is not a byte count above 0"
    world, gradient, steps = (workload.get(k) for k in ("world_size", "gradient_bytes", "steps"))
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (world, gradient, steps)):
        derived = 2 * (world - 1) / world * gradient * steps
        if not math.isclose(derived, value, rel_tol=1e-9):
            return None, (f"allreduce_bytes_per_rank = {value!r} disagrees with 2 (w - 1) / w x gradient_bytes x "
                          f"steps = {derived:.0f} (w = {world}, {gradient} B, {steps} steps)")
    return float(value), None


def _per_link(links: dict[int, LinkDelta]) -> list[str]:
    return [f"link {link}: TX {format_bytes(d.tx_bytes)}, RX {format_bytes(d.rx_bytes)}"
            + (" (counter reset seen)" if d.reset else "") for link, d in sorted(links.items())]


def check_links_carry_traffic(gpu: int, links: dict[int, LinkDelta], promised_links: int | None,
                              what: str, env: dict[str, str] | None = None) -> CheckResult:
    """Every link shows TX and RX growth, and at least as many links as promised do."""
    name, subject = "nvlink-traffic-links", f"GPU{gpu}"
    grew = [link for link, d in links.items() if d.tx_bytes > 0 and d.rx_bytes > 0]
    flat = sorted(set(links) - set(grew))
    expected = {"links_with_tx_and_rx": promised_links if promised_links is not None else len(links)}
    found = {"links_with_tx_and_rx": len(grew), "flat_links": flat}
    enough = promised_links is None or len(grew) >= promised_links
    if links and not flat and enough:
        return passed(name, subject, expected, found, f"{subject}: all {len(grew)} NVLinks carried traffic {what}")
    if not links:
        seen = "no active NVLink was read on this GPU"
    elif len(flat) == len(links) and all(d.tx_bytes == 0 and d.rx_bytes == 0 for d in links.values()):
        seen = f"all {len(links)} links stayed flat (0 B TX, 0 B RX)"
    else:
        seen = "per link: " + "; ".join(_per_link(links))
    want = f"{promised_links} links" if promised_links is not None else "every link"
    if nccl_settings(env):
        found["nccl_settings"] = nccl_settings(env)
    return failed(
        name, subject, expected, found,
        f"{subject}: expected TX and RX growth on {want} {what}; {seen}. " + _CAUSES + _nccl_settings(env),
        details=_per_link(links),
    )


def volume_limits(record: dict) -> list[Limit]:
    """TX and RX bytes against ``min_bytes``; their ratios to the all-reduce volume, which the fleet compares."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    floor = expected.get("min_bytes")
    bounds = [(floor, f"min {format_bytes(floor)}")] if is_number(floor) else []
    limits = [limit for key in ("tx_bytes", "rx_bytes") if is_number(found.get(key))
              for limit in figure(key, found[key], bounds, "bytes", HIGHER)]
    return limits + [Limit(key, found[key], None, "x", HIGHER, of="expected", fleet=True)
                     for key in ("tx_ratio", "rx_ratio") if is_number(found.get(key))]


def check_allreduce_volume(gpu: int, links: dict[int, LinkDelta], expected_bytes: float | None,
                           min_fraction: float, what: str, env: dict[str, str] | None = None) -> CheckResult:
    """TX and RX summed over the GPU's links reach ``min_fraction`` of the all-reduce volume of its rank."""
    name, subject = "nvlink-traffic-volume", f"GPU{gpu}"
    if expected_bytes is None:
        return unknown(name, subject, None, "the recording holds no workload result, so the all-reduce volume "
                                            "the links should carry is unknown; only link growth is judged")
    tx = sum(d.tx_bytes for d in links.values())
    rx = sum(d.rx_bytes for d in links.values())
    floor = min_fraction * expected_bytes
    expected = {"allreduce_bytes": expected_bytes, "min_fraction": min_fraction, "min_bytes": floor}
    found = {"tx_bytes": tx, "rx_bytes": rx, "tx_ratio": tx / expected_bytes, "rx_ratio": rx / expected_bytes}
    summary = (f"TX {format_bytes(tx)} ({tx / expected_bytes:.3f}x), RX {format_bytes(rx)} "
               f"({rx / expected_bytes:.3f}x) of the {format_bytes(int(expected_bytes))} all-reduce volume {what}")
    if min(tx, rx) >= floor:
        return passed(name, subject, expected, found, f"{subject}: {summary}", unit="bytes")
    if nccl_settings(env):
        found["nccl_settings"] = nccl_settings(env)
    return failed(
        name, subject, expected, found,
        f"{subject}: expected at least {min_fraction:.0%} of the all-reduce volume over NVLink; {summary}. "
        + _CAUSES + _nccl_settings(env),
        unit="bytes", details=_per_link(links),
    )
