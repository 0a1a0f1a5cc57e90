"""Evidence from DCGM and nvbandwidth (issue 22): real outputs of `dcgmi diag` and nvbandwidth (tests/data/captures/
public/, each with its source) parsed by `gpufabric parse`, placed in a bundle or given with --gpu-evidence, and
judged as the promises they speak to. The profiles below are DERIVED for the machines those outputs came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.cli import main

PUBLIC = Path(__file__).parent / "data" / "captures" / "public"
DCGM_338 = PUBLIC / "dcgm" / "dcgm-3.3.8-h100-level2-persistence-info-row.txt"
NVB_H100 = PUBLIC / "nvbandwidth" / "nvbandwidth-v0.4-h100-8gpu-d2d-read-ce-na-diagonal-root-prompt.txt"
NVB_A10 = PUBLIC / "nvbandwidth" / "nvbandwidth-v0.5-a10-1gpu-h2d-ce-markdown-fence-prompt.txt"


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text(encoding="utf-8"))


def _outcomes(document: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["outcome"], p["reason"]) for p in document["promises"]}


def _bundle_of(pytester: pytest.Pytester, *files: Path) -> Path:
    """A bundle holding only another tool's outputs, as a customer might send them."""
    bundle = pytester.path / "their-outputs"
    bundle.mkdir()
    for path in files:
        shutil.copy(path, bundle / path.name)
    return bundle


def _profile(pytester: pytest.Pytester, name: str, document: dict) -> Path:
    path = pytester.path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **document}), encoding="utf-8")
    return path


def test_parse_prints_what_dcgm_and_nvbandwidth_said(capsys):
    assert main(["parse", "dcgm-diag", str(DCGM_338)]) == 0
    dcgm = json.loads(capsys.readouterr().out)
    assert (dcgm["dcgm_version"], dcgm["driver_version"]) == ("3.3.8", "535.309.01")
    assert {t["name"]: t["status"] for t in dcgm["tests"]}["memory"] == "pass"
    assert main(["parse", "nvbandwidth", str(NVB_A10)]) == 0
    nvb = json.loads(capsys.readouterr().out)
    (case,) = nvb["testcases"]
    assert (nvb["version"], case["name"], case["matrix"], case["sum"]) == ("v0.5", "host_to_device_memcpy_ce",
                                                                          [[25.17]], 25.17)
    assert main(["parse", "nvbandwidth", str(DCGM_338)]) == 2  # not nvbandwidth's output
    assert "not `nvbandwidth` output" in capsys.readouterr().err


def test_nvbandwidth_of_the_machine_judged_against_the_copy_floor(pytester: pytest.Pytester):
    """8x H100, device-to-device reads at 370.9 GB/s every pair (nvbandwidth v0.4): against a floor of 350 GB/s
    the copy promise passes; against 380 it fails, naming the pairs and their figures."""
    bundle = _bundle_of(pytester, NVB_H100)
    h100 = {"gpus": {"count": 8, "model": "H100"}, "bandwidth": {"copy": {"gpu_to_gpu": {"min": "350 GB/s"}}}}
    pytester.runpytest("--gpu-profile", str(_profile(pytester, "h100x8", h100)), "--gpu-replay", str(bundle))
    outcome, _ = _outcomes(_results(pytester))["copy-bandwidth[gpu_to_gpu]"]
    assert outcome == "passed"
    h100["bandwidth"]["copy"]["gpu_to_gpu"]["min"] = "380 GB/s"
    result = pytester.runpytest("--gpu-profile", str(_profile(pytester, "h100x8-strict", h100)), "--gpu-replay",
                                str(bundle))
    outcome, reason = _outcomes(_results(pytester))["copy-bandwidth[gpu_to_gpu]"]
    assert outcome == "failed" and result.ret == 1
    assert reason.startswith("gpu_to_gpu [nvbandwidth v0.4 device_to_device_memcpy_read_ce (") and \
        "GPU0->GPU1: 370.9 GB/s < 380 GB/s" in reason


def test_evidence_of_another_machine_is_not_evidence_of_this_one(pytester: pytest.Pytester):
    """An A10's nvbandwidth given beside the replay of an H200 machine: not counted for it (the H200's own copy
    measurements keep the promise); a DCGM run on another driver likewise."""
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-acceptance",
                                "--gpu-evidence", str(NVB_A10), "--gpu-evidence", str(DCGM_338), "-rs")
    result.stdout.fnmatch_lines_random([f"*not checked: not evidence of this machine: {NVB_A10.name} ran on NVIDIA "
                                        "A10; this machine has NVIDIA H200*",
                                        f"*not checked: not evidence of this machine: {DCGM_338.name} ran on driver "
                                        "535.309.01; this machine's is 580.159.04*"])
    document = _results(pytester)
    assert _outcomes(document)["copy-bandwidth[host_to_device]"][0] == "passed"  # by the H200's own copies
    assert document["summary"]["verdict"] == "INCOMPLETE"  # the DCGM promises stay unchecked
    # the given files were copied into the report folder: it replays as a bundle with them
    assert (pytester.path / "reports" / NVB_A10.name).is_file()
    assert (pytester.path / "reports" / f"dcgm-{DCGM_338.name}").is_file() or (
        pytester.path / "reports" / DCGM_338.name).is_file()


def test_dcgm_results_of_the_machine_count_as_its_promises(pytester: pytest.Pytester):
    """DCGM 3.3.8 on one H100 (driver 535.309.01), level 2, everything passed ("Pass - All"): its PCIe and memory
    results pass the promises they speak to, its deployment checks pass as their own."""
    bundle = _bundle_of(pytester, DCGM_338)
    pytester.runpytest("--gpu-profile", str(_profile(pytester, "h100x1", {"gpus": {"count": 1, "model": "H100"}})),
                       "--gpu-replay", str(bundle))
    outcomes = _outcomes(_results(pytester))
    assert outcomes["pcie-under-load[GPU0]"][0] == outcomes["memory-pattern[GPU0]"][0] == "passed"
    assert outcomes["dcgm-deployment[persistence_mode]"] == ("passed", "")
    assert outcomes["gpu-count"][0] == "not checked"  # the bundle holds no record of the GPUs themselves


def test_a_file_that_is_neither_tool_is_a_usage_error(pytester: pytest.Pytester, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("the customer says all is fine\n")
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-acceptance",
                                "--gpu-evidence", str(notes))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --gpu-evidence {notes}: not `dcgmi diag` output (*; not `nvbandwidth` "
                                 "output (*"])


DCGM_FAIL = PUBLIC / "dcgm" / "dcgm-3.3.9-a10g-4gpu-level3-targeted-power-fail-gpu1-eud-skip.txt"


def test_a_test_dcgm_failed_fails_the_promise_naming_the_gpu_and_its_message(pytester: pytest.Pytester):
    """DCGM 3.3.9, `dcgmi diag -r 3` on 4x A10G: Targeted Power failed on GPU 1 ("GPU 1 Max power of 224.1 did
    not reach desired power minimum ..."), the EUD test was skipped: the power promise of GPU1 fails with DCGM's
    words, the other GPUs' pass, the EUD is not checked."""
    bundle = _bundle_of(pytester, DCGM_FAIL)
    result = pytester.runpytest("--gpu-profile", str(_profile(pytester, "a10gx4", {"gpus": {"count": 4,
                                                                                           "model": "A10G"}})),
                                "--gpu-replay", str(bundle))
    document = _results(pytester)
    outcomes = _outcomes(document)
    outcome, reason = outcomes["power-hold[GPU1]"]
    assert outcome == "failed" and result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    assert reason.startswith("dcgmi diag (DCGM 3.3.9): targeted_power fail on GPU1: GPU 1 Max power of 224.1 did "
                             "not reach desired power minimum")
    assert [outcomes[f"power-hold[GPU{i}]"][0] for i in (0, 2, 3)] == ["passed"] * 3
    eud = {k: v for k, v in outcomes.items() if "eud" in k}
    assert eud and all(outcome == "not checked" and "DCGM skipped the test" in why for outcome, why in eud.values())
