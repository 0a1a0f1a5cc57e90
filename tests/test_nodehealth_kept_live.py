"""gpufabric health as a node keeps running it, live on 1x H100 SXM 80GB (tests/data/results/health-live-h100-x1,
hardware/health-live.sh): both tiers within their times, a planted quick-tier fault drained and kept drained by the
passive runs and a clean quick run after it, lifted only by --clear, and the textfiles' series the same whatever the
verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pytest_gpufabric.nodehealth.metrics import prom_text

LIVE = Path(__file__).parent / "data" / "results" / "health-live-h100-x1"
SERIAL = "1651724081675"  # read off log.txt's run and every JSON's gpus


def _run(name: str) -> dict:
    return json.loads((LIVE / f"{name}.json").read_text(encoding="utf-8"))


def _timings() -> dict[str, tuple[int, float]]:
    times = {}
    for line in (LIVE / "timings.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith(("PASS", "FAIL")):
            continue
        name, rc, wall = line.split()[:3]
        times[name] = (int(rc.removeprefix("rc=")), float(wall.removeprefix("wall_s=")))
    return times


def test_both_tiers_met_their_times_live():
    times = _timings()
    passive = [wall for name, (_, wall) in times.items() if re.fullmatch(r"passive-(\d|after-\d|cleared)", name)]
    quick = [wall for name, (_, wall) in times.items() if name.startswith("quick-")]
    assert len(passive) == 7 and max(passive) <= 2.0
    assert len(quick) == 4 and max(quick) <= 20.0
    verdicts = [line for line in (LIVE / "timings.txt").read_text().splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == 4 and all(line.startswith("PASS") for line in verdicts)


def test_the_planted_fault_stays_drained_until_cleared():
    times = _timings()
    planted = _run("quick-planted")
    assert planted["verdict"] == "DRAIN" and times["quick-planted"][0] == 1
    assert {(f["check"], f["serial"], f["remedy_short"]) for f in planted["findings"]} == {
        ("quick-gemm", SERIAL, "rma"), ("quick-memory-pattern", SERIAL, "rma")}
    for name in ("passive-after-1", "passive-after-2", "passive-after-3"):
        run = _run(name)
        assert run["tier"] == "passive" and run["verdict"] == "DRAIN" and times[name][0] == 1
        assert [f["check"] for f in run["findings"]] == ["quick-gemm", "quick-memory-pattern"]
        assert all("a quick tier run verifies it (this was a passive run)" in f["detail"] for f in run["findings"])
    after = _run("quick-after")
    # the clean quick run found nothing new, yet an rma finding waits for a reset or a reboot
    assert after["tier"] == "quick" and after["verdict"] == "DRAIN" and times["quick-after"][0] == 1
    assert "GPU0: memory pattern over 1.00 GiB (97 passes), no mismatch" in after["notes"]
    assert all("no reset or reboot since it was seen (boot id unchanged)" in f["detail"] for f in after["findings"])
    cleared = _run("passive-cleared")
    assert cleared["verdict"] == "HEALTHY" and cleared["findings"] == [] and times["passive-cleared"][0] == 0
    state = json.loads((LIVE / "health-state.json").read_text(encoding="utf-8"))
    assert state["drains"] == []
    assert {(c["check"], c["tier"], c["by"]) for c in state["cleared"]} == {
        ("quick-gemm", "quick", "health-live"), ("quick-memory-pattern", "quick", "health-live")}


def _series(text: str) -> list[str]:
    """Each sample's name and labels, without its value or timestamp."""
    return [line.rsplit("} ", 1)[0] + "}" if "}" in line else line.split()[0]
            for line in text.splitlines() if line and not line.startswith("#")]


def test_the_textfile_series_are_the_same_healthy_or_drained():
    """The passive textfile recorded live (cleared, healthy) has exactly the series the drained passive runs write:
    a drain changes values, never the set of series an SRE's dashboards and alerts join on."""
    recorded = _series((LIVE / "gpufabric-health-passive.prom").read_text(encoding="utf-8"))
    assert 'check="quick-tier"' in "".join(recorded) and all("what=" not in s for s in recorded)
    for name in ("passive-1", "passive-after-1", "passive-after-3", "passive-cleared"):
        assert _series(prom_text(_run(name), 0.0)) == recorded, name
    drained = prom_text(_run("passive-after-1"), 0.0)
    # the held quick-tier drain shows in the passive file's verdict and counts (its checks' series are the quick file's)
    assert 'gpufabric_health_verdict{tier="passive",verdict="DRAIN"} 1' in drained
    assert 'gpufabric_health_findings{tier="passive",severity="drain"} 2' in drained
    quick = _series((LIVE / "gpufabric-health-quick.prom").read_text(encoding="utf-8"))
    assert _series(prom_text(_run("quick-1"), 0.0)) == quick
