"""The shipped Blackwell profiles (profiles/hgx-b200-8gpu.yaml, hgx-b300-8gpu.yaml, gb200-nvl72-tray.yaml): valid,
said to be written from public facts, and consistent with the real public outputs they cite
(tests/data/captures/public/blackwell/, SOURCES.md): the GPU name NVML prints matches the promised model, the
memory NVML shows meets the promised floor, the link speed `nvidia-smi nvlink -s` prints meets the floor."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.formats.nvidia_smi_text import parse_smi_list, parse_smi_table
from pytest_gpufabric.formats.nvlink import parse_nvlink_any
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.reference import find_reference
from pytest_gpufabric.units import parse_bytes, parse_gbps

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"
BLACKWELL = ROOT / "tests" / "data" / "captures" / "public" / "blackwell"

CASES = [
    ("hgx-b200-8gpu", "nvidia-smi-b200-8gpu-570.133.20-aws-p6-b200-old-header.txt", 8, 180, "b200"),
    ("hgx-b300-8gpu", "nvidia-smi-b300-7of8gpu-610.57.04-kmd-umd-header.txt", 7, 270, "b300"),
    ("gb200-nvl72-tray", "nvidia-smi-gb200-4gpu-580.126.09-openshift-driver-pod.txt", 4, 186, "gb200"),
]


def test_gpufabric_profile_validate_accepts_the_three():
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "profile", "validate",
                           *(str(PROFILES / f"{name}.yaml") for name, *_ in CASES)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": valid profile ") == 3


@pytest.mark.parametrize("name, capture, listed, sold_gb, model", CASES)
def test_profile_matches_the_public_output_it_cites(name, capture, listed, sold_gb, model):
    profile = load_profile(PROFILES / f"{name}.yaml")
    assert "written from public facts" in profile.data["description"]
    assert "not from a recording" in profile.data["description"]
    gpus = profile.data["gpus"]
    assert parse_bytes(gpus["memory"]) == sold_gb * 10**9 == find_reference(model).memory_bytes_sold
    table = parse_smi_table((BLACKWELL / capture).read_text())
    assert len(table.gpus) == listed
    for gpu in table.gpus:
        assert gpus["model"].lower() in gpu.name.lower()
        assert gpu.memory_bytes >= parse_bytes(gpus["memory"])
    # the B300 log lists 7 GPUs of the board's 8: the profile's count rejects that machine
    assert (gpus["count"] == listed) == (name != "hgx-b300-8gpu")


def test_the_tray_promises_no_pcie_link_and_its_gpus_are_gb200():
    tray = load_profile(PROFILES / "gb200-nvl72-tray.yaml").data
    assert "pcie" not in tray["gpus"]
    assert find_reference("gb200").host_link == "NVLink-C2C"
    listed = parse_smi_list((BLACKWELL / "nvidia-smi-L-gb200-4gpu-slurm-k8s-aarch64.txt").read_text())
    assert [g.name for g in listed.gpus] == ["NVIDIA GB200"] * tray["gpus"]["count"]


def test_the_b300_link_floor_holds_for_the_public_nvlink_status():
    floor = parse_gbps(load_profile(PROFILES / "hgx-b300-8gpu.yaml").data["nvlink"]["min_speed"])
    status = parse_nvlink_any((BLACKWELL / "nvlink-status-b300-7gpu-610.57.04-53.125.txt").read_text())
    links = [link for gpu in status["gpus"].values() for link in gpu["links"].values()]
    assert len(links) == 7 * 18
    assert {link["speed_gbps"] for link in links} == {53.125} and floor <= 53.125
