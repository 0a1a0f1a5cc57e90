"""Burn-in verdicts: per GPU (by serial), its GEMM results against the cross-checks, its health during the
burn-in, its rate; and the collectives that ran between the chunks."""

from __future__ import annotations

import math

from ..formats.records import BURN_IN_FILE as LOG
from ..units import is_number
from .health import counter_problems, forbidden_counters, peak_problems
from .limits import HIGHER, LOWER, Limit, figure
from .result import CheckResult, failed, passed, unknown

#: at most this many of a log's problems are named in one verdict (the rest are counted)
_SHOWN = 5


def _say(reasons: list[str]) -> list[str]:
    return reasons if len(reasons) <= _SHOWN else [*reasons[:_SHOWN], f"and {len(reasons) - _SHOWN} more"]


def _planned_vs_run(burn_in) -> str | None:
    """Why the log does not cover the burn-in its start line planned, or None. The loop (workloads/burn_in.py)
    stops when less than a second, plus the last chunk's start-up where logged, is left: less than that is an
    unfinished burn-in (a crash, a killed run, a cut log), whatever its end line says."""
    planned, ran = burn_in.duration_s, burn_in.elapsed_s
    gemms = [r for r in burn_in.records if r.get("type") == "gemm"]
    last = gemms[-1] if gemms else {}
    startup = (max(1.0, last["wall_s"] - last.get("seconds", 0.0))
               if isinstance(last.get("wall_s"), (int, float)) and isinstance(last.get("seconds"), (int, float))
               else 0.0)
    if planned - ran < 1.0 + startup:
        return None
    end = next((r for r in burn_in.records if r.get("type") == "end"), None)
    tail = "the log has no end" if end is None else f"its end line says {end.get('elapsed_s')} s"
    return (f"{LOG}: ran {ran:.0f} s of the {planned:.0f} s planned; {tail}: an unfinished burn-in shows nothing of "
            "the rest")


def burn_in_evidence(burn_in, index: int | None = None) -> list[str]:
    """Why the burn-in's log cannot be judged (for GPU<index>; None: for the promises of the whole machine): what
    its reading found (a torn line, a value out of range: formats/records.py), no start line, a burn-in that did not
    run its planned duration, and for a GPU: no serial naming its board, a board the log names two ways, a GEMM
    chunk without a health reading, GEMMs never cross-checked. A log that records its GEMM workload failing is
    judged (the failure is the verdict), however far it got. The board is the start line's serial (the health
    reads' at the start); the chunks' own serials, where logged, must be the same."""
    reasons = [p.text for p in burn_in.problems if p.gpu is None or p.gpu == index]
    start = burn_in.start
    if start is None:
        return [*reasons, f"{LOG} has no start line: the burn-in's plan (duration, boards) is unknown"]
    unfinished = _planned_vs_run(burn_in)
    if unfinished and not burn_in.workload_errors:
        reasons.append(unfinished)
    if index is None:
        return _say(reasons)
    key = str(index)
    serial = (start.get("serials") or {}).get(key)
    rows = [(number, g) for number, r in enumerate(burn_in.records, start=1) if r.get("type") == "gemm"
            for g in r.get("result", {}).get("gpus", []) if isinstance(g, dict) and g.get("gpu") == index]
    named = {g.get("serial") for _, g in rows if g.get("serial")}
    named |= {h.get("serial") for r in burn_in.records if r.get("type") == "gemm"
              for g, h in (r.get("health") or {}).items() if g == key and isinstance(h, dict) and h.get("serial")}
    if not serial and (rows or not start.get("serials")):
        # (a start line naming other boards but not this one, with no GEMM of it: it took no part, a failure)
        reasons.append(f"{LOG}: the start line names no serial for GPU{index}: which board burned is unknown")
    elif serial and named - {serial}:
        reasons.append(f"{LOG} names GPU{index} serial {serial} in its start line and "
                       f"{', '.join(sorted(named - {serial}))} in its chunks: it contradicts itself")
    for number in sorted({number for number, _ in rows}):  # the chunks GPU<index> burned in
        record = burn_in.records[number - 1]
        health = (record.get("health") or {}).get(key)
        temperature = None
        if isinstance(health, dict):
            temperature = health.get("peak_temperature_c", health.get("temperature_c"))
        finite = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
        if not finite or not math.isfinite(temperature):
            reasons.append(f"{LOG} line {number} (gemm): no health reading of GPU{index} (temperature "
                           f"{temperature!r}): its temperature and error counters during the chunk are unknown")
    checks = sum(g.get("checks", 0) for _, g in rows if isinstance(g.get("checks"), int))
    if rows and checks == 0:
        reasons.append(f"{LOG}: GPU{index}'s GEMM results were never cross-checked (0 checks in {len(rows)} chunk(s)): "
                       "a wrong result would not show")
    return _say(list(dict.fromkeys(reasons)))


def check_burn_in_gpu(index: int, serial: str | None, totals: dict | None, section: dict, health_section: dict,
                      duration_s: float, workload_errors: list[str] = (),
                      machine_serial: str | None = None) -> CheckResult:
    """``serial``: the GPU's serial as the burn-in log recorded it; ``machine_serial``: as the machine (or the
    bundle's inventory) reports it, when known. ``workload_errors``: GEMM workloads that failed during the
    burn-in (a resumed one's included); they name no GPU (one process drives them all), so each GPU's verdict
    carries them."""
    who = f"GPU{index} (serial {serial or machine_serial or 'unknown'})"
    if serial and machine_serial and serial != machine_serial:
        # evidence of a board this machine does not have shows nothing of this one: never passed, never accused
        return unknown("burn-in-gpu", who, {"serial": machine_serial},
                       f"GPU{index}: the burn-in log was recorded on serial {serial}, but this machine's GPU{index} "
                       f"is serial {machine_serial}: the log is another GPU's (a copied reports/ folder, a GPU "
                       "swapped since, or a bundle put together from two machines); this GPU was not burned in")
    if totals is None:
        return failed("burn-in-gpu", who, "GEMM burn", None, f"{who}: took no part in the burn-in (no GEMM "
                      "results): the GPU was not visible to the workload")
    rate = sum(totals["tflops"]) / len(totals["tflops"]) if totals["tflops"] else 0.0
    problems = [f"the GEMM workload failed during the burn-in ({error})" for error in workload_errors]
    if totals["errors_self"] or totals["errors_cross"]:
        problems.append(f"{totals['errors_self']} element(s) differed from its own first product and "
                        f"{totals['errors_cross']} from GPU0's over {totals['checks']} checks: the GPU computes "
                        "wrong results (memory, clocks or a failing chip; see dmesg for Xid 13/31/43/48)")
    problems += counter_problems(totals["health"], health_section)
    floor = section.get("min_tflops")
    if floor is not None and rate < floor:
        problems.append(f"{rate:.0f} TFLOP/s, below the {floor:g} promised (clocks throttled? see the health "
                        "timeline)")
    hottest = totals.get("max_temperature_c")
    clock_events = sorted(totals.get("throttle_seen", ()))
    problems += peak_problems(hottest, clock_events, health_section)
    found = {"iterations": totals["iterations"], "checks": totals["checks"], "errors_self": totals["errors_self"],
             "errors_cross": totals["errors_cross"], "tflops": rate, "max_temperature_c": hottest,
             "clock_events": clock_events, "counters_rose": totals["health"]}
    summary = (f"{who} {totals['name']}: {totals['iterations']} GEMMs in {duration_s / 60:.1f} min at {rate:.0f} "
               f"TFLOP/s, {totals['checks']} checks, {totals['errors_self'] + totals['errors_cross']} wrong elements, "
               f"hottest {hottest if hottest is not None else '?'} C"
               + (f", clock events: {', '.join(clock_events)}" if clock_events else ""))
    expected = {"wrong_elements": 0, "min_tflops": floor,
                "forbidden_counters": sorted(forbidden_counters(health_section))}
    if problems:
        return failed("burn-in-gpu", who, expected, found, f"{summary}: " + "; ".join(problems) + ". REJECTED",
                      details=problems)
    return passed("burn-in-gpu", who, expected, found, summary)


def gpu_limits(record: dict) -> list[Limit]:
    """The GEMM rate against ``min_tflops`` and the hottest reading: the fleet compares both."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    limits = []
    if is_number(found.get("tflops")):
        floor = expected.get("min_tflops")
        bounds = [(floor, f"min {floor:g} TFLOP/s")] if is_number(floor) else []
        limits += figure("tflops", found["tflops"], bounds, "TFLOP/s", HIGHER, fleet=True)
    if is_number(found.get("max_temperature_c")):
        limits.append(Limit("max_temperature_c", found["max_temperature_c"], None, "C", LOWER, fleet=True))
    return limits


def collectives_limits(record: dict) -> list[Limit]:
    """The slowest all_reduce between the chunks against the floor (``expected``), drawn as a bar."""
    floor, found = record.get("expected"), record.get("found")
    if not isinstance(found, dict) or not is_number(found.get("busbw_min")):
        return []
    bounds = [(floor, f"min {floor:g} GB/s")] if is_number(floor) else []
    return figure("busbw_min", found["busbw_min"], bounds, "GB/s", HIGHER, chart="Burn-in collectives",
                  bar=f"burn-in {record.get('subject')} (worst run)", fleet=True)


def check_burn_in_collectives(records: list[dict], floor_gbps: float | None) -> CheckResult:
    rows = [r for r in records if r.get("type") == "all_reduce"]
    if not rows:
        return unknown("burn-in-collectives", "all_reduce", floor_gbps, "no collective ran during the burn-in")
    errors = [r["error"] for r in rows if "error" in r]
    wrong = sum(r["row"]["wrong"] for r in rows if "row" in r)
    rates = [r["row"]["busbw"] for r in rows if "row" in r]
    problems = list(errors)
    if wrong:
        problems.append(f"{wrong} wrong element(s) in the all_reduce results")
    if floor_gbps is not None and rates and min(rates) < floor_gbps:
        problems.append(f"busbw fell to {min(rates):.1f} GB/s, below {floor_gbps:g} GB/s")
    found = {"runs": len(rows), "busbw_min": min(rates) if rates else None, "busbw_max": max(rates) if rates else None,
             "wrong": wrong}
    summary = (f"all_reduce between the chunks: {len(rows)} runs, busbw {min(rates):.1f}-{max(rates):.1f} GB/s"
               if rates else f"all_reduce between the chunks: {len(rows)} runs")
    if problems:
        return failed("burn-in-collectives", "all_reduce", floor_gbps, found, f"{summary}: " + "; ".join(problems))
    return passed("burn-in-collectives", "all_reduce", floor_gbps, found, summary)
