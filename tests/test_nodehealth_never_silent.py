"""`gpufabric health` is never silent: its own deadline inside slurmd's kill, its files written on every exit, and a
scheduler reason whose first 20 characters (what `sinfo -R` shows) name the board and the fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_nodehealth import X4, XID_79, gpu, planted

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "GPUFABRIC_BOOT_ID_FILE",
                 "GPUFABRIC_TEST_READ_DELAY_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))


def test_a_hung_read_is_unknown_within_the_deadline_with_its_files(tmp_path):
    """A reader that does not return (planted: GPUFABRIC_TEST_READ_DELAY_S) is 'could not finish in N s', exit 6,
    before the deadline's end plus the interpreter's start; the JSON and the .prom still say so."""
    (tmp_path / "prom").mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--profile", "h200-nvswitch-x4",
                           "--replay", str(X4), "--deadline", "1", "--reason", "--json", str(tmp_path / "h.json"),
                           "--prom", str(tmp_path / "prom")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), "GPUFABRIC_TEST_READ_DELAY_S": "30"})
    wall = time.monotonic() - started
    assert done.returncode == 6, done.stderr
    assert wall < 25  # the deadline cut the 30 s hang short (the rest: the interpreter's start, a loaded machine)
    assert done.stdout.splitlines()[:2] == ["gpufabric node hung: could not finish in 1 s; reset",
                                            "gpufabric: UNKNOWN node could not finish in 1 s; remedy: reset or reboot"]
    document = json.loads((tmp_path / "h.json").read_text())
    output.validate_result(document)
    assert document["findings"][0]["evidence"] == {"deadline_s": 1.0, "stage": f"reading {X4}"}
    prom = (tmp_path / "prom" / "gpufabric-health-passive.prom").read_text()
    assert 'gpufabric_health_exit_code{tier="passive"} 6' in prom


def test_a_usage_error_still_writes_its_files(capsys, tmp_path):
    result, prom = tmp_path / "h.json", tmp_path / "h.prom"
    assert main(["health", "--profile", "no-such-profile", "--replay", str(X4), "--json", str(result),
                 "--prom", str(prom)]) == 2
    err = capsys.readouterr().err
    document = json.loads(result.read_text())
    output.validate_result(document)
    assert (document["exit_code"], document["verdict"]) == (2, "UNKNOWN")
    assert document["line"].startswith("gpufabric: UNKNOWN node usage error: ")
    assert document["reason"].startswith("gpufabric node usage: usage error")
    assert document["findings"][0]["detail"] in err
    assert 'gpufabric_health_exit_code{tier="passive"} 2' in prom.read_text()


@pytest.mark.parametrize("edit,reason", [
    (lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:07", "xid": 79, "age_s": 30.5, "text": XID_79}]}),
     "gpufabric GPU1 xid79: Xid 79 fell off the bus, serial 1653824128984; reset"),
    (lambda d: (gpu(d, 1)["remapped_rows"].update(pending=1), gpu(d, 3).update(pcie_width_current=8)),
     "gpufabric GPU3 pcie: PCIe x8, the profile promises x16, serial 1653724034047 (+1 more); reseat"),
    (lambda d: gpu(d, 0).update(temperature_c={"error": "UNKNOWN"}),
     "gpufabric GPU0 temp?: temperature c not readable, serial 1653724049829; rerun"),
    (lambda d: None, "gpufabric ok: HEALTHY 4 GPUs, profile h200-nvswitch-x4"),
], ids=["xid", "two drains", "unknown", "healthy"])
def test_the_reason_names_board_and_fault_in_20_characters(capsys, tmp_path, edit, reason):
    bundle = planted(tmp_path, edit)
    main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--reason"])
    first = capsys.readouterr().out.splitlines()[0]
    assert first == reason


def test_the_deadline_is_inside_slurmds_kill(capsys):
    from pytest_gpufabric.nodehealth.command import DEFAULT_DEADLINE_S

    assert DEFAULT_DEADLINE_S == 50.0  # slurmd kills a HealthCheckProgram at 60 s; the interpreter starts in ~1 s
    with pytest.raises(SystemExit) as exited:
        main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(X4), "--deadline", "0"])
    assert exited.value.code == 2
    assert "argument --deadline: '0': give a number in (0, 86400]" in capsys.readouterr().err


@pytest.mark.parametrize("code,rc,line", [
    (46, 1, "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 46 GPU stopped processing; remedy: reset or reboot"),
    (54, 1, "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 54 Auxiliary power is not connected to the GPU board; "
            "remedy: reseat or recable"),
    (158, 1, "gpufabric: DRAIN GPU1 (serial 1653824128984) Xid 158 GPU Fatal Timeout; remedy: reset or reboot"),
    (13, 0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)"),
], ids=["46 reset", "54 mechanicals", "158 reset", "13 the application's"])
def test_every_xid_follows_nvidias_catalogue(capsys, tmp_path, code, rc, line):
    """Beyond the ten codes passive.XID_DRAIN words itself, an Xid drains where NVIDIA's catalogue's immediate
    resolution is a reset, a reboot, mechanicals, software or support (xid_catalog.py); RESTART_APP is shown. The
    line is the real Xid 79 line with its code edited."""
    text = XID_79.replace(": 79,", f": {code},")
    bundle = planted(tmp_path, lambda d: d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
        {"pci": "0000:00:07", "xid": code, "age_s": 30.5, "text": text}]}))
    assert main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle)]) == rc
    out = capsys.readouterr().out.splitlines()
    assert out[0] == line
    if code == 13:
        assert "  warn: GPU1 (serial 1653824128984): Xid 13 Graphics Engine Exception: " in "\n".join(out)
