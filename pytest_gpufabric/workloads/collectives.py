"""Collective bandwidth through torch.distributed, measured and reported the way nccl-tests does it.

Standalone (imports torch and the standard library only). One process per rank, started by any launcher that
sets the standard torch environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT): torchrun on one or
several nodes, or Slurm's srun / Open MPI's mpirun, whose rank variables are mapped when RANK is not set:

    python -m torch.distributed.run --standalone --nproc-per-node 2 collectives.py \
        --ops all_reduce,all_gather --sizes 1048576,268435456 --result out.json

Sizes are bytes as nccl-tests counts them (doc/PERFORMANCE.md): the all_reduce/broadcast/sendrecv buffer, the
all_gather output and the reduce_scatter input. algbw = size / time; busbw = algbw x the op's factor:
all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast and sendrecv 1. Times, after warm-up: on GPUs,
CUDA events around replays of a CUDA graph holding ``iters`` back-to-back ops (per op: the replay's time /
iters; the median of 5 replays), or with --timing events around each op; on CPUs the wall clock of each op,
the median. Each rank's median is averaged over ranks, as nccl-tests does.
Each op and size is then run once more on known data and checked: ``wrong`` counts wrong elements.
Rank 0 prints a table with nccl-tests' columns and writes the JSON result. ``--repeats N`` runs the whole sweep N
times in the one job (profile init --measure's spread, without N start-ups): ``ops`` holds the first, ``repeats``
all N.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

try:  # run as a script (torchrun): its folder is on sys.path; imported as a module (tests): relative
    from handshake import handshake, reporting_failure
    from ranks import init_distributed, rank_boards
except ImportError:
    from .handshake import handshake, reporting_failure
    from .ranks import init_distributed, rank_boards

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw, from nccl-tests' doc/PERFORMANCE.md."""
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0, "sendrecv": 1.0}[op]


class Timer:
    """CUDA events on the current stream (the collectives' completion is ordered on it), or the wall clock."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.pairs: list = []

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pairs.append((started, end))
        else:
            self.pairs.append((started, time.perf_counter()))

    def seconds(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in self.pairs]
        return [b - a for a, b in self.pairs]


class Collective:
    """Buffers and the call for one op at one size: ``run()`` times it, ``check()`` verifies it."""

    def __init__(self, op: str, size_bytes: int, rank: int, world: int, device: torch.device):
        self.op, self.rank, self.world, self.device = op, rank, world, device
        count = size_bytes // 4
        if op in ("all_gather", "reduce_scatter"):
            count = (count // world) * world  # as nccl-tests: a whole number of elements per rank
        self.count = count
        self.size = count * 4
        chunk = count // world
        zeros = lambda n: torch.zeros(n, dtype=torch.float32, device=device)  # noqa: E731
        self.input = zeros(chunk if op == "all_gather" else count)
        self.output = zeros(chunk if op == "reduce_scatter" else count)

    def run(self) -> None:
        op, rank, world = self.op, self.rank, self.world
        if op == "all_reduce":
            dist.all_reduce(self.output)
        elif op == "all_gather":
            dist.all_gather_into_tensor(self.output, self.input)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.output, self.input)
        elif op == "broadcast":
            dist.broadcast(self.output, src=0)
        else:  # sendrecv: to the next rank, from the previous one, as nccl-tests' sendrecv_perf
            ops = [dist.P2POp(dist.isend, self.input, (rank + 1) % world),
                   dist.P2POp(dist.irecv, self.output, (rank - 1) % world)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

    def check(self) -> int:
        """Run once on known data; the number of wrong elements in this rank's result."""
        n, rank = self.world, self.rank
        if self.op == "all_reduce":
            self.output.fill_(rank + 1)
            expected = torch.full_like(self.output, n * (n + 1) / 2)
        elif self.op == "all_gather":
            self.input.fill_(rank + 1)
            expected = torch.arange(1, n + 1, dtype=torch.float32, device=self.device).repeat_interleave(
                self.count // n)
        elif self.op == "reduce_scatter":
            self.input.fill_(rank + 1)
            expected = torch.full_like(self.output, n * (n + 1) / 2)
        elif self.op == "broadcast":
            self.output.fill_(7.0 if rank == 0 else 0.0)
            expected = torch.full_like(self.output, 7.0)
        else:
            self.input.fill_(rank + 1)
            expected = torch.full_like(self.output, (rank - 1) % n + 1)
        self.run()
        return int((self.output != expected).sum())

    def prepare_timing(self) -> None:
        # small values, so that repeated in-place sums stay finite over the iterations
        self.input.fill_(1.0 / self.world)
        self.output.fill_(1.0 / self.world)


def per_iteration_seconds(collective: Collective, iters: int, device: torch.device) -> list[float]:
    """Events (or the wall clock) around each iteration. On GPUs this includes the host's launch time of each
    op, which exceeds the op itself for small messages: see graph_seconds."""
    timer = Timer(device)
    for _ in range(iters):
        started = timer.start()
        collective.run()
        timer.stop(started)
    return timer.seconds()


def graph_seconds(collective: Collective, iters: int, replays: int) -> list[float]:
    """Per-op time of ``iters`` back-to-back ops captured in one CUDA graph, for each of ``replays`` replays.

    nccl-tests launches its iterations back to back and divides the total; NCCL's own launch is cheap enough
    that the GPU never waits. torch.distributed spends tens of microseconds of host time per op, so at 1 MiB
    a per-op timing measures the host. Replaying a captured graph takes the host out, as nccl-tests does."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        collective.run()  # NCCL sets up its communicator paths outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            collective.run()
    graph.replay()  # one replay to warm the graph up
    seconds = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3 / iters)
    return seconds


def measure(op: str, size: int, warmup: int, iters: int, rank: int, world: int, device: torch.device,
            timing: str = "graph") -> dict:
    collective = Collective(op, size, rank, world, device)
    collective.prepare_timing()
    for _ in range(warmup):
        collective.run()
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    method = timing if device.type == "cuda" else "wall-clock"
    if method == "graph":
        try:
            seconds = graph_seconds(collective, iters, replays=5)
        except RuntimeError as exc:  # an op or build that cannot be captured: say so, time per iteration
            method = f"events (graph capture failed: {str(exc).splitlines()[0][:120]})"
            torch.cuda.synchronize()
            dist.barrier()
            seconds = per_iteration_seconds(collective, iters, device)
    else:
        seconds = per_iteration_seconds(collective, iters, device)
    median_s = statistics.median(seconds)
    methods: list = [None] * world
    dist.all_gather_object(methods, method)
    wrong = collective.check()
    medians: list = [None] * world
    wrongs: list = [None] * world
    dist.all_gather_object(medians, median_s)
    dist.all_gather_object(wrongs, wrong)
    time_s = statistics.fmean(medians)
    algbw = collective.size / time_s / 1e9
    return {
        "size": collective.size, "count": collective.count, "type": "float",
        # as nccl-tests prints them: sendrecv_perf shows the reduction op it was built with (sum)
        "redop": "sum" if op in ("all_reduce", "reduce_scatter", "sendrecv") else "none",
        "root": 0 if op == "broadcast" else -1,
        "time_us": time_s * 1e6, "time_us_slowest_rank": max(medians) * 1e6,
        "algbw": algbw, "busbw": algbw * bus_factor(op, world), "wrong": sum(wrongs),
        "timing": methods[0] if len(set(methods)) == 1 else methods,
    }


def table(op: str, rows: list[dict], world: int) -> str:
    """nccl-tests' columns (one set: torch's all_reduce and broadcast are in place, the others out of place)."""
    lines = [f"# Collective test starting: {op}_perf (torch.distributed, {world} ranks)",
             "#       size         count      type   redop    root     time   algbw   busbw  #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"]
    for r in rows:
        lines.append(f"{r['size']:>12d}  {r['count']:>12d}  {r['type']:>8}  {r['redop']:>6}  {r['root']:>6d}  "
                     f"{r['time_us']:>7.2f}  {r['algbw']:>6.2f}  {r['busbw']:>6.2f}  {r['wrong']:>6d}")
    return "\n".join(lines)


def _size(text: str) -> int:
    """'1G' -> 1073741824, as nccl-tests' -b/-e read sizes; a bare number is bytes."""
    multiplier = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if multiplier > 1 else text) * multiplier


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="all_reduce", help=f"comma-separated: {', '.join(OPS)}")
    parser.add_argument("--sizes", default="1M,256M", help="comma-separated sizes: bytes, or with K/M/G (binary)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--timing", choices=["graph", "events"], default="graph",
                        help="GPUs: per-op time from CUDA-graph replays of back-to-back ops (as nccl-tests launches "
                             "them), or CUDA events around each op (includes torch's launch time)")
    parser.add_argument("--repeats", type=int, default=1, help="the whole sweep this many times")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats of at least 1")
    ops = [op for op in args.ops.split(",") if op]
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        parser.error(f"unknown op(s) {unknown}; known: {', '.join(OPS)}")
    sizes = [_size(s) for s in args.sizes.split(",") if s]

    rank, world, device = init_distributed(args.backend)
    boards = rank_boards(device)  # before anything is measured: each number is filed under its board
    handshake(dist.barrier, rank, args.handshake, "ready", "go")  # a sampler may bracket the measurements
    repeats = [{op: [measure(op, size, args.warmup, args.iters, rank, world, device, args.timing) for size in sizes]
                for op in ops} for _ in range(args.repeats)]
    results = repeats[0]
    handshake(dist.barrier, rank, args.handshake, "done", "release")
    hosts: list = [None] * world
    dist.all_gather_object(hosts, os.uname().nodename)
    if rank == 0:
        for op, rows in results.items():
            print(table(op, rows, world), flush=True)
        args.result.write_text(json.dumps({
            "harness": "collectives", "backend": args.backend, "world_size": world, "nodes": sorted(set(hosts)),
            "warmup": args.warmup, "iters": args.iters, "dtype": "float32", "ops": results,
            "timing": args.timing if args.backend == "nccl" else "wall-clock",
            "torch_version": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None,
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if device.type == "cuda" else ["cpu"],
            "ranks": [{"rank": r, "host": hosts[r], "board": boards[r]} for r in range(world)],
            "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
            **({"repeats": repeats} if args.repeats > 1 else {}),
        }, indent=2))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    # the result is written and every rank has left the process group: exit without the interpreter's teardown,
    # where gloo's threads once ended a finished run with "terminate called without an active exception" (-6)
    code = reporting_failure(main)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
