"""How `gpufabric fleet report` scales: fleets of 100, 1,000 and 10,000 nodes built from the recorded results.

Each synthetic node is a copy of one of the recorded runs of real nvidia-h200-x2 and nvidia-h200-x4 hosts
(tests/data/results/), its GPU serials made unique and every measurement the fleet compares scaled by a factor
drawn around 1 (sd 1 %); one node in a hundred is made 12 % slower on every bandwidth figure, one in two hundred
takes the recorded planted-fault run, and one node in a thousand is expected but has no folder. Every file is
marked synthetic (`"synthetic": {...}` at its top level; the fleet report reads past it). Then the command runs in
a fresh process, timed, with its peak memory (the children's ru_maxrss, the whole process tree's high-water mark
on Linux), and the HTML page's size.

    python3 benchmarks/fleet_scale.py --nodes 100,1000,10000 --out /tmp/fleet-scale

Goals (issue 15): 10,000 nodes in under 10 s and 1 GiB on the 2-core machine, the page under 20 MB, cost per
node roughly flat from 100 to 10,000.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "results"
#: the recorded runs the synthetic nodes are copies of (accepted runs of distinct hosts, one profile each class)
HEALTHY = ["acceptance-with-10min-burn-in-on-h200-x2.json", "h200-nvswitch-x2-bandwidth-live-on-h200-x2.json",
           "h200-nvswitch-x2-bandwidth-live-after-copy-refactor-on-h200-x2.json",
           "burn-in-2min-window-from-set-up-on-h200-x2.json", "burn-in-10min-live-on-h200-x2.json"]
PLANTED = "burn-in-planted-fault-on-h200-x2.json"
SCALED = {"bandwidth-": ("busbw_gbps", "algbw_gbps", "time_us"), "copy-": None, "burn-in-gpu": ("tflops",)}


#: runs the command and reports its peak memory: its own and its children's (the node-reading workers)
_PEAK = ("import resource, sys\nfrom pytest_gpufabric.cli import main\nrc = main(sys.argv[1:])\n"
         "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
         " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")


def _scale(check: dict, factor: float) -> None:
    found = check.get("found")
    if not isinstance(found, dict):
        return
    for prefix, fields in SCALED.items():
        if check.get("name", "").startswith(prefix):
            for key, value in found.items():
                if isinstance(value, float) and (fields is None or key in fields):
                    found[key] = value / factor if key == "time_us" else value * factor


def build_fleet(root: Path, count: int, seed: int = 1) -> list[str]:
    """``count`` node folders under ``root``; returns the expected node names (the missing ones included)."""
    rng = random.Random(seed)
    sources = {name: json.loads((RESULTS / name).read_text(encoding="utf-8")) for name in [*HEALTHY, PLANTED]}
    names = []
    for i in range(count):
        name = f"node{i:05d}"
        names.append(name)
        if i % 1000 == 999:
            continue  # expected, never reported
        planted = i % 200 == 199
        document = json.loads(json.dumps(sources[PLANTED if planted else HEALTHY[i % len(HEALTHY)]]))
        slow = i % 100 == 42
        factor = (0.88 if slow else 1.0) * rng.gauss(1.0, 0.01)
        for check in document["checks"]:
            _scale(check, factor)
        for gpu in (document.get("machine") or {}).get("gpus") or []:
            gpu["serial"] = f"{gpu.get('serial')}-{i}"
        # first key, so the plugin's layout (and the fleet report's fast read of it) is kept
        document = {"synthetic": {"from": PLANTED if planted else HEALTHY[i % len(HEALTHY)], "factor": factor,
                                  "made_slow": slow}, **document}
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "gpufabric-results.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,10000")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpufabric-fleet-scale"))
    args = parser.parse_args()
    rows = []
    for count in [int(n) for n in args.nodes.split(",")]:
        root = args.out / f"fleet-{count}"
        shutil.rmtree(root, ignore_errors=True)
        built = time.perf_counter()
        expected = build_fleet(root / "nodes", count)
        built = time.perf_counter() - built
        (root / "expect.txt").write_text(",".join(expected))
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _PEAK, "fleet", "report", str(root / "nodes"),
                               "--expect", ",".join(expected), "-o", str(root / "report")],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        own, children = (int(v) for v in done.stderr.rsplit("PEAK_KIB ", 1)[-1].split())
        if done.returncode not in (0, 1):
            print(done.stdout, done.stderr, file=sys.stderr)
            return 1
        document = json.loads((root / "report" / "fleet-results.json").read_text(encoding="utf-8"))
        html_mb = (root / "report" / "fleet.html").stat().st_size / 1e6
        rows.append({"nodes": count, "seconds": round(seconds, 2), "ms_per_node": round(seconds / count * 1e3, 3),
                     # its own high-water mark plus its worker processes' largest (an upper bound of the tree)
                     "peak_rss_mib": round((own + children) / 1024, 1),
                     "html_mb": round(html_mb, 2), "verdict": document["verdict"],
                     "outlier_nodes": document["counts"]["outlier_nodes"], "missing": len(document["missing"]),
                     "build_s": round(built, 1)})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| nodes | seconds | ms/node | peak RSS MiB | HTML MB | outlier nodes | missing |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['seconds']} | {r['ms_per_node']} | {r['peak_rss_mib']} | {r['html_mb']} | "
              f"{r['outlier_nodes']} | {r['missing']} |")
    (args.out / "fleet_scale.last.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
