"""A long-running node on the real one-host Slurm (tests/slurm_cluster.py): examples/slurm's health check and epilog
run interval after interval, as slurmd runs them (HealthCheckProgram: the passive tier; Epilog: the quick tier),
the node's state and reason read back from slurmctld after each.

The node is a replay of the shipped h200-nvswitch-x2 bundle (faults planted in copies), judged by a profile whose
quick tier runs on CPU stand-ins; the clock is `--now` (a replayed Xid line ages with it), the boot id a file the
test rewrites (a reboot). The scripts are run by the test rather than by slurmd's timer so that the tiers
interleave in a known order. Asserted after every interval: no node resumed without the evidence its fault needs,
none left in service by a failure of the check itself, and the same series in each tier's .prom file every run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from derive_health import with_read_kernel_log
from slurm_cluster import slurm_fixture  # noqa: F401  (the fixture `slurm`)
from test_nodehealth import CPU_PROFILE
from test_nodehealth_metrics import series
from test_nodehealth_slurm import _node

REPO = Path(__file__).resolve().parent.parent
#: the shipped DERIVED bundle with a kernel log as a live read recorded it (alone it is could not tell)
BUNDLE = with_read_kernel_log(REPO / "tests" / "data" / "bundles" / "h200-nvswitch-x2")
RECORDED = datetime.fromisoformat(json.loads((BUNDLE / "health.json").read_text())["recorded_at"]).timestamp()
#: a real kernel line (NVIDIA/open-gpu-kernel-modules#1151), its PCI address edited to the x2 bundle's GPU0
XID_79 = "NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus."
HEALTHY = ("IDLE", "")


class Node:
    """The node under test: its state folder, boot id, outputs, and the two scripts as slurmd runs them."""

    def __init__(self, slurm, tmp_path: Path) -> None:
        self.slurm, self.tmp = slurm, tmp_path
        (tmp_path / "prom").mkdir()
        (tmp_path / "cpu-health.yaml").write_text(CPU_PROFILE)
        self.boot(1)
        self.series: dict[str, set] = {}
        self.ran = 0

    def boot(self, n: int) -> None:
        (self.tmp / "boot_id").write_text(f"9b1f3c2e-5d4a-4e8f-b7a6-00000000000{n}\n")

    def bundle(self, xid_age_s: float | None = None) -> Path:
        """The recorded bundle, or a copy whose kernel log holds an Xid 79 on GPU0 this old (at its recording)."""
        if xid_age_s is None:
            return BUNDLE
        copy = self.tmp / f"xid-{xid_age_s:g}"
        if not copy.exists():
            shutil.copytree(BUNDLE, copy)
            data = json.loads((copy / "health.json").read_text())
            data["kernel_log"] = {"source": "/dev/kmsg", "error": None,
                                  "xids": [{"pci": "0000:00:06", "xid": 79, "age_s": xid_age_s, "text": XID_79}]}
            (copy / "health.json").write_text(json.dumps(data))
        return copy

    def run(self, mode: str, at: float, bundle: Path = BUNDLE, *, extra: str = "", command: str | None = None,
            env: dict | None = None) -> int:
        """One interval: the script in ``mode`` (healthcheck or epilog), the check judging ``bundle`` at ``at``
        seconds after its recording."""
        args = (f"--profile {self.tmp / 'cpu-health.yaml'} --replay {bundle} --now {RECORDED + at} "
                f"--state-dir {self.tmp / 'state'} {extra}")  # a replay keeps the state it is given
        done = subprocess.run(
            ["bash", str(REPO / "examples" / "slurm" / f"{'healthcheck' if mode == 'healthcheck' else 'epilog'}.sh")],
            capture_output=True, text=True, cwd=self.tmp,
            env={"PATH": os.environ["PATH"], "SLURM_CONF": str(self.slurm.conf), "SLURMD_NODENAME":
                 self.slurm.nodename, "PYTHONPATH": str(REPO), "GPUFABRIC_HEALTH_CONF": "/nonexistent",
                 "GPUFABRIC": command or f"{sys.executable} -m pytest_gpufabric", "GPUFABRIC_HEALTH_ARGS": args,
                 "GPUFABRIC_EPILOG_ARGS": "--quick --deadline 120", "GPUFABRIC_STATE_DIR": str(self.tmp / "state"),
                 "GPUFABRIC_BOOT_ID_FILE": str(self.tmp / "boot_id"), "GPUFABRIC_HEALTH_PROM": str(self.tmp / "prom"),
                 **(env or {})})
        self.ran += 1
        for tier in ("passive", "quick"):  # each tier's file: the same series every run
            path = self.tmp / "prom" / f"gpufabric-health-{tier}.prom"
            if path.exists():
                found = set(series(path))
                assert self.series.setdefault(tier, found) == found, f"interval {self.ran}: {tier} series changed"
        return done.returncode

    def state(self) -> tuple[str, str]:
        deadline = time.monotonic() + 5
        state, reason = _node(self.slurm)
        while time.monotonic() < deadline and ("+" in state and "DRAIN" not in state):  # a transient flag
            time.sleep(0.2)
            state, reason = _node(self.slurm)
        return state.split("+")[0] if "DRAIN" not in state else "DRAIN", reason

    def clear(self, which: str, by: str) -> None:
        subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--clear", which, "--by", by,
                        "--state-dir", str(self.tmp / "state")], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def node(slurm, tmp_path):
    slurm.run(["scontrol", "update", f"NodeName={slurm.nodename}", "State=RESUME"])
    try:
        yield Node(slurm, tmp_path)
    finally:
        slurm.run(["scontrol", "update", f"NodeName={slurm.nodename}", "State=RESUME"])


def test_a_node_over_many_intervals_keeps_every_drain_until_its_evidence(node):
    assert node.run("healthcheck", 0) == 0
    assert node.state() == HEALTHY

    # the epilog's quick tier finds wrong GEMM elements on GPU1: drained, rma
    assert node.run("epilog", 300, extra="--plant-fault 1") == 0
    state, gemm = node.state()
    assert state == "DRAIN" and re.fullmatch(
        r"gpufabric GPU1 gemm: \d+ wrong GEMM elements, serial 1653824016216 \(\+1 more\); rma", gemm)
    # passive intervals do not run the GEMM: the drain is kept, its reason as it was
    for at in (600, 900):
        assert node.run("healthcheck", at) == 0
        assert node.state() == ("DRAIN", gemm)

    # a hung read: the deadline says so and the node stays drained
    assert node.run("healthcheck", 1200, extra="--deadline 1", env={"GPUFABRIC_TEST_READ_DELAY_S": "20"}) == 0
    assert node.state() == ("DRAIN", gemm)

    # the operator ran the acceptance's full tests on the board, found it sound and lifts both drains, recorded;
    # the next interval resumes the node
    node.clear("all", "alice")
    assert node.run("healthcheck", 1500) == 0
    assert node.state() == HEALTHY

    # a hang on a node in service drains it (never silent), the next good interval resumes it
    assert node.run("healthcheck", 1800, extra="--deadline 1", env={"GPUFABRIC_TEST_READ_DELAY_S": "20"}) == 0
    assert node.state() == ("DRAIN", "gpufabric node hung: could not finish in 1 s; reset")
    assert node.run("healthcheck", 2100) == 0
    assert node.state() == HEALTHY

    # an Xid 79 on GPU0: drained; it ages out of the hour's window with no reboot: still drained
    xid = "gpufabric GPU0 xid79: Xid 79 fell off the bus, serial 1653824016477; reset"
    logged = _shifted(node, node.bundle(xid_age_s=0.0), 2400)  # logged at 2400 s: its age grows with --now
    for at in (2400, 2700, 2400 + 3599, 2400 + 3700, 2400 + 7200):
        assert node.run("healthcheck", at, logged) == 0
        assert node.state() == ("DRAIN", xid), at

    # the check cannot run (exit 127): the node stays drained, the reason says why
    assert node.run("healthcheck", 2400 + 7500, command="/nonexistent/gpufabric") == 0
    assert node.state() == ("DRAIN", "gpufabric node rc127: gpufabric health exited 127 (command not found): "
                                     "/nonexistent/gpufabric")
    metrics = series(node.tmp / "prom" / "gpufabric-health-passive.prom")
    assert metrics['gpufabric_health_exit_code{tier="passive"}'] == "127"
    assert {v for k, v in metrics.items() if "check_status{" in k} == {"2"}
    assert node.run("healthcheck", 2400 + 7800, logged) == 0
    assert node.state() == ("DRAIN", xid)

    # a reboot: a new boot id, a kernel log without the line; the passive and the quick tier both find it healthy
    node.boot(2)
    assert node.run("healthcheck", 2400 + 8100) == 0
    assert node.state() == HEALTHY
    assert node.run("epilog", 2400 + 8400) == 0
    assert node.state() == HEALTHY

    state = json.loads((node.tmp / "state" / "health-state.json").read_text())
    assert state["drains"] == [] and [(c["check"], c["by"]) for c in state["cleared"]] == [
        ("quick-gemm", "alice"), ("quick-memory-pattern", "alice")]
    assert set(node.series) == {"passive", "quick"}


def _shifted(node: Node, bundle: Path, logged_at: float) -> Path:
    """The bundle recorded ``logged_at`` seconds after the shipped one: its Xid line was logged then."""
    copy = node.tmp / f"recorded-at-{logged_at:g}"
    if not copy.exists():
        shutil.copytree(bundle, copy)
        data = json.loads((copy / "health.json").read_text())
        data["recorded_at"] = datetime.fromtimestamp(RECORDED + logged_at).astimezone().isoformat()
        (copy / "health.json").write_text(json.dumps(data))
    return copy
