"""`gpufabric profile init`: a profile that the machine it was written from passes.

Only what the evidence records becomes a promise; the comment block says where each number came from.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

from ..errors import GpuFabricError
from ..fabric.bundle import bundle_directory
from ..fabric.model import Fabric
from ..fabric.platform import collect_platform, load_platform
from ..fabric.platform_state import acs_state, hugepage_size_text, iommu_modes, peer_memory_loaded
from ..formats.clean import yaml_comment
from ..reference import find_reference
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


def _memory_as_sold(model: object, memory: int) -> str:
    """What the model is sold as ("80 GB": the reference catalogue, 1e9 bytes each) when the board has it; else
    the whole GiB below what NVML reports (143771 MiB -> 140 GiB)."""
    reference = find_reference(str(model)) if model else None
    if reference is not None and reference.memory_gb_sold and reference.memory_gb_sold * 10**9 <= memory:
        return f"{reference.memory_gb_sold:g} GB"
    return f"{math.floor(memory / GIB)} GiB"


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
        gpu_section["memory"] = _memory_as_sold(model, memory)
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
    section, _ = platform_section(fabric)
    if section:
        doc["platform"] = section
    return doc


def _platform_of(fabric: Fabric):
    """The platform settings of the machine or bundle the fabric came from (None: nothing recorded)."""
    try:
        if fabric.source == "nvml":
            return collect_platform(fabric)
        if fabric.source.startswith("bundle "):
            return load_platform(bundle_directory(fabric.source[len("bundle "):]), fabric)
    except GpuFabricError:
        return None
    return None


def platform_section(fabric: Fabric, platform=None) -> tuple[dict, list[str]]:
    """The ``platform:`` promises this machine keeps (only what it recorded and passes), and one note per setting
    that could not be read (the profile's comment block lists them)."""
    platform = platform if platform is not None else _platform_of(fabric)
    section: dict = {}
    notes: list[str] = []
    if fabric.driver_version and not is_na(fabric.driver_version):
        section["driver"] = {"min": str(fabric.driver_version)}
    vbios = _common([g.vbios_version for g in fabric.gpus])
    if vbios:
        section["vbios"] = {"exact": str(vbios)}
    if platform is None:
        return section, notes
    if platform.endpoints:
        bad, unreadable, judged = acs_state(platform)
        if judged and not bad and not unreadable:
            section["acs"] = "disabled"
        elif unreadable:
            notes.append(f"acs: not readable here: {unreadable[0]}")
    modes = {mode for mode, _ in iommu_modes(platform).values()}
    if modes <= {"passthrough", "off"} and modes:
        section["iommu"] = "passthrough"
    elif modes == {"translated"}:
        section["iommu"] = "translated"
    loaded, why = peer_memory_loaded(platform)
    if loaded:
        section["peer_memory"] = True
    elif loaded is None and why:
        notes.append(f"peer_memory: {why}")
    persistence = [platform.persistence_mode.get(g.label) for g in fabric.gpus]
    if persistence and all(r is not None and r.known for r in persistence) and len({r.value for r in persistence}) == 1:
        section["persistence_mode"] = persistence[0].value
    firmware = {r.value for r in platform.nic_firmware.values() if r.known}
    if len(firmware) == 1 and all(r.known for r in platform.nic_firmware.values()):
        section["nic_firmware"] = {"min": firmware.pop()}
    for key, reading in (("cpu_governor", platform.cpu_governors), ("numa_balancing", platform.numa_balancing)):
        if reading.known and key == "cpu_governor" and len(reading.value) == 1:
            section[key] = next(iter(reading.value))
        elif reading.known and key == "numa_balancing":
            section[key] = bool(reading.value)
        elif reading.unreadable:
            notes.append(f"{key}: {reading.unreadable}")
    pools = {int(kb): v["total"] for kb, v in (platform.hugepages.value or {}).items() if v["total"]}
    if pools:
        kb = max(pools, key=lambda k: k * pools[k])
        section["hugepages"] = {"page_size": hugepage_size_text(kb), "min_pages": pools[kb]}
    sizes = [platform.devices[e.bdf].facts for e in platform.endpoints
             if e.kind == "gpu" and e.bdf in platform.devices and platform.devices[e.bdf].facts]
    if sizes and all(f.max_payload for f in sizes) and len(sizes) == len(fabric.gpus):
        section["pcie"] = {"min_max_payload": min(f.max_payload for f in sizes),
                           "min_max_read_request": min(f.max_read_request for f in sizes)}
    elif sizes and sizes[0].capabilities_unreadable:
        notes.append(f"pcie: {sizes[0].capabilities_unreadable}")
    return section, notes


def reference_lines(fabric: Fabric) -> list[str]:
    """The comment lines (their text, without "#") naming the published reference of the machine's GPU model
    (gpufabric reference MODEL), so that whoever edits the profile sees what was sold next to what was measured."""
    model = _common([g.name for g in fabric.gpus])
    reference = find_reference(str(model)) if model else None
    if reference is None:
        return [f"No published reference for {model or 'these GPUs'} in the catalogue (`gpufabric reference` "
                "lists it)."]
    figures = [f"{reference.memory_gb_sold:g} GB sold" if reference.memory_gb_sold else None,
               f"NVML reports {reference.memory_bytes_nvml / 2**20:.0f} MiB" if reference.memory_bytes_nvml else None,
               f"{reference.memory_type or 'memory'} {reference.memory_bandwidth_gbps:g} GB/s"
               if reference.memory_bandwidth_gbps else None,
               f"PCIe gen {reference.pcie_generation} x{reference.pcie_width}" if reference.pcie_generation else None,
               f"NVLink {reference.nvlink_gbps_per_direction:g} GB/s per direction"
               if reference.nvlink_gbps_per_direction else None,
               f"{reference.power_limit_w:g} W" if reference.power_limit_w else None]
    urls = sorted({source["url"] for source in reference.sources if str(source["url"]).startswith("http")})
    return [f"Published reference {reference.model} ({reference.name}): "
            f"{', '.join(f for f in figures if f)}",
            f"  (`gpufabric reference {reference.model}`; sources: {', '.join(urls) or 'this repository'})."]


def profile_yaml_from_fabric(fabric: Fabric, name: str, measured=None) -> str:
    """The profile as YAML, matrix rows one per line as `nvidia-smi topo -m` lays them out; with ``measured``
    (profile/measure.py) the measured sections follow, each under the comment lines saying where it came from.
    Every value is written by yaml.safe_dump, every comment by yaml_comment (cleaned, one "#" line per line): a
    bundle's path or a GPU's name cannot add a key."""
    import yaml

    doc = build_profile_document(fabric, name)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = [
        f"{name}: written by `gpufabric profile init{' --measure' if measured else ''}` on {stamp} from "
        f"{fabric.source}",
        f"(driver {fabric.driver_version or 'not recorded'}, CUDA {fabric.cuda_driver_version or 'not recorded'}).",
        "Only what that machine recorded is promised; edit the description and the numbers to what was sold.",
        *reference_lines(fabric),
    ]
    topology = doc.pop("topology", None)
    nvlink = doc.pop("nvlink", None)
    platform = doc.pop("platform", None)
    body = yaml.safe_dump(doc, sort_keys=False, width=1000)
    if topology:  # flow style for lists of scalars: one matrix row per line
        body += yaml.safe_dump({"topology": topology}, sort_keys=False, width=1000, default_flow_style=None)
    if nvlink:
        body += yaml.safe_dump({"nvlink": nvlink}, sort_keys=False, width=1000)
    _, notes = platform_section(fabric) if platform else ({}, [])
    if platform:
        body += yaml_comment("platform: the host settings as recorded (driver and NIC firmware as floors, the VBIOS "
                             "exactly)") + "".join(yaml_comment(f"  not promised, {note}") for note in notes)
        body += yaml.safe_dump({"platform": platform}, sort_keys=False, width=1000)
    if measured is not None:
        body += _measured_yaml(measured)
    return "".join(yaml_comment(line) for line in header) + body


def _measured_yaml(measured) -> str:
    """Each measured section under its notes (as comments), then what was not measured and why."""
    import yaml

    text = ""
    for key, section in measured.sections.items():
        text += "".join(yaml_comment(line) for line in measured.notes.get(key, []))
        text += yaml.safe_dump({key: section}, sort_keys=False, width=1000, default_flow_style=None)
    if measured.not_measured:
        text += yaml_comment("Not measured, so not promised:") + "".join(yaml_comment(f"  {line}")
                                                                          for line in measured.not_measured)
    return text
