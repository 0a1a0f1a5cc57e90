"""examples/nhc/gpufabric.nhc: LBNL NHC's check_gpufabric, sourced as NHC sources its scripts, with NHC's `die`
and `log` standing in (they print what NHC would be told): the check's reason after NHC's "NHC: " prefix names the
board and the fault in the 20 characters sinfo -R shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_nodehealth import X4, gpu, planted

REPO = Path(__file__).resolve().parent.parent
NHC = REPO / "examples" / "nhc" / "gpufabric.nhc"


def nhc(tmp_path: Path, *args: str, **env: str) -> str:
    script = (f'die() {{ echo "die $1 NHC: $2"; }}; log() {{ echo "log $*"; }}; source {NHC}; '
              f'check_gpufabric "$@"; echo "rc $?"')
    done = subprocess.run(["bash", "-c", script, "nhc", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), "GPUFABRIC_STATE_DIR": str(tmp_path / "s"),
                               "GPUFABRIC": f"{sys.executable} -m pytest_gpufabric", **env})
    return done.stdout


@pytest.mark.parametrize("case,want", [
    ("healthy", "rc 0\n"),
    ("faulty", "die 1 NHC: GPU1 rrpend: rows pending remapping, serial 1653824128984; reset\nrc 1\n"),
    ("no profile", "die 1 NHC: node noprof: no profile or accepted results; software\nrc 1\n"),
])
def test_check_gpufabric_dies_with_the_reason(tmp_path, case, want):
    bundle = planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1)) if case == "faulty" else X4
    profile = [] if case == "no profile" else ["--profile", "h200-nvswitch-x4"]
    assert nhc(tmp_path, *profile, "--replay", str(bundle)) == want


def test_check_gpufabric_never_passes_a_check_that_did_not_run(tmp_path):
    assert nhc(tmp_path, "--profile", "h200-nvswitch-x4", GPUFABRIC="/nonexistent/gpufabric") == (
        "die 1 NHC: node rc127: gpufabric health exited 127 (command not found): /nonexistent/gpufabric\nrc 1\n")
    out = nhc(tmp_path, "--profile", "no-such-profile", "--replay", str(X4))
    assert out.startswith("die 1 NHC: node rc2: gpufabric health exited 2 (usage error): gpufabric: ")
    assert nhc(tmp_path, "--profile", "h200-nvswitch-x4", GPUFABRIC="/nonexistent/gpufabric",
               GPUFABRIC_ON_ERROR="ignore").startswith("log check_gpufabric:  gpufabric health exited 127")
