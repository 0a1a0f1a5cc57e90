"""reports/gpufabric-results.json: the run's results for pipelines, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def json_default(value: object) -> object:
    """For json.dump: NA prints as "N/A", Paths as text."""
    return str(value)


def write_json(document: dict, path: Path) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gpufabric-results.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2, default=json_default)
        handle.write("\n")
    os.replace(tmp, path)
    return path
