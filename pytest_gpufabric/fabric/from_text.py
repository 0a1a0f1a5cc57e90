"""One Fabric from whatever nvidia-smi text a bundle or a ticket holds (topo -m, nvlink -s, -q -x)."""

from __future__ import annotations

from itertools import pairwise

from ..formats.coverage import undescribed_members
from ..formats.gpu import Gpu
from ..formats.nvidia_smi_q import parse_nvidia_smi_q_xml
from ..formats.nvlink import parse_nvlink_status
from ..formats.topo import GPU_LABEL, NIC_LABEL, parse_topo_m
from ..units import NA
from .model import GPU_LIST, MATRIX_CUT, Fabric, Nic

__all__ = ["fabric_from_text"]


def fabric_from_text(
    topo: str | None,
    nvlink_status: str | None = None,
    q_xml: str | None = None,
    *,
    source: str = "text",
) -> Fabric:
    """Combine the outputs of topo -m, nvlink -s and -q -x into one model.Fabric.

    GPUs come from -q -x when given (it knows serials and bus ids), else from the topo rows, else from the
    nvlink -s headers. Sources that disagree on how many GPUs there are, or on a GPU's UUID, raise ValueError:
    they were recorded on different machines, and a merged model would be a machine that does not exist.
    """
    if topo is None and nvlink_status is None and q_xml is None:
        raise ValueError("fabric_from_text: no text given (need topo -m, nvlink -s or -q -x output)")
    fabric = Fabric(source=source)
    matrix = parse_topo_m(topo) if topo is not None else None
    status = parse_nvlink_status(nvlink_status) if nvlink_status is not None else None
    inventory = parse_nvidia_smi_q_xml(q_xml) if q_xml is not None else None

    counted: list[tuple[str, int]] = []
    if inventory is not None:
        fabric.gpus = inventory.gpus
        fabric.driver_version = inventory.driver_version
        fabric.cuda_driver_version = inventory.cuda_version
        fabric.damaged.update(inventory.damaged)
        fabric.provenance["inventory"] = "nvidia-smi -q -x"
        attached = inventory.attached_gpus
        if attached is not None and attached != len(inventory.gpus):
            fabric.damaged[GPU_LIST] = (f"nvidia-smi -q -x of {source} says {attached} GPU(s) attached "
                                        f"(attached_gpus) and lists {len(inventory.gpus)} (gpu): it is not whole")
            fabric.undescribed = undescribed_members(
                "nvidia-smi-q.xml", attached, [g.index for g in inventory.gpus], name=lambda index: f"GPU{index}",
                announcement=f"{attached} GPU(s) (attached_gpus)", description=f"{len(inventory.gpus)} (gpu)")
        # a GPU announced there and not described is still one of the machine's: another text may show it
        counted.append(("nvidia-smi -q -x", len(inventory.gpus) + len(fabric.undescribed)))
    if matrix is not None:
        topo_gpus = [int(GPU_LABEL.match(label).group(1)) for label in matrix.gpus]
        counted.append(("nvidia-smi topo -m", len(topo_gpus)))
        if not fabric.gpus:
            fabric.gpus = [Gpu(index=i) for i in topo_gpus]
            if MATRIX_CUT in matrix.damaged:  # the GPU list is the cut matrix's header: not a count to judge
                fabric.damaged[GPU_LIST] = (f"the GPUs cannot be counted from the nvidia-smi topo -m of {source}, "
                                            f"which is not whole: {matrix.damaged[MATRIX_CUT]}")
        fabric.matrix = {row: dict(cols) for row, cols in matrix.matrix.items()}
        fabric.cpu_affinity = dict(matrix.cpu_affinity)
        fabric.numa_affinity = dict(matrix.numa_affinity)
        fabric.provenance["matrix"] = "nvidia-smi topo -m"
        fabric.damaged.update(matrix.damaged)
        for label in matrix.nics:
            device = matrix.nic_names.get(label, None if NIC_LABEL.match(label) else label)
            fabric.nics.append(Nic(label=label, device=device))
    if status is not None:
        # not counted against the other sources: GPUs without NVLink print nothing in nvlink -s
        if not fabric.gpus:
            fabric.gpus = [Gpu(index=i) for i in sorted(status)]
    for (name_a, count_a), (name_b, count_b) in pairwise(counted):
        if count_a != count_b:
            raise ValueError(
                f"GPU count disagrees: {name_a} has {count_a} GPU(s), {name_b} has {count_b}; "
                "were they recorded on the same machine?"
            )

    known = {gpu.index for gpu in fabric.gpus} | {int(label.removeprefix("GPU")) for label in fabric.undescribed}
    for name, indices in (
        ("nvidia-smi topo -m", [int(GPU_LABEL.match(g).group(1)) for g in matrix.gpus] if matrix else []),
        ("nvidia-smi nvlink -s", list(status or {})),
    ):
        unknown = sorted(set(indices) - known)
        if unknown:
            raise ValueError(f"{name} names GPU index(es) {unknown}, other sources have {sorted(known)}")

    for gpu in fabric.gpus:
        if matrix is not None and gpu.cpu_affinity is None and gpu.label in matrix.cpu_affinity:
            gpu.cpu_affinity = matrix.cpu_affinity[gpu.label]
        if status is not None and gpu.index in status:
            entry = status[gpu.index]
            if entry["uuid"] and gpu.uuid and gpu.uuid is not NA and gpu.uuid != entry["uuid"]:
                raise ValueError(
                    f"GPU {gpu.index}: nvidia-smi nvlink -s says UUID {entry['uuid']}, "
                    f"another source says {gpu.uuid}; were they recorded on the same machine?"
                )
            if gpu.uuid is None:
                gpu.uuid = entry["uuid"]
            if gpu.name is None:
                gpu.name = entry["name"]
            gpu.nvlinks = list(entry["links"])
        elif status is not None:
            gpu.nvlinks = []  # absent from nvlink -s: the GPU has no NVLink
        if status is not None:
            fabric.provenance["nvlinks"] = "nvidia-smi nvlink -s"
    return fabric
