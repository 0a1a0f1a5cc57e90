"""One hierarchy for everything that can go wrong, sorted by who must act on it.

- ``ProfileError``, ``BundleError``: the user's input is wrong; pytest turns these into a usage error (exit 4).
- ``HardwareUnavailable``: the machine cannot be asked (no driver, no NVML); one sentence, no traceback.
- ``ToolMissing``: a tool a measurement needs is not installed (torch, perftest): the promise is not checked,
  and the message says how to install it; never a failure of the machine.
- ``WorkloadError``: a child process failed; carries the command and its output.
Anything else is a bug in this plugin.
"""

from __future__ import annotations


class GpuFabricError(Exception):
    """Base class: the message is complete and meant for the user as it is."""


class ProfileError(GpuFabricError):
    """A machine profile that cannot be found, parsed or validated."""

    def __init__(self, message: str, *, path: str | None = None, json_path: str | None = None) -> None:
        self.path = path
        self.json_path = json_path
        where = ""
        if path:
            where = f"{path}"
            if json_path:
                where += f" at {json_path}"
            where += ": "
        super().__init__(f"{where}{message}")


class BundleError(GpuFabricError):
    """A replay bundle that cannot be found or read."""


class HardwareUnavailable(GpuFabricError):
    """The live machine cannot be queried (no NVIDIA driver, NVML missing).

    ``replay_hint``: say how to judge a recorded bundle instead, by the flag of whatever prints the message: pytest's
    ``--gpu-replay`` unless a command re-raises it with ``for_flag("--replay BUNDLE")``."""

    def __init__(self, why: str, *, replay_hint: bool = False, flag: str = "--gpu-replay"):
        self.why, self.replay_hint = why, replay_hint
        super().__init__(f"{why}; use {flag} to check a recorded bundle" if replay_hint else why)

    def for_flag(self, flag: str) -> HardwareUnavailable:
        return HardwareUnavailable(self.why, replay_hint=self.replay_hint, flag=flag)


class ToolMissing(GpuFabricError):
    """A tool a measurement needs is not installed here: what was promised is not checked, not failed."""


class WorkloadError(GpuFabricError):
    """A workload child process failed, timed out or returned no result."""

    def __init__(self, cmd: list[str], returncode: int | None, stdout: str, stderr: str, reason: str,
                 failures: dict[str, str] | None = None) -> None:
        """``failures``: each failing rank's own last error lines (rank -> text), as the workload left them; they
        say why where a launcher's summary does not (torchrun: "exitcode: 1 ... To enable traceback see ...")."""
        self.cmd = cmd
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.failures = dict(failures or {})
        if self.failures:
            detail = [f"rank {rank}: {text}" for rank, text in sorted(self.failures.items())]
        else:
            detail = (stderr or stdout).strip().splitlines()[-20:]
        super().__init__(f"{reason}: {' '.join(cmd)} (exit {returncode})\n" + "\n".join(detail))
