"""Processes started together (runner.run_workers, runner.run_ranks) and the measurements that use them, for real on
CPU stand-ins: every process is started before any is waited for, the workers of one round measure at the same time
and rounds never overlap, a failure or a timeout stops every process, and each record keeps the shape one process
wrote (formats/records.py reads it without a problem).

The PCIe placement rule (which GPUs may copy at once) is read off the real sysfs tree of the 2x H100 SXM VM
(tests/data/captures/platform/h100-sxm-x2), and off copies of it edited to other placements, each marked DERIVED.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from pytest_gpufabric.errors import WorkloadError
from pytest_gpufabric.formats.records import read_record
from pytest_gpufabric.workloads import runner
from pytest_gpufabric.workloads.runner import run_ranks, run_workers

torch = pytest.importorskip("torch")

from pytest_gpufabric.workloads.bandwidth import run_collectives  # noqa: E402
from pytest_gpufabric.workloads.diagnostics import HBM_FORMAT, hbm_repeats, measure_hbm  # noqa: E402
from pytest_gpufabric.workloads.power_pcie import (  # noqa: E402
    PCIE_LOAD_FORMAT,
    live_pcie_rounds,
    measure_pcie_load,
    pcie_rounds,
)

DATA = Path(__file__).parent / "data"
H100_X2_SYSFS = DATA / "captures" / "platform" / "h100-sxm-x2" / "snapshot" / "platform"
H100_X2_BUSES = ["00000000:00:06.0", "00000000:00:07.0"]  # the two GPUs of that VM (its nvml.json)
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


def _check_shape(name: str, record: dict) -> None:
    """The record, written as the run writes it and read back as a replay reads it: no problem anywhere."""
    recording = read_record(name, json.loads(json.dumps(record, allow_nan=False)), f"{name} of this test")
    assert recording.problems == [] and recording.unreadable is None
    assert len(recording["gpus"]) == len(record["gpus"])


# --- run_workers ------------------------------------------------------------------------------------------------


def test_every_worker_starts_before_any_is_waited_for_and_one_round_measures_at_once(tmp_path):
    cmd = _worker(tmp_path)
    began = time.time()
    results, timing = run_workers([[*cmd, f"--worker={n}"] for n in range(3)], timeout_s=60,
                                  env={**os.environ, "SETUP_S": "0.5", "MEASURE_S": "0.5"})
    assert [r["argv"][0] for r in results] == ["--worker=0", "--worker=1", "--worker=2"]  # in the order given
    # every process had started before any began to measure: started together, not one after another
    assert max(r["started"] for r in results) < min(r["began"] for r in results)
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
    # all three were handed their script before any was waited for
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
    from pytest_gpufabric.profile.measure import _repeats

    result = run_collectives(2, ["all_reduce"], [1024, 4096], backend="gloo", warmup=1, iters=2, timeout_s=180,
                             repeats=3)
    assert len(result["repeats"]) == 3 and result["ops"] == result["repeats"][0]
    assert all([row["size"] for row in figures["all_reduce"]] == [1024, 4096] for figures in result["repeats"])
    each = _repeats(result, 3, key="ops")
    assert [r["ops"] for r in each] == result["repeats"] and all("repeats" not in r for r in each)
    assert each[0]["world_size"] == 2 and each[0]["ranks"] == result["ranks"]
    single = run_collectives(2, ["all_reduce"], [1024], backend="gloo", warmup=1, iters=2, timeout_s=180)
    assert "repeats" not in single  # the acceptance's record as before


# --- the HBM test: a worker per GPU, all at once ------------------------------------------------------------------

HBM_SECTION = {"size": "8 MiB", "iters": 3, "timeout_s": 120}


def test_hbm_workers_measure_every_gpu_at_once_into_one_record():
    record = measure_hbm(HBM_SECTION, device="cpu", gpus=2)
    assert record["format"] == HBM_FORMAT and record["size_bytes"] == 8 << 20 and "stdout_tail" not in record
    assert [(row["cuda"], row["index"]) for row in record["gpus"]] == [(0, 0), (1, 1)]
    assert set(record) == {"format", "size_bytes", "iters", "warmup", "device", "torch_version", "gpus", "runner"}
    _check_shape("hbm.json", record)
    workers = record["runner"]["workers"]
    assert len(workers) == 2 and workers[0]["go_s"] == workers[1]["go_s"]  # let go together
    assert max(w["started_s"] for w in workers) <= min(w["ready_s"] for w in workers)


def test_hbm_repeats_in_the_workers_give_one_record_per_repeat():
    records = hbm_repeats(HBM_SECTION, device="cpu", gpus=2, repeats=2)
    assert len(records) == 2 and all("repeats" not in r for r in records)
    assert [[row["index"] for row in r["gpus"]] for r in records] == [[0, 1], [0, 1]]
    assert records[0]["gpus"] != records[1]["gpus"]  # two measurements, not one twice
    for record in records:
        _check_shape("hbm.json", record)


# --- PCIe under load: a worker per GPU, started together, copying in rounds ---------------------------------------

PCIE_SECTION = {"size": "4 MiB", "seconds": 0.3}
PCIE_ROW_KEYS = {"cuda", "index", "uuid", "serial", "name", "h2d_gbps", "d2h_gbps", "copies", "cpu_affinity", "link",
                 "replay_counter", "unread"}


def test_pcie_workers_set_up_together_and_copy_one_gpu_at_a_time():
    record = measure_pcie_load(PCIE_SECTION, device="cpu", gpus=3)
    assert record["format"] == PCIE_LOAD_FORMAT and record["size"] == 4 << 20 and record["seconds"] == 0.3
    assert [row["index"] for row in record["gpus"]] == [0, 1, 2]
    assert all(set(row) == PCIE_ROW_KEYS for row in record["gpus"])
    assert record["rounds"] == [[0], [1], [2]]
    _check_shape("pcie-load.json", record)
    workers = record["runner"]["workers"]
    # every worker was ready (context, buffers) before the first copied ...
    assert max(w["ready_s"] for w in workers) <= workers[0]["go_s"]
    # ... and no two copied at once
    assert workers[0]["done_s"] <= workers[1]["go_s"] and workers[1]["done_s"] <= workers[2]["go_s"]
    assert all(row["copies"]["h2d"] >= 1 and row["copies"]["d2h"] >= 1 for row in record["gpus"])


def test_pcie_workers_of_one_round_copy_at_once():
    record = measure_pcie_load(PCIE_SECTION, device="cpu", gpus=2, rounds=[[0, 1]])
    assert record["rounds"] == [[0, 1]]
    workers = record["runner"]["workers"]
    assert workers[0]["go_s"] == workers[1]["go_s"]
    _check_shape("pcie-load.json", record)


def _sysfs_copy(tmp_path: Path, source: Path) -> Path:
    """A sysfs tree with real links, from a capture that keeps each link's target as ``<path>.symlink`` text."""
    root = tmp_path / "root"
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if path.name.endswith(".symlink"):
            link = root / str(relative).removesuffix(".symlink")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(root / path.read_text().strip().lstrip("/"))
        elif path.is_dir():
            (root / relative).mkdir(parents=True, exist_ok=True)
    return root


def test_the_recorded_h100_vm_copies_one_gpu_at_a_time(tmp_path):
    """Both GPUs of the 2x H100 SXM VM sit on its one root bus: their copies would share it."""
    root = _sysfs_copy(tmp_path, H100_X2_SYSFS)
    assert (root / "sys/bus/pci/devices/0000:00:07.0").resolve() == root / "sys/devices/pci0000:00/0000:00:07.0"
    assert live_pcie_rounds(H100_X2_BUSES, root=str(root)) == [[0], [1]]
    assert live_pcie_rounds([None, None], root=str(root)) == [[0], [1]]  # no bus id: not known to be apart


def test_gpus_on_other_root_complexes_and_sockets_copy_at_once(tmp_path):
    """DERIVED: the VM's tree edited so that its second GPU sits under a second root complex on NUMA node 1."""
    root = _sysfs_copy(tmp_path, H100_X2_SYSFS)
    devices = root / "sys/devices"
    (devices / "pci0000:80").mkdir()
    (devices / "pci0000:00/0000:00:07.0").rename(devices / "pci0000:80/0000:80:01.0")
    link = root / "sys/bus/pci/devices/0000:00:07.0"
    link.unlink()
    (root / "sys/bus/pci/devices/0000:80:01.0").symlink_to(devices / "pci0000:80/0000:80:01.0")
    buses = ["00000000:00:06.0", "00000000:80:01.0"]
    assert live_pcie_rounds(buses, root=str(root)) == [[0], [1]]  # no NUMA node known yet: not shown to be apart
    (devices / "pci0000:00/0000:00:06.0/numa_node").write_text("0\n")
    (devices / "pci0000:80/0000:80:01.0/numa_node").write_text("1\n")
    assert live_pcie_rounds(buses, root=str(root)) == [[0, 1]]
    (devices / "pci0000:80/0000:80:01.0/numa_node").write_text("0\n")  # one socket's host memory: apart no more
    assert live_pcie_rounds(buses, root=str(root)) == [[0], [1]]


def test_eight_gpus_on_two_sockets_copy_two_at_a_time():
    """DERIVED: the VM's paths as eight GPUs would have them on two sockets, each on its own root complex."""
    places = [(f"/sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:00.0", 0 if gpu < 4 else 1)
              for gpu, bus in enumerate([0x15, 0x26, 0x37, 0x48, 0x97, 0xa8, 0xb9, 0xca])]
    assert pcie_rounds(places) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    shared = [(path.replace(path.split("/")[3], "pci0000:15"), node) for path, node in places]  # one root complex
    assert pcie_rounds(shared) == [[gpu] for gpu in range(8)]
    assert pcie_rounds([("not a sysfs path", 0), ("/sys/devices/pci0000:97/0000:97:00.0", 1)]) == [[0], [1]]


# --- how many spare interpreters a run starts ahead -----------------------------------------------------------


def test_a_rank_or_worker_per_gpu_gets_a_spare_each(monkeypatch):
    from pytest_gpufabric.measurements import REGISTRY
    from pytest_gpufabric.workloads.runner import MAX_SPARES, spare_count

    per_gpu = {name: entry.processes(4) for name, entry in REGISTRY.items() if entry.needs_machine}
    assert per_gpu == {"nvlink": 4, "bandwidth": 5, "memory": 1, "burn_in": 1, "hbm": 4, "memory_pattern": 1,
                       "power_hold": 1, "pcie_load": 4, "arrival": 0}  # the arrival state: a read in this process
    # one GPU: no collectives, and the copies need no torch (copy_bw.py, through the CUDA driver): they start cold
    assert REGISTRY["bandwidth"].processes(1) == 0
    assert sum(per_gpu.values()) - per_gpu["burn_in"] == 20  # a 4-GPU acceptance without burn-in
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert spare_count(20) == 20 and spare_count(36) == 32  # half the cores
    monkeypatch.setattr(os, "cpu_count", lambda: 256)
    assert spare_count(100) == MAX_SPARES == 40
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert spare_count(20) == 1  # a 2-core machine imports one at a time
