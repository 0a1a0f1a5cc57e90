"""The `gpufabric` command's entry point (also `python -m pytest_gpufabric`).

A Ctrl-C while Python imports the command is held until the command knows what it was asked to run, and is then
said in one line with that command's exit code, not as a traceback from the middle of an import."""

from __future__ import annotations

import signal


def main() -> int:
    early: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: early.append(signum))
    from .cli import main as command

    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here Ctrl-C is Python's KeyboardInterrupt
    try:
        return command(interrupted_on_start=bool(early))
    finally:
        # the command has ended and said so: a Ctrl-C while Python shuts down would only lose its exit code
        signal.signal(signal.SIGINT, signal.SIG_IGN)
