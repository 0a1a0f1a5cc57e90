"""Pure parsers for the text nvidia-smi prints, turned into the typed model of :mod:`.model`.

Why text at all: a bundle recorded on a customer's machine, or pasted from a ticket, is often the only
evidence there is; the live path (NVML) cannot replay it. These functions read no files and run no tools,
so the same code serves live captures, recorded bundles and tests built on real outputs.

Every parser raises ``ValueError`` naming the line and what it expected when the text is not what the tool
prints: a wrong file in a bundle must be a clear error, never an empty or shifted model.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from itertools import pairwise

from ..units import NA, parse_bytes, parse_gbps
from .model import Fabric, Gpu, Nic, NvLink

__all__ = [
    "TopoMatrix",
    "XmlInventory",
    "fabric_from_text",
    "normalize_label",
    "parse_nvidia_smi_q_xml",
    "parse_nvlink_remote",
    "parse_nvlink_status",
    "parse_topo_m",
]

# ---------------------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# ---------------------------------------------------------------------------------------------------------

#: Recent drivers underline the header with ``ESC[4m`` ... ``ESC[0m`` even when stdout is not a terminal.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: The non-device columns nvidia-smi prints after the matrix, and the TopoMatrix attribute each one fills.
_AFFINITY_COLUMNS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NIC_LABEL = re.compile(r"^NIC\d+$")
#: A matrix cell: X, NV12, PIX, PXB, PHB, NODE, SYS, SOC (and any future upper-case label). An affinity
#: value ("0-31", "N/A") in a matrix cell means the columns were misread, so it is refused, not stored.
_MATRIX_LABEL = re.compile(r"^[A-Z][A-Z0-9#]*$")
_NIC_LEGEND_ENTRY = re.compile(r"^\s*(\S+)\s*:\s*(\S+)\s*$")


def normalize_label(label: str | None) -> str | None:
    """The label to compare with: drivers before 2017 printed ``SOC`` for what is now ``SYS``.

    The matrix keeps the label as printed (a report must show what the machine said); comparisons against a
    profile go through this function so that an old driver's ``SOC`` meets a profile's ``SYS``.
    """
    if label is None:
        return None
    text = label.strip()
    return "SYS" if text.upper() == "SOC" else text


@dataclass
class TopoMatrix:
    """``nvidia-smi topo -m`` as printed: the path label between every two devices plus the affinity columns.

    ``devices`` keeps the column order (GPUs first, then NICs as ``NIC0`` or, on older drivers, ``mlx5_0``).
    The affinity dicts hold only rows that printed a value, as text ("N/A" stays "N/A"); ``columns_present``
    tells "the driver has no such column" apart from "the column is there but this row is empty".
    """

    devices: list[str]
    matrix: dict[str, dict[str, str]]
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)
    #: which of "cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_names" the output has
    columns_present: set[str] = field(default_factory=set)
    #: trailing columns this parser does not know, by header name -> row -> text (kept, not guessed at)
    other_columns: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        """The GPU labels in column order ("GPU0", "GPU1", ...)."""
        return [d for d in self.devices if _GPU_LABEL.match(d)]

    @property
    def nics(self) -> list[str]:
        """The non-GPU devices in column order ("NIC0" or "mlx5_0")."""
        return [d for d in self.devices if not _GPU_LABEL.match(d)]

    def to_json(self) -> dict:
        """The public JSON form; each of the last four keys is absent when the output has no such column."""
        out: dict = {
            "devices": list(self.devices),
            "matrix": {row: dict(cols) for row, cols in self.matrix.items()},
        }
        for key in ("cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_names"):
            if key in self.columns_present:
                out[key] = dict(getattr(self, key))
        return out


def _split_header_words(piece: str) -> list[str]:
    """Split one space-separated header piece into column names.

    Column names contain single spaces ("CPU Affinity", "GPU NUMA ID"), so whitespace alone cannot split a
    header; runs of 2+ spaces usually do, and this handles pieces where device names are one space apart.
    """
    words = piece.split()
    names: list[str] = []
    pending: list[str] = []
    phrases = sorted((p.split() for p in _AFFINITY_COLUMNS), key=len, reverse=True)
    i = 0
    while i < len(words):
        phrase = next((p for p in phrases if words[i : i + len(p)] == p), None)
        if phrase is not None or _GPU_LABEL.match(words[i]) or _NIC_LABEL.match(words[i]):
            if pending:
                names.append(" ".join(pending))
                pending = []
            if phrase is not None:
                names.append(" ".join(phrase))
                i += len(phrase)
            else:
                names.append(words[i])
                i += 1
        else:
            pending.append(words[i])
            i += 1
    if pending:
        names.append(" ".join(pending))
    return names


def _header_columns(line: str) -> list[str]:
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t") if cell.strip()]
    columns: list[str] = []
    for piece in re.split(r"\s{2,}", line.strip()):
        columns.extend(_split_header_words(piece))
    return columns


def _assign_trailing(
    values: list[str], columns: list[str], *, tabbed: bool, where: str
) -> dict[str, str]:
    """Map the cells after the matrix part of a row to the trailing columns (CPU Affinity, ...).

    Tab-separated output keeps empty cells, and drivers of the 5xx series print an extra empty cell after
    NUMA Affinity (``0\\t\\tN/A``): that cell is dropped so N/A lands in GPU NUMA ID, not one column late.
    Space-separated output loses empty cells, so values are taken in order only when their count matches.
    """
    values = list(values)
    n = len(columns)
    if not any(values):
        return {}  # NIC rows, and rows of a driver printing no affinity
    if tabbed:
        if len(values) > n and "NUMA Affinity" in columns:
            k = columns.index("NUMA Affinity")
            if k + 1 < len(values) and values[k + 1] == "":
                del values[k + 1]
        while len(values) > n and values[-1] == "":
            values.pop()
        if len(values) <= n:
            return {col: val for col, val in zip(columns, values, strict=False) if val}
        nonempty = [v for v in values if v]
        if len(nonempty) == n:
            return dict(zip(columns, nonempty, strict=True))
    elif len(values) == n:
        return dict(zip(columns, values, strict=True))
    raise ValueError(
        f"{where}: values {values!r} after the matrix cells, but the header has {n} trailing column(s) "
        f"{columns!r}; cannot tell which value belongs to which column"
        + ("" if tabbed else " (space-separated output drops empty cells: use the tab-separated original)")
    )


def parse_topo_m(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m``: the matrix, the affinity columns and the NIC legend.

    Accepts the tab-separated original (with its ANSI-underlined header and empty cells) and copies where a
    terminal or a web page turned tabs into spaces. Stops at ``Legend:``. Raises ValueError on anything else.
    """
    if not text or not text.strip():
        raise ValueError("nvidia-smi topo -m: empty text (expected a header line with GPU0 and a matrix)")
    lines = [_ANSI.sub("", line) for line in text.splitlines()]

    header_at = None
    for i, line in enumerate(lines):
        if line.strip() == "Legend:":
            break
        if "GPU0" in _header_columns(line):
            header_at = i
            break
    if header_at is None:
        first = next((line for line in lines if line.strip()), "")
        raise ValueError(
            "nvidia-smi topo -m: no header line with a GPU0 column before 'Legend:' "
            f"(first line is {first[:80]!r}); this does not look like topo -m output"
        )
    header = lines[header_at]
    columns = _header_columns(header)

    # Data rows: from the line after the header to the first blank line or "Legend:".
    rows: list[tuple[int, str, list[str]]] = []  # (line number, label, raw cells after the label)
    end = len(lines)
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            end = i
            break
        if line.strip() == "Legend:":
            end = i
            break
        if "\t" in line:
            cells = [c.strip() for c in line.split("\t")]
            # a leading indent (topo -p2p style " GPU0\t...") belongs to the label cell
            label, rest = cells[0], cells[1:]
        else:
            tokens = line.split()
            label, rest = tokens[0], tokens[1:]
        if not label:
            raise ValueError(f"nvidia-smi topo -m line {i + 1}: row without a device label: {line!r}")
        rows.append((i + 1, label, rest))
    if not rows:
        raise ValueError(
            f"nvidia-smi topo -m line {header_at + 2}: expected matrix rows (GPU0 ...) after the header"
        )

    row_labels = [label for _, label, _ in rows]
    n_dev = 0
    for col in columns:
        if col in _AFFINITY_COLUMNS or col not in row_labels:
            break
        n_dev += 1
    devices = columns[:n_dev]
    trailing = columns[n_dev:]
    if "GPU0" not in devices:
        raise ValueError(f"nvidia-smi topo -m line {header_at + 1}: header has GPU0 but no row labelled GPU0")
    missing = [d for d in devices if d not in row_labels]
    if missing:
        raise ValueError(f"nvidia-smi topo -m: columns {missing} have no row (truncated output?)")

    topo = TopoMatrix(devices=devices, matrix={})
    for col in trailing:
        if col in _AFFINITY_COLUMNS:
            topo.columns_present.add(_AFFINITY_COLUMNS[col])
        else:
            topo.other_columns[col] = {}

    for lineno, label, rest in rows:
        where = f"nvidia-smi topo -m line {lineno} ({label})"
        if label not in devices:
            raise ValueError(f"{where}: row label {label!r} is not one of the header's devices {devices}")
        if label in topo.matrix:
            raise ValueError(f"{where}: second row for {label}")
        cells = rest[:n_dev]
        if len(cells) < n_dev:
            raise ValueError(f"{where}: {len(cells)} matrix cells, expected {n_dev} ({', '.join(devices)})")
        for col, cell in zip(devices, cells, strict=True):
            if not _MATRIX_LABEL.match(cell):
                raise ValueError(
                    f"{where}, column {col}: {cell!r} is not a path label (expected X, NV#, PIX, PXB, PHB, "
                    "NODE, SYS or SOC)"
                )
        topo.matrix[label] = dict(zip(devices, cells, strict=True))
        tabbed = "\t" in lines[lineno - 1]
        for col, value in _assign_trailing(rest[n_dev:], trailing, tabbed=tabbed, where=where).items():
            if col in _AFFINITY_COLUMNS:
                getattr(topo, _AFFINITY_COLUMNS[col])[label] = value
            else:
                topo.other_columns[col][label] = value

    # The NIC legend follows the Legend section: "NIC Legend:" then "  NIC0: mlx5_0" lines.
    in_legend = False
    for i in range(end, len(lines)):
        stripped = lines[i].strip()
        if stripped == "NIC Legend:":
            in_legend = True
            topo.columns_present.add("nic_names")
            continue
        if not in_legend or not stripped:
            continue
        m = _NIC_LEGEND_ENTRY.match(lines[i])
        if not m:
            break
        topo.nic_names[m.group(1)] = m.group(2)
    return topo


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi nvlink -s / -R
# ---------------------------------------------------------------------------------------------------------

_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: (\S+)\))?\s*$")
_LINK_LINE = re.compile(r"^\s*Link (\d+): (.*?)\s*$")
_REMOTE = re.compile(r"^Remote Device ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+): Link (\d+)$")
_ALL_INACTIVE = re.compile(r"all links are inactive", re.IGNORECASE)


def _gpu_blocks(text: str, tool: str) -> list[tuple[int, str, str | None, list[tuple[int, int, str]]]]:
    """Split per-GPU nvidia-smi nvlink output into (index, name, uuid, [(line number, link, value)])."""
    blocks: list[tuple[int, str, str | None, list[tuple[int, int, str]]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _GPU_HEADER.match(line.strip())
        if m:
            blocks.append((int(m.group(1)), m.group(2), m.group(3), []))
            continue
        m = _LINK_LINE.match(line)
        if m and blocks:
            blocks[-1][3].append((lineno, int(m.group(1)), m.group(2)))
            continue
        if blocks and _ALL_INACTIVE.search(line):
            continue  # "NVML: Unable to retrieve NVLink information as all links are inActive"
        expected = "'GPU n: <name> (UUID: ...)'" if not blocks else "'Link n: ...' or 'GPU n: ...'"
        raise ValueError(f"{tool} line {lineno}: expected {expected}, got {line.strip()[:80]!r}")
    if not blocks:
        raise ValueError(f"{tool}: no 'GPU n: <name> (UUID: ...)' line; this does not look like its output")
    seen: set[int] = set()
    for index, *_ in blocks:
        if index in seen:
            raise ValueError(f"{tool}: GPU {index} appears twice")
        seen.add(index)
    return blocks


def parse_nvlink_status(text: str) -> dict[int, dict]:
    """Parse ``nvidia-smi nvlink -s``: per GPU index, {"name", "uuid", "links": [NvLink, ...]}.

    ``Link 3: <inactive>`` gives ``active=False`` (speed not recorded); ``26.562 GB/s`` gives ``active=True``
    with the speed; ``N/A`` gives ``NA`` for both. A GPU without link lines gets ``links == []``.
    """
    out: dict[int, dict] = {}
    if not text.strip():
        # What a GPU without NVLink prints: nothing at all (seen on the H100 PCIe, driver 580.159.04,
        # tests/data/bundles/h100-x1), exit code 0.
        return out
    for index, name, uuid, links in _gpu_blocks(text, "nvidia-smi nvlink -s"):
        records: list[NvLink] = []
        for lineno, link, value in links:
            if value.lower() == "<inactive>":
                records.append(NvLink(link=link, active=False))
            elif value in ("N/A", "<N/A>"):
                records.append(NvLink(link=link, active=NA, speed_gbps=NA))
            else:
                try:
                    speed = parse_gbps(value)
                except ValueError:
                    raise ValueError(
                        f"nvidia-smi nvlink -s line {lineno} (GPU {index} link {link}): expected a speed "
                        f"such as '26.562 GB/s' or '<inactive>', got {value!r}"
                    ) from None
                records.append(NvLink(link=link, active=speed > 0, speed_gbps=speed))
        out[index] = {"name": name, "uuid": uuid, "links": records}
    return out


def parse_nvlink_remote(text: str) -> dict[int, dict[int, str]]:
    """Parse ``nvidia-smi nvlink -R``: GPU index -> link -> remote PCI bus id.

    ``FFFFFFFF:FF:FF.0`` is what NVSwitch systems report (the peer is a switch, not a GPU); it is kept as
    printed. Inactive links print no remote and are left out.
    """
    out: dict[int, dict[int, str]] = {}
    for index, _name, _uuid, links in _gpu_blocks(text, "nvidia-smi nvlink -R"):
        remotes: dict[int, str] = {}
        for lineno, link, value in links:
            if value.lower() == "<inactive>":
                continue
            m = _REMOTE.match(value)
            if not m:
                raise ValueError(
                    f"nvidia-smi nvlink -R line {lineno} (GPU {index} link {link}): expected "
                    f"'Remote Device <pci bus id>: Link n', got {value!r}"
                )
            remotes[link] = m.group(1)
        out[index] = remotes
    return out


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# ---------------------------------------------------------------------------------------------------------

_NA_TEXTS = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}


@dataclass
class XmlInventory:
    """What ``nvidia-smi -q -x`` says about the machine: versions and one model.Gpu per ``<gpu>``."""

    driver_version: str | None = None
    cuda_version: str | None = None  # the CUDA version the driver supports, "13.0"
    gpus: list[Gpu] = field(default_factory=list)


def _text(elem: ET.Element, path: str):
    """The stripped text at path: None when absent or empty, NA for N/A / Not Supported."""
    node = elem.find(path)
    if node is None or node.text is None or not node.text.strip():
        return None
    value = node.text.strip()
    return NA if value in _NA_TEXTS else value


def _int(elem: ET.Element, path: str, where: str, suffix: str = ""):
    value = _text(elem, path)
    if value is None or value is NA:
        return value
    digits = value[: -len(suffix)] if suffix and value.endswith(suffix) else value
    try:
        return int(digits)
    except ValueError:
        raise ValueError(f"nvidia-smi -q -x, {where}: <{path}> is {value!r}, expected an integer") from None


def parse_nvidia_smi_q_xml(text: str) -> XmlInventory:
    """Parse ``nvidia-smi -q -x`` into versions and model.Gpu records, GPUs in document order.

    nvidia-smi lists GPUs by PCI bus id, which is the NVML index order, so ``index`` is the position (this
    matches ``<minor_number>`` only by accident: minor numbers follow the kernel driver's probe order).
    Compute capability, CPU affinity and NUMA node are not in -q output and stay None; so do NVLinks.
    """
    if not text or not text.strip():
        raise ValueError("nvidia-smi -q -x: empty text (expected an <nvidia_smi_log> XML document)")
    try:
        # ElementTree skips the DOCTYPE line and never fetches the DTD it names.
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ValueError(
            f"nvidia-smi -q -x: malformed XML at line {line}, column {column}: {exc} "
            "(truncated or not the output of nvidia-smi -q -x)"
        ) from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"nvidia-smi -q -x: root element is <{root.tag}>, expected <nvidia_smi_log>")

    def version(path: str) -> str | None:
        value = _text(root, path)
        return None if value is None else str(value)

    inventory = XmlInventory(driver_version=version("driver_version"), cuda_version=version("cuda_version"))
    for index, elem in enumerate(root.findall("gpu")):
        where = f"GPU {index} ({elem.get('id')})"
        memory = _text(elem, "fb_memory_usage/total")
        if memory is not None and memory is not NA:
            try:
                memory = parse_bytes(memory)
            except ValueError:
                raise ValueError(
                    f"nvidia-smi -q -x, {where}: <fb_memory_usage/total> is {memory!r}, "
                    "expected e.g. '143771 MiB'"
                ) from None
        link = "pci/pci_gpu_link_info"
        inventory.gpus.append(
            Gpu(
                index=index,
                name=_text(elem, "product_name"),
                uuid=_text(elem, "uuid"),
                serial=_text(elem, "serial"),
                pci_bus_id=_text(elem, "pci/pci_bus_id"),
                memory_bytes=memory,
                pcie_gen_max=_int(elem, f"{link}/pcie_gen/max_link_gen", where),
                pcie_gen_current=_int(elem, f"{link}/pcie_gen/current_link_gen", where),
                pcie_width_max=_int(elem, f"{link}/link_widths/max_link_width", where, suffix="x"),
                pcie_width_current=_int(elem, f"{link}/link_widths/current_link_width", where, suffix="x"),
                vbios_version=_text(elem, "vbios_version"),
                ecc_mode=_text(elem, "ecc_mode/current_ecc"),
            )
        )
    if not inventory.gpus:
        raise ValueError("nvidia-smi -q -x: no <gpu> element (no GPU visible, or not the -q -x output)")
    return inventory


# ---------------------------------------------------------------------------------------------------------
# One Fabric from whatever text there is
# ---------------------------------------------------------------------------------------------------------


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
        fabric.provenance["inventory"] = "nvidia-smi -q -x"
        counted.append(("nvidia-smi -q -x", len(inventory.gpus)))
    if matrix is not None:
        topo_gpus = [int(_GPU_LABEL.match(label).group(1)) for label in matrix.gpus]
        counted.append(("nvidia-smi topo -m", len(topo_gpus)))
        if not fabric.gpus:
            fabric.gpus = [Gpu(index=i) for i in topo_gpus]
        fabric.matrix = {row: dict(cols) for row, cols in matrix.matrix.items()}
        fabric.cpu_affinity = dict(matrix.cpu_affinity)
        fabric.numa_affinity = dict(matrix.numa_affinity)
        fabric.provenance["matrix"] = "nvidia-smi topo -m"
        for label in matrix.nics:
            device = matrix.nic_names.get(label, None if _NIC_LABEL.match(label) else label)
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

    known = {gpu.index for gpu in fabric.gpus}
    for name, indices in (
        ("nvidia-smi topo -m", [int(_GPU_LABEL.match(g).group(1)) for g in matrix.gpus] if matrix else []),
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
