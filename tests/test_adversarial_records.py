"""The verdict comes from the check records, never from pytest's report stream (issue 40, first part).

Each case replays a whole acceptance run recorded on a real 2x H200 SXM machine (``h200-nvswitch-x2-acceptance``,
ACCEPTED by profile ``h200-nvswitch-x2``) or the same machine with peer-to-peer off
(``h200-nvswitch-x2-p2p-disabled``, REJECTED: its four NVLink traffic promises fail), and does what a hostile user
might: block the plugin's recorder, rewrite failed reports into passes from a plugin of their own, mark every test
xfail, claim a shipped promise with a test of their own, skip a test saying "waived", or keep a shipped test from
running its check. None of them may move the verdict toward ACCEPTED.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from pytest_gpufabric.rejudge import derive_verdict
from pytest_gpufabric.report.results import RESULTS_SCHEMA_VERSION, schema_errors

PROFILE = "h200-nvswitch-x2"
ACCEPTED_BUNDLE = "h200-nvswitch-x2-acceptance"
REJECTED_BUNDLE = "h200-nvswitch-x2-p2p-disabled"
RESULTS = Path("reports") / "gpufabric-results.json"
#: what the p2p-disabled bundle breaks: no NVLink traffic during the DDP steps and the all-reduce
BROKEN = ("nvlink-traffic[GPU0]", "nvlink-traffic[GPU1]", "nvlink-traffic-volume[GPU0]", "nvlink-traffic-volume[GPU1]")


def _results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / RESULTS).read_text())


#: the recorded bundles hold no kernel log: the written waiver that lets an edit, not the missing log, decide
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the record tests"


def _run(pytester: pytest.Pytester, *args: str, bundle: str = ACCEPTED_BUNDLE):
    return pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", bundle, "--gpu-waive", NO_KERNEL_LOG, *args)


def _outcome(document: dict, promise_id: str) -> tuple[str, str]:
    promise = next(p for p in document["promises"] if p["id"] == promise_id)
    return promise["outcome"], promise["reason"]


def _plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    """A module ``name`` for ``-p name``, importable here and in pytest-xdist's workers."""
    pytester.makepyfile(**{name: textwrap.dedent(source)})
    pytester.syspathinsert()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), os.environ.get("PYTHONPATH", "")]))


def _agrees(document: dict) -> None:
    """The results are of the current format, valid, and `gpufabric verify`'s re-judging gives their verdict."""
    assert document["schema_version"] == RESULTS_SCHEMA_VERSION == 4
    assert schema_errors(document) == []
    assert all(check.get("promise") for check in document["checks"])
    verdict, _, counts = derive_verdict(document)
    assert (verdict, counts) == (document["summary"]["verdict"], document["summary"]["promises"])


# 1. the plugin's parts are not optional

@pytest.mark.parametrize("part", ["gpufabric-recorder", "gpufabric-finish-whole", "pytest_gpufabric.fixtures",
                                  "gpufabric-html"])
def test_blocking_a_part_of_the_plugin_is_a_usage_error(pytester: pytest.Pytester, part: str):
    result = _run(pytester, "-p", f"no:{part}")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"ERROR: -p no:{part} blocks a part of pytest-gpufabric that --gpu-profile and "
                                 "--gpu-replay need; remove it (-p no:gpufabric turns the whole plugin off)"])
    assert not (pytester.path / RESULTS).exists()


def test_blocking_the_recorder_from_pytest_addopts_is_a_usage_error(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:gpufabric-recorder")
    result = _run(pytester)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: -p no:gpufabric-recorder blocks a part of pytest-gpufabric*"])


def test_blocking_the_recorder_from_the_ini_addopts_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\naddopts = -p no:gpufabric-recorder\n")
    result = _run(pytester)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: -p no:gpufabric-recorder blocks a part of pytest-gpufabric*"])


def test_a_plugin_unregistering_the_recorder_is_a_usage_error(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch):
    _plugin(pytester, monkeypatch, "unregister_recorder", """
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            config.pluginmanager.unregister(name="gpufabric-recorder")
    """)
    result = _run(pytester, "-p", "unregister_recorder")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: gpufabric-recorder was unregistered: a part of pytest-gpufabric that "
                                 "--gpu-profile and --gpu-replay need; remove the plugin that unregisters it"])
    assert not (pytester.path / RESULTS).exists()


def test_blocking_pytest_html_only_leaves_the_report_unwritten(pytester: pytest.Pytester):
    result = _run(pytester, "-p", "no:html")
    assert result.ret == 0 and _results(pytester)["summary"]["verdict"] == "ACCEPTED"
    assert not list(pytester.path.rglob("*.html"))


# 2. a hook that rewrites reports changes nothing

PASS_EVERYTHING = """
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            report.outcome = "passed"
            report.longrepr = None
            report.user_properties[:] = [p for p in report.user_properties if p[0] != "gpufabric_check"]
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_plugin_turning_failures_into_passes_is_still_rejected(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch, workers: list[str]):
    if workers:
        pytest.importorskip("xdist")
    name = "pass_everything_" + ("xdist" if workers else "here")
    _plugin(pytester, monkeypatch, name, PASS_EVERYTHING)
    args = ("--gpu-profile", PROFILE, "--gpu-replay", REJECTED_BUNDLE, "-p", name, *workers)
    # pytest-xdist's local workers take the sys.path of the process that first imported it: a fresh one for them
    result = pytester.runpytest_subprocess(*args) if workers else pytester.runpytest(*args)
    document = _results(pytester)
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    assert document["summary"]["promises"]["failed"] == 4
    assert all(document["tests"][t] == "passed" for p in document["promises"] if p["id"] in BROKEN
               for t in p["tests"])  # pytest was told they passed
    outcome, reason = _outcome(document, "nvlink-traffic[GPU0]")
    assert outcome == "failed" and reason.startswith("GPU0: expected TX and RX growth on 18 links during 50 DDP")
    _agrees(document)


# 3. xfail on every test

def test_a_conftest_marking_every_test_xfail_is_still_rejected(pytester: pytest.Pytester):
    pytester.makeconftest("""
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.xfail(reason="known"))
    """)
    result = _run(pytester, bundle=REJECTED_BUNDLE)
    document = _results(pytester)
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    assert [p["id"] for p in document["promises"] if p["outcome"] == "failed"] == list(BROKEN)
    assert document["tests"]["test_nvlink_traffic.py::test_every_nvlink_carries_training_traffic[GPU0]"] == "skipped"
    _agrees(document)


def test_xfail_on_every_test_of_the_whole_run_keeps_it_accepted(pytester: pytest.Pytester):
    """An xpassed test with passing records is passed: the marker moves neither way."""
    pytester.makeconftest("""
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.xfail(reason="known"))
    """)
    result = _run(pytester)
    assert result.ret == 0 and _results(pytester)["summary"]["verdict"] == "ACCEPTED"


# 4. only the shipped suites judge the shipped promises

@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_test_of_your_own_claiming_a_shipped_kind_is_a_usage_error(pytester: pytest.Pytester, workers: list[str]):
    if workers:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_mine="""
        from pytest_gpufabric.promise import promise

        @promise("collective-bandwidth")
        def test_fast_enough():
            pass
    """)
    result = _run(pytester, "test_mine.py", *workers, bundle=REJECTED_BUNDLE)
    assert result.ret == 4
    assert not (pytester.path / RESULTS).exists()
    result.stderr.fnmatch_lines(["ERROR: test_mine.py::test_fast_enough: a test of your own claims the promise kind "
                                 "'collective-bandwidth', which only pytest-gpufabric's shipped suites judge; remove "
                                 "its @promise marker*"])


SKIP_BODIES = """
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(pyfuncitem):
        return True  # "called": the test passes, its body never ran
"""


def test_a_shipped_test_that_passed_without_its_check_is_not_checked(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch):
    _plugin(pytester, monkeypatch, "skip_bodies", SKIP_BODIES)
    result = _run(pytester, "-p", "skip_bodies", bundle=REJECTED_BUNDLE)
    document = _results(pytester)
    assert result.ret == 7 and document["summary"]["verdict"] == "NOT TESTED"
    assert document["tests"]["test_nvlink_traffic.py::test_every_nvlink_carries_training_traffic[GPU0]"] == "passed"
    assert _outcome(document, "nvlink-traffic[GPU0]") == ("not checked", "its test recorded no check")
    assert _outcome(document, "gpu-count") == ("not checked", "its test recorded no check")
    assert document["summary"]["promises"]["passed"] == 0
    _agrees(document)


# 5. a skip's text is never a waiver

SKIP_AS_WAIVED = """
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item):
        if "nvlink" in item.name:
            pytest.skip("waived: agreed with nobody")
"""


def test_a_skip_saying_waived_waives_nothing(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    _plugin(pytester, monkeypatch, "skip_as_waived", SKIP_AS_WAIVED)
    result = _run(pytester, "-p", "skip_as_waived", bundle=REJECTED_BUNDLE)
    document = _results(pytester)
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    # the one waiver given in writing (the kernel log no bundle holds) waives its one promise, and nothing else
    assert document["summary"]["promises"]["waived"] == 1
    assert [(w["promise"], w["matched"]) for w in document["waivers"]] == [("xid-events", ["xid-events"])]
    assert _outcome(document, "nvlink-traffic[GPU0]") == (
        "not checked", "its test skipped it: no waiver names it; its skip said: waived: agreed with nobody")
    _agrees(document)


def test_a_waiver_given_with_gpu_waive_still_waives(pytester: pytest.Pytester):
    result = _run(pytester, "--gpu-waive", "nvlink-traffic=agreed with ACME, contract 4711",
                  "--gpu-waive", "nvlink-traffic-volume=agreed with ACME, contract 4711",
                  "--gpu-waive", "collective-bandwidth=not sold", "--gpu-waive", "copy-bandwidth=not sold",
                  "--gpu-waive", "memory-estimate=not sold", "--gpu-waive", "oversized-batch=not sold",
                  "--gpu-waive", "large-model-support=not sold", "--gpu-waive", "offload-changes-no-result=not sold",
                  bundle=REJECTED_BUNDLE)
    document = _results(pytester)
    assert result.ret == 0 and document["summary"]["verdict"] == "ACCEPTED"
    assert _outcome(document, "nvlink-traffic[GPU0]") == ("waived", "agreed with ACME, contract 4711 (--gpu-waive)")
    _agrees(document)


# the channel the records travel by under pytest-xdist

def test_the_controller_reads_only_whole_journal_lines(tmp_path: Path):
    """A results file rewritten mid-run reads the workers' journals as far as each line is whole: a record being
    written is read at the next checkpoint, never half."""
    from pytest_gpufabric.records import REFUSED, ControllerJournal, WorkerJournal

    journal = ControllerJournal()
    try:
        worker = WorkerJournal(journal.folder, "gw0")
        record = {"test": "test_topology.py::test_gpu_count", "promise": "gpu-count", "verdict": "failed"}
        worker.append(record)
        with worker.path.open("a", encoding="utf-8") as handle:
            handle.write('{"test": "test_topology.py::test_gpu_mo')  # the next record, half written
        assert journal.read_new() == [record]
        with worker.path.open("a", encoding="utf-8") as handle:
            handle.write('del[GPU0]", "promise": "gpu-model[GPU0]", "verdict": "passed"}\n')
        worker.append({REFUSED: "a usage error"})
        assert journal.read_new() == [{"test": "test_topology.py::test_gpu_model[GPU0]", "promise": "gpu-model[GPU0]",
                                       "verdict": "passed"}]
        assert journal.refused == ["a usage error"] and journal.read_new() == []
    finally:
        journal.remove()
    assert not journal.folder.exists()
