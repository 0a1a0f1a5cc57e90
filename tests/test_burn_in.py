"""Burn-in: the loop, its log and resume on real CPU workers (gemm_burn.py --device cpu); the verdicts on the
real 10-minute log of 2x H200 SXM 141GB and its planted-fault run. (The health watchdog: tests/test_watchdog.py.)"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from pytest_gpufabric.checks.burn_in import check_burn_in_gpu
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.report.results import schema_errors
from pytest_gpufabric.workloads.burn_in import BurnIn, gemm_command, parse_duration, read_log, run_burn_in
from pytest_gpufabric.workloads.runner import run_workload

REAL_LOG = Path(__file__).parent / "data" / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl"
RESULTS = Path(__file__).parent / "data" / "results"
LIVE_RESULTS = RESULTS / "burn-in-10min-live-on-h200-x2.json"
CPU_PROFILE = "name: cpu-burn\ngpus: {count: 2}\nburn_in: {chunk_s: 1, gemm_size: 256, device: cpu}\n"


@pytest.fixture
def cpu_profile(tmp_path):
    path = tmp_path / "cpu-burn.yaml"
    path.write_text(CPU_PROFILE)
    return load_profile(str(path))


def test_parse_duration():
    assert [parse_duration(t) for t in ("90s", "10m", "2h", "45")] == [90, 600, 7200, 45]
    for text in ("ten minutes", "0", "-5m", "0.5s", "infh", "nan", ""):
        with pytest.raises(ValueError, match="not a duration of at least a second"):
            parse_duration(text)


@pytest.mark.parametrize("args, message", [
    (["--gpu-burn-in", "0s"], "--gpu-burn-in: not a duration of at least a second: '0s' (write e.g. 90s, 10m or 2h)"),
    (["--gpu-burn-in", "10m", "--gpu-burn-in-plant-fault", "2"],
     "--gpu-burn-in-plant-fault 2: not a GPU of the profile (give 0 to 1)"),
    (["--gpu-burn-in", "10m", "--gpu-burn-in-plant-fault", "one"],
     "--gpu-burn-in-plant-fault one: not a GPU of the profile (give 0 to 1)"),
    (["--gpu-burn-in-plant-fault", "1"], "--gpu-burn-in-plant-fault: plants a fault in a burn-in; give "
                                         "--gpu-burn-in DURATION"),
])
def test_bad_burn_in_options_are_usage_errors(pytester: pytest.Pytester, args, message):
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str()


#: a CPU burn-in long enough for several 1 s chunks, each with its process's start-up (torch's import)
DURATION = 12.0


@pytest.fixture(scope="module")
def warm_start_up() -> None:
    """One short GEMM chunk before the tests that count a burn-in's chunks, so that theirs start warm.

    The burn-in's budget is wall-clock time, and each chunk after the first leaves room for the start-up the one
    before it took. On a machine's first run the first chunk's process reads torch from a cold disk: a start-up
    over about 5 s leaves a 12 s burn-in no room for a second chunk, and it rightly ends after one (a warm start-up
    here takes about 1 s). This chunk pays the cold read outside the budget."""
    section = {"gemm_size": 256, "device": "cpu"}
    run_workload(gemm_command(0.1, section, None, 2), timeout_s=600)


def test_burn_in_logs_every_chunk_and_catches_a_planted_fault(cpu_profile, tmp_path, warm_start_up):
    log = tmp_path / "gpufabric-burnin.jsonl"
    seen = []
    started = time.monotonic()
    burn_in = run_burn_in(cpu_profile, DURATION, log, plant_fault=1, sha256=cpu_profile.sha256,
                          progress=lambda b, r: seen.append(b.elapsed_s))
    wall = time.monotonic() - started
    types = [r["type"] for r in read_log(log)]
    # how many 1 s chunks fit in the 12 s depends on a worker's start-up on this machine (a loaded one: one)
    assert types[0] == "start" and types[-1] == "end" and types.count("gemm") >= 1
    assert seen[0] == 0 and seen == sorted(seen) and len(seen) == types.count("gemm") + 2  # start, chunks, end
    # the budget is wall-clock time: the chunks, their start-ups, the lot; it ends within a chunk's start-up
    chunks = [r for r in read_log(log) if r["type"] == "gemm"]
    # each chunk leaves room for the start-up the one before it took: a busier start than that overruns by it
    overrun = max(r["wall_s"] - r["seconds"] for r in chunks) - min(r["wall_s"] - r["seconds"] for r in chunks)
    assert burn_in.elapsed_s == pytest.approx(sum(r["wall_s"] for r in chunks))
    assert burn_in.elapsed_s <= DURATION + overrun
    assert wall <= DURATION + max(r["wall_s"] - r["seconds"] for r in chunks) + 2.0  # + logging the end, loaded
    assert burn_in.gemm_s == pytest.approx(sum(r["seconds"] for r in chunks))
    assert burn_in.gemm_s < burn_in.elapsed_s
    totals = burn_in.gpu_totals()
    assert totals[0]["errors_self"] == totals[0]["errors_cross"] == 0 and totals[0]["iterations"] > 0
    assert totals[1]["errors_self"] == totals[1]["checks"] > 0  # one wrong element in every check
    check = check_burn_in_gpu(1, "1653824016216", totals[1], {}, {}, burn_in.elapsed_s)
    assert check.verdict == "failed" and check.message.startswith("GPU1 (serial 1653824016216)")
    assert "differed from its own first product" in check.message and check.message.endswith("REJECTED")
    assert check_burn_in_gpu(0, None, totals[0], {}, {}, burn_in.elapsed_s).verdict == "passed"


class _PowerLoss(Exception):
    """The machine goes down: raised from the burn-in's progress callback, after a chunk reached the log."""


def _power_loss_after_first_chunk(burn_in, record) -> None:
    if record is not None and record["type"] == "gemm":
        raise _PowerLoss


def test_a_rerun_resumes_an_unfinished_burn_in(cpu_profile, tmp_path, warm_start_up):
    log = tmp_path / "gpufabric-burnin.jsonl"
    with pytest.raises(_PowerLoss):
        run_burn_in(cpu_profile, DURATION, log, sha256=cpu_profile.sha256, progress=_power_loss_after_first_chunk)
    lines = log.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["start", "gemm"]
    # the next line was half written when the power went: torn, it is read as never written
    log.write_text("\n".join(lines) + "\n" + lines[1][: len(lines[1]) // 2])
    first = json.loads(lines[1])
    resumed = run_burn_in(cpu_profile, DURATION, log, sha256=cpu_profile.sha256)
    assert resumed.resumed_from_s == pytest.approx(first["wall_s"]) and resumed.finished
    types = [r["type"] for r in read_log(log)]
    assert types[:2] == ["start", "gemm"] and read_log(log)[1] == first and types.count("gemm") >= 2
    assert types[-1] == "end"
    # another duration (or profile) starts afresh
    fresh = run_burn_in(cpu_profile, 1.5, log, sha256=cpu_profile.sha256)
    assert fresh.resumed_from_s == 0 and [r["type"] for r in read_log(log)] == ["start", "gemm", "end"]


def _real_burn_in() -> BurnIn:
    records = read_log(REAL_LOG)
    return BurnIn(records[0]["duration_s"], records)


def test_the_real_burn_in_passes_each_gpu():
    burn_in = _real_burn_in()
    profile = load_profile("h200-nvswitch-x2")
    assert round(burn_in.elapsed_s) == 600 and burn_in.finished
    for index, totals in burn_in.gpu_totals().items():
        check = check_burn_in_gpu(index, None, totals, profile.data["burn_in"], profile.data["health"],
                                  burn_in.elapsed_s)
        assert check.verdict == "passed", check.message
        assert totals["errors_self"] == totals["errors_cross"] == 0 and 600 < check.found["tflops"] < 630
        # the NVLink data counters rose under load on this healthy machine (corrected by the link layer)
        assert totals["health"]["nvlink_ecc_data:0"] > 1000


def test_a_profile_forbidding_nvlink_crc_data_rejects_that_burn_in():
    burn_in = _real_burn_in()
    totals = burn_in.gpu_totals()[1]
    check = check_burn_in_gpu(1, "1653824016216", totals, {}, {"forbid": ["nvlink_crc_data"]}, burn_in.elapsed_s)
    assert check.verdict == "failed"
    crc = {int(name.split(":")[1]): delta for name, delta in totals["health"].items() if name.startswith("nvlink_crc")}
    assert f"nvlink_crc_data rose by {sum(crc.values())} on 18 links (0: +{crc[0]}, 1: +{crc[1]}," in check.message
    assert f"17: +{crc[17]}) (NVLink data with CRC errors)" in check.message


def _replay(pytester: pytest.Pytester, log: Path, *args: str) -> tuple[pytest.RunResult, dict]:
    bundle = pytester.path / "burn-in"
    bundle.mkdir()
    shutil.copy(log, bundle / "gpufabric-burnin.jsonl")
    result = pytester.runpytest("--gpu-replay", str(bundle), *args)
    return result, json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _burn_in_checks(document: dict) -> list[tuple[str, str, str]]:
    return [(c["subject"], c["verdict"], c["message"]) for c in document["checks"] if c["name"].startswith("burn-in")]


def test_the_live_burn_in_was_accepted_and_its_log_replays_to_the_same_verdicts(judged, pytester: pytest.Pytester):
    """`hardware/record-burn-in.sh start h200-nvswitch-x2 10m` on 2x H200 SXM 141GB: the pytest run, and its log."""
    live = json.loads(LIVE_RESULTS.read_text())
    assert live["run"]["mode"] == "live" and live["summary"]["verdict"] == "ACCEPTED"
    assert live["summary"]["passed"] == 18 and live["summary"]["failed"] == 0
    result, replayed = _replay(pytester, REAL_LOG, "--gpu-profile", "h200-nvswitch-x2", "-k", "burn_in")
    judged(result, passed=4)
    # the burn-in's four promises pass; -k left the profile's other promises out, so the run is not ACCEPTED
    burn_in = {p["id"]: p["outcome"] for p in replayed["promises"] if p["id"].startswith("burn-in")}
    assert burn_in == dict.fromkeys(["burn-in-gpu[GPU0]", "burn-in-gpu[GPU1]", "burn-in-collectives",
                                     "burn-in-memory"], "passed")
    assert replayed["summary"]["verdict"] == "INCOMPLETE" and "gpu-count" in replayed["not_run"]
    assert _burn_in_checks(replayed) == _burn_in_checks(live)


@pytest.mark.parametrize("recording", ["burn-in-planted-fault-on-h200-x2",
                                       "burn-in-planted-fault-third-host-on-h200-x2"])
def test_the_planted_fault_rejects_gpu1_by_serial_live_and_replayed(judged, pytester: pytest.Pytester, recording):
    """The script's second run on 2x H200 SXM 141GB (on two hosts): GPU1's GEMM workload returns a wrong element in
    every product (--gpu-burn-in-plant-fault 1) for 30 s."""
    live = json.loads((RESULTS / f"{recording}.json").read_text())
    assert live["run"]["mode"] == "live" and live["summary"]["verdict"] == "REJECTED"
    failed = [c for c in live["checks"] if c["verdict"] == "failed"]
    serial = live["machine"]["gpus"][1]["serial"]
    assert [c["subject"] for c in failed] == [f"GPU1 (serial {serial})"]
    assert failed[0]["found"]["errors_self"] == failed[0]["found"]["errors_cross"] == failed[0]["found"]["checks"]
    assert failed[0]["message"].startswith(f"GPU1 (serial {serial}) NVIDIA H200: ")
    assert failed[0]["message"].endswith("REJECTED")
    profile = pytester.path / "plant.yaml"  # as the script wrote it
    profile.write_text("name: plant-fault\nextends: h200-nvswitch-x2\nburn_in: {chunk_s: 30, memory: false}\n")
    result, replayed = _replay(pytester, RESULTS / f"{recording}.jsonl", "--gpu-profile", str(profile),
                               "-k", "test_burn_in_gpu")
    judged(result, passed=1, failed=1)
    assert result.ret == 1 and replayed["summary"]["verdict"] == "REJECTED"
    assert _burn_in_checks(replayed) == _burn_in_checks(live)


def test_the_report_health_section_of_the_live_burn_in():
    """The report's Health section from the watchdog of the live run: real NVML counters per test and GPU, and
    the timeline read every 2 s through the 12 minutes (the run predates the window opening at set-up, so the
    burn-in's own counters are in its checks, not in the first test's row)."""
    from pytest_gpufabric.report.sections import health_html

    health = json.loads(LIVE_RESULTS.read_text())["health"]
    assert health["xid_watch"] == "on" and health["xid_events"] == []
    assert len(health["timeline"]) > 300
    html = health_html(health)
    assert "<h2>Health</h2>" in html and "XID events: 0 (on)" in html
    # the timeline: temperature and power per GPU through the run, inline SVG, one line per GPU
    for title in ("temperature", "power"):
        chart = html[html.index(f'aria-label="The run: {title}"'):]
        chart = chart[:chart.index("</svg>")]
        assert chart.count("<polyline") >= len(health["timeline"][0]["gpus"])
    rows = health["tests"]["test_burn_in.py::test_burn_in_collectives"]
    risen = [(gpu, name, delta) for gpu, record in rows.items() for name, delta in record["rose"].items()]
    assert risen and all(f"{name} +{delta}" in html for _, name, delta in risen)
    assert "No health reads: the watchdog runs around each test of a live run" in health_html({})
    assert "No health reads in a replay" in health_html({}, replay=True)


# --- the burn-in in the results JSON, as it goes ----------------------------------------------------------

CHECKPOINTS = """
import json

import pytest

from pytest_gpufabric.plugin import SESSION_KEY


@pytest.hookimpl(trylast=True)  # after the plugin's recorder began checkpointing the burn-in
def pytest_configure(config):
    session = config.stash[SESSION_KEY]
    copies = []

    def copy(burn_in, record):  # the results the recorder's checkpoint has just written
        copies.append(json.loads((session.report_dir / "gpufabric-results.json").read_text()))
        (session.report_dir / "checkpoints.json").write_text(json.dumps(copies))

    session.follow_burn_in(copy)
"""


def test_the_results_json_holds_each_burn_in_chunk_as_it_ends(pytester: pytest.Pytester, warm_start_up):
    """Real CPU workers, 1 s chunks: after each one the results JSON on disk holds it (the burn-in runs inside
    one test, so the per-test rewrite alone would leave hours of burn-in out of it until the end). How many chunks
    fit in the 12 s depends on how long a worker takes to start on this machine (a loaded 2-core machine: one)."""
    pytester.makefile(".yaml", **{"cpu-burn": CPU_PROFILE})
    pytester.makeconftest(CHECKPOINTS)
    pytester.makepyfile(test_checkpoints="def test_checkpoints(gpufabric_run):\n"
                                         "    gpufabric_run.measurement('burn_in')\n")
    result = pytester.runpytest_subprocess("--gpu-profile", "cpu-burn.yaml", "--gpu-burn-in", f"{DURATION}s",
                                           "-k", "test_checkpoints", "test_checkpoints.py")
    result.assert_outcomes(passed=1)
    # on the terminal as the burn-in goes, not in the test's captured output: the bar is the wall-clock time
    chunk = "GPU0 * TFLOP/s 0 wrong  GPU1 * TFLOP/s 0 wrong"
    result.stdout.fnmatch_lines([
        "[[]burn-in[]] [[]..............................[]]   0.0/0.2 min  GEMM burn on every GPU, results "
        "cross-checked",
        f"[[]burn-in[]] [[]#*[]]   0.?/0.2 min  {chunk}",
        "[[]burn-in[]] [[]##############################[]]   0.?/0.2 min  done: 0.? min of GEMMs on every GPU",
        ".*"])
    copies = json.loads((pytester.path / "reports" / "checkpoints.json").read_text())
    assert len(copies) >= 3  # the start, a copy per chunk (one at least), the end
    assert copies[0]["burn_in"]["chunks"] == [] and copies[0]["burn_in"]["elapsed_s"] == 0
    chunks = len(copies) - 2
    for number, copy in enumerate(copies[1:], start=1):
        assert schema_errors(copy) == []
        assert copy["summary"]["verdict"] == "INCOMPLETE" and copy["tests"] == {}  # mid-test: none reported yet
        burn_in = copy["burn_in"]
        assert [c["type"] for c in burn_in["chunks"]] == ["gemm"] * min(number, chunks)
        # the copy after the last chunk may already say finished (its GEMM time reached the duration)
        assert burn_in["finished"] in ({False} if number < chunks else {True, False} if number == chunks else {True})
        assert burn_in["duration_s"] == DURATION
        assert burn_in["log"] == str(pytester.path / "reports" / "gpufabric-burnin.jsonl")
    final = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    assert schema_errors(final) == []
    assert final["burn_in"]["chunks"] == copies[-1]["burn_in"]["chunks"] and final["burn_in"]["finished"]
    assert final["burn_in"]["chunks"] == read_log(pytester.path / "reports" / "gpufabric-burnin.jsonl")[1:-1]


def test_a_failed_workload_is_logged_in_the_results_and_fails_every_gpu(cpu_profile, tmp_path, spares_left_cold):
    """The GEMM workload of a chunk failing for real (asked to corrupt a GPU it does not have): the log, the
    burn-in's records and the results JSON keep it, and it is in every GPU's verdict."""
    from pytest_gpufabric.errors import GpuFabricError
    from pytest_gpufabric.report.results_document import ReportedOutcomes, results_document
    from pytest_gpufabric.run_options import RunOptions
    from pytest_gpufabric.session import FabricSession

    session = FabricSession(RunOptions(profile=cpu_profile, report_dir=tmp_path, burn_in_s=2.0, plant_fault=5))
    with pytest.raises(GpuFabricError, match="--plant-fault 5: there are 2 GPU"):
        session.measurement("burn_in")
    document = results_document(session.run_facts(), ReportedOutcomes(), 0, finished_at=None)
    assert schema_errors(document) == []
    [error] = document["burn_in"]["chunks"]
    assert error["type"] == "error" and error["workload"] == "gemm_burn" and not document["burn_in"]["finished"]
    assert read_log(tmp_path / "gpufabric-burnin.jsonl")[-1] == error

    good = run_burn_in(cpu_profile, 1.5, tmp_path / "good.jsonl", sha256=cpu_profile.sha256)
    check = check_burn_in_gpu(0, None, good.gpu_totals()[0], {}, {}, good.elapsed_s, [error["error"]])
    assert check.verdict == "failed" and "the GEMM workload failed during the burn-in (" in check.message
    assert "--plant-fault 5: there are 2 GPU(s)" in check.message


def test_a_log_of_other_gpus_is_not_evidence_of_this_machine(pytester: pytest.Pytester):
    """Two real recordings of two 2x H200 hosts put together: the 2-minute burn-in log of one and the snapshot of
    the other. Each GPU's burn-in is not checked (a log of boards this machine does not have shows nothing of its
    own, and accuses nothing), naming both serials."""
    bundle = pytester.path / "mixed"
    shutil.copytree(Path(__file__).parent / "data" / "bundles" / "h200-nvswitch-x2", bundle)
    shutil.copy(RESULTS / "burn-in-2min-window-from-set-up-on-h200-x2.jsonl", bundle / "gpufabric-burnin.jsonl")
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle),
                                "-k", "test_burn_in_gpu", "-rs")
    result.assert_outcomes(skipped=2)
    assert result.ret == 7  # -k ran only these, and they showed nothing: NOT TESTED
    logged = read_log(bundle / "gpufabric-burnin.jsonl")[0]["serials"]
    machine = json.loads((bundle / "nvml.json").read_text())
    for index in (0, 1):
        found = machine["gpus"][index]["serial"]
        assert logged[str(index)] != found
        result.stdout.fnmatch_lines([f"*not checked: GPU{index}: the burn-in log was recorded on serial "
                                     f"{logged[str(index)]}, but this machine's GPU{index} is serial {found}: the log "
                                     "is another GPU's *"])


def test_the_live_ten_minute_burn_in_is_in_its_results_json_chunk_by_chunk():
    """hardware/record-burn-in.sh on 2x H200 SXM 141GB, every suite with --gpu-burn-in 10m: the results JSON the
    machine wrote holds the burn-in's chunks as logged (with each chunk's background health reads), the four
    GEMM chunks at 609-611 TFLOP/s with no wrong element, and each GPU's verdict by the serial NVML reported."""
    live = json.loads((RESULTS / "acceptance-with-10min-burn-in-on-h200-x2.json").read_text())
    # recorded before the results format gained its promises (schema version 1): its parts validate
    assert live["schema_version"] == 1 and schema_errors(live["machine"], "machine") == []
    assert live["summary"]["verdict"] == "ACCEPTED" and live["summary"]["passed"] == 35
    burn_in = live["burn_in"]
    log = read_log(REAL_LOG.parents[1] / "h200-nvswitch-x2-acceptance" / "gpufabric-burnin.jsonl")
    assert burn_in["chunks"] == [r for r in log if r["type"] != "start" and r["type"] != "end"]
    assert burn_in["finished"] and burn_in["resumed_from_s"] == 0 and round(burn_in["elapsed_s"]) == 600
    gemm = [c for c in burn_in["chunks"] if c["type"] == "gemm"]
    assert [c["type"] for c in burn_in["chunks"]].count("all_reduce") == 4 and len(gemm) == 4
    for chunk in gemm:
        assert len(chunk["timeline"]) >= 60  # a read about every 2 s (2 s apart, plus the read) through 150 s
        for gpu in chunk["result"]["gpus"]:
            assert gpu["errors_self"] == gpu["errors_cross"] == 0 and 600 < gpu["tflops"] < 620
    serials = {str(g["index"]): g["serial"] for g in live["machine"]["gpus"]}
    assert burn_in["serials"] == serials
    verdicts = {c["subject"]: c["verdict"] for c in live["checks"] if c["name"] == "burn-in-gpu"}
    assert verdicts == {f"GPU{i} (serial {s})": "passed" for i, s in serials.items()}
