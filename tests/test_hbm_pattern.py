"""The per-GPU memory diagnostics, for real on the CPU: hbm.py and mem_pattern.py through run_workload
(``--device cpu``), the pattern generator at word indexes past 2**32, the planted fault found at its offset and bit,
and the checks judged on what those CPU runs measured.

No GPU figure is invented here: where a check needs NVML's figures (bus width, memory clock) or a board's serial,
they are read from this repo's recordings of a real H100 (references/recordings/h100-sxm-nvml-memory.json and
tests/data/bundles/h100-x1/nvml.json), each test saying so.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_gpufabric.checks.hbm import (  # noqa: E402
    DEFAULT_MIN_COVERAGE,
    check_hbm_bandwidth,
    check_mem_pattern,
    gpu_label,
)
from pytest_gpufabric.checks.result import FAILED, NOT_CHECKED, PASSED  # noqa: E402
from pytest_gpufabric.errors import ToolMissing, WorkloadError  # noqa: E402
from pytest_gpufabric.workloads.diagnostics import (  # noqa: E402
    HBM_FORMAT,
    MEM_PATTERN_FORMAT,
    hbm_command,
    measure_hbm,
    measure_mem_pattern,
    mem_pattern_command,
)
from pytest_gpufabric.workloads.hbm import peak_gbps  # noqa: E402
from pytest_gpufabric.workloads.mem_pattern import PATTERNS, hex64, pattern_chunk, xor_bits  # noqa: E402
from pytest_gpufabric.workloads.runner import run_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
H100_NVML_MEMORY = REPO / "pytest_gpufabric" / "references" / "recordings" / "h100-sxm-nvml-memory.json"
H100_BUNDLE_NVML = REPO / "tests" / "data" / "bundles" / "h100-x1" / "nvml.json"

MIB = 1 << 20
#: three chunks of 1 MiB and a part: the region spans chunk boundaries, so offsets must be global
PATTERN_BYTES = 3 * MIB + 4096
CHUNK_BYTES = MIB
PATTERN_SECTION = {"fraction": 0.9, "seconds": 0.3, "patterns": list(PATTERNS), "seed": 7, "timeout_s": 120,
                   "bytes": PATTERN_BYTES, "chunk_bytes": CHUNK_BYTES}
HBM_SECTION = {"size": "8 MiB", "iters": 3, "timeout_s": 120}
HBM_ROW_KEYS = {"cuda", "index", "uuid", "serial", "name", "copy_gbps", "read_gbps", "write_gbps", "best_gbps",
                "peak_gbps", "bus_width_bits", "max_mem_clock_mhz", "fraction_of_peak"}
PATTERN_ROW_KEYS = {"cuda", "index", "uuid", "serial", "name", "free_bytes", "tested_bytes", "coverage", "passes",
                    "mismatches", "first_mismatches", "seconds", "planted"}


def _signed(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _walking_one(index: int) -> int:
    return _signed(1 << (index % 64))


# ---------------------------------------------------------------------------------------------------------
# pattern_chunk: exact global indexes, no wrap at 2**32
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("base", [0, 2**32 - 5, 2**33 + 7, 2**40 + 3])
def test_address_pattern_holds_the_exact_global_index(base):
    words = pattern_chunk("address", base, 16, seed=0, device="cpu")
    assert words.dtype == torch.int64
    assert words.tolist() == list(range(base, base + 16))  # across 2**32 and past it: no wrap, no zeros


@pytest.mark.parametrize("base", [0, 61, 2**32 - 5, 2**33 + 7])
def test_walking_patterns_follow_the_global_index(base):
    ones = pattern_chunk("walking_ones", base, 130, seed=0, device="cpu").tolist()
    zeros = pattern_chunk("walking_zeros", base, 130, seed=0, device="cpu").tolist()
    assert ones == [_walking_one(base + j) for j in range(130)]
    assert zeros == [~_walking_one(base + j) for j in range(130)]
    assert all(bin(w & (2**64 - 1)).count("1") == 1 for w in ones)  # one bit set, bit 63 included
    assert any(w == -(2**63) for w in ones)


@pytest.mark.parametrize("kind", ["address", "walking_ones", "walking_zeros"])
def test_a_pattern_is_the_same_whichever_way_it_is_chunked(kind):
    base = 2**32 - 100
    whole = pattern_chunk(kind, base, 1000, seed=0, device="cpu")
    parts = torch.cat([pattern_chunk(kind, base, 333, 0, "cpu"), pattern_chunk(kind, base + 333, 667, 0, "cpu")])
    assert torch.equal(whole, parts)


def test_random_pattern_regenerates_from_its_seed_and_uses_all_64_bits():
    first = pattern_chunk("random", 2**33 + 7, 4096, seed=11, device="cpu")
    again = pattern_chunk("random", 2**33 + 7, 4096, seed=11, device="cpu")
    other = pattern_chunk("random", 2**33 + 7, 4096, seed=12, device="cpu")
    assert torch.equal(first, again)
    assert int((first != other).sum()) > 4000
    assert int((first < 0).sum()) > 1000  # bit 63 is set in about half the words
    assert len(set(first.tolist())) == 4096


def test_pattern_chunk_refuses_what_it_cannot_generate_exactly():
    with pytest.raises(ValueError, match="2\\*\\*31"):
        pattern_chunk("address", 0, 2**31, seed=0, device="cpu")  # refused before anything is allocated
    with pytest.raises(ValueError, match="unknown pattern"):
        pattern_chunk("checkerboard", 0, 8, seed=0, device="cpu")


def test_mismatch_words_are_shown_as_64_bits():
    assert hex64(-(2**63)) == "0x8000000000000000"
    assert hex64(-1) == "0xffffffffffffffff"
    assert xor_bits(_signed(1 << 44), _signed((1 << 44) | (1 << 63))) == [63]
    assert xor_bits(5, 6) == [0, 1]


# ---------------------------------------------------------------------------------------------------------
# hbm.py on the CPU
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hbm_result():
    return measure_hbm(HBM_SECTION, device="cpu", gpus=1)


def test_hbm_command_from_a_profile_section():
    cmd = hbm_command({"size": "4 GiB", "iters": 20})
    assert cmd[0] == sys.executable and cmd[1].endswith("workloads/hbm.py")
    assert cmd[cmd.index("--size") + 1] == str(4 << 30)
    assert cmd[cmd.index("--iters") + 1] == "20" and cmd[cmd.index("--device") + 1] == "cuda"


def test_hbm_runs_on_cpu_with_finite_positive_figures(hbm_result):
    assert hbm_result["format"] == HBM_FORMAT
    assert hbm_result["size_bytes"] == 8 * MIB and hbm_result["iters"] == 3
    assert hbm_result["torch_version"] == torch.__version__
    assert "stdout_tail" not in hbm_result
    (row,) = hbm_result["gpus"]
    assert HBM_ROW_KEYS <= set(row)
    assert row["cuda"] == 0 and row["index"] == 0 and row["name"] == "cpu"
    assert row["uuid"] is None and row["serial"] is None  # a CPU is no board
    rates = [row["copy_gbps"], row["read_gbps"], row["write_gbps"]]
    assert all(math.isfinite(r) and r > 0 for r in rates)
    assert row["best_gbps"] == max(rates)
    # no NVML on a CPU: no peak, and no fraction of it
    assert row["peak_gbps"] is None and row["fraction_of_peak"] is None
    assert row["bus_width_bits"] is None and row["max_mem_clock_mhz"] is None
    json.dumps(hbm_result, allow_nan=False)


def test_peak_formula_on_the_recorded_h100_nvml_figures():
    gpu = json.loads(H100_NVML_MEMORY.read_text())["gpus"][0]
    peak = peak_gbps(gpu["memory_bus_width_bits"], gpu["max_clock_memory_mhz"])
    assert (gpu["memory_bus_width_bits"], gpu["max_clock_memory_mhz"]) == (5120, 2619)
    assert peak == pytest.approx(5120 / 8 * 2619 * 2 / 1000) and round(peak) == 3352


def test_measure_refuses_without_torch(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(ToolMissing, match="HBM bandwidth diagnostic needs torch"):
        measure_hbm(HBM_SECTION, device="cpu", gpus=1)
    with pytest.raises(ToolMissing, match="memory pattern diagnostic needs torch"):
        measure_mem_pattern(PATTERN_SECTION, device="cpu")


# ---------------------------------------------------------------------------------------------------------
# mem_pattern.py on the CPU: two CPU "devices", one thread each
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pattern_result():
    return measure_mem_pattern(PATTERN_SECTION, device="cpu")


@pytest.fixture(scope="module")
def planted_result():
    # seconds 0: the first cycle of patterns only, so the planted bit is the one mismatch there is
    return measure_mem_pattern({**PATTERN_SECTION, "seconds": 0}, plant_fault=1, device="cpu")


def test_mem_pattern_command_from_a_profile_section():
    cmd = mem_pattern_command({"fraction": 0.9, "seconds": 60, "patterns": ["address", "random"], "seed": 3},
                              plant_fault=2)
    assert cmd[1].endswith("workloads/mem_pattern.py")
    assert [cmd[cmd.index(flag) + 1] for flag in ("--fraction", "--seconds", "--patterns", "--seed",
                                                  "--plant-fault", "--device")] == [
        "0.9", "60.0", "address,random", "3", "2", "cuda"]
    assert "--bytes" not in cmd  # on a GPU the region is the fraction of free memory unless capped


def test_mem_pattern_runs_on_cpu_and_covers_the_region(pattern_result):
    result = pattern_result
    assert result["format"] == MEM_PATTERN_FORMAT
    assert result["fraction"] == 0.9 and result["seconds"] == 0.3 and result["patterns"] == list(PATTERNS)
    assert result["plant_fault"] is None
    assert len(result["gpus"]) == 2
    for cuda, row in enumerate(result["gpus"]):
        assert PATTERN_ROW_KEYS <= set(row)
        assert row["cuda"] == cuda and row["index"] == cuda
        assert row["tested_bytes"] == PATTERN_BYTES and row["chunks"] == 4
        assert row["free_bytes"] > PATTERN_BYTES
        assert row["coverage"] == pytest.approx(PATTERN_BYTES / row["free_bytes"])
        assert row["mismatches"] == 0 and row["first_mismatches"] == [] and row["planted"] is False
        assert row["error"] is None and row["allocation_stopped"] is None
        passes = row["passes"]
        # the first cycle whole, in order; then more passes until the 0.3 s were up
        assert [p["pattern"] for p in passes[:4]] == list(PATTERNS)
        # more passes where the first cycle left time (a loaded machine may spend the 0.3 s on it)
        assert row["seconds"] >= 0.3
        assert len(passes) > 4 or sum(p["seconds"] for p in passes) >= 0.3
        assert all(p["bytes"] == PATTERN_BYTES and p["mismatches"] == 0 for p in passes)
        assert all(math.isfinite(p["seconds"]) and p["seconds"] > 0 for p in passes)
        assert sum(p["seconds"] for p in passes) <= row["seconds"]


def test_planted_fault_is_found_at_its_offset_and_bit(planted_result):
    result = planted_result
    words = PATTERN_BYTES // 8
    offset = words // 2 * 8  # the middle word: in the second chunk, so the offset is counted across chunks
    assert offset > CHUNK_BYTES
    assert result["plant_fault"] == {"cuda": 1, "offset_bytes": offset, "bit": 17}
    clean, faulty = result["gpus"]
    assert clean["mismatches"] == 0 and clean["planted"] is False
    assert faulty["planted"] is True and faulty["mismatches"] == 1
    assert [p["pattern"] for p in faulty["passes"]] == list(PATTERNS)  # seconds 0: one cycle
    assert [p["mismatches"] for p in faulty["passes"]] == [1, 0, 0, 0]  # planted after the first write only
    expected = _walking_one(offset // 8)
    assert faulty["first_mismatches"] == [{
        "pattern": "walking_ones", "offset_bytes": offset, "expected": hex64(expected),
        "found": hex64(expected ^ (1 << 17)), "xor_bits": [17]}]


def test_planted_bit_63_in_the_address_pattern(tmp_path):
    section = {**PATTERN_SECTION, "seconds": 0, "patterns": ["address", "random"]}
    offset = CHUNK_BYTES * 2 + 8 * 5  # the sixth word of the third chunk
    result = run_workload(mem_pattern_command(section, plant_fault=0, device="cpu")
                          + ["--plant-offset", str(offset), "--plant-bit", "63", "--workers", "1"], timeout_s=120)
    (row,) = result["gpus"]
    assert row["mismatches"] == 1 and row["planted"] is True
    (first,) = row["first_mismatches"]
    assert first == {"pattern": "address", "offset_bytes": offset, "expected": hex64(offset // 8),
                     "found": hex64(_signed((offset // 8) | 1 << 63)), "xor_bits": [63]}
    assert first["found"].startswith("0x8000")


def test_cpu_run_needs_a_byte_cap():
    section = {key: value for key, value in PATTERN_SECTION.items() if key != "bytes"}
    with pytest.raises(WorkloadError, match="--device cpu needs --bytes") as info:
        run_workload(mem_pattern_command(section, device="cpu"), timeout_s=60)
    assert info.value.returncode == 2


# ---------------------------------------------------------------------------------------------------------
# the checks, on what the CPU runs measured
# ---------------------------------------------------------------------------------------------------------


def test_hbm_check_passes_and_fails_on_the_cpu_figures(hbm_result):
    row = hbm_result["gpus"][0]
    low = check_hbm_bandwidth(row, {"min": "1 MB/s"}, None, "this run")
    assert low.verdict == PASSED and low.subject == "GPU0 (serial unknown)"
    assert low.found["best_gbps"] == row["best_gbps"] and low.unit == "GB/s"
    high = check_hbm_bandwidth(row, {"min": "1000000 GB/s"}, None, "this run")
    assert high.verdict == FAILED
    assert high.message.startswith("GPU0 (serial unknown) cpu: copy ")
    assert f"best {row['best_gbps']:.1f} GB/s < 1000000 GB/s" in high.message


def test_hbm_fraction_floor_without_a_peak_is_not_checked(hbm_result):
    row = hbm_result["gpus"][0]
    result = check_hbm_bandwidth(row, {"min_fraction_of_peak": 0.88}, None, "this run")
    assert result.verdict == NOT_CHECKED and "peak is unknown" in result.message
    model = check_hbm_bandwidth(row, None, 0.85, "this run")  # the GPU model's fraction, the profile saying none
    assert model.verdict == NOT_CHECKED and model.expected["fraction_from"] == "GPU model reference"
    # an absolute floor that fails still fails, whatever could not be judged
    both = check_hbm_bandwidth(row, {"min": "1000000 GB/s", "min_fraction_of_peak": 0.88}, None, "this run")
    assert both.verdict == FAILED
    nothing = check_hbm_bandwidth(row, None, None, "this run")
    assert nothing.verdict == NOT_CHECKED and "no HBM bandwidth floor" in nothing.message


@pytest.mark.parametrize("key", ["best_gbps", "copy_gbps"])
def test_hbm_check_refuses_a_number_that_is_not_finite(hbm_result, key):
    row = {**hbm_result["gpus"][0], key: float("nan")}
    result = check_hbm_bandwidth(row, {"min": "1 MB/s"}, None, "recording")
    assert result.verdict == NOT_CHECKED and f"found.{key} = nan" in result.message


def test_hbm_fraction_of_the_recorded_h100_peak(hbm_result):
    # the CPU run's figures with the NVML figures and serial of the recorded H100 (as the row of that board would
    # carry them): the fraction floor is judged against 5120 / 8 x 2619 x 2 = 3352 GB/s, which a CPU does not reach
    gpu = json.loads(H100_NVML_MEMORY.read_text())["gpus"][0]
    board = json.loads(H100_BUNDLE_NVML.read_text())["gpus"][0]
    bus, clock = gpu["memory_bus_width_bits"], gpu["max_clock_memory_mhz"]
    row = {**hbm_result["gpus"][0], "serial": board["serial"], "uuid": board["uuid"], "bus_width_bits": bus,
           "max_mem_clock_mhz": clock, "peak_gbps": peak_gbps(bus, clock)}
    result = check_hbm_bandwidth(row, {"min_fraction_of_peak": 0.88}, None, "this run")
    assert result.verdict == FAILED
    assert result.subject == f"GPU0 (serial {board['serial']})"
    assert "of the 3352 GB/s peak (NVML: 5120-bit bus x 2619 MHz x 2)" in result.message
    assert "< 88% of the 3352 GB/s peak (2950.0 GB/s)" in result.message


def test_pattern_check_on_a_clean_cpu_run(pattern_result):
    row = pattern_result["gpus"][0]
    assert row["coverage"] < DEFAULT_MIN_COVERAGE  # a few MiB of the host's memory
    default = check_mem_pattern(row, None, "this run")
    assert default.verdict == NOT_CHECKED and "too little tested" in default.message
    asked_none = check_mem_pattern(row, 0.0, "this run")
    assert asked_none.verdict == PASSED and "no mismatch" in asked_none.message
    assert asked_none.found["patterns"] == sorted(PATTERNS)
    asked_half = check_mem_pattern(row, 0.5, "this run")
    assert asked_half.verdict == FAILED and "< 50% (the profile's minimum)" in asked_half.message


def test_pattern_check_fails_the_planted_gpu(planted_result):
    clean, faulty = planted_result["gpus"]
    assert check_mem_pattern(clean, 0.0, "this run").verdict == PASSED
    result = check_mem_pattern(faulty, 0.0, "this run")
    (first,) = faulty["first_mismatches"]
    assert result.verdict == FAILED and result.subject == "GPU1 (serial unknown)"
    assert f"offset {first['offset_bytes']} (0x{first['offset_bytes']:x}) in walking_ones" in result.message
    assert "bit(s) 17 flipped" in result.message and "planted on purpose" in result.message
    # a mismatch fails whatever the coverage: too little tested never hides a wrong word
    assert check_mem_pattern(faulty, None, "this run").verdict == FAILED
    board = json.loads(H100_BUNDLE_NVML.read_text())["gpus"][0]
    named = check_mem_pattern({**faulty, "serial": board["serial"]}, None, "this run")
    assert named.message.startswith(f"GPU1 (serial {board['serial']}) cpu: ")


def test_pattern_check_not_checked_without_evidence(pattern_result):
    row = pattern_result["gpus"][0]
    nothing = check_mem_pattern({**row, "tested_bytes": 0, "passes": [], "coverage": 0.0}, 0.0, "this run")
    assert nothing.verdict == NOT_CHECKED and "tested nothing" in nothing.message
    nan = check_mem_pattern({**row, "coverage": float("nan")}, 0.0, "recording")
    assert nan.verdict == NOT_CHECKED and "not a finite number" in nan.message


def test_gpu_label():
    assert gpu_label({"index": 3, "serial": "1654", "uuid": "GPU-x"}) == "GPU3 (serial 1654)"
    assert gpu_label({"index": 3, "serial": None, "uuid": "GPU-x"}) == "GPU3 (GPU-x)"
    assert gpu_label({"index": 3, "serial": None, "uuid": None}) == "GPU3 (serial unknown)"
