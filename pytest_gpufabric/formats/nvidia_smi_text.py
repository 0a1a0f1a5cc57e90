"""The nvidia-smi text forms people paste: the plain ``nvidia-smi`` table, ``nvidia-smi -L`` and ``nvidia-smi -q``,
read into the Gpu records (formats/gpu.py) the XML and NVML readers give, with what the text does not say kept
apart from what it says.

- the table: both header forms (``|---`` under the version line before driver 580, ``+---`` from 580, and the
  ``KMD Version`` / ``CUDA UMD Version`` words of driver 610), each GPU's index, name, persistence mode, bus id,
  memory, power and utilisation, and the process list;
- ``-L``: index, name and UUID of each GPU (and its MIG devices);
- ``-q``: versions, attached GPU count, and per GPU the product name, serial, UUID, bus id, FB memory total, VBIOS,
  ECC mode, PCIe link and the Fabric section (formats/gpu_fabric.py).

A cut paste is said, not counted: a name or process name nvidia-smi shortened with ``...``, a process memory cut
(``10052...``), a GPU list or process list that stops before its closing border, GPUs the ``-q`` header announces
but that the text does not describe: each is named in ``unknown`` and the value is None. Lines a person pastes
around the output (prompts, fences, the author's ``\\`` line ends) are stepped over (formats/paste.py).
Reads no files and runs no tools; ValueError names what was expected when the text is not the output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..units import NA, parse_bytes
from .gpu import Gpu
from .gpu_fabric import GpuFabricInfo, fabric_problem, rack_fabric_problems
from .paste import ANSI, paste_noise

__all__ = ["SmiText", "parse_smi_list", "parse_smi_q", "parse_smi_table"]

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_VERSION_LINE = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?P<dlabel>Driver Version|KMD Version):\s*(?P<driver>\S+)"
                           r"\s+(?P<clabel>CUDA Version|CUDA UMD Version):\s*(?P<cuda>\S+)")
_GPU_ROW = re.compile(rf"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)\s*\|\s*(?P<bus>{_BUS})\s+"
                      r"(?P<disp>\S+)\s*\|\s*(?P<ecc>.*?)\s*\|$")
_GPU_ROW2 = re.compile(r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<draw>\S+?)\s*/\s*(?P<cap>\S+?)\s*\|"
                       r"\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|\s*(?P<util>\S+)\s+(?P<mode>\S+)\s*\|$")
_PROCESS = re.compile(r"^\|\s*(?P<gpu>\d+|N/A)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
                      r"(?P<name>.*?)\s+(?P<memory>\d+MiB|N/A|\S*\.\.\.)\s*\|$")
_BORDER = re.compile(r"^[+|][-=+|]+[+|]$")
_LIST_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)(?: \(UUID: (?P<uuid>GPU-[0-9a-fA-F-]+)(?P<close>\)?))?$")
_LIST_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>MIG-[^)]*)\)?$")


@dataclass
class SmiText:
    """What one nvidia-smi text output says: versions, Gpu records, the tool's other columns per GPU (``extra``,
    by index), processes, and the sentences naming what the text does not say (``unknown``)."""

    tool: str
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    extra: dict[int, dict] = field(default_factory=dict)
    processes: list[dict] | None = None  # None: the text has no process list
    attached_gpus: int | None = None  # -q: the GPUs the driver has
    header: str | None = None  # the table's header form, in words
    unknown: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        gpus = []
        for gpu in self.gpus:
            one = {"index": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "serial": gpu.serial,
                   "pci_bus_id": gpu.pci_bus_id, "memory_total_bytes": gpu.memory_bytes,
                   **self.extra.get(gpu.index, {})}
            for key in ("vbios_version", "ecc_mode", "pcie_gen_max", "pcie_gen_current", "pcie_width_max",
                        "pcie_width_current"):
                if getattr(gpu, key) is not None:
                    one[key] = getattr(gpu, key)
            if gpu.fabric is not None:
                one["fabric"] = gpu.fabric.to_json()
                one["fabric_problem"] = fabric_problem(gpu.fabric)
            if gpu.unreadable:
                one["unreadable"] = dict(gpu.unreadable)
            gpus.append({k: ("N/A" if v is NA else v) for k, v in one.items()})
        out = {"tool": self.tool, "driver_version": self.driver_version, "cuda_version": self.cuda_version,
               "gpu_count": len(self.gpus), "gpus": gpus}
        if self.header is not None:
            out["header"] = self.header
        if self.attached_gpus is not None:
            out["attached_gpus"] = self.attached_gpus
        if self.processes is not None:
            out["processes"] = self.processes
        if any(gpu.fabric is not None for gpu in self.gpus):
            own, outside, domain = rack_fabric_problems([(g.label, g.fabric) for g in self.gpus],
                                                        require_fabric=False)
            out["fabric"] = {"domain": domain,
                             "problems": [{"gpu": label, "why": why} for label, why in own + outside]}
        out["unknown"] = list(self.unknown)
        return out


def _lines(text: str, tool: str) -> list[str]:
    """The output's lines: ANSI escapes, the author's trailing `` \\`` and pasted prompts and fences dropped."""
    if not text or not text.strip():
        raise ValueError(f"{tool}: empty text")
    out = []
    for raw in text.splitlines():
        line = ANSI.sub("", raw).rstrip()
        if line.endswith("\\"):
            line = line[:-1].rstrip()
        if paste_noise(line, banners=False) in ("a Markdown fence", "a shell command line"):
            continue
        out.append(line)
    return out


def _mib(value: str) -> int:
    return int(value) * (1 << 20)


def _watts(text: str) -> float | None:
    return float(text[:-1]) if re.fullmatch(r"\d+(?:\.\d+)?W", text) else None


# ---------------------------------------------------------------------------------------------------------
# the plain table


def parse_smi_table(text: str) -> SmiText:
    """The plain ``nvidia-smi`` table: versions, one Gpu per GPU block, the process list."""
    lines = _lines(text, "nvidia-smi")
    out = SmiText(tool="nvidia-smi")
    position = next((i for i, line in enumerate(lines) if _VERSION_LINE.search(line)), None)
    if position is None:
        raise ValueError("nvidia-smi: no version line (`| NVIDIA-SMI ... Driver Version: ... CUDA Version: ... |`)")
    m = _VERSION_LINE.search(lines[position])
    out.driver_version, out.cuda_version = m.group("driver"), m.group("cuda")
    following = lines[position + 1] if position + 1 < len(lines) else ""
    if m.group("dlabel") == "KMD Version":
        out.header = "KMD Version / CUDA UMD Version (driver 610 and later)"
    elif following.startswith("+"):
        out.header = "version line closed by +---- (driver 580 and later)"
    else:
        out.header = "version line closed by |---- (drivers before 580)"
    current: dict | None = None
    rows_seen = 0  # rows of the current GPU block read
    in_processes = processes_closed = gpus_closed = False
    for line in lines[position + 1:]:
        if "Processes:" in line:
            in_processes, out.processes = True, []
            gpus_closed = True
            continue
        if in_processes:
            processes_closed = processes_closed or _process_line(line, out)
            continue
        row = _GPU_ROW.match(line)
        if row:
            current = _gpu_from_row(row, out)
            rows_seen = 1
            continue
        second = _GPU_ROW2.match(line)
        if second and current is not None and rows_seen == 1:
            _second_row(second, current, out)
            rows_seen = 2
            continue
        if _BORDER.match(line) and line.startswith("+"):
            if current is not None:
                current["closed"] = True
            continue
        if line.startswith("|") and current is not None and rows_seen >= 2:
            mig = line.strip("| ").split("|")[-1].strip()
            if mig:
                out.extra[current["index"]]["mig_mode"] = mig
            rows_seen = 3
    if not out.gpus:
        raise ValueError("nvidia-smi: no GPU row (`|   0  NAME   On  |   00000000:..:00.0 Off | ... |`) after the "
                         "version line")
    last = out.gpus[-1]
    if not out.extra[last.index].pop("closed", False) and not gpus_closed:
        out.unknown.append(f"the GPU list stops inside {last.label}'s block: GPUs after {last.label} are not in the "
                           "text (the GPU count is unknown)")
        if last.memory_bytes is None:
            last.unreadable["memory_bytes"] = f"{last.label}'s memory row is cut from the text"
    for extra in out.extra.values():
        extra.pop("closed", None)
    if out.processes is None:
        out.unknown.append("no process list in the text: the processes are unknown")
    elif not processes_closed:
        out.unknown.append("the process list stops before its closing border: processes after the last row are "
                           "unknown")
    return out


def _gpu_from_row(row: re.Match, out: SmiText) -> dict:
    index = int(row.group("index"))
    name = row.group("name").strip()
    gpu = Gpu(index=index, name=name, pci_bus_id=row.group("bus").upper().rjust(16, "0"))
    if name.endswith("..."):
        gpu.name = None
        gpu.unreadable["name"] = f"GPU{index} name {name!r} is cut by nvidia-smi's column: the model is unknown"
        out.unknown.append(gpu.unreadable["name"])
    out.gpus.append(gpu)
    extra = {"index": index, "persistence_mode": row.group("persistence"), "ecc_uncorrected": row.group("ecc")}
    out.extra[index] = extra
    return extra


def _second_row(second: re.Match, current: dict, out: SmiText) -> None:
    gpu = out.gpus[-1]
    gpu.memory_bytes = _mib(second.group("total"))
    current.update({"memory_used_bytes": _mib(second.group("used")), "power_draw_w": _watts(second.group("draw")),
                    "power_cap_w": _watts(second.group("cap")), "temperature": second.group("temp"),
                    "performance_state": second.group("perf"), "utilization": second.group("util"),
                    "compute_mode": second.group("mode")})


def _process_line(line: str, out: SmiText) -> bool:
    """One line of the process list; True at its closing border (``+---+``, not the ``|===|`` under its header)."""
    if _BORDER.match(line):
        return line.startswith("+") and "=" not in line
    if "No running processes found" in line:
        return False
    m = _PROCESS.match(line)
    if not m:
        return False
    name, memory = m.group("name").strip(), m.group("memory")
    process = {"gpu": None if m.group("gpu") == "N/A" else int(m.group("gpu")), "pid": int(m.group("pid")),
               "type": m.group("type"), "name": name, "memory_bytes": None}
    if memory.endswith("MiB"):
        process["memory_bytes"] = _mib(memory[:-3])
    elif memory.endswith("..."):
        out.unknown.append(f"process {process['pid']} on GPU{process['gpu']}: its memory {memory!r} is cut by "
                           "nvidia-smi's column (unknown)")
    if name.startswith("...") or name.endswith("..."):
        process["name"] = None
        out.unknown.append(f"process {process['pid']} on GPU{process['gpu']}: its name {name!r} is cut by "
                           "nvidia-smi's column (unknown)")
    out.processes.append(process)
    return False


# ---------------------------------------------------------------------------------------------------------
# -L


def parse_smi_list(text: str) -> SmiText:
    """``nvidia-smi -L``: one Gpu per ``GPU N: NAME (UUID: GPU-...)`` line, MIG devices under their GPU."""
    out = SmiText(tool="nvidia-smi -L")
    for number, line in enumerate(_lines(text, "nvidia-smi -L"), start=1):
        if not line.strip():
            continue
        m = _LIST_GPU.match(line)
        if m:
            index = int(m.group("index"))
            gpu = Gpu(index=index, name=m.group("name"), uuid=m.group("uuid"))
            if m.group("uuid") is None or not m.group("close") or len(m.group("uuid")) != 40:
                gpu.uuid = None
                gpu.unreadable["uuid"] = f"line {number}: GPU{index}'s UUID is cut or missing: {line.strip()!r}"
                out.unknown.append(gpu.unreadable["uuid"])
            out.gpus.append(gpu)
            out.extra[index] = {"mig_devices": []}
            continue
        mig = _LIST_MIG.match(line)
        if mig and out.gpus:
            out.extra[out.gpus[-1].index]["mig_devices"].append(
                {"profile": mig.group("profile"), "device": int(mig.group("device")), "uuid": mig.group("uuid")})
            continue
        if paste_noise(line):
            continue
        raise ValueError(f"nvidia-smi -L: line {number} is not `GPU N: NAME (UUID: GPU-...)`: {line.strip()[:120]!r}")
    if not out.gpus:
        raise ValueError("nvidia-smi -L: no `GPU N: NAME (UUID: GPU-...)` line")
    for extra in out.extra.values():
        if not extra["mig_devices"]:
            del extra["mig_devices"]
    indices = [g.index for g in out.gpus]
    missing = sorted(set(range(max(indices) + 1)) - set(indices))
    if missing:
        out.unknown.append(f"GPU{', GPU'.join(map(str, missing))} not in the list: the list is cut or filtered")
    return out


# ---------------------------------------------------------------------------------------------------------
# -q


def _q_blocks(lines: list[str]) -> tuple[dict[str, str], list[tuple[str, dict[str, str]]]]:
    """The header's key/value pairs and each ``GPU <bus id>`` block's values by path ("Fabric/State")."""
    header: dict[str, str] = {}
    blocks: list[tuple[str, dict[str, str]]] = []
    stack: list[tuple[int, str]] = []
    values: dict[str, str] | None = None
    for line in lines:
        if not line.strip() or set(line.strip()) == {"="}:
            continue
        start = re.match(rf"^GPU ({_BUS})\s*$", line)
        if start:
            values, stack = {}, []
            blocks.append((start.group(1).upper().rjust(16, "0"), values))
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, colon, value = line.strip().partition(":")
        key = key.strip()
        if values is None:
            if colon:
                header[key] = value.strip()
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([name for _, name in stack] + [key])
        if colon and value.strip():
            values[path] = value.strip()
        elif colon:
            values[path] = ""
        else:
            stack.append((indent, key))
    return header, blocks


def parse_smi_q(text: str) -> SmiText:
    """``nvidia-smi -q`` (or ``-a``; ``-q -d SECTION`` keeps what it prints): one Gpu per ``GPU <bus id>`` block."""
    lines = _lines(text, "nvidia-smi -q")
    header, blocks = _q_blocks(lines)
    if not blocks:
        raise ValueError("nvidia-smi -q: no `GPU 00000000:XX:00.0` block (not the output of nvidia-smi -q)")
    out = SmiText(tool="nvidia-smi -q", driver_version=_q_text(header.get("Driver Version")),
                  cuda_version=_q_text(header.get("CUDA Version")))
    attached = header.get("Attached GPUs", "")
    out.attached_gpus = int(attached) if attached.isdigit() else None
    for index, (bus_id, values) in enumerate(blocks):
        gpu = Gpu(index=index, pci_bus_id=bus_id, name=_q_text(values.get("Product Name")),
                  serial=_q_text(values.get("Serial Number")), uuid=_q_text(values.get("GPU UUID")),
                  vbios_version=_q_text(values.get("VBIOS Version")),
                  ecc_mode=_q_text(values.get("ECC Mode/Current")))
        total = values.get("FB Memory Usage/Total")
        if total is not None:
            try:
                gpu.memory_bytes = parse_bytes(total)
            except ValueError:
                gpu.unreadable["memory_bytes"] = f"{gpu.label} FB Memory Usage Total {total!r} is not a size"
        link = "PCI/GPU Link Info"
        for key, path in (("pcie_gen_max", "PCIe Generation/Max"), ("pcie_gen_current", "PCIe Generation/Current"),
                          ("pcie_width_max", "Link Width/Max"), ("pcie_width_current", "Link Width/Current")):
            raw = (values.get(f"{link}/{path}") or "").rstrip("x")
            if raw.isdigit():
                setattr(gpu, key, int(raw))
        gpu.fabric = _q_fabric(values, gpu.label)
        out.gpus.append(gpu)
        out.extra[index] = {}
    described = len(blocks)
    if out.attached_gpus is not None and out.attached_gpus > described:
        out.unknown.append(f"the header says {out.attached_gpus} attached GPUs, the text describes {described}: "
                           "the others are unknown (cut, or printed with -i)")
    with_fabric = [g for g in out.gpus if g.fabric is not None]
    if with_fabric and len(with_fabric) < len(out.gpus):
        for gpu in out.gpus:
            if gpu.fabric is None:
                out.unknown.append(f"{gpu.label} ({gpu.pci_bus_id}) has no Fabric section in the text (cut): its "
                                   "fabric state is unknown")
    return out


def _q_text(value: str | None):
    if value is None or value == "":
        return None
    return NA if value in ("N/A", "Not Supported", "[N/A]") else value


def _q_fabric(values: dict[str, str], who: str) -> GpuFabricInfo | None:
    """The Fabric section: state, status, clique id, cluster UUID and the health lines."""
    if not any(key.startswith("Fabric/") for key in values):
        return None
    state = _q_text(values.get("Fabric/State"))
    info = GpuFabricInfo(state=state, status=_q_text(values.get("Fabric/Status")))
    if state not in (None, NA, "Completed", "In Progress", "Not Started"):
        info.unreadable["state"] = f"{who} Fabric State {state!r} is not a fabric state nvidia-smi prints"
    clique = _q_text(values.get("Fabric/CliqueId"))
    if isinstance(clique, str) and clique is not NA:
        if clique.isdigit():
            info.clique_id = int(clique)
        else:
            info.unreadable["clique_id"] = f"{who} Fabric CliqueId {clique!r} is not a whole number"
    else:
        info.clique_id = clique
    uuid = _q_text(values.get("Fabric/ClusterUUID"))
    info.cluster_uuid = uuid.lower() if isinstance(uuid, str) and uuid is not NA else uuid
    info.health = {key.split("/", 2)[2]: value for key, value in values.items()
                  if key.startswith("Fabric/Health/") and value and value != "N/A"}
    if info.state is NA:
        info.status = info.clique_id = info.cluster_uuid = NA
    return info
