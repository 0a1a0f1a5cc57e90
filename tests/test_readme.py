"""README.md against what the project does: its two set-up commands, and CI running the second word for word."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _set_up_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```\n(.*?)```", section, flags=re.S)]


def test_the_readme_has_exactly_two_set_up_commands():
    commands = _set_up_commands()
    assert len(commands) == 2 and all("\n" not in command for command in commands)
    assert commands[0] == "pip install -e . && gpufabric accept"


def test_ci_runs_the_readme_test_command_word_for_word():
    test_command = _set_up_commands()[1]
    assert "-c constraints.txt" in test_command  # the one pinned torch, for newcomers and CI alike
    ci_lines = [line.strip() for line in ROOT.joinpath(".ci/run").read_text().splitlines()]
    assert test_command in ci_lines


def test_the_constraints_pin_the_torch_ci_installs():
    pins = [line for line in ROOT.joinpath("constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins == ["torch==2.13.0"]
