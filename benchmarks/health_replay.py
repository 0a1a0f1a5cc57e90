"""How long `gpufabric health` takes to judge a recorded 4-GPU node (the shipped h200-nvswitch-x4 bundle, with the
kernel log a live read recorded in place of the one its derived record lacks: every check runs), as a
fresh process each time: the interpreter's start, the imports (no torch: the passive tier never needs it) and the
judgement. The passive tier runs every few minutes on every node of a cluster, so its start-up is its cost.

Goal (issue 43): at most 5 s a replay, the interpreter's start included; the judgement itself (the JSON's
``seconds.passive``) under 1 s. The live tiers are timed on a GPU by hardware/health-live.sh.

    python3 benchmarks/health_replay.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "tests" / "data" / "bundles" / "h200-nvswitch-x4"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from derive_health import with_read_kernel_log  # the DERIVED bundle alone is could not tell: every check runs

    bundle = with_read_kernel_log(BUNDLE)
    walls, passive = [], []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUFABRIC_STATE_DIR": str(Path(tmp) / "state")}
        for _ in range(args.runs + 1):  # the first warms the file cache and is dropped
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--profile", "h200-nvswitch-x4",
                                   "--replay", str(bundle), "--json"], capture_output=True, text=True, cwd=tmp,
                                  env=env)
            walls.append(time.perf_counter() - started)
            if done.returncode != 0:
                print(done.stdout, done.stderr, file=sys.stderr)
                return 1
            passive.append(json.loads(done.stdout)["seconds"]["passive"])
    walls, passive = walls[1:], passive[1:]
    row = {"runs": args.runs, "wall_s_median": round(statistics.median(walls), 3), "wall_s_max": round(max(walls), 3),
           "passive_s_median": round(statistics.median(passive), 3), "passive_s_max": round(max(passive), 3),
           "goal_wall_s": 5.0, "goal_passive_s": 1.0, "met": max(walls) <= 5.0 and max(passive) < 1.0,
           "load_before": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    print(json.dumps(row, indent=2))
    (Path(__file__).parent / "health_replay.last.json").write_text(json.dumps(row, indent=2) + "\n")
    return 0 if row["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
