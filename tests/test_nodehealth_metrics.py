"""The node_exporter textfile (nodehealth/metrics.py): the same series on every run, whatever the readings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_nodehealth import CPU_PROFILE, X2, X4, XID_79, gpu, planted

from pytest_gpufabric.cli import main

SERIES = re.compile(r"^(?P<name>[a-z_]+)(?P<labels>\{[^}]*\})? (?P<value>\S+)$")


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "GPUFABRIC_TEST_READ_DELAY_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    (tmp_path / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001\n")


def series(path: Path) -> dict[str, str]:
    """Each series (name and labels) of a textfile, with its value."""
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        match = SERIES.match(line)
        assert match, line
        found[match["name"] + (match["labels"] or "")] = match["value"]
    return found


def run(tmp_path: Path, bundle: Path, *extra: str) -> dict[str, str]:
    (tmp_path / "prom").mkdir(exist_ok=True)
    main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--prom", str(tmp_path / "prom"),
          "--state-dir", str(tmp_path / "state"), *extra])
    return series(tmp_path / "prom" / "gpufabric-health-passive.prom")


def test_different_readings_give_the_same_series(capsys, tmp_path):
    healthy = run(tmp_path, X4)
    faulty = run(tmp_path, planted(tmp_path, lambda d: (
        gpu(d, 1)["remapped_rows"].update(pending=1), gpu(d, 0).update(temperature_c=86),
        gpu(d, 2).update(temperature_c={"error": "UNKNOWN"}),
        d.update(kernel_log={"source": "/dev/kmsg", "error": None, "xids": [
            {"pci": "0000:00:07", "xid": 79, "age_s": 30.5, "text": XID_79}]}))))
    assert set(healthy) == set(faulty)
    assert len([k for k in healthy if k.startswith("gpufabric_health_check_status{")]) == 4 * 16
    gpu1 = ('tier="passive",gpu="1",uuid="GPU-8478a18a-03bc-4e21-8f4a-dc9fe8884ef9",pci_bus_id="00000000:00:07.0",'
            'serial="1653824128984"')
    assert healthy[f'gpufabric_health_check_status{{{gpu1},check="memory-repair"}}'] == "0"
    assert faulty[f'gpufabric_health_check_status{{{gpu1},check="memory-repair"}}'] == "1"
    assert faulty[f'gpufabric_health_check_status{{{gpu1},check="xid"}}'] == "1"
    temperature2 = next(k for k in faulty if 'gpu="2"' in k and 'check="temperature"' in k)
    assert (healthy[temperature2], faulty[temperature2]) == ("0", "2")
    assert faulty['gpufabric_health_checks{tier="passive",outcome="not_readable"}'] == "1"
    assert faulty['gpufabric_health_drain_remedy{tier="passive",remedy="reset"}'] == "1"
    assert all(v != "NaN" and "what=" not in k for k, v in {**healthy, **faulty}.items())


def test_a_run_that_reads_nothing_keeps_the_series_as_could_not_tell(tmp_path, monkeypatch, capsys):
    """A hung read (the deadline) still writes every GPU's series (the state's last known boards), each 2."""
    healthy = run(tmp_path, X4)
    monkeypatch.setenv("GPUFABRIC_TEST_READ_DELAY_S", "3")
    monkeypatch.setattr("os._exit", lambda rc: (_ for _ in ()).throw(SystemExit(rc)))
    with pytest.raises(SystemExit):
        run(tmp_path, X4, "--deadline", "0.5")
    hung = series(tmp_path / "prom" / "gpufabric-health-passive.prom")
    assert set(hung) == set(healthy)
    assert {v for k, v in hung.items() if k.startswith("gpufabric_health_check_status{")} == {"2"}
    assert hung['gpufabric_health_node_check_status{tier="passive",check="reading"}'] == "2"


def test_each_tier_writes_its_own_file(capsys, tmp_path):
    run(tmp_path, X4)
    assert sorted(p.name for p in (tmp_path / "prom").iterdir()) == ["gpufabric-health-passive.prom"]


def test_quick_checks_not_run_are_could_not_tell(capsys, tmp_path):
    """The quick tier's file when the passive tier drained first: its workloads did not run, so their series say 2,
    never 0 (ok)."""
    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    (tmp_path / "prom").mkdir()
    bundle = planted(tmp_path, lambda d: gpu(d, 1)["remapped_rows"].update(pending=1), X2)
    assert main(["health", "--quick", "--profile", str(tmp_path / "cpu-health.yaml"), "--replay", str(bundle),
                 "--prom", str(tmp_path / "prom")]) == 1
    found = series(tmp_path / "prom" / "gpufabric-health-quick.prom")
    status = {k.split('check="')[1].rstrip('"}'): v for k, v in found.items()
              if k.startswith('gpufabric_health_check_status{tier="quick",gpu="1"')}
    assert (status["memory-repair"], status["quick-gemm"], status["quick-hbm"], status["pcie-width"]) == (
        "1", "2", "2", "0")
