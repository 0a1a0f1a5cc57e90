"""The result tables that nccl-tests (github.com/NVIDIA/nccl-tests) prints.

nccl-tests is what vendors and cluster operators quote bus bandwidth from, so an acceptance run must be able to
judge its output as printed, including output saved from a real job: the table is then interleaved with NCCL's
own log (``host:pid:tid [dev] NCCL INFO ...``, which shares the test's stdout buffer and can land in the middle
of a row), UCX log lines, MPI launcher chatter, and per-line launcher prefixes (Open MPI ``--tag-output``,
``srun --label``). The parser keeps what is table and skips the rest, but never guesses numbers: a data row it
cannot read is an error with its line number, not a silently dropped size.

The layout it reads is the one in nccl-tests' ``src/common.cu`` / ``src/util.cu`` (2.13 and later):

    # nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 2 minBytes 1048576 maxBytes 4294967296 step: 4(factor) ...
    #  Rank  0 Group  0 Pid   1308 on         vm device  0 [0000:00:06] NVIDIA H200
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw ...
       268435456      67108864     float     sum      -1   892.74  300.69  300.69       0   892.99  300.60 ...
    # Avg bus bandwidth    : 232.869
    # Collective test concluded: all_reduce_perf

Older builds (before the ``root`` and ``#wrong`` columns, when the last column was ``error``, a maximum deviation
rather than a count) are refused with a message instead of being read into the wrong fields.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .nccl_died import WARN, fatal_at, unfinished
from .nccl_ranks import rank_count

# the row checks, imported from here by checks/bandwidth.py and reference_judge.py
from .nccl_rows import bus_factor, group_problems, row_groups, row_problems, wrong_count  # noqa: F401

#: Columns every data row starts with, in this order; then, per test and version, ``redop`` and/or ``root``.
PREAMBLE = ("size", "count", "type", "redop", "root")
#: NCCL 1's test programs (2015-2018) and nccl-tests 1.0 named them so; read as the names above.
_OLD_NAMES = {"bytes": "size", "N": "count", "op": "redop"}
#: The labels nccl-tests uses for the time column (``-C 1`` reports CPU time).
TIME_LABELS = ("time", "cputime")
#: The last column of a group: ``#wrong`` (a count, 2.13 and later), ``error`` (the largest deviation from the
#: expected result, 2.0 to 2.12), ``res`` (the same, NCCL 1's tests).
CHECK_LABELS = ("#wrong", "error", "res")
#: What one out-of-place or in-place group holds when the header gives no other layout.
DEFAULT_GROUP = ("time", "algbw", "busbw", "#wrong")
# Where fields end when no header line was seen, from nccl-tests' printf widths: "%12li  %12li  %8s  %6s  %6i"
# then "  %7s  %6s  %6s  %6g" twice (#wrong was "%5li" in some releases, hence 84 and 85, 117 and 118).
_DEFAULT_ENDS = [12, 26, 36, 44, 52, 61, 69, 77, 84, 85, 94, 102, 110, 117, 118]
_DEFAULT_OOP_END, _DEFAULT_IP_END = 85, 118

# Per-line prefixes that launchers put before the program's own text: Open MPI --tag-output (optionally with
# --timestamp-output before it) and srun --label. Data rows never start with either, so stripping is safe.
_LAUNCHER_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[\d+,\d+\]<std(?:out|err)>:"
    r"|^\s*\d+: "
)
# NCCL's logger: "host:pid:tid [cudaDev] NCCL INFO ...", warnings add "file.cc:line " before "NCCL WARN".
# It writes to the same stdout FILE* as nccl-tests, so its lines can be spliced into a half-printed row.
_NCCL_LOG = re.compile(r"[^\s:]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL ")
# A data row starts with size, count and a type name; whatever follows is then read or rejected, never skipped.
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z]\w*(?:\s|$)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_NTHREAD = re.compile(r"^#\s*nThread\s+\d+\s+nGpus\s+\d+")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_RANK = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^\d{2}:\d{2}:\d{2}$")

# Start-of-run markers in the order nccl-tests prints them: a marker at or before the latest one seen opens a new run.
_MARK_VERSION, _MARK_STARTING, _MARK_NTHREAD, _MARK_TABLE = range(4)


class _Layout:
    """Where the fields of a data row are, as told by the table's column-header line.

    Data rows are printed with the same right-aligned widths as the header, so the header's label end columns
    also say where a row's fields end: that is how a row that holds only one group is told to be in-place
    (nccl-tests prints blanks for out-of-place in trace-replay mode) or out-of-place, which of ``redop`` and
    ``root`` a row left blank, and where NCCL's log text starts when it was spliced into a row.

    The columns changed over the years (NVIDIA/nccl-tests history): 2.13 and later print ``size count type
    redop root`` for every test and ``#wrong``; 2.0 to 2.12 print ``redop`` and ``root`` only for the tests that
    have them (all_gather: neither, broadcast: root, reduce: both) and ``error``, a maximum deviation; NCCL 1's
    tests print ``bytes N type op`` and ``res``, with the time in milliseconds.
    """

    def __init__(self, preamble: tuple[str, ...] = PREAMBLE, group: tuple[str, ...] = DEFAULT_GROUP,
                 ends: list[int] | None = None, oop_end: int | None = None, ip_end: int | None = None,
                 timestamp: bool = False, time_scale: float = 1.0) -> None:
        """Without arguments: nccl-tests' own printf widths (2.13 and later), for a table whose header was cut."""
        self.preamble = preamble
        self.group = group
        self.ends = ends if ends is not None else _DEFAULT_ENDS
        self.oop_end = oop_end if oop_end is not None else _DEFAULT_OOP_END
        self.ip_end = ip_end if ip_end is not None else _DEFAULT_IP_END
        self.timestamp = timestamp
        self.time_scale = time_scale  # to microseconds

    @classmethod
    def from_header(cls, line: str, lineno: int) -> _Layout:
        hashes = len(line) - len(line.lstrip().lstrip("#"))
        labels = list(re.finditer(r"\S+", " " * hashes + line[hashes:]))
        names = [_OLD_NAMES.get(m.group(), m.group()) for m in labels]
        ends = [m.end() for m in labels]
        timestamp = names[-1] == "timestamp"
        first_time = next((i for i, name in enumerate(names) if name in TIME_LABELS), None)
        preamble = tuple(names[:first_time]) if first_time is not None else ()
        if (preamble[:3] != PREAMBLE[:3] or len(set(preamble[3:])) != len(preamble[3:])
                or not set(preamble[3:]) <= set(PREAMBLE[3:])):
            raise ValueError(
                f"line {lineno}: column layout {' '.join(names)!r} is not one of nccl-tests' (size count type, "
                "then redop and/or root, then time algbw busbw and #wrong or error, out-of-place and in-place)"
            )
        body = names[first_time:-1] if timestamp else names[first_time:]
        starts = [i for i, name in enumerate(body) if name in TIME_LABELS]
        if len(starts) != 2 or starts[0] != 0 or body[: starts[1]] != body[starts[1]:]:
            raise ValueError(f"line {lineno}: cannot find the out-of-place and in-place groups in {' '.join(names)!r}")
        group = tuple(body[: starts[1]])
        if group[1:3] != ("algbw", "busbw") or len(group) < 4 or group[3] not in CHECK_LABELS:
            raise ValueError(f"line {lineno}: unexpected result columns {' '.join(group)!r}")
        oop_end = ends[first_time + starts[1] - 1]
        ip_end = ends[first_time + len(body) - 1]
        # NCCL 1's tests print milliseconds and no units line; every later version prints "(us)"
        time_scale = 1000.0 if "bytes" in line.split() else 1.0
        return cls(preamble, group, ends, oop_end, ip_end, timestamp, time_scale)

    def split(self, tokens: list[str], ends: list[int] | None, lineno: int) -> tuple[dict[str, str], int]:
        """The row's preamble values by column name, and how many tokens they took.

        A row may leave ``redop`` or ``root`` blank under a header that names it (2.0-era alltoall): the column is
        then absent from the row, found by the token's shape and, where the row's layout is known, by where it
        ends under the header."""
        width = len(self.group)
        optional = list(self.preamble[3:])
        candidates = [optional] + [[c for c in optional if c != gone] for gone in optional] + ([[]] if optional else [])
        for present in candidates:
            n = 3 + len(present)
            if len(tokens) - n not in (width, 2 * width):
                continue
            values = dict(zip(present, tokens[3:n], strict=True))
            if "redop" in values and not re.fullmatch(r"[A-Za-z]\w*", values["redop"]):
                continue
            if "root" in values and not re.fullmatch(r"-?\d+", values["root"]):
                continue
            if present != optional and ends:
                header_ends = dict(zip(self.preamble, self.ends, strict=False))
                if any(abs(ends[3 + k] - header_ends[name]) > 2 for k, name in enumerate(present)):
                    continue
            return {"size": tokens[0], "count": tokens[1], "type": tokens[2], **values}, n
        raise ValueError(
            f"line {lineno}: data row has {len(tokens)} fields, expected {' '.join(self.preamble)} then "
            f"{2 * width} result fields ({' '.join(self.group)} out-of-place and in-place)"
        )


def _number(token: str, lineno: int, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"line {lineno}: {what} {token!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"line {lineno}: {what} {token!r} is not a finite number")
    return value


def _wrong(token: str, lineno: int) -> int | None:
    """`#wrong` is a count printed with %g (so 1e+06 for a million), or N/A when the test does not check data."""
    if token == "N/A":
        return None
    value = _number(token, lineno, "#wrong")
    if value != int(value):
        raise ValueError(f"line {lineno}: #wrong {token!r} is not a whole count")
    return int(value)


def _integer(token: str, lineno: int, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise ValueError(f"line {lineno}: {what} {token!r} is not an integer") from None


def _deviation(token: str, lineno: int) -> float | None:
    """`error` / `res`: the largest deviation from the expected result (2e-07), N/A when data was not checked."""
    return None if token == "N/A" else _number(token, lineno, "error")


def _group(tokens: list[str], lineno: int, layout: _Layout) -> dict[str, Any]:
    """One out-of-place or in-place result; columns past the check column (#bitdiff, per-iteration stats) are not
    kept. ``wrong`` (a count) is None where the output printed N/A or an ``error`` deviation instead: a deviation is
    kept as ``error`` and is not a count of wrong elements."""
    group = {
        "time_us": _number(tokens[0], lineno, "time") * layout.time_scale,
        "algbw": _number(tokens[1], lineno, "algbw"),
        "busbw": _number(tokens[2], lineno, "busbw"),
    }
    if not math.isfinite(group["time_us"]):  # NCCL 1's milliseconds times 1000
        raise ValueError(f"line {lineno}: time {tokens[0]!r} is not a finite number of microseconds")
    if layout.group[3] == "#wrong":
        group["wrong"] = _wrong(tokens[3], lineno)
    else:
        group["wrong"] = None
        group["error"] = _deviation(tokens[3], lineno)
    return group


def _splice_at(line: str, layout: _Layout) -> int | None:
    """Column where NCCL log text was glued onto a half-printed row, or None when the row is whole.

    The glued host name may start with a digit (``10-4-3-3:97095:...``), so where the row's last field ends is
    taken from the header's column ends when one of them falls inside the match; else at the first letter.
    """
    match = _NCCL_LOG.search(line) if " NCCL " in line else None
    if match is None or match.start() == 0 or not line[: match.start()].strip():
        return None
    host_end = line.index(":", match.start())
    for end in sorted(layout.ends, reverse=True):
        if match.start() <= end < host_end and _NCCL_LOG.match(line, end):
            return end
    for pos in range(match.start(), host_end):
        if line[pos].isalpha():
            return pos
    return match.start()


def _is_continuation(tokens: list[str]) -> bool:
    def numeric(token: str) -> bool:
        if token == "N/A":
            return True
        try:
            float(token)
        except ValueError:
            return False
        return True

    return bool(tokens) and all(numeric(t) for t in tokens)


class _Run:
    """One test's output as it is read: its header facts, its rows, and whether its trailer was seen."""

    def __init__(self, lineno: int) -> None:
        self.lineno = lineno
        self.marks: set[int] = set()
        self.op: str | None = None  # from `# Collective test starting:` (or `concluded:`)
        self.announced: str | None = None  # from the command line that started it (`./build/sendrecv_perf -g 2`)
        self.version: str | None = None
        self.devices: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.avg_busbw: float | None = None
        self.avg_seen = self.nccl1 = False  # NCCL 1's tests print no trailer: their runs are whole without it
        self.cause: str | None = None  # the first line that says why the run stopped (nccl_died.py)
        self.closed = False
        self.failed = False  # a failure line (nccl_died.FATAL) was printed in this run: it died, trailer or not
        self.after_failure = 0  # rows printed after that line: not evidence, not read
        self.unreadable: list[str] = []  # rows the text cut short: not read, never read as numbers they lost

    def started_by(self, mark: int) -> bool:
        """True when `mark` belongs to a later run: this one has rows, is over, or already passed that marker."""
        return bool(self.rows) or self.closed or any(m >= mark for m in self.marks)

    def result(self, op_hint: str | None) -> dict[str, Any]:
        if not self.rows:
            cut = f" ({self.unreadable[0]})" if self.unreadable else ""
            cut += f" (it died: {self.cause[:200]})" if self.cause else ""
            raise ValueError(f"line {self.lineno}: the {self.op or 'nccl-tests'} run starting here has no result "
                             f"rows{cut}")
        # what the output says first, then its command line, then the caller; None where nothing says
        said = [(op, source) for op, source in ((self.op, "output"), (self.announced, "command line"),
                                                 (op_hint, "given")) if op is not None]
        op, source = said[0] if said else (None, None)
        out: dict[str, Any] = {"op": op, "op_from": source}
        if self.version is not None:
            out["version"] = self.version
        out.update(rank_count(self.devices))  # "nranks" only from a whole device list, and "devices"
        out["rows"] = self.rows
        out["avg_busbw"] = self.avg_busbw
        if self.unreadable:
            out["unreadable"] = self.unreadable
        if self.failed or not (self.avg_seen or self.closed or self.nccl1):
            out["unfinished"] = unfinished([r["size"] for r in self.rows], self.cause)
            if self.after_failure:
                out["unfinished"] += (f" ({self.after_failure} row{'s' if self.after_failure != 1 else ''} "
                                      "printed after it not read: not evidence)")
        return out


def _op_name(program: str) -> str:
    """`./build/all_reduce_perf` -> `all_reduce`: the test binary's name less its `_perf` (`_test` for NCCL 1's)."""
    name = program.replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in ("_perf", "_test"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


#: a test binary named on a command line: `mpirun -np 8 ./build/all_reduce_perf -b 8`, a run script's
#: `Running: ... ./build/sendrecv_perf ...`, NCCL 1's `./build/test/single/all_reduce_test 10000000`
_PERF_BINARY = re.compile(r"(?:^|[\s/=`'\"])([a-z][a-z0-9]*(?:_[a-z0-9]+)*)_(?:perf|test)(?=[\s`'\"]|$)")


def _announced_op(line: str) -> str | None:
    """The test a command line in the log starts, or None when the line names no nccl-tests binary."""
    if _NCCL_LOG.match(line.strip()):
        return None
    m = _PERF_BINARY.search(line)
    return m.group(1) if m else None


def parse_nccl_tests(text: str, op: str | None = None) -> list[dict[str, Any]]:
    """Every nccl-tests run found in `text`, in order (a saved log often holds several).

    Each run is ``{"op": "all_reduce", "rows": [...], "avg_busbw": 232.869}``, plus ``"version"`` when the
    ``# nccl-tests version`` line is there and ``"nranks"``/``"devices"`` when the ``#  Rank ...`` lines are.
    A row is ``{"size": bytes, "count": elements, "type": "float", "redop": "sum", "root": -1,
    "oop": {"time_us", "algbw", "busbw", "wrong"}, "ip": {...}}``; ``wrong`` is None where nccl-tests printed
    N/A (data not checked), ``oop`` is None for a row that has only in-place results (trace replay prints blanks
    there), ``ip`` None for a row cut short after out-of-place. ``avg_busbw`` is None when the trailer is missing.
    ``unreadable`` (only when there is one) lists a last row the text may have cut (no line end after it): not
    read, so a number that lost digits is never judged.

    `op` names the test (``all_reduce`` or ``all_reduce_perf``) for output whose header was cut off; the
    ``# Collective test starting:`` line wins where there is one. Raises ValueError, naming the line, for a data
    row that cannot be read, a run with no rows, a run whose test is unknown, or text with no rows at all.
    """
    op_hint = _op_name(op) if op else None
    reader = _Reader(text)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        reader.read(lineno, raw)
    reader.flush_pending()
    runs = reader.runs
    if not any(r.rows for r in runs):
        why = [runs[-1].unreadable[0]] if runs and runs[-1].unreadable else []
        why += [f"it died: {runs[-1].cause[:200]}"] if runs and runs[-1].cause else []
        raise ValueError("no nccl-tests result rows found" + (f" ({'; '.join(why)})" if why else ""))
    from .clean import clean_values  # device names: no terminal control byte
    return [clean_values(r.result(op_hint)) for r in runs]


def _is_column_header(body: str) -> bool:
    return body.lstrip("#").split()[:2] in (["size", "count"], ["bytes", "N"])


#: The ``#`` lines nccl-tests prints around its table (no two can match one line); any other is a comment.
_COMMENT_KINDS = (("version", _VERSION), ("starting", _STARTING), ("nthread", _NTHREAD), ("rank", _RANK),
                  ("avg", _AVG_BUSBW), ("concluded", _CONCLUDED))


def _classify_comment(body: str) -> tuple[str, re.Match[str] | None]:
    """The kind of a ``#`` line: "columns" (the table's column header), one of _COMMENT_KINDS, or "comment"."""
    if _is_column_header(body):
        return "columns", None
    for kind, pattern in _COMMENT_KINDS:
        if m := pattern.match(body):
            return kind, m
    return "comment", None


class _Reader:
    """One pass over a log: the runs so far, the table layout in force and a row waiting for the rest that NCCL's
    log split off. Each line is classified (a ``#`` line by _classify_comment; else a data row, the rest of a
    split row, or other text) and handled by the method for its kind."""

    def __init__(self, text: str) -> None:
        self.runs: list[_Run] = []
        self.run: _Run | None = None
        self.announced: str | None = None  # a command line's test, for the run it starts
        self.layout = _Layout()
        self.pending: tuple[int, list[str]] | None = None  # a row NCCL's log was spliced into: (line, tokens)
        # a paste that stops without its line end may have stopped inside its last row ("326.4" cut to "32"): that
        # row is not read, and the run says so, rather than judged on a number that lost its digits
        self.open_end = len(text.splitlines()) if text and not text.endswith(("\n", "\r")) else None

    def read(self, lineno: int, raw: str) -> None:
        line = _LAUNCHER_PREFIX.sub("", raw, count=1).rstrip()
        stripped = line.strip()
        if not stripped:
            return
        if not stripped.startswith("#") and (at := fatal_at(line)) is not None and not _NCCL_LOG.search(line):
            self.flush_pending()
            self._on_failure(line, at, lineno)
            return
        if stripped.startswith("#"):
            self.flush_pending()
            kind, m = _classify_comment(stripped)
            getattr(self, f"_on_{kind}")(m, line, lineno)
            return
        cut = _splice_at(line, self.layout)
        text_part = line[:cut] if cut is not None else line
        if _ROW_START.match(text_part):
            self.flush_pending()
            self._on_row(text_part, cut, lineno)
        elif self.pending is not None:
            self._on_rest(text_part, stripped, cut)
        else:
            self._on_text(line)

    def new_run(self, lineno: int) -> _Run:
        self.run = _Run(lineno)
        self.run.announced, self.announced = self.announced, None
        self.runs.append(self.run)
        return self.run

    def open_run(self, mark: int, lineno: int) -> _Run:
        """The run a start-of-run marker belongs to: the current one, or a new one when the marker repeats."""
        if self.run is None or self.run.started_by(mark):
            self.new_run(lineno)
            self.layout = _Layout()
        self.run.marks.add(mark)
        return self.run

    def _on_version(self, m: re.Match[str], line: str, lineno: int) -> None:
        self.open_run(_MARK_VERSION, lineno).version = m.group(1)

    def _on_starting(self, m: re.Match[str], line: str, lineno: int) -> None:
        self.open_run(_MARK_STARTING, lineno).op = _op_name(m.group(1))

    def _on_nthread(self, m: re.Match[str], line: str, lineno: int) -> None:
        self.open_run(_MARK_NTHREAD, lineno)

    def _on_columns(self, m: None, line: str, lineno: int) -> None:
        layout = _Layout.from_header(line, lineno)
        self.open_run(_MARK_TABLE, lineno)
        self.layout = layout

    def _on_rank(self, m: re.Match[str], line: str, lineno: int) -> None:
        if self.run is not None and not self.run.rows:
            rank, group, pid, host, device, pci, name = m.groups()
            self.run.devices.append({"rank": int(rank), "group": int(group) if group is not None else None,
                                     "pid": int(pid), "host": host, "device": int(device), "pci_bus_id": pci,
                                     "name": name})

    def _on_avg(self, m: re.Match[str], line: str, lineno: int) -> None:
        if self.run is not None:
            self.run.avg_seen = True
            # a summary, not a measurement: `-nan` (nothing averaged) leaves it None instead of failing the rows
            try:
                self.run.avg_busbw = _number(m.group(1), lineno, "Avg bus bandwidth")
            except ValueError:
                self.run.avg_busbw = None

    def _on_concluded(self, m: re.Match[str], line: str, lineno: int) -> None:
        if self.run is not None:
            self.run.op = self.run.op or _op_name(m.group(1))
            self.run.closed = True

    def _on_comment(self, m: None, line: str, lineno: int) -> None:
        pass

    def _on_row(self, text_part: str, cut: int | None, lineno: int) -> None:
        """A data row; one NCCL's log was spliced into waits for its rest."""
        matches = list(re.finditer(r"\S+", text_part))
        tokens = [m.group() for m in matches]
        if cut is not None:
            self.pending = (lineno, tokens)
        else:
            self.add_row(lineno, tokens, [m.end() for m in matches])

    def _on_rest(self, text_part: str, stripped: str, cut: int | None) -> None:
        """A line while a split row waits: its numbers are the row's rest; more log or launcher noise is skipped."""
        if cut is None and _NCCL_LOG.match(stripped):
            return  # more of NCCL's log between the two halves of the row
        tokens = text_part.split()
        if _is_continuation(tokens):
            self.pending[1].extend(tokens)
            if cut is None or len(self.pending[1]) >= len(self.layout.preamble) + 2 * len(self.layout.group):
                self.flush_pending()

    def _on_failure(self, line: str, at: int, lineno: int) -> None:
        """A line that says a rank died; a row it was printed into (``-1 node0: Test CUDA failure``) is not read."""
        if self.run is None:
            return
        if _ROW_START.match(line[:at]):
            self.run.unreadable.append(f"line {lineno}: the run died inside this row: {line[:at].strip()!r}")
        self.run.cause = self.run.cause or line[at:].strip()
        self.run.failed = True

    def _on_text(self, line: str) -> None:
        """Not table: NCCL/UCX/MPI log, launcher chatter, or the command line that starts the next test."""
        if self.run is not None and self.run.rows and not self.run.avg_seen and WARN.search(line):
            self.run.cause = self.run.cause or line.strip()
        if (named := _announced_op(line)) is not None:
            run = self.run
            if run is not None and not run.rows and not run.closed and run.op is None:
                run.announced = named
            else:
                self.announced = named

    def flush_pending(self) -> None:
        if self.pending is not None:
            lineno, tokens = self.pending
            self.pending = None
            self.add_row(lineno, tokens, None)

    def add_row(self, lineno: int, tokens: list[str], columns: list[int] | None) -> None:
        if self.run is None or self.run.closed:
            self.new_run(lineno)
        if lineno == self.open_end:
            self.run.unreadable.append(f"line {lineno}: the text ends inside this row, which may be cut: "
                                       f"{' '.join(tokens)[:120]!r}")
            return
        if self.run.failed:  # a rank already said it failed: what follows is not a measurement to trust
            self.run.after_failure += 1
            return
        self.run.rows.append(_row(tokens, list(columns or []), lineno, self.layout))
        self.run.nccl1 = self.layout.time_scale != 1.0


def _row(tokens: list[str], ends: list[int], lineno: int, layout: _Layout) -> dict[str, Any]:
    """One data row read under ``layout``: its preamble, then one or two result groups. A row with one group is
    in-place when that group ends under the in-place header columns, else out-of-place."""
    if layout.timestamp and len(tokens) >= 2 and _DATE.match(tokens[-2]) and _CLOCK.match(tokens[-1]):
        tokens, ends = tokens[:-2], ends[:-2]
    if len(tokens) < 3:
        raise ValueError(f"line {lineno}: data row ends after {len(tokens)} fields: {' '.join(tokens)!r}")
    preamble, n = layout.split(tokens, ends, lineno)
    results, ends = tokens[n:], ends[n:]
    width = len(layout.group)
    oop = ip = None
    if len(results) == 2 * width:
        oop, ip = _group(results[:width], lineno, layout), _group(results[width:], lineno, layout)
    elif ends and abs(ends[-1] - layout.ip_end) < abs(ends[-1] - layout.oop_end):
        ip = _group(results, lineno, layout)
    else:
        oop = _group(results, lineno, layout)
    root = preamble.get("root")
    return {"size": _integer(preamble["size"], lineno, "size"), "count": _integer(preamble["count"], lineno, "count"),
            "type": preamble["type"], "redop": preamble.get("redop"),
            "root": None if root is None else _integer(root, lineno, "root"), "oop": oop, "ip": ip}


# --- what a row must be before it is judged ---------------------------------------------------------------------



def parse_nccl_tests_json(text: str, op: str | None = None) -> dict[str, Any]:
    """The public JSON of ``gpufabric parse nccl-tests FILE``.

    A file with one run gives that run's dict (see parse_nccl_tests): ``{"op", "rows", "avg_busbw"}`` plus
    ``version``/``nranks``/``devices`` when printed. A file with several runs (one log holding e.g. two
    all_reduce_perf and a sendrecv_perf) gives ``{"runs": [run, run, ...]}`` in the order they were printed,
    so a caller can always tell the two shapes apart by the ``runs`` key.
    """
    runs = parse_nccl_tests(text, op)
    return runs[0] if len(runs) == 1 else {"runs": runs}
