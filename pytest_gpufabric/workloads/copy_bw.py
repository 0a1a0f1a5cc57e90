"""Copy bandwidth: every GPU pair (one way and both ways at once) and pinned host <-> device per GPU.

Standalone (the standard library, and torch where there are GPU pairs); one process sees every GPU:

    python copy_bw.py --size 1073741824 --iters 20 --cpu-affinity 0=0-31 --cpu-affinity 1=0-31 --result out.json

GPU to GPU goes peer to peer where the driver allows it (``can_device_access_peer``; the copy then takes the
NVLink or PCIe peer path) and through a pinned host buffer where it does not ("via_host"); the result says
which. Host <-> device runs with the process bound to the GPU's CPU affinity, so the pinned buffer and the copy
thread sit on the GPU's own socket; those copies go through the CUDA driver API (cuda_driver.py: registered host
memory, cuMemcpyAsync on one stream, as nvbandwidth's copy-engine tests), so that a one-GPU machine's copies start
without torch's import. Times: CUDA events around each copy after warm-up, the median.
GB/s = 1e9 bytes/s; a bidirectional figure counts the bytes of both directions. ``--repeats N`` measures it all N
times in the one process (profile init --measure's spread, without N start-ups): the first at the top level,
all N under ``repeats``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from cuda_driver import CudaDriver, DriverError
    from handshake import reporting_failure
    from identity import ORDER, driver_boards
except ImportError:
    from .cuda_driver import CudaDriver, DriverError
    from .handshake import reporting_failure
    from .identity import ORDER, driver_boards


def _torch():
    """torch, for the GPU pairs only (imported where there are any)."""
    import torch

    return torch


def _cpu_list(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _median_seconds(copy, iters: int, warmup: int, stream, peers: tuple = ()) -> float:
    """Median over iterations of a copy issued on ``stream`` (and on ``peers``, streams of other devices),
    timed by events on ``stream``: the peers start after the start mark and the end mark waits for them."""
    torch = _torch()
    for _ in range(warmup):
        copy()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for peer in peers:
            peer.wait_event(start)
        copy()
        for peer in peers:
            stream.wait_stream(peer)
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def gpu_to_gpu(src: int, dst: int, size: int, iters: int, warmup: int) -> dict:
    torch = _torch()
    peer = torch.cuda.can_device_access_peer(src, dst)
    a = torch.empty(size, dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{dst}")
    a.fill_(src + 1)
    with torch.cuda.device(src):
        stream = torch.cuda.current_stream()
        if peer:
            seconds = _median_seconds(lambda: b.copy_(a, non_blocking=True), iters, warmup, stream)
            path = "p2p"
        else:
            staging = torch.empty(size, dtype=torch.uint8, pin_memory=True)

            def via_host():
                staging.copy_(a, non_blocking=True)
                b.copy_(staging, non_blocking=True)

            seconds = _median_seconds(via_host, iters, warmup, stream)
            path = "via_host"
    torch.cuda.synchronize()
    correct = bool(torch.equal(b[:4096].cpu(), torch.full((4096,), src + 1, dtype=torch.uint8)))
    return {"src": src, "dst": dst, "path": path, "peer_access": peer, "bytes": size,
            "time_us": seconds * 1e6, "gbps": size / seconds / 1e9, "correct": correct}


def gpu_to_gpu_bidirectional(a_index: int, b_index: int, size: int, iters: int, warmup: int) -> dict:
    """Both directions at once, each on its source GPU's own stream; the time is the later of the two."""
    torch = _torch()
    a = torch.empty(size, dtype=torch.uint8, device=f"cuda:{a_index}")
    b = torch.empty(size, dtype=torch.uint8, device=f"cuda:{b_index}")
    a_in = torch.empty_like(a)
    b_in = torch.empty_like(b)
    stream_a = torch.cuda.Stream(device=a_index)
    stream_b = torch.cuda.Stream(device=b_index)

    def both():
        with torch.cuda.stream(stream_a):
            b_in.copy_(a, non_blocking=True)
        with torch.cuda.stream(stream_b):
            a_in.copy_(b, non_blocking=True)

    seconds = _median_seconds(both, iters, warmup, stream_a, peers=(stream_b,))
    return {"gpus": [a_index, b_index], "peer_access": torch.cuda.can_device_access_peer(a_index, b_index),
            "bytes": 2 * size, "time_us": seconds * 1e6, "gbps": 2 * size / seconds / 1e9}


def _median_driver_seconds(driver: CudaDriver, copy, iters: int, warmup: int, stream: int) -> float:
    """Median over iterations of a copy issued on ``stream``, timed by driver events around it."""
    for _ in range(warmup):
        copy()
    driver.synchronize(stream)
    start, end = driver.event(), driver.event()
    times = []
    for _ in range(iters):
        driver.record(start, stream)
        copy()
        driver.record(end, stream)
        times.append(driver.elapsed_s(start, end))
    return statistics.median(times)


def host_device(driver: CudaDriver, gpu: int, size: int, iters: int, warmup: int, cpus: set[int] | None,
                everywhere: set[int]) -> dict:
    """Pinned host memory to CUDA device ``gpu`` and back, the process bound to ``cpus`` before the host memory
    is faulted in (so it sits on their NUMA node); without ``cpus``, on the CPUs it started with (``everywhere``),
    not on the previous GPU's."""
    os.sched_setaffinity(0, cpus or everywhere)
    result = {"gpu": gpu, "bytes": size, "cpu_affinity": sorted(os.sched_getaffinity(0)) if cpus else None}
    driver.use_primary_context(driver.device(gpu))
    host_memory, host = driver.pinned_host_buffer(size)
    device = driver.device_buffer(size)
    stream = driver.stream()
    try:
        for name, copy in (("host_to_device", lambda: driver.host_to_device(device, host, size, stream)),
                           ("device_to_host", lambda: driver.device_to_host(host, device, size, stream))):
            seconds = _median_driver_seconds(driver, copy, iters, warmup, stream)
            result[name] = {"time_us": seconds * 1e6, "gbps": size / seconds / 1e9}
    finally:
        driver.synchronize(stream)
        driver.free_device_buffer(device)
        driver.unregister(host)
        host_memory.close()
    return result


def by_board(result: dict, boards: list[dict]) -> None:
    """Name every row by its boards' NVML indexes (``src``, ``dst``, ``gpus``, ``gpu``), as the verdicts do; the
    CUDA indexes the copies ran on stay under ``cuda``."""
    nvml = [board["nvml_index"] for board in boards]
    for row in result["gpu_to_gpu"]:
        row["cuda"] = [row["src"], row["dst"]]
        row["src"], row["dst"] = nvml[row["src"]], nvml[row["dst"]]
    for row in result["gpu_to_gpu_bidirectional"]:
        row["cuda"] = list(row["gpus"])
        row["gpus"] = [nvml[i] for i in row["gpus"]]
    for row in result["host_device"]:
        row["cuda"] = row["gpu"]
        row["gpu"] = nvml[row["gpu"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 30)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--cpu-affinity", action="append", default=[], metavar="GPU=CPUS",
                        help="bind host<->device copies of GPU to these CPUs, e.g. 0=0-17,36-53")
    parser.add_argument("--repeats", type=int, default=1, help="measure everything this many times")
    parser.add_argument("--handshake", type=Path, default=None)  # accepted for the runner; nothing to bracket
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats of at least 1")
    affinity = {int(gpu): _cpu_list(cpus) for gpu, _, cpus in (a.partition("=") for a in args.cpu_affinity)}
    os.environ.setdefault("CUDA_DEVICE_ORDER", ORDER)  # read by cuInit: CUDA's order is NVML's
    everywhere = os.sched_getaffinity(0)
    try:
        driver = CudaDriver()
        count = driver.device_count()
    except DriverError as exc:  # no driver, or no device (cuInit's answer)
        parser.exit(2, f"copy_bw: {exc}: copy bandwidth needs GPUs\n")
    if count == 0:  # never after cuInit's success, but an empty result would judge no copy at all
        parser.exit(2, "copy_bw: no CUDA device: copy bandwidth needs GPUs\n")
    boards = driver_boards(driver)  # before anything is measured
    pairs = [(i, j) for i in range(count) for j in range(count) if i != j]
    repeats = []
    for _ in range(args.repeats):
        figures = {
            "gpu_to_gpu": [gpu_to_gpu(i, j, args.size, args.iters, args.warmup) for i, j in pairs],
            "gpu_to_gpu_bidirectional": [gpu_to_gpu_bidirectional(i, j, args.size, args.iters, args.warmup)
                                         for i, j in pairs if i < j],
            "host_device": [host_device(driver, g, args.size, args.iters, args.warmup, affinity.get(g), everywhere)
                            for g in range(count)],
        }
        by_board(figures, boards)
        repeats.append(figures)
    result = {
        "harness": "copy", "size": args.size, "iters": args.iters, "warmup": args.warmup,
        "devices": [driver.name(driver.device(i)) for i in range(count)], "boards": boards,
        **repeats[0], "host_device_api": "cuda driver",
        "torch_version": _torch().__version__ if pairs else None, **({"repeats": repeats} if args.repeats > 1 else {}),
    }
    for row in result["gpu_to_gpu"]:
        print(f"GPU{row['src']} -> GPU{row['dst']} ({row['path']}): {row['gbps']:.1f} GB/s", flush=True)
    for row in result["gpu_to_gpu_bidirectional"]:
        print(f"GPU{row['gpus'][0]} <-> GPU{row['gpus'][1]}: {row['gbps']:.1f} GB/s", flush=True)
    for row in result["host_device"]:
        print(f"GPU{row['gpu']} host->device {row['host_to_device']['gbps']:.1f} GB/s, "
              f"device->host {row['device_to_host']['gbps']:.1f} GB/s", flush=True)
    args.result.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
