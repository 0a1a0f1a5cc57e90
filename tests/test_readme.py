"""README.md against what the project does: its two set-up commands, and CI running the second word for word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def _python_blocks(after_heading: str) -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split(after_heading, 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize(("bundle", "outcome"), [("h200-nvswitch-x2", "passed"), ("titan-rtx-nvlink", "passed"),
                                                 ("rtx-2080ti-pcie", "skipped")])
def test_the_marker_example_runs_on_a_replay_without_a_profile(pytester: pytest.Pytester, bundle, outcome):
    """It skipped with "got empty parameter set for (gpu_pair)" on the H200 bundle, which has an NV18 pair."""
    pytester.makepyfile(test_bridge=_python_blocks("Markers (they work in your own test files too)")[0])
    result = pytester.runpytest("test_bridge.py", "--gpu-replay", bundle, "-rs")
    assert result.parseoutcomes().get(outcome) == 1
    if outcome == "skipped":  # two GeForce cards without a bridge: the reason names what is missing
        result.stdout.fnmatch_lines(["*no NVLink of 2+ links between a GPU pair (found GPU0-GPU1 PHB)*"])


def test_every_option_of_the_plugin_is_in_the_readme_table(pytestconfig):
    """README's "Using it" table lists every --gpu-* option the plugin adds (one was added without it: issue 24's
    --gpu-sign-key and --gpu-operator)."""
    section = ROOT.joinpath("README.md").read_text().split("## Using it", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(--gpu-[a-z-]+)", section, flags=re.M))
    group = next(g for g in pytestconfig._parser._groups if g.name == "gpufabric")
    options = {name for option in group.options for name in option.names() if name.startswith("--gpu-")}
    assert options and listed == options
