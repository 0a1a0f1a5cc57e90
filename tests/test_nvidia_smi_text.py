"""`gpufabric parse smi-table|smi-list|smi-q`: the nvidia-smi text forms, read from the real Blackwell (and one
Hopper) outputs of tests/data/captures/public/blackwell/ (SOURCES.md says where each came from; every expected value
below is read off the file by hand). Cut pastes are copies of those files, cut in tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.formats.nvidia_smi_text import parse_smi_list, parse_smi_q, parse_smi_table
from pytest_gpufabric.units import NA

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL = ROOT / "tests" / "data" / "captures" / "public" / "blackwell"
B200_OLD = BLACKWELL / "nvidia-smi-b200-8gpu-570.133.20-aws-p6-b200-old-header.txt"
B200_NEW = BLACKWELL / "nvidia-smi-b200-8gpu-580.95.05-new-header-process-names-cut.txt"
B300 = BLACKWELL / "nvidia-smi-b300-7of8gpu-610.57.04-kmd-umd-header.txt"
GB200 = BLACKWELL / "nvidia-smi-gb200-4gpu-580.126.09-openshift-driver-pod.txt"
GB300 = BLACKWELL / "nvidia-smi-gb300-4gpu-580.82.07.txt"
GB200_L = BLACKWELL / "nvidia-smi-L-gb200-4gpu-slurm-k8s-aarch64.txt"
B200_L = BLACKWELL / "nvidia-smi-L-b200-2of8gpu-gke-dra-pod.txt"
H100_Q = BLACKWELL / "nvidia-smi-q-h100-1gpu-560.35.03-della-fabric-completed-clique0.txt"
MIB = 1 << 20


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", "parse", *args], capture_output=True, text=True,
                          cwd=ROOT)


# --- the plain table ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, driver, cuda, header, count, name, total_mib, first_bus, last_bus, cap", [
    (B200_OLD, "570.133.20", "12.8", "drivers before 580", 8, "NVIDIA B200", 183359, "00000000:51:00.0",
     "00000000:87:00.0", 1000.0),
    (B200_NEW, "580.95.05", "13.0", "driver 580 and later", 8, "NVIDIA B200", 183359, "00000000:1B:00.0",
     "00000000:DF:00.0", 1000.0),
    (B300, "610.57.04", "13.3", "KMD Version / CUDA UMD Version", 7, "NVIDIA B300 SXM6 AC", 275040,
     "00000000:1A:00.0", "00000001:DB:00.0", 1100.0),
    (GB200, "580.126.09", "13.0", "driver 580 and later", 4, "NVIDIA GB200", 189471, "00000008:01:00.0",
     "00000019:01:00.0", 1200.0),
    (GB300, "580.82.07", "13.0", "driver 580 and later", 4, "NVIDIA GB300", 284208, "00000008:06:00.0",
     "00000019:06:00.0", 1400.0),
])
def test_table_reads_every_header_form_into_gpu_records(path, driver, cuda, header, count, name, total_mib,
                                                         first_bus, last_bus, cap):
    table = parse_smi_table(path.read_text())
    assert (table.driver_version, table.cuda_version) == (driver, cuda)
    assert header in table.header
    assert [g.index for g in table.gpus] == list(range(count))
    assert {g.name for g in table.gpus} == {name}
    assert {g.memory_bytes for g in table.gpus} == {total_mib * MIB}
    assert (table.gpus[0].pci_bus_id, table.gpus[-1].pci_bus_id) == (first_bus, last_bus)
    assert {e["power_cap_w"] for e in table.extra.values()} == {cap}
    assert table.unknown == [] or path == B200_NEW


def test_table_b200_old_header_values_read_by_hand():
    table = parse_smi_table(B200_OLD.read_text())
    assert table.extra[0]["power_draw_w"] == 145.0 and table.extra[7]["power_draw_w"] == 138.0
    assert table.extra[0]["persistence_mode"] == "Off"
    assert table.processes == []  # "No running processes found"


def test_table_process_memory_cut_by_nvidia_smi_is_unknown_not_counted():
    table = parse_smi_table(B200_NEW.read_text())
    assert table.extra[0]["memory_used_bytes"] == 100536 * MIB and table.extra[0]["utilization"] == "100%"
    assert len(table.processes) == 8
    first = table.processes[0]
    assert (first["gpu"], first["pid"], first["name"], first["memory_bytes"]) == (0, 2709700, "/opt/venv/bin/python",
                                                                                 None)
    assert table.processes[1]["memory_bytes"] == 98218 * MIB
    assert table.unknown == ["process 2709700 on GPU0: its memory '10052...' is cut by nvidia-smi's column (unknown)"]


def test_table_cut_inside_a_gpu_block_says_the_gpu_count_is_unknown(tmp_path):
    lines = GB200.read_text().splitlines()
    cut = "\n".join(lines[:lines.index(next(line for line in lines if "00000018:01:00.0" in line)) + 1])
    table = parse_smi_table(cut)
    assert [g.index for g in table.gpus] == [0, 1, 2]
    assert table.gpus[2].memory_bytes is None
    assert table.unknown == [
        "the GPU list stops inside GPU2's block: GPUs after GPU2 are not in the text (the GPU count is unknown)",
        "no process list in the text: the processes are unknown"]


def test_table_process_list_cut_before_its_border_is_said(tmp_path):
    lines = B200_NEW.read_text().splitlines()
    cut = "\n".join(line for line in lines[:-4])  # ends after GPU 4's process row
    table = parse_smi_table(cut)
    assert [p["gpu"] for p in table.processes] == [0, 1, 2, 3, 4]
    assert table.unknown[-1] == ("the process list stops before its closing border: processes after the last row "
                                 "are unknown")


def test_table_of_another_tool_is_refused_with_exit_2(tmp_path):
    result = _cli("smi-table", str(GB200_L))
    assert result.returncode == 2
    assert "not `nvidia-smi` output: nvidia-smi: no version line" in result.stderr
    assert "Traceback" not in result.stderr


# --- -L --------------------------------------------------------------------------------------------------------

def test_list_reads_gb200_uuids():
    listed = parse_smi_list(GB200_L.read_text())
    assert [(g.index, g.name) for g in listed.gpus] == [(i, "NVIDIA GB200") for i in range(4)]
    assert listed.gpus[0].uuid == "GPU-c180d613-630c-b39f-e5e0-7eaf7372e826"
    assert listed.gpus[3].uuid == "GPU-c7648206-65ae-2cb8-dc17-e7a40cb55fef"
    assert listed.unknown == []


def test_list_cut_line_and_gap_are_unknown(tmp_path):
    lines = GB200_L.read_text().splitlines()
    cut = "\n".join([lines[0], lines[2], lines[3][:40]])
    listed = parse_smi_list(cut)
    assert [g.index for g in listed.gpus] == [0, 2, 3]
    assert listed.gpus[2].uuid is None
    assert listed.unknown == [
        "line 3: GPU3's UUID is cut or missing: 'GPU 3: NVIDIA GB200 (UUID: GPU-c7648206-'",
        "GPU1 not in the list: the list is cut or filtered"]


def test_list_cli_json():
    result = _cli("smi-list", str(B200_L))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-00261f28-8bd7-afb7-c2d9-897ff3f13706",
                                                 "GPU-f538682c-7be3-18c8-91b6-5a3fc69143d0"]


# --- -q --------------------------------------------------------------------------------------------------------

def test_q_reads_inventory_and_fabric_of_a_real_hgx_h100_gpu():
    q = parse_smi_q(H100_Q.read_text())
    assert (q.driver_version, q.cuda_version, q.attached_gpus) == ("560.35.03", "12.6", 1)
    gpu = q.gpus[0]
    assert (gpu.name, gpu.serial, gpu.uuid, gpu.pci_bus_id) == (
        "NVIDIA H100 80GB HBM3", "1650124008279", "GPU-f7b02328-d6fe-5b1f-9683-15041689bb03", "00000000:DB:00.0")
    assert gpu.memory_bytes == 81559 * MIB
    assert (gpu.pcie_gen_max, gpu.pcie_width_current, gpu.vbios_version, gpu.ecc_mode) == (5, 16, "96.00.A5.00.01",
                                                                                           "Enabled")
    fabric = gpu.fabric
    assert (fabric.state, fabric.status, fabric.clique_id, fabric.cluster_uuid) == (
        "Completed", "Success", 0, "00000000-0000-0000-0000-000000000000")
    assert fabric.health == {}  # "Bandwidth : N/A"
    data = q.to_json()
    # one HGX board: clique 0 and an all-zero cluster UUID are its healthy answer, no rack domain
    assert data["fabric"] == {"domain": None, "problems": []}
    assert data["gpus"][0]["fabric_problem"] is None


def test_q_fabric_in_progress_is_a_problem_naming_the_gpu(tmp_path):
    text = H100_Q.read_text().replace("State                             : Completed",
                                      "State                             : In Progress")
    data = parse_smi_q(text).to_json()
    assert data["fabric"]["problems"] == [{"gpu": "GPU0", "why": "fabric state In Progress, not Completed (the "
                                                                 "fabric manager has not registered the GPU)"}]


def test_q_fabric_na_is_not_supported_not_a_failure(tmp_path):
    text = H100_Q.read_text()
    for key in ("State", "Status", "CliqueId", "ClusterUUID"):
        text = "\n".join(line.split(":")[0] + ": N/A" if line.strip().startswith(key + " ") else line
                         for line in text.splitlines())
    q = parse_smi_q(text)
    assert q.gpus[0].fabric.state is NA and q.gpus[0].fabric.clique_id is NA
    assert q.to_json()["fabric"] == {"domain": None, "problems": []}


def test_q_cut_before_the_fabric_section_and_gpus_missing_are_unknown(tmp_path):
    text = H100_Q.read_text().replace("Attached GPUs                             : 1",
                                      "Attached GPUs                             : 8")
    cut = text[:text.index("    Fabric\n")]
    q = parse_smi_q(cut)
    assert q.gpus[0].fabric is None
    assert q.unknown == ["the header says 8 attached GPUs, the text describes 1: the others are unknown (cut, or "
                         "printed with -i)"]


def test_q_cli_json_and_not_q_text_exit_2():
    result = _cli("smi-q", str(H100_Q))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["gpus"][0]["fabric"]["state"] == "Completed"
    wrong = _cli("smi-q", str(GB200))
    assert wrong.returncode == 2
    assert "not `nvidia-smi -q` output: nvidia-smi -q: no `GPU 00000000:XX:00.0` block" in wrong.stderr


# --- this project's own H200 VM (tests/data/captures/h200-x1-smi-text/FACTS.md) -----------------------------------

H200 = ROOT / "tests" / "data" / "captures" / "h200-x1-smi-text"


def test_the_three_text_forms_and_the_xml_agree_on_a_recorded_h200():
    from pytest_gpufabric.formats.nvidia_smi_q import parse_nvidia_smi_q_xml

    table = parse_smi_table((H200 / "nvidia-smi.txt").read_text())
    listed = parse_smi_list((H200 / "nvidia-smi-L.txt").read_text())
    q = parse_smi_q((H200 / "nvidia-smi-q.txt").read_text())
    xml = parse_nvidia_smi_q_xml((H200 / "nvidia-smi-q.xml").read_text())
    assert (table.driver_version, table.cuda_version) == ("580.159.04", "13.0")
    assert table.extra[0]["power_draw_w"] == 79.0 and table.extra[0]["power_cap_w"] == 700.0
    assert listed.gpus[0].uuid == q.gpus[0].uuid == xml.gpus[0].uuid == "GPU-213a48c5-960e-6649-3943-3af8e3379c63"
    assert q.gpus[0].serial == xml.gpus[0].serial == "1654024032393"
    assert table.gpus[0].pci_bus_id == q.gpus[0].pci_bus_id == xml.gpus[0].pci_bus_id == "00000000:00:06.0"
    assert table.gpus[0].memory_bytes == q.gpus[0].memory_bytes == xml.gpus[0].memory_bytes == 143771 * MIB
    for fabric in (q.gpus[0].fabric, xml.gpus[0].fabric):  # one GPU in a VM: no NVSwitch fabric, not a failure
        assert (fabric.state, fabric.status, fabric.clique_id, fabric.cluster_uuid) == (NA, NA, NA, NA)
        assert fabric.health == {} and fabric.unreadable == {}
    assert q.to_json()["fabric"] == {"domain": None, "problems": []}
    assert table.unknown == listed.unknown == q.unknown == []


def test_a_name_nvidia_smi_cut_is_unknown_not_another_model():
    """A copy of the B300 table with GPU 0's name cut as nvidia-smi cuts a name wider than its column."""
    text = B300.read_text().replace("|   0  NVIDIA B300 SXM6 AC            On  |",
                                    "|   0  NVIDIA B300 SXM6 A...       On  |", 1)
    table = parse_smi_table(text)
    assert table.gpus[0].name is None and table.gpus[1].name == "NVIDIA B300 SXM6 AC"
    assert table.unknown == ["GPU0 name 'NVIDIA B300 SXM6 A...' is cut by nvidia-smi's column: the model is unknown"]
