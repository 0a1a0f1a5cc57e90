"""A fleet report over broken and hostile node files: is every broken node refused, quickly, in bounded memory, and
do reports written at once into one folder stay whole?

1. **3,000 nodes, 150 broken**: copies of the replay of a real machine's whole acceptance run (tests/fleet_nodes.py;
   each with its own hostname, serials and a speed factor around 1, marked synthetic), 150 of them broken in the
   ways tests/test_fleet_faults.py names (cut short, a bare summary, checks missing or a dict, a summary over a
   failed check, bytes that are not UTF-8, 100,000-deep nesting, Infinity, a format from the future, a symlink
   loop, not JSON, empty) and two of them 1.5 GB (sparse files: nothing on disk). `gpufabric fleet report` runs in
   a fresh process, timed, with its peak memory (its own and its node-reading workers'). Goal (issue 21): every
   broken node refused, in under 5 s and under 1 GiB on the 2-core machine.
2. **80 concurrent report pairs** into one OUT folder (two reports at once, 80 times): afterwards its
   fleet-results.json reads, and the page and the JUnit carry the same run id.

    python3 benchmarks/fleet_faults.py [--nodes 3000] [--broken 150] [--pairs 80]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fleet_nodes import RESULTS_FILE, derived, replayed, write_node  # noqa: E402
from test_fleet_faults import CASES  # noqa: E402

_PEAK = ("import resource, sys\nfrom pytest_gpufabric.cli import main\nrc = main(sys.argv[1:])\n"
         "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
         " resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\nsys.exit(rc)")


def build(root: Path, count: int, broken: int) -> dict[str, str]:
    """The fleet; returns broken node -> how it was broken."""
    accepted = replayed("accepted")
    text = json.dumps(derived(accepted, "template"), indent=2) + "\n"
    ways = [*CASES, "symlink loop", "1.5 GB"]
    every = max(1, count // broken)
    broken_nodes: dict[str, str] = {}
    for i in range(count):
        name = f"node{i:05d}"
        if i % every == every // 2 and len(broken_nodes) < broken:
            way = "1.5 GB" if len(broken_nodes) in (0, 1) else ways[len(broken_nodes) % (len(ways) - 1)]
            folder = root / name
            folder.mkdir(parents=True)
            if way == "symlink loop":
                os.symlink(RESULTS_FILE, folder / RESULTS_FILE)
            elif way == "1.5 GB":
                with open(folder / RESULTS_FILE, "wb") as handle:
                    handle.truncate(1_500_000_000)
            else:
                data = CASES[way][0](text.replace("template", name))
                (folder / RESULTS_FILE).write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
            broken_nodes[name] = way
            continue
        write_node(root, name, derived(accepted, name, 1 + ((i * 7919) % 200 - 100) / 10_000))
    return broken_nodes


def report(root: Path, out: Path) -> tuple[float, float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PEAK, "fleet", "report", str(root), "-o", str(out)],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    peak = next(line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB")).split()[1:]
    return seconds, max(int(k) for k in peak) / 1024, done.returncode


def concurrent_pairs(root: Path, out: Path, pairs: int) -> int:
    """How many of ``pairs`` rounds of two reports at once left the three files of one run."""
    from test_fleet_faults import assert_one_run

    whole = 0
    for _ in range(pairs):
        runs = [subprocess.Popen([sys.executable, "-m", "pytest_gpufabric", "fleet", "report", str(root), "-o",
                                  str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        for run in runs:
            run.wait()
        try:
            assert_one_run(out)
            whole += 1
        except (AssertionError, ValueError, OSError) as exc:
            print(f"  a round left a torn report: {exc}")
    return whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--broken", type=int, default=150)
    parser.add_argument("--pairs", type=int, default=80)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root, out = Path(work) / "fleet", Path(work) / "out"
        broken = build(root, args.nodes, args.broken)
        seconds, peak_mib, code = report(root, out)
        document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
        nodes = {n["name"]: n for n in document["nodes"]}
        refused = [name for name in broken if nodes[name]["verdict"] != "ACCEPTED"]
        healthy_accepted = sum(1 for name, n in nodes.items() if name not in broken and n["verdict"] == "ACCEPTED")
        print(f"{args.nodes} nodes, {len(broken)} broken ({sum(w == '1.5 GB' for w in broken.values())} of 1.5 GB): "
              f"{len(refused)} of them refused, {healthy_accepted} of {args.nodes - len(broken)} healthy accepted; "
              f"fleet {document['verdict']} (exit {code}) in {seconds:.2f} s, peak {peak_mib:.0f} MiB")
        small = Path(work) / "small"
        for i in range(20):
            write_node(small, f"n{i:02d}", derived(replayed("accepted"), f"n{i:02d}"))
        whole = concurrent_pairs(small, Path(work) / "shared-out", args.pairs)
        print(f"{args.pairs} rounds of two concurrent reports into one folder: {whole} left one whole run")
    ok = len(refused) == len(broken) and seconds < 5 and peak_mib < 1024 and whole == args.pairs
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
