"""The arrival state as a live run on a 1x H100 SXM 80GB judged it (tests/data/results/arrival-live-h100-x1), and
its bundle replayed to the same verdict: the kernel log read from /dev/kmsg, every GPU counter from NVML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpufabric.report.signing import verify_command

LIVE = Path(__file__).parent / "data" / "results" / "arrival-live-h100-x1"
BUNDLE = Path(__file__).parent / "data" / "bundles" / "h100-x1-arrival"


def _promises(document: dict) -> dict[str, tuple[str, str]]:
    return {p["id"]: (p["outcome"], p["reason"]) for p in document["promises"]}


def test_the_live_run_judged_its_arrival_state_from_its_own_kernel_log():
    live = json.loads((LIVE / "gpufabric-results.json").read_text())
    assert (live["schema_version"], live["summary"]["verdict"], live["summary"]["exit_code"]) == (4, "INCOMPLETE", 6)
    assert live["summary"]["verdict_reason"] == "1 promise(s) not checked: burn-in-memory"
    assert live["evidence"]["kind"] == "live" and live["evidence"]["boot_id"] == "9ba74337-2dde-4ec4-a960-95974ac5e645"
    promises = _promises(live)
    assert promises["gpu-health[GPU0]"] == ("passed", "") and promises["xid-events"] == ("passed", "")
    health = json.loads((LIVE / "health.json").read_text())
    assert health["kernel_log"] == {"source": "/dev/kmsg", "error": None, "xids": []}
    assert [g["serial"] for g in health["gpus"]] == ["1650824032025"]


def test_the_signed_live_pair_verifies_with_its_key():
    code, lines = verify_command([str(LIVE / "gpufabric-results.json"), str(LIVE / "acceptance.html")],
                                 str(LIVE / "run-pub.pem"), False)
    assert code == 0, lines


def test_the_bundle_replays_to_the_live_verdict(pytester: pytest.Pytester):
    pytester.runpytest("--gpu-profile", str(LIVE / "measured.yaml"), "--gpu-replay", str(BUNDLE))
    replay = json.loads((pytester.path / "reports" / "gpufabric-results.json").read_text())
    live = json.loads((LIVE / "gpufabric-results.json").read_text())
    assert replay["summary"]["verdict"] == live["summary"]["verdict"] == "INCOMPLETE"
    assert {pid: outcome for pid, (outcome, _) in _promises(replay).items()} == \
        {pid: outcome for pid, (outcome, _) in _promises(live).items()}
    assert _promises(replay)["xid-events"] == ("passed", "")
