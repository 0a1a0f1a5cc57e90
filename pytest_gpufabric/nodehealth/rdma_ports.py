"""The passive tier's RDMA ports: each port the profile promises (``rdma.devices``) up (ACTIVE, LinkUp), at its
rate, link layer and MTU, judged by the acceptance's own check (checks/rdma.py check_rdma_port) on the ports the
fabric's sysfs reader found (fabric/rdma.py: live, /sys/class/infiniband; replayed, the bundle's copy or its
ibv_devinfo, whose state fills one whose sysfs file is absent; text sysfs recorded that does not parse is never
replaced). A port down or slower drains (reseat: a cable, transceiver or switch port); a port whose state or physical
state neither could read is unknown (rerun); what else the record cannot tell (a RoCE port's line rate without its
netdev) is a note; a replayed record of no RDMA port at all is unknown (the promise cannot be shown: rerun)."""

from __future__ import annotations

from ..checks.rdma import check_rdma_port, find_port
from ..checks.result import FAILED, PASSED
from ..remedy_classes import RERUN, RESEAT
from .finding import DRAIN, UNKNOWN, Finding
from .record import NodeHealthRecord


def rdma_findings(node: NodeHealthRecord, profile) -> tuple[list[Finding], list[str]]:
    promises = profile.rdma_devices
    if not promises:
        return [], []
    if node.rdma is None:
        names = ", ".join(p["name"] for p in promises)
        return [Finding("ib-port", UNKNOWN, "RDMA ports not recorded", None, None, RERUN,
                        {"source": node.source, "promised": names},
                        f"{node.source} records no RDMA port (no sysfs copy or ibv_devinfo in the bundle), and the "
                        f"profile promises {names}: their state cannot be told; record the bundle again with "
                        "gpufabric snapshot, or run the check on the host")], []
    findings, notes = [], []
    for promise in promises:
        result = check_rdma_port(promise, node.rdma, node.rdma_source or node.source)
        if result.verdict == FAILED:
            subject = f"{promise['name']} port {promise.get('port', 1)}"
            first = (result.details or [result.message.split(': ', 1)[-1].split('. ')[0]])[0]
            findings.append(Finding("ib-port", DRAIN, f"{subject} {first}", None, None, RESEAT,
                                    {"promise": dict(promise), "found": result.found, "source": node.rdma_source},
                                    result.message))
            continue
        unread = _state_unread(node, promise)
        if unread is not None:
            findings.append(unread)
        elif result.verdict != PASSED:
            notes.append(f"RDMA port {result.message}")
    return findings, notes


def _state_unread(node: NodeHealthRecord, promise: dict) -> Finding | None:
    """Could not tell: the promised port's state or physical state read neither from sysfs nor from ibv_devinfo
    (whether the port is up is what the check is there to show); None when both were read."""
    _, port = find_port(node.rdma, promise["name"], promise.get("port", 1))
    if port is None:
        return None
    missing = [name for name, value in (("state", port.state), ("phys_state", port.phys_state)) if value is None]
    if not missing:
        return None
    subject = f"{promise['name']} port {port.port}"
    source = node.rdma_source or node.source
    unparsed = [name for name in missing if name in port.raw]
    absent = [name for name in missing if name not in port.raw]
    reasons = [f"sysfs ports/{port.port}/{name} reads {port.raw[name]!r}, not a state (ibv_devinfo's is not taken "
               "in place of what sysfs recorded)" for name in unparsed]
    if absent:
        files = " and ".join(f"ports/{port.port}/{name}" for name in absent)
        reasons.append(f"neither sysfs ({files} missing or unreadable) nor a recorded ibv_devinfo -v gives it (one "
                       "state, its name and code agreeing)")
    return Finding("ib-port", UNKNOWN, f"{subject} {' and '.join(missing)} not readable", None, None, RERUN,
                   {"promise": dict(promise), "missing": missing, "source": source,
                    "sysfs_text": {name: port.raw[name] for name in unparsed}},
                   f"{source}: {subject}'s {' and '.join(missing)} not read: {'; '.join(reasons)}, so whether the "
                   "port is up cannot be told; rerun the check, or record the bundle again with gpufabric snapshot")
