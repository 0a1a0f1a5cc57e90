"""How long a single-GPU acceptance takes, suite by suite, and whether a burn-in of D takes at most D + 15 s.

Runs `pytest --gpu-profile PROFILE` on this machine (live: it needs an NVIDIA GPU) once without a burn-in and, with
`--burn-in 60s`, once with it; reads each test's seconds (set-up, call and teardown: where a suite's measurement is
made) from the results JSON and prints them per suite, with the run's wall-clock time. Writes the results and the
table under --out.

    python3 benchmarks/acceptance_time.py --profile profiles/h100-sxm-x1.yaml --burn-in 60s --out /tmp/timing

Goals (issue 22): the acceptance without burn-in in at most 45 s on nvidia-h100-x1; a 60 s burn-in in at most 75 s
of wall time in all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def run(profile: str, out: Path, extra: list[str]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpu-profile", profile,
                           "--gpu-report-dir", str(out), *extra], capture_output=True, text=True)
    wall = time.monotonic() - started
    (out / "pytest.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    results = json.loads((out / "gpufabric-results.json").read_text(encoding="utf-8"))
    suites: dict[str, float] = {}
    for nodeid, seconds in results["durations"].items():
        suite = nodeid.split("::")[0].rsplit("/", 1)[-1]
        suites[suite] = suites.get(suite, 0.0) + seconds
    return {"wall_s": wall, "exit": done.returncode, "verdict": results["summary"]["verdict"],
            "reason": results["summary"]["verdict_reason"], "suites": suites,
            "burn_in": results.get("burn_in", {}).get("elapsed_s"), "workloads": workload_timings(out)}


def workload_timings(out: Path) -> dict[str, dict]:
    """Where each recorded workload's time went, as the runner saw it (runner.run_workload's ``runner``): started
    in a spare or cold, how long before the hand-over that spare was started, the seconds to its ready and done
    marks and to its exit. Read from the measurement files the run wrote to its report folder."""
    timings = {}
    for path in sorted(out.glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("runner"), dict):
            timings[path.stem] = record["runner"]
    return timings


def table(name: str, timing: dict) -> str:
    lines = [f"{name}: {timing['verdict']} (exit {timing['exit']}) in {timing['wall_s']:.1f} s wall",
             "| suite | seconds |", "| --- | --- |"]
    lines += [f"| {suite} | {seconds:.1f} |" for suite, seconds in sorted(timing["suites"].items(),
                                                                         key=lambda kv: -kv[1])]
    if timing["workloads"]:
        lines += ["", "| workload | started in | spare started s before | ready s | done s | exit s |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {name} | {t.get('started_in')} | {t.get('spare_waited_s')} | {t.get('ready_s')} | "
                  f"{t.get('done_s')} | {t.get('exit_s')} |" for name, t in timing["workloads"].items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True)
    parser.add_argument("--burn-in", default=None, help="also time a run with --gpu-burn-in this long (e.g. 60s)")
    parser.add_argument("--out", type=Path, default=Path("reports/acceptance-time"))
    args = parser.parse_args()
    timings = {"acceptance": run(args.profile, args.out / "acceptance", [])}
    if args.burn_in:
        timings["burn-in"] = run(args.profile, args.out / "burn-in", ["--gpu-burn-in", args.burn_in, "-k",
                                                                      "burn_in"])
    text = "\n\n".join(table(name, timing) for name, timing in timings.items())
    print(text)
    (args.out / "timing.json").write_text(json.dumps(timings, indent=2) + "\n", encoding="utf-8")
    (args.out / "timing.md").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
