"""Edited copies of shipped bundles replayed against a profile: what the adversarial tests share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


def copy_bundle(pytester: pytest.Pytester, bundle: Path) -> Path:
    """A copy of a shipped bundle under the run's folder, to edit."""
    target = pytester.path / f"{bundle.name}-edited"
    shutil.copytree(bundle, target)
    return target


def edit_json(path: Path, change) -> None:
    """DERIVED: the JSON file as recorded, changed by ``change(data)``, written back (NaN stays the NaN token, as a
    broken writer leaves it)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


#: no shipped bundle holds a kernel log, so xid-events is never shown: the adversarial replays waive it in writing
#: (as customer and vendor may), so that an edit that still ends ACCEPTED is seen as such
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the adversarial tests"


def replay(pytester: pytest.Pytester, profile: str | Path, bundle: Path, *args: str) -> tuple[int, dict]:
    """(exit code, results) of a replay, which never ends in a traceback and writes the exit code it ends with."""
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpu-profile", str(profile), "--gpu-replay",
                                str(bundle), "--gpu-waive", NO_KERNEL_LOG, *args)
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str()
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert document["summary"]["exit_code"] == result.ret
    return result.ret, document
