"""The single-GPU acceptance recorded on 1x H100 SXM 80GB (tests/data/results/single-gpu-on-h100-x1/README.md):
its bundles replay against the profile `profile init --measure` wrote there, to the live verdict and figures; the
planted memory fault was rejected naming the board; `profile init --measure --replay` writes, from the bundle, a
profile that accepts it with no promise left unchecked; the report signed live on the machine verifies, and one
digit changed in it does not; the recorded run times are the ones docs/recorded-evidence.md quotes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "results" / "single-gpu-on-h100-x1"
BUNDLE = DATA / "bundles" / "h100-x1-diagnostics"
MEASURED_BUNDLE = DATA / "bundles" / "h100-x1-measured"  # run-4's
SERIAL = "1793226006610"  # the board of run-2 (nvidia-smi -q, and every workload's own NVML read)


#: the arrival suite came after these live runs, and the bundles hold no kernel log: every replay waives xid-events
#: in writing, and the arrival promises are checked apart from the live runs' own (_replay)
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the single-GPU tests"
ARRIVAL = ("gpu-health", "xid-events")


def _replay(pytester: pytest.Pytester, profile: Path, bundle: Path = BUNDLE) -> dict:
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", str(bundle), "--gpu-waive",
                                NO_KERNEL_LOG)
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    document["exit"] = result.ret
    arrival = {p["id"]: p["outcome"] for p in document["promises"] if p["id"].split("[")[0] in ARRIVAL}
    assert arrival == {"gpu-health[GPU0]": "passed", "xid-events": "waived"}  # the H100 arrived healthy
    return document


def _promises(document: dict) -> dict[str, str]:
    return {p["id"]: p["outcome"] for p in document["promises"] if p["id"].split("[")[0] not in ARRIVAL}


def _check(document: dict, name: str) -> dict:
    (found,) = [c for c in document["checks"] if c["name"] == name]
    return found


def test_the_bundle_replays_to_the_live_acceptance(pytester: pytest.Pytester):
    live = json.loads((RECORDED / "run-2" / "acceptance-results.json").read_text())
    replay = _replay(pytester, RECORDED / "run-2" / "measured.yaml")
    assert replay["summary"]["verdict"] == live["summary"]["verdict"] == "ACCEPTED" and replay["exit"] == 0
    assert _promises(replay) == _promises(live)
    assert len(_promises(replay)) == 25 and set(_promises(replay).values()) == {"passed"}
    for name in ("hbm-bandwidth", "memory-pattern", "power-hold", "pcie-under-load"):
        assert _check(replay, name)["verdict"] == _check(live, name)["verdict"] == "passed"
        assert _check(replay, name)["found"] == _check(live, name)["found"]


def test_the_recorded_figures_are_the_ones_read_by_hand():
    hbm = json.loads((BUNDLE / "hbm.json").read_text())["gpus"][0]
    assert hbm["serial"] == SERIAL and round(hbm["best_gbps"], 1) == 3275.1 and hbm["peak_gbps"] == 3352.32
    assert round(hbm["copy_gbps"], 1) == 3020.2 and round(hbm["read_gbps"], 1) == 3090.4
    pattern = json.loads((BUNDLE / "memory-pattern.json").read_text())["gpus"][0]
    assert (pattern["tested_bytes"], pattern["total_bytes"], pattern["mismatches"]) == (74742464512, 85017493504, 0)
    power = json.loads((BUNDLE / "power-hold.json").read_text())["gpus"][0]
    assert power["summary"]["sm_clock_mhz_median_at_limit"] == 1365.0 and power["power_limit_w"] == 700.0
    assert power["summary"]["reasons_seen"] == {"sw_power_cap": 1.0} and power["summary"]["samples"] == 24
    pcie = json.loads((BUNDLE / "pcie-load.json").read_text())["gpus"][0]
    assert pcie["link"]["under_load"]["gen_reads"] == {"5": 202} and pcie["replay_counter"]["rise"] == 0
    assert (round(pcie["h2d_gbps"], 2), round(pcie["d2h_gbps"], 2)) == (55.23, 55.12)


def test_the_planted_memory_fault_was_rejected_naming_the_board():
    for run in ("run-1", "run-2", "run-3", "run-4", "run-5", "run-6"):
        document = json.loads((RECORDED / run / "planted-memory-fault-results.json").read_text())
        assert document["summary"]["verdict"] == "REJECTED" and document["summary"]["exit_code"] == 1
        assert _promises(document) == {"memory-pattern[GPU0]": "failed"}
        message = _check(document, "memory-pattern")["message"]
        serial = json.loads((RECORDED / run / "planted-memory-fault-pattern.json").read_text())["gpus"][0]["serial"]
        assert f"GPU0 (serial {serial})" in message and "planted on purpose" in message
        assert "offset 37371232256 (0x8b37fc000) in walking_ones" in message and "bit(s) 17 flipped" in message


def test_the_profile_measured_there_says_where_each_floor_came_from():
    profile = (RECORDED / "run-2" / "measured.yaml").read_text()
    document = yaml.safe_load(profile)
    assert document["memory_bandwidth"]["min"] == "2945 GB/s"  # 0.9 x 3272, the lowest of 3280, 3272, 3280
    assert "3280, 3272, 3280 GB/s (spread 0.3%); NVML's peak 3352 GB/s; floor 0.9 x the lowest" in profile
    assert document["power"] == {"seconds": 6, "min_sm_clock_mhz": 1235}  # int(0.9 x 1372)
    assert "# Published reference h100-sxm (NVIDIA H100 SXM5 80GB): 80 GB sold" in profile


def test_profile_init_measure_from_the_bundle_accepts_it_with_nothing_unchecked(pytester: pytest.Pytester):
    from pytest_gpufabric.cli import main

    output = pytester.path / "from-bundle.yaml"
    assert main(["profile", "init", "--measure", "--replay", str(BUNDLE), "-o", str(output)]) == 0
    written = yaml.safe_load(output.read_text())
    assert written["memory_bandwidth"]["min"] == "2948 GB/s"  # 0.9 x 3275.1
    assert written["power"]["min_sm_clock_mhz"] == 1228  # int(0.9 x 1365)
    assert written["pcie_load"] == {"seconds": 2, "max_replay_rise": 0, "gen": 5, "width": 16}
    assert written["bandwidth"]["copy"]["host_to_device"] == {"min": "49.5 GB/s"}  # 0.9 x 54.97
    assert written["memory"]["lms"][0]["threshold"] == "8 MiB" and "memory_pattern" in written
    assert "burn_in" not in written  # the bundle holds no burn-in log: no GEMM rate to promise
    replay = _replay(pytester, output)
    assert replay["summary"]["verdict"] == "ACCEPTED" and replay["exit"] == 0
    assert set(_promises(replay).values()) == {"passed"} and not replay["not_run"]


def test_the_bundle_recorded_after_the_speed_work_replays_to_its_live_acceptance(pytester: pytest.Pytester):
    live = json.loads((RECORDED / "run-4" / "acceptance-results.json").read_text())
    replay = _replay(pytester, RECORDED / "run-4" / "measured.yaml", MEASURED_BUNDLE)
    assert replay["summary"]["verdict"] == live["summary"]["verdict"] == "ACCEPTED" and replay["exit"] == 0
    assert _promises(replay) == _promises(live) and len(_promises(replay)) == 25
    for name in ("hbm-bandwidth", "memory-pattern", "power-hold", "pcie-under-load"):
        assert _check(replay, name)["found"] == _check(live, name)["found"]


def test_the_power_hold_warm_up_ended_at_the_limit_and_the_clocks_are_as_before():
    """run-4's bundle (values read off power-hold.json by hand): the warm-up ended after 1.053 s of its 3 s, once
    NVML read the GPU at its limit, and the window held 1387.5 MHz at the limit (other boards' 3 s warm-ups read
    1365-1372 MHz; one board with both warm-ups alternated showed no consistent difference: the next test)."""
    power = json.loads((MEASURED_BUNDLE / "power-hold.json").read_text())
    assert (power["warmup_s"], power["warmup_max_s"]) == (1.053, 3.0)
    summary = power["gpus"][0]["summary"]
    assert summary["sm_clock_mhz_median_at_limit"] == 1387.5 and summary["reasons_seen"] == {"sw_power_cap": 1.0}
    assert summary["at_limit_fraction"] >= 0.9 and summary["samples"] == 24


def test_the_recorded_acceptance_times():
    """timing.json of each run, read by hand: run-3 (spares by need, before the faster pinning) 49.5 s; run-4 to
    run-6 (with it) 38.4, 41.1 and 41.1 s, within the 45 s goal; the 60 s burn-ins 71.2, 69.0, 69.5 and 69.6 s,
    within 75 s."""
    walls = {run: json.loads((RECORDED / run / "timing.json").read_text())
             for run in ("run-3", "run-4", "run-5", "run-6")}
    assert {run: round(t["acceptance"]["wall_s"], 1) for run, t in walls.items()} == \
        {"run-3": 49.5, "run-4": 38.4, "run-5": 41.1, "run-6": 41.1}
    assert {run: round(t["burn-in"]["wall_s"], 1) for run, t in walls.items()} == \
        {"run-3": 71.2, "run-4": 69.0, "run-5": 69.5, "run-6": 69.6}
    assert all(t["acceptance"]["verdict"] == "ACCEPTED" for t in walls.values())
    results = {run: json.loads((RECORDED / run / "acceptance-results.json").read_text()) for run in walls}
    assert all(r["summary"]["verdict"] == "ACCEPTED" for r in results.values())
    # where the memory workload's time went: offloading at 0 % pins the pool, 8.1 s before the faster pinning
    offloading = {run: round(json.loads((RECORDED / run / "log.txt").read_text().split("memory phases ", 1)[1]
                                        .split("\n", 1)[0].replace("'", '"'))["offload >= 8388608 B at 0.0"], 2)
                  for run in ("run-3", "run-4")}
    assert offloading == {"run-3": 8.13, "run-4": 2.96}
    spare_timings = walls["run-4"]["acceptance"]["workloads"]
    assert set(spare_timings) == {"hbm", "memory-pattern", "memory", "pcie-load", "power-hold"}
    assert all(t["started_in"] == "spare" for t in spare_timings.values())
    assert spare_timings["hbm"]["exit_s"] == 0.913


LIVE = RECORDED / "run-4" / "live"


def test_the_report_signed_live_on_the_machine_verifies_and_a_changed_digit_does_not(tmp_path):
    """`gpufabric accept --sign-key` on 1x H100 SXM 80GB wrote these with a key made for that run; its public half
    came back with them. They are whole and signed by that key, but results format 2 that embeds no profile cannot
    be judged again, and neither names a run id: verify does not call them valid (docs/verdict.md)."""
    import shutil
    import subprocess
    import sys

    def verify(*paths: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest_gpufabric.cli", "verify", *map(str, paths), "--key",
                               str(LIVE / "run-pub.pem")], capture_output=True, text=True, timeout=120)

    done = verify(LIVE / "gpufabric-results.json", LIVE / "acceptance.html")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count(": INVALID") == 2 and "the signature" not in done.stdout and "changed" not in done.stdout
    assert done.stdout.count("  cannot be judged again: it is results format 2 and embeds no profile: ") == 2
    assert done.stdout.count("NOT VALID TOGETHER: cannot show they are one run: no run id") == 2
    document = json.loads((LIVE / "gpufabric-results.json").read_text())
    assert document["summary"]["verdict"] == "ACCEPTED" and document["run"]["mode"] == "live"
    page = (LIVE / "acceptance.html").read_text(encoding="utf-8")
    assert "ACME Labs" in page and "pytest-gpufabric maintainers" in page
    changed = tmp_path / "gpufabric-results.json"
    text = (LIVE / "gpufabric-results.json").read_text()
    hbm = next(c for c in document["checks"] if c["name"] == "hbm-bandwidth")
    before = f'"best_gbps": {hbm["found"]["best_gbps"]}'
    assert before in text
    shutil.copy(LIVE / "gpufabric-results.json", changed)
    changed.write_text(text.replace(before, before[:-1] + ("1" if before[-1] != "1" else "2"), 1))
    done = verify(changed)
    assert done.returncode == 1 and "hbm-bandwidth" in done.stdout and "changed" in done.stdout


WARMUP_PROBE = DATA / "results" / "warmup-probe-h100-x1" / "warmup_probe.json"


def test_the_shorter_warm_up_reads_the_clock_the_whole_one_reads():
    """hardware/warmup_probe.py on one board (its README, read by hand): both warm-ups alternated three times;
    the medians at the limit overlap, with no consistent sign between the pairs."""
    runs = json.loads(WARMUP_PROBE.read_text())["runs"]
    clocks = {name: [r["summary"]["sm_clock_mhz_median_at_limit"] for r in runs if r["warm_up"] == name]
              for name in ("whole 3 s", "until at the limit")}
    assert clocks == {"whole 3 s": [1335.0, 1350.0, 1357.5], "until at the limit": [1372.5, 1342.5, 1350.0]}
    differences = [short - whole for whole, short in zip(clocks["whole 3 s"], clocks["until at the limit"],
                                                          strict=True)]
    assert min(differences) < 0 < max(differences)
    assert [r["warmup_s"] for r in runs if r["warm_up"] == "until at the limit"] == [1.104, 1.003, 1.053]
    assert all(r["summary"]["at_limit_fraction"] == 1.0 and r["summary"]["reasons_seen"] == {"sw_power_cap": 1.0}
               for r in runs)


def _offloading_ratios() -> dict[str, list[float]]:
    """Every offloading slowdown recorded on 1x H100 SXM 80GB with the 4 GiB workload, by threshold: acceptances
    (live and their signed reports), `--measure` runs (the leases after the first, which ran a 16 GiB workload)
    and the pinning probe."""
    import re

    ratios: dict[str, list[float]] = {"8 MiB": [], "64 MiB": []}
    documents = [*sorted(RECORDED.glob("run-*/acceptance-results.json")), *sorted(RECORDED.glob("run-*/live/*.json"))]
    for path in documents:
        for check in json.loads(path.read_text()).get("checks", []):
            if check["name"] == "memory-lms" and check["found"]:
                key = "8 MiB" if ">= 8.00 MiB" in check["subject"] else "64 MiB"
                ratios[key].append(check["found"]["ratio_vs_baseline"])
    probe = json.loads((DATA / "results" / "offload-pinning-probe-h100-x1" / "offload_pinning_probe.json").read_text())
    for run in probe["runs"]:
        for lms in run["lms"]:
            ratios["8 MiB" if lms["threshold_bytes"] == 8 << 20 else "64 MiB"].append(lms["ratio_vs_baseline"])
    for lease in sorted((RECORDED / "profile-init-measure").glob("lease-*.yaml")):
        if lease.name == "lease-8.yaml":
            continue
        for found in re.finditer(r">= (8|64) MiB past \d+%[^:]*: (\d+\.\d+)x the batch-1", lease.read_text()):
            ratios[f"{found.group(1)} MiB"].append(float(found.group(2)))
    return ratios


def test_the_offloading_ceiling_covers_every_ratio_recorded_of_one_healthy_step():
    """run-6: the board's own `--measure` read 3.04x, its ceiling 1.5x that (4.56x) rejected its acceptance minutes
    later at 4.98x (81.3 ms per image against a batch-1 step of 16.3 ms, which had read 27.6 ms in the run before).
    The ceiling is now 2x the measured ratio: wider than the spread of every recorded ratio of one step
    (docs/margins.md), so no recorded healthy reading would have been rejected by any recorded measurement."""
    from pytest_gpufabric.profile.measure import OFFLOAD_ALLOWANCE

    live = json.loads((RECORDED / "run-6" / "live" / "gpufabric-results.json").read_text())
    assert live["summary"]["verdict"] == "REJECTED" and _promises(live)["large-model-support[8MiB-0]"] == "failed"
    (rejected,) = [c for c in live["checks"] if c["verdict"] == "failed"]
    assert "81.3 ms per image vs 16.3 ms at batch 1 (4.98x)" in rejected["message"]
    assert "slower than the 4.56x allowed" in rejected["message"]
    before = json.loads((RECORDED / "run-6" / "acceptance-memory.json").read_text())
    assert round(before["baseline"]["time_per_image_s"] * 1e3, 1) == 27.6
    assert round(before["lms"][0]["time_per_image_s"] * 1e3, 1) == 85.3
    ratios = _offloading_ratios()
    assert {key: len(values) for key, values in ratios.items()} == {"8 MiB": 23, "64 MiB": 23}
    assert {key: (round(min(v), 2), round(max(v), 2)) for key, v in ratios.items()} == {
        "8 MiB": (2.84, 4.98), "64 MiB": (1.56, 2.99)}
    assert all(max(values) <= min(values) * OFFLOAD_ALLOWANCE for values in ratios.values())
    assert round(3.04 * OFFLOAD_ALLOWANCE, 2) >= 4.98


def test_the_offloading_failure_says_the_baseline_can_be_what_moved():
    """run-6's live memory measurement judged by today's check against its profile's old 4.56x ceiling: still
    failed (the ceiling is the profile's), and the message now points at the batch-1 step as well as the link."""
    from pytest_gpufabric.checks.memory import check_lms

    result = json.loads((RECORDED / "run-6" / "live" / "memory.json").read_text())
    spec = {"threshold": "8 MiB", "usage_fraction": 0.0, "max_slowdown": 4.56}
    run = result["lms"][0]
    outcome = check_lms(spec, run, result["baseline"])
    assert outcome.verdict == "failed" and "(4.98x)" in outcome.message
    assert "slow CPU-GPU link" in outcome.message and "batch-1 step alone runs fast" in outcome.message
    assert check_lms({**spec, "max_slowdown": round(3.04 * 2.0, 2)}, run, result["baseline"]).verdict == "passed"


def test_a_partial_offload_is_held_to_the_ceiling_of_offloading_everything():
    """On 2x H100 SXM (tests/data/results/acceptance-time-h100-x2): init --measure read the offload of tensors
    >= 64 MiB past half the budget at 1.97x and 1.58x, the acceptances right after it at 10.84x and 4.00x, while the
    offload of every tensor >= 8 MiB stayed at 3.41-4.63x. A partial offload is bounded by offloading everything:
    its ceiling is at least that one's, so run-2's healthy 4.00x passes (7.48 and 6.82 before this rule: 3.94, 3.16)."""
    from pytest_gpufabric.profile.measure import Measured, _bound_partial_offload

    runs = DATA / "results" / "acceptance-time-h100-x2"
    for run, full, partial, seen in (("run-1", 7.48, 3.94, 10.84), ("run-2", 6.82, 3.16, 4.00)):
        written = yaml.safe_load((runs / run / "measured.yaml").read_text())["memory"]["lms"]
        assert [s["max_slowdown"] for s in written] == [full, partial]  # as init wrote them then
        failed = next(p for p in json.loads((runs / run / "acceptance-results.json").read_text())["promises"]
                      if p["id"] == "large-model-support[64MiB-0.5]")
        assert failed["outcome"] == "failed" and f"({seen:.2f}x)" in failed["reason"]
        specs = [dict(s) for s in written]
        _bound_partial_offload(Measured(), specs)
        assert [s["max_slowdown"] for s in specs] == [full, full]
        assert (seen <= full) == (run == "run-2")  # run-1's single slow step (216.9 ms an image) still fails
    # run-3, with both changes, on the same kind of machine: the profile init wrote, then ACCEPTED
    run3 = runs / "run-3"
    assert [s["max_slowdown"] for s in yaml.safe_load((run3 / "measured.yaml").read_text())["memory"]["lms"]] \
        == [6.83, 6.83]
    assert json.loads((run3 / "acceptance-results.json").read_text())["summary"]["verdict"] == "ACCEPTED"


def test_the_restructured_plugin_accepted_the_same_machine_live():
    """run-4 (2x H100 SXM, after issue 33's restructuring), read by hand from its log: init 64.6 s, acceptance
    82.3 s ACCEPTED, the quick health check HEALTHY on both runs."""
    run = DATA / "results" / "acceptance-time-h100-x2" / "run-4"
    last = json.loads((run / "acceptance_time.last.json").read_text(encoding="utf-8"))
    assert (last["init_measure_s"], last["init_measure_exit"]) == (64.6, 0)
    assert (last["acceptance_wall_s"], last["acceptance_verdict"], last["acceptance_exit"]) == (82.3, "ACCEPTED", 0)
    assert "acceptance 82.3 s (ACCEPTED)" in (run / "log.txt").read_text(encoding="utf-8")
    for n in (1, 2):
        health = json.loads((run / f"health-quick-{n}.json").read_text(encoding="utf-8"))
        assert (health["verdict"], health["exit_code"], health["tier"]) == ("HEALTHY", 0, "quick")
