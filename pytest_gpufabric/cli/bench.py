"""`gpufabric bench`: the bandwidth suite's harnesses without a profile, printing nccl-tests' columns."""

from __future__ import annotations

import argparse

from ..errors import GpuFabricError, HardwareUnavailable
from ..fabric.nvml import collect_fabric
from ..report.results import json_text
from .common import EXIT_OK, finite_number, parse_sizes, require_torch, whole_number

BENCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv", "copy")


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="measure collectives or copies without a profile",
                           description="The bandwidth suite's harnesses, printing nccl-tests' columns.")
    bench.add_argument("op", help=f"comma-separated: {', '.join(BENCH_OPS)}")
    bench.add_argument("--backend", choices=["nccl", "gloo"], default="nccl", help="gloo runs on CPUs")
    bench.add_argument("--nprocs", type=whole_number(1, 4096), help="ranks (default: every GPU; 2 with gloo)")
    bench.add_argument("--sizes", default="1M,256M,1G", help="comma-separated, nccl-tests style (1M = 1 MiB)")
    bench.add_argument("--iters", type=whole_number(1, 10**6),
                       default=20, help="timed operations per size (default %(default)s)")
    bench.add_argument("--warmup", type=whole_number(0, 10**6),
                       default=5, help="untimed operations first (default %(default)s)")
    bench.add_argument("--timeout", type=finite_number(0, 7 * 86400, above_low=True),
                       default=600, help="seconds before the run is killed")
    bench.add_argument("--json", action="store_true", help="the full results as JSON")
    bench.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    """Numbers without a profile: the suite's harnesses on this machine (gloo: its CPUs)."""
    from ..workloads.bandwidth import run_collectives, run_copy

    ops = args.op.split(",")
    unknown = sorted(set(ops) - set(BENCH_OPS))
    if unknown:
        raise GpuFabricError(f"unknown operation(s) {unknown}; known: {', '.join(BENCH_OPS)}")
    require_torch("gpufabric bench")
    sizes = parse_sizes(args.sizes)
    results = {}
    collectives = [op for op in ops if op != "copy"]
    if collectives:
        nprocs = args.nprocs or (_gpu_count("use --backend gloo to run on CPUs") if args.backend == "nccl" else 2)
        results["collectives"] = run_collectives(nprocs, collectives, sizes, backend=args.backend, warmup=args.warmup,
                                                 iters=args.iters, timeout_s=args.timeout)
    if "copy" in ops:
        _gpu_count("copies are between host and GPU memory")  # a machine without one is said here, not by a child
        results["copy"] = run_copy(max(sizes), iters=args.iters, timeout_s=args.timeout)
    if args.json:
        print(json_text({k: {key: v for key, v in r.items() if key != "stdout_tail"} for k, r in results.items()}))
    else:
        for result in results.values():
            print(result["stdout_tail"].rstrip())
    return EXIT_OK


def _gpu_count(hint: str) -> int:
    """This machine's GPUs; none (or no driver) is HardwareUnavailable, ending with ``hint``."""
    try:
        count = len(collect_fabric().gpus)
    except HardwareUnavailable as exc:
        raise HardwareUnavailable(f"{exc.why}; {hint}") from None
    if count == 0:
        raise HardwareUnavailable(f"no GPU found; {hint}")
    return count
