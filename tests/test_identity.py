"""GPU identity: CUDA's device numbers mapped to NVML's boards under CUDA_VISIBLE_DEVICES, on the boards of the
recorded 2x H200 and 4x H200 machines (their UUIDs and serials from the bundles' nvml.json); a promised GPU that
CUDA_VISIBLE_DEVICES hides fails naming it; a failing rank's own last lines reach the failure's message."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_gpufabric.errors import WorkloadError
from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.workloads.environment import HiddenGpu, gpu_environment, promised_boards, workload_environment
from pytest_gpufabric.workloads.identity import IdentityError, map_devices, resolve_visible
from pytest_gpufabric.workloads.runner import run_workload

BUNDLES = Path(__file__).parent / "data" / "bundles"
X2 = BUNDLES / "h200-nvswitch-x2"
X4 = BUNDLES / "h200-nvswitch-x4"


def _boards(bundle: Path) -> list[dict]:
    record = json.loads((bundle / "nvml.json").read_text(encoding="utf-8"))
    return [{"index": g["index"], "uuid": g["uuid"], "serial": g["serial"], "pci_bus_id": g["pci_bus_id"],
             "name": g["name"]} for g in record["gpus"]]


@pytest.fixture
def x2() -> list[dict]:
    return _boards(X2)


def _bare(uuid: str) -> str:
    """The UUID as torch's device properties give it: without nvidia-smi's "GPU-"."""
    return uuid.removeprefix("GPU-")


def test_cuda_visible_devices_read_as_cuda_reads_it(x2):
    x4 = _boards(X4)
    indexes = lambda boards: [b["index"] for b in boards]  # noqa: E731
    assert indexes(resolve_visible(None, x4)) == [0, 1, 2, 3]
    assert indexes(resolve_visible("1,0", x2)) == [1, 0]
    assert indexes(resolve_visible("1", x2)) == [1]
    assert indexes(resolve_visible("", x2)) == []
    assert indexes(resolve_visible(f"{x4[2]['uuid']},{x4[0]['uuid'][:12]}", x4)) == [2, 0]  # a unique prefix
    # CUDA stops at the first entry naming no device, or one already named
    assert indexes(resolve_visible("3,7,1", x4)) == [3]
    assert indexes(resolve_visible("1,1,0", x2)) == [1]
    assert indexes(resolve_visible("GPU-,0", x2)) == []
    with pytest.raises(IdentityError, match="MIG instance"):
        resolve_visible("MIG-4b6ebbfe-8eac-8fed-1939-b4c545eafa7f", x2)


def test_each_cuda_device_is_named_by_its_board(x2):
    mapped = map_devices([_bare(x2[1]["uuid"]), _bare(x2[0]["uuid"])], x2, "1,0", "PCI_BUS_ID")
    assert [(m["cuda_index"], m["nvml_index"], m["serial"]) for m in mapped] == [
        (0, 1, x2[1]["serial"]), (1, 0, x2[0]["serial"])]
    assert mapped[0]["uuid"] == x2[1]["uuid"] and mapped[0]["pci_bus_id"] == x2[1]["pci_bus_id"]


def test_the_mapping_refuses_to_hold_what_it_cannot(x2):
    uuids = [_bare(b["uuid"]) for b in x2]
    with pytest.raises(IdentityError, match="CUDA_DEVICE_ORDER is unset .FASTEST_FIRST., not PCI_BUS_ID"):
        map_devices(uuids, x2, None, None)
    # CUDA numbered the boards otherwise than CUDA_VISIBLE_DEVICES and PCI order say: nothing is filed under them
    with pytest.raises(IdentityError, match=rf"CUDA device 0 is GPU1 \(serial {x2[1]['serial']}\), but "
                                            r"CUDA_VISIBLE_DEVICES=0,1 in PCI order makes CUDA's devices GPU0, GPU1"):
        map_devices(uuids[::-1], x2, "0,1", "PCI_BUS_ID")
    with pytest.raises(IdentityError, match="CUDA device 0 .GPU-00000000-.* is none of the 2 GPU.s. NVML lists"):
        map_devices(["00000000-0000-0000-0000-000000000000"], x2, None, "PCI_BUS_ID")
    with pytest.raises(IdentityError, match="CUDA shows 1 device.s. where CUDA_VISIBLE_DEVICES=None names 2"):
        map_devices(uuids[:1], x2, None, "PCI_BUS_ID")


def test_a_promised_gpu_hidden_from_cuda_fails_naming_it(monkeypatch):
    fabric = load_bundle(X2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(HiddenGpu) as info:
        promised_boards(fabric, 2, "h200-nvswitch-x2")
    serial0, serial1 = fabric.gpu(0).serial, fabric.gpu(1).serial
    assert str(info.value).startswith(
        f"GPU0 (serial {serial0}) promised by profile h200-nvswitch-x2 but hidden from CUDA by "
        f"CUDA_VISIBLE_DEVICES=1: no workload can measure it (CUDA sees GPU1 (serial {serial1}))")
    # a one-GPU profile is measured on GPU0 only: hiding GPU1 costs it nothing
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert [b["index"] for b in promised_boards(fabric, 1, "one")] == [0]


def test_the_workloads_see_the_promised_boards_in_the_users_order(monkeypatch):
    fabric = load_bundle(X4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,2,0")
    boards = promised_boards(fabric, 2, "two-of-four")
    assert [b["index"] for b in boards] == [1, 0]  # the promised GPU0 and GPU1, as CUDA_VISIBLE_DEVICES orders them
    env = gpu_environment(boards)
    assert env["CUDA_VISIBLE_DEVICES"] == f"{fabric.gpu(1).uuid},{fabric.gpu(0).uuid}"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert workload_environment()["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_session_fails_every_workload_test_on_a_hidden_gpu(pytester, monkeypatch, spares_left_cold):
    """The rule: a promised GPU CUDA cannot reach fails the tests that need it, with the reason, and a replay of
    the same machine's topology passes (NVML sees both GPUs; only the workloads are blind to one)."""
    from pytest_gpufabric.profile.loader import load_profile
    from pytest_gpufabric.run_options import RunOptions
    from pytest_gpufabric.session import FabricSession

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    session = FabricSession(RunOptions(profile=load_profile("h200-nvswitch-x2"), report_dir=pytester.path))
    session._fabric, session._discovered = load_bundle(X2), True  # the recorded machine, as if read live
    with pytest.raises(HiddenGpu, match=r"GPU0 \(serial \d+\) promised by profile h200-nvswitch-x2 but hidden"):
        session.measurement("bandwidth")
    with pytest.raises(HiddenGpu, match="hidden from CUDA by CUDA_VISIBLE_DEVICES=1"):
        session.measurement("nvlink")


FAILING_RANK = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {workloads!r})
    import torch
    from handshake import reporting_failure

    def main():
        if os.environ["RANK"] == "1":
            torch.zeros(2) @ torch.zeros(3)  # a real error, raised by torch on this rank only
        return 0

    raise SystemExit(reporting_failure(main))
""")


def test_a_failing_rank_says_why_in_the_failure(tmp_path):
    """torchrun's own summary says "exitcode: 1 ... To enable traceback see ..."; the failure names the rank and
    carries its own last error lines."""
    from pytest_gpufabric.workloads import identity

    script = tmp_path / "fails_on_rank_1.py"
    script.write_text(FAILING_RANK.format(workloads=str(Path(identity.__file__).parent)), encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)]
    with pytest.raises(WorkloadError) as info:
        run_workload(command, timeout_s=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert list(info.value.failures) == ["1"]
    message = str(info.value)
    assert "\nrank 1: " in message and message.rstrip().endswith(
        "RuntimeError: inconsistent tensor size, expected tensor [2] and src [3] to have the same number of "
        "elements, but got 2 and 3 elements respectively")
    assert "To enable traceback" not in message


# --- recorded on 1x H100 SXM 80GB (tests/data/results/identity-on-h100-x1, bundle h100-x1-identity) -------------

H100 = Path(__file__).parent / "data" / "results" / "identity-on-h100-x1"
H100_SERIAL, H100_UUID = "1652724032689", "GPU-8ba0144e-ffa5-9614-79dc-ae4cb8eeee22"  # read off nvml.json


def test_cuda_and_nvml_name_the_same_board_on_the_h100():
    """torch gives the UUID without NVML's "GPU-"; under every CUDA_VISIBLE_DEVICES form the mapping held."""
    probe = json.loads((H100 / "identity-probe.json").read_text(encoding="utf-8"))
    assert probe["nvml_uuids"] == [H100_UUID]
    assert [run["CUDA_VISIBLE_DEVICES"] for run in probe["runs"]] == [None, "0", H100_UUID, H100_UUID[:12]]
    for run in probe["runs"]:
        assert run["torch_uuid"] == [H100_UUID.removeprefix("GPU-")]
        assert run["boards"] == [{"cuda_index": 0, "nvml_index": 0, "uuid": H100_UUID, "serial": H100_SERIAL,
                                  "pci_bus_id": "00000000:00:06.0", "name": "NVIDIA H100 80GB HBM3"}]
        # and the mapping code, on what the machine said, agrees
        boards = [{"index": 0, "uuid": H100_UUID, "serial": H100_SERIAL, "pci_bus_id": "00000000:00:06.0",
                   "name": "NVIDIA H100 80GB HBM3"}]
        assert map_devices(run["torch_uuid"], boards, run["CUDA_VISIBLE_DEVICES"], "PCI_BUS_ID") == run["boards"]


def test_the_planted_fault_names_its_board_live_and_replayed(pytester):
    live = json.loads((H100 / "planted-results.json").read_text(encoding="utf-8"))
    (failed,) = [c for c in live["checks"] if c["verdict"] == "failed"]
    assert failed["name"] == "burn-in-gpu" and failed["subject"] == f"GPU0 (serial {H100_SERIAL})"
    assert live["burn_in"]["plant_fault_board"] == {"index": 0, "uuid": H100_UUID, "serial": H100_SERIAL}
    shutil.copy(H100 / "machine.yaml", pytester.path)
    shutil.copy(H100 / "identity.yaml", pytester.path)
    result = pytester.runpytest("--gpu-profile", "identity.yaml", "--gpu-replay", str(BUNDLES / "h100-x1-identity"),
                                "-k", "burn_in or copy_bandwidth or test_topology", "-p", "no:cacheprovider",
                                "--html", "report.html", "--self-contained-html")
    result.assert_outcomes(passed=10, failed=1, skipped=3)  # as live: the burn-in alone fails
    result.stdout.fnmatch_lines([f"*GPU0 (serial {H100_SERIAL}) NVIDIA H100 80GB HBM3: * wrong elements*REJECTED*"])
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert f"A fault was planted on CUDA device 0, which is GPU0 (serial {H100_SERIAL})" in page


def test_a_gpu_hidden_from_cuda_failed_every_workload_test_live():
    hidden = json.loads((H100 / "hidden-results.json").read_text(encoding="utf-8"))
    failed = {nodeid.rsplit("::", 1)[-1] for nodeid, outcome in hidden["tests"].items() if outcome == "failed"}
    assert failed == {"test_copy_bandwidth[gpu_to_gpu]", "test_copy_bandwidth[host_to_device]",
                      "test_copy_bandwidth[device_to_host]", "test_burn_in_gpu[GPU0]", "test_burn_in_collectives",
                      "test_burn_in_memory"}
    assert all(outcome == "passed" for nodeid, outcome in hidden["tests"].items() if "test_topology" in nodeid)
    log = (H100 / "log.txt").read_text(encoding="utf-8")
    assert log.count(f"GPU0 (serial {H100_SERIAL}) promised by profile identity but hidden from CUDA by "
                     "CUDA_VISIBLE_DEVICES=(empty): no workload can measure it (CUDA sees no GPU)") >= 6
    assert "AttributeError" not in log


# --- recorded on 2x H100 SXM (tests/data/results/identity-on-h100-x2, bundle h100-x2-identity) ---------------

H100_X2 = Path(__file__).parent / "data" / "results" / "identity-on-h100-x2"
#: read off that machine's nvml.json: NVML index -> (serial, UUID, bus id)
X2_BOARDS = {0: ("1752624020194", "GPU-553ea313-d709-ec59-4cb8-73d5c6af73ed", "00000000:00:06.0"),
             1: ("1752624013937", "GPU-52449011-a645-7391-39a5-139c36c7da81", "00000000:00:07.0")}


def test_the_reversed_order_maps_each_cuda_device_to_its_board_on_two_h100s():
    """CUDA_VISIBLE_DEVICES=1,0: CUDA device 0 is NVML GPU1 and CUDA device 1 is GPU0; a UUID (or its prefix)
    picks GPU1 alone. The mapping the workloads made on the machine is what map_devices makes of what it said."""
    probe = json.loads((H100_X2 / "identity-probe.json").read_text(encoding="utf-8"))
    assert probe["nvml_uuids"] == [X2_BOARDS[0][1], X2_BOARDS[1][1]]
    expected = {None: [0, 1], "1,0": [1, 0], X2_BOARDS[1][1]: [1], X2_BOARDS[1][1][:12]: [1]}
    assert [run["CUDA_VISIBLE_DEVICES"] for run in probe["runs"]] == list(expected)
    boards = [{"index": i, "uuid": uuid, "serial": serial, "pci_bus_id": bus, "name": "NVIDIA H100 80GB HBM3"}
              for i, (serial, uuid, bus) in X2_BOARDS.items()]
    for run in probe["runs"]:
        nvml_order = expected[run["CUDA_VISIBLE_DEVICES"]]
        assert [b["nvml_index"] for b in run["boards"]] == nvml_order
        assert [b["serial"] for b in run["boards"]] == [X2_BOARDS[i][0] for i in nvml_order]
        assert map_devices(run["torch_uuid"], boards, run["CUDA_VISIBLE_DEVICES"], "PCI_BUS_ID") == run["boards"]


def test_a_fault_planted_on_cuda_device_1_of_a_reversed_order_names_gpu0_live_and_replayed(pytester):
    live = json.loads((H100_X2 / "planted-results.json").read_text(encoding="utf-8"))
    (failed,) = [c for c in live["checks"] if c["verdict"] == "failed"]
    assert failed["name"] == "burn-in-gpu" and failed["subject"] == f"GPU0 (serial {X2_BOARDS[0][0]})"
    assert live["burn_in"]["plant_fault_board"] == {"index": 0, "uuid": X2_BOARDS[0][1], "serial": X2_BOARDS[0][0]}
    shutil.copy(H100_X2 / "machine.yaml", pytester.path)
    shutil.copy(H100_X2 / "identity.yaml", pytester.path)
    result = pytester.runpytest("--gpu-profile", "identity.yaml", "--gpu-replay", str(BUNDLES / "h100-x2-identity"),
                                "-k", "burn_in or copy_bandwidth or test_topology", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"*GPU0 (serial {X2_BOARDS[0][0]}) NVIDIA H100 80GB HBM3: * wrong elements*REJECTED*"])
    replay = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert replay["summary"]["verdict"] == "REJECTED"
    failed_replay = [p["id"] for p in replay["promises"] if p["outcome"] == "failed"]
    assert failed_replay == ["burn-in-gpu[GPU0]"]  # GPU1's burn-in passed: the fault is only where it was planted
    assert {p["id"]: p["outcome"] for p in replay["promises"]}["burn-in-gpu[GPU1]"] == "passed"


def test_a_gpu_hidden_from_cuda_is_named_by_serial_on_two_h100s():
    log = (H100_X2 / "log.txt").read_text(encoding="utf-8")
    assert log.count(f"GPU0 (serial {X2_BOARDS[0][0]}) promised by profile identity but hidden from CUDA by "
                     f"CUDA_VISIBLE_DEVICES=1: no workload can measure it (CUDA sees GPU1 (serial "
                     f"{X2_BOARDS[1][0]}))") >= 5
    hidden = json.loads((H100_X2 / "hidden-results.json").read_text(encoding="utf-8"))
    assert all(outcome == "passed" for nodeid, outcome in hidden["tests"].items() if "test_topology" in nodeid)
