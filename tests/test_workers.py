"""Processes started together (runner.run_workers, runner.run_ranks), for real: every process is started before any
is waited for, the workers of one round measure at the same time and rounds never overlap, a failure or a timeout
stops every process, and a torch.distributed job runs without torchrun, its ranks in spare interpreters.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from pytest_gpufabric.errors import WorkloadError
from pytest_gpufabric.workloads import runner
from pytest_gpufabric.workloads.runner import run_ranks, run_workers

torch = pytest.importorskip("torch")

from pytest_gpufabric.workloads.bandwidth import run_collectives  # noqa: E402

WORKLOADS = Path(runner.__file__).parent

#: a worker: says when it started, does a set-up of SETUP_S, says ready, waits for go, "measures" for
#: MEASURE_S, says done, waits for release; its result holds its own wall-clock marks
_WORKER = """
import json, os, sys, time
from pathlib import Path
started = time.time()
handshake = Path(sys.argv[sys.argv.index("--handshake") + 1])
def wait_for(name):
    while not (handshake / name).exists():
        time.sleep(0.005)
time.sleep(float(os.environ.get("SETUP_S", "0.3")))
(handshake / "ready").touch()
wait_for("go")
began = time.time()
time.sleep(float(os.environ.get("MEASURE_S", "0.4")))
ended = time.time()
(handshake / "done").touch()
wait_for("release")
json.dump({"started": started, "began": began, "ended": ended, "argv": sys.argv[1:]},
          open(sys.argv[sys.argv.index("--result") + 1], "w"))
"""


def _worker(tmp_path: Path, body: str = _WORKER) -> list[str]:
    path = tmp_path / "worker.py"
    path.write_text(body)
    return [sys.executable, str(path)]


# --- run_workers ------------------------------------------------------------------------------------------------


def test_every_worker_starts_before_any_is_waited_for_and_one_round_measures_at_once(tmp_path):
    cmd = _worker(tmp_path)
    began = time.time()
    results, timing = run_workers([[*cmd, f"--worker={n}"] for n in range(3)], timeout_s=60,
                                  env={**os.environ, "SETUP_S": "0.5", "MEASURE_S": "0.5"})
    assert [r["argv"][0] for r in results] == ["--worker=0", "--worker=1", "--worker=2"]  # in the order given
    # each process started before any had finished its set-up: started together, not one after another
    assert max(r["started"] for r in results) < min(r["started"] for r in results) + 0.5
    # one round: every worker measured at the same time (their windows overlap) ...
    assert max(r["began"] for r in results) < min(r["ended"] for r in results)
    # ... so the whole took about one set-up and one measurement, not three of each
    assert time.time() - began < 3 * (0.5 + 0.5)
    workers = timing["workers"]
    assert len(workers) == 3 and all(w["started_in"] == "cold" for w in workers) and timing["started_in"] == "cold"
    assert max(w["started_s"] for w in workers) <= min(w["ready_s"] for w in workers)
    assert len({w["go_s"] for w in workers}) == 1 and timing["ready_s"] <= workers[0]["go_s"]
    assert timing["done_s"] >= max(w["done_s"] for w in workers) and timing["exit_s"] >= timing["done_s"]


def test_rounds_measure_one_after_another_with_every_set_up_done_first(tmp_path):
    cmd = _worker(tmp_path)
    events: list[str] = []
    results, timing = run_workers([cmd, cmd, cmd], timeout_s=60, rounds=[[2], [0, 1]],
                                  env={**os.environ, "SETUP_S": "0.3", "MEASURE_S": "0.3"},
                                  on_begin=lambda: events.append("begin"), on_end=lambda: events.append("end"))
    assert events == ["begin", "end"]  # one bracket around every round
    last, first, second = results[2], results[0], results[1]
    assert last["ended"] <= first["began"] and last["ended"] <= second["began"]  # round [2] before round [0, 1]
    assert max(first["began"], second["began"]) < min(first["ended"], second["ended"])  # [0, 1] together
    workers = timing["workers"]
    # the second round's set-up was over before the first round measured: set-up overlaps, copies do not
    assert max(w["ready_s"] for w in workers) <= workers[2]["go_s"]
    assert workers[0]["go_s"] == workers[1]["go_s"] >= workers[2]["done_s"]


def test_rounds_must_name_every_worker_once(tmp_path):
    with pytest.raises(ValueError, match=r"rounds \[\[0\], \[0\]\] do not name each of the 2 workers once"):
        run_workers([_worker(tmp_path)] * 2, timeout_s=10, rounds=[[0], [0]])


def test_a_failing_worker_stops_the_others(tmp_path):
    failing = tmp_path / "fails.py"
    failing.write_text("import sys, time\ntime.sleep(0.3)\nsys.stderr.write('GPU1 fell off the bus\\n')\nsys.exit(3)\n")
    began = time.time()
    with pytest.raises(WorkloadError, match="GPU1 fell off the bus") as info:
        run_workers([_worker(tmp_path), [sys.executable, str(failing)]], timeout_s=60,
                    env={**os.environ, "SETUP_S": "30"})  # the healthy worker would set up for 30 s
    assert info.value.returncode == 3 and info.value.cmd[1] == str(failing)
    assert time.time() - began < 15  # the healthy worker was killed, not waited for


def test_a_timeout_kills_every_worker(tmp_path):
    with pytest.raises(WorkloadError, match="timed out after 2 s; the process group was killed"):
        run_workers([_worker(tmp_path)] * 2, timeout_s=2, env={**os.environ, "SETUP_S": "600"})


# --- run_ranks: a torch.distributed job without torchrun ----------------------------------------------------------

#: a rank: joins the job through ranks.init_distributed (gloo) and says what it was given
_RANK = """
import json, os, sys, time
started = time.time()
torch_before = "torch" in sys.modules
sys.path.insert(0, {workloads!r})
import torch
import torch.distributed as dist
from ranks import init_distributed
rank, world, device = init_distributed("gloo")
mine = {{"rank": rank, "world": world, "pid": os.getpid(), "started": started, "torch_before": torch_before,
        "threads": torch.get_num_threads(), "local_rank": os.environ["LOCAL_RANK"],
        "master": os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]}}
everyone = [None] * world
dist.all_gather_object(everyone, mine)
if rank == 0:
    json.dump({{"ranks": everyone}}, open(sys.argv[sys.argv.index("--result") + 1], "w"))
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture
def spares(monkeypatch):
    pool = runner.SpareInterpreters()
    pool.enabled = True  # not enable(): no atexit hook from a test; closed below
    monkeypatch.setattr(runner, "SPARES", pool)
    yield pool
    pool.close()


def test_a_job_of_ranks_from_spares_is_told_its_rank_and_torchruns_thread_count(tmp_path, spares, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = tmp_path / "rank.py"
    script.write_text(_RANK.format(workloads=str(WORKLOADS)))
    env = dict(os.environ)
    spares.prestart(env, [("torch",)] * 3)
    result = run_ranks([sys.executable, str(script)], 3, timeout_s=120, env=env)
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2] and {r["world"] for r in ranks} == {3}
    assert [r["local_rank"] for r in ranks] == ["0", "1", "2"]
    assert len({r["master"] for r in ranks}) == 1 and ranks[0]["master"].startswith("127.0.0.1:")
    # every rank ran in a spare that had imported torch before it was told its rank ...
    assert all(r["torch_before"] for r in ranks) and spares.served == 3
    assert result["runner"]["started_in"] == "spare" and len(result["runner"]["workers"]) == 3
    # ... and still runs one intra-op thread, as torchrun sets it for several ranks (OMP_NUM_THREADS=1)
    assert {r["threads"] for r in ranks} == {1}
    # all three started before any was waited for
    assert max(r["started"] for r in ranks) - min(r["started"] for r in ranks) < 1.0
    assert max(w["started_s"] for w in result["runner"]["workers"]) < 1.0


def test_a_failing_rank_stops_the_job_and_says_why(tmp_path):
    script = tmp_path / "fails_on_rank_1.py"
    script.write_text(
        f"import os, sys, time\nsys.path.insert(0, {str(WORKLOADS)!r})\nimport torch\n"
        "from handshake import reporting_failure\n"
        "def main():\n"
        "    if os.environ['RANK'] == '1':\n"
        "        torch.zeros(2) @ torch.zeros(3)\n"
        "    time.sleep(600)  # rank 0 would wait for ever\n"
        "raise SystemExit(reporting_failure(main))\n")
    began = time.time()
    with pytest.raises(WorkloadError) as info:
        run_ranks([sys.executable, str(script)], 2, timeout_s=300)
    assert time.time() - began < 60  # rank 0 was stopped, not waited for
    assert list(info.value.failures) == ["1"] and info.value.returncode == 1
    assert str(info.value).rstrip().endswith(
        "RuntimeError: inconsistent tensor size, expected tensor [2] and src [3] to have the same number of "
        "elements, but got 2 and 3 elements respectively")


def test_the_collectives_run_every_repeat_in_one_job(tmp_path):
    """profile init --measure's three repeats: one job, one start-up, three sweeps."""
    result = run_collectives(2, ["all_reduce"], [1024, 4096], backend="gloo", warmup=1, iters=2, timeout_s=180,
                             repeats=3)
    assert len(result["repeats"]) == 3 and result["ops"] == result["repeats"][0]
    assert all([row["size"] for row in figures["all_reduce"]] == [1024, 4096] for figures in result["repeats"])
    single = run_collectives(2, ["all_reduce"], [1024], backend="gloo", warmup=1, iters=2, timeout_s=180)
    assert "repeats" not in single  # the acceptance's record as before
