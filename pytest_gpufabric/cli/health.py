"""`gpufabric health`: the check a scheduler runs between jobs; its options and its run live in
nodehealth/command.py (exit 0 healthy, 1 drain, 6 could not tell)."""

from __future__ import annotations

import argparse

from ..nodehealth.command import add_health_parser, run_health


def register(sub: argparse._SubParsersAction) -> None:
    add_health_parser(sub, cmd_health)


def cmd_health(args: argparse.Namespace) -> int:
    return run_health(args)
