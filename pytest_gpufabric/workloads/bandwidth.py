"""The bandwidth measurements the bandwidth suite and `gpufabric bench` run: collectives through
torch.distributed (one rank per GPU, started together as torchrun would start them: runner.run_ranks), copies (one
process), and nccl-tests' all_reduce_perf when present. Each runs in child process groups that its timeout kills
whole."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import GpuFabricError, ToolMissing
from ..formats.recordings import BandwidthMeasurement
from ..units import GIB, MIB, parse_bytes
from .environment import gpu_environment, require_torch, workload_environment
from .nccl_tests import find_perf_binary, run_nccl_tests
from .runner import NO_SPARE, TORCH_ONLY, run_ranks, run_workload

COLLECTIVES_SCRIPT = Path(__file__).with_name("collectives.py")
COPY_SCRIPT = Path(__file__).with_name("copy_bw.py")


def collectives_script(ops: list[str], sizes: list[int], *, backend: str, warmup: int, iters: int,
                       repeats: int = 1) -> list[str]:
    """One rank's command line: every op at every size, in one job (one NCCL communicator for all of them)."""
    command = [sys.executable, str(COLLECTIVES_SCRIPT), "--ops", ",".join(ops), "--sizes", ",".join(map(str, sizes)),
               "--backend", backend, "--warmup", str(warmup), "--iters", str(iters)]
    return command + (["--repeats", str(repeats)] if repeats != 1 else [])


def collectives_command(nprocs: int, ops: list[str], sizes: list[int], *, backend: str, warmup: int,
                        iters: int) -> list[str]:
    """The same job under torchrun on this node, as a user would start it by hand; several nodes are started by
    the user's launcher (torchrun, srun, mpirun: docs/suites.md)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}"]
    return [*launcher, *collectives_script(ops, sizes, backend=backend, warmup=warmup, iters=iters)[1:]]


def run_collectives(nprocs: int, ops: list[str], sizes: list[int], *, backend: str = "nccl", warmup: int = 5,
                    iters: int = 20, timeout_s: float = 300.0, env: dict[str, str] | None = None,
                    repeats: int = 1) -> dict:
    """``env``: the workload's environment (environment.gpu_environment: which boards it runs on). ``repeats``:
    the whole sweep that many times in the one job (profile init --measure's spread), under ``repeats``."""
    command = collectives_script(ops, sizes, backend=backend, warmup=warmup, iters=iters, repeats=repeats)
    return run_ranks(command, nprocs, timeout_s=timeout_s, env=env or workload_environment())


def copies_need_torch(gpus: int | None) -> bool:
    """Whether copy_bw.py imports torch: for GPU pairs only (its host copies go through the CUDA driver); ``gpus``
    None: not known, so it may."""
    return gpus != 1


def run_copy(size: int, *, iters: int = 20, warmup: int = 3, cpu_affinity: dict[int, str] | None = None,
             timeout_s: float = 300.0, env: dict[str, str] | None = None, repeats: int = 1,
             gpus: int | None = None) -> dict:
    """``cpu_affinity``: by CUDA index (the order ``env`` shows the boards in); ``repeats``: everything that many
    times in the one process, under ``repeats``; ``gpus``: how many GPUs ``env`` shows, where known. On one GPU
    there is no pair to copy between, and the host copies need no torch (copy_bw.py): the workload starts at once
    rather than waiting for a spare interpreter's torch import."""
    command = [sys.executable, str(COPY_SCRIPT), "--size", str(size), "--iters", str(iters), "--warmup", str(warmup)]
    command += ["--repeats", str(repeats)] if repeats != 1 else []
    for gpu, cpus in sorted((cpu_affinity or {}).items()):
        command += ["--cpu-affinity", f"{gpu}={cpus}"]
    needs = TORCH_ONLY if copies_need_torch(gpus) else NO_SPARE
    return run_workload(command, timeout_s=timeout_s, env=env or workload_environment(), spare_imports=needs)


def sweep_sizes(threshold_sizes: list[int], extra: list[int] | None = None) -> list[int]:
    """The thresholds' sizes, the profile's extra sizes, and 1 MiB x 4^k up to the largest: enough points for
    a busbw-vs-size curve without measuring every power of two."""
    sizes = set(threshold_sizes) | set(extra or [])
    top = max(sizes, default=GIB)
    size = MIB
    while size <= top:
        sizes.add(size)
        size *= 4
    return sorted(sizes)


def measure_bandwidth(profile, fabric, boards: list[dict]) -> BandwidthMeasurement:
    """Everything the profile's `bandwidth` section promises, on the boards it promises (environment.
    promised_boards, in CUDA's order). A part that fails is kept as an error for its own tests; the other parts
    are still measured."""
    section = profile.bandwidth
    warmup, iters, timeout_s = section.get("warmup", 5), section.get("iters", 20), section.get("timeout_s", 300)
    measurement = BandwidthMeasurement()
    env = gpu_environment(boards)
    thresholds = profile.collective_thresholds()
    if thresholds:
        ops = list(dict.fromkeys(op for op, _ in thresholds))
        sizes = sweep_sizes([parse_bytes(t["size"]) for _, t in thresholds],
                            [parse_bytes(s) for s in section.get("sweep", [])])
        try:
            require_torch("torch.distributed's collectives")
            measurement.collectives = run_collectives(profile.gpu_count, ops, sizes, warmup=warmup, iters=iters,
                                                      timeout_s=timeout_s, env=env)
        except ToolMissing as exc:
            measurement.tools_missing["collectives"] = str(exc)
        except GpuFabricError as exc:
            measurement.errors["collectives"] = str(exc)
        configured = section.get("nccl_tests", {}).get("binary")
        for op in ops:
            op_sizes = [parse_bytes(t["size"]) for o, t in thresholds if o == op]
            try:
                binary, looked = find_perf_binary(op, configured)
            except ValueError as exc:  # a configured all_reduce_perf that is not there: no op is measured
                measurement.errors["nccl_tests"] = str(exc)
                break
            if binary is None:
                measurement.nccl_tests_missing[op] = f"no {op}_perf {looked}"
                continue
            try:
                measurement.nccl_tests += run_nccl_tests(binary, profile.gpu_count, op_sizes, iters=iters,
                                                         warmup=warmup, timeout_s=timeout_s, env=env)["runs"]
            except GpuFabricError as exc:
                measurement.errors[f"nccl_tests:{op}"] = str(exc)
    if profile.copy_thresholds():
        # by CUDA index: the copy workload numbers the boards in the order env shows them
        cpus = {gpu.index: gpu.cpu_affinity for gpu in fabric.gpus if isinstance(gpu.cpu_affinity, str)}
        affinity = {cuda: cpus[b["index"]] for cuda, b in enumerate(boards) if b["index"] in cpus}
        size = parse_bytes(section.get("copy", {}).get("size", "1 GiB"))
        try:
            if copies_need_torch(len(boards)):
                require_torch("the copy measurements")
            measurement.copy = run_copy(size, iters=iters, warmup=3, cpu_affinity=affinity, timeout_s=timeout_s,
                                        env=env, gpus=len(boards))
        except ToolMissing as exc:
            measurement.tools_missing["copy"] = str(exc)
        except GpuFabricError as exc:
            measurement.errors["copy"] = str(exc)
    return measurement

