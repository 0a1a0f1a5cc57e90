"""NVLink traffic acceptance: during a data-parallel training step across every GPU the profile names, every
promised link carries traffic, and each GPU's links carry the all-reduce volume its rank must send.

Live, the step runs in a child process group (torchrun, one rank per GPU, NCCL) while NVML counters are
sampled around exactly the measured steps; in replay, the bundle's recorded counter samples are judged.
"""

from __future__ import annotations

from html import escape

from pytest_gpufabric.checks.nvlink_traffic import check_allreduce_volume, check_links_carry_traffic
from pytest_gpufabric.promise import promise
from pytest_gpufabric.units import format_bytes


def _nvlink_gpus(profile) -> set[int]:
    return {gpu for a, b in profile.pairs if profile.nvlinks_between(a, b) for gpu in (a, b)}


def _nvlink_promised(profile, params) -> bool:
    return params["promised_gpu"] in _nvlink_gpus(profile)


def _link_table(gpu: int, links) -> str:
    rows = "".join(
        f"<tr><td>{escape(str(link))}</td><td>{escape(format_bytes(d.tx_bytes))}</td><td>{escape(format_bytes(d.rx_bytes))}</td>"
        f"<td>{'reset seen' if d.reset else ''}</td></tr>"
        for link, d in sorted(links.items())
    )
    return (f"<p>GPU{gpu} NVLink bytes during the measurement</p><table><tr><th>link</th><th>TX</th><th>RX</th>"
            f"<th></th></tr>{rows}</table>")


@promise("nvlink-traffic", "NVLink for this GPU", _nvlink_promised)
def test_every_nvlink_carries_training_traffic(gpu_profile, promised_gpu, nvlink_training, gpufabric_check,
                                               gpufabric_extra):
    if promised_gpu is None:
        return  # promised but missing: the test fails on that before it gets here
    links = nvlink_training.traffic.deltas.get(promised_gpu.index, {})
    gpufabric_extra(html=_link_table(promised_gpu.index, links), name=f"GPU{promised_gpu.index} NVLink bytes")
    gpufabric_check(check_links_carry_traffic(
        promised_gpu.index, links, gpu_profile.nvlink.get("links_per_gpu"), nvlink_training.describe(),
        nvlink_training.env,
    ))


@promise("nvlink-traffic-volume", "NVLink for this GPU", _nvlink_promised)
def test_nvlinks_carry_the_allreduce_volume(gpu_profile, promised_gpu, nvlink_training, gpufabric_check,
                                            gpufabric_extra):
    if promised_gpu is None:
        return
    from pytest_gpufabric.report.plots import nvlink_timeline_png

    traffic = nvlink_training.traffic
    png = nvlink_timeline_png(traffic.timeline, f"NVLink throughput, {gpu_profile.name}")
    if png is not None:
        gpufabric_extra(png=png, name="NVLink throughput over time")
    section = gpu_profile.data.get("nvlink_traffic", {})
    gpufabric_check(check_allreduce_volume(
        promised_gpu.index, traffic.deltas.get(promised_gpu.index, {}), nvlink_training.expected_bytes,
        section.get("min_fraction", 0.9), nvlink_training.describe(), nvlink_training.env,
    ))
