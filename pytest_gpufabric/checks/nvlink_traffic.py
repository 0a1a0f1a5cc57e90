"""NVLink traffic checks: during a data-parallel training step every promised link carries traffic, and a
GPU's links carry (at least a fraction of) the all-reduce volume its rank must send and receive."""

from __future__ import annotations

from ..fabric.counters import LinkDelta
from ..units import format_bytes
from .result import CheckResult, failed, passed, unknown

_CAUSES = (
    "Usual causes: NCCL told not to use peer-to-peer (NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL below NVL), a missing "
    "or badly seated NVLink bridge, ACS or the IOMMU forcing peer traffic through the PCIe root complex, or a "
    "VM whose hypervisor does not pass peer-to-peer through. Check `nvidia-smi topo -p2p n` and NCCL_DEBUG=INFO."
)


def _nccl_settings(env: dict[str, str] | None) -> str:
    shown = {k: v for k, v in (env or {}).items() if k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE")}
    return f" Set for this run: {', '.join(f'{k}={v}' for k, v in shown.items())}." if shown else ""


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
    return failed(
        name, subject, expected, found,
        f"{subject}: expected TX and RX growth on {want} {what}; {seen}. " + _CAUSES + _nccl_settings(env),
        details=_per_link(links),
    )


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
    return failed(
        name, subject, expected, found,
        f"{subject}: expected at least {min_fraction:.0%} of the all-reduce volume over NVLink; {summary}. "
        + _CAUSES + _nccl_settings(env),
        unit="bytes", details=_per_link(links),
    )
