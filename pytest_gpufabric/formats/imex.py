"""``nvidia-imex-ctl -N``: the IMEX domain of a multi-node NVLink rack (GB200/GB300 NVL72) as one node sees it: each
node with its address and state, the connectivity table between them, and the domain's state.

Layout (NVIDIA IMEX 570+): the legend, a timestamp, ``Nodes:`` then ``Node #0   - 172.31.48.81    - READY   -
Version: 570.172`` per node, the table `` Nodes From\\To  0   1 ...`` with one row per node of one-letter (or ``!V!``,
``!M!``) codes, and ``Domain State: UP``. A table whose rows stop short, or nodes the table names but the list
does not, are said in ``unknown``. Reads no files; ValueError names what was expected on other text.
"""

from __future__ import annotations

import re

from .paste import paste_noise

__all__ = ["CONNECTED", "parse_imex_status"]

CONNECTED = "C"
_NODE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?\s*$")
_HEADER = re.compile(r"^\s*Nodes From\\To\s+([\d\s]+)$")
_ROW = re.compile(r"^\s*(\d+)\s{2,}((?:(?:[A-Z]|![A-Z]!)\s*)+)$")
_DOMAIN = re.compile(r"^Domain State:\s*(\S+)\s*$")


def parse_imex_status(text: str) -> dict:
    """``{"nodes": [{"node", "address", "state", "version"}], "connectivity": {"0": {"0": "C", ...}},
    "domain_state": "UP", "unknown": [...]}``."""
    if not text or not text.strip():
        raise ValueError("nvidia-imex-ctl -N: empty text")
    nodes, connectivity, columns, domain = [], {}, None, None
    for line in text.splitlines():
        node, header, domain_line = _NODE.match(line), _HEADER.match(line), _DOMAIN.match(line)
        if node:
            nodes.append({"node": int(node.group(1)), "address": node.group(2), "state": node.group(3),
                          "version": node.group(4)})
        elif header:
            columns = header.group(1).split()
        elif domain_line:
            domain = domain_line.group(1)
        elif columns is not None and (row := _ROW.match(line)):
            codes = row.group(2).split()
            connectivity[row.group(1)] = dict(zip(columns, codes, strict=False))
        elif line.strip() and paste_noise(line) == "a shell command line":
            continue
    if not nodes and domain is None:
        raise ValueError("nvidia-imex-ctl -N: no `Node #N - ADDRESS - STATE` line and no `Domain State:` line")
    unknown = []
    if domain is None:
        unknown.append("no `Domain State:` line: the output is cut, the domain's state is unknown")
    if columns is None:
        unknown.append("no connectivity table: the nodes' connections are unknown")
    else:
        missing = [c for c in columns if c not in connectivity or len(connectivity[c]) != len(columns)]
        if missing:
            unknown.append(f"the connectivity table is cut: node(s) {', '.join(missing)} have no whole row")
        listed = {str(n["node"]) for n in nodes}
        if set(columns) != listed:
            unknown.append(f"the table names nodes {', '.join(columns)}, the node list "
                           f"{', '.join(sorted(listed, key=int)) or 'none'}")
    return {"nodes": nodes, "connectivity": connectivity, "domain_state": domain, "unknown": unknown}
