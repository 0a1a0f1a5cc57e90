"""NVLink traffic acceptance: during a data-parallel training step across every GPU the profile names, every
promised link carries traffic, and each GPU's links carry the all-reduce volume its rank must send.

Live, the step runs in a child process group (torchrun, one rank per GPU, NCCL) while NVML counters are
sampled around exactly the measured steps; in replay, the bundle's recorded counter samples are judged.
"""

from __future__ import annotations

from pytest_gpufabric.checks.nvlink_traffic import (
    allreduce_volume,
    check_allreduce_volume,
    check_links_carry_traffic,
    traffic_evidence_problems,
)
from pytest_gpufabric.kinds.nvlink_traffic import NVLINK_TRAFFIC, NVLINK_TRAFFIC_VOLUME, SECTION
from pytest_gpufabric.promise import not_checked, promise
from pytest_gpufabric.units import format_bytes


def _link_table(gpu: int, links) -> dict:
    return {"caption": f"GPU{gpu} NVLink bytes during the measurement", "header": ["link", "TX", "RX", ""],
            "rows": [[str(link), format_bytes(d.tx_bytes), format_bytes(d.rx_bytes), "reset seen" if d.reset else ""]
                     for link, d in sorted(links.items())]}


def _judgeable_links(nvlink_training, gpu_profile, gpu: int) -> dict:
    """The GPU's per-link traffic, once the samples show it (in order, monotonic, in bytes, the GPU in each, the
    training on the promised ranks); else the promise is not checked, naming the sample and link at fault."""
    problems = traffic_evidence_problems(nvlink_training.traffic.samples, gpu, nvlink_training.workload,
                                         gpu_profile.gpu_count, nvlink_training.source)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        not_checked("; ".join(problems[:3]) + more)
    return nvlink_training.traffic.deltas.get(gpu, {})


@promise(NVLINK_TRAFFIC.name)
def test_every_nvlink_carries_training_traffic(gpu_profile, promised_gpu, nvlink_training, gpufabric_check,
                                               gpufabric_extra):
    if promised_gpu is None:
        return  # promised but missing: the test fails on that before it gets here
    links = _judgeable_links(nvlink_training, gpu_profile, promised_gpu.index)
    gpufabric_extra(tables=[_link_table(promised_gpu.index, links)], name=f"GPU{promised_gpu.index} NVLink bytes")
    gpufabric_check(check_links_carry_traffic(
        promised_gpu.index, links, gpu_profile.nvlink.get("links_per_gpu"), nvlink_training.describe(),
        nvlink_training.env,
    ))


@promise(NVLINK_TRAFFIC_VOLUME.name)
def test_nvlinks_carry_the_allreduce_volume(gpu_profile, promised_gpu, nvlink_training, gpufabric_check):
    if promised_gpu is None:
        return
    links = _judgeable_links(nvlink_training, gpu_profile, promised_gpu.index)
    volume, bad_volume = allreduce_volume(nvlink_training.workload)
    if bad_volume:
        not_checked(f"{bad_volume} [{nvlink_training.source}]")
    section = gpu_profile.data.get(SECTION, {})
    gpufabric_check(check_allreduce_volume(
        promised_gpu.index, links, volume, section.get("min_fraction", 0.9), nvlink_training.describe(),
        nvlink_training.env,
    ))
