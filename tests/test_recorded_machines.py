"""Bundles recorded with `gpufabric snapshot` on the borrowed GPU machines replay to the verdict the live run gave.

tests/data/results/ holds the live runs' gpufabric-results.json (hardware/record-acceptance.sh on
nvidia-h200-x2 and nvidia-h100-x1, 2026-11-22); tests/data/bundles/ holds the bundles recorded in the same runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

RESULTS = Path(__file__).parent / "data" / "results"

# (bundle, the live run's results, the -k selection the live run used). The first two runs predate the NVLink
# traffic suite, so their replay selects the topology suite; the others selected the suites
# that existed when they ran.
RECORDED_RUNS = [
    pytest.param("h200-nvswitch-x2", "h200-nvswitch-x2-live-on-h200-x2.json", "test_topology", id="h200-x2-passes"),
    pytest.param("h100-x1", "h200-nvswitch-x2-live-on-h100-x1.json", "test_topology", id="h100-x1-fails"),
    pytest.param("h200-nvswitch-x2-training", "h200-nvswitch-x2-with-nvlink-traffic-on-h200-x2.json",
                 "test_topology or test_nvlink_traffic", id="h200-x2-training-passes"),
    pytest.param("h200-nvswitch-x2-p2p-disabled", "nvlink-traffic-p2p-disabled-on-h200-x2.json", "nvlink",
                 id="h200-x2-p2p-disabled-fails"),
    pytest.param("h200-nvswitch-x2-bandwidth", "h200-nvswitch-x2-bandwidth-live-on-h200-x2.json", "bandwidth",
                 id="h200-x2-bandwidth-passes"),
]


def _outcomes(document: dict) -> dict[str, str]:
    return {nodeid.rsplit("/", 1)[-1]: outcome for nodeid, outcome in document["tests"].items()}


def _replay(pytester: pytest.Pytester, bundle: str | Path, select: str | None) -> dict:
    selection = ["-k", select] if select else []
    pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), *selection)
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


@pytest.mark.parametrize(("bundle", "live_results", "select"), RECORDED_RUNS)
def test_bundle_replays_to_the_live_verdict(pytester: pytest.Pytester, bundle, live_results, select):
    live = json.loads((RESULTS / live_results).read_text())
    replay = _replay(pytester, bundle, select)
    assert {key: replay["summary"][key] for key in live["summary"]} == live["summary"]
    assert _outcomes(replay) == _outcomes(live)
    assert [g["serial"] for g in replay["machine"]["gpus"]] == [g["serial"] for g in live["machine"]["gpus"]]
    assert replay["machine"]["matrix"] == live["machine"]["matrix"]


@pytest.mark.parametrize(("bundle", "live_results", "select"), RECORDED_RUNS[:2])
def test_nvml_record_alone_gives_the_same_verdict(pytester: pytest.Pytester, bundles, bundle, live_results, select):
    """Without the nvidia-smi text, the matrix comes from NVML's answers (NV18 from the switch links)."""
    only_nvml = pytester.path / "nvml-only"
    only_nvml.mkdir()
    shutil.copy(bundles / bundle / "nvml.json", only_nvml / "nvml.json")
    live = json.loads((RESULTS / live_results).read_text())
    replay = _replay(pytester, only_nvml, select)
    assert _outcomes(replay) == _outcomes(live)
    assert replay["machine"]["provenance"].get("matrix") != "nvidia-smi topo -m"


def test_h100_failure_names_count_and_topology(pytester: pytest.Pytester):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h100-x1")
    result.stdout.fnmatch_lines_random([
        "*expected 2 GPUs, found 1 (GPU0 NVIDIA H100 80GB HBM3)*",
        "*GPU0-GPU1: expected NV18, found no such device*",
        "*GPU0: expected a NVIDIA H200, found NVIDIA H100 80GB HBM3 (serial 1752624010498)*",
        "*GPU0: expected at least 140.00 GiB of memory, found 79.65 GiB*",
        "*GPU1 is promised by profile h200-nvswitch-x2 but missing: the machine has 1 GPU(s)*",
    ])


def test_profile_init_on_the_machine_passes_its_own_bundle(judged, pytester: pytest.Pytester):
    """The profile `gpufabric profile init` wrote on the H200 machine accepts the bundle recorded there."""
    result = pytester.runpytest("--gpu-profile", str(RESULTS / "profile-init-on-h200-x2.yaml"),
                                "--gpu-replay", "h200-nvswitch-x2")
    # NVLink traffic: not in this bundle (4); bandwidth: not in the written profile (3)
    judged(result, passed=14)
