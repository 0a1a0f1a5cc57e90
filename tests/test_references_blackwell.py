"""The Blackwell and China/workstation entries of the reference catalogue, and the public Blackwell outputs they were
read from (tests/data/captures/public/blackwell/, each file with its row in SOURCES.md)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpufabric.reference import find_reference, load_references, validation_errors
from pytest_gpufabric.units import MIB

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL = ROOT / "tests" / "data" / "captures" / "public" / "blackwell"
SOURCES = BLACKWELL / "SOURCES.md"


def _source_rows() -> dict[str, str]:
    """file name -> its 'values read by hand' cell, from the SOURCES.md table."""
    rows = {}
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2).split(" | ")[-1]
    return rows


def _read(name: str) -> str:
    return (BLACKWELL / name).read_text(encoding="utf-8")


# --- the saved outputs and their SOURCES.md ------------------------------------------------------------------


def test_every_saved_output_has_its_row_in_sources_and_every_row_its_file():
    files = {p.name for p in BLACKWELL.iterdir() if p.name != "SOURCES.md"}
    assert files == set(_source_rows())
    assert len(files) == 11


@pytest.mark.parametrize("name", sorted(_source_rows()))
def test_every_value_read_by_hand_occurs_in_the_file(name):
    text = _read(name)
    values = re.findall(r"`([^`]+)`", _source_rows()[name])
    assert len(values) >= 4, f"{name}: too few hand-read values listed"
    missing = [v for v in values if v not in text]
    assert missing == [], f"{name}: listed in SOURCES.md but not in the file"


def test_the_hand_read_counts_and_totals():
    """What SOURCES.md says in words, counted here from the text: GPUs per table, links per GPU, one MiB total."""
    def table_gpus(name: str, model: str) -> list[str]:
        return re.findall(rf"^\|\s+(\d+)\s+{re.escape(model)}\s", _read(name), re.M)

    assert table_gpus("nvidia-smi-b200-8gpu-570.133.20-aws-p6-b200-old-header.txt", "NVIDIA B200") == \
        [str(i) for i in range(8)]
    assert table_gpus("nvidia-smi-b200-8gpu-580.95.05-new-header-process-names-cut.txt", "NVIDIA B200") == \
        [str(i) for i in range(8)]
    assert table_gpus("nvidia-smi-b300-7of8gpu-610.57.04-kmd-umd-header.txt", "NVIDIA B300 SXM6 AC") == \
        [str(i) for i in range(7)]  # seven on an eight-GPU board
    assert len(table_gpus("nvidia-smi-gb200-4gpu-580.126.09-openshift-driver-pod.txt", "NVIDIA GB200")) == 4
    assert len(table_gpus("nvidia-smi-gb300-4gpu-580.82.07.txt", "NVIDIA GB300")) == 4
    status = _read("nvlink-status-b300-7gpu-610.57.04-53.125.txt")
    assert len(re.findall(r"^GPU \d+: NVIDIA B300 SXM6 AC ", status, re.M)) == 7
    assert re.findall(r"Link \d+: (\S+ GB/s)", status) == ["53.125 GB/s"] * (7 * 18)
    nccl = _read("nccl-2.26.2-gb200-nvl72-72rank-all_reduce-one-device-line.txt")
    assert re.findall(r"#  Rank (\d+) ", nccl) == ["71"]  # the device list cut to its last line
    for name, model, mib in [("nvidia-smi-b200-8gpu-570.133.20-aws-p6-b200-old-header.txt", "b200", 183359),
                             ("nvidia-smi-b300-7of8gpu-610.57.04-kmd-umd-header.txt", "b300", 275040),
                             ("nvidia-smi-gb200-4gpu-580.126.09-openshift-driver-pod.txt", "gb200", 189471),
                             ("nvidia-smi-gb300-4gpu-580.82.07.txt", "gb300", 284208)]:
        totals = set(re.findall(r"/\s*(\d+)MiB \|", _read(name)))
        assert totals == {str(mib)}, name
        assert load_references()[model].memory_bytes_nvml == mib * MIB


def test_the_nvidia_smi_tables_keep_their_fixed_width():
    """A copy that lost or gained a space in a table row would no longer be 91 characters wide."""
    for path in sorted(BLACKWELL.glob("nvidia-smi-*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith(("|", "+")):
                assert len(line.rstrip(" \\")) == 91, f"{path.name}: {line!r}"


# --- the catalogue entries -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "model"), [
    ("NVIDIA B200", "b200"),                                        # the B200 captures here
    ("NVIDIA B300 SXM6 AC", "b300"),
    ("NVIDIA GB200", "gb200"),
    ("NVIDIA GB300", "gb300"),
    ("NVIDIA H20", "h20"),  # search index id 10232534572; found the H200 by substring before h20.yaml
    ("NVIDIA H800", "h800"),                                        # captures/public/nvidia-smi/nvlink-status-h800-...
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
    ("nvidia b200", "b200"), ("B200", "b200"), ("gb200", "gb200"), ("B300", "b300"), ("NVIDIA B300", "b300"),
    ("gb300-nvl72", "gb300"), ("h20", "h20"), ("h800", "h800"), ("RTX PRO 6000", "rtx-pro-6000-server"),
    ("NVIDIA H200", "h200-sxm"),                                    # still the H200: exact names match first
    ("HGX GB200", "gb200"),  # nvbandwidth's device name, captures/public/nvbandwidth/nvbandwidth-v0.7-gb200-...
])
def test_blackwell_and_china_part_names_find_their_model(name, model):
    assert find_reference(name).model == model


@pytest.mark.parametrize("typed", ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA Graphics Device",
                                   "NVIDIA RTX PRO 6000 Blac...", "200", "nvidia h2"])
def test_names_the_catalogue_does_not_claim_find_nothing(typed):
    assert find_reference(typed) is None


@pytest.mark.parametrize("model", ["b200", "b300", "gb200", "gb300"])
def test_nvlink5_figures(model):
    """NVLink 5: 18 links x 50 GB/s = 900 GB/s per direction, the '1.8 TB/s' NVIDIA prints; NVML's 53.125 GB/s per
    link (the B300 capture) is the rate a machine reports, above the published one."""
    ref = load_references()[model]
    assert (ref.nvlink_generation, ref.nvlink_links, ref.nvlink_gbps_per_link_per_direction) == (5, 18, 50)
    assert (ref.nvlink_gbps_per_direction, ref.nvlink_gbps_bidirectional) == (900, 1800)
    assert ref.memory_type == "HBM3e"
    assert 18 * 53.125 > ref.nvlink_gbps_per_direction


@pytest.mark.parametrize("model", ["gb200", "gb300"])
def test_grace_blackwell_gpus_reach_the_host_over_nvlink_c2c_not_pcie(model):
    ref = load_references()[model]
    assert ref.host_link == "NVLink-C2C" and ref.host_link_gbps_bidirectional == 900
    assert ref.host_link_gbps_per_direction is None  # not published per GPU
    assert (ref.pcie_generation, ref.pcie_width, ref.pcie_gbps_per_direction, ref.pcie_gbps_bidirectional) == \
        (None, None, None, None)
    assert "NVLink-C2C" in " ".join(ref.notes)


def test_the_host_link_fields_are_optional_and_checked():
    """Entries written before host_link existed stay valid without it; a host-link figure with no source is refused
    like any other figure."""
    refs = load_references()
    assert refs["h200-sxm"].host_link is None and refs["b200"].host_link == "PCIe"
    import yaml

    doc = yaml.safe_load((ROOT / "pytest_gpufabric/references/gb200.yaml").read_text(encoding="utf-8"))
    for source in doc["sources"]:
        source["what"] = [w for w in source["what"] if w != "host_link_gbps_bidirectional"] or ["nvml_names"]
    assert any("$.host_link_gbps_bidirectional: 900 has no source" in e for e in validation_errors(doc, "gb200.yaml"))
    doc["host_link"] = "InfiniBand"
    assert any("$.host_link" in e for e in validation_errors(doc, "gb200.yaml"))


def test_memory_sold_against_what_nvml_shows():
    """Every Blackwell part read here shows NVML 1.068 x the GB sold; H800's NVML name covers two sizes, so its
    NVML total is not fixed."""
    refs = load_references()
    for model in ("b200", "b300", "gb200", "gb300"):
        ratio = refs[model].memory_bytes_nvml / refs[model].memory_bytes_sold
        assert ratio == pytest.approx(1.068, abs=0.001), model
    assert refs["h800"].memory_bytes_nvml is None
    assert "143771" in " ".join(refs["h800"].notes)


def test_gpufabric_reference_knows_the_b200():
    result = _gpufabric("reference", "NVIDIA B200")
    assert result.returncode == 0, result.stderr
    assert "b200: NVIDIA B200 SXM 180GB" in result.stdout
    assert "gen 5, 18 links x 50 GB/s = 900 GB/s per direction" in result.stdout


def _gpufabric(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_parse_reference_finds_gb200_in_the_public_multinode_nvbandwidth_output():
    """The output names its devices `HGX GB200`; before the gb200 entry this was 'not in the reference catalogue'."""
    nvb = BLACKWELL.parent / "nvbandwidth" / "nvbandwidth-v0.7-gb200-multinode-8rank-kubectl-mpi-bindings.txt"
    result = _gpufabric("parse", "nvbandwidth", str(nvb), "--reference")
    assert result.returncode == 0, result.stderr
    reference = json.loads(result.stdout)["reference"]
    assert reference["model"] == "gb200"
    assert "900 GB/s per direction" in reference["judgements"][0]["text"]


def test_parse_reference_holds_the_nvl72_rack_run_against_the_nvlink5_peak():
    """72 ranks over one GB200 NVL72 rack: 834.57 GB/s busbw at 8 GiB is 93 % of 900 GB/s per direction."""
    nccl = BLACKWELL / "nccl-2.26.2-gb200-nvl72-72rank-all_reduce-one-device-line.txt"
    result = _gpufabric("parse", "nccl-tests", str(nccl), "--reference", "gb200")
    assert result.returncode == 0, result.stderr
    reference = json.loads(result.stdout)["reference"]
    assert (reference["model"], reference["basis"], reference["peak_gbps"]) == ("gb200", "nvlink", 900)
    [judgement] = reference["judgements"]
    assert (judgement["size_bytes"], judgement["busbw_gbps"]) == (8589934592, 834.57)
    assert judgement["fraction_of_peak"] == 0.9273


def test_the_single_model_view_says_the_host_link(capsys):
    """GB200 reaches its Grace CPU over NVLink-C2C, not PCIe: `gpufabric reference` says so, not only --json."""
    from pytest_gpufabric.cli import main

    assert main(["reference", "NVIDIA GB200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  host link: NVLink-C2C, - GB/s per direction (900 GB/s both ways)" in lines
    assert main(["reference", "h200"]) == 0
    assert "host link" not in capsys.readouterr().out  # a PCIe part: its PCIe line is its host link
