"""Does pinning with cudaHostRegister (workloads/environment.py's FAST_PINNING) change the memory suite's offloading
slowdown? Runs the memory workload (memory_step.py, the measured profile's memory section) alternately without and
with those settings, each a fresh process, and writes every run's offloading figures and phase times.

    python3 hardware/offload_pinning_probe.py PROFILE.yaml OUTDIR [--runs 3]     (on a GPU machine)

Last run: tests/data/results/offload-pinning-probe-h100-x1/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from pytest_gpufabric.workloads.environment import workload_environment
from pytest_gpufabric.workloads.memory import memory_command
from pytest_gpufabric.workloads.runner import run_workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    section = yaml.safe_load(args.profile.read_text())["memory"]
    fast = workload_environment()
    plain = {k: v for k, v in fast.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    runs = []
    for n in range(args.runs):
        for name, env in (("cudaHostAlloc", plain), ("cudaHostRegister x8", fast)):
            result = run_workload(memory_command(section), timeout_s=900, env=env)
            row = {"run": n, "pinning": name, "alloc_conf": env.get("PYTORCH_CUDA_ALLOC_CONF"),
                   "lms": [{k: r.get(k) for k in ("threshold_bytes", "usage_fraction", "outcome", "seconds",
                                                  "ratio_vs_baseline", "offloaded_bytes")} for r in result["lms"]],
                   "baseline": result.get("baseline"), "phase_seconds": result["phase_seconds"],
                   "board": result.get("board")}
            runs.append(row)
            print(name, n, [round(r["ratio_vs_baseline"], 2) for r in result["lms"] if r.get("ratio_vs_baseline")],
                  {k: round(v, 2) for k, v in result["phase_seconds"].items() if k.startswith("offload")}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "offload_pinning_probe.json").write_text(json.dumps({"section": section, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
