"""The health watchdog and the burn-in's health sampling, on NVML reads recorded live on 2x H200 SXM 141GB: the
background timeline of the 10-minute burn-in (temperature, power, clock events every 2 s) and the NVLink
counter rises its first GEMM chunk recorded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pytest_gpufabric.checks.burn_in import check_burn_in_gpu
from pytest_gpufabric.checks.health import health_problems
from pytest_gpufabric.fabric import health as fabric_health
from pytest_gpufabric.fabric.health import GpuHealth, window_record
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.watchdog import attribute
from pytest_gpufabric.workloads.burn_in import read_log, run_burn_in

DATA = Path(__file__).parent / "data"
LIVE = json.loads((DATA / "results" / "burn-in-10min-live-on-h200-x2.json").read_text())
TIMELINE = LIVE["health"]["timeline"]
SERIALS = {int(i): s for i, s in read_log(DATA / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl")[0]
           ["serials"].items()}
FIRST_CHUNK = next(r for r in read_log(DATA / "bundles" / "h200-burn-in-10min" / "gpufabric-burnin.jsonl")
                   if r["type"] == "gemm")


def _read(point: dict, counters_moved: bool) -> dict[int, GpuHealth]:
    """One recorded timeline point as a HealthReader read; the counters at zero, or risen by the first chunk."""
    return {int(i): GpuHealth(int(i), SERIALS[int(i)],
                              dict(FIRST_CHUNK["health"][i]["rose"]) if counters_moved else
                              {name: 0 for name in FIRST_CHUNK["health"][i]["rose"]},
                              temperature_c=g["temperature_c"], power_w=g["power_w"], throttle=g["throttle"])
            for i, g in point["gpus"].items()}


class RecordedReader:
    """Stands in for fabric.health.HealthReader: each read is the next point of the recorded timeline, with the
    NVLink counters where they stood before the first chunk until ``work_done``, then where they stood after it."""

    work_done = False

    def __init__(self, first_point: int = 0) -> None:
        self.next_point = first_point
        self.handed_out: list[dict[int, GpuHealth]] = []
        self.serials = SERIALS
        self.xid_events: list[dict] = []

    def read(self) -> dict[int, GpuHealth]:
        reads = _read(TIMELINE[self.next_point % len(TIMELINE)], self.work_done)
        self.next_point += 1
        self.handed_out.append(reads)
        return reads

    def watch_xid(self) -> None:
        return None

    def close(self) -> None:
        pass


def test_a_window_keeps_the_peaks_its_closing_read_misses():
    """The closing read of a GEMM chunk is taken after the GPUs cooled: the window keeps the background peaks."""
    idle, loaded = 0, next(i for i, p in enumerate(TIMELINE) if p["gpus"]["0"]["temperature_c"] >= 60)
    cooled = next(i for i in range(loaded, len(TIMELINE)) if TIMELINE[i]["gpus"]["0"]["temperature_c"] < 45)
    window = window_record(_read(TIMELINE[idle], False), _read(TIMELINE[cooled], True), TIMELINE[loaded:cooled])
    hottest = max(p["gpus"]["0"]["temperature_c"] for p in TIMELINE[loaded:cooled])
    gpu0 = window["0"]
    assert gpu0["temperature_c"] < 45 < 60 <= hottest == gpu0["peak_temperature_c"]
    assert gpu0["peak_power_w"] > 600 > gpu0["power_w"]  # the software power cap near 700 W, under load only
    assert gpu0["throttle_seen"] == ["sw_power_cap"] and gpu0["serial"] == SERIALS[0]
    assert gpu0["rose"] == FIRST_CHUNK["health"]["0"]["rose"]

    # the h200 profile's own limits: a healthy machine under load passes
    assert health_problems(window, load_profile("h200-nvswitch-x2").data["health"]) == []
    problems = health_problems(window, {"max_temperature_c": hottest - 1, "forbid_throttle": ["sw_power_cap"],
                                        "forbid": ["nvlink_crc_data"]})
    crc = {int(n.split(":")[1]): d for n, d in FIRST_CHUNK["health"]["0"]["rose"].items() if "crc_data" in n}
    assert len(crc) == 18 and len(problems) == 2  # one sentence per GPU
    assert problems[0] == (
        f"GPU0 (serial {SERIALS[0]}) during this test: nvlink_crc_data rose by {sum(crc.values())} on 18 links ("
        + ", ".join(f"{link}: +{crc[link]}" for link in range(18)) + ") (NVLink data with CRC errors); "
        f"reached {hottest} C, above the {hottest - 1} C allowed; clocks held back by sw_power_cap")


def test_a_recording_without_peaks_is_judged_on_its_closing_read():
    record = {"1": {"rose": {}, "temperature_c": 80, "power_w": 300.0, "throttle": ["hw_slowdown"]}}
    assert health_problems(record, {"max_temperature_c": 75}) == [
        "GPU1 (serial unknown) during this test: reached 80 C, above the 75 C allowed; clocks held back by hw_slowdown"]


PROFILE = """name: watched
extends: h200-nvswitch-x2
health: {interval_s: 3600, forbid: [nvlink_crc_data]}
"""
TESTS = """
import pytest
from pytest_gpufabric.fabric import health


@pytest.fixture(scope="session")
def gemm_burn():
    health.HealthReader.work_done = True  # the fixture's work moves the counters, as the burn-in's GEMMs do


def test_needs_the_burn(gemm_burn):
    pass


def test_after_it():
    pass
"""


def test_the_watchdog_window_opens_at_set_up(pytester: pytest.Pytester, monkeypatch):
    """A session fixture's work (the burn-in runs in one) counts for the test whose set-up ran it."""
    monkeypatch.setattr(fabric_health, "HealthReader", RecordedReader)
    monkeypatch.setattr(RecordedReader, "work_done", False)
    pytester.makefile(".yaml", watched=PROFILE)
    pytester.makepyfile(test_watched=TESTS)
    result = pytester.runpytest_inprocess("--gpu-profile", "watched.yaml", "test_watched.py", "-k", "watched")
    result.assert_outcomes(passed=1, failed=1)
    crc = FIRST_CHUNK["health"]["1"]["rose"]["nvlink_crc_data:0"]
    result.stdout.fnmatch_lines([f"health: GPU0 (serial {SERIALS[0]}) during this test: nvlink_crc_data rose by *",
                                 f"GPU1 (serial {SERIALS[1]}) during this test: nvlink_crc_data rose by * on 18 "
                                 f"links (0: +{crc}, *) (NVLink data with CRC errors)"])
    results = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    tests = results["health"]["tests"]
    assert tests["test_watched.py::test_needs_the_burn"]["1"]["rose"] == FIRST_CHUNK["health"]["1"]["rose"]
    assert tests["test_watched.py::test_after_it"]["1"]["rose"] == {}


def test_each_burn_in_chunk_keeps_its_peaks(tmp_path):
    """The burn-in samples its reader while a chunk runs (real CPU workers, the H200's recorded reads)."""
    profile_path = tmp_path / "cpu-burn.yaml"
    profile_path.write_text("name: cpu-burn\ngpus: {count: 2}\nhealth: {interval_s: 0.05}\n"
                            "burn_in: {chunk_s: 1, gemm_size: 256, device: cpu}\n")
    profile = load_profile(str(profile_path))
    loaded = next(i for i, p in enumerate(TIMELINE) if "sw_power_cap" in p["gpus"]["0"]["throttle"])
    reader = RecordedReader(first_point=loaded - 1)  # the chunk opens on an idle read and loads the GPUs
    burn_in = run_burn_in(profile, 1.0, tmp_path / "gpufabric-burnin.jsonl", health=reader, sha256=profile.sha256)
    chunk = next(r for r in read_log(tmp_path / "gpufabric-burnin.jsonl") if r["type"] == "gemm")
    during = reader.handed_out[1:]  # the reads after the one that opened the chunk
    assert len(during) >= 3  # at least two background reads in the chunk, and its closing read
    assert chunk["health"]["0"]["peak_temperature_c"] == max(r[0].temperature_c for r in during)
    assert chunk["health"]["0"]["throttle_seen"] == ["sw_power_cap"]

    # the background reads themselves, for the report's plot of the burn-in (a replayed log draws it too)
    assert [p["gpus"]["0"]["temperature_c"] for p in chunk["timeline"]] == [r[0].temperature_c for r in during[:-1]]

    totals = burn_in.gpu_totals()[0]
    assert totals["max_temperature_c"] == chunk["health"]["0"]["peak_temperature_c"]
    allowed = check_burn_in_gpu(0, SERIALS[0], totals, {}, {}, burn_in.elapsed_s)
    assert allowed.verdict == "passed" and allowed.message.endswith("clock events: sw_power_cap")
    capped = check_burn_in_gpu(0, SERIALS[0], totals, {}, {"forbid_throttle": ["sw_power_cap"]}, burn_in.elapsed_s)
    assert capped.verdict == "failed" and "clocks held back by sw_power_cap" in capped.message


def test_on_the_h200s_the_first_burn_in_test_carries_the_burn_in(judged, pytester: pytest.Pytester):
    """`hardware/record-burn-in.sh start h200-nvswitch-x2 2m` after the window moved to set-up (another
    2x H200 SXM 141GB host): the first burn-in test's row holds the burn-in's counters and peaks; the burn-in's own
    verdicts name the hottest background read and the power cap, and its log replays to them."""
    live = json.loads((DATA / "results" / "burn-in-2min-window-from-set-up-on-h200-x2.json").read_text())
    assert live["summary"]["verdict"] == "ACCEPTED" and live["run"]["mode"] == "live"
    first, later = (live["health"]["tests"][f"test_burn_in.py::test_burn_in_gpu[GPU{i}]"] for i in (0, 1))
    for gpu in ("0", "1"):
        ecc = [name for name in first[gpu]["rose"] if name.startswith("nvlink_ecc_data:")]
        assert len(ecc) == 18 and sum(first[gpu]["rose"].values()) > 10_000  # 2 min of GEMMs and an all_reduce
        assert first[gpu]["peak_temperature_c"] >= 60 > first[gpu]["temperature_c"]
        assert first[gpu]["peak_power_w"] > 600 and first[gpu]["throttle_seen"] == ["sw_power_cap"]
        assert sum(later[gpu]["rose"].values()) < 10 and later[gpu]["peak_temperature_c"] < 50  # judged, not run
    burn_in = {c["subject"]: c for c in live["checks"] if c["name"] == "burn-in-gpu"}
    for index, gpu in enumerate(live["machine"]["gpus"]):
        check = burn_in[f"GPU{index} (serial {gpu['serial']})"]
        assert check["verdict"] == "passed" and check["found"]["clock_events"] == ["sw_power_cap"]
        assert check["found"]["max_temperature_c"] >= 60
        assert check["message"].endswith(f"hottest {check['found']['max_temperature_c']} C, clock events: "
                                          "sw_power_cap")
    bundle = pytester.path / "burn-in"
    bundle.mkdir()
    (bundle / "gpufabric-burnin.jsonl").write_text(
        (DATA / "results" / "burn-in-2min-window-from-set-up-on-h200-x2.jsonl").read_text())
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", str(bundle), "-k", "burn_in")
    judged(result, passed=4)
    replayed = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    assert ([c["message"] for c in replayed["checks"] if c["name"].startswith("burn-in")]
            == [c["message"] for c in live["checks"] if c["name"].startswith("burn-in")])


def test_the_health_table_sums_each_counter_over_its_links():
    """The report's cell for the burn-in's row: one phrase per counter (36 links of two counters do not fit a
    cell); each link's own figure is in the cell's title."""
    from pytest_gpufabric.report.sections import health_html

    live = json.loads((DATA / "results" / "burn-in-2min-window-from-set-up-on-h200-x2.json").read_text())
    html = health_html(live["health"])
    rose = live["health"]["tests"]["test_burn_in.py::test_burn_in_gpu[GPU0]"]["1"]["rose"]
    ecc = sum(d for n, d in rose.items() if n.startswith("nvlink_ecc_data:"))
    crc = sum(d for n, d in rose.items() if n.startswith("nvlink_crc_data:"))
    assert f">nvlink_crc_data +{crc:,} on 18 links, nvlink_ecc_data +{ecc:,} on 18 links</td>" in html
    assert f"nvlink_ecc_data:9 +{rose['nvlink_ecc_data:9']}, nvlink_ecc_data:10 +" in html  # the title, in link order


class OtherGpusReader(RecordedReader):
    """The same reads, from GPUs with other serials: the reports/ folder was copied to another machine."""

    def __init__(self) -> None:
        super().__init__()
        self.serials = {0: "1653824016477", 1: "1653824016216"}


def test_a_burn_in_resumes_only_on_the_gpus_it_began_on(tmp_path):
    profile_path = tmp_path / "cpu-burn.yaml"
    profile_path.write_text("name: cpu-burn\ngpus: {count: 2}\nhealth: {interval_s: 0.05}\n"
                            "burn_in: {chunk_s: 1, gemm_size: 256, device: cpu}\n")
    profile = load_profile(str(profile_path))
    log = tmp_path / "gpufabric-burnin.jsonl"
    run_burn_in(profile, 2.5, log, health=RecordedReader(), sha256=profile.sha256)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:2]) + "\n")  # stopped after its first chunk
    assert read_log(log)[0]["serials"] == {str(i): s for i, s in SERIALS.items()}

    elsewhere = run_burn_in(profile, 2.5, log, health=OtherGpusReader(), sha256=profile.sha256)
    assert elsewhere.resumed_from_s == 0  # started afresh, on these GPUs
    assert read_log(log)[0]["serials"] == {"0": "1653824016477", "1": "1653824016216"}

    log.write_text("\n".join(log.read_text().splitlines()[:2]) + "\n")
    same = run_burn_in(profile, 2.5, log, health=OtherGpusReader(), sha256=profile.sha256)
    assert same.resumed_from_s >= 1.0 and same.finished


# --- NVLink error counters swept in the background (watchdog.SYNC_BUDGET_S) ----------------------------------

#: what one nvmlDeviceGetNvLinkErrorCounter call costs on 2x H100 SXM (tests/data/results/nvml-read-cost-h100-x2)
COST = json.loads((DATA / "results" / "nvml-read-cost-h100-x2" / "nvml-read-cost.json").read_text())
MS_PER_CALL = COST["gpus"][0]["nvlink_per_call"]["ms_per_call"]


class SweptReader(RecordedReader):
    """RecordedReader with the real reader's split: fast reads without NVLink, and each GPU's NVLink counters at
    the cost measured on H100s per call (18 links x 5 counters), from where they stood before the first chunk to
    where they stood after it once ``work_done``."""

    links = {0: list(range(18)), 1: list(range(18))}
    handles = {0: None, 1: None}

    def read_fast(self) -> dict[int, GpuHealth]:
        reads = self.read()
        for health in reads.values():
            health.counters = {k: v for k, v in health.counters.items() if not k.startswith("nvlink_")}
        return reads

    def read_nvlink(self, index: int) -> dict[str, int]:
        time.sleep(len(self.links[index]) * 5 * MS_PER_CALL / 1000)
        rose = FIRST_CHUNK["health"][str(index)]["rose"]
        return {name: (delta if self.work_done else 0) for name, delta in rose.items() if name.startswith("nvlink_")}


SWEPT_TESTS = """
import time

import pytest
from pytest_gpufabric.fabric import health


@pytest.fixture
def long_burn():
    time.sleep(0.5)  # the fixture's GEMMs move the counters half a second in, and run on
    health.HealthReader.work_done = True
    time.sleep(0.8)


def test_before():
    pass


def test_long_burn(long_burn):
    pass


def test_after():
    pass
"""


def test_attribution_of_a_rise_to_the_test_it_rose_in():
    windows = [("a", 0.0, 1.0), ("b", 1.1, 3.0), ("c", 3.1, float("inf"))]
    assert attribute(1.5, 2.5, windows) == ("b", ["b"])  # both reads inside b's window: b did it
    assert attribute(0.5, 1.5, windows) == (None, ["a", "b"])  # the reads span a and b: cannot tell which
    assert attribute(1.02, 1.08, windows) == (None, [])  # between two tests
    assert attribute(3.5, 9.0, windows) == ("c", ["c"])  # the test still running


def test_swept_counters_are_attributed_to_the_long_test_that_raised_them(pytester, monkeypatch):
    """At H100 cost (80 ms a GPU) the NVLink counters are swept in the background; a test of over a second waits
    for a sweep after its end, so the rise its fixture caused is its own, named by link, and no other test's."""
    monkeypatch.setattr(fabric_health, "HealthReader", SweptReader)
    monkeypatch.setattr(SweptReader, "work_done", False)
    pytester.makefile(".yaml", watched=PROFILE)
    pytester.makepyfile(test_swept=SWEPT_TESTS)
    result = pytester.runpytest_inprocess("--gpu-profile", "watched.yaml", "test_swept.py", "-k", "swept")
    result.assert_outcomes(passed=2, failed=1)
    crc = FIRST_CHUNK["health"]["1"]["rose"]["nvlink_crc_data:0"]
    result.stdout.fnmatch_lines([f"*health: GPU0 (serial {SERIALS[0]}) during this test: nvlink_crc_data rose by *",
                                 f"GPU1 (serial {SERIALS[1]}) during this test: nvlink_crc_data rose by * on 18 "
                                 f"links (0: +{crc}, *) (NVLink data with CRC errors)"])
    health = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())["health"]
    assert health["nvlink_reading"]["mode"] == "swept in the background"
    assert health["nvlink_reading"]["full_read_s"] > 0.15  # two GPUs of 90 reads at the measured cost
    rises = health["nvlink_rises"]
    assert {r["test"] for r in rises} == {"test_swept.py::test_long_burn"} and len(rises) == 2 * 36
    assert health["tests"]["test_swept.py::test_long_burn"]["1"]["rose"]["nvlink_crc_data:0"] == crc
    assert health["tests"]["test_swept.py::test_after"]["1"]["rose"] == {}


def test_a_rise_after_the_last_test_is_never_lost(pytester, monkeypatch):
    """Counters that rise after the last test's window closed fail the run's own promise, naming GPU and link."""
    monkeypatch.setattr(fabric_health, "HealthReader", SweptReader)
    monkeypatch.setattr(SweptReader, "work_done", False)
    pytester.makefile(".yaml", watched=PROFILE)
    pytester.makepyfile(test_quiet="""
import pytest
from pytest_gpufabric.fabric import health


@pytest.fixture
def breaks_after():
    yield
    health.HealthReader.work_done = True  # in the teardown: after the test's window closed


def test_quiet(breaks_after):
    pass
""")
    result = pytester.runpytest_inprocess("--gpu-profile", "watched.yaml", "test_quiet.py", "-k", "quiet")
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    watchdog = next(p for p in document["promises"] if p["id"] == "gpufabric-health-watchdog")
    assert watchdog["outcome"] == "failed" and document["summary"]["verdict"] == "REJECTED" and result.ret == 1
    assert f"GPU1 (serial {SERIALS[1]}) " in watchdog["reason"]
    assert "nvlink_crc_data rose by" in watchdog["reason"]
    assert watchdog["tests"] == ["gpufabric-health-watchdog"]
