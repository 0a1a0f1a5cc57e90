"""The passive tier's RDMA ports: each port the profile promises (``rdma.devices``) up (ACTIVE, LinkUp), at its
rate, link layer and MTU, judged by the acceptance's own check (checks/rdma.py check_rdma_port) on the ports the
fabric's sysfs reader found (fabric/rdma.py: live, /sys/class/infiniband; replayed, the bundle's copy or its
ibv_devinfo). A port down or slower drains (reseat: a cable, transceiver or switch port); what the record cannot
tell (a RoCE port's MTU without its netdev) is a note; a replayed record of no RDMA port at all is unknown (the
promise cannot be shown: rerun)."""

from __future__ import annotations

from ..checks.rdma import check_rdma_port
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
        elif result.verdict != PASSED:
            notes.append(f"RDMA port {result.message}")
    return findings, notes
