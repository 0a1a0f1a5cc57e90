"""How `gpufabric fleet report` scales, and whom it flags: fleets of 100, 1,000 and 10,000 nodes built from
results that this version of the plugin writes.

The nodes are made of two replays run once by this version (tests/fleet_nodes.py; results format 3, with the
promise list, the embedded profile and the integrity block a node of today writes): the whole acceptance run of a
real 2x H200 SXM 141GB host (every suite and a 10-minute burn-in, ACCEPTED) and the burn-in log of the planted-fault run
on that machine class (REJECTED by GPU1's wrong results), both under the shipped h200-nvswitch-x2 profile (the fleet
holds every node to one profile by content). Each synthetic node is a copy (tests/fleet_nodes.py ``derived``: its
hostname and GPU serials its own, marked ``"synthetic"``) with a realistic healthy spread: every compared bandwidth,
throughput and time scaled by a factor drawn around 1 (sd 1 %), every burn-in maximum temperature set to 60 C plus a
draw of sd 2 C per GPU (NVML reads whole degrees), and, in fleets of 1,000 nodes and more, one rack of 40
consecutively named healthy nodes (at 10,000 nodes node04000 to node04039) running 6 C warmer. Planted among them:
one node in a hundred slower on every bandwidth figure by 10-22 % ("slow"), one node in two hundred and fifty with
one GPU 15-22 C hotter than its own rack ("hot"; node04017, in the warm rack, among them), one node in two hundred
the planted-fault run (rejected on its own), one node in a thousand expected but without a folder, and one node in
a hundred healthy but for one noisy number (one collective at one size 3.5-4.5 % slower: "noisy", counted among the
healthy). Before the report, one core reads and parses every node file with json.loads (the yardstick, which also
brings the files into the page cache). Then the command
runs in a fresh process with every node expected (``--expect node[00000-09999]``), timed, with its CPU seconds and
peak memory (its own and its node-reading workers': the children's ru_maxrss, the whole process tree's high-water
mark on Linux), the machine's load average before and after, and the HTML page's size; and the outliers it names
are scored: precision and recall per planted kind (a slow node must be flagged on a bandwidth, throughput or time,
a hot one on a temperature), the share of healthy nodes flagged one by one, how many of the noisy ones are, and
whether the warm rack came back as one group.

    python3 benchmarks/fleet_scale.py --nodes 3000,30000 --out /tmp/fleet-scale
    python3 benchmarks/fleet_scale.py --nodes 3000 --out /tmp/fleet-scale --reuse   # time it again, same fleet
    python3 benchmarks/fleet_scale.py --nodes 10000,100000 --out /tmp/fleet-scale --reuse --cold   # off the disk

Goals (issue 44): 3,000 nodes in at most 0.85 times one core's json.loads of the same files; 100,000 nodes in at
most 12 times the 10,000-node time (where 100,000 nodes do not fit this machine's disk and time, 30,000 against
3,000), memory bounded and recorded; at most 0.5 % of the healthy nodes flagged one by one, every planted slow and
hot node flagged, the warm rack reported as a group and none of its healthy nodes one by one (issue 25).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fleet_nodes import derived, replayed  # noqa: E402  (the replays of real bundles the fleet tests use)

#: the replays the synthetic nodes are copies of: an accepted whole acceptance run and the planted-fault burn-in
HEALTHY, PLANTED = "accepted", "planted"


#: runs the command and reports its peak memory: its own and its children's (the node-reading workers)
_PEAK = ("import resource, sys\nfrom pytest_gpufabric.cli import main\nrc = main(sys.argv[1:])\n"
         "own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "print('PEAK_KIB', own.ru_maxrss, workers.ru_maxrss, file=sys.stderr)\n"
         "print('CPU_S', own.ru_utime + own.ru_stime, workers.ru_utime + workers.ru_stime, file=sys.stderr)\n"
         "sys.exit(rc)")


#: the yardstick: every node's results file read and parsed whole by json.loads, one after the other on one core
_LOADS = ("import json, os, sys, time\nroot = sys.argv[1]\nstart, cpu = time.perf_counter(), time.process_time()\n"
          "for name in sorted(os.listdir(root)):\n"
          "    try:\n        handle = open(os.path.join(root, name, 'gpufabric-results.json'), 'rb')\n"
          "    except FileNotFoundError:\n        continue\n"
          "    with handle:\n        json.loads(handle.read())\n"
          "print(time.perf_counter() - start, time.process_time() - cpu)")


def evict(nodes: Path) -> None:
    """Every node file out of the page cache (posix_fadvise DONTNEED: these files only, the machine's other cached
    files stay), so that the next reader reads them from the disk, as a report reads a fleet's results off a shared
    file system."""
    for folder in nodes.iterdir():
        try:
            fd = os.open(folder / "gpufabric-results.json", os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _workers(count: int) -> int:
    """The node-reading processes of a report over ``count`` nodes (fleet/report.py read_nodes)."""
    from pytest_gpufabric.fleet.report import PARALLEL_FROM, usable_cpus

    cpus = min(usable_cpus(), 8)
    return cpus if count >= PARALLEL_FROM and cpus >= 2 else 1


def loads_seconds(nodes: Path) -> tuple[float, float]:
    """(seconds, CPU seconds) one core takes to read and json.loads every node's results file once."""
    done = subprocess.run([sys.executable, "-c", _LOADS, str(nodes)], capture_output=True, text=True, check=True)
    seconds, cpu = done.stdout.split()[-2:]
    return float(seconds), float(cpu)


#: the warm rack: 40 consecutively named healthy nodes, 6 C warmer, from 2/5 into fleets of 1,000 nodes and more
WARM_NODES, WARM_C = 40, 6
BASE_C, SPREAD_C = 60, 2.0


def warm_rack(count: int) -> range:
    start = count * 2 // 5
    return range(start, start + WARM_NODES) if count >= 1000 else range(0)


def _planted(i: int) -> str | None:
    if i % 1000 == 999:
        return "missing"
    if i % 200 == 199:
        return "fault"
    if i % 100 == 42:
        return "slow"
    if i % 250 == 17:
        return "hot"
    if i % 100 == 71:
        return "noisy"
    return None


#: the parts of a node's results that ``derived`` makes its own (the rest is the replay's, written as it is)
_PER_NODE = ("run", "machine", "checks")


def _indented(value) -> str:
    """A top-level value as json.dumps(document, indent=2) writes it."""
    return json.dumps(value, indent=2).replace("\n", "\n  ")


def _as_written(source: dict, node: dict, shared: dict[str, str]) -> str:
    """The node's results as the plugin writes them (json.dumps(..., indent=2), the layout the fleet report's fast
    read knows), byte for byte: the source's parts in its order with the node's own in their place, then
    ``synthetic``. The parts a node shares with its source are formatted once (``shared``: key -> text; the results
    of a 10-minute burn-in are 0.3 MB, and formatting each whole was most of the time building 100,000 nodes took)."""
    parts = []
    for key in [*source, *(k for k in node if k not in source)]:
        if key in node:
            parts.append(f"  {json.dumps(key)}: {_indented(node[key])}")
            continue
        if key not in shared:
            shared[key] = f"  {json.dumps(key)}: {_indented(source[key])}"
        parts.append(shared[key])
    return "{\n" + ",\n".join(parts) + "\n}\n"


def build_fleet(root: Path, count: int, seed: int = 1) -> tuple[list[str], dict[str, str], set[str]]:
    """``count`` node folders under ``root``; returns the expected node names (the missing ones included), the
    planted kind of each planted node ("slow", "hot", "fault", "missing") and the nodes with burn-in temperatures."""
    rng = random.Random(seed)
    sources = {kind: replayed(kind) for kind in (HEALTHY, PLANTED)}
    shared: dict[str, dict[str, str]] = {kind: {} for kind in sources}
    names, planted_kinds, warm = [], {}, set()
    for i in range(count):
        name = f"node{i:05d}"
        names.append(name)
        kind = _planted(i)
        if kind:
            planted_kinds[name] = kind
        if kind == "missing":
            continue  # expected, never reported
        source = PLANTED if kind == "fault" else HEALTHY
        factor = rng.uniform(0.78, 0.90) if kind == "slow" else rng.gauss(1.0, 0.01)
        document = derived({key: sources[source][key] for key in _PER_NODE}, name, factor)
        document["synthetic"].update({"from": source, "planted": kind})
        rack_c = WARM_C if i in warm_rack(count) else 0
        temperatures = [c for c in document["checks"] if c["name"] == "burn-in-gpu" and isinstance(c["found"], dict)
                        and "max_temperature_c" in c["found"]]
        hot_gpu = rng.randrange(len(temperatures)) if kind == "hot" and temperatures else None
        if temperatures:
            warm.add(name)
        for g, check in enumerate(temperatures):
            over = rng.uniform(15, 22) if g == hot_gpu else rng.gauss(0, SPREAD_C)
            check["found"]["max_temperature_c"] = round(BASE_C + rack_c + over)
        if kind == "noisy":  # healthy, one measurement read low: a collective at one size, 3.5-4.5 % slower
            _one_slow_measurement(document, rng, rng.uniform(0.955, 0.965))
        if kind == "hot" and hot_gpu is None:
            planted_kinds[name] = "hot, but its source has no burn-in temperature"
        document["synthetic"].update({"rack_c": rack_c, "hot_gpu": hot_gpu})
        folder = root / name
        folder.mkdir(parents=True)
        text = _as_written(sources[source], document, shared[source])
        (folder / "gpufabric-results.json").write_text(text, encoding="utf-8")
    return names, planted_kinds, warm


def _one_slow_measurement(document: dict, rng: random.Random, factor: float) -> None:
    """One check record of the node's collectives (its bandwidths and time: one measurement) ``factor`` as fast."""
    records = [c for c in document["checks"] if c["name"].startswith("bandwidth-") and isinstance(c["found"], dict)
               and "busbw_gbps" in c["found"]]
    record = rng.choice(records)
    for key in ("busbw_gbps", "algbw_gbps"):
        if isinstance(record["found"].get(key), float):
            record["found"][key] *= factor
    if isinstance(record["found"].get("time_us"), float):
        record["found"]["time_us"] /= factor
    document["synthetic"]["noisy"] = f"{record['name']} {record['subject']}"


def score(document: dict, planted: dict[str, str], count: int, with_temperatures: set[str]) -> dict:
    """Precision and recall per planted kind, the healthy nodes flagged one by one, the warm rack's group."""
    by_kind: dict[str, set[str]] = {"slow": set(), "hot": set()}
    for node in document["nodes"]:
        for o in node["outliers"]:
            by_kind["hot" if o["unit"] == "C" else "slow"].add(node["name"])
    flagged = {n["name"] for n in document["nodes"] if n["outliers"]}
    out: dict = {}
    for kind, named in by_kind.items():
        truth = {n for n, k in planted.items() if k == kind}
        hit = len(named & truth)
        out[kind] = {"planted": len(truth), "flagged": len(named), "recall": hit / len(truth) if truth else None,
                     "precision": hit / len(named) if named else None}
    # healthy: every accepted node but the slow and hot ones (those with one noisy number included)
    healthy = [n["name"] for n in document["nodes"] if n["verdict"] == "ACCEPTED"
               and planted.get(n["name"], "noisy") == "noisy"]
    wrongly = sorted(set(healthy) & flagged)
    out["healthy"] = {"nodes": len(healthy), "flagged_one_by_one": len(wrongly),
                      "share": len(wrongly) / len(healthy) if healthy else None, "names": wrongly[:20]}
    noisy = {n for n, k in planted.items() if k == "noisy"}
    out["noisy"] = {"planted": len(noisy), "flagged": len(noisy & flagged)}
    rack = {f"node{i:05d}" for i in warm_rack(count)} & with_temperatures  # those a temperature can group
    rack_healthy = {n for n in rack if n not in planted}
    best = max(document.get("groups") or [], key=lambda g: len(rack & set(g["nodes"])), default=None)
    out["warm_rack"] = {"nodes": len(rack), "healthy_flagged_one_by_one": len(rack_healthy & flagged),
                        "group": None if best is None or not rack & set(best["nodes"]) else
                        {"id": best["id"], "count": best["count"], "of_the_rack": len(rack & set(best["nodes"])),
                         "first": best["first"], "last": best["last"], "summary": best["summary"]}}
    out["groups"] = [{"id": g["id"], "count": g["count"], "first": g["first"], "last": g["last"]}
                     for g in document.get("groups") or []]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,10000")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gpufabric-fleet-scale"))
    parser.add_argument("--cold", action="store_true", help="the node files out of the page cache before the "
                        "yardstick and before the report: both read them from the disk")
    parser.add_argument("--seed", type=int, default=1, help="the fleet's random draws (a new fleet per seed)")
    parser.add_argument("--reuse", action="store_true", help="time the report again on the fleets an earlier run "
                        "built under --out (100,000 nodes take minutes to build and 29 GB)")
    args = parser.parse_args()
    rows = []
    for count in [int(n) for n in args.nodes.split(",")]:
        root = args.out / f"fleet-{count}"
        built: float | None = time.perf_counter()
        if args.reuse and (root / "plan.json").is_file():
            plan = json.loads((root / "plan.json").read_text(encoding="utf-8"))
            expected, planted, with_temperatures = plan["expected"], plan["planted"], set(plan["with_temperatures"])
            built = None  # built by an earlier run
        else:
            shutil.rmtree(root, ignore_errors=True)
            expected, planted, with_temperatures = build_fleet(root / "nodes", count, args.seed)
            (root / "plan.json").write_text(json.dumps({"expected": expected, "planted": planted,
                                                        "with_temperatures": sorted(with_temperatures)}))
        built = None if built is None else time.perf_counter() - built
        # every node expected, as an operator names them: one Slurm hostlist (100,000 names are past ARG_MAX)
        hostlist = f"node[00000-{count - 1:05d}]"
        assert expected == [f"node{i:05d}" for i in range(count)]
        (root / "expect.txt").write_text(hostlist)
        # the yardstick; it also brings the files into the page cache, for the report (unless --cold)
        if args.cold:
            evict(root / "nodes")
        loads_s, loads_cpu_s = loads_seconds(root / "nodes")
        if args.cold:
            evict(root / "nodes")
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _PEAK, "fleet", "report", "--allow-replays",
                               str(root / "nodes"), "--expect", hostlist, "-o", str(root / "report")],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        load_after = os.getloadavg()[0]
        own, children = (int(v) for v in done.stderr.rsplit("PEAK_KIB ", 1)[-1].split("\n", 1)[0].split())
        cpu_own, cpu_workers = (float(v) for v in done.stderr.rsplit("CPU_S ", 1)[-1].split())
        if done.returncode not in (0, 1):
            print(done.stdout, done.stderr, file=sys.stderr)
            return 1
        document = json.loads((root / "report" / "fleet-results.json").read_text(encoding="utf-8"))
        html_mb = (root / "report" / "fleet.html").stat().st_size / 1e6
        rows.append({"nodes": count, "seconds": round(seconds, 2), "ms_per_node": round(seconds / count * 1e3, 3),
                     # its own high-water mark plus its worker processes' largest (an upper bound of the tree)
                     "peak_rss_mib": round((own + children) / 1024, 1),
                     # CPU seconds of the report's own process and of its node-reading workers
                     "cpu_s": round(cpu_own + cpu_workers, 2), "cpu_s_report": round(cpu_own, 2),
                     "html_mb": round(html_mb, 2),
                     # one core's json.loads of every results file, and the report's time as a share of it
                     "json_loads_s": round(loads_s, 2), "vs_json_loads": round(seconds / loads_s, 2),
                     # the same from CPU seconds, which other work on the machine changes less: the report's own
                     # plus its workers' shared among them (the node-reading workers: one per CPU, up to 8, from
                     # 1,000 nodes on), against the yardstick's
                     "json_loads_cpu_s": round(loads_cpu_s, 2),
                     "vs_json_loads_cpu": round((cpu_own + cpu_workers / _workers(count)) / loads_cpu_s, 2),
                     "vs_previous_row": round(seconds / rows[-1]["seconds"], 2) if rows else None,
                     # the machine's 1-minute load average before and after the report (2 cores, shared)
                     "load_before": round(load_before, 2), "load_after": round(load_after, 2),
                     "cpus": os.cpu_count(), "seed": args.seed, "cold": args.cold, "verdict": document["verdict"],
                     "outlier_nodes": document["counts"]["outlier_nodes"], "missing": len(document["missing"]),
                     "build_s": None if built is None else round(built, 1),
                     "flags": score(document, planted, count, with_temperatures)})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| nodes | seconds | x json.loads (s) | x previous row | load before/after | ms/node "
          "| CPU s (report + workers) | peak RSS MiB | HTML MB | outlier nodes | groups | missing |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['seconds']} | {r['vs_json_loads']} ({r['json_loads_s']}; from CPU s "
              f"{r['vs_json_loads_cpu']}) | "
              f"{r['vs_previous_row'] or '-'} | {r['load_before']}/{r['load_after']} | "
              f"{r['ms_per_node']} | {r['cpu_s']} ({r['cpu_s_report']} + "
              f"{round(r['cpu_s'] - r['cpu_s_report'], 2)}) | {r['peak_rss_mib']} | {r['html_mb']} | "
              f"{r['outlier_nodes']} | {len(r['flags']['groups'])} | {r['missing']} |")
    print("\n| nodes | slow: recall | slow: precision | hot: recall | hot: precision | healthy flagged one by one | "
          "one noisy number: flagged | warm rack (40 nodes, +6 C) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        f = r["flags"]

        def pct(x):
            return "-" if x is None else f"{x:.1%}"

        rack = f["warm_rack"]
        group = rack["group"]
        rack_text = (f"{group['id']}: {group['count']} nodes, {group['of_the_rack']} of the rack's {rack['nodes']} "
                     f"with a temperature ({group['first']} to {group['last']}); {rack['healthy_flagged_one_by_one']} "
                     f"of its healthy "
                     "nodes flagged one by one" if group else
                     f"no group; {rack['healthy_flagged_one_by_one']} of its healthy nodes flagged one by one")
        print(f"| {r['nodes']:,} | {pct(f['slow']['recall'])} of {f['slow']['planted']} | "
              f"{pct(f['slow']['precision'])} of {f['slow']['flagged']} | {pct(f['hot']['recall'])} of "
              f"{f['hot']['planted']} | {pct(f['hot']['precision'])} of {f['hot']['flagged']} | "
              f"{f['healthy']['flagged_one_by_one']} of {f['healthy']['nodes']:,} ({f['healthy']['share']:.2%}) | "
              f"{f['noisy']['flagged']} of {f['noisy']['planted']} | "
              f"{rack_text if warm_rack(r['nodes']) else 'none in this fleet'} |")
    (args.out / "fleet_scale.last.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
