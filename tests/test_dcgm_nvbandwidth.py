"""The dcgmi diag and nvbandwidth parsers on outputs published outside this project, whole and cut.

Every expected value below was read off the capture by eye (tests/data/captures/public/dcgm/README.md and
.../nvbandwidth/README.md list them with each file's source), not off the parser. The cut variants are made here
from the real files: whatever a cut paste still reports as a pass must be exactly what the whole file reports, and
whatever the cut lost must be named in ``unreadable``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_gpufabric.formats.dcgm_diag import CUT_ARRAY, CUT_OBJECT, parse_dcgm_diag, read_cut_json
from pytest_gpufabric.formats.nvbandwidth import parse_nvbandwidth

PUBLIC = Path(__file__).parent / "data" / "captures" / "public"
DCGM = PUBLIC / "dcgm"
NVB = PUBLIC / "nvbandwidth"

DCGM_2X = "dcgm-2.x-level4-blacklist-memtest-pulse-all-pass-prompt.txt"
DCGM_338 = "dcgm-3.3.8-h100-level2-persistence-info-row.txt"
DCGM_310_JSON = "dcgm-3.1.0-nvvs-json-8gpu-null-entries-uppercase-status.json"
DCGM_339_FAIL = "dcgm-3.3.9-a10g-4gpu-level3-targeted-power-fail-gpu1-eud-skip.txt"
DCGM_13_JSON = "dcgm-1.3-nvvs-json-4gpu-sm-stress-fail-memory-skip-gpu0-from-dcgm-tests.json"
DCGM_17_JSON = "dcgm-1.7-nvvs-json-per-gpu-sm-stress-fail-gpu-0-2-3-from-dcgm-tests.json"
NVB_README = "nvbandwidth-readme-8gpu-d2d-write-ce-zero-diagonal-no-sum.txt"
NVB_04 = "nvbandwidth-v0.4-h100-8gpu-d2d-read-ce-na-diagonal-root-prompt.txt"
NVB_05 = "nvbandwidth-v0.5-a10-1gpu-h2d-ce-markdown-fence-prompt.txt"
NVB_05_JSON = "nvbandwidth-v0.5-json-verbose-1gpu-waived-dcgm-plugin-test-input.json"
NVB_07 = "nvbandwidth-v0.7-gb200-multinode-8rank-kubectl-mpi-bindings.txt"

DCGM_FILES = sorted(p.name for p in DCGM.iterdir() if p.suffix in (".txt", ".json"))
NVB_FILES = sorted(p.name for p in NVB.iterdir() if p.suffix in (".txt", ".json"))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _by_name(result: dict) -> dict[str, dict]:
    return {t["name"]: t for t in result["tests"]}


def test_every_capture_has_a_readme_entry():
    for folder, files in ((DCGM, DCGM_FILES), (NVB, NVB_FILES)):
        readme = _read(folder / "README.md")
        for name in files:
            assert f"`{name}`" in readme, f"{name} is not described in {folder / 'README.md'}"


# --- dcgmi diag -----------------------------------------------------------------------------------------------------

DEPLOYMENT_2X_3X = ["deployment:denylist", "deployment:nvml_library", "deployment:cuda_main_library",
                    "deployment:permissions", "deployment:persistence_mode", "deployment:environment_variables",
                    "deployment:page_retirement", "deployment:graphics_processes", "deployment:inforom"]


def test_dcgm_2x_level4_table_with_prompt():
    result = parse_dcgm_diag(_read(DCGM / DCGM_2X))
    assert (result["tool"], result["format"], result["dcgm_version"], result["level"]) == ("dcgmi diag", "text",
                                                                                           None, 4)
    assert result["unreadable"] == []
    names = [t["name"] for t in result["tests"]]
    assert names == DEPLOYMENT_2X_3X + ["pcie", "memory", "diagnostic", "pulse_test", "sm_stress", "targeted_stress",
                                        "targeted_power", "memory_bandwidth", "memtest"]
    tests = _by_name(result)
    assert tests["deployment:denylist"]["display_name"] == "Blacklist"
    assert tests["memory"]["display_name"] == "GPU Memory"
    assert tests["pcie"]["category"] == "Integration" and tests["pulse_test"]["category"] == "Hardware"
    assert tests["memtest"]["category"] == "Stress"
    # "Pass - All": every GPU passed, and dcgmi did not say which GPUs those were
    for name in ("pcie", "memory", "diagnostic", "pulse_test", "sm_stress", "targeted_stress", "targeted_power",
                 "memory_bandwidth", "memtest"):
        assert tests[name]["status"] == "pass"
        assert tests[name]["gpus"] == [{"gpu": None, "status": "pass", "message": None}]
    assert all(tests[n]["status"] == "pass" for n in DEPLOYMENT_2X_3X)


def test_dcgm_338_metadata_info_row_and_empty_stress_section():
    result = parse_dcgm_diag(_read(DCGM / DCGM_338))
    assert (result["dcgm_version"], result["driver_version"], result["level"]) == ("3.3.8", "535.309.01", None)
    assert result["unreadable"] == []
    assert [t["name"] for t in result["tests"]] == DEPLOYMENT_2X_3X + ["pcie", "memory"]
    tests = _by_name(result)
    persistence = tests["deployment:persistence_mode"]
    assert persistence["status"] == "pass" and persistence["display_name"] == "Persistence Mode"
    # the Info row, cut by dcgmi into 45-character pieces, read back whole ("Enabl" + "e persistence ...")
    assert persistence["messages"] == [{
        "kind": "info", "gpu": None,
        "text": 'Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi -i <gpuId> '
                '-pm 1 " as root.'}]
    assert persistence["gpus"] == [{"gpu": None, "status": "pass", "message": None}]  # info is not a warning
    assert tests["pcie"]["status"] == "pass" and tests["pcie"]["category"] == "Integration"
    assert tests["memory"]["display_name"] == "GPU Memory" and tests["memory"]["category"] == "Hardware"


def test_dcgm_310_nvvs_json_uppercase_statuses_and_null_holes():
    result = parse_dcgm_diag(_read(DCGM / DCGM_310_JSON))
    assert (result["format"], result["dcgm_version"], result["level"]) == ("json", "3.1.0", None)
    assert result["unreadable"] == []
    # nine deployment checks (with a null between each two) and the "software" test of category Custom
    assert [t["name"] for t in result["tests"]] == DEPLOYMENT_2X_3X + ["software"]
    tests = _by_name(result)
    assert tests["deployment:permissions"]["display_name"] == "Permissions and OS-related Blocks"
    assert tests["deployment:environment_variables"]["display_name"] == "Environmental Variables"
    # "gpu_ids": "0,1,2,3,4,5,6,7" with "status": "PASS"
    assert [g["gpu"] for g in tests["deployment:denylist"]["gpus"]] == list(range(8))
    assert {g["status"] for g in tests["deployment:denylist"]["gpus"]} == {"pass"}
    software = tests["software"]
    assert software["category"] == "Custom" and software["status"] == "pass"
    assert software["gpus"] == [{"gpu": i, "status": "pass", "message": None} for i in range(8)]


# --- dcgmi diag: failures, skips, and the GPU each one is on ----------------------------------------------------

TARGETED_POWER_GPU1 = ("GPU 1 Max power of 224.1 did not reach desired power minimum target_power_min_ratio of 224.2 "
                       "for GPU 1 Verify that the clock speeds and GPU utilization are high.")
SM_STRESS = "Max stress level of {} did not exceed desired stress level of 3000.0 for GPU {}"


def test_dcgm_339_targeted_power_fails_on_gpu1_with_dcgms_warning():
    result = parse_dcgm_diag(_read(DCGM / DCGM_339_FAIL))
    assert (result["format"], result["dcgm_version"], result["driver_version"], result["level"]) == (
        "text", "3.3.9", "570.195.03", None)
    assert result["unreadable"] == []
    assert [t["name"] for t in result["tests"]] == DEPLOYMENT_2X_3X + [
        "pcie", "memory", "diagnostic", "targeted_stress", "targeted_power", "memory_bandwidth", "eud"]
    tests = _by_name(result)
    power = tests["targeted_power"]
    assert (power["display_name"], power["category"], power["status"]) == ("Targeted Power", "Stress", "fail")
    # "Pass - GPUs: 0, 2, 3" then "Fail - GPU: 1"; the Warning row, cut into four pieces, begins "GPU 1 "
    assert power["gpus"] == [{"gpu": 0, "status": "pass", "message": None},
                             {"gpu": 2, "status": "pass", "message": None},
                             {"gpu": 3, "status": "pass", "message": None},
                             {"gpu": 1, "status": "fail", "message": TARGETED_POWER_GPU1}]
    assert power["messages"] == [
        {"kind": "warning", "gpu": 1, "text": TARGETED_POWER_GPU1},
        {"kind": "info", "gpu": 0, "text": "GPU 0 GPU 0 max power: 299.5 W average power usage: 299.0 W"},
        {"kind": "info", "gpu": 2, "text": "GPU 2 GPU 2 max power: 227.0 W average power usage: 224.0 W"},
        {"kind": "info", "gpu": 3, "text": "GPU 3 GPU 3 max power: 225.6 W average power usage: 223.9 W"}]
    # "EUD Test | Skip - All": skipped, on GPUs dcgmi did not name, with no message
    eud = tests["eud"]
    assert (eud["display_name"], eud["status"], eud["messages"]) == ("EUD Test", "skip", [])
    assert eud["gpus"] == [{"gpu": None, "status": "skip", "message": None}]
    for name in DEPLOYMENT_2X_3X + ["pcie", "memory", "diagnostic", "targeted_stress", "memory_bandwidth"]:
        assert tests[name]["status"] == "pass", name
    assert [t["name"] for t in result["tests"] if t["status"] == "fail"] == ["targeted_power"]


def test_dcgm_339_cut_after_the_failing_gpu_row_keeps_the_failure():
    text = _read(DCGM / DCGM_339_FAIL)
    row = "|                           | Fail - GPU: 1                                  |\n"
    result = parse_dcgm_diag(text[:text.index(row) + len(row)])
    power = _by_name(result)["targeted_power"]
    assert power["status"] == "fail"
    assert [(g["gpu"], g["status"]) for g in power["gpus"]] == [(0, "pass"), (2, "pass"), (3, "pass"), (1, "fail")]
    assert power["gpus"][3]["message"] is None  # the warning came after the cut
    assert any("without its closing border" in u for u in result["unreadable"])
    # cut between "Pass - GPUs: 0, 2, 3" and "Fail - GPU: 1": nothing may read as a pass of the whole test
    row = "| Targeted Power            | Pass - GPUs: 0, 2, 3                           |\n"
    power = _by_name(parse_dcgm_diag(text[:text.index(row) + len(row)]))["targeted_power"]
    assert power["status"] == "unreadable"


def test_dcgm_17_per_gpu_json_sm_stress_fails_on_gpus_0_2_3():
    result = parse_dcgm_diag(_read(DCGM / DCGM_17_JSON))
    assert (result["format"], result["dcgm_version"], result["level"]) == ("json", "1.7", None)
    assert result["unreadable"] == []
    assert [t["name"] for t in result["tests"]] == DEPLOYMENT_2X_3X + [
        "memory", "diagnostic", "pcie", "memory_bandwidth", "sm_stress", "targeted_stress", "targeted_power"]
    tests = _by_name(result)
    assert tests["deployment:page_retirement"]["display_name"] == "Page Retirement"
    sm = tests["sm_stress"]
    assert (sm["category"], sm["status"]) == ("Stress", "fail")
    assert sm["gpus"] == [{"gpu": 0, "status": "fail", "message": SM_STRESS.format("2128.7", 0)},
                          {"gpu": 1, "status": "pass", "message": None},
                          {"gpu": 2, "status": "fail", "message": SM_STRESS.format("1096.5", 2)},
                          {"gpu": 3, "status": "fail", "message": SM_STRESS.format("1099.7", 3)}]
    assert {"kind": "info", "gpu": 1, "text": "GPU 1 relative stress level:\t577"} in sm["messages"]
    memory = tests["memory"]
    assert (memory["category"], memory["status"]) == ("Hardware", "skip")
    assert memory["gpus"][0] == {"gpu": 0, "status": "skip", "message": (
        'ECC memory on GPU 0 is not currently active. Please use "nvidia-smi -i 0 -e 1" to enable and reboot.')}
    assert [(g["gpu"], g["status"]) for g in memory["gpus"][1:]] == [(1, "pass"), (2, "pass"), (3, "pass")]
    assert [g["message"] for g in tests["memory_bandwidth"]["gpus"]] == [
        f"GPU {i}: The memory bandwidth test is skipped for this GPU." for i in range(4)]
    assert tests["diagnostic"]["status"] == "skip" and tests["pcie"]["status"] == "pass"
    assert [g["status"] for g in tests["targeted_power"]["gpus"]] == ["skip"] * 4
    assert [t["name"] for t in result["tests"] if t["status"] == "fail"] == ["sm_stress"]


def test_dcgm_13_json_one_result_for_four_gpus_fails_them_all_as_dcgm_reads_it():
    result = parse_dcgm_diag(_read(DCGM / DCGM_13_JSON))
    assert (result["format"], result["dcgm_version"]) == ("json", "1.3")
    assert result["unreadable"] == []
    tests = _by_name(result)
    assert tests["deployment:denylist"]["display_name"] == "Blacklist"
    # "gpu_ids": "0,1,2,3", "status": "FAIL", three warnings that name GPUs 0, 2 and 3: DCGM's own reader gives the
    # status and every warning to each GPU listed, and so does this one
    sm = tests["sm_stress"]
    warnings = "\n".join([SM_STRESS.format("2128.7", 0), SM_STRESS.format("1096.5", 2),
                          SM_STRESS.format("1099.7", 3)])
    assert sm["status"] == "fail"
    assert sm["gpus"] == [{"gpu": i, "status": "fail", "message": warnings} for i in range(4)]
    memory = tests["memory"]
    assert memory["status"] == "skip"
    assert memory["gpus"][0] == {"gpu": 0, "status": "skip", "message": (
        'ECC memory on this card is not currently active. Please use "nvidia-smi -i 0 -e 1" to enable and reboot.')}
    assert [g["status"] for g in memory["gpus"]] == ["skip", "pass", "pass", "pass"]
    assert tests["diagnostic"]["gpus"][2] == {"gpu": 2, "status": "skip",
                                              "message": "Unable to find hardware diagnostic, skipping this test."}
    # "warnings": null
    assert tests["targeted_power"]["gpus"] == [{"gpu": i, "status": "skip", "message": None} for i in range(4)]
    assert [t["name"] for t in result["tests"] if t["status"] == "fail"] == ["sm_stress"]


@pytest.mark.parametrize("name", DCGM_FILES)
def test_dcgm_statuses_are_the_documented_words(name):
    result = parse_dcgm_diag(_read(DCGM / name))
    for test in result["tests"]:
        assert test["status"] in ("pass", "fail", "warn", "skip", "not run", "unreadable")
        for gpu in test["gpus"]:
            assert gpu["status"] in ("pass", "fail", "warn", "skip", "not run", "unreadable")


def _dcgm_cut_is_honest(full: dict, cut: dict, label: str) -> None:
    """What the cut paste calls a pass is a pass in the whole paste too, and whatever it lost is listed."""
    whole = full["tests"]
    for i, test in enumerate(cut["tests"]):
        assert i < len(whole) and test["name"] == whole[i]["name"], label
        if test["status"] == "pass":
            assert whole[i]["status"] == "pass", f"{label}: {test['name']} reads as pass"
        for j, gpu in enumerate(test["gpus"]):
            if gpu["status"] == "pass":
                assert whole[i]["gpus"][j]["status"] == "pass", f"{label}: {test['name']} GPU {gpu['gpu']}"
    lost = (len(cut["tests"]) != len(whole)
            or any(a["gpus"] != b["gpus"] or a["status"] != b["status"] for a, b in zip(cut["tests"], whole,
                                                                                      strict=False)))
    if lost:
        assert cut["unreadable"], f"{label}: lost results but unreadable is empty"


@pytest.mark.parametrize("name", DCGM_FILES)
def test_dcgm_cut_anywhere_never_reads_a_cut_status_as_pass(name):
    text = _read(DCGM / name)
    full = parse_dcgm_diag(text)
    for cut in range(1, len(text.rstrip()), 7):
        label = f"{name} cut at {cut}"
        try:
            result = parse_dcgm_diag(text[:cut])
        except ValueError:
            continue  # cut before the table (or the JSON document) began
        _dcgm_cut_is_honest(full, result, label)
        if text[cut:].strip():
            assert result["unreadable"], f"{label}: nothing listed as unreadable"


def test_dcgm_cut_inside_a_status_word_is_listed_not_passed():
    text = _read(DCGM / DCGM_338)
    cut = text.index("| Graphics Processes        | Pa") + len("| Graphics Processes        | Pa")
    result = parse_dcgm_diag(text[:cut])
    assert "deployment:graphics_processes" not in _by_name(result)
    assert any("| Graphics Processes        | Pa" in u for u in result["unreadable"])
    assert any("without its closing border" in u for u in result["unreadable"])


def test_dcgm_2x_cut_inside_the_gpu_summary_makes_the_test_unreadable():
    # 1.x-3.x may list more GPUs on the rows after "Pass - All"/"Pass - GPUs": a table cut right after that row
    # does not show whether a "Fail - GPU: n" row followed
    text = _read(DCGM / DCGM_2X)
    cut = text.index("| Memtest                   | Pass - All                                     |\n") + 80
    result = parse_dcgm_diag(text[:cut])
    assert result["tests"][-1]["name"] == "memtest" and result["tests"][-1]["status"] == "unreadable"
    assert _by_name(result)["memory_bandwidth"]["status"] == "pass"


def test_dcgm_json_cut_inside_a_result_keeps_whole_results_only():
    text = _read(DCGM / DCGM_310_JSON)
    cut = text.index('"gpu_ids" : 5,') + len('"gpu_ids" : 5,')
    result = parse_dcgm_diag(text[:cut])
    software = _by_name(result)["software"]
    assert [g["gpu"] for g in software["gpus"] if g["status"] == "pass"] == [0, 1, 2, 3, 4]
    assert software["status"] == "unreadable"
    assert result["dcgm_version"] is None  # "version" comes after the tests
    assert any("cut" in u for u in result["unreadable"])


@pytest.mark.parametrize("text", [
    "",
    "Error: unable to establish a connection to the specified host: localhost\n",
    "Successfully ran diagnostic for group.\n",
    '{"nvbandwidth": {"testcases": []}}\n',
    "[1, 2, 3]\n",
])
def test_dcgm_refuses_what_is_not_dcgmi_output(text):
    with pytest.raises(ValueError):
        parse_dcgm_diag(text)


@pytest.mark.parametrize("path", sorted((PUBLIC / "nvidia-smi").glob("*.txt"))[:6] + [NVB / NVB_04, NVB / NVB_07],
                         ids=lambda p: p.name)
def test_dcgm_refuses_other_tools_output_naming_a_line(path):
    with pytest.raises(ValueError, match=r"line \d+"):
        parse_dcgm_diag(_read(path))


# --- nvbandwidth ----------------------------------------------------------------------------------------------------


def _one(result: dict) -> dict:
    assert len(result["testcases"]) == 1
    return result["testcases"][0]


def test_nvbandwidth_v04_h100_d2d_read_with_root_prompt():
    result = parse_nvbandwidth(_read(NVB / NVB_04))
    assert (result["version"], result["format"], result["git_version"]) == ("v0.4", "text", "v0.4.2-12-g8857188")
    assert (result["cuda_runtime"], result["cuda_driver"], result["driver"]) == (12020, 12080, "570.133.20")
    assert result["devices"] == [{"index": i, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": None} for i in range(8)]
    assert result["unreadable"] == []
    test = _one(result)
    assert (test["name"], test["status"], test["unit"], test["row_label"], test["column_label"]) == (
        "device_to_device_memcpy_read_ce", "passed", "GB/s", "GPU", "GPU")
    matrix = test["matrix"]
    assert len(matrix) == 8 and all(len(row) == 8 for row in matrix)
    assert [matrix[i][i] for i in range(8)] == [None] * 8  # N/A
    assert (matrix[0][1], matrix[0][7], matrix[2][4], matrix[7][0]) == (370.90, 371.67, 372.96, 370.51)
    assert test["sum"] == 20785.58


def test_nvbandwidth_v05_a10_in_a_markdown_fence():
    result = parse_nvbandwidth(_read(NVB / NVB_05))
    assert (result["version"], result["git_version"]) == ("v0.5", "v0.5-1-g4da7d7e")
    assert (result["cuda_runtime"], result["cuda_driver"], result["driver"]) == (12040, 12040, "550.54.15")
    assert result["devices"] == [{"index": 0, "name": "NVIDIA A10", "pci_bus_id": None}]
    assert result["unreadable"] == []
    test = _one(result)
    assert (test["name"], test["status"], test["row_label"], test["column_label"]) == (
        "host_to_device_memcpy_ce", "passed", "CPU", "GPU")
    assert test["matrix"] == [[25.17]] and test["sum"] == 25.17


def test_nvbandwidth_v07_multinode_gb200_after_kubectl_and_mpi_lines():
    result = parse_nvbandwidth(_read(NVB / NVB_07))
    assert (result["version"], result["cuda_runtime"], result["cuda_driver"], result["driver"]) == (
        "v0.7", 12080, 12080, "570.124.06")
    assert result["mpi_version"].startswith("Open MPI v4.1.4, package: Debian OpenMPI")
    assert result["unreadable"] == []
    devices = result["devices"]
    assert [(d["process"], d["host"], d["index"]) for d in devices] == [
        (p, f"nvbandwidth-test-worker-{p // 4}", p % 4) for p in range(8)]
    assert devices[0]["name"] == "HGX GB200" and devices[0]["pci_bus_id"] == "00000008:01:00"
    assert devices[7]["pci_bus_id"] == "00000019:01:00"
    test = _one(result)
    assert (test["name"], test["status"]) == ("multinode_device_to_device_memcpy_read_ce", "passed")
    matrix = test["matrix"]
    assert (matrix[0][1], matrix[0][2], matrix[2][7], matrix[7][6], matrix[5][5]) == (
        798.02, 798.25, 797.65, 798.02, None)
    assert test["sum"] == 44685.29


def test_nvbandwidth_readme_excerpt_without_sum_is_incomplete_not_passed():
    result = parse_nvbandwidth(_read(NVB / NVB_README))
    assert result["version"] is None and result["devices"] == []
    test = _one(result)
    assert (test["name"], test["status"], test["sum"], test["row_label"], test["column_label"]) == (
        "device_to_device_memcpy_write_ce", "incomplete", None, "GPU", "GPU")
    matrix = test["matrix"]
    assert [matrix[i][i] for i in range(8)] == [0.0] * 8  # this README example printed 0.00, not N/A
    assert (matrix[0][1], matrix[6][0], matrix[4][3], matrix[7][6]) == (276.07, 274.89, 276.76, 276.45)
    assert any("SUM" in u for u in result["unreadable"])


def test_nvbandwidth_v05_json_verbose_with_waived_tests():
    result = parse_nvbandwidth(_read(NVB / NVB_05_JSON))
    assert (result["format"], result["version"], result["cuda_runtime"], result["driver"]) == (
        "json", "v0.5", 12070, "565.02")
    assert result["git_version"] is None and result["unreadable"] == []
    cases = {t["name"]: t for t in result["testcases"]}
    assert len(result["testcases"]) == 32
    h2d = cases["host_to_device_memcpy_ce"]
    assert (h2d["status"], h2d["matrix"], h2d["sum"], h2d["unit"]) == ("passed", [[12.3964]], 12.396361291250001,
                                                                      "GB/s")
    assert (h2d["row_label"], h2d["column_label"]) == ("CPU", "GPU")
    assert h2d["stats"] == {"min": 12.396361291250001, "max": 12.396361291250001, "average": 12.396361291250001}
    assert cases["device_to_device_memcpy_read_ce"]["status"] == "waived"
    assert cases["device_to_device_memcpy_read_ce"]["matrix"] == []
    latency = cases["host_device_latency_sm"]
    assert (latency["unit"], latency["matrix"], latency["sum"]) == ("ns", [[649.879]], 649.87858038348088)
    assert cases["all_to_host_bidirectional_memcpy_sm"]["matrix"] == [[9.83679]]
    assert sum(t["status"] == "waived" for t in result["testcases"]) == 17
    assert sum(t["status"] == "passed" for t in result["testcases"]) == 15


@pytest.mark.parametrize("name", NVB_FILES)
def test_nvbandwidth_numbers_are_finite_floats_or_none(name):
    result = parse_nvbandwidth(_read(NVB / name))
    for test in result["testcases"]:
        for row in test["matrix"]:
            assert all(c is None or (isinstance(c, float) and math.isfinite(c)) for c in row)
        assert test["sum"] is None or (isinstance(test["sum"], float) and math.isfinite(test["sum"]))
    json.dumps(result, allow_nan=False)


def _nvb_cut_is_honest(full: dict, cut: dict, label: str) -> None:
    whole = full["testcases"]
    for i, test in enumerate(cut["testcases"]):
        if test["status"] == "passed":
            assert i < len(whole) and whole[i]["status"] == "passed", f"{label}: {test['name']} reads as passed"
            assert (test["matrix"], test["sum"]) == (whole[i]["matrix"], whole[i]["sum"]), label
    lost = len(cut["testcases"]) != len(whole) or any(
        (a["status"], a["matrix"], a["sum"]) != (b["status"], b["matrix"], b["sum"])
        for a, b in zip(cut["testcases"], whole, strict=False))
    if lost:
        assert cut["unreadable"], f"{label}: lost results but unreadable is empty"


@pytest.mark.parametrize("name", NVB_FILES)
def test_nvbandwidth_cut_anywhere_never_reads_a_cut_matrix_as_passed(name):
    text = _read(NVB / name)
    full = parse_nvbandwidth(text)
    for cut in range(1, len(text.rstrip()), 5):
        label = f"{name} cut at {cut}"
        try:
            result = parse_nvbandwidth(text[:cut])
        except ValueError:
            continue
        _nvb_cut_is_honest(full, result, label)


def test_nvbandwidth_cut_inside_the_last_number_is_not_read_as_that_number():
    text = _read(NVB / NVB_04)
    cut = text.index("SUM device_to_device_memcpy_read_ce 20785.58") + len("SUM device_to_device_memcpy_read_ce 2078")
    result = parse_nvbandwidth(text[:cut])
    test = _one(result)
    assert test["sum"] is None and test["status"] == "incomplete"
    assert any("2078" in u for u in result["unreadable"])
    cut = text.index("7    370.51    371.67") + len("7    370.51    371.6")
    test = _one(parse_nvbandwidth(text[:cut]))
    assert test["status"] == "incomplete" and test["matrix"][7][:2] == [370.51, None]


def test_nvbandwidth_json_cut_inside_a_testcase():
    text = _read(NVB / NVB_05_JSON)
    cut = text.index('"name" : "device_to_host_memcpy_ce"')
    result = parse_nvbandwidth(text[:cut])
    assert result["testcases"][0]["name"] == "host_to_device_memcpy_ce"
    assert result["testcases"][0]["status"] == "passed"
    assert result["testcases"][1]["status"] == "incomplete"
    assert result["version"] is None
    assert any("cut" in u for u in result["unreadable"])


@pytest.mark.parametrize("text", [
    "",
    "hello world\n",
    "bash: ./nvbandwidth: No such file or directory\n",
    '{"DCGM GPU Diagnostic": {}}\n',
    "Device 0: NVIDIA H100\n",
])
def test_nvbandwidth_refuses_what_is_not_nvbandwidth_output(text):
    with pytest.raises(ValueError):
        parse_nvbandwidth(text)


@pytest.mark.parametrize("path", sorted((PUBLIC / "nvidia-smi").glob("*.txt"))[:6]
                         + sorted((PUBLIC / "nccl-tests").glob("*.txt"))[:3] + [DCGM / DCGM_2X, DCGM / DCGM_338],
                         ids=lambda p: p.name)
def test_nvbandwidth_refuses_other_tools_output_naming_a_line(path):
    with pytest.raises(ValueError, match=r"line \d+"):
        parse_nvbandwidth(_read(path))


# --- the cut-JSON reader --------------------------------------------------------------------------------------------


def test_read_cut_json_marks_what_the_cut_left_open():
    value, notes = read_cut_json('{"a": [1, 2, 3')
    assert value == {"a": [1, 2, CUT_ARRAY], CUT_OBJECT: True} and notes  # 3 may have been 30
    value, notes = read_cut_json('{"a": "Pas')
    assert value == {CUT_OBJECT: True} and notes
    value, notes = read_cut_json('{"a": 1}\n')
    assert value == {"a": 1} and notes == []


# --- robustness: mutated real captures --------------------------------------------------------------------------

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_DCGM_TEXTS = [_read(DCGM / n) for n in DCGM_FILES]
_NVB_TEXTS = [_read(NVB / n) for n in NVB_FILES]
_ODD = ["", " ", "|", "+", "{", "}", "[", "]", '"', ",", ":", "N/A", "nan", "inf", "1e309", "-0", "Pass", "Fail",
        "GPU0: Fail", "| |", "\t", "\x00", "١٢", "SUM x 1", "Running x.", "Waived: ", "null", "true"]


@st.composite
def _mutated(draw, seeds):
    lines = draw(st.sampled_from(seeds)).splitlines(keepends=True)
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "cut", "token", "insert", "swap"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        elif op == "token":
            tokens = lines[i].split(" ")
            k = draw(st.integers(0, len(tokens) - 1))
            tokens[k] = draw(st.one_of(st.sampled_from(_ODD), st.text(max_size=6)))
            lines[i] = " ".join(tokens)
        elif op == "insert":
            lines.insert(i, draw(st.one_of(st.sampled_from(_ODD), st.text(max_size=40))) + "\n")
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    text = "".join(lines)
    return text[:draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


@FUZZ
@given(st.one_of(_mutated(_DCGM_TEXTS), _mutated(_NVB_TEXTS), st.text(max_size=200)))
def test_fuzz_parse_dcgm_diag_raises_only_value_error(text):
    try:
        result = parse_dcgm_diag(text)
    except ValueError:
        return
    json.dumps(result, allow_nan=False)
    for test in result["tests"]:
        assert test["status"] in ("pass", "fail", "warn", "skip", "not run", "unreadable")


@FUZZ
@given(st.one_of(_mutated(_NVB_TEXTS), _mutated(_DCGM_TEXTS), st.text(max_size=200)))
def test_fuzz_parse_nvbandwidth_raises_only_value_error(text):
    try:
        result = parse_nvbandwidth(text)
    except ValueError:
        return
    json.dumps(result, allow_nan=False)  # no NaN or infinity anywhere
    for test in result["testcases"]:
        for row in test["matrix"]:
            assert all(c is None or math.isfinite(c) for c in row)
