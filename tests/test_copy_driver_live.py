"""The host copies through the CUDA driver read what torch's read, live on 1x H100 SXM 80GB
(tests/data/results/copy-driver-h100-x1): each figure within the run-to-run spread docs/margins.md gives for these
copies, and the acceptance's copy check reads the driver's records as it reads torch's."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

LIVE = Path(__file__).parent / "data" / "results" / "copy-driver-h100-x1"
#: docs/margins.md's run-to-run spread of 1 GiB pinned copies on one H100: host to device, device to host
SPREAD = {"host_to_device": 0.049, "device_to_host": 0.023}


def _rates(api: str, direction: str) -> list[float]:
    rows = [json.loads((LIVE / f"{api}-{n}.json").read_text())["host_device"][0] for n in (1, 2, 3)]
    return [row[direction]["gbps"] for row in rows]


@pytest.mark.parametrize("direction", sorted(SPREAD))
def test_the_driver_copies_read_as_torchs_within_their_spread(direction):
    driver, torch = _rates("driver", direction), _rates("torch", direction)
    assert all(50 < rate < 64 for rate in driver + torch)  # PCIe gen 5 x16: 64 GB/s a direction
    apart = abs(statistics.median(driver) - statistics.median(torch)) / statistics.median(torch)
    assert apart < SPREAD[direction], (driver, torch)


def test_both_ran_on_the_same_board_and_the_driver_run_imported_no_torch():
    for n in (1, 2, 3):
        driver = json.loads((LIVE / f"driver-{n}.json").read_text())
        torch = json.loads((LIVE / f"torch-{n}.json").read_text())
        assert driver["boards"] == torch["boards"] and driver["boards"][0]["serial"] == "1651024079297"
        assert driver["host_device_api"] == "cuda driver" and driver["torch_version"] is None
        assert driver["gpu_to_gpu"] == [] and driver["host_device"][0]["cpu_affinity"] == list(range(16))


def test_the_driver_runs_took_less_wall_time():
    wall = {}
    for line in (LIVE / "summary.txt").read_text().splitlines():
        name, _, time_ms = line.split()[:3]
        wall[name] = int(time_ms.removeprefix("wall_s=").removesuffix("ms")) / 1000
    assert max(wall[f"driver-{n}"] for n in (1, 2, 3)) < min(wall[f"torch-{n}"] for n in (1, 2, 3))
