"""The fleet's view of its nodes' last health checks: a ``gpufabric-health.json`` beside a node's results (what
``gpufabric health --json DIR/gpufabric-health.json`` writes) is read, and the nodes whose last check said DRAIN
(or could not tell) are listed with the check's own line. The acceptance verdicts are not changed by it: a health
check is a later, shorter look at the node, shown beside them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..formats.strict import load_json_text

HEALTH_FILE = "gpufabric-health.json"
HEALTH_FORMAT = "gpufabric-health-result/1"
MAX_BYTES = 4 << 20


def _read(path: Path) -> dict:
    """The health result at ``path``; raises ValueError saying why it cannot be used."""
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path.name} is not a regular file")
    if info.st_size > MAX_BYTES:
        raise ValueError(f"{path.name} is {info.st_size:,} bytes, more than a health result has")
    try:
        document = load_json_text(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path.name} is not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != HEALTH_FORMAT:
        raise ValueError(f"{path.name} is not a gpufabric health result (format {HEALTH_FORMAT})")
    if document.get("verdict") not in ("HEALTHY", "DRAIN", "UNKNOWN") or not isinstance(document.get("line"), str):
        raise ValueError(f"{path.name} holds no verdict and line")
    return document


def fleet_health(nodes) -> dict:
    """``{"checked": N, "drain": [...], "unknown": [...], "unreadable": [...]}``: each listed node as
    ``{"node", "line", "checked_at", "tier"}`` (unreadable: ``{"node", "error"}``), by node name."""
    summary: dict = {"checked": 0, "drain": [], "unknown": [], "unreadable": []}
    for node in sorted(nodes, key=lambda n: n.name):
        path = Path(node.directory) / HEALTH_FILE
        if not os.path.lexists(path):
            continue
        try:
            document = _read(path)
        except (OSError, ValueError) as exc:
            summary["unreadable"].append({"node": node.name, "error": str(exc)})
            continue
        summary["checked"] += 1
        if document["verdict"] != "HEALTHY":
            summary[document["verdict"].lower()].append({
                "node": node.name, "line": document["line"][:128], "checked_at": document.get("checked_at"),
                "tier": document.get("tier")})
    return summary
