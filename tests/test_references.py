"""The reference catalogue (pytest_gpufabric/references/): every file valid, every figure sourced, names found,
the published figures consistent with what NVML reports, the shipped profiles' floors below the peaks, and the
recorded fractions reproducible from the recordings."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.paths import PACKAGE_DIR, shipped_profiles_dir
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.reference import (
    NUMERIC_FIELDS,
    REFERENCES_DIR,
    ReferenceDataError,
    find_reference,
    load_reference_file,
    load_references,
    reference_files,
    validation_errors,
)
from pytest_gpufabric.units import MIB, parse_bytes, parse_gbps, pcie_peak_gbps

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
FILES = reference_files()
EXPECTED_MODELS = {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm-80gb", "a100-pcie-80gb", "l40s", "titan-rtx",
                   "rtx-2080-ti", "v100-sxm2-32gb", "v100-sxm2-16gb",
                   # written from public figures and outputs only (tests/test_references_blackwell.py)
                   "b200", "b300", "gb200", "gb300", "h20", "h800", "rtx-pro-6000-server"}


def _doc(model: str) -> dict:
    return yaml.safe_load((REFERENCES_DIR / f"{model}.yaml").read_text(encoding="utf-8"))


# --- every file valid, every figure sourced ------------------------------------------------------------------


def test_the_catalogue_has_the_models_it_promises():
    assert set(load_references()) == EXPECTED_MODELS
    assert REFERENCES_DIR.parent == PACKAGE_DIR  # inside the package: the wheel carries it without force-include


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_reference_validates(path):
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert validation_errors(doc, path) == []
    ref = load_reference_file(path)
    assert ref.model == path.stem
    json.dumps(ref.to_json())  # JSON-ready


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_number_has_a_source(path):
    ref = load_reference_file(path)
    written = yaml.safe_load(path.read_text(encoding="utf-8"))
    for name in NUMERIC_FIELDS:
        value = getattr(ref, name)
        if value is None:  # written as null: a note says why; left out (the optional *_sparse): not published
            assert name not in written or name in " ".join(ref.notes), f"{ref.model}: {name} null, no note why"
            continue
        assert math.isfinite(value) and value > 0, f"{ref.model}: {name} = {value!r}"
        observed = name == "memory_bytes_nvml" and all(o["mib"] * MIB == value for o in ref.memory_nvml_observed)
        assert ref.sources_for(name) or name in ref.derived or observed, f"{ref.model}: {name} has no source"
    for source in ref.sources:
        assert source["url"] and source["title"] and source["what"]
        local = source["url"]
        if not re.match(r"^(https?://|search-index:)", local):  # a file of this repo
            assert (ROOT / local).is_file(), f"{ref.model}: source {local} is not in the repo"


def test_the_validator_rejects_what_the_rules_forbid():
    good = _doc("h100-sxm")
    assert validation_errors(good, "h100-sxm.yaml") == []

    def errors_of(change) -> str:
        doc = copy.deepcopy(good)
        change(doc)
        return "\n".join(validation_errors(doc, "h100-sxm.yaml"))

    def unsourced(doc):
        for source in doc["sources"]:
            source["what"] = [w for w in source["what"] if w != "power_limit_w"] or ["nvml_names"]
    assert "$.power_limit_w: 700 has no source" in errors_of(unsourced)
    assert "not a finite number" in errors_of(lambda d: d.update(memory_bandwidth_gbps=float("inf")))
    assert "$.power_limit_w" in errors_of(lambda d: d.update(power_limit_w=-700))
    assert "$.pcie_width" in errors_of(lambda d: d.update(pcie_width=0))
    assert "notes do not say why" in errors_of(lambda d: d.update(power_limit_w=None))
    assert "is not a reference field" in errors_of(lambda d: d["sources"][0]["what"].append("bandwith_gbps"))
    assert "names no other reference field" in errors_of(lambda d: d["derived"].update(power_limit_w="a guess"))
    assert "disagrees with memory_nvml_observed" in errors_of(lambda d: d.update(memory_bytes_nvml=85899345920))
    assert "is not the file's name" in errors_of(lambda d: d.update(model="h100"))


def test_a_bad_file_is_refused_with_its_name(tmp_path):
    doc = _doc("l40s")
    doc["memory_bandwidth_gbps"] = "864 GB/s"
    path = tmp_path / "l40s.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with pytest.raises(ReferenceDataError, match=r"l40s\.yaml: \$\.memory_bandwidth_gbps"):
        load_references(tmp_path)


# --- names -----------------------------------------------------------------------------------------------


def _names_recorded_in_this_repo() -> set[str]:
    names = set()
    for path in DATA.glob("bundles/*/nvml.json"):
        names |= {g["name"] for g in json.loads(path.read_text())["gpus"]}
    for path in DATA.glob("bundles/*/nvidia-smi-q.xml"):
        names |= set(re.findall(r"<product_name>([^<]+)<", path.read_text()))
    return names


def test_every_gpu_name_recorded_in_this_repo_has_a_reference():
    names = _names_recorded_in_this_repo()
    assert names == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    for name in names:
        ref = find_reference(name)
        assert ref is not None and name in ref.nvml_names


@pytest.mark.parametrize(("name", "model"), [
    ("NVIDIA H200", "h200-sxm"),                   # tests/data/bundles/h200-nvswitch-x2/nvml.json
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),         # tests/data/bundles/h100-x1/nvml.json
    ("NVIDIA H100 PCIe", "h100-pcie"),             # tests/data/captures/public/nvidia-smi/nvlink-R-h100-pcie-...
    ("TITAN RTX", "titan-rtx"),                    # tests/data/captures/titan-rtx-nvlink (driver 418)
    ("NVIDIA TITAN RTX", "titan-rtx"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),   # tests/data/captures/public/nvidia-smi/nvlink-s-v100-sxm2-...
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
    ("GeForce RTX 2080 Ti", "rtx-2080-ti"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA L40S", "l40s"),
])
def test_nvml_names_find_their_model(name, model):
    assert find_reference(name).model == model


@pytest.mark.parametrize(("typed", "model"), [
    ("nvidia h200", "h200-sxm"),        # case-insensitive NVML name
    ("h200", "h200-sxm"), ("H100", "h100-sxm"), ("h100-sxm", "h100-sxm"), ("h100-pcie", "h100-pcie"),
    ("a100", "a100-sxm-80gb"), ("A100-PCIe", "a100-pcie-80gb"), ("l40s", "l40s"), ("titan-rtx", "titan-rtx"),
    ("2080ti", "rtx-2080-ti"),
    ("RTX 2080 Ti", "rtx-2080-ti"),     # a unique substring (the profile rtx-2080ti-pcie's model)
    ("  h200 ", "h200-sxm"),
])
def test_aliases_and_substrings_find_their_model(typed, model):
    assert find_reference(typed).model == model


@pytest.mark.parametrize("typed", ["NVIDIA H100", "V100", "NVIDIA A100-SXM4-40GB", "B100", "NVIDIA Graphics Device",
                                   "", "   "])
def test_ambiguous_or_unknown_names_find_nothing(typed):
    assert find_reference(typed) is None


# --- published figures against the machine's own ----------------------------------------------------------


def test_h100_peak_from_nvml_bus_width_and_clock_is_the_published_bandwidth():
    probe = json.loads((REFERENCES_DIR / "recordings" / "h100-sxm-nvml-memory.json").read_text())
    gpu = probe["gpus"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    peak_gbps = gpu["memory_bus_width_bits"] / 8 * gpu["max_clock_memory_mhz"] * 2 / 1000
    assert peak_gbps == pytest.approx(3352.32)  # 5120 / 8 x 2619 MHz x 2
    h100 = find_reference(gpu["name"])
    assert h100.memory_bandwidth_gbps == 3350
    assert peak_gbps == pytest.approx(h100.memory_bandwidth_gbps, rel=0.01)
    assert gpu["memory_total_bytes"] == h100.memory_bytes_nvml


@pytest.mark.parametrize("model", sorted(EXPECTED_MODELS))
def test_bus_width_times_memory_clock_agrees_with_the_published_bandwidth(model):
    ref = load_references()[model]
    if ref.memory_peak_from_clock_gbps is None:
        pytest.skip(f"{model}: bus width or max memory clock not sourced (see its notes)")
    assert ref.memory_peak_from_clock_gbps == pytest.approx(ref.memory_bandwidth_gbps, rel=0.01)


@pytest.mark.parametrize("model", sorted(EXPECTED_MODELS))
def test_the_figures_agree_with_each_other(model):
    ref = load_references()[model]
    if ref.memory_gb_sold is not None:
        assert ref.memory_bytes_sold == ref.memory_gb_sold * 10**9
    if ref.memory_bytes_nvml is not None:  # NVML shows more than the GB sold on HBM parts, never less than 90 %
        assert ref.memory_bytes_nvml > 0.9 * ref.memory_bytes_sold
    for observed in ref.memory_nvml_observed:
        assert 0.9 * ref.memory_bytes_sold < observed["mib"] * MIB < 1.2 * ref.memory_bytes_sold
    if ref.nvlink_gbps_bidirectional is not None and ref.nvlink_gbps_per_direction is not None:
        assert ref.nvlink_gbps_per_direction * 2 == ref.nvlink_gbps_bidirectional
    if None not in (ref.nvlink_links, ref.nvlink_gbps_per_link_per_direction, ref.nvlink_gbps_per_direction):
        assert ref.nvlink_links * ref.nvlink_gbps_per_link_per_direction == ref.nvlink_gbps_per_direction
    if not ref.nvlink_supported:
        assert ref.nvlink_links is None and ref.nvlink_gbps_per_direction is None
    if ref.pcie_gbps_bidirectional is not None and ref.pcie_gbps_per_direction is not None:
        assert ref.pcie_gbps_per_direction * 2 == ref.pcie_gbps_bidirectional
    if ref.pcie_generation is not None and ref.pcie_width is not None:  # published rate vs gen x width line rate
        if ref.pcie_generation >= 6:  # NVIDIA prints gen 6 raw (64 GT/s x 16 / 8 = 128), before FLIT coding (121)
            assert ref.pcie_gbps_per_direction == 64 * ref.pcie_width / 8
        else:
            assert pcie_peak_gbps(ref.pcie_generation, ref.pcie_width) == pytest.approx(ref.pcie_gbps_per_direction,
                                                                                        rel=0.02)
    for kind in ("bf16", "fp16"):
        dense, sparse = getattr(ref, f"{kind}_tflops_dense"), getattr(ref, f"{kind}_tflops_sparse")
        if dense is not None and sparse is not None:
            assert sparse == pytest.approx(2 * dense, rel=0.02)


# --- the shipped profiles against the peaks of their model ---------------------------------------------------

PROFILES = sorted(shipped_profiles_dir().glob("*.yaml"))
#: profiles that `gpufabric profile init --measure` wrote on real machines (committed with their runs): the only
#: ones with a memory_bandwidth: floor so far
MEASURED_PROFILES = sorted((DATA / "results").glob("**/measured.yaml")) + sorted(
    (DATA / "results" / "h200-x4-profiles").glob("*.yaml"))


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_shipped_profile_floors_are_below_the_reference_peaks(path):
    _assert_floors_below_peaks(load_profile(path))


@pytest.mark.parametrize("path", MEASURED_PROFILES, ids=[p.relative_to(DATA).as_posix() for p in MEASURED_PROFILES])
def test_measured_profile_floors_are_below_the_reference_peaks(path):
    _assert_floors_below_peaks(load_profile(path))


def test_the_measured_profiles_hold_an_hbm_floor_below_the_published_bandwidth():
    """run-1 on 1x H100 SXM 80GB: 3239-3271 GB/s measured, floor 2915 GB/s = 0.87 of the published 3350 GB/s."""
    floors = {p.relative_to(DATA).as_posix(): load_profile(p).data.get("memory_bandwidth", {}).get("min")
              for p in MEASURED_PROFILES}
    assert floors["results/single-gpu-on-h100-x1/run-1/measured.yaml"] == "2915 GB/s"
    assert parse_gbps("2915 GB/s") / find_reference("NVIDIA H100 80GB HBM3").memory_bandwidth_gbps < 0.88


def _assert_floors_below_peaks(profile) -> None:
    """Each floor of the profile below the published peak of its GPU model: copies host<->device against the PCIe
    peak, GPU-to-GPU copies and busbw against NVLink (PCIe without links), memory_bandwidth against the published
    memory bandwidth, gpus.memory against what NVML reports, the burn-in GEMM rate against bf16 dense."""
    ref = find_reference(profile.gpu_model or "")
    if ref is None:
        pytest.skip(f"profile {profile.name}: no reference for GPU model {profile.gpu_model!r}")
    links = profile.nvlink.get("links_per_gpu", 0)
    if links:
        assert ref.nvlink_links is not None and links <= ref.nvlink_links
    nvlinked = bool(links) and ref.nvlink_gbps_per_direction is not None
    gen, width = profile.pcie.get("gen"), profile.pcie.get("width")
    if gen is not None and ref.pcie_generation is not None:
        assert gen <= ref.pcie_generation and width <= ref.pcie_width
    pcie_peaks = [p for p in (ref.pcie_gbps_per_direction, gen and width and pcie_peak_gbps(gen, width)) if p]
    fabric_peak = ref.nvlink_gbps_per_direction if nvlinked else min(pcie_peaks, default=None)
    for op, threshold in profile.collective_thresholds():
        if "min_busbw" in threshold:
            assert fabric_peak is not None, f"{op}: a busbw floor with no peak to hold it against"
            assert parse_gbps(threshold["min_busbw"]) < fabric_peak, f"{op} {threshold}"
        if "min_fraction_of_peak" in threshold:
            assert 0 < threshold["min_fraction_of_peak"] < 1
    for kind, spec in profile.copy_thresholds().items():
        if "min" not in spec:
            continue
        peak = fabric_peak if kind == "gpu_to_gpu" else min(pcie_peaks, default=None)
        assert peak is not None and parse_gbps(spec["min"]) < peak, f"copy {kind}: {spec} against {peak}"
    if profile.gpu_memory_bytes is not None and ref.memory_bytes_nvml is not None:
        assert profile.gpu_memory_bytes <= ref.memory_bytes_nvml
    burn_in = profile.data.get("burn_in", {})
    if "min_tflops" in burn_in and burn_in.get("dtype", "bfloat16") == "bfloat16":
        assert ref.bf16_tflops_dense is not None and burn_in["min_tflops"] < ref.bf16_tflops_dense
    memory_bandwidth = profile.data.get("memory_bandwidth") or {}
    if "min" in memory_bandwidth:
        assert ref.memory_bandwidth_gbps is not None
        assert parse_gbps(memory_bandwidth["min"]) < ref.memory_bandwidth_gbps, memory_bandwidth
    if "min_fraction_of_peak" in memory_bandwidth:
        assert 0 < memory_bandwidth["min_fraction_of_peak"] < 1


def test_every_shipped_profile_with_bandwidth_floors_has_a_reference():
    """The skip above is for profiles without figures to check; those that promise bandwidth must be covered."""
    for path in PROFILES:
        profile = load_profile(path)
        if profile.bandwidth:
            assert find_reference(profile.gpu_model or "") is not None, profile.name


# --- recorded fractions ----------------------------------------------------------------------------------


def _fractions_script():
    path = ROOT / "benchmarks" / "reference_fractions.py"
    spec = importlib.util.spec_from_file_location("reference_fractions", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recorded_fractions_are_what_the_recordings_give():
    script = _fractions_script()
    sections = script.recorded_sections()
    assert set(sections) == {"h200-sxm", "h100-sxm"}
    refs = load_references()
    for model, ref in refs.items():
        assert ref.recorded == sections.get(model), f"{model}: run python benchmarks/reference_fractions.py"
        path = REFERENCES_DIR / f"{model}.yaml"
        assert script.updated_text(path, sections.get(model)) == path.read_text(encoding="utf-8")


def test_recorded_fractions_name_real_files_and_stay_below_the_published_peaks():
    for model in ("h200-sxm", "h100-sxm"):
        recorded = load_references()[model].recorded
        assert recorded["script"] == "benchmarks/reference_fractions.py"
        for entry in recorded["fractions"]:
            assert all((ROOT / f).is_file() for f in entry["files"])
            low, high = entry["of_published"]
            assert 0 < low <= high < 1, entry  # above 1 would mean a wrong published peak or a wrong unit


def test_recorded_fractions_h200_headline_numbers():
    """The figures the catalogue exists to answer: how far below the published peak our runs sit."""
    fractions = load_references()["h200-sxm"].recorded["fractions"]

    def entry(what: str, size: int | None = None, ranks: int | None = None) -> dict:
        [hit] = [f for f in fractions if f["what"].startswith(what) and f.get("size_bytes") == size
                 and f.get("ranks") == ranks]
        return hit

    gib = parse_bytes("1 GiB")
    assert entry("all_reduce busbw, torch", 4 * gib, 4)["of_published"] == [0.805, 0.807]  # 362-363 of 450
    assert entry("all_reduce busbw, nccl-tests", gib, 2)["gbps"] == [328.7, 331.5]  # FACTS.md's two runs
    assert entry("GPU-to-GPU copy")["of_published"][1] < 0.88  # 395 GB/s of 450
    assert entry("host-to-device copy")["link_rate_gbps"] == pytest.approx(63.015)  # gen 5 x16 after line coding
