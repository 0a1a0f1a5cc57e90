"""examples/slurm/healthcheck.sh as Slurm's HealthCheckProgram on a real Slurm (Debian's slurmctld, slurmd and
munge, started by tests/slurm_cluster.py on this one host): slurmd runs it every two seconds; it runs `gpufabric
health --replay` on a bundle the test picks (a faulty copy of a recorded bundle's health.json, then the recorded
one), and the node's state and reason are read back from slurmctld.

- a faulty replay drains the node: State DRAIN, Reason the check's scheduler reason (`--reason`), word for word;
- a healthy replay resumes it (the reason is the script's own: it starts "gpufabric ");
- a node drained by someone else stays drained with their reason, healthy replay or faulty;
- a check that cannot run (the command not found: exit 127) drains the node naming the exit, or leaves it with
  GPUFABRIC_ON_ERROR=ignore; a node DOWN for its own reason is left as it is.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from derive_health import with_read_kernel_log
from slurm_cluster import slurm_fixture  # noqa: F401  (the fixture `slurm`)

REPO = Path(__file__).resolve().parent.parent
#: the shipped DERIVED bundle with a kernel log as a live read recorded it (alone it is could not tell)
BUNDLE = with_read_kernel_log(REPO / "tests" / "data" / "bundles" / "h200-nvswitch-x4")
SCRIPT = REPO / "examples" / "slurm" / "healthcheck.sh"
PROFILE = "h200-nvswitch-x4"
INTERVAL_S = 2

WRAPPER = """#!/bin/bash
# what an operator's /etc/gpufabric/health.env would set; slurmd runs health checks with SLURMD_NODENAME alone
export SLURM_CONF={conf} PATH={path} PYTHONPATH={repo} GPUFABRIC_HEALTH_CONF=/nonexistent
export GPUFABRIC="$(cat {command})" GPUFABRIC_ON_ERROR="$(cat {on_error})"
export GPUFABRIC_HEALTH_ARGS="--profile {profile} --replay $(cat {control})"
echo "$(date +%s.%N)" >> {runs}
exec bash {script}
"""


def _node(slurm) -> tuple[str, str]:
    """(State, Reason) of the node as slurmctld has them; the reason without Slurm's "[user@time]" suffix."""
    text = slurm.run(["scontrol", "show", "node", "-o", slurm.nodename], check=True).stdout
    state = re.search(r"\bState=(\S+)", text).group(1)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?\s*$", text)
    return state, reason.group(1) if reason else ""


def _wait(slurm, want, runs: Path, what: str, timeout: float = 60) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _node(slurm)
        if want(*found):
            return found
        time.sleep(0.3)
    ran = len(runs.read_text().splitlines()) if runs.exists() else 0
    raise AssertionError(f"{what}: the node is {_node(slurm)} after {timeout:g} s ({ran} health checks ran)\n"
                         f"{slurm.log_tails()}")


def _runs_after(runs: Path, count: int, timeout: float = 30) -> None:
    """Wait until the health check has run ``count`` more times (the script logs each run)."""
    start = len(runs.read_text().splitlines()) if runs.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runs.exists() and len(runs.read_text().splitlines()) >= start + count:
            time.sleep(1.5)  # the last run's scontrol, if any, has returned
            return
        time.sleep(0.2)
    raise AssertionError(f"the health check did not run {count} more times in {timeout:g} s")


def _faulty_bundle(tmp_path: Path) -> Path:
    """A copy of the recorded bundle with one row of GPU1 pending remapping (as NVML says it: 1)."""
    copy = tmp_path / "faulty"
    shutil.copytree(BUNDLE, copy)
    health = json.loads((copy / "health.json").read_text())
    health["gpus"][1]["remapped_rows"]["pending"] = 1
    (copy / "health.json").write_text(json.dumps(health))
    return copy


def _first_line(bundle: Path, cwd: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pytest_gpufabric", "health", "--reason", "--profile", PROFILE,
                           "--replay", str(bundle)], capture_output=True, text=True, cwd=cwd)
    return done.returncode, done.stdout.splitlines()[0]


@pytest.fixture
def health_checked(slurm, tmp_path):
    """The cluster with the test's wrapper as HealthCheckProgram every INTERVAL_S seconds; put back as it was
    (and the node resumed) afterwards, whatever the test did."""
    control, runs, wrapper = tmp_path / "bundle", tmp_path / "runs", tmp_path / "healthcheck"
    command, on_error = tmp_path / "command", tmp_path / "on-error"
    control.write_text(str(BUNDLE))
    command.write_text(f"{sys.executable} -m pytest_gpufabric")
    on_error.write_text("drain")
    wrapper.write_text(WRAPPER.format(conf=slurm.conf, path=Path(sys.executable).parent.as_posix() + ":/usr/bin:/bin:"
                                      "/usr/sbin:/sbin", repo=REPO, profile=PROFILE, command=command,
                                      on_error=on_error, control=control, runs=runs, script=SCRIPT))
    wrapper.chmod(0o755)
    tmp_path.chmod(0o755)
    original = slurm.conf.read_text()
    slurm.conf.write_text(original + f"HealthCheckProgram={wrapper}\nHealthCheckInterval={INTERVAL_S}\n"
                                     "HealthCheckNodeState=ANY\n")
    slurm.run(["scontrol", "reconfigure"], check=True)
    try:
        yield control, runs
    finally:
        # a check still running when the program is taken away drains nothing
        control.write_text(str(BUNDLE))
        command.write_text(f"{sys.executable} -m pytest_gpufabric")
        slurm.conf.write_text(original)
        slurm.run(["scontrol", "reconfigure"])
        time.sleep(INTERVAL_S + 1)
        slurm.run(["scontrol", "update", f"NodeName={slurm.nodename}", "State=RESUME"])
        _wait(slurm, lambda state, reason: "DRAIN" not in state and "NOT_RESPONDING" not in state, runs,
              "the node back in service")


def test_health_check_drains_on_a_faulty_replay_and_resumes_on_a_healthy_one(slurm, health_checked, tmp_path):
    control, runs = health_checked
    faulty = _faulty_bundle(tmp_path)
    rc, line = _first_line(faulty, tmp_path)
    assert (rc, line) == (1, "gpufabric GPU1 rrpend: rows pending remapping, serial 1653824128984; reset")
    assert _first_line(BUNDLE, tmp_path) == (0, "gpufabric ok: HEALTHY 4 GPUs, profile h200-nvswitch-x4")

    control.write_text(str(faulty))
    state, reason = _wait(slurm, lambda state, reason: "DRAIN" in state, runs, "drained on the faulty replay")
    assert reason == line
    assert state.startswith(("IDLE+DRAIN", "DRAIN"))

    control.write_text(str(BUNDLE))
    state, reason = _wait(slurm, lambda state, reason: "DRAIN" not in state, runs, "resumed on the healthy replay")
    assert state.startswith("IDLE") and reason == ""


def test_health_check_never_resumes_a_node_drained_by_someone_else(slurm, health_checked, tmp_path):
    control, runs = health_checked
    _runs_after(runs, 1)
    admin = "maintenance: fans replaced, do not use"
    slurm.run(["scontrol", "update", f"NodeName={slurm.nodename}", "State=DRAIN", f"Reason={admin}"], check=True)
    _runs_after(runs, 2)  # healthy replays: the node stays drained, with the operator's reason
    state, reason = _node(slurm)
    assert "DRAIN" in state and reason == admin

    control.write_text(str(_faulty_bundle(tmp_path)))
    _runs_after(runs, 2)  # a faulty replay does not take the drain over either
    state, reason = _node(slurm)
    assert "DRAIN" in state and reason == admin


def test_a_check_that_cannot_run_drains_naming_its_exit(slurm, health_checked, tmp_path):
    control, runs = health_checked
    (tmp_path / "command").write_text("/nonexistent/gpufabric")
    state, reason = _wait(slurm, lambda state, reason: "DRAIN" in state, runs, "drained on exit 127")
    assert reason.startswith("gpufabric node rc127: gpufabric health exited 127 (command not found): ")
    assert reason == "gpufabric node rc127: gpufabric health exited 127 (command not found): /nonexistent/gpufabric"
    (tmp_path / "command").write_text(f"{sys.executable} -m pytest_gpufabric")
    _wait(slurm, lambda state, reason: "DRAIN" not in state, runs, "resumed once the check runs again")
    (tmp_path / "on-error").write_text("ignore")
    (tmp_path / "command").write_text("/nonexistent/gpufabric")
    _runs_after(runs, 2)
    state, reason = _node(slurm)
    assert "DRAIN" not in state and reason == ""


def test_a_node_down_for_its_own_reason_is_left_as_it_is(tmp_path):
    """A DOWN node (an operator's reason) is not drained over by a faulty check. This cluster returns a DOWN node to
    service as soon as slurmd answers (ReturnToService=2), so the script runs here with SINFO answering as sinfo
    does for a down node (`sinfo --Node --format=%T|%E`) and SCONTROL logging what it is asked."""
    calls = tmp_path / "scontrol-calls"
    (tmp_path / "sinfo").write_text("#!/bin/bash\necho 'down|psu replaced, burn-in pending'\n")
    (tmp_path / "scontrol").write_text(f"#!/bin/bash\necho \"$*\" >> {calls}\n")
    for name in ("sinfo", "scontrol"):
        (tmp_path / name).chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "GPUFABRIC_HEALTH_CONF": "/nonexistent", "SLURMD_NODENAME": "node1",
           "PYTHONPATH": str(REPO), "GPUFABRIC": f"{sys.executable} -m pytest_gpufabric",
           "GPUFABRIC_HEALTH_ARGS": f"--profile {PROFILE} --replay {_faulty_bundle(tmp_path)}",
           "SINFO": str(tmp_path / "sinfo"), "SCONTROL": str(tmp_path / "scontrol")}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0 and not calls.exists()
    assert done.stderr == ("gpufabric-node-health: node1 is down (psu replaced, burn-in pending): left as it is; "
                           "gpufabric GPU1 rrpend: rows pending remapping, serial 1653824128984; reset\n")
