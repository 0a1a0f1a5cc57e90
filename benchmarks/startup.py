"""Start-up cost of the plugin in a project that has no profile: `pytest` with it loaded vs `-p no:gpufabric`.

The goal (issue: foundation): within 30 % of `-p no:gpufabric`. Runs pytest as a fresh process each time, in a
temporary project with one trivial test, alternating the two variants so drift hits both alike.

    python benchmarks/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {"plugin loaded": [], "-p no:gpufabric": ["-p", "no:gpufabric"]}


def measure(runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        for _ in range(runs + 1):  # the first round warms the file cache and is dropped
            for name, extra in VARIANTS.items():
                start = time.perf_counter()
                subprocess.run(base + extra, cwd=tmp, check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    return {name: values[1:] for name, values in times.items()}


def plugin_import_ms() -> float:
    """The plugin module's own import time (cumulative, pytest already imported), from `python -X importtime`."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest; import pytest_gpufabric.plugin"],
        check=True, capture_output=True, text=True,
    )
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "pytest_gpufabric.plugin":
            return int(parts[1]) / 1000
    raise RuntimeError("pytest_gpufabric.plugin not in -X importtime output")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    times = measure(args.runs)
    without = statistics.median(times["-p no:gpufabric"])
    print("| variant | median s | min s | runs |\n| --- | --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {len(values)} |")
    ratio = statistics.median(times["plugin loaded"]) / without
    print(f"\nplugin loaded / -p no:gpufabric = {ratio:.3f} (goal <= 1.30)")
    print(f"import of pytest_gpufabric.plugin: {plugin_import_ms():.1f} ms")
    return 0 if ratio <= 1.30 else 1


if __name__ == "__main__":
    sys.exit(main())
