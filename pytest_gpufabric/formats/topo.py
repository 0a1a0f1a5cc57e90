"""``nvidia-smi topo -m``: the path label between every two devices, the affinity columns, the NIC legend.

Why text at all: a bundle recorded on a customer's machine, or pasted from a ticket, is often the only
evidence there is; the live path (NVML) cannot replay it. This module reads no files and runs no tools, so the
same code serves live captures, recorded bundles and tests built on real outputs.

It raises ``ValueError`` naming the line and what it expected when the text is not what the tool prints: a
wrong file in a bundle must be a clear error, never an empty or shifted matrix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .paste import ANSI, paste_noise

__all__ = ["MATRIX_CUT", "TopoMatrix", "normalize_label", "parse_topo_m"]

# ---------------------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# ---------------------------------------------------------------------------------------------------------

#: The non-device columns nvidia-smi prints after the matrix, and the TopoMatrix attribute each one fills.
_AFFINITY_COLUMNS = {
    "CPU Affinity": "cpu_affinity",
    "NUMA Affinity": "numa_affinity",
    "GPU NUMA ID": "gpu_numa_id",
}
GPU_LABEL = re.compile(r"^GPU(\d+)$")
NIC_LABEL = re.compile(r"^NIC\d+$")
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
    #: what the text holds but could not be read, and why: "GPU0-NIC7" (a cell), "GPU0 CPU Affinity", "NIC0" (a row)
    damaged: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        """The GPU labels in column order ("GPU0", "GPU1", ...)."""
        return [d for d in self.devices if GPU_LABEL.match(d)]

    @property
    def nics(self) -> list[str]:
        """The non-GPU devices in column order ("NIC0" or "mlx5_0")."""
        return [d for d in self.devices if not GPU_LABEL.match(d)]

    def to_json(self) -> dict:
        """The public JSON form; each affinity key is absent when the output has no such column, ``damaged`` when
        nothing was."""
        out: dict = {
            "devices": list(self.devices),
            "matrix": {row: dict(cols) for row, cols in self.matrix.items()},
        }
        for key in ("cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_names"):
            if key in self.columns_present:
                out[key] = dict(getattr(self, key))
        if self.damaged:
            out["damaged"] = dict(self.damaged)
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
        if phrase is not None or GPU_LABEL.match(words[i]) or NIC_LABEL.match(words[i]):
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


def _untab(line: str, indent: int) -> list[str] | None:
    """The tab-separated cells of a line whose tabs a terminal turned into spaces (tab stops every 8 columns,
    counted from ``indent``), empty cells included; None when the spaces are not a terminal's tabs.

    nvidia-smi separates every cell with one tab, so in a terminal each cell starts on a tab stop (" X " one
    column after it) and an empty cell is a tab stop with nothing on it: that is how a blank CPU Affinity is
    told from a missing column in a copy that has no tabs left."""
    cells: list[str] = []
    stop = indent
    for m in re.finditer(r"\S+", line):
        start = m.start() - (1 if m.group() == "X" else 0)
        if start < stop or (start - indent) % 8:
            return None
        while stop < start:
            cells.append("")
            stop += 8
        cells.append(m.group())
        stop = indent + (m.end() - indent) // 8 * 8 + 8
    return cells


def _assign_trailing(values: list[str], columns: list[str], *, tabbed: bool, where: str) -> dict[str, str]:
    """Map the cells after the matrix part of a row to the trailing columns (CPU Affinity, ...).

    Tab-separated output (or spaces that were a terminal's tabs) keeps empty cells, and drivers of the 5xx
    series print an extra empty cell after NUMA Affinity (``0\t\tN/A``): that cell is dropped so N/A lands in
    GPU NUMA ID, not one column late. Other space-separated output loses empty cells, so values are taken in
    order only when their count matches.
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


#: what each trailing column may hold; anything else was cut or run together in the paste
_AFFINITY_VALUE = {
    "CPU Affinity": re.compile(r"^(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A)$"),
    "NUMA Affinity": re.compile(r"^(?:\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*|N/A)$"),
    "GPU NUMA ID": re.compile(r"^(?:\d+|N/A)$"),
}
#: a path label run into the value after it, as nvidia-smi itself prints on some machines ("PH0-115": PHB's "B"
#: and the tab lost before CPU Affinity "0-115"), or two labels run together ("PXBNODE")
_GLUED = re.compile(r"^[A-Z]+\d*(?:[A-Z]+|[\d,-]+)$")


def _row_cells(line: str, indent: int | None) -> tuple[list[str], bool]:
    """(cells, tabbed) of one line: split at its tabs, at a terminal's expanded tabs, else at spaces."""
    if "\t" in line:
        # a leading indent (topo -p2p style " GPU0\t...") belongs to the label cell
        return [cell.strip() for cell in line.split("\t")], True
    cells = _untab(line, indent) if indent is not None else None
    if cells is not None:
        return cells, True
    return line.split(), False


#: a device column: GPUn, NICn, or an RDMA device name as older drivers print them (mlx5_0, mlx4_0)
_DEVICE_NAME = re.compile(r"^(?:GPU\d+|NIC\d+|[a-z][a-z0-9]*_\d+)$")
#: the TopoMatrix.damaged key of a matrix whose rows stop short of its header (fabric.model.MATRIX_CUT)
MATRIX_CUT = "matrix"


def _rows_cut(devices: list[str], row_labels: list[str]) -> str | None:
    """Why the matrix is not whole when header columns have no row, or None. A paste cut after its first rows
    reads as a smaller machine ("the paste stops after row 2 (GPU1) of 20"); rows missing in between are named."""
    missing = [d for d in devices if d not in row_labels]
    if not missing:
        return None
    present = [d for d in devices if d in row_labels]
    names = _ranges(missing)
    if devices[:len(present)] == present:
        return (f"the paste stops after row {len(present)} of {len(devices)} ({present[-1]}): the rows of {names}, "
                "which its header names, are missing")
    return f"the rows of {names}, which its header names, are missing ({len(present)} of {len(devices)} rows)"


def _ranges(labels: list[str]) -> str:
    """'GPU2-GPU7, NIC0-NIC11' for consecutive labels of one kind."""
    groups: list[list[str]] = []
    for label in labels:
        m = re.match(r"^(.*?)(\d+)$", label)
        last = groups[-1][-1] if groups else None
        lm = re.match(r"^(.*?)(\d+)$", last) if last else None
        if m and lm and m.group(1) == lm.group(1) and int(m.group(2)) == int(lm.group(2)) + 1:
            groups[-1].append(label)
        else:
            groups.append([label])
    return ", ".join(g[0] if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in groups)


def parse_topo_m(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m``: the matrix, the affinity columns and the NIC legend.

    Accepts the tab-separated original (with its ANSI-underlined header and empty cells) and what people paste:
    tabs turned into spaces (a terminal's copy keeps each cell on a tab stop, so blank cells are still told
    apart), the prompt and command line above it, blank lines between rows, an indent on every line. Stops at
    ``Legend:``.

    Damage in the text is named, not guessed at, and does not cost the rest of the matrix: a cell that is no
    path label (``PH0-115``, a label run into the next value) and what follows it in its row, a value that
    cannot be an affinity (a paste cut at the left), a row whose device has no column (a paste cut at the right)
    go into ``damaged`` ({"GPU0-NIC7": why, "GPU0 CPU Affinity": why, ...}) and are left out. Rows that stop short
    of the header (a paste cut after its first rows) leave the matrix not whole: ``damaged["matrix"]`` says after
    which row of how many, and the rows there are read against the whole header. Raises ValueError, naming the
    line, on anything that is not topo -m output.
    """
    if not text or not text.strip():
        raise ValueError("nvidia-smi topo -m: empty text (expected a header line with GPU0 and a matrix)")
    lines = [ANSI.sub("", line).rstrip("\r") for line in text.splitlines()]
    header_at = _find_header(lines)
    rows, indent, end = _read_rows(lines, header_at)
    if not rows:
        raise ValueError(
            f"nvidia-smi topo -m line {header_at + 2}: expected matrix rows (GPU0 ...) after the header"
        )
    row_labels = [label for _, label, _, _ in rows]
    devices, trailing = _columns(lines[header_at], indent, row_labels)
    if "GPU0" not in devices or "GPU0" not in row_labels:
        raise ValueError(f"nvidia-smi topo -m line {header_at + 1}: header has GPU0 but no row labelled GPU0")
    topo = TopoMatrix(devices=devices, matrix={})
    if cut := _rows_cut(devices, row_labels):
        topo.damaged[MATRIX_CUT] = cut
    for name in trailing:
        if name in _AFFINITY_COLUMNS:
            topo.columns_present.add(_AFFINITY_COLUMNS[name])
        else:
            topo.other_columns[name] = {}
    for row in rows:
        _read_row(topo, row, trailing)
    _read_nic_legend(topo, lines[end:])
    return topo


def _line_kind(line: str) -> str:
    """What one line of a topo -m paste is: "blank", "legend" (where the matrix ends), "noise" (a prompt, a command
    line, a fence: see formats.paste) or "text" (the header or a matrix row)."""
    if not line.strip():
        return "blank"
    if line.strip() == "Legend:":
        return "legend"
    return "noise" if paste_noise(line) else "text"


def _find_header(lines: list[str]) -> int:
    """Index of the header line: the first text line with a GPU0 column before ``Legend:``."""
    for i, line in enumerate(lines):
        kind = _line_kind(line)
        if kind == "legend":
            break
        if kind == "text" and "GPU0" in _header_columns(line):
            return i
    first = next((line for line in lines if line.strip() and not paste_noise(line)), "")
    raise ValueError(
        "nvidia-smi topo -m: no header line with a GPU0 column before 'Legend:' "
        f"(first line is {first[:80]!r}); this does not look like topo -m output"
    )


_Row = tuple[int, str, list[str], bool]  # (line number, label, cells after the label, tabbed)


def _read_rows(lines: list[str], header_at: int) -> tuple[list[_Row], int | None, int]:
    """The data rows after the header, where their labels start (the first tab stop of a terminal's copy), and the
    index where the matrix ends: at ``Legend:`` or at a pasted line that is not output. Blank lines between rows
    are skipped: pasted into a web page, each row often becomes a paragraph."""
    rows: list[_Row] = []
    indent: int | None = None
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        kind = _line_kind(line)
        if kind == "legend" or (kind == "noise" and rows):
            return rows, indent, i
        if kind != "text":
            continue
        if indent is None:
            indent = len(line) - len(line.lstrip(" "))
        cells, tabbed = _row_cells(line, indent)
        if not cells or not cells[0]:
            raise ValueError(f"nvidia-smi topo -m line {i + 1}: row without a device label: {line!r}")
        rows.append((i + 1, cells[0], cells[1:], tabbed))
    return rows, indent, len(lines)


def _columns(header: str, indent: int | None, row_labels: list[str]) -> tuple[list[str], list[str]]:
    """(device columns, trailing columns) of the header. The device columns are every name before the affinity
    columns that has a row or is named like a device (a paste cut after its first rows still has every column in
    its header)."""
    names = _header_columns(header)
    if "\t" not in header and indent is not None and (cells := _untab(header, indent)) is not None:
        names = [cell for cell in cells if cell]  # column names with single spaces stay whole ("CPU Affinity")
    n_dev = 0
    for name in names:
        if name in _AFFINITY_COLUMNS or not (name in row_labels or _DEVICE_NAME.match(name)):
            break
        n_dev += 1
    return names[:n_dev], names[n_dev:]


def _read_row(topo: TopoMatrix, row: _Row, trailing: list[str]) -> None:
    """One data row into ``topo``: its matrix cells, then its trailing (affinity) cells unless a cell was damaged."""
    lineno, label, rest, tabbed = row
    devices = topo.devices
    where = f"nvidia-smi topo -m line {lineno} ({label})"
    if label not in devices:
        if GPU_LABEL.match(label) or NIC_LABEL.match(label) or all(
                _MATRIX_LABEL.match(cell) for cell in rest if cell):
            topo.damaged[label] = (f"line {lineno}: row {label} has no column in the header (the paste was "
                                   "cut at the right, or the header at the left); its row is not read")
            return
        raise ValueError(f"{where}: row label {label!r} is not one of the header's devices {devices}")
    if label in topo.matrix:
        raise ValueError(f"{where}: second row for {label}")
    cells = rest[:len(devices)]
    if len(cells) < len(devices):
        raise ValueError(f"{where}: {len(cells)} matrix cells, expected {len(devices)} ({', '.join(devices)})")
    _read_matrix_cells(topo, lineno, label, cells, trailing, where)
    if any(key.startswith(f"{label}-") for key in topo.damaged):
        return
    _read_trailing(topo, lineno, label, _assign_trailing(rest[len(devices):], trailing, tabbed=tabbed, where=where))


def _read_matrix_cells(topo: TopoMatrix, lineno: int, label: str, cells: list[str], trailing: list[str],
                       where: str) -> None:
    """The row's path labels; at a label run into the next cell, that cell and all after it are damaged (the
    lost separator shifts them), none of them read."""
    topo.matrix[label] = {}
    for k, (col, cell) in enumerate(zip(topo.devices, cells, strict=True)):
        if _MATRIX_LABEL.match(cell):
            topo.matrix[label][col] = cell
            continue
        if not _GLUED.match(cell):
            raise ValueError(
                f"{where}, column {col}: {cell!r} is not a path label (expected X, NV#, PIX, PXB, PHB, "
                "NODE, SYS or SOC)"
            )
        topo.damaged[f"{label}-{col}"] = (f"line {lineno}: {cell!r} is a path label run into the next cell "
                                         "(its separator lost, as nvidia-smi prints on some machines)")
        for later in topo.devices[k + 1:]:
            topo.damaged[f"{label}-{later}"] = f"line {lineno}: after the damaged cell {label}-{col}"
        for name in trailing:
            topo.damaged[f"{label} {name}"] = f"line {lineno}: after the damaged cell {label}-{col}"
        return


def _read_trailing(topo: TopoMatrix, lineno: int, label: str, values: dict[str, str]) -> None:
    """The row's affinity values (a value no affinity can be is damaged, not read) and unknown trailing columns."""
    for name, value in values.items():
        pattern = _AFFINITY_VALUE.get(name)
        if pattern is not None and not pattern.match(value):
            topo.damaged[f"{label} {name}"] = (f"line {lineno}: {name} {value!r} is not a CPU or NUMA list "
                                               "(cut or run together in the paste); not read")
        elif name in _AFFINITY_COLUMNS:
            getattr(topo, _AFFINITY_COLUMNS[name])[label] = value
        else:
            topo.other_columns[name][label] = value


def _read_nic_legend(topo: TopoMatrix, lines: list[str]) -> None:
    """The NIC legend after the Legend section: ``NIC Legend:`` then ``  NIC0: mlx5_0`` lines, to the first line
    that is no entry."""
    in_legend = False
    for line in lines:
        stripped = line.strip()
        if stripped == "NIC Legend:":
            in_legend = True
            topo.columns_present.add("nic_names")
            continue
        if not in_legend or not stripped:
            continue
        m = _NIC_LEGEND_ENTRY.match(line)
        if not m:
            break
        topo.nic_names[m.group(1)] = m.group(2)
