"""How close does the bandwidth suite's harness come to nccl-tests on the same machine?

Runs the harness's all_reduce (torch.distributed over NCCL, one rank per GPU, CUDA events, median) at the
reference sizes, twice, and the GPU0->GPU1 copy, and compares with nccl-tests' all_reduce_perf: run here when the
binary is on PATH (or --nccl-tests), else the reference output recorded on the same machine kind
(--reference, default: the 2x H200 capture in tests/data/captures/h200-nvswitch-x2/). Goals (bandwidth issue):
busbw >= 0.98x nccl-tests at 256 MiB, 1 GiB and 4 GiB; time within 1.5x of nccl-tests' at 1 MiB;
GPU0->GPU1 copy >= 390 GB/s.

    python benchmarks/nccl_compare.py [--gpus 2] [--runs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests
from pytest_gpufabric.units import GIB, MIB
from pytest_gpufabric.workloads.bandwidth import run_collectives, run_copy
from pytest_gpufabric.workloads.nccl_tests import run_nccl_tests

REFERENCE = (Path(__file__).resolve().parent.parent / "tests" / "data" / "captures" / "h200-nvswitch-x2"
             / "nccl-tests-2.19.6-all_reduce_perf-and-sendrecv.txt")
SIZES = [1 * MIB, 256 * MIB, 1 * GIB, 4 * GIB]


def reference_rows(runs: list[dict]) -> dict[int, dict]:
    """Per size, nccl-tests' out-of-place busbw and time, averaged over its all_reduce runs."""
    by_size: dict[int, list[dict]] = {}
    for run in runs:
        if run["op"] == "all_reduce":
            for row in run["rows"]:
                by_size.setdefault(row["size"], []).append(row["oop"])
    return {size: {"busbw": statistics.fmean(r["busbw"] for r in rows),
                   "time_us": statistics.fmean(r["time_us"] for r in rows), "runs": len(rows)}
            for size, rows in by_size.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--nccl-tests", help="all_reduce_perf binary (default: on PATH)")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()

    binary = args.nccl_tests or shutil.which("all_reduce_perf")
    if binary:
        reference = reference_rows(run_nccl_tests(binary, args.gpus, SIZES[:1] + SIZES[-1:], iters=20, warmup=5,
                                                  timeout_s=600)["runs"])
        reference_source = f"nccl-tests run here ({binary})"
    else:
        reference = reference_rows(parse_nccl_tests(args.reference.read_text()))
        reference_source = f"recorded nccl-tests output ({args.reference.name})"
    harness_runs = [run_collectives(args.gpus, ["all_reduce"], SIZES, iters=20, warmup=5, timeout_s=600)
                    for _ in range(args.runs)]
    copy = run_copy(GIB, iters=20)
    copy_gbps = next(r["gbps"] for r in copy["gpu_to_gpu"] if (r["src"], r["dst"]) == (0, 1))

    print(f"reference: {reference_source}\n")
    print("| size | nccl-tests busbw | harness busbw, per run | ratio (mean) | nccl-tests time | harness time, per run"
          " | time ratio (mean) |\n| --- | --- | --- | --- | --- | --- | --- |")
    rows, ok = [], True
    for size in SIZES:
        ref = reference[size]
        ours = [next(r for r in run["ops"]["all_reduce"] if r["size"] == size) for run in harness_runs]
        busbw_ratio = statistics.fmean(r["busbw"] for r in ours) / ref["busbw"]
        time_ratio = statistics.fmean(r["time_us"] for r in ours) / ref["time_us"]
        goal = time_ratio <= 1.5 if size == MIB else busbw_ratio >= 0.98
        ok &= goal
        rows.append({"size": size, "reference": ref, "harness": ours, "busbw_ratio": busbw_ratio,
                     "time_ratio": time_ratio, "goal_met": goal})
        busbw_runs = ", ".join(f"{r['busbw']:.1f}" for r in ours)
        time_runs = ", ".join(f"{r['time_us']:.1f}" for r in ours)
        print(f"| {size} | {ref['busbw']:.1f} | {busbw_runs} | {busbw_ratio:.3f} | {ref['time_us']:.1f} us "
              f"| {time_runs} us | {time_ratio:.2f} |")
    copy_ok = copy_gbps >= 390
    print(f"\nGPU0->GPU1 copy of 1 GiB: {copy_gbps:.1f} GB/s (goal >= 390)")
    print(f"goals: 256 MiB-4 GiB busbw >= 0.98x, 1 MiB time <= 1.5x, copy >= 390 GB/s: "
          f"{'met' if ok and copy_ok else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"reference_source": reference_source, "rows": rows,
                                               "copy_gpu0_to_gpu1_gbps": copy_gbps, "copy": copy}, indent=2,
                                              default=str))
    return 0 if ok and copy_ok else 1


if __name__ == "__main__":
    sys.exit(main())
