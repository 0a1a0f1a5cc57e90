"""RDMA (the profile's ``rdma`` section): every promised port there, up, at its rate, link layer and MTU, next to
the GPUs it serves; ib_write_bw at the promised rate; the port's counters saw the bytes it sent (checks/rdma.py)."""

from __future__ import annotations

from ..checks.rdma import counters_limits, ib_write_bw_limits
from ..remedy_classes import RESEAT, SOFTWARE, Remedy
from ..remedy_rules import Context, _fixed, _lead
from ..report.phrases import settings_phrase
from ..units import is_number, parse_gbit
from .bandwidth import bandwidth_rule
from .base import CheckRule, Kind, once
from .suite_measurement import SuiteMeasurement

POSITION = 80
SUITE = "test_rdma.py"
#: the profile section that makes these promises
SECTION = "rdma"
OWN_MODULES = ("checks/rdma.py", "suites/test_rdma.py", "workloads/rdma.py", "workloads/ib_write_bw.py")


def _ports(profile, only_with_gpus: bool = False) -> list[str]:
    return [f"{d['name']}:{d.get('port', 1)}" for d in profile.rdma_devices if not only_with_gpus or d.get("gpus")]


def _ib_write_bw(profile) -> dict | None:
    return profile.rdma.get("ib_write_bw")


def _port(check: dict, ctx: Context) -> list[Remedy]:
    """A link down or a rate low: reseat; a state, MTU or link layer other than promised: the software."""
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found")
    if not isinstance(found, dict):
        return [(SOFTWARE, f"{_lead(check)}: its driver is not loaded (ibv_devinfo), or the card is not seated")]
    out = []
    if found.get("phys_state") not in (None, "LinkUp") or found.get("state") == "DOWN":
        out.append((RESEAT, f"{who}: physical state {found.get('phys_state')}, state {found.get('state')}: the cable "
                            "or transceiver"))
    elif found.get("state") not in (None, "ACTIVE"):
        out.append((SOFTWARE, f"{who}: state {found.get('state')} on a link that is up: the subnet manager or the "
                              "switch port's configuration"))
    rate = found.get("rate_gbit")
    if "rate" in expected and is_number(rate) and rate < parse_gbit(expected["rate"]):
        out.append((RESEAT, f"{who}: {rate:g} Gb/s, below the {expected['rate']} promised: a cable or transceiver of "
                            "a lower speed, or not fully seated"))
    mtu = found.get("active_mtu")
    if "mtu" in expected and is_number(mtu) and mtu < expected["mtu"]:
        out.append((SOFTWARE, f"{who}: active MTU {mtu}, below the {expected['mtu']} promised: the MTU setting"))
    for key, cls, because in (("link_layer", SOFTWARE, "the port's configuration"),
                              ("numa_node", RESEAT, "the card sits in another slot than the design")):
        if key in expected and found.get(key) not in (None, expected[key]):
            out.append((cls, f"{who}: {key.replace('_', ' ')} {found.get(key)}, the profile promises {expected[key]}: "
                             f"{because}"))
    return out or [(SOFTWARE, f"{_lead(check)}: the port's configuration")]


RDMA_PORT = Kind("rdma-port", "RDMA devices", SUITE, _ports, sections=(SECTION,),
                 checks=(CheckRule("rdma-port", _port, settings_phrase),))
RDMA_LOCALITY = Kind(
    "rdma-locality", "GPU paired with this RDMA device", SUITE, lambda profile: _ports(profile, only_with_gpus=True),
    sections=(SECTION,),
    checks=(CheckRule("rdma-locality", _fixed(RESEAT, "the NIC or the GPU in another slot than the design"),
                      settings_phrase),))
IB_WRITE_BW = Kind("ib-write-bw", "ib_write_bw bandwidth", SUITE, once(lambda p: _ib_write_bw(p) is not None),
                   sections=(SECTION,),
                   checks=(CheckRule("ib-write-bw", bandwidth_rule(ib_write_bw_limits), settings_phrase,
                                     ib_write_bw_limits),),
                   equivalents=(("perftest", "ib_write_bw"),))
RDMA_COUNTERS = Kind(
    "rdma-counters", "port counters around ib_write_bw", SUITE,
    once(lambda p: _ib_write_bw(p) is not None and _ib_write_bw(p).get("counters", True)), sections=(SECTION,),
    checks=(CheckRule("rdma-counters", _fixed(SOFTWARE, "the traffic took another device or port: ib_write_bw's "
                                                        "device setting"), settings_phrase, counters_limits),))

KINDS = (RDMA_PORT, RDMA_LOCALITY, IB_WRITE_BW, RDMA_COUNTERS)


# --- the measurements ---------------------------------------------------------------------------------------------


def _devices_live(fabric_session):
    from ..workloads.rdma import live_rdma_devices

    devices = live_rdma_devices()
    if fabric_session.metrics is not None and devices:
        fabric_session.metrics.observe_rdma(devices)
    return devices


def _devices_replay(directory, fabric_session):
    from ..fabric.bundle import load_rdma_devices

    devices = load_rdma_devices(directory)
    if fabric_session.metrics is not None and devices:
        fabric_session.metrics.observe_rdma(devices)
    return devices


RDMA_DEVICES = SuiteMeasurement(
    name="rdma", fixture="rdma_devices",
    doc="RDMA devices with their ports and counters (sysfs live; the bundle's sysfs copy or ibv_devinfo in "
        "replay). An empty list is a machine without RDMA devices.",
    why_not_promised=lambda profile: None, live=_devices_live, replay=_devices_replay,
    nothing_recorded="the bundle holds no RDMA devices (sysfs/ copy or ibv_devinfo-v.txt)",
    check="checks/rdma.py", suite="suites/test_rdma.py", needs_machine=False)


def _ib_write_bw_live(fabric_session):
    from ..workloads.rdma import measure_ib_write_bw

    return measure_ib_write_bw(fabric_session.profile.rdma)


def _ib_write_bw_replay(directory, fabric_session):
    from ..fabric.bundle import load_rdma_bandwidth

    return load_rdma_bandwidth(directory)


IB_WRITE_BW_RESULT = SuiteMeasurement(
    name="rdma_bw", fixture="ib_write_bw_result",
    doc="The run's ib_write_bw result and the port counters around it (live: the real binary; replay: the "
        "bundle's rdma-bw.json or ib_write_bw output).",
    why_not_promised=lambda profile: None if "ib_write_bw" in profile.rdma
    else f"profile {profile.name} promises no ib_write_bw bandwidth",
    live=_ib_write_bw_live, replay=_ib_write_bw_replay,
    nothing_recorded="the bundle holds no ib_write_bw output (ib_write_bw.txt or rdma-bw.json)",
    record_file="rdma-bw.json", check="checks/rdma.py", suite="suites/test_rdma.py", needs_machine=False)

MEASUREMENTS = (RDMA_DEVICES, IB_WRITE_BW_RESULT)
