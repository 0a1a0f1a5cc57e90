"""What the report's tables hold: a cell, a value or a time as text, a test by its short id, and the local folders
a text names written relative (never a local absolute path on a customer's page).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..paths import SUITES_DIR


def _relative_paths(text: str, base: Path | None) -> str:
    """``text`` with the local folders it names (where pytest was started, the package, the home folder) written
    relative or left out."""
    folders = [(str(base) if base else None, ""), (str(SUITES_DIR.parent.parent), ""), (os.path.expanduser("~"), "~")]
    # the longest first (the package's folder may lie below where pytest started), each only where the path's own
    # component ends: /tmp/run is not the start of /tmp/run-venv
    for folder, instead in sorted((f for f in folders if f[0] and f[0] != "/"), key=lambda f: -len(f[0])):
        text = re.sub(re.escape(folder.rstrip(os.sep)) + r"(?:(" + re.escape(os.sep) + r")|(?![\w.\-]))",
                      lambda m, instead=instead: instead + m.group(1) if m.group(1) and instead
                      else "" if m.group(1) else instead or ".", text)
    return text


def _text(value: object, missing: str = "not recorded") -> str:
    return missing if value is None or value == "" else str(value)


def _when(stamp: object) -> str | None:
    """'2026-11-25T15:37:05+00:00' -> '2026-11-25 15:37 UTC'."""
    if not stamp:
        return None
    text = str(stamp)
    match = re.match(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]00:?00)?", text)
    if match is None:
        return text
    return f"{match.group(1)} {match.group(2)}" + (" UTC" if match.group(3) else "")


def _cell(text: str, css: str = "", title: str = "") -> dict:
    return {"text": text, "css": css, "title": title}


def _short_nodeid(nodeid: str) -> str:
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest
