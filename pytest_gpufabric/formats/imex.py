"""``nvidia-imex-ctl -N``: the IMEX domain of a multi-node NVLink rack (GB200/GB300 NVL72) as one node sees it: each
node with its address and state, the connectivity table between them, and the domain's state.

Layout (NVIDIA IMEX 570+): the legend, a timestamp, ``Nodes:`` then ``Node #0   - 172.31.48.81    - READY   -
Version: 570.172`` per node, the table `` Nodes From\\To  0   1 ...`` with one row per node of one-letter (or ``!V!``,
``!M!``) codes, and ``Domain State: UP``. The timestamp line (``5/12/2025 06:08:10.580``: month/day/year, the
tray's own clock, no zone) is kept as ``timestamp`` (ISO, no zone). A table whose rows stop short, or a table and
node list that do not name the same nodes, are said in ``unknown``; a node number, row or column given twice (a
merged or pasted status) is said in ``contradictions``: the status contradicts itself. Reads no files; ValueError
names what was expected on other text.
"""

from __future__ import annotations

import re
from datetime import datetime

from .paste import paste_noise

__all__ = ["CONNECTED", "parse_imex_status"]

CONNECTED = "C"
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_HEADER = re.compile(r"^\s*Nodes From\\To\s+([\d\s]+)$")
_ROW = re.compile(r"^\s*(\d+)\s{2,}((?:(?:[A-Z]|![A-Z]!)\s*)+)$")
_DOMAIN = re.compile(r"^Domain State:\s*(\S+)\s*$")
_TIMESTAMP = re.compile(r"^\s*(\d{1,2})/(\d{1,2})/(\d{4}) (\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?\s*$")


def parse_imex_status(text: str) -> dict:
    """``{"nodes": [{"node", "address", "state", "version"}], "connectivity": {"0": {"0": "C", ...}},
    "domain_state": "UP", "timestamp": "2025-05-12T06:08:10.580000", "unknown": [...], "contradictions": [...]}``."""
    if not text or not text.strip():
        raise ValueError("nvidia-imex-ctl -N: empty text")
    nodes, connectivity, columns, domain = [], {}, None, None
    stamps: list[str] = []
    contradictions: list[str] = []
    for line in text.splitlines():
        node, header, domain_line = _NODE.match(line), _HEADER.match(line), _DOMAIN.match(line)
        if node:
            nodes.append({"node": int(node.group(1)), "address": node.group(2), "state": node.group(3),
                          "version": node.group(4)})
        elif header:
            if columns is not None:
                contradictions.append("the status holds two connectivity tables")
            columns = header.group(1).split()
        elif domain_line:
            if domain is not None and domain != domain_line.group(1):
                contradictions.append(f"the status says Domain State {domain} and {domain_line.group(1)}")
            domain = domain_line.group(1)
        elif _TIMESTAMP.match(line):
            stamps.append(line.strip())
        elif columns is not None and (row := _ROW.match(line)):
            codes = row.group(2).split()
            if row.group(1) in connectivity:
                contradictions.append(f"the connectivity table gives node {row.group(1)}'s row twice")
            connectivity[row.group(1)] = dict(zip(columns, codes, strict=False))
        elif line.strip() and paste_noise(line) == "a shell command line":
            continue
    if not nodes and domain is None:
        raise ValueError("nvidia-imex-ctl -N: no `Node #N - ADDRESS - STATE` line and no `Domain State:` line")
    unknown = []
    timestamp = _timestamp(stamps, unknown, contradictions)
    if domain is None:
        unknown.append("no `Domain State:` line: the output is cut, the domain's state is unknown")
    contradictions += _repeated_nodes(nodes)
    if columns is None:
        unknown.append("no connectivity table: the nodes' connections are unknown")
    else:
        repeated = sorted({c for c in columns if columns.count(c) > 1}, key=int)
        if repeated:
            contradictions.append(f"the connectivity table names node(s) {', '.join(repeated)} in two columns")
        missing = [c for c in columns if c not in connectivity or len(connectivity[c]) != len(columns)]
        if missing:
            unknown.append(f"the connectivity table is cut: node(s) {', '.join(missing)} have no whole row")
        strays = [r for r in connectivity if r not in columns]
        if strays:
            unknown.append(f"the connectivity table has rows for node(s) {', '.join(strays)}, which it has no "
                           "column for")
        listed = [str(n["node"]) for n in nodes]
        if set(columns) != set(listed) or len(columns) != len(listed):
            unknown.append(f"the table names nodes {', '.join(columns)}, the node list "
                           f"{', '.join(sorted(listed, key=int)) or 'none'}")
    return {"nodes": nodes, "connectivity": connectivity, "domain_state": domain, "timestamp": timestamp,
            "unknown": unknown, "contradictions": contradictions}


def _repeated_nodes(nodes: list[dict]) -> list[str]:
    """A node number listed twice: one status cannot give one node two lines."""
    by_number: dict[int, list[str]] = {}
    for node in nodes:
        by_number.setdefault(node["node"], []).append(node["address"])
    return [f"node #{number} is listed {len(said)} times ({', '.join(said)})"
            for number, said in by_number.items() if len(said) > 1]


def _timestamp(stamps: list[str], unknown: list[str], contradictions: list[str]) -> str | None:
    """The status's own time (month/day/year, as nvidia-imex-ctl prints it) in ISO form, None where it has none."""
    if not stamps:
        unknown.append("no timestamp line: when the status was taken is unknown")
        return None
    if len(set(stamps)) > 1:
        contradictions.append(f"the status has two timestamps ({stamps[0]}, {stamps[1]})")
    month, day, year, hour, minute, second, fraction = _TIMESTAMP.match(stamps[0]).groups()
    try:
        when = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                        int((fraction or "0").ljust(6, "0")))
    except ValueError:
        unknown.append(f"the timestamp line {stamps[0]!r} is no date (month/day/year)")
        return None
    return when.isoformat()
