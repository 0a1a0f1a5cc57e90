"""`gpufabric profile init`: a profile that the machine it was written from passes.

Only what the evidence records becomes a promise; the comment block says where each number came from.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from ..fabric.model import Fabric
from ..units import GIB, is_na


def _known(value: object) -> bool:
    return value is not None and not is_na(value)


def _common(values: list) -> object | None:
    """The one value every GPU shares, else None (a mixed machine gets no promise for it)."""
    known = [v for v in values if _known(v)]
    return known[0] if known and len(known) == len(values) and len(set(known)) == 1 else None


def _floor(values: list) -> object | None:
    known = [v for v in values if _known(v)]
    return min(known) if known and len(known) == len(values) else None


def build_profile_document(fabric: Fabric, name: str) -> dict:
    gpus = fabric.gpus
    doc: dict = {"name": name}
    model = _common([g.name for g in gpus])
    doc["description"] = f"{len(gpus)}x {model or 'GPU'} (written by gpufabric profile init)"
    gpu_section: dict = {"count": len(gpus)}
    if model:
        gpu_section["model"] = model
    memory = _floor([g.memory_bytes for g in gpus])
    if memory:
        # whole GiB below what NVML reports: 143771 MiB -> 140 GiB
        gpu_section["memory"] = f"{math.floor(memory / GIB)} GiB"
    pcie = {k: v for k, v in (("gen", _floor([g.pcie_gen_max for g in gpus])),
                              ("width", _floor([g.pcie_width_max for g in gpus]))) if v}
    if pcie:
        gpu_section["pcie"] = pcie
    ecc = _common([g.ecc_mode for g in gpus])
    if ecc in ("Enabled", "Disabled"):
        gpu_section["ecc"] = ecc == "Enabled"
    doc["gpus"] = gpu_section

    topology: dict = {}
    if fabric.matrix:
        topology["matrix"] = fabric.matrix
    for key in ("cpu_affinity", "numa_affinity"):
        values = {gpu: v for gpu, v in getattr(fabric, key).items() if gpu.startswith("GPU") and v and v != "N/A"}
        if values:
            topology[key] = values
    nics = {n.label: n.device for n in fabric.nics if n.label.startswith("NIC") and n.device}
    if nics:
        topology["nics"] = nics
    if topology:
        doc["topology"] = topology

    counts = [fabric.nvlink_count(g) for g in gpus]
    links_per_gpu = _common(counts) if all(c is not None for c in counts) else None
    if links_per_gpu is not None or counts == [0] * len(gpus):
        nvlink: dict = {"links_per_gpu": links_per_gpu or 0}
        active = [lk for g in gpus for lk in (g.active_nvlinks() or [])]
        if active:
            nvlink["all_active"] = all(lk.active is True for g in gpus for lk in (g.nvlinks or []))
            speeds = [lk.speed_gbps for lk in active if isinstance(lk.speed_gbps, float)]
            if speeds and len(speeds) == len(active):
                nvlink["min_speed"] = f"{math.floor(min(speeds) * 10) / 10} GB/s"
            remotes = {lk.remote_type for lk in active}
            if remotes <= {"SWITCH", "GPU"} and len(remotes) == 1:
                nvlink["switch"] = remotes == {"SWITCH"}
        doc["nvlink"] = nvlink
    return doc


def _yaml_value(value: object) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip()


def profile_yaml_from_fabric(fabric: Fabric, name: str) -> str:
    """The profile as YAML, matrix rows one per line as `nvidia-smi topo -m` lays them out."""
    import yaml

    doc = build_profile_document(fabric, name)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = [
        f"# {name}: written by `gpufabric profile init` on {stamp} from {fabric.source}",
        f"# (driver {fabric.driver_version or 'not recorded'}, CUDA {fabric.cuda_driver_version or 'not recorded'}).",
        "# Only what that machine recorded is promised; edit the description and the numbers to what was sold.",
    ]
    topology = doc.pop("topology", None)
    nvlink = doc.pop("nvlink", None)
    body = yaml.safe_dump(doc, sort_keys=False, width=1000)
    if topology:
        body += "topology:\n"
        for key, value in topology.items():
            if key == "matrix":
                body += "  matrix:\n" + "".join(f"    {row}: {_yaml_value(cells)}\n" for row, cells in value.items())
            else:
                body += f"  {key}: {_yaml_value(value)}\n"
    if nvlink:
        body += yaml.safe_dump({"nvlink": nvlink}, sort_keys=False, width=1000)
    return "\n".join(header) + "\n" + body
