"""Data-parallel training steps with a known gradient size: the traffic NVLink must carry.

Standalone (imports torch and the standard library only); one process per GPU, started by torch's launcher:

    python -m torch.distributed.run --standalone --nproc-per-node N ddp_step.py --steps 10 ... \
        --handshake DIR --result FILE

The model is ``layers`` x Linear(width, width) on synthetic data (nothing downloaded). DistributedDataParallel
all-reduces every gradient once a step, so each rank sends (and receives) 2(n-1)/n x gradient bytes a step
with ring all-reduce: the volume the NVLink counters are judged against. Rank 0 writes the JSON result.
With --backend gloo it runs on CPUs (CI); with nccl, one GPU per rank (LOCAL_RANK).
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()

    rank, world, device = init_distributed(args.backend)
    boards = rank_boards(device)  # before anything is measured: the NVLink counters are read by board

    torch.manual_seed(0)
    layers = []
    with device:  # the weights made and initialised where they train, not on one CPU thread and copied over
        for _ in range(args.layers):
            layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    generator = torch.Generator(device=device).manual_seed(1 + rank)
    inputs = torch.randn(args.batch, args.width, device=device, generator=generator)
    targets = torch.randn(args.batch, args.width, device=device, generator=generator)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    synchronize()
    handshake(dist.barrier, rank, args.handshake, "ready", "go")
    step_times, losses = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        synchronize()
        step_times.append(time.perf_counter() - start)
        losses.append(float(loss))
    handshake(dist.barrier, rank, args.handshake, "done", "release")

    if rank == 0:
        result = {
            "workload": "ddp_step",
            "backend": args.backend,
            "world_size": world,
            "steps": args.steps,
            "warmup": args.warmup,
            "model": {"layers": args.layers, "width": args.width, "batch": args.batch, "dtype": "float32"},
            "gradient_bytes": gradient_bytes,
            # ring all-reduce: each rank sends and receives 2(n-1)/n of the buffer, every step
            "allreduce_bytes_per_rank": 2 * (world - 1) / world * gradient_bytes * args.steps,
            "step_time_s": {"median": statistics.median(step_times), "mean": statistics.fmean(step_times),
                            "all": step_times},
            "losses": losses,
            "torch_version": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None,
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if device.type == "cuda" else ["cpu"],
            "ranks": [{"rank": r, "board": boards[r]} for r in range(world)],
            "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
        }
        args.result.write_text(json.dumps(result, indent=2))
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
