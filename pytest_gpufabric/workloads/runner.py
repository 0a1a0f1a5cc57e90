"""Run a workload in a child process group: a timeout kills the whole group, the result comes back as JSON.

A workload may mark the part of its run that is to be measured (after start-up and warm-up): it writes
``ready`` into its handshake directory and waits for ``go``; when the measured part is over it writes ``done``
and waits for ``release``. The runner calls ``on_begin``/``on_end`` at those points, so a sampler in the
pytest process can bracket exactly the measured steps.

Live acceptance runs keep spare interpreters (spare.py) with torch imported for the next workload scripts, started
before the first measurement: ``SPARES.prestart(env, imports)``. Off by default, so a test's run_workload starts cold.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import WorkloadError

_POLL_S = 0.01
_GRACE_S = 5.0


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM to the whole session (torchrun and every rank), then SIGKILL what is left."""
    for sig, wait_s in ((signal.SIGTERM, _GRACE_S), (signal.SIGKILL, _GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _start_time(env: dict[str, str] | None) -> dict[str, str] | None:
    """What of an environment a spare must have had from its start: all of it but pytest's PYTEST_CURRENT_TEST,
    which changes with every test (the spare sets it, with the rest, before the script runs)."""
    return None if env is None else {k: v for k, v in env.items() if not k.startswith("PYTEST_")}


TORCH_ONLY = ("torch",)  # what a spare imports ahead unless a workload asks for more (spare.py)


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
        spares already waiting count (asked twice, still as many)."""
        self.enable()
        waiting = [spare.imports for spare in self._spares if _start_time(spare.env) == _start_time(env)]
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
        if not self._spares:
            self._spares.append(self._spawn(env, imports))
        return started


SPARES = SpareInterpreters()


def run_workload(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_begin: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
    spare_imports: tuple[str, ...] = TORCH_ONLY,
) -> dict:
    """Run ``cmd + ["--handshake", DIR, "--result", FILE]``; return the JSON the workload wrote to FILE, with
    ``runner`` added: where its wall time went (``started_in``: "spare" or "cold"; ``spare_waited_s``: how long
    before the hand-over that spare was started, its imports included, which take about 5 s on an H100 (one
    handed over sooner finishes them first); seconds from the hand-over to the workload's
    ``ready``, to its ``done`` and to its exit; None for a mark the workload does not write). The acceptance-time
    benchmark reads these to tell a workload's start-up from its measuring.

    ``spare_imports``: the modules the script needs that a spare can import ahead (SpareInterpreters).

    Raises WorkloadError (command, exit code, output tail) on a non-zero exit, a timeout (after killing the
    process group) or a missing result.
    """
    with tempfile.TemporaryDirectory(prefix="gpufabric-workload-") as tmp:
        handshake = Path(tmp)
        result_file = handshake / "result.json"
        full_cmd = [*cmd, "--handshake", str(handshake), "--result", str(result_file)]
        out_path, err_path = handshake / "stdout.txt", handshake / "stderr.txt"
        began = ended = False
        with open(out_path, "w") as out, open(err_path, "w") as err:
            started = time.monotonic()
            from_spare = SPARES.start(full_cmd, env, out_path, err_path, spare_imports)
            process = from_spare[0] if from_spare else subprocess.Popen(
                full_cmd, stdout=out, stderr=err, env=env, start_new_session=True)
            timing = {"started_in": "spare" if from_spare else "cold",
                      "spare_waited_s": round(from_spare[1], 3) if from_spare else None,
                      "ready_s": None, "done_s": None, "exit_s": None}
            deadline = started + timeout_s
            try:
                while process.poll() is None:
                    if time.monotonic() > deadline:
                        _kill_group(process)
                        raise WorkloadError(full_cmd, None, out_path.read_text(), err_path.read_text(),
                                            f"timed out after {timeout_s:.0f} s; the process group was killed")
                    if not began and (handshake / "ready").exists():
                        timing["ready_s"] = round(time.monotonic() - started, 3)
                        if on_begin:
                            on_begin()
                        began = True  # only once the measurement really began: only then is it ended
                        (handshake / "go").touch()
                    if began and not ended and (handshake / "done").exists():
                        timing["done_s"] = round(time.monotonic() - started, 3)
                        ended = True
                        if on_end:
                            on_end()
                        (handshake / "release").touch()
                    time.sleep(_POLL_S)
            except BaseException:
                _kill_group(process)
                if began and not ended and on_end:
                    ended = True
                    try:
                        on_end()
                    except Exception:
                        pass  # the error that stopped the run is the one to report
                raise
            timing["exit_s"] = round(time.monotonic() - started, 3)
            if began and not ended and on_end:
                on_end()  # the workload exited mid-measurement: stop the sampler all the same
        stdout, stderr = out_path.read_text(), err_path.read_text()
        failures = {path.stem.removeprefix("failure-rank"): path.read_text(errors="replace").strip()
                    for path in handshake.glob("failure-rank*.txt")}
        if process.returncode != 0:
            raise WorkloadError(full_cmd, process.returncode, stdout, stderr, "the workload failed", failures)
        if not result_file.is_file():
            raise WorkloadError(full_cmd, process.returncode, stdout, stderr, "the workload wrote no result", failures)
        result = json.loads(result_file.read_text())
        result["stdout_tail"] = stdout[-4000:]
        result["runner"] = timing
        return result
