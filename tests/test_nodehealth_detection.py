"""Issue 43's detection gaps: the quick tier honours the job's GPUs, counters judged by their rate, the row remapper
nearly full, corrected ECC, the InfoROM.

Every record is a copy of a shipped bundle's health.json with the reading planted (as tests/test_nodehealth.py
plants them): the shipped records predate these readings, so a planted copy carries what a live read records.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from test_nodehealth import CPU_PROFILE, X2, X4, gpu, planted

from pytest_gpufabric.cli import main
from pytest_gpufabric.nodehealth import output
from pytest_gpufabric.nodehealth.baseline import resolve_baseline
from pytest_gpufabric.nodehealth.finding import DRAIN
from pytest_gpufabric.nodehealth.quick_gpus import quick_gpus
from pytest_gpufabric.nodehealth.record import load_health_file
from pytest_gpufabric.nodehealth.state import HealthState, reconcile

RECORDED_X4 = datetime.fromisoformat(json.loads((X4 / "health.json").read_text())["recorded_at"]).timestamp()


@pytest.fixture(autouse=True)
def node(tmp_path, monkeypatch):
    """No health or job settings from the environment; the boot id a file of the test's."""
    monkeypatch.chdir(tmp_path)
    for name in ("GPUFABRIC_HEALTH_PROFILE", "GPUFABRIC_HEALTH_ACCEPTED", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS",
                 "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFABRIC_STATE_DIR", str(tmp_path / "node-state"))
    (tmp_path / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0001\n")
    monkeypatch.setenv("GPUFABRIC_BOOT_ID_FILE", str(tmp_path / "boot_id"))
    return tmp_path


def processes(index: int, *pids: int):
    """Every GPU's compute process list recorded (empty), GPU ``index`` running ``pids``."""
    def edit(data: dict) -> None:
        for g in data["gpus"]:
            g["compute_processes"] = []
        gpu(data, index)["compute_processes"] = [{"pid": p, "used_memory_bytes": 1 << 30} for p in pids]
    return edit


# ---------------------------------------------------------------------------------------------------------------
# 1. the quick tier honours the job's GPUs


def test_the_job_variables_and_other_processes_decide_the_quick_tiers_gpus(tmp_path):
    record = load_health_file(planted(tmp_path, processes(2, 4242)) / "health.json")
    selected, skipped, notes = quick_gpus(record, {"SLURM_JOB_GPUS": "1,2", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                                          own_pid=1)
    assert selected == [1]
    assert skipped == [
        {"gpu": 0, "serial": "1653724049829", "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"},
        {"gpu": 2, "serial": "1653724066364", "why": "compute process(es) 4242 on it: another job holds it"},
        {"gpu": 3, "serial": "1653724034047", "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"}]
    assert notes[0] == "quick tier GPUs: SLURM_JOB_GPUS=1,2 names GPU1, GPU2"
    # a step's GPUs, then CUDA's (by UUID too), then every GPU; our own process is not another job's
    assert quick_gpus(record, {"SLURM_STEP_GPUS": "3"}, own_pid=1)[0] == [3]
    uuid = gpu(json.loads((X4 / "health.json").read_text()), 3)["uuid"]
    assert quick_gpus(record, {"CUDA_VISIBLE_DEVICES": f"{uuid},7"}, own_pid=1)[0] == [3]
    assert quick_gpus(record, {}, own_pid=4242)[0] == [0, 1, 2, 3]
    # a job without GPUs (the variable set, empty): none
    assert quick_gpus(record, {"SLURM_JOB_GPUS": ""}, own_pid=1)[0] == []


def test_processes_that_cannot_be_read_or_are_not_recorded(tmp_path):
    unreadable = planted(tmp_path, lambda d: [g.update(compute_processes={"error": "NO_PERMISSION"})
                                             for g in d["gpus"]])
    selected, skipped, _ = quick_gpus(load_health_file(unreadable / "health.json"), {}, own_pid=1)
    assert selected == [] and skipped[0]["why"].startswith("its compute processes could not be read (NVML answered "
                                                           "NO_PERMISSION")
    selected, skipped, notes = quick_gpus(load_health_file(X4 / "health.json"), {}, own_pid=1)
    assert (selected, skipped) == ([0, 1, 2, 3], [])
    assert notes[1].startswith("the record holds no compute process list (GPU0, GPU1, GPU2, GPU3)")


def test_the_quick_tier_runs_only_on_the_gpus_given(tmp_path):
    """On CPU stand-ins: run on GPU1 alone, the planted fault (CUDA device 0 of those run on) is GPU1's; GPU0 is
    neither judged nor said unknown by the workloads."""
    from pytest_gpufabric.nodehealth.quick import run_quick

    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    baseline = resolve_baseline(str(tmp_path / "cpu-health.yaml"), None, env={})
    findings, notes, results = run_quick(load_health_file(X2 / "health.json"), baseline, plant_fault=0, gpus=[1])
    assert sorted((f.gpu, f.check, f.severity) for f in findings if f.severity != "warn") == [
        (1, "quick-gemm", DRAIN), (1, "quick-memory-pattern", DRAIN)]
    assert [r["gpu"] for r in results["gemm"]["gpus"]] == [1]
    assert run_quick(load_health_file(X2 / "health.json"), baseline, gpus=[]) == (
        [], ["quick tier workloads not run: no GPU of this node is free to run them on"], {})


def test_a_quick_tier_that_ran_on_no_gpu_is_could_not_tell_outside_a_job(capsys, tmp_path, monkeypatch):
    """CUDA_VISIBLE_DEVICES set empty outside a Slurm job: the workloads run on no GPU (the fault planted on device 1
    is never seen), so nothing is shown healthy."""
    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    rc = main(["health", "--profile", str(tmp_path / "cpu-health.yaml"), "--replay", str(X2), "--quick",
               "--plant-fault", "1", "--json", str(tmp_path / "result.json")])
    out = capsys.readouterr().out.splitlines()
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN node quick tier ran on no GPU; remedy: software or configuration")
    assert out[1] == (
        "  unknown: node: quick tier ran on no GPU [software or configuration]: the quick tier's workloads ran on none "
        "of the 2 GPUs (not the job's GPU (CUDA_VISIBLE_DEVICES does not name it)): nothing was exercised; run it "
        "where SLURM_JOB_GPUS, SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES are unset or name the GPUs, and no other job "
        "holds them")
    document = json.loads((tmp_path / "result.json").read_text())
    output.validate_result(document)
    assert [s["gpu"] for s in document["quick_skipped"]] == [0, 1]


def test_a_job_without_gpus_says_the_quick_tier_skipped_them(capsys, tmp_path, monkeypatch):
    """The epilog of a job without GPUs (SLURM_JOB_GPUS set, empty): no workload runs on another job's GPUs, and the
    line says the passive tier's GPUs were not exercised, never a bare "HEALTHY 2 GPUs"."""
    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    monkeypatch.setenv("SLURM_JOB_GPUS", "")
    rc = main(["health", "--profile", str(tmp_path / "cpu-health.yaml"), "--replay", str(X2), "--quick"])
    out = capsys.readouterr().out.splitlines()
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 2 GPUs (quick tier skipped 2), profile cpu-health")
    assert "  note: quick tier workloads not run: no GPU of this node is free to run them on" in out


def test_a_skipped_gpu_is_said_never_healthy_and_keeps_its_quick_drain(capsys, tmp_path, monkeypatch):
    (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
    monkeypatch.setenv("SLURM_JOB_GPUS", "0")
    prom = tmp_path / "prom"
    prom.mkdir()
    rc = main(["health", "--profile", str(tmp_path / "cpu-health.yaml"), "--replay", str(X2), "--quick",
               "--state-dir", str(tmp_path / "state"), "--json", str(tmp_path / "result.json"), "--prom", str(prom)])
    out = capsys.readouterr().out.splitlines()
    document = json.loads((tmp_path / "result.json").read_text())
    output.validate_result(document)
    assert (rc, document["verdict"]) == (0, "HEALTHY")
    assert out[0] == document["line"] == "gpufabric: HEALTHY 2 GPUs (quick tier skipped 1), profile cpu-health"
    assert document["quick_skipped"] == [{"gpu": 1, "serial": "1653824016216",
                                          "why": "not the job's GPU (SLURM_JOB_GPUS does not name it)"}]
    assert "  note: GPU1 skipped by the quick tier, not judged: not the job's GPU (SLURM_JOB_GPUS does not name " \
           "it)" in out
    text = (prom / "gpufabric-health-quick.prom").read_text()
    for check in ("quick-gemm", "quick-hbm", "quick-memory-pattern"):
        assert any(line.endswith(f'check="{check}"}} 2') and 'gpu="1"' in line
                                                   for line in text.splitlines())
        assert any(line.endswith(f'check="{check}"}} 0') and 'gpu="0"' in line for line in text.splitlines())
    # a quick drain held on a GPU the quick tier then skips is not verified gone: it stays
    state = HealthState(tmp_path / "s.json", {"quick-hbm@1653824016216": {
        "key": "quick-hbm@1653824016216", "check": "quick-hbm", "tier": "quick", "gpu": 1, "serial": "1653824016216",
        "what": "HBM 1 GB/s below floor", "remedy": "software or configuration", "boot_id": "b",
        "first_seen": "2026-12-06T00:00:00+00:00", "first_seen_s": 0.0}})
    kept, _ = reconcile(state, [], tier="quick", node_read=True, now=60.0, boot="b", quick_skipped={1})
    assert [(f.check, f.severity, f.evidence["kept_because"]) for f in kept] == [
        ("quick-hbm", DRAIN, "the quick tier skipped GPU1 (held by another job, or not the job's)")]
    kept, notes = reconcile(state, [], tier="quick", node_read=True, now=90.0, boot="b", quick_skipped=set())
    assert kept == [] and notes == ["quick-hbm@1653824016216: drained since 2026-12-06T00:00:00+00:00, now gone: "
                                    "lifted"]


# ---------------------------------------------------------------------------------------------------------------
# 2. error counters judged by their rate since the last run


def counters(pcie: dict[int, int] | None = None, crc_data: dict[int, int] | None = None,
             recovery: dict[int, int] | None = None):
    """Every GPU's NVLink error counters recorded (the x2 capture's idle CRC_DATA 9 on each), some raised; the
    PCIe replay counters of some GPUs set."""
    def edit(data: dict) -> None:
        for g in data["gpus"]:
            i = g["index"]
            g["nvlink_errors"] = {"replay": 0, "recovery": (recovery or {}).get(i, 0), "crc_flit": 0,
                                  "crc_data": (crc_data or {}).get(i, 9)}
            g["pcie_replay"] = (pcie or {}).get(i, g["pcie_replay"])
    return edit


def run(capsys, node: Path, bundle: Path, at: float, *extra: str) -> tuple[int, list[str], dict]:
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle), "--state-dir",
               str(node / "state"), "--now", str(RECORDED_X4 + at), "--json", str(node / "result.json"), *extra])
    document = json.loads((node / "result.json").read_text())
    output.validate_result(document)
    return rc, capsys.readouterr().out.splitlines(), document


def test_counters_judged_by_their_rate_since_the_last_run(capsys, node):
    rc, out, _ = run(capsys, node, planted(node, counters(pcie={1: 1})), 0)
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    assert "  note: counter rates from the next run on: no earlier reading of GPU0, GPU1, GPU2, GPU3" in out
    # 300 s later: GPU1 replayed 120 PCIe packets (24/min, DCGM's limit 8/min), GPU2's NVLinks 45,000 CRC data
    # errors (150/s, limit 100/s), GPU3's links recovered twice (any: shown)
    rc, out, document = run(capsys, node, planted(node, counters(pcie={1: 121}, crc_data={2: 45009},
                                                                 recovery={3: 2})), 300)
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 24/min over 300 s "
                               "(limit 8) (+1 more); remedy: reseat or recable")
    found = {(f["gpu"], f["check"]): f for f in document["findings"]}
    assert sorted((g, c, f["severity"]) for (g, c), f in found.items()) == [
        (1, "pcie-replay", "drain"), (2, "nvlink-crc", "drain"), (3, "nvlink-recovery", "warn")]
    replay = found[(1, "pcie-replay")]["evidence"]
    assert (replay["count"], replay["seconds"], replay["rate_per_s"], replay["reading"], replay["previous"]) == \
        (120, 300.0, 0.4, 121, 1)
    assert "DCGM_LIMIT_MAX_PCIREPLAY_RATE, 8 per minute" in replay["limit_from"]
    assert found[(2, "nvlink-crc")]["what"] == "NVLink CRC data errors 150/s over 300 s (limit 100)"
    assert found[(3, "nvlink-recovery")]["what"] == "NVLink recoveries: 2 in 300 s"
    # 300 s on, below the limits (6 replays a minute, 50 CRC errors a second): a reseat needs the node down, so the
    # drains are held until a reboot (state.needs_reboot), then lifted
    rc, out, _ = run(capsys, node, planted(node, counters(pcie={1: 151}, crc_data={2: 60009}, recovery={3: 2})), 600)
    assert rc == 1 and out[0].startswith("gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 24/min")
    (node / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002\n")
    rc, out, _ = run(capsys, node, planted(node, counters(pcie={1: 3}, crc_data={2: 9}, recovery={3: 0})), 900)
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    assert any(line.startswith("  note: pcie-replay@1653824128984: drained since ") and line.endswith("lifted")
               for line in out)


def test_no_rate_across_a_reboot_a_reset_counter_or_without_a_state_folder(capsys, node):
    run(capsys, node, planted(node, counters(pcie={1: 500})), 0)
    rc, out, _ = run(capsys, node, planted(node, counters(pcie={1: 2})), 60)  # went down: the driver reloaded
    assert rc == 0 and "  note: counter rates not judged: GPU1 pcie_replay went down since the last reading (a " \
                       "driver reload resets it)" in out
    (node / "boot_id").write_text("5e0d7a64-0c4f-4d43-9a57-1b1c1f5e0002\n")
    rc, out, _ = run(capsys, node, planted(node, counters(pcie={1: 900})), 120)
    assert rc == 0 and "  note: counter rates not judged for GPU0, GPU1, GPU2, GPU3: the last reading is of " \
                       "another boot (the counters restarted)" in out
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(X4)])
    assert rc == 0 and "  note: counter rates not judged: no state folder keeps the last reading (--state-dir)" in \
        capsys.readouterr().out.splitlines()



def test_a_clock_that_went_back_keeps_the_last_reading_for_the_next_check(capsys, node):
    """The clock steps back 300 s between two checks while GPU1 replays 120 PCIe packets: that check cannot rate the
    rise, says so and keeps the earlier reading's counters (not this one's) dated now, so the next check, 300 s on,
    judges the whole rise."""
    run(capsys, node, planted(node, counters(pcie={1: 1})), 600)
    rc, out, document = run(capsys, node, planted(node, counters(pcie={1: 121})), 300)
    assert (rc, out[0], document["findings"]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4", [])
    assert ("  note: counter rates not judged for GPU0, GPU1, GPU2, GPU3: the clock reads no later than the last "
            "reading (it went back, or two checks at once); the last reading's counters are kept, dated now, and "
            "the rise since them is judged at the next check") in out
    kept = json.loads((node / "state" / "health-counters.json").read_text())["gpus"]["1653824128984"]
    assert (kept["at"], kept["counters"]["pcie_replay"]) == (RECORDED_X4 + 300, 1)
    rc, out, document = run(capsys, node, planted(node, counters(pcie={1: 121})), 600)
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 24/min over 300 s "
                               "(limit 8); remedy: reseat or recable")


def booted(seconds: object, pcie: dict[int, int]):
    """counters(pcie=...) read at ``seconds`` of the boot clock (health.json's uptime_s, as a live read records)."""
    def edit(data: dict) -> None:
        counters(pcie=pcie)(data)
        data["uptime_s"] = seconds
    return edit


def test_rates_are_timed_by_the_boot_clock_that_never_steps(capsys, node):
    """The wall clock steps back 300 s, then forward 600 s, while GPU1 replays 100 PCIe packets in the first 300 real
    seconds: the boot clock the records carry times the rise (20/min, DCGM's limit 8/min), whatever the wall clock
    says; the wall clock's rule would have rated it 100 over 900 s and missed it."""
    rc, out, _ = run(capsys, node, planted(node, booted(1000.0, {1: 1})), 600)
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    rc, out, document = run(capsys, node, planted(node, booted(1300.0, {1: 101})), 300)  # wall clock back 300 s
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 20/min over 300 s "
                               "(limit 8); remedy: reseat or recable")
    evidence = document["findings"][0]["evidence"]
    assert (evidence["count"], evidence["seconds"], evidence["timed_by"]) == (100, 300.0, "boot clock (CLOCK_BOOTTIME)")
    kept = json.loads((node / "state" / "health-counters.json").read_text())["gpus"]["1653824128984"]
    assert (kept["at"], kept["uptime_s"], kept["counters"]["pcie_replay"]) == (RECORDED_X4 + 300, 1300.0, 101)
    rc, out, _ = run(capsys, node, planted(node, booted(1600.0, {1: 101})), 1200)  # wall clock forward 900 s
    assert rc == 1 and out[0].startswith("gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 20/min over 300 s")
    # the same record replayed again at once: neither clock is after the kept reading's; said, the reading kept
    rc, out, _ = run(capsys, node, planted(node, booted(1600.0, {1: 101})), 1200)
    assert ("  note: counter rates not judged for GPU0, GPU1, GPU2, GPU3: neither the boot clock nor the wall clock "
            "reads later than the last reading (two checks at once, or an older record replayed); the last reading is "
            "kept, and the rise since it is judged at the next check") in out
    # a record whose boot clock is not a number: timed by the wall clock, said
    bundle = planted(node, booted("soon", {1: 101}))
    rc, out, _ = run(capsys, node, bundle, 1800)
    assert rc == 1 and (f"  note: counter rates timed by the wall clock: the seconds since boot 'soon' in "
                        f"{bundle / 'health.json'} (uptime_s) is not a finite number") in out


def test_a_reboot_the_replay_did_not_see_is_timed_by_the_wall_clock(capsys, node):
    """A node's records replayed on one host (the replay's boot id): after 30 days up the node reboots, its boot clock
    restarts at 600 s and GPU1's PCIe replay counter with it. The boot clock that went back does not pin the kept
    reading: the wall clock judges, the reset is said, and 100 replays in the next 300 s drain (20/min, limit 8)."""
    run(capsys, node, planted(node, booted(2.6e6, {1: 5})), 0)
    rc, out, _ = run(capsys, node, planted(node, booted(600.0, {1: 1})), 900)
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    assert ("  note: counter rates not judged: GPU1 pcie_replay went down since the last reading (a driver reload "
            "resets it)") in out
    for at, uptime, pcie in ((1200, 900.0, 101), (1500, 1200.0, 201)):
        rc, out, document = run(capsys, node, planted(node, booted(uptime, {1: pcie})), at)
        assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 20/min over 300 s "
                                   "(limit 8); remedy: reseat or recable")
        assert document["findings"][0]["evidence"]["timed_by"] == "boot clock (CLOCK_BOOTTIME)"


@pytest.mark.parametrize("first, second", [(1000.0, 1e9), (1000.0, 1e5), (1e9, 1300.0)])
def test_a_planted_boot_clock_cannot_understate_a_rate(capsys, node, first, second):
    """A record's uptime_s planted far ahead (this run's, or the kept reading's): the boot clock's interval is longer
    than the wall clock's 300 s, or not positive, so the wall clock's times the 100 PCIe replays: 20/min drains."""
    run(capsys, node, planted(node, booted(first, {1: 1})), 0)
    rc, out, document = run(capsys, node, planted(node, booted(second, {1: 101})), 300)
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) PCIe replays 20/min over 300 s "
                               "(limit 8); remedy: reseat or recable")
    evidence = document["findings"][0]["evidence"]
    assert (evidence["count"], evidence["seconds"], evidence["timed_by"]) == (100, 300.0, "wall clock")


def test_the_live_read_records_the_boot_clock():
    """read_live's uptime_s: this machine's boot clock, a number that does not go back between two reads."""
    from pytest_gpufabric.nodehealth.record import seconds_since_boot

    first, second = seconds_since_boot(), seconds_since_boot()
    assert isinstance(first, float) and 0 < first <= second


def test_now_on_a_live_check_is_a_usage_error(capsys, node):
    """--now judged a live check as at another time (a new Xid hidden behind a clear, counter rates skipped): it
    goes with --replay or --clear only; nothing is read or kept."""
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--state-dir", str(node / "state"), "--now", "1"])
    assert rc == 2
    assert capsys.readouterr().err == ("gpufabric: --now goes with --replay or --clear: a live check judges at the "
                                       "real clock (the kernel log's Xid ages, the counters' rates and an operator's "
                                       "clear are all real times)\n")
    assert not (node / "state").exists()

# ---------------------------------------------------------------------------------------------------------------
# 3. the row remapper nearly full, corrected ECC; 4. the InfoROM


def x4(capsys, bundle: Path) -> tuple[int, list[str]]:
    rc = main(["health", "--profile", "h200-nvswitch-x4", "--replay", str(bundle)])
    return rc, capsys.readouterr().out.splitlines()


def histogram(index: int, **banks: int):
    """Every GPU's histogram as the x4's nvidia-smi -q reads it (3072 banks, all at max), GPU ``index``'s edited."""
    def edit(data: dict) -> None:
        for g in data["gpus"]:
            g["remap_histogram"] = {"max": 3072, "high": 0, "partial": 0, "low": 0, "none": 0}
        gpu(data, index)["remap_histogram"].update(banks)
    return edit


def test_a_row_remapper_nearly_full_drains_before_it_is_full(capsys, tmp_path):
    assert x4(capsys, planted(tmp_path, histogram(1)))[0] == 0
    assert x4(capsys, planted(tmp_path, histogram(1, max=3060, high=8, partial=4)))[0] == 0
    rc, out = x4(capsys, planted(tmp_path, histogram(1, max=3070, low=2)))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU1 (serial 1653824128984) row remapper nearly full: 2 banks low, "
                               "0 none left; remedy: return to the vendor")
    rc, out = x4(capsys, planted(tmp_path, histogram(2, max=3071, none=1)))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU2 (serial 1653724066364) row remapper nearly full: 0 banks low, "
                               "1 none left; remedy: return to the vendor")
    rc, out = x4(capsys, planted(tmp_path, lambda d: [histogram(0)(d), gpu(d, 3).update(
        remap_histogram={"error": "UNKNOWN"})]))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN GPU3 (serial 1653724034047) remap histogram not readable; "
                               "remedy: rerun")


def test_corrected_ecc_above_its_threshold_is_a_warning(capsys, tmp_path):
    rc, out = x4(capsys, planted(tmp_path, lambda d: gpu(d, 0).update(ecc_corrected_volatile=999)))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4")
    rc, out = x4(capsys, planted(tmp_path, lambda d: gpu(d, 0).update(ecc_corrected_volatile=1500)))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile h200-nvswitch-x4 (1 warning)")
    assert out[1].startswith("  warn: GPU0 (serial 1653724049829): 1500 corrected ECC errors: corrected ECC errors "
                             "since the driver loaded, at or above 1000")


def test_the_inforom_judged_where_recorded(capsys, tmp_path):
    def inforom(answer):
        return lambda d: [g.update(inforom_valid=True) for g in d["gpus"]] + [gpu(d, 2).update(inforom_valid=answer)]

    assert x4(capsys, planted(tmp_path, inforom(True)))[0] == 0
    assert x4(capsys, planted(tmp_path, inforom({"error": "NOT_SUPPORTED"})))[0] == 0
    rc, out = x4(capsys, planted(tmp_path, inforom({"error": "CORRUPTED_INFOROM"})))
    assert (rc, out[0]) == (1, "gpufabric: DRAIN GPU2 (serial 1653724066364) InfoROM corrupted; remedy: software or "
                               "configuration")
    rc, out = x4(capsys, planted(tmp_path, inforom({"error": "NO_PERMISSION"})))
    assert (rc, out[0]) == (6, "gpufabric: UNKNOWN GPU2 (serial 1653724066364) inforom valid not readable; remedy: "
                               "rerun")
    # the shipped record predates it: said, never a failure
    rc, out = x4(capsys, X4)
    assert rc == 0 and any(line.startswith("  note: not recorded (") and line.endswith(
        "predates them), not judged: compute processes, inforom valid, nvlink errors, remap histogram of GPU0, "
        "GPU1, GPU2, GPU3") for line in out)


# ---------------------------------------------------------------------------------------------------------------
# 5. the RDMA ports the profile promises


ROCE_SYSFS = Path(__file__).parent / "data" / "sysfs" / "a100-pcie-roce-2node-derived" / "sys"
ROCE_IBV = Path(__file__).parent / "data" / "bundles" / "a100-pcie-roce" / "ibv_devinfo-v.txt"
PROFILES = Path(__file__).parent.parent / "profiles"
LIVE_PLATFORM = Path(__file__).parent / "data" / "bundles" / "h100-x2-health" / "platform"


def with_roce_port(tmp_path: Path, **files: str) -> tuple[Path, Path]:
    """A copy of the x4 bundle holding the a100-pcie-roce node's irdma0 (its sysfs copy and ibv_devinfo, some port
    files edited) and the platform record of a live read (h100-x2-health's platform/ tree, nvidia_peermem planted
    loaded: a promised RDMA device needs it, and a bundle without a module list could not tell), and the x4 profile
    promising that port as a100-pcie-roce's profile does."""
    import shutil

    tmp_path.mkdir(exist_ok=True)
    bundle = planted(tmp_path, lambda d: None)
    shutil.copytree(ROCE_SYSFS, bundle / "sysfs" / "sys")
    shutil.copy(ROCE_IBV, bundle / "ibv_devinfo-v.txt")
    shutil.copytree(LIVE_PLATFORM, bundle / "platform")
    (bundle / "platform" / "sys" / "module" / "nvidia_peermem").mkdir(parents=True)
    (bundle / "platform" / "sys" / "module" / "nvidia_peermem" / "version").write_text("580.159.04\n")
    for name, text in files.items():
        path = bundle / "sysfs" / "sys" / "class" / "infiniband" / "irdma0" / "ports" / "1" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    profile = tmp_path / "x4-roce.yaml"
    profile.write_text((PROFILES / "h200-nvswitch-x4.yaml").read_text().replace("name: h200-nvswitch-x4",
                                                                               "name: x4-roce", 1)
                       + "\nrdma:\n  devices:\n    - {name: irdma0, port: 1, link_layer: Ethernet, rate: 25 Gb/s, "
                         "mtu: 1024}\n")
    return bundle, profile


def test_a_promised_rdma_port_down_or_slow_drains(capsys, tmp_path):
    bundle, profile = with_roce_port(tmp_path)
    assert main(["health", "--profile", str(profile), "--replay", str(bundle)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gpufabric: HEALTHY 4 GPUs, profile x4-roce"
    # a RoCE port's line rate is its netdev's speed, which the bundle did not copy: said, not judged
    assert any(line.startswith("  note: RDMA port irdma0 port 1: ACTIVE/LinkUp, Ethernet, rate unknown, MTU 1024; "
                               "not judged: line rate") for line in out)
    bundle, profile = with_roce_port(tmp_path, state="1: DOWN\n", phys_state="3: Disabled\n")
    rc = main(["health", "--profile", str(profile), "--replay", str(bundle), "--reason"])
    out = capsys.readouterr().out.splitlines()
    assert (rc, out[1]) == (1, "gpufabric: DRAIN node irdma0 port 1 state DOWN, expected ACTIVE; remedy: reseat or "
                               "recable")
    assert out[0].startswith("gpufabric node ibport: irdma0 port 1")
    bundle, profile = with_roce_port(tmp_path, link_layer="InfiniBand\n")
    rc = main(["health", "--profile", str(profile), "--replay", str(bundle)])
    assert (rc, capsys.readouterr().out.splitlines()[0]) == (
        1, "gpufabric: DRAIN node irdma0 port 1 link layer InfiniBand, expected Ethernet; remedy: reseat or recable")
    # the shipped x4 bundle records no RDMA port and no module list: could not tell, never healthy
    rc = main(["health", "--profile", str(profile), "--replay", str(X4)])
    assert (rc, capsys.readouterr().out.splitlines()[0]) == (
        6, "gpufabric: UNKNOWN node RDMA ports not recorded (+1 more); remedy: rerun")


def test_a_promised_rdma_port_whose_state_cannot_be_read_is_unknown(capsys, tmp_path):
    """The port's sysfs state (or phys_state) missing or unparseable: ibv_devinfo's recorded state answers it where
    the bundle has one (PORT_DOWN drains as a down port does); with neither, could not tell (exit 6), never healthy."""
    import re

    def judge(bundle: Path, profile: Path) -> tuple[int, list[str]]:
        rc = main(["health", "--profile", str(profile), "--replay", str(bundle), "--reason"])
        return rc, capsys.readouterr().out.splitlines()

    def port_file(bundle: Path, name: str) -> Path:
        return bundle / "sysfs" / "sys" / "class" / "infiniband" / "irdma0" / "ports" / "1" / name

    bundle, profile = with_roce_port(tmp_path / "devinfo-active")
    port_file(bundle, "state").unlink()  # ibv_devinfo records PORT_ACTIVE: judged by it
    rc, out = judge(bundle, profile)
    assert (rc, out[0]) == (0, "gpufabric ok: HEALTHY 4 GPUs, profile x4-roce")
    bundle, profile = with_roce_port(tmp_path / "devinfo-down")
    port_file(bundle, "state").unlink()
    devinfo = bundle / "ibv_devinfo-v.txt"
    text = re.sub(r"state:(\s+)PORT_ACTIVE \(4\)", r"state:\1PORT_DOWN (1)", devinfo.read_text(), count=1)
    assert "PORT_DOWN (1)" in text
    devinfo.write_text(text)
    rc, out = judge(bundle, profile)
    assert (rc, out[1]) == (1, "gpufabric: DRAIN node irdma0 port 1 state DOWN, expected ACTIVE; remedy: reseat or "
                               "recable")
    bundle, profile = with_roce_port(tmp_path / "no-devinfo")
    port_file(bundle, "state").unlink()
    (bundle / "ibv_devinfo-v.txt").unlink()
    rc, out = judge(bundle, profile)
    assert (rc, out[1]) == (6, "gpufabric: UNKNOWN node irdma0 port 1 state not readable; remedy: rerun")
    assert out[2] == (f"  unknown: node: irdma0 port 1 state not readable [rerun]: {bundle}: irdma0 port 1's state "
                      "not read: neither sysfs (ports/1/state missing or unreadable) nor a recorded ibv_devinfo -v "
                      "gives it (one state, its name and code agreeing), so whether the port is up cannot be told; "
                      "rerun the check, or record the bundle again with gpufabric snapshot")
    bundle, profile = with_roce_port(tmp_path / "phys-garbled", phys_state="garbled\n")
    (bundle / "ibv_devinfo-v.txt").unlink()
    rc, out = judge(bundle, profile)
    assert (rc, out[1]) == (6, "gpufabric: UNKNOWN node irdma0 port 1 phys_state not readable; remedy: rerun")
    assert "phys_state not read: sysfs ports/1/phys_state reads 'garbled', not a state (ibv_devinfo's" in out[2]


@pytest.mark.parametrize("files", [{"state": "1\n"}, {"state": "DOWN\n"}, {"state": "1:\n", "phys_state": "3:\n"}])
def test_sysfs_state_text_that_does_not_parse_is_not_replaced_by_ibv_devinfo(capsys, tmp_path, files):
    """sysfs recorded the port's state as text that does not parse ('1', DOWN's code with its name cut; 'DOWN' with
    no code; '1:'): ibv_devinfo's recorded PORT_ACTIVE never takes its place. Health cannot tell (exit 6), naming
    the text; the acceptance leaves the port not checked, never ACCEPTED."""
    bundle, profile = with_roce_port(tmp_path, **files)
    rc = main(["health", "--profile", str(profile), "--replay", str(bundle), "--reason"])
    out = capsys.readouterr().out.splitlines()
    missing = " and ".join(k for k in ("state", "phys_state") if k in files)
    assert (rc, out[1]) == (6, f"gpufabric: UNKNOWN node irdma0 port 1 {missing} not readable; remedy: rerun")
    assert f"sysfs ports/1/state reads {files['state'].strip()!r}, not a state (ibv_devinfo's is not taken" in out[2]
    from pytest_gpufabric.checks.rdma import check_rdma_port
    from pytest_gpufabric.checks.result import NOT_CHECKED
    from pytest_gpufabric.fabric.bundle import load_rdma_devices

    result = check_rdma_port({"name": "irdma0", "port": 1}, load_rdma_devices(bundle), str(bundle))
    assert result.verdict == NOT_CHECKED
    assert f"not judged: state (sysfs ports/1/state reads {files['state'].strip()!r}, not a state)" in result.message


@pytest.mark.parametrize("edit", ["code", "port", "device"])
def test_ibv_devinfo_that_contradicts_itself_gives_no_state(capsys, tmp_path, edit):
    """sysfs's state file absent, and the recorded ibv_devinfo -v contradicting itself on the port: a state whose name
    and code disagree (PORT_ACTIVE (1)), or the port (or the whole device) printed twice, DOWN then ACTIVE. No
    section is picked: could not tell (exit 6)."""
    bundle, profile = with_roce_port(tmp_path)
    (bundle / "sysfs" / "sys" / "class" / "infiniband" / "irdma0" / "ports" / "1" / "state").unlink()
    devinfo = bundle / "ibv_devinfo-v.txt"
    text = devinfo.read_text()
    down = text.replace("PORT_ACTIVE (4)", "PORT_DOWN (1)")
    if edit == "code":
        text = text.replace("PORT_ACTIVE (4)", "PORT_ACTIVE (1)")
    elif edit == "port":
        at = text.index("port:")
        at = text.rindex("\n", 0, at) + 1
        text = text[:at] + down[at:] + text[at:]
    else:
        text = down + text
    assert text != devinfo.read_text()
    devinfo.write_text(text)
    rc = main(["health", "--profile", str(profile), "--replay", str(bundle), "--reason"])
    out = capsys.readouterr().out.splitlines()
    assert (rc, out[1]) == (6, "gpufabric: UNKNOWN node irdma0 port 1 state not readable; remedy: rerun")


def test_a_flapping_rdma_port_is_shown(capsys, tmp_path):
    """The port's PortCounters (sysfs counters/link_downed, link_error_recovery; the a100 copy holds none, so they
    are planted) rising between two runs: a warning with the figures."""
    def port_counters(downed: int) -> dict:
        return {"counters/link_downed": f"{downed}\n", "counters/link_error_recovery": "0\n"}

    for at, downed in ((0, 1), (300, 4)):
        bundle, profile = with_roce_port(tmp_path / f"at{at}", **port_counters(downed))
        rc, out, document = run(capsys, tmp_path, bundle, at, "--profile", str(profile))
    assert (rc, out[0]) == (0, "gpufabric: HEALTHY 4 GPUs, profile x4-roce (1 warning)")
    flap = next(f for f in document["findings"] if f["check"] == "ib-port-flap")
    assert (flap["severity"], flap["what"], flap["evidence"]["counts"], flap["evidence"]["seconds"]) == (
        "warn", "irdma0 port 1 went down 3x in 300 s", {"link_downed": 3}, 300.0)
