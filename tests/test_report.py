"""The customer's acceptance report and the results schema, on runs of bundles recorded from real machines:
every results document validates against the shipped schema, the HTML report has its cover, measurements
and skipped checks, and (where Chromium is installed) renders without console errors."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from xml.sax.saxutils import escape as xml_escape

import pytest
from jsonschema import Draft202012Validator

from pytest_gpufabric.fabric.bundle import load_bundle
from pytest_gpufabric.fabric.nvml import nvml_available
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.report.html import Html, _cell, _table, format_value, inventory_html, margin
from pytest_gpufabric.report.results import SCHEMA_PATH, results_schema, results_validator, schema_errors

REPO = Path(__file__).resolve().parents[1]
RESULTS_DATA = REPO / "tests" / "data" / "results"
BUNDLES = REPO / "tests" / "data" / "bundles"
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
needs_no_driver = pytest.mark.skipif(nvml_available()[0], reason="this machine has a working NVIDIA driver")

#: keys the results format gained after some of the committed live results were recorded
NEWER_KEYS = {"skip_reasons", "durations", "verdict_reason", "promises", "not_run", "waivers", "exit_code"}


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def _assert_complete(document: dict) -> None:
    """Valid, and the per-test maps cover every test: each skipped test says why."""
    assert schema_errors(document) == []
    tests = document["tests"]
    assert set(document["durations"]) == set(tests)
    skipped = {nodeid for nodeid, outcome in tests.items() if outcome == "skipped"}
    assert set(document["skip_reasons"]) == skipped
    assert all(reason.strip() and not reason.startswith("Skipped:") for reason in document["skip_reasons"].values())
    summary = document["summary"]
    assert sum(summary[k] for k in ("passed", "failed", "skipped", "error")) == len(tests)


# --- the schema -----------------------------------------------------------------------------------------


def test_schema_is_valid_draft_2020_12_and_shipped_in_the_package():
    schema = results_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA_PATH.parent.name == "report" and SCHEMA_PATH.parent.parent.name == "pytest_gpufabric"


@pytest.mark.parametrize("args, verdict", [
    (("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink"), "INCOMPLETE"),
    (("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie"), "REJECTED"),
    (("--gpu-replay", "rtx-2080ti-pcie"), None),
    (("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-bandwidth", "-k", "bandwidth"),
     "INCOMPLETE"),
    (("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2-acceptance"), "ACCEPTED"),
    (("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", "h200-nvswitch-x2"), "INCOMPLETE"),
], ids=["titan-incomplete", "titan-on-2080ti-rejected", "2080ti-no-profile", "h200-bandwidth-selected",
        "h200-acceptance", "h200-snapshot-only"])
def test_results_of_replays_validate(pytester: pytest.Pytester, args, verdict):
    pytester.runpytest(*args)
    document = _results(pytester)
    _assert_complete(document)
    assert document["summary"]["verdict"] == verdict
    assert document["run"]["mode"] == "replay" and document["machine"] is not None


@needs_no_driver
def test_results_of_a_live_run_without_a_driver_validate(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess("--gpu-profile", "titan-rtx-nvlink")
    assert result.ret != 0
    document = _results(pytester)
    _assert_complete(document)
    assert document["machine"] is None and "NVML" in document["machine_error"]
    assert document["run"]["mode"] == "live" and document["summary"]["verdict"] == "NOT TESTED"


def test_results_under_xdist_keep_skip_reasons(pytester: pytest.Pytester):
    """Under pytest-xdist the reports come from workers (a skip's longrepr travels serialized)."""
    pytester.runpytest_subprocess("-n", "2", "--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink")
    document = _results(pytester)
    _assert_complete(document)
    assert document["skip_reasons"] and document["summary"]["verdict"] == "INCOMPLETE"
    assert document["summary"]["promises"] == {"passed": 8, "failed": 0, "not_checked": 4, "waived": 0}


def test_a_run_killed_midway_leaves_its_results_so_far(pytester: pytest.Pytester):
    """The results are rewritten after every test: a run killed after its second passed test (os._exit, as a
    power loss or the OOM killer would end it: no sessionfinish) leaves what ran until then, schema-valid,
    INCOMPLETE."""
    pytester.makepyfile(killer="""
import os

passed = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        passed.append(report.nodeid)


def pytest_runtest_logfinish(nodeid):
    if len(passed) == 2:
        os._exit(137)
""")
    result = pytester.runpytest_subprocess("-p", "killer", "--gpu-profile", "titan-rtx-nvlink",
                                           "--gpu-replay", "titan-rtx-nvlink")
    assert result.ret == 137
    document = _results(pytester)
    _assert_complete(document)
    assert document["summary"]["passed"] == 2 and document["finished_at"] is None
    assert document["summary"]["verdict"] == "INCOMPLETE"
    assert "had not finished" in document["summary"]["verdict_reason"]
    judged = {check["test"] for check in document["checks"]}
    assert judged and judged <= set(document["tests"])  # every check of a finished test is kept
    assert not list((pytester.path / "reports").glob(".gpufabric-results.*"))  # no temporary file left behind


def test_a_report_dir_that_cannot_be_written_is_a_usage_error(pytester: pytest.Pytester):
    (pytester.path / "taken").write_text("a file, not a folder")
    result = pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "titan-rtx-nvlink",
                                "--gpu-report-dir", "taken/reports")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpu-report-dir: cannot write results to taken/reports: Not a directory"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_results_that_can_no_longer_be_written_keep_the_last_file_and_fail_the_run(pytester: pytest.Pytester):
    """The folder stops taking files after the first test (as a full disk would): the run goes on, the file
    written after the first test stays, and the run ends with one red line and exit status 6 (INCOMPLETE: a
    verdict not on disk is no verdict to sign), not a traceback."""
    pytester.makepyfile(unwritable="""
import pytest

from pytest_gpufabric.plugin import SESSION_KEY

sessions = []


@pytest.hookimpl(trylast=True)  # after the plugin made its session
def pytest_configure(config):
    sessions.append(config.stash[SESSION_KEY])


def pytest_runtest_logfinish(nodeid):
    session = sessions[0]
    if session.report_dir.name != "gone":  # below a file: every write from now on fails
        session.report_dir = session.report_dir / "gpufabric-results.json" / "gone"
""")
    result = pytester.runpytest_subprocess("-p", "unwritable", "--gpu-profile", "h200-nvswitch-x2",
                                           "--gpu-replay", "h200-nvswitch-x2-acceptance")
    assert result.ret == 6
    result.stdout.fnmatch_lines(["*gpufabric: ACCEPTED (profile h200-nvswitch-x2, *",
                                 "gpufabric: could not write */gpufabric-results.json/gone/gpufabric-results.json: "
                                 "Not a directory (the run's own results are not on disk: exit status 6)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    document = _results(pytester)
    assert schema_errors(document) == [] and document["summary"]["verdict"] == "INCOMPLETE"
    assert len(document["tests"]) == 1


def test_schema_rejects_what_the_format_does_not_have(pytester: pytest.Pytester):
    pytester.runpytest("--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie")
    document = _results(pytester)
    broken = json.loads(json.dumps(document))
    broken["summary"]["verdict"] = "MAYBE"
    broken["checks"][0]["verdict"] = "ok"
    broken["tests"]["x::y"] = "flaky"
    broken["profile"]["sha256"] = "not-a-digest"
    broken["surprise"] = 1
    del broken["machine"]["gpus"][0]["serial"]
    errors = "\n".join(schema_errors(broken))
    for where in ("$.summary.verdict", "$.checks[0].verdict", "$.tests['x::y']", "$.profile", "$.machine",
                  "'surprise' was unexpected"):
        assert where in errors, errors


def _committed_results() -> list[Path]:
    return sorted(RESULTS_DATA.glob("*.json"))


@pytest.mark.parametrize("path", _committed_results(), ids=lambda p: p.stem)
def test_committed_live_results_validate_where_they_have_the_current_format(path: Path):
    document = json.loads(path.read_text())
    if "schema_version" not in document:
        pytest.skip(f"{path.name} is not a results document (a suite's measurement file)")
    errors = list(results_validator().iter_errors(document))
    missing = {e.message.split("'")[1] for e in errors if e.validator == "required"}
    older = [e for e in errors if e.validator == "required" and e.message.split("'")[1] in NEWER_KEYS]
    # schema version 1 (the verdict counted tests) is older, not wrong
    older += [e for e in errors if list(e.path) == ["schema_version"] and document["schema_version"] == 1]
    # Recorded before the format gained these keys: the schema describes today's documents and is not
    # weakened for older ones (their parts are validated below). Anything else missing or wrong fails.
    assert len(older) == len(errors), [f"{e.json_path}: {e.message}" for e in errors]
    if errors:
        pytest.skip(f"{path.name} was written before the format had {', '.join(sorted(missing))}")


@pytest.mark.parametrize("path", _committed_results(), ids=lambda p: p.stem)
def test_committed_live_results_parts_validate(path: Path):
    """The machine (read through NVML on real GPUs), profile and check records of every committed live result
    validate against the schema's definitions, whatever their age."""
    document = json.loads(path.read_text())
    if "schema_version" not in document:
        pytest.skip(f"{path.name} is not a results document (a suite's measurement file)")
    assert document["machine"] is not None
    assert schema_errors(document["machine"], "machine") == []
    for check in document["checks"]:
        assert schema_errors(check, "check") == [], check["name"]
    assert document["checks"], "a live acceptance run records checks"


# --- the HTML report ------------------------------------------------------------------------------------


def _html_run(pytester: pytest.Pytester, *args: str, fresh_process: bool = False) -> tuple[str, dict]:
    """The run's HTML report and results. ``fresh_process``: in a new process, for the plots: matplotlib cannot
    be imported twice in one process ("cannot load module more than once per process"), and an in-process
    pytester run drops the modules its run imported, so only the first such run in a process draws plots."""
    run = pytester.runpytest_subprocess if fresh_process else pytester.runpytest
    run(*args, "--html", "reports/acceptance.html", "--self-contained-html")
    return (pytester.path / "reports" / "acceptance.html").read_text(), _results(pytester)


def _gpufabric_section(html: str) -> str:
    start = html.index('<div class="gpufabric" id="gpufabric-report">')
    return html[start:html.index("<script>", start)]


def test_rejected_report_has_cover_measurements_and_skipped_reasons(pytester: pytest.Pytester):
    html, document = _html_run(pytester, "--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie",
                               "--gpu-customer", "ACME Labs")
    section = _gpufabric_section(html)
    # the cover: verdict and why, customer, profile and its digest, machine identity, date, version
    assert '<div class="verdict rejected">Verdict: REJECTED</div>' in section
    assert escape(document["summary"]["verdict_reason"]) in section
    assert "<th>Customer</th><td>ACME Labs</td>" in section
    assert load_profile("titan-rtx-nvlink").sha256 in section and "titan-rtx-nvlink" in section
    for field in ("NVIDIA driver", "CUDA driver", "NCCL", "<th>serial</th>", "<th>UUID</th>", "<th>VBIOS</th>",
                  "pytest-gpufabric", document["plugin_version"], document["started_at"][:10]):
        assert field in section, field
    assert section.index("Verdict: REJECTED") < section.index("Inventory") < section.index("Topology")
    # every check, with its verdict; the mismatch highlighted
    assert "<h2>Measurements</h2>" in section
    table = section[section.index('<table class="measurements">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == len(document["checks"]) + 1
    assert table.count(">FAIL</td>") == sum(c["verdict"] == "failed" for c in document["checks"])
    assert "GPU0-GPU1 NV2" in table and "GPU0-GPU1 PHB" in table
    assert 'class="mismatch">expected NV2, found PHB' in section
    # every skipped test and why
    assert "<h2>Skipped checks</h2>" in section and document["skip_reasons"]
    for nodeid, reason in document["skip_reasons"].items():
        assert escape(reason) in section, nodeid
    # a customer reads tables, not Python reprs
    assert "{'" not in section and "['" not in section and ">None<" not in section


def test_accepted_report_shows_identity_nccl_and_margins(pytester: pytest.Pytester):
    html, document = _html_run(pytester, "--gpu-profile", "h200-nvswitch-x2", "--gpu-replay",
                               "h200-nvswitch-x2-bandwidth", "-k", "bandwidth", "--gpu-customer", "ACME Labs",
                               fresh_process=True)
    section = _gpufabric_section(html)
    # -k bandwidth: the promises it left out are named on the cover, and the run is not ACCEPTED on a part
    assert '<div class="verdict incomplete">Verdict: INCOMPLETE</div>' in section
    assert "<td>gpu-count (not run)</td>" in section
    gpu = document["machine"]["gpus"][0]
    for value in (gpu["serial"], gpu["uuid"], gpu["vbios_version"], document["machine"]["driver_version"],
                  document["machine"]["cuda_driver_version"]):
        assert f"<td>{value}</td>" in section, value
    assert "<th>NCCL</th><td>2.28.9</td>" in section  # what the recorded collectives ran on
    # all_reduce at 256 MiB: 297.4 GB/s busbw against a 285 GB/s floor; 1 MiB: 16.1 us against 68 us
    assert ">+12.4 GB/s (+4.4%)</td>" in section
    assert ">+51.9 us (+76.3%)</td>" in section
    # the busbw-vs-size plots, embedded
    assert "<h2>Plots</h2>" in section and 'src="data:image/png;base64,iVBORw0KGgo' in section


def test_report_without_a_machine_says_why(pytester: pytest.Pytester):
    html, document = _html_run(pytester, "--gpu-replay", "rtx-2080ti-pcie")
    section = _gpufabric_section(html)
    assert document["summary"]["verdict"] is None
    assert '<div class="verdict none">No verdict</div>' in section
    assert "none: nothing was promised" in section and "not given (--gpu-customer)" in section


@pytest.mark.parametrize("check, text", [
    ({"expected": {"min_busbw": "300 GB/s"}, "found": {"busbw_gbps": 270.0}, "unit": "GB/s"}, "−30.0 GB/s (−10.0%)"),
    ({"expected": {"min_busbw": "100 GB/s", "min_fraction_of_peak": 0.5}, "found": {"busbw_gbps": 150.0,
      "peak_gbps": 280.0}, "unit": "GB/s"}, "+10.0 GB/s (+7.1%)"),  # the tighter of the two floors
    ({"expected": {"min": "50 GB/s"}, "found": {"GPU0": 55.0, "GPU1": 45.0}, "unit": "GB/s"}, "−5.0 GB/s (−10.0%)"),
    ({"expected": {"min_bytes": 1000}, "found": {"tx_bytes": 3048, "rx_bytes": 2024}, "unit": "bytes"},
     "+1.00 KiB (+102.4%)"),
    ({"expected": 10 * 2**30, "found": 12 * 2**30, "unit": "bytes"}, "+2.00 GiB (+20.0%)"),
    ({"expected": {"floors_gbit": [22.5]}, "found": {"bw_avg_gbit": 23.14}}, "+0.64 Gb/s (+2.8%)"),
    ({"expected": {"max_slowdown": 4.0}, "found": {"ratio_vs_baseline": 3.0}}, "+1.00 x (+25.0%)"),
    ({"expected": 0.1, "found": {"rows": [{"error": 0.02}, {"error": -0.04}, {"error": None}]}}, "+6.0 points"),
])
def test_margin_of_numeric_thresholds(check, text):
    assert margin(check)[0] == text


@pytest.mark.parametrize("check", [
    {"expected": 2, "found": 2, "unit": None},
    {"expected": {"links_per_gpu": 2}, "found": {"active_links": 0}},
    {"expected": {"min_busbw": "fast"}, "found": {"busbw_gbps": 1.0}},
    {"expected": {"min": "50 GB/s"}, "found": None, "unit": "GB/s"},
    {"expected": None, "found": None},
    {},
])
def test_margin_is_blank_where_there_is_no_numeric_threshold(check):
    assert margin(check) is None


def test_values_are_compact_text():
    assert format_value({"GPU0": {"GPU0": "X", "GPU1": "NV2"}, "GPU1": {"GPU0": "NV2", "GPU1": "X"}}) == "GPU0-GPU1 NV2"
    assert format_value({"busbw_gbps": 297.4319, "time_us": 902.51, "peak": "NVLink", "wrong": 0}) == (
        "busbw: 297.43 GB/s; time: 902.51 us; peak: NVLink; wrong: 0")
    assert format_value({"GPU0->GPU1 (p2p)": 393.11}, "GB/s") == "GPU0->GPU1 (p2p): 393.11 GB/s"
    assert format_value(150754820096, "bytes") == "140.40 GiB"
    assert format_value({"all_active": True, "inactive": []}) == "all_active: yes; inactive: none"
    assert format_value(None) == "—"


# --- rendered in a browser ------------------------------------------------------------------------------

_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   "--hide-scrollbars", "--virtual-time-budget=5000"]
# Chromium logs each console message as `[pid:tid:time:INFO:CONSOLE:1] "text", source: URL (1)` (older
# versions: `CONSOLE(1)`), at INFO whatever the message's level, so console.error and uncaught exceptions are
# told by their text.
_CONSOLE = re.compile(r"CONSOLE[(:]\d+\)?\]\s*(.*)")


def _chromium(profile_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *_CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", *args],
                          capture_output=True, text=True, timeout=180, check=False)


def _render(pytester: pytest.Pytester, html: Path, screenshot: Path, window: str = "1280,1600") -> str:
    """Render the report: the DOM after its scripts ran (with no console errors), then a screenshot."""
    dom = _chromium(pytester.path / "chromium-dom", "--enable-logging=stderr", "--v=1", "--dump-dom",
                    html.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [m.group(1) for m in map(_CONSOLE.search, dom.stderr.splitlines()) if m]
    errors = [line for line in console if re.search(r"Uncaught|error|Error|Failed", line)]
    assert errors == [], errors
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    # without --run-all-compositor-stages-before-draw the capture may show tiles not yet painted
    shot = _chromium(pytester.path / "chromium-shot", "--run-all-compositor-stages-before-draw",
                     f"--screenshot={screenshot}", f"--window-size={window}", html.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert screenshot.is_file() and screenshot.stat().st_size > 20_000
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return dom.stdout


def _cover_first(dom: str) -> None:
    """The cover sits under the title, above pytest-html's Environment table (the script moved it)."""
    assert dom.index('id="gpufabric-report"') < dom.index('id="environment-header"')


@needs_chromium
def test_rejected_report_renders_in_chromium(pytester: pytest.Pytester):
    _html_run(pytester, "--gpu-profile", "titan-rtx-nvlink", "--gpu-replay", "rtx-2080ti-pcie",
              "--gpu-customer", "ACME Labs", fresh_process=True)
    dom = _render(pytester, pytester.path / "reports" / "acceptance.html", REPO / "reports" / "acceptance-report.png")
    assert "Verdict: REJECTED" in dom and "ACME Labs" in dom
    _cover_first(dom)
    # pytest-html's own script ran too: it filled the Environment table from its JSON blob
    assert "GPU profile sha256" in dom[dom.index('id="environment"'):]


@needs_chromium
def test_accepted_report_renders_in_chromium(pytester: pytest.Pytester):
    """The screenshot docs/acceptance-report.png was taken from (reports/acceptance-report-accepted.png): the
    replay of a whole acceptance run of an nvidia-h200-x2 machine, its 10-minute burn-in included."""
    _, document = _html_run(pytester, "--gpu-profile", "h200-nvswitch-x2", "--gpu-replay",
                            "h200-nvswitch-x2-acceptance", "--gpu-customer", "ACME Labs", fresh_process=True)
    dom = _render(pytester, pytester.path / "reports" / "acceptance.html",
                  REPO / "reports" / "acceptance-report-accepted.png", window="1280,3500")
    assert "Verdict: ACCEPTED" in dom and "ACME Labs" in dom and "<td>2.28.9</td>" in dom
    _cover_first(dom)
    for gpu in document["machine"]["gpus"]:
        assert gpu["serial"] in dom and gpu["uuid"] in dom
    burn_in = dom[dom.index("<h2>Burn-in</h2>"):dom.index("<h2>Skipped checks</h2>")]
    assert "10.0 of 10.0 minutes of GEMM burn on every GPU (finished)" in burn_in
    assert burn_in.count("<td>sw_power_cap</td>") == 8  # 4 chunks x 2 GPUs, each at the power cap under load
    assert burn_in.count("busbw 34") == 4 and 'alt="Temperature and power through the burn-in' in burn_in
    assert 'alt="all_reduce busbw vs size"' in dom and 'alt="peak memory vs batch"' in dom  # the suites' plots


@needs_chromium
def test_the_live_burn_in_report_of_the_h200s_renders_in_chromium(pytester: pytest.Pytester):
    """The report pytest-html wrote on nvidia-h200-x2 for the 2-minute burn-in (hardware/record-burn-in.sh):
    the machine's own file, not a replay's, renders with no console errors, its verdict, its Health table with
    the burn-in in the first burn-in test's row, and the health timeline drawn from the watchdog's reads."""
    html = RESULTS_DATA / "burn-in-2min-window-from-set-up-on-h200-x2.html"
    live = json.loads((RESULTS_DATA / "burn-in-2min-window-from-set-up-on-h200-x2.json").read_text())
    dom = _render(pytester, html, REPO / "reports" / "burn-in-report-live.png", window="1280,4200")
    assert "Verdict: ACCEPTED" in dom and "burn-in acceptance" in dom
    _cover_first(dom)
    health = dom[dom.index("<h2>Health</h2>"):]
    first = live["health"]["tests"]["test_burn_in.py::test_burn_in_gpu[GPU0]"]["0"]
    assert f"<td>{first['peak_temperature_c']}</td>" in health and "sw_power_cap" in health
    assert 'alt="GPU health timeline"' in health
    for gpu in live["machine"]["gpus"]:
        assert gpu["serial"] in dom


# --- text from the evidence, the profile and the customer is never markup --------------------------------

# Were any of it markup, the page would gain an element: <b>, an <img> whose failed load runs its onerror, a
# <script>. The scripts mark the page (data-pwned on <body>), so a DOM that ran them says so.
_PAYLOAD = ("<img src=x onerror=\"document.body.dataset.pwned='img'\">"
            "<script>document.body.dataset.pwned='script'</script><b>bold</b>")
_RAW = ("<b>bold</b>", "<img src=x", "<script>document.body")


class _Elements(HTMLParser):
    """The elements of a page as a browser's parser sees them; the text inside each <script>."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def _assert_nothing_injected(page: str) -> None:
    elements = _Elements(page)
    assert not [attrs for tag, attrs in elements.tags if tag == "img" and attrs.get("src") == "x"]
    assert not [attrs for tag, attrs in elements.tags if "onerror" in attrs]
    assert not [attrs for tag, attrs in elements.tags if "data-pwned" in attrs]
    assert not [script for script in elements.scripts if "pwned" in script]
    # pytest-html's and this plugin's own pages have no <b> at all
    assert not [attrs for tag, attrs in elements.tags if tag == "b"]


def _marked_up_evidence(pytester: pytest.Pytester) -> dict[str, str | Path]:
    """A real bundle and a shipped profile, copied below a folder whose name is markup too, with markup put into
    the host's name, GPU0's name (it starts with '<td', the issue's case), the profile's description and GPU
    model; and the customer's name."""
    folder = pytester.path / "evidence <img src=x onerror=\"document.body.dataset.pwned='path'\">"
    bundle = folder / "h200-nvswitch-x2"
    shutil.copytree(BUNDLES / "h200-nvswitch-x2", bundle)
    gpu_name = "<td>" + _PAYLOAD  # DERIVED: GPU0 of nvidia-h200-x2 is an "NVIDIA H200"
    hostname = _PAYLOAD  # DERIVED: the host is "vm"
    nvml = json.loads((bundle / "nvml.json").read_text())
    nvml["hostname"] = hostname
    nvml["gpus"][0]["name"] = gpu_name
    (bundle / "nvml.json").write_text(json.dumps(nvml, indent=2))
    query = (bundle / "nvidia-smi-q.xml").read_text()
    # DERIVED: the same name in the first GPU's product_name (the bundle's files agree)
    query = query.replace("<product_name>NVIDIA H200</product_name>",
                          f"<product_name>{xml_escape(gpu_name)}</product_name>", 1)
    (bundle / "nvidia-smi-q.xml").write_text(query)

    model = "NVIDIA H200 " + _PAYLOAD  # DERIVED: the profile promises an "NVIDIA H200"
    profile = folder / "h200-nvswitch-x2.yaml"
    text = (REPO / "profiles" / "h200-nvswitch-x2.yaml").read_text()
    # DERIVED: markup in the description and the GPU model (a JSON string is a YAML double-quoted scalar)
    text = text.replace("\ndescription: 2x NVIDIA H200 SXM 141 GB on NVSwitch (NV18)\n",
                        f"\ndescription: {json.dumps(_PAYLOAD)}\n", 1)
    text = text.replace("\n  model: NVIDIA H200\n", f"\n  model: {json.dumps(model)}\n", 1)
    profile.write_text(text)
    assert load_profile(str(profile)).gpu_model == model
    return {"bundle": bundle, "profile": profile, "gpu_name": gpu_name, "hostname": hostname, "model": model,
            "customer": "ACME " + _PAYLOAD}


def _run_marked_up(pytester: pytest.Pytester, evidence: dict) -> tuple[str, dict]:
    return _html_run(pytester, "--gpu-profile", str(evidence["profile"]), "--gpu-replay", str(evidence["bundle"]),
                     "--gpu-customer", evidence["customer"])


def test_table_cells_are_text_unless_the_report_built_them():
    """The issue: a cell whose text starts with '<td' was passed through as markup."""
    table = _table(["GPU", "name"], [["GPU0", "<td><script>alert(1)</script>"], ["GPU1", _cell("H200", "match")]])
    assert "<script>" not in table
    assert "<tr><td>GPU0</td><td>&lt;td&gt;&lt;script&gt;alert(1)&lt;/script&gt;</td></tr>" in table
    assert '<tr><td>GPU1</td><td class="match">H200</td></tr>' in table
    assert isinstance(table, Html) and isinstance(_cell("x"), Html)
    assert _cell("a", title='"><b>') == '<td title="&quot;&gt;&lt;b&gt;">a</td>'


def test_inventory_says_not_recorded_for_missing_values_only():
    """A missing name reads 'not recorded'; a GPU whose name is the text 'None' keeps it."""
    fabric = load_bundle(BUNDLES / "h200-nvswitch-x2")
    gpus = [dataclasses.replace(fabric.gpus[0], name=None),  # DERIVED: GPU0's name not recorded
            dataclasses.replace(fabric.gpus[1], name="None")]  # DERIVED: GPU1 named "None"
    html = inventory_html(dataclasses.replace(fabric, gpus=gpus))
    assert "<tr><td>GPU0</td><td>not recorded</td>" in html
    assert "<tr><td>GPU1</td><td>None</td>" in html


def test_marked_up_evidence_profile_and_customer_are_shown_as_text(pytester: pytest.Pytester):
    evidence = _marked_up_evidence(pytester)
    html, document = _run_marked_up(pytester, evidence)
    assert document["machine"]["hostname"] == evidence["hostname"]
    assert document["machine"]["gpus"][0]["name"] == evidence["gpu_name"]
    # the promised model is not the recorded one: the GPU model checks fail, the rest of the report is drawn
    assert document["summary"]["verdict"] == "REJECTED"
    for raw in _RAW:
        assert raw not in html, raw
    _assert_nothing_injected(html)
    section = _gpufabric_section(html)
    assert "&lt;script&gt;" in section and "&lt;b&gt;bold&lt;/b&gt;" in section
    customer = escape(evidence["customer"])
    assert f"<h1>GPU server acceptance: {customer}</h1>" in section
    assert f"<th>Customer</th><td>{customer}</td>" in section
    assert f"<th>Machine</th><td>{escape(evidence['hostname'])}</td>" in section
    assert f"replay of bundle {escape(str(evidence['bundle']))} (not this host)" in section
    assert f"<th>Profile</th><td>h200-nvswitch-x2 ({escape(str(evidence['profile']))})</td>" in section
    # the cover's GPU table and the inventory; the gpu-model checks' Found (GPU0) and Expected (both GPUs)
    assert section.count(f"<tr><td>GPU0</td><td>{escape(evidence['gpu_name'])}</td>") == 2
    assert section.count(f"<td>{escape(evidence['gpu_name'])}</td>") == 3
    assert section.count(f"<td>{escape(evidence['model'])}</td>") == 2


def test_marked_up_values_stay_plain_text_without_an_html_report(pytester: pytest.Pytester):
    """Only pytest-html's Environment table reads the metadata as HTML; pytest-metadata's header shows it as it is."""
    result = pytester.runpytest("-v", "--collect-only", "--gpu-replay", str(BUNDLES / "h200-nvswitch-x2"),
                                "--gpu-customer", "ACME & <Sons>")
    assert "'Customer': 'ACME & <Sons>'" in result.stdout.str()


@needs_chromium
def test_marked_up_evidence_renders_as_text_in_chromium(pytester: pytest.Pytester):
    """In the browser, after pytest-html's script drew its Environment table (each value through innerHTML) and
    the cover was moved up: no element from the markup, no script of it run, the text shown as it was given."""
    evidence = _marked_up_evidence(pytester)
    _run_marked_up(pytester, evidence)
    dom = _render(pytester, pytester.path / "reports" / "acceptance.html", pytester.path / "marked-up.png")
    _cover_first(dom)
    _assert_nothing_injected(dom)
    assert "data-pwned" not in dom  # no script of the markup ran (each would have marked <body>)
    text = _text_of(dom)
    for value in (evidence["customer"], evidence["hostname"], evidence["gpu_name"], evidence["model"],
                  str(evidence["profile"]), str(evidence["bundle"])):
        assert value in text, value
    environment = dom[dom.index('id="environment"'):]
    environment = _text_of(environment[:environment.index("</table>")])
    for value in (evidence["customer"], f"GPU0 {evidence['gpu_name']} (serial", str(evidence["bundle"])):
        assert value in environment, value


def _text_of(page: str) -> str:
    """The page's text as a reader sees it (scripts and styles left out)."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.parts: list[str] = []
            self._skip = False

        def handle_starttag(self, tag, attrs):
            self._skip = tag in ("script", "style")

        def handle_endtag(self, tag):
            self._skip = False

        def handle_data(self, data):
            if not self._skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(page)
    parser.close()
    return "".join(parser.parts)
