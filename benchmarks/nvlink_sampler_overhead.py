"""Does sampling NVLink counters in the background slow the training step it measures?

Runs the NVLink suite's training step (torchrun, one rank per GPU, NCCL) several times, alternating the
background sampler on (at the profile's interval) and off (counters read only before and after), and compares
the median step time. Goal (NVLink traffic issue): on within 1 % of off. Needs GPUs with NVLink.

    python benchmarks/nvlink_sampler_overhead.py [--gpus 2] [--runs 3] [--steps 50] [--interval 0.01]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from pytest_gpufabric.fabric.nvlink_sampler import NvlinkTraffic, NvmlCounterReader
from pytest_gpufabric.workloads.training import TrainingSettings, run_ddp_training


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--json", help="also write the raw numbers here")
    args = parser.parse_args()
    settings = TrainingSettings(steps=args.steps)
    reader = NvmlCounterReader(list(range(args.gpus)))
    medians: dict[str, list[float]] = {"sampler on": [], "sampler off": []}
    samples_taken = []
    try:
        for _ in range(args.runs):
            for name, interval in (("sampler on", args.interval), ("sampler off", 0.0)):
                traffic = NvlinkTraffic(reader, interval_s=interval)
                result = run_ddp_training(args.gpus, settings, measure=traffic)
                medians[name].append(result["step_time_s"]["median"])
                if interval:
                    samples_taken.append(len(traffic.samples))
    finally:
        reader.close()
    on, off = statistics.median(medians["sampler on"]), statistics.median(medians["sampler off"])
    print("| variant | median step time (ms), per run | median of runs (ms) |\n| --- | --- | --- |")
    for name, values in medians.items():
        print(f"| {name} | {', '.join(f'{v * 1e3:.3f}' for v in values)} | {statistics.median(values) * 1e3:.3f} |")
    ratio = on / off
    print(f"\nsampler on / off = {ratio:.4f} (goal <= 1.01); {args.steps} steps a run, interval {args.interval} s, "
          f"{statistics.median(samples_taken):.0f} samples a run")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"medians_s": medians, "ratio": ratio, "samples_per_run": samples_taken,
                       "steps": args.steps, "interval_s": args.interval, "gpus": args.gpus}, handle, indent=2)
    return 0 if ratio <= 1.01 else 1


if __name__ == "__main__":
    sys.exit(main())
