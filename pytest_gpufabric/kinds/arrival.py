"""The state a machine arrives in, judged by the health check's own readers and limits (nodehealth/arrival.py):
each GPU's health (ECC, row remapping, fabric, recovery action) and the Xids of the kernel log."""

from __future__ import annotations

from ..remedy_classes import CLASSES, RESET, Remedy
from ..remedy_rules import Context, _lead
from ..report.phrases import format_value
from .base import CheckRule, Kind, gpus
from .suite_measurement import SuiteMeasurement

POSITION = 10
SUITE = "test_arrival.py"
#: the modules of this family besides this one: its checks and its suite
OWN_MODULES = ("nodehealth/arrival.py", "suites/test_arrival.py")


def _phrase(check: dict) -> tuple[str, str]:
    """What the health check found on arrival, board by board."""
    found = check.get("found")
    findings = found.get("findings") if isinstance(found, dict) else None
    if not isinstance(findings, list):
        return format_value(check.get("expected")), format_value(found)
    seen = [(f"GPU{f['gpu']}: " if check.get("name") == XID_EVENTS.name and f.get("gpu") is not None else "")
            + str(f.get("what")) for f in findings if isinstance(f, dict) and f.get("severity") in ("drain", "warn")]
    return str(check.get("expected")), "; ".join(seen) or "healthy"


def _remedy(check: dict, ctx: Context) -> list[Remedy]:
    """Each finding that drains, with the remedy the health check gives it (nodehealth/passive.py)."""
    found = check.get("found")
    findings = found.get("findings") if isinstance(found, dict) else None
    drains = [f for f in findings or [] if isinstance(f, dict) and f.get("severity") == "drain"
              and f.get("remedy") in CLASSES]
    out = [(f["remedy"], f"{'node' if f.get('gpu') is None else 'GPU' + str(f['gpu'])}: {f.get('what')}")
           for f in drains]
    return out or [(RESET, f"{_lead(check)}: the health check drains the machine; a reset clears most of it")]


GPU_HEALTH = Kind("gpu-health", "arrival state of this GPU (ECC errors, row remapping, fabric, recovery action)",
                  SUITE, gpus, checks=(CheckRule("gpu-health", _remedy, _phrase),), added_in_format=4)
XID_EVENTS = Kind("xid-events", "no Xid in the kernel log on arrival", SUITE, lambda profile: [""],
                  checks=(CheckRule("xid-events", _remedy, _phrase),), added_in_format=4)

KINDS = (GPU_HEALTH, XID_EVENTS)


# --- the measurement ----------------------------------------------------------------------------------------------


def _live(fabric_session):
    from ..nodehealth.arrival_record import read_arrival_live

    return read_arrival_live()


def _replay(directory, fabric_session):
    from ..nodehealth.arrival_record import read_arrival_bundle

    return read_arrival_bundle(directory)


ARRIVAL_HEALTH = SuiteMeasurement(
    name="arrival", fixture="arrival_health",
    doc="The state the machine arrives in, by `gpufabric health`'s reader: NVML and the kernel log read once per run "
        "(and written to health.json), or the bundle's health.json, else its nvml.json with nvidia-smi-q.xml.",
    why_not_promised=lambda profile: None,  # every profile promises a machine that arrives healthy
    live=_live, replay=_replay,
    nothing_recorded="the bundle holds no health record (health.json from gpufabric snapshot) and no nvml.json with "
                     "nvidia-smi-q.xml to read the GPUs' counters from",
    record_file="health.json", to_json=lambda arrival: arrival.to_json(),
    check="nodehealth/arrival.py", suite="suites/test_arrival.py", spare_imports=(), processes=lambda gpus: 0)

MEASUREMENTS = (ARRIVAL_HEALTH,)
