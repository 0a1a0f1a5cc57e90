"""Run a workload in a child process group: a timeout kills the whole group, the result comes back as JSON.

A workload may mark the part of its run that is to be measured (after start-up and warm-up): it writes
``ready`` into its handshake directory and waits for ``go``; when the measured part is over it writes ``done``
and waits for ``release``. The runner calls ``on_begin``/``on_end`` at those points, so a sampler in the
pytest process can bracket exactly the measured steps.

Live acceptance runs keep spare interpreters (spare.py) with torch imported for the next workload scripts, started
before the first measurement: ``SPARES.prestart(env, count)``. Off by default, so a test's run_workload starts cold.
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


class SpareInterpreters:
    """Spare interpreters (spare.py) for the next ``python SCRIPT.py`` workloads with the same environment; a
    workload whose environment differs, or that is not a Python script, starts cold.

    ``prestart(env, count)`` starts as many as the run will use before its first measurement: they import in
    parallel then, not while a measurement runs. When the last is taken, one more is started for the next (the
    burn-in's chunks), so at most one import ever overlaps a running workload."""

    SCRIPT = Path(__file__).with_name("spare.py")

    def __init__(self) -> None:
        self.enabled = False
        self.served = 0  # workloads a spare ran: for tests and the acceptance-time benchmark
        self._spares: list[tuple[subprocess.Popen, dict | None]] = []

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
        for process, _ in spares:
            try:
                process.stdin.close()
            except OSError:
                pass
            _kill_group(process)

    def prestart(self, env: dict[str, str] | None, count: int = 1) -> None:
        """Have ``count`` spares for ``env`` starting now (the run's first workload then starts warm too)."""
        self.enable()
        ready = sum(1 for _, spare_env in self._spares if _start_time(spare_env) == _start_time(env))
        # the first is light (torch only): the first workload takes it, and it is ready sooner
        self._spares += [(self._spawn(env, light=ready + n == 0), env) for n in range(count - ready)]

    def _spawn(self, env: dict[str, str] | None, light: bool = False) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(self.SCRIPT), *(["--light"] if light else [])],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                text=True, start_new_session=True)

    def _usable(self, cmd: list[str]) -> bool:
        return self.enabled and len(cmd) >= 2 and cmd[0] == sys.executable and cmd[1].endswith(".py")

    def _hand_over(self, spare: subprocess.Popen, cmd: list[str], env: dict[str, str] | None, stdout: Path,
                   stderr: Path) -> bool:
        try:
            request = {"argv": cmd[1:], "stdout": str(stdout), "stderr": str(stderr), "env": env}
            spare.stdin.write(json.dumps(request) + "\n")
            spare.stdin.close()
        except OSError:  # it died (a broken installation): the workload starts cold and says why
            _kill_group(spare)
            return False
        self.served += 1
        return True

    def start(self, cmd: list[str], env: dict[str, str] | None, stdout: Path, stderr: Path) -> subprocess.Popen | None:
        """The workload, run by a waiting spare of its environment (None: start it cold); spares of another
        environment are stopped, and when none is left one is started for the next workload."""
        if not self._usable(cmd):
            return None
        process = None
        while self._spares and process is None:
            spare, spare_env = self._spares.pop(0)
            if _start_time(spare_env) == _start_time(env) and spare.poll() is None:
                process = spare if self._hand_over(spare, cmd, env, stdout, stderr) else None
            else:
                _kill_group(spare)
        if not self._spares:
            self._spares.append((self._spawn(env), env))
        return process


SPARES = SpareInterpreters()


def run_workload(
    cmd: list[str],
    *,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_begin: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> dict:
    """Run ``cmd + ["--handshake", DIR, "--result", FILE]``; return the JSON the workload wrote to FILE.

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
            process = SPARES.start(full_cmd, env, out_path, err_path) or subprocess.Popen(
                full_cmd, stdout=out, stderr=err, env=env, start_new_session=True)
            deadline = time.monotonic() + timeout_s
            try:
                while process.poll() is None:
                    if time.monotonic() > deadline:
                        _kill_group(process)
                        raise WorkloadError(full_cmd, None, out_path.read_text(), err_path.read_text(),
                                            f"timed out after {timeout_s:.0f} s; the process group was killed")
                    if not began and (handshake / "ready").exists():
                        if on_begin:
                            on_begin()
                        began = True  # only once the measurement really began: only then is it ended
                        (handshake / "go").touch()
                    if began and not ended and (handshake / "done").exists():
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
        return result
