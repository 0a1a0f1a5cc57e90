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
