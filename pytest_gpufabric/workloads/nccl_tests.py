"""nccl-tests run on this machine: where its binaries are, the command line, the run and its parsed output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import WorkloadError
from ..formats.nccl_tests import parse_nccl_tests
from .environment import workload_environment


def find_all_reduce_perf(configured: str | None) -> str | None:
    """Where nccl-tests' all_reduce_perf is: the configured path, else the one on PATH, else None.

    A configured path that is wrong is an error (ValueError naming it), not a fallback to PATH: the user asked
    for that binary, and measuring another build would judge the machine with the wrong tool.
    A configured bare name (no directory part) is looked up on PATH.
    """
    if configured:
        path = Path(configured).expanduser()
        if os.sep not in configured and "/" not in configured and not path.exists():
            found = shutil.which(configured)
            if found is None:
                raise ValueError(f"all_reduce_perf binary {configured!r} is not on PATH")
            return found
        if not path.is_file():
            raise ValueError(f"all_reduce_perf binary {configured!r} does not exist")
        if not os.access(path, os.X_OK):
            raise ValueError(f"all_reduce_perf binary {configured!r} is not executable")
        return str(path)
    return shutil.which("all_reduce_perf")


def find_perf_binary(op: str, configured: str | None) -> tuple[str | None, str]:
    """(where ``<op>_perf`` is, where it was looked for): all_reduce_perf as :func:`find_all_reduce_perf` finds
    it; another op's binary beside it (nccl-tests builds them all into one folder), else on PATH.

    Raises ValueError for a configured all_reduce_perf that is not there (see find_all_reduce_perf)."""
    all_reduce = find_all_reduce_perf(configured)
    if op == "all_reduce":
        return all_reduce, f"configured as {configured}" if configured else "on PATH"
    name = f"{op}_perf"
    looked = []
    if all_reduce is not None:
        beside = Path(all_reduce).with_name(name)
        looked.append(f"beside {all_reduce}")
        if beside.is_file() and os.access(beside, os.X_OK):
            return str(beside), looked[-1]
    looked.append("on PATH")
    return shutil.which(name), " or ".join(looked)


def nccl_tests_command(binary: str, ngpus: int, min_bytes: int, max_bytes: int, factor: int = 2,
                       iters: int = 20, warmup: int = 5) -> list[str]:
    """The argv for one single-process nccl-tests sweep over `ngpus` GPUs.

    Flags as nccl-tests' getopt table defines them: -b minbytes, -e maxbytes, -f stepfactor (multiply the size
    each step), -g GPUs per thread (one process driving all GPUs, so no MPI is needed), -n timed iterations,
    -w warm-up iterations. Data checking (-c) stays at its default, on, so #wrong is a real count.
    """
    for name, value, least in (("ngpus", ngpus, 1), ("min_bytes", min_bytes, 1), ("factor", factor, 2),
                               ("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < min_bytes:
        raise ValueError(f"max_bytes must be an integer >= min_bytes ({min_bytes}), got {max_bytes!r}")
    return [str(binary), "-b", str(min_bytes), "-e", str(max_bytes), "-f", str(factor), "-g", str(ngpus),
            "-n", str(iters), "-w", str(warmup)]


def run_nccl_tests(binary: str, ngpus: int, sizes: list[int], *, iters: int, warmup: int, timeout_s: float,
                   env: dict[str, str] | None = None) -> dict:
    """One nccl-tests binary over the sizes (factor 2 from the smallest), parsed (its op from its own name where
    the output does not say it); its text output kept for bundles."""
    command = nccl_tests_command(binary, ngpus, min(sizes), max(sizes), factor=2, iters=iters, warmup=warmup)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, start_new_session=True,
                              env=env or workload_environment())
    except subprocess.TimeoutExpired as exc:
        raise WorkloadError(command, None, str(exc.stdout or ""), str(exc.stderr or ""),
                            f"timed out after {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise WorkloadError(command, done.returncode, done.stdout, done.stderr, f"{Path(binary).name} failed")
    try:
        runs = parse_nccl_tests(done.stdout, Path(binary).name)
    except ValueError as exc:
        raise WorkloadError(command, done.returncode, done.stdout, done.stderr, f"unreadable output: {exc}") from None
    return {"command": command, "runs": runs, "output": done.stdout}
