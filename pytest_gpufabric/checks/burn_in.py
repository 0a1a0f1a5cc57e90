"""Burn-in verdicts: per GPU (by serial), its GEMM results against the cross-checks, its health during the
burn-in, its rate; and the collectives that ran between the chunks."""

from __future__ import annotations

from .health import counter_problems, forbidden_counters, peak_problems
from .result import CheckResult, failed, passed, unknown


def check_burn_in_gpu(index: int, serial: str | None, totals: dict | None, section: dict, health_section: dict,
                      duration_s: float, workload_errors: list[str] = (),
                      machine_serial: str | None = None) -> CheckResult:
    """``serial``: the GPU's serial as the burn-in log recorded it; ``machine_serial``: as the machine (or the
    bundle's inventory) reports it, when known. ``workload_errors``: GEMM workloads that failed during the
    burn-in (a resumed one's included); they name no GPU (one process drives them all), so each GPU's verdict
    carries them."""
    who = f"GPU{index} (serial {serial or machine_serial or 'unknown'})"
    if serial and machine_serial and serial != machine_serial:
        return failed("burn-in-gpu", who, {"serial": machine_serial}, {"serial": serial},
                      f"GPU{index}: the burn-in log was recorded on serial {serial}, but this machine's GPU{index} "
                      f"is serial {machine_serial}: the log is another GPU's (a copied reports/ folder, a GPU "
                      "swapped since, or a bundle put together from two machines)")
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
