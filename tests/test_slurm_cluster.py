"""The private Slurm cluster the fleet tests run on (tests/slurm_cluster.py): real munged, slurmctld and slurmd
on this host, real srun and sbatch jobs. N tasks on the one node stand for N nodes, each with its SLURM_PROCID."""

from __future__ import annotations

import subprocess

import pytest
import slurm_cluster as module
from slurm_cluster import SlurmUnavailable, missing, nodename, slurm_cluster, slurm_fixture  # noqa: F401 (`slurm`)

REPORT = 'echo "$SLURM_PROCID $SLURM_NTASKS $SLURM_JOB_ID $SLURM_JOB_NODELIST $SLURM_STEP_ID"'


def reports(stdout: str) -> dict[int, list[str]]:
    """Each task's line, by its SLURM_PROCID."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    return {int(fields[0]): fields[1:] for fields in lines}


def test_srun_runs_one_task_per_rank(slurm):
    result = slurm.srun(["-n", "5", "bash", "-c", REPORT], timeout=60)
    assert result.returncode == 0, result.stderr + slurm.log_tails()
    tasks = reports(result.stdout)
    assert sorted(tasks) == [0, 1, 2, 3, 4], result.stdout
    job_ids = {fields[1] for fields in tasks.values()}
    assert len(job_ids) == 1 and job_ids.pop().isdigit(), tasks
    assert all(fields[0] == "5" and fields[2] == slurm.nodename for fields in tasks.values()), tasks


def test_overcommit_goes_past_the_configured_cpus(slurm):
    n = slurm.cpus + 8
    result = slurm.srun(["--overcommit", "-n", str(n), "bash", "-c", REPORT], timeout=60)
    assert result.returncode == 0, result.stderr + slurm.log_tails()
    assert sorted(reports(result.stdout)) == list(range(n))


def test_a_failing_task_fails_srun(slurm):
    result = slurm.srun(["-n", "3", "bash", "-c", "exit $(( SLURM_PROCID == 1 ? 7 : 0 ))"], timeout=60)
    assert result.returncode == 7, (result.returncode, result.stderr)


def test_sbatch_script_with_its_own_srun_completes(slurm):
    job_id = slurm.sbatch(f"#!/bin/bash\n#SBATCH --ntasks=4\n#SBATCH --job-name=fleet-probe\nsrun bash -c '{REPORT}'\n")
    fields = slurm.wait(job_id, timeout=60)
    assert fields["JobState"] == "COMPLETED", (fields, slurm.log_tails())
    assert fields["ExitCode"] == "0:0", fields
    tasks = reports(slurm.output(job_id).read_text())
    assert sorted(tasks) == [0, 1, 2, 3]
    assert {fields[1] for fields in tasks.values()} == {job_id}
    assert {fields[3] for fields in tasks.values()} == {"0"}  # the script's first step


def test_client_env_is_the_private_cluster(slurm):
    assert slurm.env["SLURM_CONF"] == str(slurm.conf)
    shown = slurm.run(["scontrol", "show", "config"], check=True).stdout
    assert f"SlurmctldPort           = {slurm.ctld_port}" in shown
    assert slurm.nodename == nodename()


def test_a_second_cluster_beside_the_first_and_nothing_left_after(slurm):
    """Two at once (other ports, other directories), and a stopped one leaves no process and no directory."""
    with slurm_cluster(cpus=4, timeout=60) as other:
        assert other.ctld_port != slurm.ctld_port
        result = other.srun(["-n", "4", "bash", "-c", REPORT], timeout=60)
        assert result.returncode == 0, result.stderr + other.log_tails()
        assert sorted(reports(result.stdout)) == [0, 1, 2, 3]
        root = other.root
        pids = [proc.pid for proc in other._daemons.values()]
    assert not root.exists()
    for pid in pids:
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
        assert state in ("", "Z"), (pid, state)


def test_missing_slurm_skips_or_fails_on_ci(monkeypatch, pytester):
    """Without the binaries the fixture skips with the install line; with CI=true it fails instead."""
    pytester.makepyfile(
        """
        from slurm_cluster import slurm_fixture  # noqa: F401

        def test_needs_slurm(slurm):
            pass
        """
    )
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setattr(module, "_shared", {"users": 0})  # not the session's running cluster
    monkeypatch.delenv("CI", raising=False)
    assert missing().startswith("Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)")
    with pytest.raises(SlurmUnavailable):
        with slurm_cluster():
            pass
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*Slurm is not installed (apt-get install slurmctld slurmd slurm-client munge)*"])
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*CI must run the Slurm tests: Slurm is not installed*"])
