"""The workload runner and the DDP training step, with real child processes only.

The runner's promises (a timeout kills the whole process group, failures carry the child's output, the
ready/go/done/release handshake brackets the measured part) are checked with small ``python -c`` children;
the training step itself runs for real through torchrun on CPU with gloo, 2 ranks and a tiny model.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpufabric.errors import WorkloadError
from pytest_gpufabric.workloads.runner import run_workload
from pytest_gpufabric.workloads.training import (
    DDP_STEP_SCRIPT,
    TrainingSettings,
    ddp_command,
    run_ddp_training,
    workload_environment,
)

# run_workload appends "--handshake DIR --result FILE": the scripts below read them from sys.argv or ignore them.

#: starts a grandchild that would sleep for 10 minutes, says its pid, and sleeps itself
_SPAWNS_GRANDCHILD = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["GRANDCHILD_PID_FILE"] + ".tmp", "w") as f:
    f.write(str(grandchild.pid))
os.replace(os.environ["GRANDCHILD_PID_FILE"] + ".tmp", os.environ["GRANDCHILD_PID_FILE"])
time.sleep(600)
"""

#: the handshake as ddp_step.py does it (rank 0's side), then a JSON result
_HANDSHAKE_AND_RESULT = """
import json, sys, time
from pathlib import Path
handshake, result = Path(sys.argv[sys.argv.index("--handshake") + 1]), Path(sys.argv[sys.argv.index("--result") + 1])
def wait_for(name):
    while not (handshake / name).exists():
        time.sleep(0.005)
(handshake / "ready").touch()
wait_for("go")
start = time.monotonic()
time.sleep(0.3)  # the measured part
measured = time.monotonic() - start
(handshake / "done").touch()
wait_for("release")
print("measured part over")
result.write_text(json.dumps({"measured_s": measured, "argv": sys.argv[1:]}))
"""

#: reaches the measured part, then dies inside it
_DIES_WHILE_MEASURED = """
import sys, time
from pathlib import Path
handshake = Path(sys.argv[sys.argv.index("--handshake") + 1])
(handshake / "ready").touch()
while not (handshake / "go").exists():
    time.sleep(0.005)
sys.stderr.write("rank 0 lost its GPU in the middle of a step\\n")
sys.exit(7)
"""


def _process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat ('R', 'S', 'Z', ...), or None when the process is gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone between the kill(0) and the read (ESRCH on read)
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def test_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    env = {**os.environ, "GRANDCHILD_PID_FILE": str(pid_file)}
    started = time.monotonic()
    with pytest.raises(WorkloadError, match="timed out after 2 s; the process group was killed") as info:
        run_workload([sys.executable, "-c", _SPAWNS_GRANDCHILD], timeout_s=2, env=env)
    assert time.monotonic() - started < 2 + 5  # SIGTERM was enough: no wait for the SIGKILL grace
    assert info.value.returncode is None
    assert info.value.cmd[-4] == "--handshake" and info.value.cmd[-2] == "--result"
    assert pid_file.is_file(), "the child never started its grandchild: the test proves nothing"
    grandchild = int(pid_file.read_text())
    # killed with the group; the orphan is reaped by PID 1, which may take a moment
    deadline = time.monotonic() + 10
    while _process_state(grandchild) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    state = _process_state(grandchild)
    # gone, or at worst a zombie that this machine's PID 1 has not reaped yet: never still running
    assert state in (None, "Z"), f"grandchild {grandchild} survived the timeout (state {state})"
    if state is None:
        with pytest.raises(ProcessLookupError):
            os.kill(grandchild, 0)


def test_nonzero_exit_carries_the_stderr_tail():
    code = ("import sys; print('to stdout'); "
            "sys.stderr.write('loading\\nRuntimeError: the workload failed on purpose\\n'); sys.exit(3)")
    with pytest.raises(WorkloadError) as info:
        run_workload([sys.executable, "-c", code], timeout_s=30)
    headline, tail = str(info.value).split("\n", 1)
    assert headline.startswith("the workload failed: ") and headline.endswith("(exit 3)")
    # the output tail below the command line: stderr, which is shown when there is any
    assert tail == "loading\nRuntimeError: the workload failed on purpose"
    assert info.value.returncode == 3
    assert info.value.stdout == "to stdout\n"


def test_exit_zero_without_a_result_is_an_error():
    with pytest.raises(WorkloadError, match="wrote no result") as info:
        run_workload([sys.executable, "-c", "print('finished, but forgot the result')"], timeout_s=30)
    assert info.value.returncode == 0
    headline, tail = str(info.value).split("\n", 1)
    assert headline.startswith("the workload wrote no result: ") and headline.endswith("(exit 0)")
    assert tail == "finished, but forgot the result"  # no stderr: the stdout tail is shown


def test_handshake_brackets_the_measured_part():
    events: list[tuple[str, float]] = []
    result = run_workload(
        [sys.executable, "-c", _HANDSHAKE_AND_RESULT], timeout_s=30,
        on_begin=lambda: events.append(("begin", time.monotonic())),
        on_end=lambda: events.append(("end", time.monotonic())),
    )
    assert [name for name, _ in events] == ["begin", "end"]
    window = events[1][1] - events[0][1]
    assert window >= result["measured_s"] >= 0.3
    assert result["argv"][0] == "--handshake" and result["argv"][2] == "--result"
    assert result["stdout_tail"] == "measured part over\n"


def test_workload_dying_mid_measurement_still_ends_it():
    events: list[str] = []
    with pytest.raises(WorkloadError, match="rank 0 lost its GPU") as info:
        run_workload([sys.executable, "-c", _DIES_WHILE_MEASURED], timeout_s=30,
                     on_begin=lambda: events.append("begin"), on_end=lambda: events.append("end"))
    assert events == ["begin", "end"]  # the sampler is stopped even though "done" never came
    assert info.value.returncode == 7


# ---------------------------------------------------------------------------------------------------------
# the DDP training step: torchrun, 2 ranks, gloo on CPU
# ---------------------------------------------------------------------------------------------------------


def test_ddp_command_is_torchrun_standalone():
    settings = TrainingSettings(steps=3, warmup=1, layers=2, width=64, batch=4)
    cmd = ddp_command(2, settings, "gloo")
    line = " ".join(cmd)
    assert cmd[0] == sys.executable
    assert "-m torch.distributed.run" in line
    assert "--standalone" in cmd and "--nproc-per-node=2" in cmd
    assert str(DDP_STEP_SCRIPT) in cmd and DDP_STEP_SCRIPT.is_file()
    assert cmd[cmd.index("--backend") + 1] == "gloo"
    assert [cmd[cmd.index(flag) + 1] for flag in ("--steps", "--warmup", "--layers", "--width", "--batch")] == [
        "3", "1", "2", "64", "4"]


def test_workload_environment_turns_nvls_off_unless_set(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    assert workload_environment()["NCCL_NVLS_ENABLE"] == "0"
    assert workload_environment({"NCCL_P2P_DISABLE": "1"})["NCCL_P2P_DISABLE"] == "1"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    assert workload_environment()["NCCL_NVLS_ENABLE"] == "1"  # a user's own setting is kept


class _RecordingMeasure:
    """A stand-in for NvlinkTraffic: records when it was entered and left."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __enter__(self):
        self.calls.append(("enter", time.monotonic()))
        return self

    def __exit__(self, *exc_info) -> None:
        self.calls.append(("exit", time.monotonic()))


def test_real_ddp_training_on_cpu_with_gloo(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    settings = TrainingSettings(steps=3, warmup=1, layers=2, width=64, batch=4, timeout_s=180)
    measure = _RecordingMeasure()
    began = time.monotonic()
    result = run_ddp_training(2, settings, backend="gloo", measure=measure)
    finished = time.monotonic()

    assert result["workload"] == "ddp_step" and result["backend"] == "gloo"
    assert result["world_size"] == 2
    assert result["steps"] == 3 and result["warmup"] == 1
    assert result["model"] == {"layers": 2, "width": 64, "batch": 4, "dtype": "float32"}
    assert settings.gradient_bytes == 2 * (64 * 64 + 64) * 4 == 33280
    assert result["gradient_bytes"] == settings.gradient_bytes
    assert result["allreduce_bytes_per_rank"] == 2 * (2 - 1) / 2 * settings.gradient_bytes * 3 == 99840.0
    assert len(result["losses"]) == 3 and all(math.isfinite(loss) for loss in result["losses"])
    assert len(result["step_time_s"]["all"]) == 3
    assert result["devices"] == ["cpu"] and result["nccl_version"] is None
    assert result["env"]["NCCL_NVLS_ENABLE"] == "0"  # workload_environment's default reached the ranks
    json.dumps(result)  # what the NVLink suite writes to reports/

    assert [name for name, _ in measure.calls] == ["enter", "exit"]
    (_, entered), (_, left) = measure.calls
    assert began < entered < left < finished
    # torchrun's start-up, the ranks' rendezvous and warm-up come before the handshake
    assert entered - began >= 0.5
    # the measured steps ran inside the window
    assert left - entered >= sum(result["step_time_s"]["all"])


# ---------------------------------------------------------------------------------------------------------
# spare interpreters (runner.SPARES): torch imported ahead of the next workload script
# ---------------------------------------------------------------------------------------------------------


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / name
    path.write_text(body)
    return [sys.executable, str(path)]


#: a workload script: says which process ran it, whether torch was already imported when it began, its argv
_REPORTS_ITSELF = """
import json, os, sys
torch_before = "torch" in sys.modules
result = sys.argv[sys.argv.index("--result") + 1]
print("stdout of", os.getpid())
print("stderr of", os.getpid(), file=sys.stderr)
json.dump({"pid": os.getpid(), "torch_already_imported": torch_before, "name": __name__,
           "path0": sys.path[0], "argv": sys.argv[1:], "env": os.environ.get("SPARE_TEST")}, open(result, "w"))
"""


@pytest.fixture
def spares(monkeypatch):
    from pytest_gpufabric.workloads import runner

    pool = runner.SpareInterpreters()
    pool.enabled = True  # not enable(): no atexit hook from a test; closed below
    monkeypatch.setattr(runner, "SPARES", pool)
    yield pool
    pool.close()


def test_a_spare_runs_the_next_script_with_torch_already_imported(tmp_path, spares):
    cmd = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    env = {**os.environ, "SPARE_TEST": "1"}
    first = run_workload([*cmd, "--flag", "a b"], timeout_s=120, env=env)
    second = run_workload([*cmd, "--flag", "c"], timeout_s=120, env=env)
    assert spares.served == 1  # the first started cold and left a spare; the second ran in it
    assert first["torch_already_imported"] is False and second["torch_already_imported"] is True
    assert second["pid"] != first["pid"]  # a fresh process for every workload all the same
    for result, flag in ((first, "a b"), (second, "c")):
        assert result["name"] == "__main__" and result["path0"] == str(tmp_path)
        assert result["argv"][:2] == ["--flag", flag] and result["env"] == "1"
        assert f"stdout of {result['pid']}" in result["stdout_tail"]


def test_a_script_failing_in_a_spare_fails_as_it_would_cold(tmp_path, spares):
    ok = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    failing = _script(tmp_path, "fails.py", "import sys\nprint('about to fail', file=sys.stderr)\nsys.exit(3)\n")
    run_workload(ok, timeout_s=120)
    with pytest.raises(WorkloadError) as raised:
        run_workload(failing, timeout_s=120)
    assert spares.served == 1
    assert raised.value.returncode == 3 and "about to fail" in str(raised.value)


def test_a_script_exiting_with_a_message_in_a_spare_exits_as_it_would_cold(tmp_path, spares):
    ok = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    failing = _script(tmp_path, "says.py", "import sys\nsys.exit('no GPU to test')\n")
    run_workload(ok, timeout_s=120)
    with pytest.raises(WorkloadError) as raised:
        run_workload(failing, timeout_s=120)
    assert spares.served == 1 and raised.value.returncode == 1 and "no GPU to test" in str(raised.value)


def test_a_spare_ends_without_the_interpreters_teardown(tmp_path, spares):
    """The script's result is written when it returns; the teardown after it (torch's and CUDA's, here an exit
    handler that sleeps 60 s) is not waited for in a spare (whose own torch import, under load, may take 10 s)."""
    ok = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    slow_exit = _script(tmp_path, "slow_exit.py", "import atexit, time\natexit.register(time.sleep, 60)\n"
                        + _REPORTS_ITSELF)
    run_workload(ok, timeout_s=120)
    started = time.monotonic()
    result = run_workload(slow_exit, timeout_s=120)
    assert spares.served == 1 and result["torch_already_imported"] is True
    assert time.monotonic() - started < 30


def test_a_spare_of_another_environment_is_not_used(tmp_path, spares):
    cmd = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    run_workload(cmd, timeout_s=120, env={**os.environ, "SPARE_TEST": "1"})
    other = run_workload(cmd, timeout_s=120, env={**os.environ, "SPARE_TEST": "2"})
    assert spares.served == 0 and other["env"] == "2" and other["torch_already_imported"] is False


def test_spares_are_off_unless_enabled(tmp_path):
    from pytest_gpufabric.workloads import runner

    assert runner.SPARES.enabled is False  # tests and library callers start cold
    result = run_workload(_script(tmp_path, "reports.py", _REPORTS_ITSELF), timeout_s=120)
    assert result["torch_already_imported"] is False


def test_a_spare_serves_the_next_test_whose_pytest_variable_differs(tmp_path, spares):
    """pytest sets PYTEST_CURRENT_TEST per test: the workload of the next test still runs in the spare, with the
    variable as that test has it."""
    cmd = _script(tmp_path, "reports.py", _REPORTS_ITSELF.replace('os.environ.get("SPARE_TEST")',
                                                                  'os.environ.get("PYTEST_CURRENT_TEST")'))
    run_workload(cmd, timeout_s=120, env={**os.environ, "PYTEST_CURRENT_TEST": "first (call)"})
    second = run_workload(cmd, timeout_s=120, env={**os.environ, "PYTEST_CURRENT_TEST": "second (call)"})
    assert spares.served == 1 and second["torch_already_imported"] is True and second["env"] == "second (call)"


def test_a_spare_started_before_the_gpus_were_known_shows_the_workload_its_gpus(tmp_path, spares):
    """The plugin starts its spares before NVML is read (session.prestart_workloads): without CUDA_VISIBLE_DEVICES.
    The workload of the promised boards runs in one all the same, seeing exactly the GPUs its environment names
    (set at the hand-over, before the script's first CUDA call); any other difference still starts it cold."""
    from pytest_gpufabric.workloads import runner

    cmd = _script(tmp_path, "reports.py", _REPORTS_ITSELF.replace('os.environ.get("SPARE_TEST")',
                                                                  'os.environ.get("CUDA_VISIBLE_DEVICES")'))
    before = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    spares.prestart(before, [runner.TORCH_ONLY])
    shown = "GPU-3c06c1f9-3bb3-72e6-9ccb-568b8717d4ea"
    result = run_workload(cmd, timeout_s=120, env={**before, "CUDA_VISIBLE_DEVICES": shown})
    assert spares.served == 1 and result["torch_already_imported"] is True and result["env"] == shown
    other = run_workload(cmd, timeout_s=120, env={**before, "CUDA_VISIBLE_DEVICES": shown, "SPARE_TEST": "2"})
    assert spares.served == 1 and other["torch_already_imported"] is False


def test_spares_of_an_environment_no_workload_has_any_more_are_stopped(spares):
    """The environment changed between the two moments the plugin asks for spares (a plugin or a conftest set a
    variable): the first batch could serve no workload, and is stopped rather than left importing torch beside the
    second."""
    from pytest_gpufabric.workloads import runner

    first = {**os.environ, "SPARE_TEST": "1"}
    spares.prestart(first, [runner.TORCH_ONLY, runner.TORCH_ONLY])
    stale = [spare.process for spare in spares._spares]
    spares.prestart({**os.environ, "SPARE_TEST": "2"}, [runner.TORCH_ONLY])
    assert len(spares._spares) == 1 and spares._spares[0].env["SPARE_TEST"] == "2"
    assert all(process.wait(timeout=30) is not None for process in stale)


def test_a_dist_mode_without_workers_runs_the_workloads_here():
    """pytest-xdist hands tests to workers only with a ``--dist`` mode and workers (``-n``: its ``tx``); ``--dist``
    alone, from an ini's addopts, runs them in this process, which then wants its spares."""
    from types import SimpleNamespace

    from pytest_gpufabric.plugin import runs_workloads_here

    def config(**option):
        return SimpleNamespace(option=SimpleNamespace(**option))

    assert runs_workloads_here(config(dist="loadscope", tx=[])) is True
    assert runs_workloads_here(config(dist="load", tx=["popen", "popen"])) is False  # the controller
    worker = config(dist="load", tx=["popen"])
    worker.workerinput = {"workerid": "gw0"}
    assert runs_workloads_here(worker) is True
    assert runs_workloads_here(config(dist="no", collectonly=True)) is False


def test_prestarted_spares_serve_the_workloads_in_turn(tmp_path, spares):
    cmd = _script(tmp_path, "reports.py", _REPORTS_ITSELF)
    spares.prestart(dict(os.environ), [("torch",)] * 3)
    spares.prestart(dict(os.environ), [("torch",)] * 3)  # asked again: still three
    assert len(spares._spares) == 3
    pids = {spare.process.pid for spare in spares._spares}
    results = [run_workload(cmd, timeout_s=120, env=dict(os.environ)) for _ in range(3)]
    assert {r["pid"] for r in results} == pids and spares.served == 3
    assert all(r["torch_already_imported"] for r in results)
    assert all(r["runner"]["started_in"] == "spare" and r["runner"]["spare_waited_s"] >= 0 for r in results)
    assert len(spares._spares) == 1  # the last one taken: one more for whatever comes next


#: a workload script that says which of the modules the spares may import ahead it found imported
_REPORTS_IMPORTS = """
import json, sys
result = sys.argv[sys.argv.index("--result") + 1]
json.dump({name: name in sys.modules for name in ("torch", "xml.dom.minidom")}, open(result, "w"))
"""


def test_a_workload_gets_the_spare_that_imported_what_it_asked_for(tmp_path, spares):
    """The memory workload asks for torch and torchvision; the others for torch only, whose spare is ready sooner.
    Each takes the spare that imported what it asked for, whatever the order the spares were started in
    (a standard-library module stands in for torchvision)."""
    cmd = _script(tmp_path, "imports.py", _REPORTS_IMPORTS)
    heavy = ("torch", "xml.dom.minidom")
    spares.prestart(dict(os.environ), [heavy, ("torch",)])
    light_run = run_workload(cmd, timeout_s=120, env=dict(os.environ))
    heavy_run = run_workload(cmd, timeout_s=120, env=dict(os.environ), spare_imports=heavy)
    assert light_run["torch"] is True and light_run["xml.dom.minidom"] is False
    assert heavy_run["torch"] is True and heavy_run["xml.dom.minidom"] is True
    # the last spare taken was the heavy one: the one started for the next workload is like it
    assert [spare.imports for spare in spares._spares] == [heavy]
    # none that imported it left: a workload asking for more takes any spare (and imports the rest itself)
    spares.close()
    spares.prestart(dict(os.environ), [("torch",)])
    fallback = run_workload(cmd, timeout_s=120, env=dict(os.environ), spare_imports=heavy)
    assert fallback["torch"] is True and fallback["xml.dom.minidom"] is False
    assert fallback["runner"]["started_in"] == "spare" and spares.served == 3


def test_a_spare_whose_ahead_import_breaks_still_runs_a_script_that_does_not_need_it(tmp_path, spares):
    """A torchvision built for another torch raises RuntimeError on import, not ImportError: the spare carries on
    (an empty name in --imports too), and the workload runs in it as it would cold."""
    (tmp_path / "broken_ahead.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    spares.prestart(env, [("torch", "", "broken_ahead")])
    (spare,) = spares._spares
    result = run_workload(_script(tmp_path, "reports.py", _REPORTS_ITSELF), timeout_s=120, env=env,
                          spare_imports=("torch", "", "broken_ahead"))
    assert result["pid"] == spare.process.pid and result["torch_already_imported"] is True
    assert result["runner"]["started_in"] == "spare" and spares.served == 1


def test_the_registry_asks_for_the_spare_the_memory_workload_asks_for():
    """The spare prestarted for the memory measurement imports what its workload asks for at hand-over: the two
    tuples are written in two modules (kinds/memory.py loads with the plugin, the workload package does not)."""
    from pytest_gpufabric.measurements import REGISTRY
    from pytest_gpufabric.workloads.memory import SPARE_IMPORTS
    from pytest_gpufabric.workloads.runner import TORCH_ONLY

    assert REGISTRY["memory"].spare_imports == SPARE_IMPORTS == ("torch", "torchvision")
    # the arrival state is read in the pytest process (NVML, /dev/kmsg): no workload, no spare
    assert REGISTRY["arrival"].spare_imports == () and REGISTRY["arrival"].processes(4) == 0
    assert all(entry.spare_imports == TORCH_ONLY for name, entry in REGISTRY.items()
               if name not in ("memory", "arrival"))


def test_the_runner_says_where_a_workloads_time_went(tmp_path):
    """Started cold, a workload that marks its measured part: the seconds to its ready and done marks and to its
    exit, in that order (the acceptance-time benchmark's breakdown)."""
    script = _script(tmp_path, "marks.py", """
import json, sys, time
from pathlib import Path
handshake = Path(sys.argv[sys.argv.index("--handshake") + 1])
time.sleep(0.2)
(handshake / "ready").touch()
while not (handshake / "go").exists():
    time.sleep(0.01)
time.sleep(0.3)
(handshake / "done").touch()
while not (handshake / "release").exists():
    time.sleep(0.01)
json.dump({}, open(sys.argv[sys.argv.index("--result") + 1], "w"))
""")
    timing = run_workload(script, timeout_s=120)["runner"]
    assert timing["started_in"] == "cold" and timing["spare_waited_s"] is None
    assert 0.2 <= timing["ready_s"] and timing["ready_s"] + 0.3 <= timing["done_s"] <= timing["exit_s"]


# ---------------------------------------------------------------------------------------------------------
# pinned host memory: cudaHostRegister from 8 threads (workloads/environment.py's FAST_PINNING)
# ---------------------------------------------------------------------------------------------------------

PIN_PROBE = Path(__file__).parent / "data" / "results" / "pin-probe-h100-x1" / "pin_probe.json"


def test_fast_pinning_is_what_the_h100_measured_faster_and_copies_as_fast():
    """The recorded probe (values in its README read off by hand): 8 GiB pinned about 4x faster with the
    settings the workloads get, and the copy from either kind of pinned memory equally fast."""
    from pytest_gpufabric.workloads.environment import FAST_PINNING

    probe = {name: json.loads(run["out"]) for name, run in json.loads(PIN_PROBE.read_text()).items()
             if isinstance(run, dict)}
    assert [round(probe[n]["pin_8gib_s"], 3) for n in ("default", "default2", "register8", "register8b")] == \
        [5.718, 4.71, 1.287, 1.228]
    assert max(probe[n]["pin_8gib_s"] for n in ("register8", "register8b")) * 3 < \
        min(probe[n]["pin_8gib_s"] for n in ("default", "default2"))
    copies = [probe[n]["h2d_8gib_s"] for n in probe]
    assert max(copies) / min(copies) < 1.05
    assert ",".join(f"{k}:{v}" for k, v in FAST_PINNING) == \
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"


@pytest.mark.parametrize(("torch_version", "before", "after"), [
    ("2.11.0+cu130", {}, {"PYTORCH_CUDA_ALLOC_CONF":
                          "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}),
    ("2.11.0+cu130", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,pinned_use_cuda_host_register:True,"
                                 "pinned_num_register_threads:8"}),
    # the newer name, where the user set it, is the one torch reads: the settings join it
    ("2.9.1", {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
     {"PYTORCH_ALLOC_CONF": "expandable_segments:True,pinned_use_cuda_host_register:True,"
                            "pinned_num_register_threads:8"}),
    # spaces and empty items in the user's value are dropped (torch refuses an empty option), lists kept whole
    ("2.11.0", {"PYTORCH_CUDA_ALLOC_CONF": " expandable_segments:True, ,"},
     {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,pinned_use_cuda_host_register:True,"
                                 "pinned_num_register_threads:8"}),
    ("2.11.0", {"PYTORCH_CUDA_ALLOC_CONF": " "},
     {"PYTORCH_CUDA_ALLOC_CONF": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}),
    ("2.11.0", {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2]"},
     {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2],pinned_use_cuda_host_register:True,"
                                 "pinned_num_register_threads:8"}),
    # dev builds read by their major and minor
    ("2.10.0a0+git1234abc", {}, {"PYTORCH_CUDA_ALLOC_CONF":
                                 "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}),
    # the user chose how to pin: left alone
    ("2.11.0", {"PYTORCH_CUDA_ALLOC_CONF": "pinned_num_register_threads:2"},
     {"PYTORCH_CUDA_ALLOC_CONF": "pinned_num_register_threads:2"}),
    # both names set: which one torch reads depends on its version, so neither is touched
    ("2.11.0", {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": ""},
     {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": ""}),
    # a torch without the keys (2.1 and older refuse the whole setting), a ROCm build, no torch, a version unread
    ("2.1.2+cu121", {}, {}), ("2.0.1+cu118", {}, {}), ("2.4.0+rocm6.1", {}, {}), (None, {}, {}),
    ("nightly", {}, {}),
])
def test_fast_pinning_joins_the_users_allocator_settings(torch_version, before, after):
    from pytest_gpufabric.workloads.environment import with_fast_pinning

    env = {"PATH": "/usr/bin", **before}
    with_fast_pinning(env, torch_version)
    assert env == {"PATH": "/usr/bin", **after}


OFFLOAD_PROBE = (Path(__file__).parent / "data" / "results" / "offload-pinning-probe-h100-x1"
                 / "offload_pinning_probe.json")


def test_fast_pinning_left_the_offloading_slowdown_within_its_own_spread():
    """The recorded probe (its README, read by hand): the memory workload alternately without and with FAST_PINNING
    on one H100. Each way's slowdowns fall inside the other's range widened by the step's own spread, and only the
    phase that pins the pool got faster."""
    runs = json.loads(OFFLOAD_PROBE.read_text())["runs"]
    by = {name: [r for r in runs if r["pinning"] == name] for name in ("cudaHostAlloc", "cudaHostRegister x8")}
    small = {name: [round(r["lms"][0]["ratio_vs_baseline"], 3) for r in rs] for name, rs in by.items()}
    assert small == {"cudaHostAlloc": [3.787, 2.838, 3.663], "cudaHostRegister x8": [3.61, 3.473, 3.816]}
    assert min(small["cudaHostAlloc"]) < min(small["cudaHostRegister x8"]) < max(small["cudaHostAlloc"])
    phase = {name: [r["phase_seconds"]["offload >= 8388608 B at 0.0"] for r in rs] for name, rs in by.items()}
    assert max(phase["cudaHostRegister x8"]) < 3.0 < 6.0 < min(phase["cudaHostAlloc"])
    assert all(r["alloc_conf"] is None for r in by["cudaHostAlloc"])
    assert {r["alloc_conf"] for r in by["cudaHostRegister x8"]} == {
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"}


def test_every_promised_workload_gets_a_spare_before_the_first_measurement(pytester, monkeypatch):
    """The plugin hands prestart the fixtures every collected test sets up, the measurements the one diagnostics
    suite asks for by name included (it asked for none of them once: HBM, memory pattern, power hold and PCIe load
    each started cold, about 5 s each on an H200), so each measurement the profile promises gets its interpreter."""
    from pytest_gpufabric.measurements import REGISTRY
    from pytest_gpufabric.profile.loader import load_profile
    from pytest_gpufabric.session import FabricSession

    asked: list[set[str]] = []
    monkeypatch.setattr(FabricSession, "prestart_workloads",
                        lambda self, fixtures, spares=True: asked.append(fixtures))
    profile = load_profile("h100-sxm-x1")
    promised = {entry.fixture for entry in REGISTRY.values()
                if entry.needs_machine and entry.asked is None and not entry.why_not_promised(profile)}
    assert {"bandwidth", "hbm_bandwidth", "memory_pattern", "power_hold", "pcie_load"} <= promised
    # as soon as the profile is read (pytest_configure), for everything promised (the first workload waits less
    # for its spare's import); after collection, for what the collected tests ask for
    pytester.runpytest("-p", "no:cacheprovider", "--gpu-profile", "h100-sxm-x1", "-q")
    assert len(asked) == 2 and promised <= asked[0] and promised <= asked[1], promised - asked[1]
    asked.clear()
    pytester.runpytest("-p", "no:cacheprovider", "--gpu-profile", "h100-sxm-x1", "-q", "-k", "hbm")
    assert len(asked) == 2 and promised <= asked[0] and asked[1] & promised == {"hbm_bandwidth"}


@pytest.mark.parametrize("option", ["--help", "--collect-only", "--fixtures", "--markers", None])
def test_no_spare_is_started_by_a_run_that_runs_no_test(pytester, monkeypatch, option):
    """Spares import torch (seconds of CPU and a few hundred MB each): a command that runs no test starts none; a
    run (None: the control) starts them as soon as the profile is read, before NVML is read (the machine here: the
    recorded 1x H100, its bundle standing in for NVML; the driver is taken as loaded; the spares are noted, and a
    process that waits on its stdin stands in for each)."""
    from pytest_gpufabric.fabric.bundle import load_bundle
    from pytest_gpufabric.session import FabricSession
    from pytest_gpufabric.workloads import environment, runner

    machine = load_bundle(Path(__file__).parent / "data" / "bundles" / "h100-sxm-x1-acceptance")
    read: list = []

    def discover(self):
        read.append(len(spawned))  # spares asked for by the time the machine is first read
        self._discovered, self._discovery_error, self._fabric = True, None, machine

    spawned: list = []
    configured: list = []
    monkeypatch.setattr(FabricSession, "discover", discover)
    monkeypatch.setattr(environment, "nvidia_driver_loaded", lambda: True)

    def spawn(self, env, imports):
        spawned.append(tuple(imports))
        waiting = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                   text=True, start_new_session=True)
        return runner._Spare(waiting, env, tuple(imports), time.monotonic())

    monkeypatch.setattr(runner.SpareInterpreters, "_spawn", spawn)
    monkeypatch.setattr(runner.SPARES, "_spares", [])
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # a spare for each promised workload (runner.spare_count)

    class Probe:
        def pytest_sessionstart(self):
            configured.append(len(spawned))  # spares asked for by then: pytest_configure's

    selection = [option] if option else ["-k", "none"]
    pytester.runpytest("-p", "no:cacheprovider", "--gpu-profile", "h100-sxm-x1", *selection, plugins=[Probe()])
    if option is None:
        assert configured and configured[0] >= 5 and spawned.count(("torch",)) >= 5, spawned
        assert read and read[0] == configured[0]  # all of them before the first NVML read
    else:
        assert spawned == []
