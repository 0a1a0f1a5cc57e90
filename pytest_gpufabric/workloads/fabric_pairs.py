"""The fabric between nodes, measured as a job uses it: one collective across every node, then every pair of
nodes in rounds, to find the node or the pair that falls short.

One rank per node (or per GPU, each named as a node: ``--node-per-rank``), started by the launcher the site runs
(``srun``, ``torchrun``, ``mpirun``: ranks.py reads their environment); NCCL on GPUs, gloo on CPUs.

1. **All nodes**: all_reduce at each ``--sizes`` over the whole job, busbw as nccl-tests defines it
   (algbw x 2(n-1)/n).
2. **Pairs**: a round-robin schedule (the circle method) gives N-1 rounds of N/2 disjoint pairs for N nodes (N
   rounds, one node resting in each, for odd N): every pair meets exactly once, and within a round every node
   talks to one partner only, so a pair's figure is its own link's, not shared. Each pair exchanges
   ``--pair-size`` bytes both ways at once (nccl-tests' sendrecv: busbw = algbw = bytes / time, per direction),
   ``--iters`` times after ``--warmup``; the median time counts. Cost: N-1 rounds, each as long as one pair's
   exchange: 63 rounds for 64 nodes, 999 for 1,000 (pass ``--max-rounds`` to sample fewer rounds: every node
   still meets that many partners, which names a slow node; a slow pair is then found only if it was sampled).
3. **Confirmation**: a pair below ``--min-fraction-of-median`` of the rounds' median is measured again *alone*
   (every other rank waits), ``--confirm-repeats`` times with ``--confirm-iters`` iterations, beside a few typical
   pairs measured the same way as the yardstick: a crowded round on a busy host can make a healthy pair look slow
   once, and nobody is named on one noisy number (fleet/fabric.py names only what the repeats confirm). Every
   measurement of a pair is kept in its ``measurements``.
4. **NCCL's view**: with NCCL, each rank runs with NCCL_DEBUG=INFO into its own file (NCCL_DEBUG_FILE) and reads
   back which transport its connections used (``NET/IB``, ``NET/Socket``, ``P2P``, ``SHM``), so "fell back to
   TCP" is a finding.

Rank 0 writes the result JSON (``--result``). Standalone: torch and the standard library (and this folder's
ranks.py and handshake.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import reporting_failure
    from ranks import init_distributed
except ImportError:
    from .handshake import reporting_failure
    from .ranks import init_distributed

FORMAT = "gpufabric-fabric/1"
#: NCCL's log of a connection: "Channel 00/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA", "... via P2P/CUMEM/read",
#: "... via SHM/direct/direct", "... via NET/Socket/0"
#: (rank[busid] in hex: "9[101d0]"), the net's name may hold a space: "via NET/AWS Libfabric/3/GDRDMA"
_NCCL_VIA = re.compile(r"NCCL INFO Channel \S+ : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\] (?:\[\w+\] )?"
                       r"via (NET/[^/\n]+|[A-Za-z0-9]+)")
_NCCL_NET = re.compile(r"NCCL INFO NET/(\w+) : Using (.+)$")


def round_robin(count: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs in which every pair of ``count`` nodes meets once (the circle method)."""
    players = list(range(count)) + ([None] if count % 2 else [])
    rounds = []
    for _ in range(len(players) - 1):
        pairs = [(players[i], players[-1 - i]) for i in range(len(players) // 2)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def parse_nccl_transports(text: str) -> dict:
    """What NCCL's INFO log says it used: the transports of its connections (``NET/IB``, ``NET/Socket``, ``P2P``,
    ``SHM``, counted) and the network device line (``NET/IB : Using [0]mlx5_0:1/RoCE``)."""
    transports: dict[str, int] = {}
    for m in _NCCL_VIA.finditer(text):
        transports[m.group(1)] = transports.get(m.group(1), 0) + 1
    nets = sorted({f"NET/{m.group(1)}: {m.group(2).strip()}" for m in _NCCL_NET.finditer(text)})
    return {"transports": transports, "net": nets}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_reduce(size: int, device: torch.device, world: int, warmup: int, iters: int) -> dict:
    tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    _sync(device)
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        _sync(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    slowest = [0.0] * world
    dist.all_gather_object(slowest, seconds)
    seconds = max(slowest)  # the collective is as fast as its slowest rank says
    algbw = size / seconds / 1e9
    return {"op": "all_reduce", "size": size, "time_us": seconds * 1e6, "algbw": algbw,
            "busbw": algbw * 2 * (world - 1) / world}


def _exchange(partner: int, size: int, device: torch.device, warmup: int, iters: int) -> float:
    """Median seconds of sending ``size`` bytes to the partner while receiving as many from it."""
    out = torch.ones(size // 4, dtype=torch.float32, device=device)
    into = torch.empty_like(out)
    times = []
    for i in range(warmup + iters):
        start = time.perf_counter()
        requests = [dist.isend(out, partner), dist.irecv(into, partner)]
        for request in requests:
            request.wait()
        _sync(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def confirmation_plan(pair_seconds: dict[tuple[int, int], float], pair_size: int, fraction: float,
                      baseline_pairs: int = 3) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(suspects, baseline) after the rounds: the pairs whose busbw fell below ``fraction`` of the median (each to
    be measured again alone before anyone is named), and up to ``baseline_pairs`` of the others, those nearest the
    median, measured alone the same way as the yardstick (a pair alone is faster than in a crowded round, so the
    suspects are held against pairs measured alike, not against the rounds' median)."""
    if not pair_seconds:
        return [], []
    busbw = {pair: pair_size / seconds / 1e9 for pair, seconds in pair_seconds.items()}
    median = statistics.median(busbw.values())
    suspects = sorted(pair for pair, value in busbw.items() if value < fraction * median)
    others = sorted((pair for pair in busbw if pair not in suspects), key=lambda pair: abs(busbw[pair] - median))
    return suspects, sorted(others[:baseline_pairs])


def _slower_end(records: list[list[dict]], key_of) -> dict:
    """Both ends of a pair timed the same exchange: per key, the slower end's seconds counts."""
    merged: dict = {}
    for a, mine in enumerate(records):
        for record in mine:
            key = key_of(a, record)
            merged[key] = max(record["seconds"], merged.get(key, 0.0))
    return merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4194304", help="all-node all_reduce sizes in bytes, comma-separated")
    parser.add_argument("--pair-size", type=int, default=4 << 20, help="bytes each pair exchanges each way")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--max-rounds", type=int, default=0, help="0: every round (every pair meets)")
    parser.add_argument("--min-fraction-of-median", type=float, default=0.7,
                        help="a pair below this fraction of the rounds' median is measured again alone")
    parser.add_argument("--confirm-repeats", type=int, default=2,
                        help="how many times each suspect pair is measured again alone (0: never)")
    parser.add_argument("--confirm-iters", type=int, default=0,
                        help="iterations of each measurement alone (default: twice --iters, at least 10)")
    parser.add_argument("--baseline-pairs", type=int, default=3,
                        help="typical pairs measured alone too, as the yardstick for the suspects")
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="gloo")
    parser.add_argument("--node-name", default=os.environ.get("GPUFABRIC_NODE_NAME"),
                        help="this rank's node (default: the host's short name)")
    parser.add_argument("--node-per-rank", action="store_true",
                        help="name each rank a node of its own (<host>-<local rank>): one host's GPUs as nodes")
    parser.add_argument("--nccl-log-dir", type=Path, default=None,
                        help="NCCL: where each rank's NCCL_DEBUG=INFO log goes (default: the result's folder)")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()

    log = None
    if args.backend == "nccl":  # before NCCL starts: it reads its settings when the communicator is made
        log_dir = args.nccl_log_dir or args.result.parent
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"nccl-{socket.gethostname()}-{os.getpid()}.log"
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
        os.environ["NCCL_DEBUG_FILE"] = str(log)
    rank, world, device = init_distributed(args.backend)
    name = args.node_name or socket.gethostname().split(".")[0]
    if args.node_per_rank:
        name = f"{name}-{os.environ.get('LOCAL_RANK', rank)}"
    names: list = [None] * world
    dist.all_gather_object(names, name)
    if len(set(names)) != world:
        raise RuntimeError(f"ranks share node names {names}: start one rank per node (--ntasks-per-node=1), or "
                           "pass --node-per-rank to make each GPU a node")

    all_node = [_all_reduce(int(size), device, world, args.warmup, args.iters) for size in args.sizes.split(",")]

    rounds = round_robin(world)
    if args.max_rounds:
        rounds = rounds[: args.max_rounds]
    mine = []
    for number, pairs in enumerate(rounds):
        dist.barrier()
        partner = next((b if a == rank else a for a, b in pairs if rank in (a, b)), None)
        if partner is not None:
            seconds = _exchange(partner, args.pair_size, device, args.warmup, args.iters)
            mine.append({"round": number, "partner": partner, "seconds": seconds})
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    round_seconds = _slower_end(gathered, lambda a, record: tuple(sorted((a, record["partner"]))))
    round_of = {tuple(sorted((a, record["partner"]))): record["round"] for a, mine_ in enumerate(gathered)
                for record in mine_}

    # confirm before accusing: a pair that looked slow in its crowded round is measured again alone (every other
    # rank waits at the barrier), with more iterations, beside a few typical pairs measured the same way
    plan: list = [confirmation_plan(round_seconds, args.pair_size, args.min_fraction_of_median,
                                    args.baseline_pairs) if rank == 0 else None]
    dist.broadcast_object_list(plan, src=0)
    suspects, baseline = plan[0]
    confirm_iters = args.confirm_iters or max(10, 2 * args.iters)
    alone = []
    for repeat in range(args.confirm_repeats if suspects else 0):
        for a, b in [*suspects, *baseline]:
            dist.barrier()
            if rank in (a, b):
                seconds = _exchange(b if rank == a else a, args.pair_size, device, args.warmup, confirm_iters)
                alone.append({"pair": (a, b), "repeat": repeat, "seconds": seconds})
    gathered_alone: list = [None] * world
    dist.all_gather_object(gathered_alone, alone)
    alone_seconds = _slower_end(gathered_alone, lambda _, record: (tuple(record["pair"]), record["repeat"]))

    nccl = parse_nccl_transports(log.read_text(errors="replace")) if log is not None and log.is_file() else None
    views: list = [None] * world
    dist.all_gather_object(views, nccl)

    if rank == 0:
        def measured(seconds: float, **where) -> dict:  # GB/s each way, as sendrecv_perf counts
            return {**where, "time_us": seconds * 1e6, "busbw": args.pair_size / seconds / 1e9}

        rows = []
        for key, seconds in sorted(round_seconds.items()):
            row = {"a": names[key[0]], "b": names[key[1]], **measured(seconds, round=round_of[key])}
            row["measurements"] = [measured(seconds, phase="round", round=round_of[key], iters=args.iters)] + [
                measured(alone_seconds[(key, repeat)], phase="alone", repeat=repeat, iters=confirm_iters)
                for repeat in range(args.confirm_repeats) if (key, repeat) in alone_seconds]
            rows.append(row)
        confirmation = {"min_fraction_of_median": args.min_fraction_of_median, "repeats": args.confirm_repeats,
                        "iters": confirm_iters, "suspects": [[names[a], names[b]] for a, b in suspects],
                        "baseline": [[names[a], names[b]] for a, b in baseline]}
        args.result.write_text(json.dumps({
            "format": FORMAT, "backend": args.backend, "world_size": world, "nodes": names,
            "pair_size": args.pair_size, "warmup": args.warmup, "iters": args.iters,
            "rounds": len(rounds), "rounds_for_every_pair": len(round_robin(world)),
            "all_node": all_node, "pairs": rows, "confirmation": confirmation,
            "nccl": {names[r]: view for r, view in enumerate(views) if view is not None},
            "torch_version": torch.__version__,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if args.backend == "nccl" else None,
            "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "GLOO_"))},
        }, indent=2))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
