"""What an independent review of the verdict found after issue 40's first pass, each on a copy of a shipped bundle.

Three ways a false ACCEPTED got through: a test of the user's own recording a pass for a promise of the profile's
list (a marker added after the plugin's guard, a site kind named like a shipped one, a node id made equal to a
promise id); another machine's kernel log passing ``xid-events``; and a report whose cover was edited to show
ACCEPTED over embedded results that say REJECTED, signed again with another key.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from pytest_gpufabric.paths import shipped_bundles_dir
from pytest_gpufabric.report.html_signing import signed_page, split_signed_html, verify_html

PROFILE, ACCEPTED_BUNDLE = "h200-nvswitch-x2", "h200-nvswitch-x2-acceptance"
REJECTED_BUNDLE = "h200-nvswitch-x2-p2p-disabled"
NO_KERNEL_LOG = "xid-events=the recording holds no kernel log; agreed for the review's tests"
DCGM_PASTES = Path(__file__).parent / "data" / "captures" / "public" / "dcgm"

#: a test of the user's own that records a passed check; the conftest binds it to a listed promise too late for
#: any collection-time guard (trylast)
MINE = """
    import pytest
    from pytest_gpufabric.checks.result import passed

    @pytest.mark.parametrize("x", ["k"])
    def test_mine(x, gpufabric_check):
        gpufabric_check(passed("kernel-log", "machine", "no Xid", "no Xid", "no Xid that drains in the kernel log"))
"""
LATE_MARKER = """
    import pytest
    from pytest_gpufabric.promise import promise

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(items):
        for item in items:
            if item.name.startswith("test_mine"):
                item.add_marker(promise(lambda params: "xid-events"))
"""
SITE_KIND_NAMED_AS_SHIPPED = """
    from pytest_gpufabric.catalogue import PromiseKind

    def pytest_gpufabric_promise_kinds(profile):
        return [PromiseKind("xid-events", "no Xid in the kernel log on arrival", "test_mine.py", lambda p: [""])]
"""
NODE_ID_AS_PROMISE_ID = """
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(items):
        for item in items:
            if item.name.startswith("test_mine"):
                if hasattr(item, "_id"):  # pytest 9.2 on: the node id is a NodeId object
                    from _pytest.nodeid import coerce_node_id

                    item._id = coerce_node_id("xid-events")
                else:
                    item._nodeid = "xid-events"
                assert item.nodeid == "xid-events"
"""


@pytest.mark.parametrize("conftest", [LATE_MARKER, NODE_ID_AS_PROMISE_ID], ids=["late-marker", "node-id"])
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in-process", "xdist"])
def test_a_users_record_of_a_listed_promise_is_refused(pytester: pytest.Pytester, conftest, workers):
    """Before: ACCEPTED (xid-events passed by the user's test). Now: a usage error, nothing judged."""
    if workers:
        pytest.importorskip("xdist")
    pytester.makeconftest(textwrap.dedent(conftest))
    pytester.makepyfile(test_mine=textwrap.dedent(MINE))
    result = pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", ACCEPTED_BUNDLE, *workers, "test_mine.py")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: *: a test of your own recorded a check of a promise on the profile's list, "
                                 "which only pytest-gpufabric's shipped suites*"])
    results = pytester.path / "reports" / "gpufabric-results.json"  # at most the checkpoint of an unfinished run
    if results.exists():
        summary = json.loads(results.read_text())["summary"]
        assert summary["verdict"] == "INCOMPLETE" and "had not finished" in summary["verdict_reason"]


def test_a_site_kind_named_as_a_shipped_kind_is_refused(pytester: pytest.Pytester):
    """Before: ACCEPTED (the site's test passed xid-events). Now: a usage error before anything runs."""
    pytester.makeconftest(textwrap.dedent(SITE_KIND_NAMED_AS_SHIPPED))
    pytester.makepyfile(test_mine=textwrap.dedent(MINE))
    result = pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", ACCEPTED_BUNDLE, "test_mine.py")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: pytest_gpufabric_promise_kinds: the site kind 'xid-events' has the name of a "
                                 "kind pytest-gpufabric's shipped suites judge*"])


def test_another_machines_kernel_log_is_not_this_machines(pytester: pytest.Pytester, tmp_path):
    """A copy of the 2x H200 acceptance bundle given the health.json that the live health check wrote on a 2x H100
    machine (h100-x2-health): its GPUs are other boards, so neither their counters nor its kernel log are this
    machine's. Before: xid-events passed on that file."""
    bundle = tmp_path / "bundle"
    shutil.copytree(shipped_bundles_dir() / ACCEPTED_BUNDLE, bundle)
    shutil.copy(shipped_bundles_dir() / "h100-x2-health" / "health.json", bundle / "health.json")
    result = pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", str(bundle))
    assert result.ret == 6
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    xid = next(p for p in document["promises"] if p["id"] == "xid-events")
    assert xid["outcome"] == "not checked"
    assert xid["reason"].startswith(f"the kernel log in {bundle / 'health.json'} is not bound to this machine (")
    assert "GPU0 is serial 1652024011167, this machine's GPU0 (serial 1654024030640)" in xid["reason"]


def test_a_cover_edited_to_accepted_and_signed_again_is_invalid(pytester: pytest.Pytester):
    """The REJECTED report of the p2p-disabled bundle, its cover changed to a green ACCEPTED and signed again with
    a key of the editor's own: the embedded results still say REJECTED. Before: `valid`."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pytester.runpytest("--gpu-profile", PROFILE, "--gpu-replay", REJECTED_BUNDLE, "--gpu-waive", NO_KERNEL_LOG,
                       "--html", "reports/acceptance.html", "--self-contained-html")
    text = (pytester.path / "reports" / "acceptance.html").read_text(encoding="utf-8")
    page, _ = split_signed_html(text)
    forged = page.replace('<div class="verdict rejected">Verdict: REJECTED',
                          '<div class="verdict accepted">Verdict: ACCEPTED')
    assert forged != page
    for key in (None, Ed25519PrivateKey.generate()):
        result = verify_html(signed_page(forged, key), None, "acceptance.html")
        said = ("its cover shows 'Verdict: ACCEPTED without the burn-in the profile promises' (accepted), but its "
                "embedded results say REJECTED without the burn-in the profile promises")
        assert said in result.problems
    honest = verify_html(signed_page(page, None), None, "acceptance.html")
    assert not [p for p in honest.problems if "cover" in p]


# --- the second review (after the promise kinds moved into kinds/) ------------------------------------------------

#: a test of the user's own named as the arrival suite's, moved there by a conftest that rewrites its path only
MOVED_INTO_THE_SUITE = """
    import pytest
    from pytest_gpufabric.paths import SUITES_DIR

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(items):
        for item in items:
            if item.name == "test_xid_events":
                item.path = SUITES_DIR / "test_arrival.py"
"""
#: named as the arrival suite's test, recording a pass of its check
MINE_AS_THE_SUITES = """
    from pytest_gpufabric.checks.result import passed

    def test_xid_events(gpufabric_check):
        gpufabric_check(passed("xid-events", "machine", "no Xid", "no Xid", "no Xid that drains in the kernel log"))
"""
#: a site kind whose own suite (test_site_suite.py) is not collected, and a test of the user's own marked as its judge
SITE_KIND = """
    from pytest_gpufabric.kinds.base import CheckRule, Kind
    from pytest_gpufabric.remedy_classes import SOFTWARE

    def pytest_gpufabric_promise_kinds(profile):
        return [Kind("site-branch", "the driver branch the site qualified", "test_site_suite.py",
                     lambda p: [""] if "site" in p.data else [], sections=("site",))]
"""
MINE_FOR_THE_SITE = """
    from pytest_gpufabric.checks.result import passed
    from pytest_gpufabric.promise import promise

    @promise("site-branch")
    def test_my_branch(gpufabric_check):
        gpufabric_check(passed("site-branch", "machine", "570", "570", "the branch the site qualified"))
"""
#: a site kind bringing a rule named as a shipped check, to say a failed copy is nothing to act on
SITE_RULE_FOR_A_SHIPPED_CHECK = """
    from pytest_gpufabric.kinds.base import CheckRule, Kind
    from pytest_gpufabric.remedy_classes import RERUN

    def pytest_gpufabric_promise_kinds(profile):
        rule = CheckRule("copy-host_to_device", remedy=lambda check, ctx: (RERUN, "within the site's tolerance"),
                         phrase=lambda check: ("whatever", "fine"))
        return [Kind("site-words", "nothing", "test_none.py", lambda p: [], checks=(rule,))]
"""


def test_a_users_test_moved_into_a_suite_by_its_path_judges_nothing(pytester: pytest.Pytester):
    """Review 2, finding 2: item.path rewritten to the arrival suite's. Before: ACCEPTED (xid-events passed by the
    user's record, judged as the suite's; the bundle holds no kernel log). Now: it judges nothing: INCOMPLETE."""
    pytester.makeconftest(textwrap.dedent(MOVED_INTO_THE_SUITE))
    pytester.makepyfile(test_mine=textwrap.dedent(MINE_AS_THE_SUITES))
    result = pytester.runpytest("--gpu-profile", "h100-sxm-x1", "--gpu-replay", "h100-x1-diagnostics", "test_mine.py")
    assert result.ret == 6
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    xid = next(p for p in document["promises"] if p["id"] == "xid-events")
    assert xid["outcome"] == "not checked"
    assert [c["judge"] for c in document["checks"] if c["test"].endswith("test_mine.py::test_xid_events")] == ["user"]


def test_only_a_site_kinds_own_suite_judges_it(pytester: pytest.Pytester, tmp_path):
    """Review 2, finding 3: a test of the user's own marked with a site kind. Before: ACCEPTED on that test's pass.
    Now: its record is the user's, and the site's promise is not judged by it."""
    profile = tmp_path / "site.yaml"
    profile.write_text("extends: h100-sxm-x1\nname: site\nsite: {driver_branch: '570'}\n", encoding="utf-8")
    pytester.makeconftest(textwrap.dedent(SITE_KIND))
    pytester.makepyfile(test_mine=textwrap.dedent(MINE_FOR_THE_SITE))
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h100-sxm-x1-acceptance",
                                "test_mine.py")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: *: a test of your own recorded a check of a promise on the profile's list*"])


def test_a_site_rule_does_not_reword_a_shipped_check(pytester: pytest.Pytester, tmp_path):
    """Review 2, finding 5: a site's CheckRule named as a shipped check. Before: the failed copy's remedy became the
    site's ("within the site's tolerance"). Now: the shipped rule reads it."""
    profile = tmp_path / "fast.yaml"
    profile.write_text("extends: h100-sxm-x1\nname: fast\nbandwidth:\n  copy:\n    size: 1 GiB\n"
                       "    host_to_device: {min: 60 GB/s}\n    device_to_host: {min: 40 GB/s}\n", encoding="utf-8")
    pytester.makeconftest(textwrap.dedent(SITE_RULE_FOR_A_SHIPPED_CHECK))
    result = pytester.runpytest("--gpu-profile", str(profile), "--gpu-replay", "h100-sxm-x1-acceptance")
    assert result.ret == 1
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    copy = next(p for p in document["promises"] if p["id"] == "copy-bandwidth[host_to_device]")
    assert copy["outcome"] == "failed" and "tolerance" not in copy["remedy"]["why"]
    assert "46.188 GB/s below its 60 GB/s floor" in copy["remedy"]["why"]


def test_a_dcgm_pass_does_not_stand_in_for_a_diagnostics_limits(pytester: pytest.Pytester, tmp_path):
    """Review 2, finding 1: the demo bundle without its own diagnostics, and a real all-pass `dcgmi diag -r 4`
    paste given as evidence. Before: ACCEPTED (DCGM's passes stood for hbm-bandwidth, memory-pattern, power-hold and
    pcie-under-load, whose profile limits nothing compared). Now: those four are not checked."""
    bundle = tmp_path / "bundle"
    shutil.copytree(shipped_bundles_dir() / "h100-sxm-x1-acceptance", bundle)
    for name in ("hbm.json", "power-hold.json", "pcie-load.json", "memory-pattern.json"):
        (bundle / name).unlink()
    dcgm = DCGM_PASTES / "dcgm-2.x-level4-blacklist-memtest-pulse-all-pass-prompt.txt"
    result = pytester.runpytest("--gpu-profile", "h100-sxm-x1", "--gpu-replay", str(bundle), "--gpu-evidence",
                                str(dcgm))
    assert result.ret == 6
    document = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    not_checked = {p["id"]: p["reason"] for p in document["promises"] if p["outcome"] == "not checked"}
    assert sorted(not_checked) == ["hbm-bandwidth[GPU0]", "memory-pattern[GPU0]", "pcie-under-load[GPU0]",
                                   "power-hold[GPU0]"]
    assert ("memory_bandwidth pass on GPU0 (serial 1651624029650) [dcgm-2.x-level4-blacklist-memtest-pulse-all-pass-"
            "prompt.txt]: DCGM passes it by its own criteria, which are not the profile's `memory_bandwidth:` "
            "section") in not_checked["hbm-bandwidth[GPU0]"]


def test_copies_of_another_size_than_promised_are_not_checked(pytester: pytest.Pytester, tmp_path):
    """Review 2, finding 4: the demo bundle's copies said to have moved 1 MiB where the profile promises its floors at
    1 GiB. Before: ACCEPTED on those figures. Now: not checked, naming both sizes."""
    bundle = tmp_path / "bundle"
    shutil.copytree(shipped_bundles_dir() / "h100-sxm-x1-acceptance", bundle)
    document = json.loads((bundle / "bandwidth.json").read_text())
    document["copy"]["size"] = 1 << 20
    for row in document["copy"]["host_device"]:
        row["bytes"] = 1 << 20
    (bundle / "bandwidth.json").write_text(json.dumps(document))
    result = pytester.runpytest("--gpu-profile", "h100-sxm-x1", "--gpu-replay", str(bundle))
    assert result.ret == 6
    results = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    copies = {p["id"]: (p["outcome"], p["reason"]) for p in results["promises"] if p["id"].startswith("copy-")}
    assert copies == {f"copy-bandwidth[{kind}]": ("not checked", f"{bundle / 'bandwidth.json'}: its copies moved "
                                                                   "1.00 MiB; the profile promises copies of 1.00 GiB")
                      for kind in ("host_to_device", "device_to_host")}
