"""Ctrl-C while a run writes its results and report: held until both are whole.

From the start of pytest's sessionfinish (the last test has ended, or the run was stopped) to the end of
unconfigure, the recorder writes the results JSON, pytest-html the page and the report plugin signs it. A Ctrl-C
there would cut that short (a results file saying ACCEPTED, no report, and exit 2), so it is noted and said in one
line, the files are finished, and the run ends with the exit code its results hold.

`gpufabric accept` passes its own FinishWhole (``until_exit``): the hold then lasts until the command has returned
that code, since a Ctrl-C between pytest's unconfigure and the command's end would otherwise still turn a finished
run into "interrupted". A plain pytest run gets its handler back at unconfigure.
"""

from __future__ import annotations

import signal
import sys
import threading

import pytest

SAID = "gpufabric: Ctrl-C while the results and report were being written: they were finished first"


class FinishWhole:
    """Registered on the run's controller (an xdist worker writes neither file)."""

    def __init__(self, *, until_exit: bool = False) -> None:
        self.until_exit = until_exit
        self._held = False
        self._previous = None  # the handler before: None where it was not set from Python
        self.interrupted = False

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        if threading.current_thread() is threading.main_thread():  # only the main thread may set a handler
            self._previous = signal.signal(signal.SIGINT, self._note)
            self._held = True
        yield

    def _note(self, signum, frame) -> None:
        self.interrupted = True

    @pytest.hookimpl(trylast=True)  # after the report plugin signed the page
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._held and not self.until_exit:
            self.release()

    def release(self) -> None:
        """The handler from before back, and the Ctrl-C that came meanwhile said."""
        if self._held:
            signal.signal(signal.SIGINT, signal.SIG_DFL if self._previous is None else self._previous)
            self._held = False
        if self.interrupted:
            print(SAID, file=sys.stderr)
            self.interrupted = False
