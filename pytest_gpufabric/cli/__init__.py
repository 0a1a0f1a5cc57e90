"""`gpufabric`: look at a machine or a bundle, record bundles, write and check profiles, parse tool output.

Exit codes (docs/exit-codes.md): `accept` and `fleet` end in a verdict and speak pytest's codes (0 ACCEPTED,
1 REJECTED, 4 a usage error, 6 INCOMPLETE, 7 NOT TESTED, ...); the other commands: 0 done; 2 bad input (unknown
profile, corrupt bundle, unparsable file, bad arguments); 3 the machine cannot be asked (no NVIDIA driver / NVML,
no GPU).

One module per command family, each with ``register(subparsers)`` beside its commands; what several share is in
common.py. A command imports what it needs when it runs, so that ``gpufabric --help`` stays quick.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from ..errors import GpuFabricError, HardwareUnavailable
from ..formats.clean import clean_text
from . import accept, bench, fleet, health, machine, parse, profile, reference, verify
from .common import EXIT_BAD_INPUT, EXIT_NO_HARDWARE, EXIT_NOT_TESTED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE

__all__ = ["EXIT_BAD_INPUT", "EXIT_NO_HARDWARE", "EXIT_NOT_TESTED", "EXIT_OK", "EXIT_REJECTED", "EXIT_USAGE",
           "build_parser", "main"]

#: the command families in the order `gpufabric --help` lists their commands
FAMILIES = (accept, verify, bench, machine, health, profile, fleet, parse, reference)
#: the commands that end in a verdict: their bad input is pytest's usage error, and a machine that cannot be asked
#: is NOT TESTED, as `pytest --gpu-profile` says them
VERDICT_COMMANDS = ("accept", "fleet")
#: Ctrl-C: pytest's "interrupted" for the commands that run pytest, the shell's 128 + SIGINT for the others
EXIT_INTERRUPTED, EXIT_SIGINT = 2, 130


#: what `gpufabric --help` ends with: where a new user starts
START_HERE = """start here:
  gpufabric show                           what this machine is (GPUs, links, topology)
  gpufabric profile list                   the profiles a name finds (shipped, ./profiles, GPUFABRIC_PROFILE_PATH)
  gpufabric accept --profile NAME|FILE     accept this machine against the profile it was sold under
  gpufabric accept                         without a GPU: replay a recorded 2x H200 acceptance (a demo)
  gpufabric profile init --measure -o F    write a profile from a machine known to be good
docs: README.md, docs/commands.md"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufabric", description=__doc__.splitlines()[0], epilog=START_HERE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pytest-gpufabric {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(sub)
    return parser


def main(argv: list[str] | None = None, *, interrupted_on_start: bool = False) -> int:
    """The command; ``interrupted_on_start``: Ctrl-C came while Python imported it (command.py)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verdict = bool(argv) and argv[0] in VERDICT_COMMANDS
    if interrupted_on_start:
        print("gpufabric: interrupted before it began; nothing was run or written", file=sys.stderr)
        return EXIT_INTERRUPTED if verdict else EXIT_SIGINT
    try:
        return _run(argv, verdict)
    except HardwareUnavailable as exc:
        print(clean_text(f"gpufabric: {'NOT TESTED: ' if verdict else ''}{exc}"), file=sys.stderr)
        return EXIT_NOT_TESTED if verdict else EXIT_NO_HARDWARE
    except GpuFabricError as exc:
        print(clean_text(f"gpufabric: {exc}"), file=sys.stderr)  # it may quote a file's or a machine's text
        return EXIT_USAGE if verdict else EXIT_BAD_INPUT
    except BrokenPipeError:  # `gpufabric bundle list | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:  # an output path that cannot be written, a directory that cannot be made
        print(clean_text(f"gpufabric: {exc.filename or ''}: {exc.strerror}"), file=sys.stderr)
        return EXIT_USAGE if verdict else EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return _interrupted(verdict)
    except Exception as exc:
        if not _raised_while_handling_ctrl_c(exc):
            raise
        # pytest's own display of a Ctrl-C that cut an import short can fail in turn: it is still Ctrl-C
        return _interrupted(verdict)


def _run(argv: list[str], verdict: bool) -> int:
    try:
        args, extra = build_parser().parse_known_args(argv)
    except SystemExit as exc:
        if exc.code == 2 and verdict:
            return EXIT_USAGE  # argparse's usage error, in pytest's code
        raise
    misused = getattr(args, "misused", None)  # a family's own check of options argparse cannot express
    if misused is not None and (message := misused(args)):
        build_parser().error(message)
    if extra and not getattr(args, "takes_pytest_args", False):
        build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "takes_pytest_args", False):
        return args.func(args, extra)
    return args.func(args)


def _interrupted(verdict: bool) -> int:
    """Ctrl-C outside pytest's own handling (before pytest ran, or while it stopped): one line, what is on disk kept."""
    print("gpufabric: interrupted; what was written before stays (the results file is whole, or the last one): "
          "rerun to finish", file=sys.stderr)
    return EXIT_INTERRUPTED if verdict else EXIT_SIGINT


def _raised_while_handling_ctrl_c(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False
