"""Burn-in (with --gpu-burn-in DURATION): the GEMM burn on every GPU cross-checked for the duration, the
profile's all_reduce between the chunks and its memory workload once; a verdict per GPU, by serial.

The burn-in runs once per session (chunks in child processes, each logged to reports/gpufabric-burnin.jsonl
as it ends, so a crash loses nothing already measured and a rerun resumes); these tests judge its log.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.burn_in import burn_in_evidence, check_burn_in_collectives, check_burn_in_gpu
from pytest_gpufabric.checks.result import failed, passed, unknown
from pytest_gpufabric.kinds.burn_in import BURN_IN_COLLECTIVES, BURN_IN_GPU, BURN_IN_MEMORY
from pytest_gpufabric.kinds.burn_in import SECTION as BURN_IN_SECTION
from pytest_gpufabric.kinds.memory import SECTION as MEMORY_SECTION
from pytest_gpufabric.parametrize import per_gpu
from pytest_gpufabric.promise import not_checked, promise
from pytest_gpufabric.units import parse_bytes, parse_gbps


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu_index" in metafunc.fixturenames:
        per_gpu(metafunc, "gpu_index")


def _judged_whole(burn_in, name: str, subject: str, gpufabric_check) -> None:
    """The promises of the whole machine: not checked where the log as a whole cannot be judged."""
    unjudged = burn_in_evidence(burn_in)
    if unjudged:
        gpufabric_check(unknown(name, subject, "the burn-in's log", "; ".join(unjudged)))


@promise(BURN_IN_GPU.name)
def test_burn_in_gpu(gpu_profile, gpu_index, fabric, burn_in, gpufabric_check):
    """Judged from the burn-in's log, so a bundle holding only the log is judged too; the log's serial must be
    the machine's where both are known."""
    gpu = fabric.gpu(gpu_index)
    unjudged = burn_in_evidence(burn_in, gpu_index)
    if unjudged:  # a log cut short, torn, out of range or silent on the board: nothing in it is judged
        serial = burn_in.serials.get(gpu_index) or (gpu.serial if gpu is not None else None)
        gpufabric_check(unknown("burn-in-gpu", f"GPU{gpu_index} (serial {serial or 'unknown'})", "the burn-in's log",
                                "; ".join(unjudged)))
    totals = burn_in.gpu_totals().get(gpu_index)
    # the serial the log recorded for this board: the health reads' (NVML), else the GEMM workload's own
    serial = burn_in.serials.get(gpu_index) or (totals or {}).get("serial")
    gpufabric_check(check_burn_in_gpu(gpu_index, serial, totals,
                                      gpu_profile.data.get(BURN_IN_SECTION, {}), gpu_profile.data.get("health", {}),
                                      burn_in.gemm_s, burn_in.workload_errors,
                                      machine_serial=gpu.serial if gpu is not None else None))


@promise(BURN_IN_COLLECTIVES.name)
def test_burn_in_collectives(gpu_profile, burn_in, gpufabric_check):
    _judged_whole(burn_in, "burn-in-collectives", "all_reduce", gpufabric_check)
    largest = max(gpu_profile.all_reduce_busbw_floors(), key=lambda t: parse_bytes(t["size"]))
    gpufabric_check(check_burn_in_collectives(burn_in.records, parse_gbps(largest["min_busbw"])))


@promise(BURN_IN_MEMORY.name)
def test_burn_in_memory(gpu_profile, burn_in, gpufabric_check):
    _judged_whole(burn_in, "burn-in-memory", "memory workload", gpufabric_check)
    runs = [r for r in burn_in.records if r.get("type") == "memory"]
    if not runs:
        not_checked("the burn-in was too short to run the memory workload (it runs once past half the duration)")
    run = runs[-1]
    section = gpu_profile.data[MEMORY_SECTION]
    # logs since the memory chunk names its run: it must be the run the profile promises (older logs do not say)
    other = [f"{key} = {run[key]!r}, the profile promises {want!r}" for key, want in
             (("budget_bytes", gpu_profile.quantity("memory", "budget")), ("input", list(section["input"])))
             if run.get(key) is not None and run[key] != want]
    if other:
        gpufabric_check(unknown("burn-in-memory", "memory workload", section.get("expect", "oom"),
                                "gpufabric-burnin.jsonl: the memory chunk's " + "; ".join(other)))
    expect = section.get("expect", "oom")
    if "error" in run:
        gpufabric_check(failed("burn-in-memory", "memory workload", expect, None, run["error"]))
    problems = []
    oversized = run["oversized"]
    if oversized["outcome"] != expect or not oversized.get("recovered"):
        problems.append(f"oversized batch: {oversized['outcome']}, recovered {oversized.get('recovered')}")
    problems += [f"offload >= {r['threshold_bytes']} B: {r['outcome']}" for r in run["lms"]
                 if r["outcome"] != "completed"]
    result = (failed("burn-in-memory", "memory workload", expect, run, "; ".join(problems)) if problems else
              passed("burn-in-memory", "memory workload", expect, run,
                     f"memory workload during the burn-in: {run['oversized']['outcome']} without offload, recovered; "
                     f"{len(run['lms'])} offload run(s) completed"))
    gpufabric_check(result)
