"""Read the bandwidth report that perftest (github.com/linux-rdma/perftest) prints: ib_write_bw, ib_read_bw, ...

perftest is how an RDMA fabric is accepted port by port (the 23.14 Gb/s on a 25 Gb/s RoCE port in
``tests/data/captures/a100-pcie-roce-2node``), so its output must be judged as saved from a real run, whichever
side (client or server) and whichever perftest version printed it.

Every bandwidth is returned in Gb/s, with what was printed kept in ``units_printed``. The layout read, its units,
the modes that change the table (``-a``, ``-D``, ``-N``, ``-b``, ``--report-both``) and the noise skipped:
docs/evidence/rdma.md, "How perftest output is read".

When perftest found no RDMA device it prints one of its device errors (ctx_find_dev and the ``main`` of every
test) and no table; that raises :class:`NoRdmaDevice` so a caller can tell "this host has no usable RDMA device"
from "this is not perftest output" (plain ``ValueError``).
"""

from __future__ import annotations

import re
from typing import Any

from .clean import clean_values

#: Bytes per second that one printed unit stands for (perftest's format_factor: 0x100000 for MB/MiB, 125000000 for
#: Gb). MB/sec is the pre-2024 spelling of the same 2^20 bytes that newer releases print as MiB/sec.
UNIT_BYTES_PER_S = {"Gb/sec": 125_000_000, "MB/sec": 1_048_576, "MiB/sec": 1_048_576}

#: perftest's own lines for "there is no usable RDMA device", as printed (leading blanks stripped). From
#: ctx_find_dev() in src/perftest_resources.c and the main() of write_bw.c, read_bw.c, send_bw.c, atomic_bw.c.
NO_DEVICE_MESSAGES = (
    "Did not detect devices",  # ibv_get_device_list() returned no device
    "If device exists, check if driver is up",  # printed right after the line above
    "No IB devices found",  # no -d and the list is empty
    "Unable to find the Infiniband/RoCE device",  # main(), after ctx_find_dev() failed
    "Couldn't get context for the device",  # ibv_open_device() failed: device listed but unusable
    # Not in perftest's source (searched): kept because callers asked for it to count as "no device".
    "Couldn't get device list",
)
#: "IB device mlx5_9 not found" (ctx_find_dev() with -d naming a device that is not there).
_NAMED_DEVICE_MISSING = re.compile(r"\bIB device (\S+) not found\b")

#: perftest's warnings (get_clock.c, to stderr) that can appear inside a table, even spliced onto a row's end.
_WARNINGS = ("Conflicting CPU frequency values detected", "Test integrity may be harmed!")

_RESULT_LINE = re.compile(r"^\s*-{40,}\s*$")
_TITLE = re.compile(r"^\s*(\S[^:]*?\bTest)\s*$")
_BANNER = re.compile(r"Waiting for client (?:rdma_cm QP )?to connect")
_SECTION = re.compile(r"^\s*(Local|Remote) results:\s*$")
# " Dual-port       : OFF\t\tDevice         : irdma0": one or two "key : value" pairs, pairs apart by 2+ blanks.
_PAIR = re.compile(r"([A-Za-z][\w*.\- ]*?)\s*:\s*(.*?)(?=\s{2,}[A-Za-z][\w*.\- ]*?\s*:|\s*$)")
_BW_HEADER = re.compile(r"^\s*#bytes\s+(?:#sl\s+)?#iterations\s+BW peak\[")
_LAT_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+t_(?:min|avg)\[")
_COLUMN = re.compile(r"#\w+|BW (?:peak|average|Port[12])\[[^\]]*\]|MsgRate(?: Port[12])?\[Mpps\]|CPU_Util\[%\]")
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
_BARE_NUMBER_LINE = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")

# header label -> (key in a result row, kind): "int", "bw" (converted to Gb/s) or "float" (kept as printed)
_COLUMNS = {
    "#bytes": ("bytes", "int"),
    "#sl": ("sl", "int"),
    "#iterations": ("iterations", "int"),
    "BW peak": ("bw_peak_gbps", "bw"),
    "BW average": ("bw_avg_gbps", "bw"),
    "MsgRate": ("msg_rate_mpps", "float"),
    "BW Port1": ("bw_port1_gbps", "bw"),
    "MsgRate Port1": ("msg_rate_port1_mpps", "float"),
    "BW Port2": ("bw_port2_gbps", "bw"),
    "MsgRate Port2": ("msg_rate_port2_mpps", "float"),
    "CPU_Util": ("cpu_util_percent", "float"),
}


#: How far a row's ``BW average`` may be from what its own ``#bytes`` and ``MsgRate`` give, beyond the rounding of the
#: printed figures, before the row contradicts itself. perftest computes both from one iteration count over one
#: cycle count (perftest_parameters.c, print_report_bw: bw_avg = tsize * iters / (cycles * format_factor),
#: msgRate_avg = iters / (cycles * 1e6)), so a real row agrees to the digits printed (BW 2 decimals, 6 below
#: 0.1 Gb/s; MsgRate 6); the 1 % allows for a release that rounds or reports otherwise. A bidirectional row may
#: also be twice ``#bytes x MsgRate``: older releases doubled ``tsize`` for a duplex run and not the message rate.
ROW_TOLERANCE = 0.01
_BW_HALF_DIGIT = 0.005  # half the last printed digit of BW (%.2f), in the printed unit
_RATE_HALF_DIGIT = 0.0000005  # half the last printed digit of MsgRate (%.6f), in Mpps


def row_disagreement(row: dict[str, Any], unit: str, bidirectional: bool = False) -> str | None:
    """Why a result row (``parse_perftest``'s: bandwidths in Gb/s) contradicts itself, or None: its ``BW average``
    is not ``#bytes x MsgRate`` (x 2 for a bidirectional row) within the rounding of what was printed and
    ``ROW_TOLERANCE``. ``unit``: the unit the row was printed in (``units_printed``)."""
    size, rate, bw = row.get("bytes"), row.get("msg_rate_mpps"), row.get("bw_avg_gbps")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (size, rate, bw)):
        return None  # nothing to compare: the check refuses what is not a number
    bw_half = to_gbps(_BW_HALF_DIGIT, unit)
    low_bw, high_bw = bw - bw_half, bw + bw_half
    # #bytes x MsgRate[Mpps] in Gb/s: bytes x 1e6 messages/s x 8 bits / 1e9
    low_rate, high_rate = (size * max(rate - _RATE_HALF_DIGIT, 0) * 8e-3, size * (rate + _RATE_HALF_DIGIT) * 8e-3)
    for factor in (1, 2) if bidirectional else (1,):
        if low_bw <= factor * high_rate * (1 + ROW_TOLERANCE) and high_bw >= factor * low_rate * (1 - ROW_TOLERANCE):
            return None
    implied = size * rate * 8e-3
    shown = f"{bw:.2f} Gb/s" if unit == "Gb/sec" else f"{bw:.3f} Gb/s (printed in {unit})"
    return (f"its BW average {shown} is not #bytes x MsgRate = {size} B x {rate:g} Mpps = {implied:.2f} Gb/s"
            + (" (or twice that, for a bidirectional run)" if bidirectional else "")
            + f": perftest computes both from one count of iterations and cycles, so they agree within the rounding "
              f"of the printed figures and {ROW_TOLERANCE:.0%}; a row that does not was not printed by one run")


class NoRdmaDevice(ValueError):
    """perftest ran but found no usable RDMA device: a fact about the host, not unreadable input.

    A ValueError, so callers that only want "could this be read" (the CLI's bad-input path) need no change.
    """


def to_gbps(value: float, unit: str) -> float:
    """A bandwidth as printed in ``unit`` (``Gb/sec``, ``MB/sec`` or ``MiB/sec``) in Gb/s (10^9 bits/s).

    MB/sec and MiB/sec are both 2^20 bytes/s in perftest, so 1 MB/sec = 1048576 * 8 / 1e9 Gb/s (about 0.0083886).
    Gb/sec is returned unchanged, without a round trip through bytes, so the printed figure survives exactly.
    """
    if unit == "Gb/sec":
        return float(value)
    if unit not in UNIT_BYTES_PER_S:
        raise ValueError(f"unknown perftest bandwidth unit {unit!r}")
    return value * UNIT_BYTES_PER_S[unit] * 8 / 1e9


class _Table:
    """One result table: the columns its header names and the rows under it."""

    def __init__(self, line_no: int, columns: list[tuple[str, str]], unit: str, section: str | None) -> None:
        self.line_no = line_no
        self.columns = columns
        self.unit = unit
        self.section = section
        self.rows: list[dict[str, Any]] = []


def _table_header(line: str, line_no: int, section: str | None) -> _Table:
    """Read a ``#bytes  #iterations  BW peak[..]`` header: which columns, in which bandwidth unit."""
    columns: list[tuple[str, str]] = []
    units = set()
    for label in _COLUMN.findall(line):
        name, _, rest = label.partition("[")
        if name.startswith("BW "):
            units.add(rest.rstrip("]"))
        if name not in _COLUMNS:
            raise ValueError(f"line {line_no}: unknown column {label!r} in the perftest result header")
        columns.append(_COLUMNS[name])
    keys = [key for key, _ in columns]
    for needed in ("bytes", "iterations", "bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps"):
        if needed not in keys:
            raise ValueError(f"line {line_no}: perftest result header without its {needed} column: {line.strip()!r}")
    if len(units) != 1 or next(iter(units)) not in UNIT_BYTES_PER_S:
        raise ValueError(f"line {line_no}: bandwidth unit(s) {sorted(units)} not one of {sorted(UNIT_BYTES_PER_S)}")
    return _Table(line_no, columns, units.pop(), section)


def _strip_warning(line: str) -> tuple[str, str | None]:
    """Split perftest's stderr warning off a line: (what is left, the warning or None).

    With stdout block-buffered (2>&1 into a file) the warning of the next ``-a`` size can be written right after a
    row's digits, before that row's newline; the row must still be read.
    """
    for warning in _WARNINGS:
        at = line.find(warning)
        if at >= 0:
            return line[:at], line[at:].strip()
    return line, None


def _row(line: str, line_no: int, table: _Table) -> dict[str, Any]:
    """One data row under ``table``'s header; a row that does not fit the header is an error, never skipped."""
    fields = line.split()
    if len(fields) != len(table.columns) or not all(_NUMBER.match(f) for f in fields):
        raise ValueError(
            f"line {line_no}: not a result row for the header at line {table.line_no} "
            f"({len(table.columns)} numeric columns): {line.strip()!r}"
        )
    row: dict[str, Any] = {}
    for (key, kind), text in zip(table.columns, fields, strict=True):
        if kind == "int":
            if "." in text:
                raise ValueError(f"line {line_no}: {key} must be a whole number, got {text!r}")
            row[key] = int(text)
        elif kind == "bw" and key == "bw_peak_gbps" and float(text) == 0:
            row[key] = None  # -D and -N print the peak as 0.00: not measured, not a peak of zero
        elif kind == "bw":
            row[key] = to_gbps(float(text), table.unit)
        else:
            row[key] = float(text)
    return row


def _no_device(lines: list[str]) -> NoRdmaDevice | None:
    """perftest's "no RDMA device" message with its line number, if the output carries one."""
    for number, line in enumerate(lines, 1):
        text = line.strip()
        named = _NAMED_DEVICE_MISSING.search(text)
        if named or any(text.startswith(message) for message in NO_DEVICE_MESSAGES):
            return NoRdmaDevice(f"line {number}: perftest found no usable RDMA device: {text!r}")
    return None


def _int_or_none(value: str | None) -> int | None:
    """``"1024[B]"`` -> 1024, ``"1"`` -> 1; None for anything else (an absent or odd header field)."""
    if value is None:
        return None
    match = re.match(r"^(\d+)", value)
    return int(match.group(1)) if match else None


def parse_perftest(text: str) -> dict[str, Any]:
    """Read one perftest bandwidth run (client or server side) into JSON-ready data, bandwidths in Gb/s.

    Returns ``test``, ``device``, ``link_type``, ``mtu`` (from the header block; None where the saved output has
    no header) and ``results`` (one dict per row: ``bytes``, ``iterations``, ``bw_peak_gbps``, ``bw_avg_gbps``,
    ``msg_rate_mpps``, plus any extra columns the header names), then what else the output says: ``qps``,
    ``connection_type``, ``transport_type``, ``gid_index``, ``tx_depth``, ``rdma_cm``, ``bidirectional``,
    ``units_printed``, ``bw_peak_reported``, ``server_side`` (the output has the server's waiting banner),
    ``report_both`` (``{"local": [...], "remote": [...]}`` or None), ``repeated_tables``, ``warnings`` and
    ``unreadable`` (a last row the text may have cut, having no line end after it: not read).

    Raises NoRdmaDevice when perftest said it found no RDMA device, ValueError (with a line number) for anything
    else that is not a readable perftest bandwidth report.
    """
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise ValueError("no perftest result table: the input is empty")

    header: dict[str, str] = {}
    title: str | None = None
    title_line = 0
    server_side = False
    in_header = False  # between the title and the next dashed line
    prev_dashed = True  # a title follows a dashed line (or starts the file)
    section: str | None = None
    tables: list[_Table] = []
    table: _Table | None = None
    warnings: list[str] = []
    unreadable: list[str] = []

    for number, raw in enumerate(lines, 1):
        line, warning = _strip_warning(raw)
        if warning is not None:
            warnings.append(f"line {number}: {warning}")
        stripped = line.strip()
        if not stripped:
            continue
        if _RESULT_LINE.match(line):
            table = None
            in_header = False
            prev_dashed = True
            continue
        was_dashed, prev_dashed = prev_dashed, False
        if _BANNER.search(line):
            server_side = True
            continue
        if _LAT_HEADER.match(line):
            raise ValueError(
                f"line {number}: a latency test's table (ib_*_lat); only bandwidth tests (ib_*_bw) are read"
            )
        if _BW_HEADER.match(line):
            new = _table_header(line, number, section)
            if table is not None and not table.rows and table.columns == new.columns and table.unit == new.unit:
                continue  # the same header printed twice in a row (seen in real server outputs)
            table = new
            tables.append(table)
            continue
        section_match = _SECTION.match(line)
        if section_match:
            section = section_match.group(1).lower()
            table = None
            continue
        title_match = _TITLE.match(line)
        if title_match and was_dashed and table is None:
            if title is not None:
                raise ValueError(
                    f"line {number}: a second perftest run starts here (the first at line {title_line}); "
                    "parse one run's output at a time"
                )
            title, title_line, in_header = title_match.group(1), number, True
            continue
        if in_header:
            # perftest's header lines are under 100 characters; the pattern backtracks on long ones
            for key, value in _PAIR.findall(line[:300]):
                header.setdefault(key.strip(), value.strip())
            continue
        if table is not None and stripped[0].isdigit():
            if number == len(lines) and not text.endswith(("\n", "\r")):
                # the paste stops without its line end: the row may have lost digits ("0.0441" cut to "0.0")
                unreadable.append(f"line {number}: the text ends inside this row, which may be cut: {stripped[:120]!r}")
                continue
            table.rows.append(_row(line, number, table))
        # anything else (address lines, GIDs, banners, launcher chatter) is not a number we report

    tables = [t for t in tables if t.rows or t.section is None]
    main = [t for t in tables if t.section is None and t.rows]
    if not main:
        device_error = _no_device(lines)
        if device_error is not None:
            raise device_error
        if all(_BARE_NUMBER_LINE.match(line) for line in lines if line.strip()):
            raise ValueError(
                "line 1: only bare numbers, as `--output=bandwidth` or `--output=message_rate` prints them: "
                "no sizes and no units to read; run perftest without --output"
            )
        headers = [t for t in tables if t.section is None]
        if headers:
            cut = f" ({unreadable[0]})" if unreadable else ""
            raise ValueError(f"line {headers[0].line_no}: a perftest result header with no result row under it{cut}")
        hint = " (some perftest versions print no table on the server side; parse the client's output)" if title else ""
        raise ValueError(
            f"line {len(lines)}: no perftest result table (a ' #bytes  #iterations  BW peak[...]' header and rows)"
            f"{hint}"
        )

    units = {t.unit for t in tables}
    if len(units) > 1:
        raise ValueError(f"line {tables[-1].line_no}: result tables in different units {sorted(units)}")
    results = list(main[0].rows)
    repeated = 0
    for later in main[1:]:
        if later.rows == main[0].rows:
            repeated += 1
        else:
            results.extend(later.rows)
    both = {side: [row for t in tables if t.section == side for row in t.rows] for side in ("local", "remote")}
    bidirectional = title is not None and "Bidirectional" in title
    rdma_cm = header.get("rdma_cm QPs")

    return clean_values({  # the header's text (device, link type) with no terminal control byte
        "test": title,
        "device": header.get("Device"),
        "link_type": header.get("Link type"),
        "mtu": _int_or_none(header.get("Mtu")),
        "results": results,
        "qps": _int_or_none(header.get("Number of qps")),
        "connection_type": header.get("Connection type"),
        "transport_type": header.get("Transport type"),
        "gid_index": _int_or_none(header.get("GID index")),
        "tx_depth": _int_or_none(header.get("TX depth")),
        "rdma_cm": None if rdma_cm is None else rdma_cm == "ON",
        "bidirectional": bidirectional,
        "units_printed": units.pop(),
        "bw_peak_reported": any(row["bw_peak_gbps"] is not None for row in results),
        "server_side": server_side,
        "report_both": both if any(both.values()) else None,
        "repeated_tables": repeated,
        "warnings": warnings,
        "unreadable": unreadable,
    })
