"""The CUDA driver API wrapper of the copy workload (workloads/cuda_driver.py) and the runner's cold start for a
workload that needs nothing a spare interpreter imports ahead. The copies themselves run on GPU machines
(tests/data/results/copy-driver-h100-x1 compares them with torch's)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pytest_gpufabric.workloads as workloads
from pytest_gpufabric.workloads import runner
from pytest_gpufabric.workloads.cuda_driver import CudaDriver, DriverError, uuid_text
from pytest_gpufabric.workloads.identity import map_devices


def test_a_missing_driver_library_is_one_clear_error():
    with pytest.raises(DriverError, match=r"the NVIDIA driver's libcuda-missing\.so\.1 could not be loaded"):
        CudaDriver("libcuda-missing.so.1")


def test_the_uuid_reads_as_torch_and_nvml_write_it():
    # GPU-3c06c1f9-... is the H100 of tests/data/results/health-live-h100-x1 (NVML's UUID, nvidia-smi -L)
    raw = bytes.fromhex("3c06c1f93bb372e69ccb568b8717d4ea")
    assert uuid_text(raw) == "3c06c1f9-3bb3-72e6-9ccb-568b8717d4ea"
    board = {"index": 0, "uuid": "GPU-3c06c1f9-3bb3-72e6-9ccb-568b8717d4ea", "serial": "1651724081675"}
    assert map_devices([uuid_text(raw)], [board], None, "PCI_BUS_ID")[0]["serial"] == "1651724081675"


def test_a_workload_that_needs_no_spare_starts_cold_at_once(tmp_path, monkeypatch):
    """A spare interpreter is still importing (here: sleeping 30 s before it reads its script); a workload that
    imports nothing a spare holds (runner.NO_SPARE) does not wait for it."""
    script = tmp_path / "work.py"
    script.write_text("import json, sys\n"
                      "open(sys.argv[sys.argv.index('--result') + 1], 'w').write(json.dumps({'ok': True}))\n")
    slow = tmp_path / "slow_spare.py"
    slow.write_text("import time; time.sleep(30)\n")
    spares = runner.SpareInterpreters()
    monkeypatch.setattr(spares, "SCRIPT", slow)
    monkeypatch.setattr(runner, "SPARES", spares)
    spares.prestart(None, [runner.TORCH_ONLY])
    try:
        started = time.monotonic()
        result = runner.run_workload([sys.executable, str(script)], timeout_s=25, spare_imports=runner.NO_SPARE)
        assert result["ok"] is True and result["runner"]["started_in"] == "cold"
        assert time.monotonic() - started < 25  # not the sleeping spare's 30 s
        assert len(spares._spares) == 1  # the spare is left for a workload that wants torch
    finally:
        spares.disable()


def test_the_copy_script_imports_no_torch_for_one_gpu():
    """copy_bw.py imports torch only for GPU pairs: its module and the driver wrapper import without it."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import copy_bw, cuda_driver; "
            "print(json.dumps('torch' in sys.modules))")
    folder = str(Path(workloads.__file__).parent)
    done = subprocess.run([sys.executable, "-c", code, folder], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is False


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="a machine with the NVIDIA driver")
def test_the_copy_workload_without_a_driver_says_so_in_one_line(tmp_path):
    """On a machine without the NVIDIA driver (this one) the copy workload exits 2 with one line naming why, as the
    runner relays it, never a traceback."""
    script = Path(workloads.__file__).parent / "copy_bw.py"
    done = subprocess.run([sys.executable, str(script), "--size", "1024", "--result", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "copy_bw: the NVIDIA driver's libcuda.so.1 could not be loaded: libcuda.so.1: cannot open shared object "
        "file: No such file or directory: copy bandwidth needs GPUs"]
