"""Run a workload in a child process group: a timeout kills the whole group, the result comes back as JSON.

A workload may mark the part of its run that is to be measured (after start-up and warm-up): it writes
``ready`` into its handshake directory and waits for ``go``; when the measured part is over it writes ``done``
and waits for ``release``. The runner calls ``on_begin``/``on_end`` at those points, so a sampler in the
pytest process can bracket exactly the measured steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
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
            process = subprocess.Popen(full_cmd, stdout=out, stderr=err, env=env, start_new_session=True)
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
