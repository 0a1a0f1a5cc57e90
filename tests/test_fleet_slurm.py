"""A fleet accepted through a real Slurm (Debian's slurmctld, slurmd and munge, started by tests/slurm_cluster.py
on this one host, configured as a GPU cluster: a NodeName that is not the host name, two GPUs as GRES, devices
confined to a job's own): `srun -n 6` runs six tasks, each standing for one node and replaying the recorded bundle
of a real machine through the plugin, into its own results folder; `gpufabric fleet report` then judges what they
wrote, as it would the nodes of a real job. What it says is checked against the recorded files. And the shipped
examples/fleet-acceptance.sbatch, unchanged, submitted with the line `gpufabric fleet sbatch` prints."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import slurm_fixture  # noqa: F401  (the fixture `slurm`)

from pytest_gpufabric.fleet.report import validate_fleet_document

REPO = Path(__file__).resolve().parent.parent
SBATCH = REPO / "examples" / "fleet-acceptance.sbatch"
DATA = Path(__file__).parent / "data"
BUNDLES = DATA / "bundles"

#: task -> (node name, bundle): four 2x H200 SXM 141GB hosts, a planted-fault burn-in of a fifth, a 4x H200 SXM 141GB
NODES = [
    ("h200c", BUNDLES / "h200-nvswitch-x2-acceptance"),  # every suite and a 10-minute burn-in
    ("h200e", BUNDLES / "h200-nvswitch-x2-bandwidth"),
    ("h200g", BUNDLES / "h200-nvswitch-x2-training"),
    ("h200f", BUNDLES / "h200-nvswitch-x2"),
    ("h200a", None),  # the planted-fault burn-in log of the first host, alone (made below)
    ("h200x4b", BUNDLES / "h200-nvswitch-x4"),
]
PLANTED_LOG = DATA / "results" / "burn-in-planted-fault-on-h200-x2.jsonl"

# Each task picks its node by SLURM_PROCID, as each node of a real job would be itself; the results folder is
# named after it ({host} in a real fleet, where every task is on its own host).
TASK = """
set -eu
names=({names})
bundles=({bundles})
name=${{names[$SLURM_PROCID]}}
mkdir -p "$WORK/$name" "$FLEET" && cd "$WORK/$name"
{python} -m pytest -p no:cacheprovider -q --gpu-profile h200-nvswitch-x2 --gpu-replay "${{bundles[$SLURM_PROCID]}}" \\
    --gpu-waive "xid-events=the recording holds no kernel log; agreed for the Slurm test" \\
    --gpu-report-dir "$FLEET/$name" > "$FLEET/$name.log" 2>&1 || true
"""


def test_a_fleet_accepted_through_slurm(slurm, tmp_path):
    planted = tmp_path / "planted-bundle"
    planted.mkdir()
    shutil.copy(PLANTED_LOG, planted / "gpufabric-burnin.jsonl")
    bundles = [str(bundle or planted) for _, bundle in NODES]
    fleet, work = tmp_path / "fleet", tmp_path / "work"
    script = TASK.format(names=" ".join(name for name, _ in NODES), bundles=" ".join(bundles), python=sys.executable)
    done = slurm.srun(["-n", str(len(NODES)), "--job-name", "gpufabric-fleet", "bash", "-c", script],
                      env={"FLEET": str(fleet), "WORK": str(work)}, timeout=600)
    assert done.returncode == 0, done.stderr
    for name, _ in NODES:
        results = json.loads((fleet / name / "gpufabric-results.json").read_text(encoding="utf-8"))
        assert results["run"]["fleet_id"] and results["run"]["fleet_id"].isdigit()  # Slurm's job id

    out = tmp_path / "report"
    report = slurm.run([sys.executable, "-m", "pytest_gpufabric", "fleet", "report", "--allow-replays", str(fleet),
                        "--expect",
                        ",".join([*(name for name, _ in NODES), "h200h"]), "-o", str(out)], timeout=300)
    assert report.returncode == 1, report.stdout + report.stderr  # rejected
    document = json.loads((out / "fleet-results.json").read_text(encoding="utf-8"))
    validate_fleet_document(document)
    nodes = {n["name"]: n for n in document["nodes"]}
    assert document["missing"] == ["h200h"]
    assert len(document["fleet_ids"]) == 1  # every task of the one srun
    # the nodes that replayed one suite's recording or a snapshot alone show only part of the profile: incomplete,
    # not accepted and not accused
    assert {name: n["verdict"] for name, n in nodes.items()} == {
        "h200c": "ACCEPTED", "h200e": "INCOMPLETE", "h200g": "INCOMPLETE", "h200f": "INCOMPLETE",
        "h200a": "REJECTED", "h200x4b": "REJECTED"}

    # the planted fault, as the recorded log has it: GPU1 of the first host, by serial, with its wrong elements
    log = [json.loads(line) for line in PLANTED_LOG.read_text(encoding="utf-8").splitlines()]
    serial = log[0]["serials"]["1"]
    wrong = sum(g["errors_self"] + g["errors_cross"] for r in log if r.get("type") == "gemm"
                for g in r["result"]["gpus"] if g["gpu"] == 1)
    (failed,) = nodes["h200a"]["failed"]  # the burn-in alone: the log records no topology to judge
    assert failed["subject"] == f"GPU1 (serial {serial})"
    assert f"{wrong} wrong elements" in failed["message"]
    assert {gpu: b["wrong_elements"] for gpu, b in nodes["h200a"]["burn_in"].items()} == {"GPU0": 0, "GPU1": wrong}

    # the 4-GPU machine among 2-GPU ones: rejected by the 2-GPU profile, its GPU count drifted from the fleet's
    x4 = json.loads((BUNDLES / "h200-nvswitch-x4" / "nvml.json").read_text(encoding="utf-8"))
    assert {"field": "gpu_count", "value": str(len(x4["gpus"])), "majority": "2"} in nodes["h200x4b"]["drift"]
    assert any(f["check"] == "gpu-count" and f["message"].startswith(f"expected 2 GPUs, found {len(x4['gpus'])}")
               for f in nodes["h200x4b"]["failed"])

    # the passing hosts' figures, against the bundles they replayed: nothing flagged in a healthy fleet
    busbw = []
    for bundle in ("h200-nvswitch-x2-acceptance", "h200-nvswitch-x2-bandwidth"):
        recorded = json.loads((BUNDLES / bundle / "bandwidth.json").read_text(encoding="utf-8"))
        busbw += [r["busbw"] for r in recorded["collectives"]["ops"]["all_reduce"] if r["size"] == 4 << 30]
    assert sorted(busbw) == sorted(
        c["found"]["busbw_gbps"] for name in ("h200c", "h200e")
        for c in json.loads((fleet / name / "gpufabric-results.json").read_text(encoding="utf-8"))["checks"]
        if c["name"] == "bandwidth-all_reduce" and c["subject"] == "all_reduce 4GiB")
    assert not any(n["outliers"] for n in nodes.values())
    assert (out / "fleet.html").is_file() and (out / "fleet-junit.xml").is_file()
    assert "fleet: REJECTED" in report.stdout


def _gpufabric(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", *args], capture_output=True, text=True,
                          cwd=REPO)


#: a pytest plugin the sbatch test slips in through PYTEST_ADDOPTS: what the node's acceptance run was given
PROBE = """
import json, os

def pytest_configure(config):
    seen = {{name: os.environ.get(name) for name in ("SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME")}}
    seen["devices"] = []
    for device in {devices!r}:
        try:
            open(device, "rb").close()
            seen["devices"].append("opened")
        except OSError as exc:
            seen["devices"].append(exc.strerror)
    with open({out!r}, "w") as out:
        json.dump(seen, out)
"""


def test_the_cluster_confines_a_step_to_its_gpus(slurm):
    """What a production GPU cluster does and the sbatch relies on: a step sees the GPUs its job asked for and no
    other (ConstrainDevices), and SLURMD_NODENAME is the NodeName, not the host name."""
    assert slurm.nodename != slurm.hostname
    probe = ('echo "$SLURMD_NODENAME $(hostname -s) ${SLURM_GPUS_ON_NODE:-0} ${CUDA_VISIBLE_DEVICES:-none}"; '
             'for device in "$@"; do cat "$device" 2>&1 | sed "s/^cat: //"; done')
    seen = {}
    for ask in ("--gpus-per-node=1", "--gres=gpu:2", "--gpus-per-node=0"):
        done = slurm.srun(["-N", "1", ask, "bash", "-c", probe, "probe", *map(str, slurm.devices)], timeout=60)
        assert done.returncode == 0, done.stderr + slurm.log_tails()
        first, *devices = done.stdout.splitlines()
        assert first.split()[:2] == [slurm.nodename, slurm.hostname]
        seen[ask] = first.split()[2:], [line.rsplit(": ", 1)[1] for line in devices]
    nodriver, confined = "No such device or address", "Operation not permitted"
    if slurm.device_nodes:
        assert seen["--gpus-per-node=1"][0] == ["1", "0"] and seen["--gres=gpu:2"][0] == ["2", "0,1"]
    assert [seen[ask][0][0] for ask in seen] == ["1", "2", "0"]
    assert seen["--gpus-per-node=0"][0] == ["0", "none"]
    if slurm.constrain_devices:
        assert seen["--gpus-per-node=1"][1] == [nodriver, confined]
        assert seen["--gres=gpu:2"][1] == [nodriver, nodriver]
        assert seen["--gpus-per-node=0"][1] == [confined, confined]


def test_the_sbatch_line_of_a_profile():
    """`gpufabric fleet sbatch` asks for the profile's GPUs and a time limit of 1.5 x (2 min + 1 min per GPU +
    burn-in + one burn-in chunk) + 5 min, rounded up to 5 minutes; the shipped script's own lines are the default
    profile's."""
    done = _gpufabric("fleet", "sbatch", "--profile", "h200-nvswitch-x2", "-N", "64")
    assert done.returncode == 0, done.stderr
    # 1.5 x (120 + 2 x 60 + 600 + 150 s) + 300 s = 1785 s: 30 minutes
    assert done.stdout == ("sbatch --nodes=64 --gpus-per-node=2 --time=00:30:00 examples/fleet-acceptance.sbatch "
                           "h200-nvswitch-x2 10m\n")
    script = SBATCH.read_text(encoding="utf-8")
    for line in ("--gpus-per-node=2", "--time=00:30:00", "--exclusive", "--mem=0", "--ntasks-per-node=1"):
        assert f"#SBATCH {line}\n" in script
    # 4 GPUs, a 2-hour burn-in in chunks of the profile's burn_in.chunk_s
    x4 = _gpufabric("fleet", "sbatch", "--profile", "h200-nvswitch-x4", "--burn-in", "2h")
    chunk_s = _burn_in("h200-nvswitch-x4").get("chunk_s", 60)
    minutes = -(-(1.5 * (120 + 4 * 60 + 7200 + chunk_s) + 300) // 300) * 5
    assert x4.stdout.split()[2] == f"--time={int(minutes) // 60:02d}:{int(minutes) % 60:02d}:00"
    assert x4.stdout.split()[1] == "--gpus-per-node=4"
    none = _gpufabric("fleet", "sbatch", "--profile", "h200-nvswitch-x2", "--burn-in", "none")
    assert none.stdout.split()[2:] == ["--time=00:15:00", "examples/fleet-acceptance.sbatch", "h200-nvswitch-x2",
                                       "none"]  # 1.5 x 240 s + 300 s
    for args, message in ((["--profile", "a100-pcie-roce", "--burn-in", "10m"],
                           "--burn-in 10m: profile a100-pcie-roce promises no burn-in"),
                          (["--profile", "h200-nvswitch-x2", "--burn-in", "10x"], "not a duration")):
        bad = _gpufabric("fleet", "sbatch", *args)
        assert bad.returncode == 4 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def _burn_in(name: str) -> dict:
    from pytest_gpufabric.profile.loader import load_profile

    return load_profile(name, REPO).data.get("burn_in") or {}


def test_the_shipped_sbatch_accepts_a_fleet_unchanged(slurm, tmp_path):
    """examples/fleet-acceptance.sbatch as shipped, submitted with the line `gpufabric fleet sbatch` prints: its
    one node (Slurm's node gpu-st-p5-1 on a host of another name, 2 GPUs granted) replays the recorded acceptance of
    a 2x H200 SXM 141GB host with its 10-minute burn-in (PYTEST_ADDOPTS, which pytest reads, names the bundle), the
    fleet report finds it under the nodelist's name and the job ends ACCEPTED, exit 0. A probe plugin, slipped in
    the same way, records what the node's pytest was given: both GPUs."""
    bundle = BUNDLES / "h200-nvswitch-x2-acceptance"
    fleet, probe = tmp_path / "fleet", tmp_path / "probe"
    probe.mkdir()
    (probe / "gpu_probe.py").write_text(PROBE.format(out=str(tmp_path / "seen.json"),
                                                     devices=[str(device) for device in slurm.devices]))
    line = _gpufabric("fleet", "sbatch", "--profile", "h200-nvswitch-x2", "-N", "1", "--script", str(SBATCH))
    assert line.returncode == 0, line.stderr
    argv = shlex.split(line.stdout)
    env = {"REPORTS": str(fleet), "FLEET_REPORT_OPTS": "--allow-replays",
           "PYTEST_ADDOPTS": shlex.join(["-p", "gpu_probe", "--gpu-replay", str(bundle), "--gpu-waive",
                                         "xid-events=the recording holds no kernel log; agreed for the Slurm test"]),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "PYTHONPATH": os.pathsep.join([str(probe), str(REPO), os.environ.get("PYTHONPATH", "")])}
    output = tmp_path / "job.out"
    tmp_path.chmod(0o755)
    submitted = slurm.run([argv[0], "--parsable", f"--output={output}", *argv[1:]], env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    fields = slurm.wait(job_id, timeout=300)
    log = output.read_text(errors="replace") if output.exists() else ""
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), log + slurm.log_tails()
    job = slurm.run(["scontrol", "show", "job", job_id], check=True).stdout
    # the GPUs, the time limit, the whole node (--exclusive: all its CPUs for one task) and all its memory
    for granted in ("TresPerNode=gres:gpu:2", "TimeLimit=00:30:00", f"NumCPUs={slurm.cpus} NumTasks=1",
                    "MinMemoryNode=0"):
        assert granted in job, (granted, job)

    # the node's pytest saw both GPUs the job was granted, as CUDA would be told them
    seen = json.loads((tmp_path / "seen.json").read_text(encoding="utf-8"))
    assert seen["SLURM_GPUS_ON_NODE"] == "2" and seen["SLURMD_NODENAME"] == slurm.nodename
    if slurm.device_nodes:
        assert seen["CUDA_VISIBLE_DEVICES"] == "0,1"
    if slurm.constrain_devices:
        assert seen["devices"] == ["No such device or address"] * 2  # granted; no driver behind them

    node = fleet / slurm.nodename
    results = json.loads((node / "gpufabric-results.json").read_text(encoding="utf-8"))
    assert results["summary"]["verdict"] == "ACCEPTED" and results["run"]["fleet_id"] == job_id
    assert (node / "acceptance.html").is_file()
    document = json.loads((fleet / "fleet" / "fleet-results.json").read_text(encoding="utf-8"))
    validate_fleet_document(document)
    assert document["verdict"] == "ACCEPTED", document["reason"]
    assert [n["name"] for n in document["nodes"]] == [slurm.nodename] and document["missing"] == []
    assert "fleet: ACCEPTED" in log


def test_a_job_granted_fewer_gpus_than_the_profile_judges_no_node(slurm, tmp_path):
    """The shipped script submitted with one GPU per node under a 2-GPU profile: its steps would see one GPU (an
    --exclusive job holds both, its steps only what it asked for) and every node would be rejected for the other,
    so the job stops before any node runs, exit 4, saying what to submit."""
    fleet, output = tmp_path / "fleet", tmp_path / "job.out"
    tmp_path.chmod(0o755)
    env = {"REPORTS": str(fleet), "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    submitted = slurm.run(["sbatch", "--parsable", f"--output={output}", "--nodes=1", "--gpus-per-node=1",
                           str(SBATCH), "h200-nvswitch-x2", "none"], env=env)
    assert submitted.returncode == 0, submitted.stderr
    fields = slurm.wait(submitted.stdout.strip().split(";")[0], timeout=120)
    log = output.read_text(errors="replace")
    assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "4:0"), log
    assert log.strip() == ("gpufabric fleet sbatch: the job asked for 1 GPU(s) per node and profile h200-nvswitch-x2 "
                           "promises 2: every node would be judged on 1; submit it with --gpus-per-node=2 (gpufabric "
                           "fleet sbatch --profile h200-nvswitch-x2)")
    assert list(fleet.iterdir()) == []  # no node ran


@pytest.mark.parametrize("env, problem", [
    ({"SLURM_GPUS_PER_NODE": "2", "SLURM_GPUS_ON_NODE": "2"}, None),
    ({"SLURM_GPUS_PER_NODE": "h200:2"}, None),  # typed GPUs in gres.conf
    ({"SLURM_GPUS_PER_NODE": "h200:1,l40s:1"}, None),
    ({"SLURM_GPUS_ON_NODE": "2"}, None),  # --gres=gpu:2
    ({}, None),  # a cluster without a gpu GRES: nothing to hold the job to
    ({"SLURM_GPUS_PER_NODE": "1", "SLURM_GPUS_ON_NODE": "2"}, "asked for 1 GPU(s) per node"),  # --exclusive holds 2
    ({"SLURM_GPUS_PER_NODE": "0"}, "asked for 0 GPU(s) per node"),
    ({"SLURM_GPUS_PER_NODE": "h200:4"}, "asked for 4 GPU(s) per node"),
    ({"SLURM_GPUS_PER_NODE": "2(x3)"}, None),  # a form not known here is not guessed at
])
def test_the_allocation_the_job_asked_for(env, problem):
    from pytest_gpufabric.fleet.sbatch import allocation_problem
    from pytest_gpufabric.profile.loader import load_profile

    found = allocation_problem(load_profile("h200-nvswitch-x2", REPO), env)
    assert found == problem if problem is None else found.startswith(f"the job {problem} and profile "
                                                                       "h200-nvswitch-x2 promises 2")
