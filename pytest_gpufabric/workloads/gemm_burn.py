"""A GEMM burn on every GPU, results cross-checked, as gpu-burn does it.

Standalone (imports torch and the standard library only); one process drives every GPU:

    python gemm_burn.py --seconds 60 --size 8192 --dtype bfloat16 --result out.json

Every GPU multiplies the same two random matrices (made once on the CPU from a fixed seed and copied to each
GPU) over and over, for the given time. Every ``--check-every`` iterations each GPU's product is compared with
its own first product (the same kernel on the same inputs must give the same bits: a difference is a
computing error) and with GPU 0's first product (identical GPUs give identical bits; different models are
compared with a tolerance). ``--plant-fault N`` corrupts GPU N's product before each check: it proves the
check catches a wrong result. ``--device cpu --workers N`` runs the same logic on CPU "workers" (for tests).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import reporting_failure
    from identity import cuda_boards
except ImportError:
    from .handshake import reporting_failure
    from .identity import cuda_boards

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def mismatches(result: torch.Tensor, reference: torch.Tensor, exact: bool) -> int:
    if exact:
        return int((result != reference).sum())
    return int((~torch.isclose(result.float(), reference.float(), rtol=1e-2, atol=1e-2)).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="bfloat16")
    parser.add_argument("--check-every", type=int, default=20)
    parser.add_argument("--plant-fault", type=int, default=None, metavar="GPU")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=2, help="with --device cpu: how many CPU workers")
    parser.add_argument("--handshake", type=Path, default=None)  # accepted for the runner; nothing to bracket
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()

    dtype = _DTYPES[args.dtype] if args.device == "cuda" else torch.float32
    if args.device == "cuda":
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
        names = [torch.cuda.get_device_name(d) for d in devices]
        boards = cuda_boards(torch) if devices else []  # before anything is measured
    else:
        devices = [torch.device("cpu")] * args.workers
        names = ["cpu"] * args.workers
        boards = [{"cuda_index": i, "nvml_index": i, "uuid": None, "serial": None} for i in range(args.workers)]
    if not devices:
        parser.exit(2, "gemm_burn: no CUDA device\n")
    if args.plant_fault is not None and not 0 <= args.plant_fault < len(devices):
        parser.exit(2, f"gemm_burn: --plant-fault {args.plant_fault}: there are {len(devices)} GPU(s)\n")
    generator = torch.Generator().manual_seed(1234)
    a_host = torch.randn(args.size, args.size, generator=generator).to(dtype)
    b_host = torch.randn(args.size, args.size, generator=generator).to(dtype)
    a = [a_host.to(d) for d in devices]
    b = [b_host.to(d) for d in devices]
    out = [torch.empty(args.size, args.size, dtype=dtype, device=d) for d in devices]

    def synchronize() -> None:
        if args.device == "cuda":
            for d in devices:
                torch.cuda.synchronize(d)

    for i in range(len(devices)):
        torch.matmul(a[i], b[i], out=out[i])
    synchronize()
    first = [o.clone() for o in out]
    exact_cross = len(set(names)) == 1
    # "gpu": the board's NVML index (what the verdicts name); "cuda_index": the device the GEMMs ran on
    gpus = [{"gpu": boards[i]["nvml_index"], "cuda_index": i, "uuid": boards[i]["uuid"],
             "serial": boards[i]["serial"], "name": names[i], "iterations": 0, "checks": 0, "errors_self": 0,
             "errors_cross": 0,
             "first_mismatch_cross": first[i].ne(first[0].to(devices[i])).sum().item() if exact_cross else None}
            for i in range(len(devices))]
    start = time.perf_counter()
    iteration = 0
    # the time asked for, and at least one cross-check: a run too slow to reach one (a loaded host) would show nothing
    while time.perf_counter() - start < args.seconds or gpus[0]["checks"] == 0:
        for i in range(len(devices)):
            torch.matmul(a[i], b[i], out=out[i])
            gpus[i]["iterations"] += 1
        iteration += 1
        if iteration % args.check_every == 0:
            synchronize()
            for i in range(len(devices)):
                if args.plant_fault == i:
                    # the planted fault: one wrong element, as a failing GPU gives. Doubled away from zero, never +1,
                    # which bf16 rounds away for |x| >= 256 (and fp32 for |x| >= 2**24), checking nothing
                    first_element = out[i].view(-1)[:1]
                    first_element += first_element.abs().clamp(min=1)
                gpus[i]["checks"] += 1
                gpus[i]["errors_self"] += mismatches(out[i], first[i], exact=True)
                gpus[i]["errors_cross"] += mismatches(out[i], first[0].to(devices[i]), exact=exact_cross)
    synchronize()
    elapsed = time.perf_counter() - start
    flops = 2 * args.size**3
    for g in gpus:
        g["tflops"] = g["iterations"] * flops / elapsed / 1e12
    result = {"workload": "gemm_burn", "seconds": elapsed, "size": args.size,
              "dtype": str(dtype).replace("torch.", ""), "device": args.device, "plant_fault": args.plant_fault,
              "plant_fault_board": None if args.plant_fault is None else boards[args.plant_fault],
              "exact_cross_check": exact_cross, "gpus": gpus, "torch_version": torch.__version__}
    args.result.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
