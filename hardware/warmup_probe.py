"""Does the power hold's shorter warm-up (it ends once the GPU is at its power limit) change what the window reads?
Runs power_hold.py alternately with its whole 3 s warm-up (--full-warmup) and with the warm-up that ends at the
limit, each a fresh process with the measured profile's 6 s window, and writes each run's warm-up length, median SM
clock at the limit, power, temperature and clock event reasons.

    PYTHONPATH=. python3 hardware/warmup_probe.py OUTDIR [--runs 3]     (on a GPU machine)

Last run: tests/data/results/warmup-probe-h100-x1/.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_gpufabric.workloads.environment import workload_environment
from pytest_gpufabric.workloads.power_pcie import power_hold_command
from pytest_gpufabric.workloads.runner import run_workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.runs):
        for name, extra in (("whole 3 s", ["--full-warmup"]), ("until at the limit", [])):
            result = run_workload([*power_hold_command({"seconds": 6}), *extra], timeout_s=300,
                                  env=workload_environment())
            for gpu in result["gpus"]:
                row = {"run": n, "warm_up": name, "warmup_s": result["warmup_s"], "serial": gpu["serial"],
                       "tflops": gpu["tflops"], "summary": gpu["summary"],
                       "first_samples": gpu["samples"][:4]}
                runs.append(row)
                print(name, n, result["warmup_s"], {k: gpu["summary"][k] for k in (
                    "sm_clock_mhz_median_at_limit", "power_w_median", "temperature_c_max", "reasons_seen")},
                    flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "warmup_probe.json").write_text(json.dumps({"runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
