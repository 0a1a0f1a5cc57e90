"""What the health watchdog costs a user's own tests: 1 and 200 trivial tests under `--gpu-profile`, live, with the
plugin and without it (`-p no:gpufabric`), alternated so that drift hits both alike.

ms per test = (the 200-test run - the 1-test run) / 199, so start-up (imports, NVML init, discovery) is not counted
in it. The shipped suites are deselected (`-m "not gpufabric_promise"`): only the user's tests run, each bracketed
by the watchdog's reads. Needs an NVIDIA GPU and a profile of this machine (`gpufabric profile init -o P.yaml`).

    python3 benchmarks/watchdog_cost.py --profile P.yaml --rounds 3 --out benchmarks/watchdog_cost.last.json

Goal (issue 31): at most 20 ms per test on 4 GPUs with 18 NVLinks each, and the same on 8.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the run sizes compared: one test, and many (--tests)
COUNTS = [1, 200]


def one_run(tests: Path, profile: str | None, report_dir: Path) -> float:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    args += (["--gpu-profile", profile, "--gpu-report-dir", str(report_dir), "-m", "not gpufabric_promise"]
             if profile else ["-p", "no:gpufabric"])
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 6):  # 6: INCOMPLETE, the suites deselected; anything else is a broken run
        raise SystemExit(f"pytest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return seconds


def machine() -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            links = 0
            for link in range(18):
                try:
                    links += pynvml.nvmlDeviceGetNvLinkState(handle, link) == 1
                except pynvml.NVMLError:
                    break
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append({"name": name.decode() if isinstance(name, bytes) else name, "nvlinks": links})
        return {"device": f"{len(gpus)}x {gpus[0]['name']}" if gpus else "no GPU", "gpus": len(gpus),
                "nvlinks_per_gpu": max((g["nvlinks"] for g in gpus), default=0)}
    finally:
        pynvml.nvmlShutdown()


def measure(profile: str, rounds: int) -> dict:
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for count in COUNTS:
            folder = Path(tmp) / f"tests{count}"
            folder.mkdir()
            (folder / "test_trivial.py").write_text(
                f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\ndef test_trivial(i):\n"
                "    assert i >= 0\n")
            folders[count] = folder
        for _ in range(rounds):
            for variant, given in (("plugin", profile), ("baseline", None)):
                for count in COUNTS:
                    times.setdefault((variant, count), []).append(
                        one_run(folders[count], given, Path(tmp) / "reports"))
    per_test = {}
    for variant in ("plugin", "baseline"):
        per_test[variant] = [(big - small) / (COUNTS[1] - COUNTS[0]) * 1000
                             for small, big in zip(times[(variant, COUNTS[0])], times[(variant, COUNTS[1])],
                                                   strict=True)]
    return {"rounds": rounds, "ms_per_test": round(statistics.median(per_test["plugin"]), 2),
            "baseline_ms_per_test": round(statistics.median(per_test["baseline"]), 2),
            "ms_per_test_each_round": [round(v, 2) for v in per_test["plugin"]],
            "baseline_ms_per_test_each_round": [round(v, 2) for v in per_test["baseline"]],
            "seconds": {f"{variant}-{count}": [round(t, 3) for t in values]
                        for (variant, count), values in times.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="a profile of this machine (gpufabric profile init)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tests", type=int, default=200, help="the larger run's trivial tests (default 200)")
    parser.add_argument("--out", type=Path, help="write the result here as JSON")
    args = parser.parse_args()
    COUNTS[1] = args.tests
    result = {**machine(), **measure(args.profile, args.rounds), "date": time.strftime("%Y-%m-%d")}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ms_per_test"] <= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
