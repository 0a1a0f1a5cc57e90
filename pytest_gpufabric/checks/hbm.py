"""Per-GPU memory diagnostics: HBM bandwidth against a floor and NVML's peak, and the pattern test's mismatches.

Both take one row of the workload's result (workloads/hbm.py, workloads/mem_pattern.py) and name the GPU as the
verdicts do: ``GPU<index> (serial S)``, NVML's index and the board's serial.
"""

from __future__ import annotations

import math

from ..diagnostics.hbm import HBM
from ..diagnostics.memory_pattern import MEMORY_PATTERN
from ..units import format_bytes, is_number, non_finite, parse_bytes, parse_gbps
from .limits import HIGHER, Limit, figure, short_subject
from .result import CheckResult, failed, passed, unknown

#: without a minimum coverage in the profile, a pattern test that covered less than this of the free memory is not
#: enough to accept a GPU on: not checked. 75 % is DCGM's memory plugin default (minimum_allocation_percentage)
DEFAULT_MIN_COVERAGE = 0.75

_HBM_CAUSES = (
    "Usual causes: the memory clock held below its maximum (application clocks, a power cap or heat: nvidia-smi -q "
    "-d CLOCK,PERFORMANCE), another process using the GPU, or a degraded HBM stack (pending row remapping or "
    "retired pages: nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT,ECC)."
)
_PATTERN_CAUSES = (
    "A word read back differs from the word written: failing device memory. Look at nvidia-smi -q -d "
    "ECC,ROW_REMAPPER (uncorrectable errors, rows pending remapping) and dmesg (Xid 48, 63, 64, 94, 95); a GPU "
    "with uncorrectable errors or a failed remapping goes back to the vendor."
)


def gpu_label(row: dict) -> str:
    """``GPU3 (serial 1654123019211)``; the UUID where NVML gives no serial; ``(serial unknown)`` without either."""
    if row.get("serial"):
        return f"GPU{row['index']} (serial {row['serial']})"
    if row.get("uuid"):
        return f"GPU{row['index']} ({row['uuid']})"
    return f"GPU{row['index']} (serial unknown)"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_hbm_bandwidth(gpu_row: dict, floor: dict | None, model_peak_min_fraction: float | None,
                        source: str) -> CheckResult:
    """One GPU's best HBM bandwidth (the highest of copy, read and write) against the floor.

    ``floor``: the profile's ``{"min": "3000 GB/s"}`` and/or ``{"min_fraction_of_peak": 0.88}`` (of NVML's peak:
    bus width x max memory clock x 2). ``model_peak_min_fraction``: the fraction of the peak the GPU model is known
    to reach (a reference figure), judged when the profile states no fraction of its own; the profile's wins.
    Not checked: no floor at all, a number that is not finite, a figure above the peak (that measured a cache, not
    HBM), or a fraction floor where NVML gave no peak and nothing else failed."""
    who = gpu_label(gpu_row)
    name = HBM.name
    floor = dict(floor or {})
    fraction = floor.get("min_fraction_of_peak", model_peak_min_fraction)
    expected = {key: value for key, value in floor.items()}
    if fraction is not None:
        expected["min_fraction_of_peak"] = fraction
        expected["fraction_from"] = "profile" if "min_fraction_of_peak" in floor else "GPU model reference"
    if "min" not in floor and fraction is None:
        return unknown(name, who, expected, f"{who}: no HBM bandwidth floor stated (min or min_fraction_of_peak) "
                                            f"[{source}]")
    rates = {key: gpu_row.get(key) for key in ("copy_gbps", "read_gbps", "write_gbps", "best_gbps")}
    peak = gpu_row.get("peak_gbps")
    found = {**rates, "peak_gbps": peak, "fraction_of_peak": gpu_row.get("fraction_of_peak"),
             "bus_width_bits": gpu_row.get("bus_width_bits"), "max_mem_clock_mhz": gpu_row.get("max_mem_clock_mhz")}
    bad = non_finite({**rates, "peak_gbps": peak})
    missing = [key for key, value in rates.items() if not _number(value) and not non_finite(value)]
    if bad or missing:
        what = "; ".join(bad + [f"found.{key} = {rates[key]!r}" for key in missing])
        return unknown(name, who, expected, f"{who}: HBM bandwidth not a finite number ({what}) [{source}]")
    best = rates["best_gbps"]
    if peak is not None and not (_number(peak) and peak > 0):
        peak = None
    how = (f"copy {rates['copy_gbps']:.1f}, read {rates['read_gbps']:.1f}, write {rates['write_gbps']:.1f} GB/s, "
           f"best {best:.1f} GB/s")
    if peak is not None:
        how += (f" = {best / peak:.1%} of the {peak:.0f} GB/s peak (NVML: {gpu_row.get('bus_width_bits')}-bit bus x "
                f"{gpu_row.get('max_mem_clock_mhz')} MHz x 2)")
        if best > peak:
            return unknown(name, who, expected, f"{who} {gpu_row.get('name', '')}: {how}: above the peak, so the "
                                                "buffers did not measure HBM (a size within the L2 cache?) "
                                                f"[{source}]")
    summary = f"{who} {gpu_row.get('name', '')}: {how}"
    problems, unjudged = [], ""
    if "min" in floor and best < parse_gbps(floor["min"]):
        problems.append(f"best {best:.1f} GB/s < {floor['min']}")
    if fraction is not None:
        if peak is None:
            unjudged = (f"NVML gave no memory bus width or clock, so the peak is unknown: {fraction:.0%} of it "
                        "cannot be judged")
        elif best < fraction * peak:
            problems.append(f"best {best:.1f} GB/s < {fraction:.0%} of the {peak:.0f} GB/s peak "
                            f"({fraction * peak:.1f} GB/s)")
    if problems:
        return failed(name, who, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + ". "
                      + _HBM_CAUSES, unit="GB/s", details=problems)
    if unjudged:
        return unknown(name, who, expected, f"{summary} [{source}]; {unjudged}")
    return passed(name, who, expected, found, f"{summary} [{source}]", unit="GB/s")


def hbm_limits(record: dict) -> list[Limit]:
    """The best of copy, read and write against ``min`` and the fraction of NVML's peak, drawn as an HBM bar."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict) or not is_number(found.get("best_gbps")):
        return []
    bounds = [(parse_gbps(expected["min"]), f"min {expected['min']}")] if expected.get("min") else []
    fraction, peak = expected.get("min_fraction_of_peak"), found.get("peak_gbps")
    if is_number(fraction) and is_number(peak):
        bounds.append((fraction * peak, f"{fraction:.0%} of peak"))
    return figure("best_gbps", found["best_gbps"], bounds, "GB/s", HIGHER, chart="HBM",
                  bar=f"HBM {short_subject(record)}")


def measured_hbm(measured, results: list[dict], margin: float, where: str) -> None:
    """`profile init --measure`: the floor at ``margin`` times the slowest GPU's best rate of all runs, with the
    runs' figures and NVML's peak beside it."""
    lows = [min(g["best_gbps"] for g in result["gpus"]) for result in results]
    peaks = {g.get("peak_gbps") for result in results for g in result["gpus"]}
    key = HBM.key
    measured.sections[key] = {"min": f"{margin * min(lows):.0f} GB/s", **HBM.measure_section}
    peak = f"; NVML's peak {peaks.pop():.0f} GB/s" if len(peaks) == 1 and None not in peaks else ""
    measured.note(key, f"{key}, best of copy/read/write, slowest GPU of each run, {where}: "
                       f"{measured.figures(lows, 'GB/s', 0)}{peak}; floor {margin:g} x the lowest")


def hbm_coverage(record: dict, gpu_row: dict, section: dict) -> str | None:
    """Why an HBM bandwidth record does not show what the profile's ``memory_bandwidth`` section promises, or None:
    buffers of another size or another number of runs (a smaller buffer measures the cache), or a row that
    contradicts itself (its best not the highest of its three rates, its peak not NVML's bus width x clock x 2)."""
    s = HBM.settings(section)
    size = parse_bytes(s["size"])
    size -= size % 16  # hbm.py measures whole 16-byte vectors
    iters = int(s["iters"])
    gaps = []
    if record.get("size_bytes") != size:
        gaps.append(f"size_bytes = {record.get('size_bytes')!r}: buffers of {format_bytes(record.get('size_bytes'))}, "
                    f"the profile promises {format_bytes(size)}")
    if record.get("iters") != iters:
        gaps.append(f"iters = {record.get('iters')!r}: the best of {record.get('iters')} runs, the profile promises "
                    f"{iters}")
    rates = [gpu_row.get(k) for k in ("copy_gbps", "read_gbps", "write_gbps")]
    best = gpu_row.get("best_gbps")
    if all(_number(r) for r in rates) and _number(best) and not math.isclose(best, max(rates), rel_tol=1e-9):
        gaps.append(f"best_gbps = {best!r} is not the highest of copy, read and write ({max(rates)!r}): the record "
                    "contradicts itself")
    bits, clock, peak = (gpu_row.get(k) for k in ("bus_width_bits", "max_mem_clock_mhz", "peak_gbps"))
    if all(_number(v) for v in (bits, clock, peak)) and not math.isclose(peak, bits / 8 * clock * 2 / 1e3,
                                                                           rel_tol=1e-6):
        gaps.append(f"peak_gbps = {peak!r} is not its {bits}-bit bus x {clock} MHz x 2 "
                    f"({bits / 8 * clock * 2 / 1e3:.2f} GB/s): the record contradicts itself")
    return f"hbm.json: {gpu_label(gpu_row)}: " + "; ".join(gaps) if gaps else None


def _pattern_contradictions(gpu_row: dict, gpu_memory_bytes: int | None) -> list[str]:
    """Where a pattern row's bytes disagree with each other or with the GPU: the stored coverage is never taken,
    it is tested / free again, and a row whose figures do not add up is not evidence."""
    tested, free, total = (gpu_row.get(k) for k in ("tested_bytes", "free_bytes", "total_bytes"))
    found = []
    if _number(tested) and _number(free) and tested > free:
        found.append(f"tested_bytes {tested} > free_bytes {free}")
    if _number(free) and _number(total) and free > total:
        found.append(f"free_bytes {free} > total_bytes {total}")
    if gpu_memory_bytes and _number(total) and total > gpu_memory_bytes:
        found.append(f"total_bytes {total} is more than this GPU's {format_bytes(gpu_memory_bytes)} "
                     f"({gpu_memory_bytes} bytes)")
    wrong = next(((i, p.get("bytes")) for i, p in enumerate(gpu_row.get("passes") or [])
                  if isinstance(p, dict) and p.get("bytes") != tested), None)
    if wrong is not None:
        found.append(f"passes[{wrong[0]}].bytes = {wrong[1]!r}, tested_bytes {tested!r}")
    stored = gpu_row.get("coverage")
    if _number(stored) and _number(tested) and _number(free) and free > 0 and abs(stored - tested / free) > 1e-6:
        found.append(f"coverage = {stored!r}, but {tested} of {free} free bytes is {tested / free:.6f}")
    return found


def check_mem_pattern(gpu_row: dict, min_coverage: float | None, source: str, *, promised: dict | None = None,
                      gpu_memory_bytes: int | None = None) -> CheckResult:
    """One GPU's memory pattern test: every word read back as written, over enough of its free memory.

    Any mismatch fails, naming the GPU and each first mismatch's byte offset (from the start of the tested region),
    pattern and flipped bits; so does a CUDA error the test stopped with. The coverage is tested / free bytes,
    computed here (a stored fraction is never taken): ``min_coverage``: when the profile states one, less fails;
    when it does not, less than DEFAULT_MIN_COVERAGE is not checked (too little was tested to accept the GPU on).
    Not checked: a GPU that tested nothing, a figure that is not a finite number, a row whose bytes contradict each
    other or ``gpu_memory_bytes`` (the machine's, NVML), free memory under DEFAULT_MIN_COVERAGE of that (the test
    then covers too little of the GPU), and with ``promised`` (the profile's section) fewer seconds or other
    patterns than it promises."""
    who = gpu_label(gpu_row)
    name = MEMORY_PATTERN.name
    coverage_floor = DEFAULT_MIN_COVERAGE if min_coverage is None else min_coverage
    expected = {"mismatches": 0, "min_coverage": coverage_floor,
                "coverage_floor_from": "default" if min_coverage is None else "profile"}
    passes = gpu_row.get("passes") or []
    tested = gpu_row.get("tested_bytes") or 0
    mismatches = gpu_row.get("mismatches") or 0
    coverage = gpu_row.get("coverage")
    free = gpu_row.get("free_bytes")
    if (coverage is None or _number(coverage)) and _number(tested) and _number(free) and free > 0:
        coverage = tested / free  # from the bytes, never the stored fraction (a stored NaN is said as such below)
    patterns = sorted({p["pattern"] for p in passes})
    found = {"mismatches": mismatches, "coverage": coverage, "tested_bytes": tested,
             "free_bytes": gpu_row.get("free_bytes"), "passes": len(passes), "patterns": patterns,
             "seconds": gpu_row.get("seconds"), "first_mismatches": gpu_row.get("first_mismatches") or [],
             "error": gpu_row.get("error"), "planted": bool(gpu_row.get("planted"))}
    label = f"{who} {gpu_row.get('name', '')}"
    contradictions = _pattern_contradictions(gpu_row, gpu_memory_bytes)
    if contradictions:
        return unknown(name, who, expected, f"memory-pattern.json: {label}: the record contradicts itself ("
                       + "; ".join(contradictions) + f") [{source}]")
    planted = (" (a fault planted on purpose by --plant-fault: this run proves the check, it says nothing of the "
               "GPU)") if gpu_row.get("planted") else ""
    problems = []
    if gpu_row.get("error"):
        problems.append(f"the test stopped with a device error: {gpu_row['error']}")
    if mismatches:
        firsts = [f"offset {m['offset_bytes']} (0x{m['offset_bytes']:x}) in {m['pattern']}: expected {m['expected']}, "
                  f"found {m['found']}, bit(s) {', '.join(map(str, m['xor_bits']))} flipped"
                  for m in gpu_row.get("first_mismatches") or []]
        problems.append(f"{mismatches} word(s) read back wrong" + (": " + "; ".join(firsts) if firsts else ""))
    if not tested or not passes:
        if problems:
            return failed(name, who, expected, found, f"{label}{planted} [{source}]: " + "; ".join(problems) + ". "
                          + _PATTERN_CAUSES, details=problems)
        stopped = gpu_row.get("allocation_stopped")
        return unknown(name, who, expected, f"{label}: tested nothing"
                       + (f" ({stopped})" if stopped else "") + f" [{source}]")
    if not _number(coverage):
        return unknown(name, who, expected, f"{label}: coverage not a finite number ({coverage!r}) [{source}]")
    summary = (f"{label}: {len(passes)} pass(es) ({', '.join(patterns)}) over {format_bytes(tested)}, "
               f"{coverage:.1%} of the {format_bytes(gpu_row.get('free_bytes'))} free, in "
               f"{gpu_row.get('seconds') or 0:.1f} s")
    if problems:
        return failed(name, who, expected, found, f"{summary}{planted} [{source}]: " + "; ".join(problems) + ". "
                      + _PATTERN_CAUSES, details=problems)
    gap = _pattern_gap(gpu_row, promised, gpu_memory_bytes)
    if gap:
        return unknown(name, who, expected, f"{summary}, no mismatch [{source}]; but {gap}")
    if coverage < coverage_floor:
        short = f"coverage {coverage:.1%} < {coverage_floor:.0%}"
        if min_coverage is not None:
            return failed(name, who, expected, found, f"{summary} [{source}]: {short} (the profile's minimum): the "
                          "test could not take enough of the memory (another process holding it, or a fraction set "
                          "too low)", details=[short])
        return unknown(name, who, expected, f"{summary}, no mismatch [{source}]; {short}: too little tested to "
                                            "accept the GPU on (the profile states no minimum coverage)")
    return passed(name, who, expected, found, f"{summary}, no mismatch [{source}]")


def pattern_limits(record: dict) -> list[Limit]:
    """The share of free memory tested against ``min_coverage``, in percent (any mismatch fails outright)."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict) or not is_number(found.get("coverage")):
        return []
    floor = expected.get("min_coverage")
    bounds = [(floor * 100, f"min {floor:.0%}")] if is_number(floor) else []
    return figure("coverage", found["coverage"] * 100, bounds, "% of memory", HIGHER)


def measured_pattern(measured, results: list[dict], margin: float, where: str) -> None:
    """`profile init --measure`: the pattern test promised as it ran, only where the golden machine passed it (a
    pattern test it fails is a faulty golden machine); it has no floor to measure."""
    rows = results[0].get("gpus", [])
    bad = [f"GPU{g.get('index')}: " + (g.get("error") or f"{g.get('mismatches')} mismatch(es)")
           for g in rows if g.get("error") or g.get("mismatches")]
    key = MEMORY_PATTERN.key
    if bad or not rows:
        measured.not_measured.append(f"{key}: the test did not pass here ({'; '.join(bad) or 'no GPU row'}): not a "
                                     "golden machine for it")
        return
    coverage = ", ".join(f"GPU{g['index']} {g['tested_bytes'] / 2**30:.1f} GiB ({g['coverage']:.1%} of total)"
                         for g in rows)
    measured.sections[key] = dict(MEMORY_PATTERN.measure_section)
    measured.note(key, f"{key}, {where}: no mismatch over {coverage} in {max(g['seconds'] for g in rows):.0f} s; any "
                       "mismatch fails (no floor)")


def _pattern_gap(gpu_row: dict, promised: dict | None, gpu_memory_bytes: int | None) -> str | None:
    """What of the promised test a clean row does not cover: its seconds, its patterns, enough free memory."""
    gaps = []
    if promised is not None:
        promised = MEMORY_PATTERN.settings(promised)
        want = promised["patterns"]
        want = [want] if isinstance(want, str) else list(want)
        ran = {p.get("pattern") for p in gpu_row.get("passes") or []}
        if set(want) - ran:
            gaps.append(f"it ran {', '.join(sorted(p for p in ran if p)) or 'no pattern'}, the profile promises "
                        f"{', '.join(want)}")
        seconds = float(promised["seconds"])
        if not _number(gpu_row.get("seconds")) or gpu_row["seconds"] < 0.9 * seconds:
            gaps.append(f"it ran {gpu_row.get('seconds')!r} s of the {seconds:g} s promised")
    free = gpu_row.get("free_bytes")
    if gpu_memory_bytes and _number(free) and free < DEFAULT_MIN_COVERAGE * gpu_memory_bytes:
        gaps.append(f"only {format_bytes(free)} of the GPU's {format_bytes(gpu_memory_bytes)} was free (another "
                    "process held the rest?): a test of the free memory does not cover the GPU")
    return "; ".join(gaps) if gaps else None
