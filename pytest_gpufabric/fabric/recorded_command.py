"""A tool `gpufabric snapshot` runs into a bundle, as its manifest records it: the command line, its exit code and
the end of its stderr, or why it could not run; its output is written into the bundle only where it exited 0."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def record_command(target: Path, name: str, cmd: list[str], timeout_s: float) -> dict:
    """Run ``cmd``, write its stdout to ``target / name`` where it exited 0; the manifest's entry for ``name``."""
    if shutil.which(cmd[0]) is None:
        return {"cmd": cmd, "error": f"{cmd[0]} not on PATH"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"cmd": cmd, "error": str(exc)}
    if done.returncode == 0:
        (target / name).write_text(done.stdout, encoding="utf-8")
    return {"cmd": cmd, "returncode": done.returncode, "stderr": done.stderr[-2000:]}
