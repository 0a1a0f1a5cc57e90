"""The run's options are read once into a frozen RunOptions, and the session is built once from them: nothing
outside session.py writes to it afterwards."""

from __future__ import annotations

import ast
import dataclasses
import socket
from pathlib import Path

import pytest

from pytest_gpufabric.plugin import SESSION_KEY
from pytest_gpufabric.run_options import RunOptions
from pytest_gpufabric.verdict import Waiver

PACKAGE = Path(__file__).parent.parent / "pytest_gpufabric"


def test_every_option_is_parsed_once_into_the_session_options(pytester: pytest.Pytester):
    (pytester.path / "site.yaml").write_text("name: site\nextends: h200-nvswitch-x2\nwaive:\n"
                                             "  - {promise: ecc-mode, reason: agreed with ACME}\n")
    config = pytester.parseconfigure(
        "--gpu-profile", "site.yaml", "--gpu-replay", "h200-nvswitch-x2", "--gpu-burn-in", "10m",
        "--gpu-burn-in-plant-fault", "1", "--gpu-plant-memory-fault", "0", "--gpu-report-dir", "out/{fleet}/{host}",
        "--gpu-fleet-id", "F7", "--gpu-customer", "ACME Compute", "--gpu-operator", "ops",
        "--gpu-waive", "gpu-model=bridge ordered separately")
    fabric_session = config.stash[SESSION_KEY]
    options = fabric_session.options
    host = socket.gethostname().split(".")[0]
    assert (options.profile.name, options.replay) == ("site", "h200-nvswitch-x2")
    # as given (relative to where pytest started), its placeholders filled; made now, to check it is writable
    assert options.report_dir == Path("out", "F7", host) and (pytester.path / options.report_dir).is_dir()
    assert (options.fleet_id, options.customer, options.operator, options.sign_key) == ("F7", "ACME Compute", "ops",
                                                                                         None)
    assert (options.burn_in_s, options.plant_fault, options.plant_memory_fault) == (600.0, 1, 0)
    assert (options.metrics_port, options.evidence_files) == (None, ())
    assert options.waivers == (Waiver("gpu-model", "bridge ordered separately", "--gpu-waive"),)
    # the session reads them, and adds the profile's own waivers first
    assert (fabric_session.replay, fabric_session.report_dir) == ("h200-nvswitch-x2", options.report_dir)
    assert fabric_session.waivers == [Waiver("ecc-mode", "agreed with ACME", "profile site"), *options.waivers]
    assert fabric_session.has_burn_in
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.burn_in_s = 60.0


def test_a_plain_run_is_a_run_of_default_options(pytester: pytest.Pytester):
    """No --gpu-profile or --gpu-replay: nothing is read and no session is built at start-up."""
    config = pytester.parseconfigure("--gpu-burn-in", "0s")
    assert SESSION_KEY not in config.stash
    assert RunOptions() == RunOptions(profile=None, replay=None, report_dir=Path("reports"), burn_in_s=None,
                                      waivers=())


def _writes_to_the_session(tree: ast.AST) -> list[int]:
    """Lines assigning an attribute of the session (``fabric_session.x = ...``, ``self.fabric_session.x += ...``)."""
    names = {"fabric_session", "gpufabric_run"}

    def is_session(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or (
            isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
            and node.value.id == "self")

    lines = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for part in ast.walk(target):  # a.x = and a.x, b = (a.x["key"] = writes into a.x, not to a)
                if isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store) and is_session(part.value):
                    lines.append(node.lineno)
    return lines


def test_nothing_outside_the_session_writes_to_it():
    writes = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
              if path.name != "session.py" and (lines := _writes_to_the_session(ast.parse(path.read_text())))}
    assert writes == {}
    # the check finds such a write where there is one
    assert _writes_to_the_session(ast.parse("fabric_session.metrics = m\nx, self.fabric_session.verdict = v\n"
                                            "fabric_session.health['tests'] = {}")) == [1, 2]
