"""Device-memory (HBM) bandwidth of every GPU: a copy, a read kernel and a write kernel, against NVML's peak.

Standalone (imports torch, the standard library and its sibling modules only; NVML through nvidia-ml-py where it is
importable):

    python hbm.py --size 4294967296 --iters 20 --warmup 3 --result out.json

On each GPU, with two buffers of ``--size`` bytes (fp32): a copy ``b.copy_(a)`` (2 x size bytes), a read
``torch.sum(a)`` and a write ``a.fill_(1.0)`` (size bytes each); the fastest of ``--iters`` timed runs counts.
``--gpu CUDA_INDEX`` measures one GPU (the plugin starts one worker per GPU), ``--repeats N`` each GPU N times,
``--device cpu --workers N`` runs on the CPU (for tests). How it times, NVML's peak, the figures of an H100 and
why a worker per GPU: docs/evidence/diagnostics.md, "How the diagnostics measure".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import handshake, reporting_failure
    from identity import workload_devices
except ImportError:
    from .handshake import handshake, reporting_failure
    from .identity import workload_devices

FORMAT = "gpufabric-hbm/1"
_ELEMENT_BYTES = 4  # fp32


def best_seconds(operation, iters: int, warmup: int, device: torch.device) -> float:
    """The fastest of ``iters`` runs of ``operation`` after ``warmup`` untimed ones: CUDA events on the current
    stream on a GPU, the wall clock on the CPU."""
    for _ in range(warmup):
        operation()
    if device.type != "cuda":
        best = float("inf")
        for _ in range(iters):
            start = time.perf_counter()
            operation()
            best = min(best, time.perf_counter() - start)
        return best
    torch.cuda.synchronize(device)
    best = float("inf")
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        operation()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def peak_gbps(bus_width_bits: int, max_mem_clock_mhz: float) -> float:
    """Theoretical DRAM bandwidth in GB/s: bytes per transfer x transfers per second (two per clock: DDR)."""
    return bus_width_bits / 8 * max_mem_clock_mhz * 1e6 * 2 / 1e9


def nvml_peak(uuid: str | None) -> dict:
    """Bus width (bits), max memory clock (MHz) and the peak they give (GB/s) of the board with this UUID; each None
    where NVML is missing or answers an error (NOT_SUPPORTED is data, not a crash)."""
    figures = {"bus_width_bits": None, "max_mem_clock_mhz": None, "peak_gbps": None}
    if not uuid:
        return figures
    try:
        import pynvml
    except ImportError:
        return figures
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return figures
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        for key, ask in (("bus_width_bits", lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle)),
                         ("max_mem_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle,
                                                                                      pynvml.NVML_CLOCK_MEM))):
            try:
                value = int(ask())
            except pynvml.NVMLError:
                continue
            figures[key] = value if value > 0 else None
    except pynvml.NVMLError:
        pass
    finally:
        pynvml.nvmlShutdown()
    if figures["bus_width_bits"] and figures["max_mem_clock_mhz"]:
        figures["peak_gbps"] = peak_gbps(figures["bus_width_bits"], figures["max_mem_clock_mhz"])
    return figures


def measure_device(device: torch.device, size: int, iters: int, warmup: int) -> dict:
    """Copy, read and write bandwidth (GB/s) of one device's memory, with buffers of ``size`` bytes."""
    count = size // _ELEMENT_BYTES
    a = torch.empty(count, dtype=torch.float32, device=device)
    b = torch.empty(count, dtype=torch.float32, device=device)
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        write_s = best_seconds(lambda: a.fill_(1.0), iters, warmup, device)  # first: the buffers then hold numbers
        copy_s = best_seconds(lambda: b.copy_(a), iters, warmup, device)
        read_s = best_seconds(lambda: torch.sum(a), iters, warmup, device)
    nbytes = count * _ELEMENT_BYTES
    return {"copy_gbps": 2 * nbytes / copy_s / 1e9, "read_gbps": nbytes / read_s / 1e9,
            "write_gbps": nbytes / write_s / 1e9}


def _row(cuda: int, board: dict, name: str, rates: dict) -> dict:
    """One GPU's figures, named by its board, against NVML's peak (None on the CPU: no board, no peak)."""
    peak = nvml_peak(board["uuid"])
    best = max(rates.values())
    return {"cuda": cuda, "index": board["nvml_index"], "uuid": board["uuid"], "serial": board["serial"],
            "name": name, **rates, "best_gbps": best, **peak,
            "fraction_of_peak": best / peak["peak_gbps"] if peak["peak_gbps"] else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the settings a profile section holds are required: the launcher passes them, with profile.schema.json's
    # defaults for what the section leaves out (this script cannot read the schema)
    parser.add_argument("--size", type=int, required=True, help="bytes per buffer (two are allocated)")
    parser.add_argument("--iters", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=1, help="with --device cpu: how many CPU devices")
    parser.add_argument("--gpu", type=int, default=None, help="this CUDA device only (a worker of the runner's)")
    parser.add_argument("--repeats", type=int, default=1, help="measure each GPU this many times")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.size < 16 * _ELEMENT_BYTES or args.iters < 1 or args.warmup < 0 or args.repeats < 1:
        parser.error("--size of at least 64 bytes, --iters and --repeats of at least 1, --warmup of at least 0")
    size = args.size - args.size % 16  # whole fp32 words, in 16-byte vectors

    if args.device == "cuda" and torch.cuda.device_count() == 0:
        parser.exit(2, "hbm: no CUDA device: HBM bandwidth needs GPUs\n")
    devices, names, boards = workload_devices(torch, args.device, args.workers)  # before anything is measured
    if args.gpu is not None and not 0 <= args.gpu < len(devices):
        parser.exit(2, f"hbm: --gpu {args.gpu}: this process sees {len(devices)} device(s)\n")
    chosen = range(len(devices)) if args.gpu is None else [args.gpu]
    if args.gpu is not None and devices[args.gpu].type == "cuda":
        torch.empty(1, device=devices[args.gpu])  # the CUDA context, before the workers measure together

    repeats: list[list[dict]] = [[] for _ in range(args.repeats)]
    handshake(lambda: None, 0, args.handshake, "ready", "go")
    for cuda in chosen:
        device = devices[cuda]
        for rows in repeats:
            rates = measure_device(device, size, args.iters, args.warmup)
            if device.type == "cuda":
                torch.cuda.empty_cache()  # this GPU's buffers went with measure_device: its memory goes back
            rows.append(_row(cuda, boards[cuda], names[cuda], rates))
    handshake(lambda: None, 0, args.handshake, "done", "release")
    gpus = repeats[0]

    for row in gpus:
        peak = f", {row['fraction_of_peak']:.1%} of the {row['peak_gbps']:.0f} GB/s peak" if row["peak_gbps"] else ""
        print(f"GPU{row['index']} ({row['serial'] or row['uuid'] or row['name']}): copy {row['copy_gbps']:.1f}, "
              f"read {row['read_gbps']:.1f}, write {row['write_gbps']:.1f} GB/s{peak}", flush=True)
    result = {"format": FORMAT, "size_bytes": size, "iters": args.iters, "warmup": args.warmup,
              "device": args.device, "torch_version": torch.__version__, "gpus": gpus,
              **({"repeats": repeats} if args.repeats > 1 else {})}
    args.result.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
