"""docs/margins.md quotes the spread `profile init --measure` saw in ten runs on 1x H100 SXM 80GB: the figures are
read back here from the profiles those runs wrote (each section's comment), so the page cannot drift from them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
RUNS = ROOT / "tests" / "data" / "results" / "single-gpu-on-h100-x1" / "profile-init-measure"
DOC = (ROOT / "docs" / "margins.md").read_text()


def _leases() -> list[Path]:
    return sorted(RUNS.glob("lease-*.yaml"), key=lambda path: int(path.stem.split("-")[1]))


def _figures(pattern: str) -> list[list[float]]:
    """Per lease, the figures a comment line matching ``pattern`` lists after "measured on ...:" (before the unit)."""
    found = []
    for path in _leases():
        (line,) = [line for line in path.read_text().splitlines() if re.search(pattern, line)]
        figures = re.split(r" (?:GB/s|MHz|TFLOP/s|x the)", line.split("2026-11-25: ", 1)[1])[0]
        found.append([float(value) for value in figures.split(", ")])
    return found


def _worst_spread(pattern: str) -> float:
    """The largest "(spread N%)" the lines matching ``pattern`` print (computed on the unrounded figures)."""
    return max(float(re.search(r"spread (\d+\.\d)%", line).group(1)) for path in _leases()
               for line in path.read_text().splitlines() if re.search(pattern, line))


def test_ten_runs_nine_boards():
    assert len(list(RUNS.glob("lease-*.yaml"))) == 10 and "nine H100 boards, ten runs" in DOC


def test_copy_and_hbm_spreads_are_as_quoted():
    h2d, d2h = _figures("copy host_to_device"), _figures("copy device_to_host")
    assert _worst_spread("copy host_to_device") == 4.9 and "4.9 % (52.7, 52.1, 54.7 GB/s)" in DOC
    assert (min(map(min, h2d)), max(map(max, h2d))) == (51.3, 55.3) and "51.3-55.3 GB/s" in DOC
    assert _worst_spread("copy device_to_host") == 2.3 and (min(map(min, d2h)), max(map(max, d2h))) == \
        (53.1, 55.2) and "53.1-55.2 GB/s" in DOC
    hbm = _figures("memory_bandwidth, best of")
    assert _worst_spread("memory_bandwidth, best of") == 1.5 and "| 1.5 % |" in DOC
    assert (min(map(min, hbm)), max(map(max, hbm))) == (3217, 3280) and "3217-3280 GB/s" in DOC


def test_clock_gemm_and_offloading_ranges_are_as_quoted():
    clocks = [v for run in _figures("median SM clock at the power limit") for v in run]
    assert (min(clocks), max(clocks)) == (1350, 1388) and "1350-1388 MHz" in DOC
    gemm = [v for run in _figures("bf16 8192\\^3 GEMM") for v in run]
    assert (min(gemm), max(gemm)) == (652, 667) and "652-667 TFLOP/s" in DOC
    quarter = _leases()[1:]  # lease-8 ran the 16 GiB workload
    small = [float(re.search(r"(\d+\.\d+)x the batch-1", line).group(1)) for path in quarter
             for line in path.read_text().splitlines() if ">= 8 MiB past 0%" in line]
    big = [float(re.search(r"(\d+\.\d+)x the batch-1", line).group(1)) for path in quarter
           for line in path.read_text().splitlines() if ">= 64 MiB past 50%" in line]
    assert (min(small), max(small)) == (3.01, 4.54) and "3.01-4.54x" in DOC
    assert (min(big), max(big)) == (1.69, 2.99) and "1.69-2.99x" in DOC
