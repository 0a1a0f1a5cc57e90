"""Topology checks: the machine's GPUs, their PCIe links, the `nvidia-smi topo -m` matrix, NVLinks, affinity.

Each function compares one promise of the profile with the Fabric and returns a CheckResult. ``None`` in the
Fabric means the evidence did not record the fact (not checked), never that the machine lacks it.
"""

from __future__ import annotations

from ..fabric.model import GPU_LIST, MATRIX_CUT, Fabric, nvlink_count_of_label
from ..formats.gpu import Gpu
from ..formats.topo import normalize_label
from ..profile.model import Profile
from ..units import format_bytes, is_na, is_number, memory_as_sold, parse_cpu_list
from .limits import HIGHER, Limit
from .result import CheckResult, failed, passed, unknown

_NOT_RECORDED = "not recorded by {source}: a bundle needs {files} for this check"
_INVENTORY_FILES = "nvml.json (gpufabric snapshot) or nvidia-smi-q.xml"
_LINK_FILES = "nvml.json (gpufabric snapshot) or nvidia-smi-nvlink-s.txt"


def _missing(name: str, gpu: Gpu, expected, source: str, files: str, *fields: str) -> CheckResult:
    """Not checked, for a GPU fact the check needs and does not have: the evidence holds it unreadable (its sentence
    names file, key and value), or did not record it."""
    why = next((gpu.unreadable[f] for f in fields if f in gpu.unreadable), None)
    if why:
        return unknown(name, gpu.label, expected, f"{why} [{source}]")
    return unknown(name, gpu.label, expected, _NOT_RECORDED.format(source=source, files=files))


def check_gpu_count(profile: Profile, fabric: Fabric) -> CheckResult:
    expected, found = profile.gpu_count, len(fabric.gpus)
    if GPU_LIST in fabric.damaged:
        return unknown("gpu-count", "machine", expected, fabric.damaged[GPU_LIST])
    if not fabric.gpus_recorded:
        return unknown("gpu-count", "machine", expected, _NOT_RECORDED.format(
            source=fabric.source, files="nvidia-smi-topo-m.txt, nvidia-smi-q.xml or nvml.json"))
    if found == expected:
        return passed("gpu-count", "machine", expected, found, f"{found} GPUs, as the profile promises")
    found_names = ", ".join(f"{g.label} {g.name or ''}".strip() for g in fabric.gpus) or "none"
    return failed(
        "gpu-count", "machine", expected, found,
        f"expected {expected} GPUs, found {found} ({found_names}). Usual causes: a GPU fell off the bus "
        "(dmesg: Xid 79), is not seated or powered, is hidden by CUDA_VISIBLE_DEVICES, or this is not the "
        f"machine profile {profile.name} describes.",
    )


def check_gpu_model(profile: Profile, gpu: Gpu, source: str) -> CheckResult:
    expected = profile.gpu_model
    if gpu.name is None:
        return _missing("gpu-model", gpu, expected, source, _INVENTORY_FILES, "name")
    if expected.lower() in str(gpu.name).lower():
        return passed("gpu-model", gpu.label, expected, gpu.name, f"{gpu.label} is a {gpu.name}")
    return failed(
        "gpu-model", gpu.label, expected, gpu.name,
        f"{gpu.label}: expected a {expected}, found {gpu.name} (serial {gpu.serial or 'unknown'})",
    )


def gpu_memory_limits(record: dict) -> list[Limit]:
    """The board's memory against the size the profile promises, in bytes (kinds/topology.py binds it to the
    gpu-memory records)."""
    expected, found = record.get("expected"), record.get("found")
    if not (is_number(expected) and is_number(found) and record.get("unit") == "bytes"):
        return []
    return [Limit("memory_bytes", found, expected, "bytes", HIGHER, stated=f"min {format_bytes(expected)}")]


def check_gpu_memory(profile: Profile, gpu: Gpu, source: str) -> CheckResult:
    expected = profile.gpu_memory_bytes
    if gpu.memory_bytes is None:
        return _missing("gpu-memory", gpu, expected, source, _INVENTORY_FILES, "memory_bytes")
    if not is_na(gpu.memory_bytes) and gpu.memory_bytes >= expected:
        return passed(
            "gpu-memory", gpu.label, expected, gpu.memory_bytes,
            f"{gpu.label}: {format_bytes(gpu.memory_bytes)} >= {format_bytes(expected)}", unit="bytes",
        )
    return failed(
        "gpu-memory", gpu.label, expected, gpu.memory_bytes,
        f"{gpu.label}: expected at least {format_bytes(expected)} of memory, found "
        f"{format_bytes(gpu.memory_bytes)}. " + _memory_hint(expected, gpu.memory_bytes),
        unit="bytes",
    )


def _memory_hint(expected: int, found: object) -> str:
    """Say how to write the promise as sold when the unit is the difference."""
    as_sold = memory_as_sold(expected, found)
    if as_sold is not None:
        return (f"The board is sold as {expected >> 30} GB (1e9 bytes each: {format_bytes(as_sold)}), which it has: "
                f"promise memory as sold, `memory: {expected >> 30} GB`, not GiB.")
    return "Usual causes: a different SKU than sold, or MIG/vGPU slicing."


def check_pcie(profile: Profile, gpu: Gpu, source: str) -> CheckResult:
    """Max gen and width must reach the promise, and so must the current width.

    The current *generation* is reported but not judged: idle GPUs lower their link speed to save power
    and raise it under load, so an idle gen 1 reading is normal. A narrower current width is not.
    """
    promise = profile.pcie
    expected = {k: promise[k] for k in ("gen", "width") if k in promise}
    judged = ([gpu.pcie_gen_max] if "gen" in expected else []) + (
        [gpu.pcie_width_max, gpu.pcie_width_current] if "width" in expected else [])
    if any(value is None for value in judged):
        return _missing("pcie-link", gpu, expected, source, _INVENTORY_FILES, "pcie_gen_max", "pcie_width_max",
                        "pcie_width_current")
    found = {
        "gen_max": gpu.pcie_gen_max, "gen_current": gpu.pcie_gen_current,
        "width_max": gpu.pcie_width_max, "width_current": gpu.pcie_width_current,
    }
    problems = []
    if "gen" in expected and not _at_least(gpu.pcie_gen_max, expected["gen"]):
        problems.append(f"max link gen {gpu.pcie_gen_max}, expected >= {expected['gen']}")
    if "width" in expected:
        for what, value in (("max", gpu.pcie_width_max), ("current", gpu.pcie_width_current)):
            if not _at_least(value, expected["width"]):
                problems.append(f"{what} link width x{value}, expected >= x{expected['width']}")
    summary = (
        f"gen {gpu.pcie_gen_max} x{gpu.pcie_width_max} (now gen {gpu.pcie_gen_current} x{gpu.pcie_width_current})"
    )
    if not problems:
        return passed("pcie-link", gpu.label, expected, found, f"{gpu.label}: PCIe {summary}")
    return failed(
        "pcie-link", gpu.label, expected, found,
        f"{gpu.label} (bus {gpu.pci_bus_id}): " + "; ".join(problems) + ". Usual causes: the card sits in a "
        "narrower or older slot, a riser or retimer limits the link, or the BIOS forces a lower generation.",
    )


def _at_least(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not is_na(value) and value >= minimum


def check_ecc(profile: Profile, gpu: Gpu, source: str) -> CheckResult:
    expected = "Enabled" if profile.ecc else "Disabled"
    if gpu.ecc_mode is None:
        return _missing("ecc-mode", gpu, expected, source, _INVENTORY_FILES, "ecc_mode")
    found = "Disabled" if is_na(gpu.ecc_mode) else gpu.ecc_mode  # N/A: a GPU without ECC (GeForce, TITAN)
    if found == expected:
        return passed("ecc-mode", gpu.label, expected, gpu.ecc_mode, f"{gpu.label}: ECC {gpu.ecc_mode}")
    return failed(
        "ecc-mode", gpu.label, expected, gpu.ecc_mode,
        f"{gpu.label}: expected ECC {expected}, found {gpu.ecc_mode} (nvidia-smi -e sets it; takes a reboot)",
    )


def matrix_differences(
    expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]
) -> list[tuple[str, str, str, str | None]]:
    """(row, col, expected label, found label or None) per differing pair; each unordered pair once."""
    differences: list[tuple[str, str, str, str | None]] = []
    reported: set[tuple[str, str, str | None, str | None]] = set()
    for row, cells in expected.items():
        for col, label in cells.items():
            if row == col:
                continue
            seen = found.get(row, {}).get(col)
            if normalize_label(seen) == normalize_label(label):
                continue
            key = (min(row, col), max(row, col), label, seen)
            if key in reported:
                continue
            reported.add(key)
            differences.append((row, col, label, seen))
    return differences


_MATRIX_CAUSES = {
    "MISSING": "a device the profile names is not on the machine (see the GPU count check).",
    "NV_COUNT": "another number of NVLinks than sold: links down or trained out (nvidia-smi nvlink -s, -e), "
    "or another bridge or NVSwitch configuration.",
    "NV_TO_PCIE": "NVLinks expected but the pair talks over PCIe: a missing or badly seated NVLink bridge, "
    "links down (nvidia-smi nvlink -s), or a fabric manager not running on NVSwitch systems.",
    "PCIE": "a different path than sold: cards in other slots, another riser/switch layout, or a BIOS "
    "setting (ACS, NUMA per socket) that changes the path.",
}


def matrix_cause(expected: str, found: str | None) -> str:
    if found is None:
        return "MISSING"
    if nvlink_count_of_label(expected):
        return "NV_COUNT" if nvlink_count_of_label(found) else "NV_TO_PCIE"
    return "PCIE"


def _damaged_cell(fabric: Fabric, row: str, col: str) -> str | None:
    """Why the text could not give this cell (the evidence is damaged there), or None."""
    return (fabric.damaged.get(f"{row}-{col}") or fabric.damaged.get(row)
            or (fabric.damaged.get(MATRIX_CUT) if row not in fabric.matrix else None)
            or fabric.undescribed.get(row) or fabric.undescribed.get(col))


def check_matrix(profile: Profile, fabric: Fabric) -> CheckResult:
    """Every cell the profile names against the machine's; a cell the recorded text holds damaged is neither a
    pass nor a mismatch: the check names it and, when nothing else differs, does not judge."""
    expected = profile.matrix
    if not fabric.gpus_recorded:  # a bundle of a burn-in log or an RDMA capture alone: no matrix to judge
        return unknown("topology-matrix", "machine", expected, _NOT_RECORDED.format(
            source=fabric.source, files="nvidia-smi-topo-m.txt or nvml.json"))
    differences = matrix_differences(expected, fabric.matrix)
    damaged = [f"{row}-{col}: expected {want}, not readable ({why})" for row, col, want, seen in differences
               if seen is None and (why := _damaged_cell(fabric, row, col))]
    real = [(row, col, want, seen) for row, col, want, seen in differences
            if not (seen is None and _damaged_cell(fabric, row, col))]
    diff = [f"{row}-{col}: expected {want}, found {seen if seen is not None else 'no such device'}"
            for row, col, want, seen in real]
    cut = fabric.damaged.get(MATRIX_CUT)
    if not diff and cut:  # the rows there match, but a matrix cut short cannot show the machine is the one promised
        return unknown("topology-matrix", "machine", expected,
                       f"the topology matrix of {fabric.source} is not whole: {cut}"
                       + (f"; {len(damaged)} promised cell(s) are in the missing rows" if damaged else ""))
    if not diff and not damaged:
        return passed("topology-matrix", "machine", expected, fabric.matrix, "the topology matrix matches the profile")
    if not diff:
        return unknown("topology-matrix", "machine", expected,
                       f"every readable cell matches profile {profile.name}, but {len(damaged)} cell(s) of "
                       f"{fabric.source} are damaged and cannot be judged:\n  " + "\n  ".join(damaged))
    causes = {matrix_cause(want, seen) for _, _, want, seen in real}
    return failed(
        "topology-matrix", "machine", expected, fabric.matrix,
        f"{len(diff)} topology cell(s) differ from profile {profile.name}:\n  " + "\n  ".join(diff)
        + "\nUsual causes: " + " ".join(_MATRIX_CAUSES[c] for c in sorted(causes))
        + ("\nNot readable in the recorded text:\n  " + "\n  ".join(damaged) if damaged else ""),
        details=diff + damaged,
    )


def check_nvlinks(profile: Profile, fabric: Fabric, gpu: Gpu) -> CheckResult:
    """Link count, state and speed of one GPU's NVLinks against the profile's `nvlink` section."""
    promise = profile.nvlink
    expected = dict(promise)
    if "nvlinks" in gpu.unreadable:
        return unknown("nvlink-links", gpu.label, expected,
                       f"{gpu.unreadable['nvlinks']} [{fabric.source}]")
    if gpu.nvlinks is None and MATRIX_CUT in fabric.damaged:  # the count would come from a matrix cut short
        return unknown("nvlink-links", gpu.label, expected, f"{gpu.label}: its NVLinks would be counted from the "
                       f"topology matrix of {fabric.source}, which is not whole: {fabric.damaged[MATRIX_CUT]}")
    count = fabric.nvlink_count(gpu)
    if count is None:
        why = _NOT_RECORDED.format(source=fabric.source, files=_LINK_FILES)
        return unknown("nvlink-links", gpu.label, expected, why)
    problems: list[str] = []
    unjudged: list[str] = []  # promises this evidence cannot show
    want = promise.get("links_per_gpu")
    if want is not None and count != want:
        problems.append(f"{count} active NVLinks, expected {want}")
    # without per-link records the count comes from the matrix, which counts active links only: an inactive
    # link shows there as a lower NV# (the count above), but speed and remote cannot be read from it
    links = gpu.nvlinks or []
    active = [lk for lk in links if lk.active is True]
    inactive = [link.link for link in links if link.active is not True]
    if promise.get("all_active", True) and inactive:
        problems.append("inactive link(s) " + ", ".join(str(i) for i in inactive))
    min_speed = profile.nvlink_min_speed_gbps
    slow_links: list[int] = []
    if min_speed is not None:
        if gpu.nvlinks is None or any(not isinstance(lk.speed_gbps, float) for lk in active):
            unjudged.append("link speed")
        slow = [f"link {lk.link} {lk.speed_gbps} GB/s" for lk in active
                if isinstance(lk.speed_gbps, float) and lk.speed_gbps < min_speed]
        slow_links = [lk.link for lk in active if isinstance(lk.speed_gbps, float) and lk.speed_gbps < min_speed]
        if slow:
            problems.append(f"below {min_speed} GB/s: " + ", ".join(slow))
    # the remote type is only known from NVML (nvml.json); `nvidia-smi nvlink -s` does not print it
    remotes_known = [lk for lk in active if lk.remote_type is not None]
    if promise.get("switch") is not None and len(remotes_known) < len(active or [None]):
        unjudged.append("link remote (NVSwitch or GPU)")
    if promise.get("switch") is not None and remotes_known:
        to_switch = [lk.link for lk in remotes_known if lk.remote_type == "SWITCH"]
        if promise["switch"] and len(to_switch) != len(remotes_known):
            problems.append(f"{len(remotes_known) - len(to_switch)} active link(s) do not go to an NVSwitch")
        if not promise["switch"] and to_switch:
            problems.append(f"{len(to_switch)} link(s) go to an NVSwitch, the profile promises direct links")
    found = {"active_links": count, "inactive": inactive}
    if slow_links:
        found["slow"] = slow_links  # trained below the promised speed (remedy.py: a reset retrains them)
    if not problems and unjudged:
        why = _NOT_RECORDED.format(source=fabric.source, files="nvml.json (gpufabric snapshot)")
        return unknown("nvlink-links", gpu.label, expected, f"{count} active NVLinks as promised, but the "
                       f"{' and '.join(unjudged)} {why.replace('not recorded by', 'is not recorded by')}")
    if not problems:
        return passed("nvlink-links", gpu.label, expected, found, f"{gpu.label}: {count} active NVLinks")
    return failed(
        "nvlink-links", gpu.label, expected, found,
        f"{gpu.label} (serial {gpu.serial or 'unknown'}): " + "; ".join(problems)
        + ". Usual causes: a bridge or cable not seated, a link trained down after errors "
        "(nvidia-smi nvlink -e), or NVSwitch fabric manager not running.",
        details=problems,
    )


#: the topo -m column each affinity comes from (how Fabric.damaged names it)
_AFFINITY_HEADERS = {"cpu_affinity": "CPU Affinity", "numa_affinity": "NUMA Affinity"}


def check_affinity(profile: Profile, fabric: Fabric, gpu: Gpu) -> CheckResult:
    """CPU and NUMA affinity as `nvidia-smi topo -m` prints them; CPU lists compare as sets of CPUs."""
    topo = profile.topology
    expected = {
        key: topo[key][gpu.label] for key in ("cpu_affinity", "numa_affinity") if gpu.label in topo.get(key, {})
    }
    found_map = {"cpu_affinity": fabric.cpu_affinity, "numa_affinity": fabric.numa_affinity}
    found = {key: found_map[key].get(gpu.label) for key in expected}
    damaged = [why for key in expected if found[key] is None
               and (why := fabric.damaged.get(f"{gpu.label} {_AFFINITY_HEADERS[key]}"))]
    cut = fabric.damaged.get(MATRIX_CUT) if fabric.provenance.get("cpu_affinity") != "nvml" else None
    if cut and all(value is None for value in found.values()):
        damaged.append(f"the topology matrix is not whole: {cut}")
    if damaged and all(value is None for value in found.values()):
        return unknown("affinity", gpu.label, expected,
                       f"{gpu.label}: the affinity in {fabric.source} is damaged and cannot be judged: "
                       + "; ".join(damaged))
    if all(value is None for value in found.values()):
        return unknown("affinity", gpu.label, expected, _NOT_RECORDED.format(
            source=fabric.source, files="nvidia-smi-topo-m.txt with affinity columns or nvml.json"))
    problems = []
    for key, want in expected.items():
        have = found[key]
        if have is None:
            continue
        if key == "cpu_affinity" and not is_na(have) and not is_na(want):
            if parse_cpu_list(have) != parse_cpu_list(want):
                problems.append(f"CPU affinity {have}, expected {want}")
        elif str(have) != str(want):
            problems.append(f"{key.replace('_', ' ')} {have}, expected {want}")
    missing = [key for key, value in found.items() if value is None]
    if not problems and cut:
        return unknown("affinity", gpu.label, expected, f"{gpu.label}: the affinity its row shows matches, but the "
                       f"topology matrix of {fabric.source} is not whole: {cut}")
    if not problems and missing:
        why = _NOT_RECORDED.format(source=fabric.source, files="nvidia-smi-topo-m.txt with that column or nvml.json")
        return unknown("affinity", gpu.label, expected, f"{gpu.label}: {', '.join(missing)} {why}")
    if not problems:
        return passed("affinity", gpu.label, expected, found, f"{gpu.label}: " + ", ".join(
            f"{k.replace('_', ' ')} {v}" for k, v in found.items()))
    return failed(
        "affinity", gpu.label, expected, found,
        f"{gpu.label}: " + "; ".join(problems) + ". Usual causes: the GPU sits behind the other socket, "
        "NUMA-per-socket or sub-NUMA clustering set differently in the BIOS, or a VM hiding the host topology.",
    )
