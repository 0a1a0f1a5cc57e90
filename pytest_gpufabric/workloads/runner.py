"""Run a workload in a child process group: a timeout kills the whole group, the result comes back as JSON.

A workload may mark the part of its run that is to be measured (after start-up and warm-up): it writes
``ready`` into its handshake directory and waits for ``go``; when the measured part is over it writes ``done``
and waits for ``release``. The runner calls ``on_begin``/``on_end`` at those points, so a sampler in the
pytest process can bracket exactly the measured steps.

Several processes can be one workload: a torch.distributed job (``run_ranks``: one rank per GPU, rank 0 speaks for
all, as torchrun starts them but without torchrun) or a worker per GPU (``run_workers``: each its own handshake
directory, let go together or round by round). Every process of a group is started before any is waited for, a
failure or a timeout stops them all, and the runner records when each started, was ready, let go, done and exited.

Live acceptance runs keep spare interpreters (spare.py) with torch imported for the next workload scripts, started
before the first measurement: ``SPARES.prestart(env, imports)``, one per process the run's measurements will start.
Off by default, so a test's run_workload starts cold.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import WorkloadError

_POLL_S = 0.01
_GRACE_S = 5.0


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM to the whole session (torchrun and every rank), then SIGKILL what is left."""
    _kill_groups([process])


def _kill_groups(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to each process's whole session, then SIGKILL what is left after the grace time (one grace for all)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for process in processes:
            try:
                os.killpg(process.pid, sig)
                alive.append(process)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + _GRACE_S
        for process in alive:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
        processes = [process for process in alive if process.poll() is None]
        if not processes:
            return


#: the variables a launcher sets per rank (torchrun's, which torch.distributed reads); a spare started before them
#: serves a rank all the same: they are set when it is handed its script (spare.py), before torch reads them
#: (OMP_NUM_THREADS, read by OpenMP when torch is imported, ranks.init_distributed applies again)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "OMP_NUM_THREADS")


#: set when a spare is handed its script, before the script runs: a rank's variables, and which GPUs CUDA shows (read
#: by CUDA's initialisation at the script's first CUDA call, not by ``import torch``; the script then maps each CUDA
#: device to its board by UUID before it measures, identity.py, so a device it was not meant to see is caught)
HAND_OVER_VARIABLES = (*RANK_VARIABLES, "CUDA_VISIBLE_DEVICES")


def _start_time(env: dict[str, str] | None) -> dict[str, str] | None:
    """What of an environment a spare must have had from its start: all of it but pytest's PYTEST_CURRENT_TEST,
    which changes with every test, and HAND_OVER_VARIABLES (the spare sets them, with the rest, before the script
    runs)."""
    return None if env is None else {k: v for k, v in env.items()
                                     if not k.startswith("PYTEST_") and k not in HAND_OVER_VARIABLES}


TORCH_ONLY = ("torch",)  # what a spare imports ahead unless a workload asks for more (spare.py)
NO_SPARE = None  # a workload's spare_imports when it imports nothing a spare holds: it starts at once, cold


@dataclass
class _Spare:
    process: subprocess.Popen
    env: dict[str, str] | None
    imports: tuple[str, ...]
    spawned: float  # time.monotonic() at its start


class SpareInterpreters:
    """Spare interpreters (spare.py) for the next ``python SCRIPT.py`` workloads with the same environment; a
    workload whose environment differs, or that is not a Python script, starts cold.

    ``prestart(env, imports)`` starts one spare per entry of ``imports`` (the modules it imports ahead) before the
    run's first measurement, so that they import in parallel rather than one by one between measurements. Those
    imports overlap the first workloads: a torch import takes about 5 s on an H100 and one with torchvision 14 s
    (tests/data/results/pin-probe-h100-x1/), on cores the workloads leave idle (they drive the GPU from one
    thread); the spreads docs/margins.md quotes were measured with them, not compared against runs without. A
    workload takes a spare that imported what it asked for (``spare_imports``), else any spare of its
    environment (the script imports the rest itself). When the last is taken, one more is started for the next
    workload (the burn-in's chunks)."""

    SCRIPT = Path(__file__).with_name("spare.py")

    def __init__(self) -> None:
        self.enabled = False
        self.served = 0  # workloads a spare ran: for tests and the acceptance-time benchmark
        self._spares: list[_Spare] = []
        self._lock = threading.Lock()  # a measurement may run alongside another (session.py): two takers at once

    def enable(self) -> None:
        if not self.enabled:
            self.enabled = True
            atexit.register(self.close)

    def disable(self) -> None:
        """The run that wanted spares is over: stop them, and let later callers (tests run in-process, library
        callers) start cold again."""
        self.enabled = False
        self.close()

    def close(self) -> None:
        """Stop the waiting spares: they have no work, so they are not waited for."""
        spares, self._spares = self._spares, []
        for spare in spares:
            try:
                spare.process.stdin.close()
            except OSError:
                pass
            _kill_group(spare.process)

    def prestart(self, env: dict[str, str] | None, imports: list[tuple[str, ...]]) -> None:
        """Have a spare for ``env`` starting now for each entry of ``imports`` (the modules it imports ahead); the
        spares already waiting count (asked twice, still as many). Spares of another environment (it changed since
        they were asked for) are stopped: no workload of this run could take them."""
        self.enable()
        with self._lock:
            for spare in [s for s in self._spares if _start_time(s.env) != _start_time(env)]:
                self._spares.remove(spare)
                _kill_group(spare.process)
        waiting = [spare.imports for spare in self._spares]
        for wanted in imports:
            if wanted in waiting:
                waiting.remove(wanted)
            else:
                self._spares.append(self._spawn(env, wanted))

    def _spawn(self, env: dict[str, str] | None, imports: tuple[str, ...]) -> _Spare:
        process = subprocess.Popen([sys.executable, str(self.SCRIPT), "--imports", ",".join(imports)],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env, text=True, start_new_session=True)
        return _Spare(process, env, tuple(imports), time.monotonic())

    def _usable(self, cmd: list[str]) -> bool:
        return self.enabled and len(cmd) >= 2 and cmd[0] == sys.executable and cmd[1].endswith(".py")

    def _hand_over(self, spare: _Spare, cmd: list[str], env: dict[str, str] | None, stdout: Path,
                   stderr: Path) -> bool:
        try:
            request = {"argv": cmd[1:], "stdout": str(stdout), "stderr": str(stderr), "env": env}
            spare.process.stdin.write(json.dumps(request) + "\n")
            spare.process.stdin.close()
        except OSError:  # it died (a broken installation): the workload starts cold and says why
            _kill_group(spare.process)
            return False
        self.served += 1
        return True

    def _pick(self, env: dict[str, str] | None, imports: tuple[str, ...]) -> _Spare | None:
        """The waiting spare of ``env`` that imported ``imports`` (else any of ``env``), taken out of the pool;
        spares of another environment, or that died, are stopped on the way."""
        with self._lock:
            return self._take(env, imports)

    def _take(self, env: dict[str, str] | None, imports: tuple[str, ...]) -> _Spare | None:
        for spare in list(self._spares):
            if _start_time(spare.env) != _start_time(env) or spare.process.poll() is not None:
                self._spares.remove(spare)
                _kill_group(spare.process)
        chosen = (next((s for s in self._spares if s.imports == imports), None)
                  or next((s for s in self._spares if set(imports) <= set(s.imports)), None)
                  or (self._spares[0] if self._spares else None))
        if chosen is not None:
            self._spares.remove(chosen)
        return chosen

    def start(self, cmd: list[str], env: dict[str, str] | None, stdout: Path, stderr: Path,
              imports: tuple[str, ...] = TORCH_ONLY) -> tuple[subprocess.Popen, float] | None:
        """The workload, run by a waiting spare of its environment, with how long ago that spare was started
        (None: start it cold); when none is left, one importing what this workload asked for is started for the
        next (the burn-in repeats its own chunks)."""
        if not self._usable(cmd):
            return None
        started = None
        while started is None and (spare := self._pick(env, imports)) is not None:
            if self._hand_over(spare, cmd, env, stdout, stderr):
                started = (spare.process, time.monotonic() - spare.spawned)
        with self._lock:
            if not self._spares:
                self._spares.append(self._spawn(env, imports))
        return started


SPARES = SpareInterpreters()

#: spare interpreters started ahead at most (each holds torch: a few hundred MB of host memory). A 4-GPU acceptance
#: wants 20: the collectives' and the NVLink step's ranks and the HBM and PCIe tests' workers, a process per GPU
#: each, and one for the copies and each other measurement; an 8-GPU one 36
MAX_SPARES = 40


def spare_count(wanted: int) -> int:
    """How many spare interpreters to start ahead for ``wanted`` workload processes: one each, as far as half the
    cores allow (each imports torch at the same time; a 2-core CI machine gets one) and at most MAX_SPARES."""
    return max(1, min(wanted, MAX_SPARES, (os.cpu_count() or 2) // 2))


def run_workload(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_begin: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
    spare_imports: tuple[str, ...] | None = TORCH_ONLY,
) -> dict:
    """Run ``cmd + ["--handshake", DIR, "--result", FILE]``; return the JSON the workload wrote to FILE, with
    ``runner`` added: where its wall time went (``started_in``: "spare" or "cold"; ``spare_waited_s``: how long
    before the hand-over that spare was started, its imports included, which take about 5 s on an H100 (one
    handed over sooner finishes them first); seconds from the hand-over to the workload's
    ``ready``, to its ``done`` and to its exit; None for a mark the workload does not write). The acceptance-time
    benchmark reads these to tell a workload's start-up from its measuring.

    ``spare_imports``: the modules the script needs that a spare can import ahead (SpareInterpreters); NO_SPARE: it
    needs none, and starts at once rather than in a spare still importing torch.

    Raises WorkloadError (command, exit code, output tail) on a non-zero exit, a timeout (after killing the
    process group) or a missing result.
    """
    with tempfile.TemporaryDirectory(prefix="gpufabric-workload-") as tmp:
        group = _Group([_Member.make(cmd, env, Path(tmp))], timeout_s, spare_imports)
        timing = group.run(on_begin=on_begin, on_end=on_end)
        result = group.result(group.members[0])
        result["runner"] = {key: timing["workers"][0][key] for key in ("started_in", "spare_waited_s")} | {
            key: timing[key] for key in ("ready_s", "done_s", "exit_s")}
        return result


def run_ranks(
    cmd: list[str],
    nprocs: int,
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_begin: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
    spare_imports: tuple[str, ...] = TORCH_ONLY,
) -> dict:
    """A torch.distributed job of ``nprocs`` ranks on this machine, started as torchrun --standalone starts it but
    without torchrun: each rank is ``cmd`` (a Python script, rank 0 of which writes the result and speaks the
    handshake for all) with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, and
    OMP_NUM_THREADS=1 unless ``env`` sets it (torchrun's default for more than one rank). Every rank is started
    before any is waited for, each in a spare interpreter where one is waiting (torch imported: torchrun's own
    start and each rank's import of torch, about 5 s each on an H100, are gone); a rank that fails stops the
    others, as torchrun does. Returns rank 0's result with ``runner`` (the job's timing, ``workers``: each rank's
    start). Raises WorkloadError as run_workload does, with each failing rank's own last error lines."""
    base = dict(os.environ if env is None else env)
    rank_env = {"WORLD_SIZE": str(nprocs), "LOCAL_WORLD_SIZE": str(nprocs), "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    if nprocs > 1:
        rank_env["OMP_NUM_THREADS"] = base.get("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="gpufabric-workload-") as tmp:
        channel = Path(tmp)
        members = [_Member.make(cmd, {**base, **rank_env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, channel,
                                f"rank{rank}-") for rank in range(nprocs)]
        group = _Group(members, timeout_s, spare_imports)
        timing = group.run(on_begin=on_begin, on_end=on_end)
        result = group.result(members[0])
        result["runner"] = _summary(timing)
        return result


def run_workers(
    cmds: list[list[str]],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    rounds: list[list[int]] | None = None,
    on_begin: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
    spare_imports: tuple[str, ...] = TORCH_ONLY,
) -> tuple[list[dict], dict]:
    """One process per command (a GPU's worker), every one started before any is waited for; each does its set-up,
    writes ``ready`` and waits. When all are ready (``on_begin``), ``rounds`` (lists of positions in ``cmds``;
    default: one round of all) are let go one after another: the workers of a round measure at once, and the next
    round goes once each of them wrote ``done``. Returns each worker's result in the order of ``cmds`` and the
    group's timing (``workers``: each one's start, ready, go, done and exit). A worker that fails stops the others;
    raises WorkloadError as run_workload does."""
    rounds = [list(range(len(cmds)))] if rounds is None else [list(r) for r in rounds]
    if sorted(i for r in rounds for i in r) != list(range(len(cmds))):
        raise ValueError(f"rounds {rounds} do not name each of the {len(cmds)} workers once")
    with tempfile.TemporaryDirectory(prefix="gpufabric-workload-") as tmp:
        members = []
        for number, cmd in enumerate(cmds):
            channel = Path(tmp) / f"worker{number}"
            channel.mkdir()
            members.append(_Member.make(cmd, env, channel))
        group = _Group(members, timeout_s, spare_imports, rounds=[[members[i].channel for i in r] for r in rounds])
        timing = group.run(on_begin=on_begin, on_end=on_end)
        return [group.result(member) for member in members], _summary(timing)


def _free_port() -> int:
    """A TCP port free on this machine now, for rank 0's store (torchrun --standalone picks its own so)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _summary(timing: dict) -> dict:
    """A group's timing as run_workload's ``runner`` reads (started_in: "spare", "cold" or "3 of 4 in spares"; the
    longest spare wait), with each process's own under ``workers``."""
    workers = timing["workers"]
    in_spares = sum(w["started_in"] == "spare" for w in workers)
    waits = [w["spare_waited_s"] for w in workers if w["spare_waited_s"] is not None]
    started_in = ("spare" if in_spares == len(workers) else "cold" if not in_spares
                  else f"{in_spares} of {len(workers)} in spares")
    return {"started_in": started_in, "spare_waited_s": max(waits) if waits else None,
            **{key: timing[key] for key in ("ready_s", "done_s", "exit_s")}, "workers": workers}


@dataclass
class _Member:
    """One process of a group: its whole command (--handshake, --result appended), environment, the handshake
    directory it speaks in (a job's ranks share rank 0's) and its output files."""

    cmd: list[str]
    env: dict[str, str] | None
    channel: Path
    result_file: Path
    out: Path
    err: Path
    process: subprocess.Popen | None = None
    timing: dict = field(default_factory=dict)
    exit_s: float | None = None  # when the runner saw it exit, from the group's start

    @classmethod
    def make(cls, cmd: list[str], env: dict[str, str] | None, channel: Path, prefix: str = "") -> _Member:
        """``prefix`` names its output files apart from the other processes of its directory (a job's ranks)."""
        result_file = channel / "result.json"
        return cls([*cmd, "--handshake", str(channel), "--result", str(result_file)], env, channel, result_file,
                   channel / f"{prefix}stdout.txt", channel / f"{prefix}stderr.txt")


class _Group:
    """Processes started together, then driven through the handshake (runner's module docstring): ready from every
    handshake directory, ``on_begin``, go / done round by round, ``on_end``, release. Kills every process group on a
    timeout, a failure or an interruption."""

    def __init__(self, members: list[_Member], timeout_s: float, spare_imports: tuple[str, ...] | None,
                 rounds: list[list[Path]] | None = None) -> None:
        self.members, self.timeout_s, self.spare_imports = members, timeout_s, spare_imports
        self.channels = list(dict.fromkeys(member.channel for member in members))
        self.rounds = rounds or [self.channels]
        self.marks: dict[Path, dict[str, float]] = {channel: {} for channel in self.channels}

    def _start(self, member: _Member, since: float) -> None:
        with open(member.out, "a") as out, open(member.err, "a") as err:
            from_spare = (None if self.spare_imports is NO_SPARE
                          else SPARES.start(member.cmd, member.env, member.out, member.err, self.spare_imports))
            member.process = from_spare[0] if from_spare else subprocess.Popen(
                member.cmd, stdout=out, stderr=err, env=member.env, start_new_session=True)
        member.timing = {"started_in": "spare" if from_spare else "cold",
                         "spare_waited_s": round(from_spare[1], 3) if from_spare else None,
                         "started_s": round(time.monotonic() - since, 3)}

    def _note_exits(self, since: float) -> None:
        for member in self.members:
            if member.exit_s is None and member.process.poll() is not None:
                member.exit_s = round(time.monotonic() - since, 3)

    def _exited(self, channel: Path) -> bool:
        return all(m.process.poll() is not None for m in self.members if m.channel == channel)

    def _seen(self, channel: Path, mark: str, since: float) -> bool:
        """Whether ``mark`` (ready, done) is in the directory, noting when it was first seen."""
        marks = self.marks[channel]
        if mark not in marks and (channel / mark).exists():
            marks[mark] = round(time.monotonic() - since, 3)
        return mark in marks

    def _say(self, channels: list[Path], mark: str, since: float) -> None:
        """``mark`` (go, release) to every directory of a round at once: one time for all of them."""
        said = round(time.monotonic() - since, 3)
        for channel in channels:
            self.marks[channel][mark] = said
            (channel / mark).touch()

    def run(self, on_begin: Callable[[], None] | None, on_end: Callable[[], None] | None) -> dict:
        started = time.monotonic()
        timing: dict = {"ready_s": None, "done_s": None, "exit_s": None}
        began = ended = False
        waiting = list(self.rounds)  # the rounds not yet let go; the first of them runs once began
        try:
            for member in self.members:  # every process is started before any is waited for
                self._start(member, started)
            while True:
                self._note_exits(started)
                failed = next((m for m in self.members if m.process.poll() not in (None, 0)), None)
                if failed is not None or all(m.process.poll() is not None for m in self.members):
                    break
                if time.monotonic() > started + self.timeout_s:
                    _kill_groups([m.process for m in self.members])
                    first = self.members[0]
                    raise WorkloadError(first.cmd, None, _read(first.out), _read(first.err),
                                        f"timed out after {self.timeout_s:.0f} s; the process group was killed")
                if not began and all(self._seen(c, "ready", started) or self._exited(c) for c in self.channels) \
                        and any("ready" in self.marks[c] for c in self.channels):
                    timing["ready_s"] = round(time.monotonic() - started, 3)
                    if on_begin:
                        on_begin()
                    began = True  # only once the measurement really began: only then is it ended
                    self._say(waiting[0], "go", started)
                if began and waiting and all(self._seen(c, "done", started) or self._exited(c) for c in waiting[0]):
                    finished = waiting.pop(0)
                    if not waiting:
                        timing["done_s"] = round(time.monotonic() - started, 3)
                        ended = True
                        if on_end:
                            on_end()
                    self._say(finished, "release", started)
                    if waiting:
                        self._say(waiting[0], "go", started)
                time.sleep(_POLL_S)
        except BaseException:
            _kill_groups([m.process for m in self.members if m.process is not None])
            if began and not ended and on_end:
                ended = True
                try:
                    on_end()
                except Exception:
                    pass  # the error that stopped the run is the one to report
            raise
        if failed is not None:  # a failed rank or worker stops the others
            _kill_groups([m.process for m in self.members if m.process.poll() is None])
        self._note_exits(started)
        timing["exit_s"] = round(time.monotonic() - started, 3)
        if began and not ended and on_end:
            on_end()  # the workload exited mid-measurement: stop the sampler all the same
        for member in self.members:  # seconds from the group's start, as the runner saw them
            marks = self.marks[member.channel]
            member.timing.update(ready_s=marks.get("ready"), go_s=marks.get("go"), done_s=marks.get("done"),
                                 exit_s=member.exit_s)
        timing["workers"] = [member.timing for member in self.members]
        if failed is not None:
            raise WorkloadError(failed.cmd, failed.process.returncode, _read(failed.out), _read(failed.err),
                                "the workload failed", self._failures(failed))
        return timing

    def _failures(self, member: _Member) -> dict[str, str]:
        """Each failing rank's own last error lines (handshake.reporting_failure), from the member's directory."""
        return {path.stem.removeprefix("failure-rank"): path.read_text(errors="replace").strip()
                for path in member.channel.glob("failure-rank*.txt")}

    def result(self, member: _Member) -> dict:
        """The JSON ``member`` wrote, with its ``stdout_tail``; WorkloadError when it wrote none."""
        stdout = _read(member.out)
        if not member.result_file.is_file():
            raise WorkloadError(member.cmd, member.process.returncode, stdout, _read(member.err),
                                "the workload wrote no result", self._failures(member))
        result = json.loads(member.result_file.read_text())
        result["stdout_tail"] = stdout[-4000:]
        return result


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
