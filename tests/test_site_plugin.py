"""A site's own promise, added from its own plugin through pytest-gpufabric's hooks (examples/site_plugin/), judged
with the shipped ones on the whole recorded 2x H200 SXM acceptance run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpufabric.remedy_classes import SOFTWARE

EXAMPLE = Path(__file__).parent.parent / "examples" / "site_plugin"
BUNDLE = "h200-nvswitch-x2-acceptance"  # driver 580.159.04
#: the bundle holds no kernel log, so xid-events is never shown: waived in writing, as customer and vendor may
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the site plugin's tests"


def _run_site(pytester: pytest.Pytester, branch: str, *args: str) -> pytest.RunResult:
    for name in ("gpufabric_site.py", "test_site_suite.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    profile = (EXAMPLE / "site-h200.yaml").read_text().replace('driver_branch: "580"', f'driver_branch: "{branch}"')
    (pytester.path / "site-h200.yaml").write_text(profile)
    pytester.syspathinsert()
    return pytester.runpytest("-p", "gpufabric_site", "--gpu-profile", "site-h200.yaml", "--gpu-replay", BUNDLE,
                              "--gpu-waive", NO_KERNEL_LOG, *args)


def _run(pytester: pytest.Pytester, branch: str, *args: str):
    result = _run_site(pytester, branch, *args)
    return result, json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())


def test_a_site_promise_kept_is_part_of_the_accepted_verdict(pytester: pytest.Pytester):
    result, document = _run(pytester, "580")
    assert result.ret == 0 and document["summary"]["verdict"] == "ACCEPTED"
    listed = {p["id"]: p for p in document["promised"]["promised"]}
    assert listed["site-driver-branch"]["suite"] == "test_site_suite.py"
    site = next(p for p in document["promises"] if p["id"] == "site-driver-branch")
    assert site["outcome"] == "passed" and site["tests"] == ["test_site_suite.py::test_driver_branch"]
    assert document["summary"]["promises"]["passed"] == 38  # the shipped 37 (xid-events waived) and the site's


def test_a_site_promise_broken_rejects(pytester: pytest.Pytester):
    result, document = _run(pytester, "570")
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    site = next(p for p in document["promises"] if p["id"] == "site-driver-branch")
    assert site["outcome"] == "failed"
    assert site["reason"].startswith("driver 580.159.04 is not of the 570 branch this site qualified")


def test_a_site_promise_no_test_judged_is_not_checked(pytester: pytest.Pytester):
    """The site's test deselected: its promise came from the profile all the same, so the run is not ACCEPTED."""
    result, document = _run(pytester, "580", "-k", "not driver_branch")
    assert result.ret == 6 and document["summary"]["verdict"] == "INCOMPLETE"
    site = next(p for p in document["promises"] if p["id"] == "site-driver-branch")
    assert {k: v for k, v in site.items() if k != "remedy"} == {
        "id": "site-driver-branch", "outcome": "not checked", "tests": [],
        "reason": "deselected (-k 'not driver_branch'): not run"}
    assert site["remedy"]["class"] == "rerun"


def test_a_profile_without_the_site_section_makes_no_site_promise(pytester: pytest.Pytester):
    for name in ("gpufabric_site.py", "test_site_suite.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "gpufabric_site", "--gpu-profile", "h200-nvswitch-x2", "--gpu-replay",
                                BUNDLE, "--gpu-waive", NO_KERNEL_LOG, "-rs")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*profile h200-nvswitch-x2 promises no site-driver-branch*"])


def test_a_broken_site_promise_says_the_sites_remedy_and_words(pytester: pytest.Pytester):
    """The site's kind brings its check's rule: the remedy is the site's (the image's driver), not "rerun", and the
    report's promise table says the check in the site's words."""
    result, document = _run(pytester, "570", "--html", "r.html", "--self-contained-html")
    assert result.ret == 1 and document["summary"]["verdict"] == "REJECTED"
    site = next(p for p in document["promises"] if p["id"] == "site-driver-branch")
    assert site["outcome"] == "failed"
    assert site["remedy"] == {"class": SOFTWARE, "why": "driver 580.159.04 is installed where the site qualified "
                                                          "the 570 branch: install a 570 driver in the image"}
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "a driver of the 570 branch" in page and "580.159.04 (branch 580)" in page


def test_a_site_section_no_loaded_plugin_claims_is_refused(pytester: pytest.Pytester):
    """``site:`` without the site's plugin would make no promise and say nothing: a usage error instead."""
    shutil.copy(EXAMPLE / "site-h200.yaml", pytester.path / "site-h200.yaml")
    result = pytester.runpytest("--gpu-profile", "site-h200.yaml", "--gpu-replay", BUNDLE)
    assert result.ret == 4
    result.stderr.fnmatch_lines([
        "ERROR: --gpu-profile: site-h200.yaml at $.site: no promise kind of a loaded plugin claims this section, so "
        "no test would judge it; load the site's plugin that judges it (-p NAME, or its pytest11 entry point) or "
        "remove the section (plugins with promise kinds loaded: none)"])
    assert not (pytester.path / "reports" / "gpufabric-results.json").exists()


def test_a_site_section_its_kinds_schema_refuses_is_a_usage_error(pytester: pytest.Pytester):
    """The site's kind brings the JSON Schema of its section: a branch that is not a number is refused at start."""
    result = _run_site(pytester, "r580")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: --gpu-profile: site-h200.yaml at $.site.driver_branch: 'r580' does not "
                                 "match '^[0-9]+$' (the site kind site-driver-branch's schema)"])


def test_a_site_hook_returning_other_than_a_kind_is_a_usage_error(pytester: pytest.Pytester):
    """Before: a traceback (exit 3) where the promise list read the dict's ``ids``. Now: one line, exit 4."""
    pytester.makeconftest("def pytest_gpufabric_promise_kinds(profile):\n"
                          "    return [{'name': 'site-x', 'suite': 'test_x.py'}]\n")
    result = pytester.runpytest("--gpu-profile", "h200-nvswitch-x2", "--gpu-replay", BUNDLE)
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: pytest_gpufabric_promise_kinds: returned dict {'name': 'site-x', 'suite': "
                                 "'test_x.py'}; return pytest_gpufabric.kinds.base.Kind objects"])


def test_a_site_kinds_limits_give_its_checks_margin():
    """A site's check read by its kind's limits reader: the report's margin column is the reader's, and a results
    file read again without the site's kinds has no margin for it (a real burn-in record, renamed as a site's)."""
    from pytest_gpufabric.checks.burn_in import gpu_limits
    from pytest_gpufabric.kinds import record_limits
    from pytest_gpufabric.kinds.base import CheckRule, Kind
    from pytest_gpufabric.report.check_words import margin

    document = json.loads((Path(__file__).parent / "data" / "results"
                           / "acceptance-with-10min-burn-in-on-h200-x2.json").read_text(encoding="utf-8"))
    shipped = next(c for c in document["checks"] if c.get("name") == "burn-in-gpu")
    record = {**shipped, "name": "site-gemm"}
    kind = Kind("site-gemm", "a site's GEMM rate", "test_site_gemm.py", lambda profile: [""],
                checks=(CheckRule("site-gemm", remedy=lambda check, ctx: ("rerun", "again"), limits=gpu_limits),))
    assert record_limits(record, (kind,)) == record_limits(shipped) != []
    assert margin(record, (kind,)) == margin(shipped) is not None
    assert record_limits(record) == [] and margin(record) is None
