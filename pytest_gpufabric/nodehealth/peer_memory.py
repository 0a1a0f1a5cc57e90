"""The passive tier's peer-memory module: where the profile promises RDMA devices (``rdma.devices``, as
rdma_ports.py reads them), GPUDirect RDMA needs nvidia_peermem (or MLNX_OFED's older nv_peer_mem) loaded; without it
NCCL stages every transfer through host memory. Read and judged as the acceptance's peer-memory check reads them
(fabric/platform.py's module list and the files NCCL tests; fabric/platform_state.py's peer_memory_loaded): the
record carries its answer (command.py: live below the sysfs root, replayed from the bundle's platform record).

Not loaded drains (software or configuration: modprobe nvidia_peermem); what could not be read is unknown, never
healthy, and so is a replayed bundle that recorded no platform facts (the promise cannot be shown: rerun).
"""

from __future__ import annotations

from ..remedy_classes import RERUN, SOFTWARE
from .finding import DRAIN, UNKNOWN, Finding
from .record import NodeHealthRecord

CHECK = "peer-memory"


def peer_memory_findings(node: NodeHealthRecord, profile) -> tuple[list[Finding], list[str]]:
    promises = profile.rdma_devices
    if not promises:
        return [], []
    devices = ", ".join(p["name"] for p in promises)
    if node.peer_memory is None:
        return [Finding(CHECK, UNKNOWN, "peer-memory module not recorded", None, None, RERUN,
                        {"source": node.source, "rdma_devices": devices},
                        f"{node.source} records no module list (no platform.json, platform/ copy or lsmod.txt), and "
                        f"the profile promises RDMA devices ({devices}): whether nvidia_peermem is loaded cannot be "
                        "told; record the bundle again with gpufabric snapshot, or run the check on the host")], []
    loaded, evidence = node.peer_memory
    facts = {"evidence": evidence, "source": node.peer_memory_source, "rdma_devices": devices}
    if loaded is None:
        why = evidence or f"{node.peer_memory_source}: neither /proc/modules nor /sys/module could be read"
        return [Finding(CHECK, UNKNOWN, "peer-memory module not readable", None, None, SOFTWARE, facts,
                        f"whether nvidia_peermem is loaded cannot be told ({why}): run the check on the host, with "
                        "/proc and /sys")], []
    if loaded:
        return [], []
    return [Finding(CHECK, DRAIN, "GPUDirect RDMA module nvidia_peermem not loaded", None, None, SOFTWARE, facts,
                    f"{evidence}: the profile promises RDMA devices ({devices}), and without nvidia_peermem (or "
                    "nv_peer_mem) NCCL stages every GPU transfer through host memory ('GPU Direct RDMA Disabled'): "
                    "modprobe nvidia_peermem (and list it in /etc/modules-load.d/ so it loads at boot)")], []
