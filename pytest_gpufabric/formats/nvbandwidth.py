"""What NVIDIA nvbandwidth (github.com/NVIDIA/nvbandwidth) printed, as text or as ``-j`` JSON, read into one shape.

nvbandwidth is the copy-engine and SM bandwidth matrix NVIDIA asks for when a link looks slow, so its output is
evidence an acceptance run must be able to judge as pasted. The text layout (``output.cpp``, ``inline_common.h``):

    nvbandwidth Version: v0.7
    Built from Git version: v0.7
    CUDA Runtime Version: 12080            (v0.10: "13.3 (13030)")
    CUDA Driver Version: 12080             (v0.10: "CUDA Driver Version (API): 13.3 (13030)")
    Driver Version: 570.124.06
    Device 0: NVIDIA A100-SXM4-80GB (00000000:34:00)      (multinode: "Process 0 (host): device 0: ...")
    Running device_to_device_memcpy_read_ce.
    memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
               0         1
     0       N/A    276.07
     1    276.19       N/A
    SUM device_to_device_memcpy_read_ce 552.26
    COEFFICIENT_OF_VARIATION device_to_device_memcpy_read_ce 0.01     (v0.10)

A test that cannot run on the machine prints ``Waived: `` in place of all of that (its name is not printed), an
error prints its message lines, and bidirectional device-to-device tests of v0.6 and later print three matrices
(``Read1``, ``Read2``, ``Total``) under one ``Running`` line, each with its own ``SUM`` key. ``-j`` prints
``{"nvbandwidth": {"version", "CUDA Runtime Version", "Driver Version", "testcases": [{"name", "status",
"bandwidth_description", "bandwidth_matrix": [["12.3964", "N/A"]], "sum"}]}}`` with cells as strings.

Nothing is guessed: a cell that is not a finite number is None and listed, a matrix cut short keeps the rows it has
(the missing cells None) and its test is "incomplete", never "passed". Text with no nvbandwidth line at all is
refused with ValueError naming its first line.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pytest_gpufabric.formats.dcgm_diag import CUT_ARRAY, CUT_OBJECT, read_cut_json
from pytest_gpufabric.formats.paste import ANSI, paste_noise

__all__ = ["parse_nvbandwidth"]

_VERSION = re.compile(r"^nvbandwidth Version:\s*(?P<v>\S+)\s*$")
_GIT = re.compile(r"^Built from Git version:\s*(?P<v>.*?)\s*$")
_MPI = re.compile(r"^MPI version:\s*(?P<v>.*?)\s*$")
_RUNTIME = re.compile(r"^CUDA Runtime Version:\s*(?P<v>.*?)\s*$")
_CUDA_DRIVER = re.compile(r"^CUDA Driver Version(?: \(API\))?:\s*(?P<v>.*?)\s*$")
_DRIVER = re.compile(r"^Driver Version:\s*(?P<v>\S+)\s*$")
_PCI = r"[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F.]+"
_DEVICE = re.compile(rf"^Device (?P<index>\d+):\s*(?P<name>.*?)(?:\s+\((?P<pci>{_PCI})\))?\s*$")
_PROCESS = re.compile(r"^Process (?P<process>\d+) \((?P<host>[^)]*)\): device (?P<index>\d+):\s*(?P<name>.*?)"
                      rf"(?:\s+\((?P<pci>{_PCI})\))?\s*$")
_RUNNING = re.compile(r"^Running (?P<name>[A-Za-z]\w*)\.\s*$")
#: "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "memory latency SM CPU(row) <-> GPU(column) (ns)",
#: "memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)"
_DESCRIPTION = re.compile(r"^(?P<what>.*?)\s*(?P<row>[A-Za-z]+)\(row\)\s*(?P<arrow><->|->|<-)\s*(?P<col>[A-Za-z]+)"
                          r"\(column\)\s*(?P<label>[A-Za-z]\w*)?\s*(?:bandwidth\s*)?\((?P<unit>[^()]+)\)\s*$")
_SUM = re.compile(r"^(?:SUM|&&&& PERF) (?P<key>\S+) (?P<value>\S+?)(?:\s*(?:GB/s|ns|us))?\s*$")
_STAT = re.compile(r"^(?P<stat>COEFFICIENT_OF_VARIATION|MIN|MAX|AVG) (?P<key>\S+) (?P<value>\S+)\s*$")
_STATUS_LINE = re.compile(r"^(?P<status>Waived|Error|Not Found|Passed):\s*(?P<msg>.*?)\s*$")
_NOTE = re.compile(r"^(?:NOTE: |Additional system-specific tuning|Performance can vary with|nvbandwidth CLI:)")
#: the command line that started it, possibly after a shell prompt ("root@h:~# ./nvbandwidth -t x")
_COMMAND = re.compile(r"^(?:\S*[$#%>]\s*(?:sudo\s+)?(?:\S*/)?nvbandwidth\b|(?:sudo\s+)?\S*/nvbandwidth\b"
                      r"|(?:sudo\s+)?nvbandwidth(?:\s+-|\s*$))")
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_JSON_STATUS = {"passed": "passed", "waived": "waived", "error": "error", "not found": "not found",
                "running": "incomplete"}


def _finite(token: str) -> float | None:
    if not _NUMBER.match(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def _cuda_version(value: str) -> int | None:
    """``12040`` or ``13.3 (13030)`` -> the integer CUDA reports (12040, 13030)."""
    m = re.search(r"\((\d+)\)\s*$", value)
    if m:
        return int(m.group(1))
    return int(value) if value.isdigit() else None


class _Matrix:
    def __init__(self, description: str, lineno: int) -> None:
        m = _DESCRIPTION.match(description)
        self.description = description
        self.lineno = lineno
        self.row_label = m.group("row") if m else None
        self.column_label = m.group("col") if m else None
        self.direction = m.group("arrow") if m else None
        self.label = m.group("label") if m and m.group("label") else None
        self.unit = m.group("unit").strip() if m else None
        self.columns: list[str] | None = None
        self.row_names: list[str] = []
        self.rows: list[list[float | None]] = []
        self.sum: float | None = None
        self.sum_key: str | None = None
        self.sum_seen = False
        self.stats: dict[str, float | None] = {}
        self.cut = False

    def result(self) -> dict[str, Any]:
        return {"description": self.description, "label": self.label, "unit": self.unit,
                "row_label": self.row_label, "column_label": self.column_label, "direction": self.direction,
                "columns": self.columns or [], "rows": self.row_names, "matrix": self.rows, "sum": self.sum,
                "sum_key": self.sum_key, **({"stats": self.stats} if self.stats else {})}


class _Testcase:
    def __init__(self, name: str | None, lineno: int) -> None:
        self.name = name
        self.lineno = lineno
        self.status: str | None = None  # "waived", "error", ... when printed
        self.messages: list[str] = []
        self.matrices: list[_Matrix] = []

    def _status(self, unreadable: list[str], ended_here: bool) -> str:
        """The printed status, else "passed" when every matrix and its SUM were read whole; else "error" (only
        messages) or "incomplete", with what is missing added to ``unreadable``."""
        if self.status is not None:
            return self.status
        if self.messages and not self.matrices:
            return "error"
        if self.matrices and all(m.sum_seen and not m.cut and m.rows for m in self.matrices):
            return "passed"
        what = self.name or "a test"
        if not self.matrices:
            unreadable.append(f"line {self.lineno}: {what}: no result was printed after 'Running' "
                              + ("(the text ends there)" if ended_here else "(cut or failed)"))
        for m in self.matrices:
            if not m.sum_seen:
                unreadable.append(f"line {m.lineno}: {what}: the SUM line of matrix {m.description!r} "
                                  "is missing (the text was cut)")
        return "incomplete"

    def result(self, unreadable: list[str], ended_here: bool) -> dict[str, Any]:
        status = self._status(unreadable, ended_here)
        primary = next((m for m in self.matrices if (m.label or "").lower() == "total"),
                       self.matrices[0] if self.matrices else None)
        out: dict[str, Any] = {"name": self.name, "status": status,
                               "message": "\n".join(self.messages) if self.messages else None,
                               "unit": primary.unit if primary else None,
                               "row_label": primary.row_label if primary else None,
                               "column_label": primary.column_label if primary else None,
                               "description": primary.description if primary else None,
                               "matrix": primary.rows if primary else [],
                               "sum": primary.sum if primary else None}
        if primary and primary.stats:
            out["stats"] = primary.stats
        if len(self.matrices) > 1:
            out["matrices"] = [m.result() for m in self.matrices]
        return out


#: What a line outside a matrix can be, tried in this order; the first that matches names the line's kind.
_LINE_KINDS = (("version", _VERSION), ("git", _GIT), ("mpi", _MPI), ("runtime", _RUNTIME),
               ("cuda_driver", _CUDA_DRIVER), ("driver", _DRIVER), ("process", _PROCESS), ("device", _DEVICE),
               ("note", _NOTE), ("running", _RUNNING), ("description", _DESCRIPTION), ("sum", _SUM),
               ("stat", _STAT), ("status", _STATUS_LINE))
#: Banner lines that set one field of the result: kind -> (key, how the value is read).
_BANNER_FIELDS = {"version": ("version", str), "git": ("git_version", lambda v: v or None),
                  "mpi": ("mpi_version", str), "runtime": ("cuda_runtime", _cuda_version),
                  "cuda_driver": ("cuda_driver", _cuda_version), "driver": ("driver", str)}


def _classify(line: str, *, in_test: bool) -> tuple[str, re.Match[str] | None]:
    """The kind of a line outside a matrix and its match; "other" when nothing matches. A matrix description
    counts only inside a test (after its ``Running`` line)."""
    for kind, pattern in _LINE_KINDS:
        if kind == "description" and not in_test:
            continue
        if m := pattern.match(line):
            return kind, m
    return "other", None


def _is_row(line: str, tokens: list[str]) -> bool:
    """A matrix row: a row name then cells that are numbers or N/A, and no line of another kind."""
    return (tokens[0] != "Running" and all(t == "N/A" or _NUMBER.match(t) for t in tokens[1:])
            and not _DESCRIPTION.match(line) and not _STATUS_LINE.match(line))


class _TextReader:
    """One pass over nvbandwidth's text: each line is classified, then handled by the method for its kind."""

    def __init__(self, text: str) -> None:
        self.out: dict[str, Any] = {"tool": "nvbandwidth", "version": None, "format": "text", "git_version": None,
                                    "cuda_runtime": None, "cuda_driver": None, "driver": None,
                                    "mpi_version": None, "devices": [], "testcases": [], "unreadable": []}
        self.unreadable: list[str] = self.out["unreadable"]
        self.tests: list[_Testcase] = []
        self.test: _Testcase | None = None
        self.matrix: _Matrix | None = None
        self.recognised = 0  # lines read as nvbandwidth output
        self.first_line: tuple[int, str] | None = None
        self.cut_last_line = bool(text) and not text.endswith(("\n", "\r"))
        self.at_cut = False  # this line is the last and the text ends inside it

    def read(self, lineno: int, raw: str, last: bool) -> None:
        line = ANSI.sub("", raw).strip()
        if not line:
            return
        if self.first_line is None:
            self.first_line = (lineno, line)
        if paste_noise(raw) is not None or _COMMAND.match(line):
            return
        self.at_cut = last and self.cut_last_line
        if self.matrix is not None and self._matrix_line(line, lineno):
            self.recognised += 1
            return
        kind, m = _classify(line, in_test=self.test is not None)
        if kind in _BANNER_FIELDS:
            key, read = _BANNER_FIELDS[kind]
            self.out[key] = read(m.group("v"))
        elif not getattr(self, f"_on_{kind}")(m, line, lineno):
            return
        self.recognised += 1

    def _matrix_line(self, line: str, lineno: int) -> bool:
        """Read ``line`` as the current matrix's column header or one of its rows; False when it is neither."""
        matrix = self.matrix
        if (matrix.columns is not None and matrix.sum_seen) or _SUM.match(line) or _STAT.match(line):
            return False
        tokens = line.split()
        if matrix.columns is None:
            if all(re.fullmatch(r"\w+", t) for t in tokens):
                matrix.columns = tokens
                return True
            self.unreadable.append(f"line {lineno}: the column header of {matrix.description!r} cannot be read")
            matrix.cut = True
            self.matrix = None
            return False
        if not _is_row(line, tokens):
            return False
        _add_row(matrix, tokens, lineno, self.at_cut, self.unreadable, self.test)
        return True

    def _on_process(self, m: re.Match[str], line: str, lineno: int) -> bool:
        self.out["devices"].append({"index": int(m.group("index")), "name": m.group("name"),
                                    "pci_bus_id": m.group("pci"), "process": int(m.group("process")),
                                    "host": m.group("host")})
        return True

    def _on_device(self, m: re.Match[str], line: str, lineno: int) -> bool:
        self.out["devices"].append({"index": int(m.group("index")), "name": m.group("name"),
                                    "pci_bus_id": m.group("pci")})
        return True

    def _on_note(self, m: re.Match[str], line: str, lineno: int) -> bool:
        return True

    def _on_running(self, m: re.Match[str], line: str, lineno: int) -> bool:
        self.test = _Testcase(m.group("name"), lineno)
        self.tests.append(self.test)
        self.matrix = None
        return True

    def _on_description(self, m: re.Match[str], line: str, lineno: int) -> bool:
        self.matrix = _Matrix(line, lineno)
        self.test.matrices.append(self.matrix)
        return True

    def _on_sum(self, m: re.Match[str], line: str, lineno: int) -> bool:
        _take_sum(m.group("key"), m.group("value"), self.test, lineno, self.unreadable, self.at_cut)
        self.matrix = None
        return True

    def _on_stat(self, m: re.Match[str], line: str, lineno: int) -> bool:
        target = _matrix_for(self.test, m.group("key"))
        value = _finite(m.group("value"))
        if target is not None:
            target.stats[m.group("stat").lower()] = value
        return True

    def _on_status(self, m: re.Match[str], line: str, lineno: int) -> bool:
        status = m.group("status").lower()
        test = self.test
        if test is None or test.status is not None or test.matrices:
            # "Waived: " stands alone: nvbandwidth does not print the name of a test it waives
            test = _Testcase(None, lineno)
            self.tests.append(test)
            self.test = None
        test.status = status
        if m.group("msg"):
            test.messages.append(m.group("msg"))
        self.matrix = None
        return True

    def _on_other(self, m: None, line: str, lineno: int) -> bool:
        if self.at_cut:
            self.unreadable.append(f"line {lineno}: the text ends inside this line: {line[:80]!r}")
        elif self.test is not None and not self.test.matrices and self.test.status is None:
            self.test.messages.append(line)  # an error nvbandwidth printed while the test ran
        else:
            if self.recognised:
                self.unreadable.append(f"line {lineno}: not nvbandwidth output: {line[:80]!r}")
            return False
        return True

    def finish(self, n_lines: int) -> dict[str, Any]:
        first_line = self.first_line
        if not self.recognised:
            if first_line is None:
                raise ValueError("no nvbandwidth output: the text is empty")
            raise ValueError(f"line {first_line[0]}: not nvbandwidth output (no version, device, 'Running' or "
                             f"matrix line): {first_line[1][:80]!r}")
        self.out["testcases"] = [t.result(self.unreadable, t is self.tests[-1]) for t in self.tests]
        if not self.tests:
            if self.out["version"] is None:
                raise ValueError(f"line {first_line[0] if first_line else 1}: no nvbandwidth version and no test "
                                 "result")
            self.unreadable.append(f"line {n_lines}: the text ends before any test result (cut after the header)")
        return self.out


def _parse_text(text: str) -> dict[str, Any]:
    reader = _TextReader(text)
    lines = text.splitlines()
    for index, raw in enumerate(lines):
        reader.read(index + 1, raw, index == len(lines) - 1)
    return reader.finish(len(lines))


def _add_row(matrix: _Matrix, tokens: list[str], lineno: int, maybe_cut: bool, unreadable: list[str],
             test: _Testcase | None) -> None:
    width = len(matrix.columns or [])
    cells: list[float | None] = []
    values = tokens[1:]
    what = test.name if test is not None and test.name else "a test"
    for k, token in enumerate(values[:width]):
        if maybe_cut and k == len(values) - 1:
            unreadable.append(f"line {lineno}: {what}: the last cell {token!r} may have been cut (the text ends "
                              "mid-line)")
            matrix.cut = True
            cells.append(None)
            continue
        value = None if token == "N/A" else _finite(token)
        if value is None and token != "N/A":
            unreadable.append(f"line {lineno}: {what}: cell {token!r} is not a finite number")
        cells.append(value)
    if len(values) > width:
        unreadable.append(f"line {lineno}: {what}: row {tokens[0]} has {len(values)} cells for {width} columns")
        matrix.cut = True
    if len(cells) < width:
        unreadable.append(f"line {lineno}: {what}: row {tokens[0]} has {len(cells)} of {width} cells (cut)")
        matrix.cut = True
        cells += [None] * (width - len(cells))
    matrix.row_names.append(tokens[0])
    matrix.rows.append(cells)


def _matrix_for(test: _Testcase | None, key: str) -> _Matrix | None:
    if test is None or not test.matrices:
        return None
    for m in test.matrices:
        if m.label and key.lower().endswith("_" + m.label.lower()):
            return m
    return next((m for m in reversed(test.matrices) if not m.sum_seen), test.matrices[-1])


def _take_sum(key: str, value: str, test: _Testcase | None, lineno: int, unreadable: list[str],
              maybe_cut: bool) -> None:
    target = _matrix_for(test, key)
    if target is None:
        unreadable.append(f"line {lineno}: SUM {key} belongs to no matrix that was read")
        return
    target.sum_seen = True
    target.sum_key = key
    if maybe_cut:
        unreadable.append(f"line {lineno}: SUM {key} {value!r} may have been cut (the text ends mid-line)")
        target.sum = None
        target.cut = True
        return
    target.sum = _finite(value)
    if target.sum is None:
        unreadable.append(f"line {lineno}: SUM {key} {value!r} is not a finite number")


# --- JSON -----------------------------------------------------------------------------------------------------------


def _parse_json(text: str) -> dict[str, Any]:
    doc, unreadable = read_cut_json(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("nvbandwidth"), dict):
        raise ValueError("line 1: the JSON document is not nvbandwidth -j output (no 'nvbandwidth' object)")
    body = doc["nvbandwidth"]
    devices = []
    for entry in body.get("GPU Device list") or []:
        m = re.match(r"^(\d+):\s*(.*?)(?:\s+\(([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F.]+)\))?(?::\s*\((.*)\))?$",
                     entry) if isinstance(entry, str) else None
        if m:
            devices.append({"index": int(m.group(1)), "name": m.group(2), "pci_bus_id": m.group(3),
                            **({"host": m.group(4)} if m.group(4) else {})})
    runtime = body.get("CUDA Runtime Version")
    out: dict[str, Any] = {
        "tool": "nvbandwidth", "version": body.get("version") if isinstance(body.get("version"), str) else None,
        "format": "json", "git_version": body.get("git_version") or None,
        "cuda_runtime": runtime if isinstance(runtime, int) and not isinstance(runtime, bool) else None,
        "cuda_driver": None,
        "driver": body.get("Driver Version") if isinstance(body.get("Driver Version"), str) else None,
        "mpi_version": None, "devices": devices, "testcases": [], "unreadable": unreadable}
    if isinstance(body.get("error"), str):
        out["error"] = body["error"]
    if isinstance(body.get("warning"), str):
        out["warning"] = body["warning"]
    cases = body.get("testcases")
    if not isinstance(cases, list):
        if CUT_OBJECT not in body:
            unreadable.append("the document has no testcases")
        return out
    for case in cases:
        if case == CUT_ARRAY:
            continue
        if not isinstance(case, dict):
            unreadable.append("a testcase is not an object")
            continue
        out["testcases"].append(_json_case(case, unreadable))
    return out


def _json_case(case: dict[str, Any], unreadable: list[str]) -> dict[str, Any]:
    name = case.get("name") if isinstance(case.get("name"), str) else None
    cut = CUT_OBJECT in case
    raw_status = case.get("status")
    status = _JSON_STATUS.get(raw_status.lower(), raw_status.lower()) if isinstance(raw_status, str) else None
    if isinstance(case.get("error"), str):
        status = "error"
    description = case.get("bandwidth_description") if isinstance(case.get("bandwidth_description"), str) else None
    m = _DESCRIPTION.match(description.strip()) if description else None
    what = name or "a testcase"
    matrix, matrix_cut = _json_matrix(case.get("bandwidth_matrix"), what, unreadable)
    cut = cut or matrix_cut
    total = case.get("sum")
    total_value = float(total) if isinstance(total, (int, float)) and not isinstance(total, bool) \
        and math.isfinite(total) else None
    if total is not None and total_value is None:
        unreadable.append(f"{what}: sum {total!r} is not a finite number")
    if cut:
        unreadable.append(f"{what}: the testcase's entry was cut off")
        if status in (None, "passed"):
            status = "incomplete"
    if status is None:
        status = "incomplete"
    stats = {k: (float(case[k]) if isinstance(case[k], (int, float)) and not isinstance(case[k], bool)
                 and math.isfinite(case[k]) else None) for k in ("min", "max", "average") if k in case}
    out: dict[str, Any] = {"name": name, "status": status,
                           "message": case["error"] if isinstance(case.get("error"), str) else None,
                           "unit": m.group("unit").strip() if m else None,
                           "row_label": m.group("row") if m else None, "column_label": m.group("col") if m else None,
                           "description": description.strip() if description else None, "matrix": matrix,
                           "sum": total_value}
    if stats:
        out["stats"] = stats
    return out


def _json_matrix(rows: object, what: str, unreadable: list[str]) -> tuple[list[list[float | None]], bool]:
    """``bandwidth_matrix`` (cells as strings) as finite floats or None, and whether the cut reached it."""
    matrix: list[list[float | None]] = []
    cut = False
    if not isinstance(rows, list):
        return matrix, cut
    width = None
    for r, row in enumerate(rows):
        if row == CUT_ARRAY:
            cut = True
            continue
        if not isinstance(row, list):
            unreadable.append(f"{what}: matrix row {r} is not a list")
            cut = True
            continue
        cells: list[float | None] = []
        for cell in row:
            if cell == CUT_ARRAY:
                continue
            if cell == "N/A":
                cells.append(None)
                continue
            value = _json_cell(cell)
            if value is None:
                unreadable.append(f"{what}: matrix cell {cell!r} in row {r} is not a finite number")
            cells.append(value)
        width = width or len(cells)
        if CUT_ARRAY in row:
            unreadable.append(f"{what}: matrix row {r} was cut after {len(cells)} cells")
            cut = True
            cells += [None] * max(0, (width or 0) - len(cells))
        matrix.append(cells)
    return matrix, cut


def _json_cell(cell: object) -> float | None:
    if isinstance(cell, str):
        return _finite(cell.strip())
    if isinstance(cell, (int, float)) and not isinstance(cell, bool) and math.isfinite(cell):
        return float(cell)
    return None


# --- entry point ----------------------------------------------------------------------------------------------------


def parse_nvbandwidth(text: str) -> dict[str, Any]:
    """nvbandwidth output (text of v0.1 to v0.10, or ``-j`` JSON) as one dict.

    ``{"tool": "nvbandwidth", "version": "v0.7" | None, "format": "text" | "json", "git_version", "cuda_runtime":
    12080 | None, "cuda_driver": int | None, "driver": "570.124.06" | None, "mpi_version", "devices": [{"index",
    "name", "pci_bus_id"[, "process", "host"]}], "testcases": [...], "unreadable": [...]}``. A testcase is
    ``{"name": "host_to_device_memcpy_ce" | None (a waived test's name is not printed), "status": "passed" |
    "waived" | "error" | "not found" | "incomplete", "message", "unit": "GB/s" | "ns", "row_label": "CPU",
    "column_label": "GPU", "description", "matrix": [[float | None]], "sum": float | None}``, plus ``matrices``
    (every matrix, with its ``label``) for tests that print several. Cells are finite floats or None (N/A, or not
    readable: then listed in ``unreadable``). A text test is "passed" only when its matrix and its SUM line were
    read whole. Raises ValueError, naming the first line, for text that is not nvbandwidth output.
    """
    text = ANSI.sub("", text)
    offset = 0
    for raw in text.splitlines(keepends=True):
        line = raw.strip()
        if line and paste_noise(raw) is None and not _COMMAND.match(line) and not line.startswith("WARNING"):
            if line.startswith("{"):
                return _parse_json(text[offset:])
            break
        offset += len(raw)
    return _parse_text(text)
