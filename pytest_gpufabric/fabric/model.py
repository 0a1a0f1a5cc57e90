"""The typed model of a machine: what is there, whichever source (live NVML, tool text, a bundle) said so.

Two kinds of absence, kept apart on purpose:
- ``None``: the source did not record this fact (a bundle holding only ``nvidia-smi topo -m`` knows no serials);
- ``NA``: the machine was asked and answered "not supported" (NVML_ERROR_NOT_SUPPORTED, nvidia-smi's N/A).
A check treats ``None`` as "cannot be judged from this evidence" and ``NA`` as the machine's own answer.

A value the evidence holds but that cannot be used (``memory_total_bytes: 1e400``, ``driver_version: "Unknown
Error"``, a paste cut short) is ``None`` too, and the sentence saying so, naming file, key and value, is kept
beside it: ``Gpu.unreadable[field]`` for a GPU's fact, ``Fabric.damaged[key]`` for the machine's (keys below). A
check says that sentence instead of "not recorded".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..formats.gpu import Gpu, Int, Str

#: Fabric.damaged keys of the whole matrix (its rows stop short of its header) and of the GPU list read from it
MATRIX_CUT = "matrix"
GPU_LIST = "GPU list"

_NV_LABEL = re.compile(r"^NV(\d+)$")


def nvlink_count_of_label(label: str) -> int:
    """'NV18' -> 18; any other label -> 0."""
    m = _NV_LABEL.match(label or "")
    return int(m.group(1)) if m else 0


@dataclass
class Nic:
    """An RDMA/network device in the topology, as `nvidia-smi topo -m` names it (column NIC0 -> mlx5_0)."""

    label: str  # the matrix column: "NIC0", or the device name where the output uses names as columns
    device: str | None = None  # "mlx5_0"
    pci_bus_id: Str = None
    numa_node: Int = None


@dataclass
class Fabric:
    """A machine: GPUs, NICs and the pairwise path labels between every two of them.

    ``matrix[row][col]`` is the label exactly as `nvidia-smi topo -m` prints it ("X", "NV2", "PHB", ...);
    rows and columns are GPU labels ("GPU0") and NIC labels ("NIC0").
    """

    gpus: list[Gpu] = field(default_factory=list)
    nics: list[Nic] = field(default_factory=list)
    matrix: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)  # "GPU0" -> "0-17,36-53", as topo -m prints
    numa_affinity: dict[str, str] = field(default_factory=dict)  # "GPU0" -> "0"
    driver_version: Str = None
    cuda_driver_version: Str = None  # "13.0"
    hostname: str | None = None
    source: str = ""  # "nvml", "bundle <path>", "text <path>"
    gpus_recorded: bool = True  # False: the evidence holds no GPU list at all (an RDMA-only bundle)
    #: which recorded file or facility each part came from, e.g. {"matrix": "nvidia-smi-topo-m.txt"}
    provenance: dict[str, str] = field(default_factory=dict)
    #: what the evidence holds but could not be read, and why ("GPU0-NIC7": a cell run into the next one in the
    #: topo -m text, "GPU0 CPU Affinity": a value cut in the paste, MATRIX_CUT: the matrix's rows stop short of
    #: its header, GPU_LIST: the GPU list came from such a matrix, "driver_version"); checks say so instead of
    #: judging it
    damaged: dict[str, str] = field(default_factory=dict)
    #: the GPUs the evidence announces but does not describe ("GPU1": nvml.json's gpu_count is 2, its gpus list
    #: one), with why: each is unknown, its promises not checked (formats/coverage.py), never failed as missing
    undescribed: dict[str, str] = field(default_factory=dict)

    def gpu(self, index: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None

    def label(self, a: str, b: str) -> str | None:
        return self.matrix.get(a, {}).get(b)

    def nvlink_count(self, gpu: Gpu) -> int | None:
        """Active NVLinks of a GPU: from per-link records, else summed from the NV# labels of its matrix row.

        The fallback is exact only where one peer holds all of a GPU's links (a bridged or NVSwitch pair:
        NV2 = two bonded links). With several NVLink peers the row cannot tell a direct mesh (sum the
        labels) from an NVSwitch system (every pair shows the GPU's whole count), so it answers None.
        """
        active = gpu.active_nvlinks()
        if active is not None:
            return len(active)
        row = self.matrix.get(gpu.label)
        if not row:
            return None
        counts = [nvlink_count_of_label(label) for col, label in row.items() if col.startswith("GPU")]
        peers = [count for count in counts if count]
        if len(peers) > 1:
            return None
        return sum(peers)

    def to_dict(self) -> dict:
        return asdict(self)
