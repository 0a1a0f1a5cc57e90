"""How long `profile init --measure`, an acceptance and a burn-in take on this machine, and where the time went.

Runs live (it needs NVIDIA GPUs), each as a new user would:

- with ``--measure``: `gpufabric profile init --measure -o OUT/measured.yaml`, timed (the profile the rest runs
  against, unless ``--profile`` names another);
- `pytest --gpu-profile PROFILE`: the acceptance without burn-in;
- with ``--burn-in D``: `pytest --gpu-profile PROFILE --gpu-burn-in D -k burn_in`.

From each run's results JSON it reads each test's seconds (set-up, call and teardown: the test that first asks for a
measurement pays for it) and from the measurement files each workload's ``runner`` timing (started in a spare or
cold, when it was ready, done and exited; for a workload of several processes, each one's start). Prints the
per-phase table, and writes OUT/timing.json, OUT/timing.md and the summary ``--last`` (default
benchmarks/acceptance_time.<N>gpu.last.json, a file per GPU count): device, gpus, init_measure_s,
acceptance_wall_s, burn_in_s, burn_in_wall_s, the phases.

    python3 benchmarks/acceptance_time.py --measure --burn-in 60s --out /tmp/timing

Goals: issue 22 (one H100): the acceptance in at most 45 s, a 60 s burn-in in at most 75 s of wall time; issue 31
(four H100 SXM): `profile init --measure` and the acceptance each in at most 60 s, the one-GPU acceptance at 41 s or
less.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

#: a test that took at least this long made (or waited for) a measurement: it is a phase of its own in the table
PHASE_S = 0.5


def run(profile: str, out: Path, extra: list[str]) -> dict:
    """One pytest run, timed, with benchmarks/acceptance_timeline.py noting when each part of it ran
    (OUT/timeline.json)."""
    out.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).parent)
    env = dict(os.environ, GPUFABRIC_BENCH_TIMELINE=str(out / "timeline.json"),
               PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    env["GPUFABRIC_BENCH_T0"] = repr(time.time())
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "acceptance_timeline",
                           "--gpu-profile", profile, "--gpu-report-dir", str(out), *extra],
                          capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    (out / "pytest.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    return read_run(out, wall, done.returncode)


def read_run(out: Path, wall_s: float, exit_code: int) -> dict:
    """A run's timing from what it left in its report folder: the results JSON and the measurement files."""
    results_file = out / "gpufabric-results.json"
    if not results_file.is_file():
        return {"wall_s": wall_s, "exit": exit_code, "verdict": None, "reason": "no results JSON (pytest.log)",
                "suites": {}, "tests": {}, "burn_in": None, "workloads": {}, "machine": None,
                "timeline": read_timeline(out)}
    results = json.loads(results_file.read_text(encoding="utf-8"))
    suites: dict[str, float] = {}
    for nodeid, seconds in results["durations"].items():
        suite = nodeid.split("::")[0].rsplit("/", 1)[-1]
        suites[suite] = suites.get(suite, 0.0) + seconds
    return {"wall_s": wall_s, "exit": exit_code, "verdict": results["summary"]["verdict"],
            "reason": results["summary"]["verdict_reason"], "suites": suites, "tests": results["durations"],
            "burn_in": (results.get("burn_in") or {}).get("elapsed_s"), "workloads": workload_timings(out),
            "machine": results.get("machine"), "timeline": read_timeline(out)}


def read_timeline(out: Path) -> dict | None:
    """OUT/timeline.json (acceptance_timeline.py), or None where the run left none."""
    try:
        return json.loads((out / "timeline.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


#: the timeline's marks that bound pytest's own work: before the session, and after its last test
OUTSIDE_TESTS = ("plugins imported", "pytest_configure", "session start", "collected", "session finish",
                 "terminal summary", "terminal summary written", "session finished (verdict and reports written)",
                 "pytest_unconfigure", "interpreter exit")


def timeline_rows(timeline: dict | None) -> list[str]:
    """The marks outside the tests and each spare's start, as table rows (seconds since the process started)."""
    if not timeline:
        return []
    rows = [f"| {name} | {seconds:.2f} |" for name, seconds in timeline.get("events", []) if name in OUTSIDE_TESTS]
    starts = [name for name, _ in timeline.get("events", []) if name.startswith("start ")]
    first = next((s for n, s in timeline["events"] if n.startswith("start ")), None)
    if first is not None:
        rows.insert(4, f"| first test starts ({len(starts)} tests) | {first:.2f} |")
    rows += [f"| spare started ({'+'.join(spare['imports'])}) | {spare['started_s']:.2f} |"
             for spare in timeline.get("spares", [])]
    return rows


def workload_timings(out: Path) -> dict[str, dict]:
    """Where each recorded workload's time went, as the runner saw it (runner.run_workload's ``runner``), read from
    the measurement files the run wrote to its report folder: the file's own (hbm, pcie-load, ...) and its parts'
    (bandwidth.collectives, bandwidth.copy, nvlink-traffic.workload)."""
    timings = {}
    for path in sorted(out.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        if isinstance(record.get("runner"), dict):
            timings[path.stem] = record["runner"]
        for key, part in record.items():
            if isinstance(part, dict) and isinstance(part.get("runner"), dict):
                timings[f"{path.stem}.{key}"] = part["runner"]
    return timings


def init_measure(out: Path) -> dict:
    """`gpufabric profile init --measure -o OUT/measured.yaml`, timed; its output in OUT/init-measure.log."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "profile", "init", "--measure", "-o",
                           str(out / "measured.yaml")], capture_output=True, text=True)
    wall = time.monotonic() - started
    (out / "init-measure.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    return {"wall_s": wall, "exit": done.returncode, "profile": str(out / "measured.yaml")}


def device_of(machine: dict | None) -> tuple[str | None, int | None, list]:
    """'4x NVIDIA H100 80GB HBM3' (GPUs of one model; a mixed machine names each), the count and the boards."""
    gpus = (machine or {}).get("gpus") or []
    if not gpus:
        return None, None, []
    names = Counter(gpu.get("name") for gpu in gpus)
    device = ", ".join(f"{count}x {name}" for name, count in names.items())
    return device, len(gpus), [{"index": g.get("index"), "serial": g.get("serial"), "uuid": g.get("uuid")}
                               for g in gpus]


def phases(timing: dict) -> list[dict]:
    """The run's wall time in phases: each test of at least PHASE_S seconds (where a measurement was made), the
    other tests together, and pytest itself (start-up, collection, report: the wall time no test accounts for)."""
    tests = timing.get("tests") or {}
    slow = sorted(((nodeid, s) for nodeid, s in tests.items() if s >= PHASE_S), key=lambda kv: -kv[1])
    rest = [s for s in tests.values() if s < PHASE_S]
    rows = [{"phase": nodeid.split("/")[-1], "seconds": round(s, 2)} for nodeid, s in slow]
    rows.append({"phase": f"the other {len(rest)} tests", "seconds": round(sum(rest), 2)})
    rows.append({"phase": "pytest start-up, collection and report",
                 "seconds": round(timing["wall_s"] - sum(tests.values()), 2)})
    return rows


def table(name: str, timing: dict) -> str:
    lines = [f"{name}: {timing['verdict']} (exit {timing['exit']}) in {timing['wall_s']:.1f} s wall",
             "", "| phase | seconds |", "| --- | --- |"]
    lines += [f"| {row['phase']} | {row['seconds']:.1f} |" for row in phases(timing)]
    lines += ["", "| suite | seconds |", "| --- | --- |"]
    lines += [f"| {suite} | {seconds:.1f} |" for suite, seconds in sorted(timing["suites"].items(),
                                                                         key=lambda kv: -kv[1])]
    if timing.get("timeline"):
        lines += ["", "| since the process started | seconds |", "| --- | --- |", *timeline_rows(timing["timeline"])]
    if timing["workloads"]:
        lines += ["", "| workload | started in | spare started s before | ready s | done s | exit s | processes | "
                      "last process started s |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for workload, t in timing["workloads"].items():
            workers = t.get("workers") or []
            last = max((w.get("started_s") or 0 for w in workers), default=None)
            lines.append(f"| {workload} | {t.get('started_in')} | {t.get('spare_waited_s')} | {t.get('ready_s')} | "
                         f"{t.get('done_s')} | {t.get('exit_s')} | {len(workers) or 1} | {last} |")
    return "\n".join(lines)


#: what the timed runs import: the package's location, version and a digest of its Python files (the checkout's
#: commit says which benchmark ran, not which package: a GPU machine runs the wheel it was given)
_PACKAGE_PROBE = """
import hashlib, json, pathlib, pytest_gpufabric as p
root = pathlib.Path(p.__file__).parent
digest = hashlib.sha256()
for f in sorted(root.rglob("*.py")):
    digest.update(f.relative_to(root).as_posix().encode() + bytes(1) + f.read_bytes())
print(json.dumps({"path": str(root), "version": p.__version__, "sha256": digest.hexdigest()}))
"""


def package_timed() -> dict | None:
    """The pytest_gpufabric the acceptance runs import (this interpreter, this PYTHONPATH), or None."""
    try:
        done = subprocess.run([sys.executable, "-c", _PACKAGE_PROBE], capture_output=True, text=True, timeout=60)
        return json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def _commit() -> str | None:
    """This checkout's commit (the benchmark's), where git and the repository are there (a GPU machine's copy may
    have neither)."""
    try:
        done = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def summary(timings: dict, burn_in: str | None) -> dict:
    """acceptance_time.last.json: the figures the goals are about, and the phases they are made of."""
    acceptance = timings.get("acceptance") or {}
    burn = timings.get("burn-in") or {}
    measure = timings.get("init-measure") or {}
    device, count, boards = device_of(acceptance.get("machine") or burn.get("machine"))
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": _commit(),
        "package": package_timed(),
        "device": device, "gpus": count, "boards": boards,
        "init_measure_s": round(measure["wall_s"], 1) if measure else None,
        "init_measure_exit": measure.get("exit"),
        "acceptance_wall_s": round(acceptance["wall_s"], 1) if acceptance else None,
        "acceptance_verdict": acceptance.get("verdict"), "acceptance_exit": acceptance.get("exit"),
        "burn_in": burn_in, "burn_in_s": burn.get("burn_in"),
        "burn_in_wall_s": round(burn["wall_s"], 1) if burn else None,
        "acceptance_phases": phases(acceptance) if acceptance else [],
        "acceptance_workloads": acceptance.get("workloads") or {},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="the profile to accept against (default with --measure: "
                                                        "the one it writes)")
    parser.add_argument("--measure", action="store_true", help="first time `gpufabric profile init --measure`")
    parser.add_argument("--burn-in", default=None, help="also time a run with --gpu-burn-in this long (e.g. 60s)")
    parser.add_argument("--out", type=Path, default=Path("reports/acceptance-time"))
    parser.add_argument("--last", type=Path, default=None,
                        help="where the summary goes (default: acceptance_time.<N>gpu.last.json beside this script, a "
                             "file per GPU count)")
    args = parser.parse_args()
    if args.profile is None and not args.measure:
        parser.error("give --profile, or --measure to accept against the profile it writes")
    timings: dict = {}
    profile = args.profile
    if args.measure:
        timings["init-measure"] = init_measure(args.out)
        print(f"profile init --measure: exit {timings['init-measure']['exit']} in "
              f"{timings['init-measure']['wall_s']:.1f} s wall", flush=True)
        profile = profile or timings["init-measure"]["profile"]
        if not Path(profile).is_file():
            print(f"no profile at {profile}: see {args.out / 'init-measure.log'}", file=sys.stderr)
            return 1
    timings["acceptance"] = run(profile, args.out / "acceptance", [])
    print(table("acceptance", timings["acceptance"]), flush=True)
    if args.burn_in:
        timings["burn-in"] = run(profile, args.out / "burn-in", ["--gpu-burn-in", args.burn_in, "-k", "burn_in"])
        print("\n" + table("burn-in", timings["burn-in"]), flush=True)
    text = "\n\n".join(table(name, timing) for name, timing in timings.items() if name != "init-measure")
    if "init-measure" in timings:
        text = f"profile init --measure: exit {timings['init-measure']['exit']} in " \
               f"{timings['init-measure']['wall_s']:.1f} s wall\n\n" + text
    (args.out / "timing.json").write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")
    (args.out / "timing.md").write_text(text + "\n", encoding="utf-8")
    last = summary(timings, args.burn_in)
    args.last = args.last or Path(__file__).with_name(f"acceptance_time.{last['gpus']}gpu.last.json")
    args.last.parent.mkdir(parents=True, exist_ok=True)
    args.last.write_text(json.dumps(last, indent=2) + "\n", encoding="utf-8")
    print(f"\n{last['device']}: init --measure {last['init_measure_s']} s, acceptance {last['acceptance_wall_s']} s "
          f"({last['acceptance_verdict']}), burn-in {last['burn_in']} in {last['burn_in_wall_s']} s wall; "
          f"written to {args.last}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
