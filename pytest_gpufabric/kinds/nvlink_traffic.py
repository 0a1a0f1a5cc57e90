"""NVLink traffic during a data-parallel training step (the profile's ``nvlink_traffic`` section): every link the
profile promises a GPU carries traffic both ways, and its links carry the all-reduce volume its rank must move
(checks/nvlink_traffic.py)."""

from __future__ import annotations

from ..checks.nvlink_traffic import volume_limits
from ..remedy_classes import RERUN, RESEAT, SOFTWARE, Remedy
from ..remedy_rules import Context
from ..report.phrases import GE, format_value, settings_phrase
from ..units import format_bytes, is_number
from .base import CheckRule, Kind
from .suite_measurement import SuiteMeasurement

POSITION = 40
SUITE = "test_nvlink_traffic.py"
#: the profile section that makes these promises
SECTION = "nvlink_traffic"
OWN_MODULES = ("checks/nvlink_traffic.py", "suites/test_nvlink_traffic.py", "workloads/training.py",
               "fabric/nvlink_sampler.py")


def _nvlink_gpus(profile) -> list[str]:
    """The GPUs the profile joins to another by NVLink (its pairs)."""
    joined = {gpu for a, b in profile.pairs if profile.nvlinks_between(a, b) for gpu in (a, b)}
    return [f"GPU{i}" for i in sorted(joined)]


def _traffic(check: dict, ctx: Context) -> Remedy:
    """NCCL told not to use peer-to-peer, or platform findings: the software; a flat link: reseat; else a rerun."""
    who, found = check.get("subject"), check.get("found") or {}
    settings = found.get("nccl_settings") or {}
    off = [f"{key}={value}" for key, value in settings.items()
           if (key == "NCCL_P2P_DISABLE" and str(value).strip().lower() in ("1", "true", "yes", "y", "on"))
           or (key == "NCCL_P2P_LEVEL" and str(value).strip().upper() in ("LOC", "0"))]
    if off:
        return SOFTWARE, (f"{who}: the training ran with {', '.join(off)}: NCCL was told not to use peer-to-peer, "
                          "so no NVLink could carry it")
    if ctx.findings:
        return SOFTWARE, f"{who}: its NVLinks carried too little, and the platform explains it: {ctx.findings[0]}"
    flat = found.get("flat_links") or []
    ratios = [found[k] for k in ("tx_ratio", "rx_ratio") if is_number(found.get(k))]
    if flat or (ratios and min(ratios) == 0):
        links = f"NVLink(s) {', '.join(map(str, flat))}" if flat else "its NVLinks"
        return RESEAT, f"{who}: {links} carried no training traffic: a bridge or cable not seated, or the links down"
    share = f" ({min(ratios):.0%} of the all-reduce volume)" if ratios else ""
    return RERUN, f"{who}: its NVLinks carried too little{share} with every link moving data: measure it once more"


def _volume(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = format_value(expected)
    if is_number(expected.get("min_bytes")):
        want = f"{GE} {format_bytes(expected['min_bytes'])} each way"
        if is_number(expected.get("allreduce_bytes")) and is_number(expected.get("min_fraction")):
            want += (f" ({expected['min_fraction']:.0%} of the {format_bytes(expected['allreduce_bytes'])} the "
                     "all-reduce moves)")
    moved = [f"{k[:2].upper()} {format_bytes(found[k])}" for k in ("tx_bytes", "rx_bytes") if is_number(found.get(k))]
    return want, ", ".join(moved) or format_value(found)


def _links(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = f"{expected.get('links_with_tx_and_rx')} links carry traffic both ways"
    got = f"{found.get('links_with_tx_and_rx')} links"
    if found.get("flat_links"):
        got += f"; flat: {format_value(found['flat_links'])}"
    return want, got


NVLINK_TRAFFIC = Kind("nvlink-traffic", "NVLink for this GPU", SUITE, _nvlink_gpus, sections=(SECTION,),
                      checks=(CheckRule("nvlink-traffic-links", _traffic, _links),
                              CheckRule("nvlink-traffic-", _traffic, settings_phrase)))
NVLINK_TRAFFIC_VOLUME = Kind("nvlink-traffic-volume", "NVLink for this GPU", SUITE, _nvlink_gpus,
                             sections=(SECTION,),
                             checks=(CheckRule("nvlink-traffic-volume", _traffic, _volume, volume_limits),))

KINDS = (NVLINK_TRAFFIC, NVLINK_TRAFFIC_VOLUME)


# --- the measurement ----------------------------------------------------------------------------------------------


def _live(fabric_session):
    from ..workloads.training import measure_training_traffic

    return measure_training_traffic(fabric_session.boards(), fabric_session.profile.data.get(SECTION, {}),
                                    on_sample=fabric_session.metrics.observe_nvlink if fabric_session.metrics else None)


def _replay(directory, fabric_session):
    from ..fabric.bundle import load_nvlink_recording
    from ..workloads.training import recorded_training_traffic

    return recorded_training_traffic(load_nvlink_recording(directory))


TRAINING_TRAFFIC = SuiteMeasurement(
    name="nvlink", fixture="nvlink_training",
    doc="NVLink counters around the profile's data-parallel training step (live), or as the bundle recorded them.",
    why_not_promised=lambda profile: None,  # the suite's tests ask the matrix per GPU (its promise marker)
    live=_live, replay=_replay,
    nothing_recorded="the bundle holds no NVLink counter samples taken during training (nvlink-traffic.json or "
                     "nvidia-smi-nvlink-*.sample<N>.txt)",
    record_file="nvlink-traffic.json", to_json=lambda m: m.to_json(),
    check="checks/nvlink_traffic.py", suite="suites/test_nvlink_traffic.py", processes=lambda gpus: gpus)

MEASUREMENTS = (TRAINING_TRAFFIC,)
