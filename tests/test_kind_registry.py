"""The registry of promise kinds (kinds/): no check of a shipped kind can fail without a remedy of its own, and each
reads in words (a phrase of its own, or its limits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpufabric import kinds
from pytest_gpufabric.kinds.base import CheckRule
from pytest_gpufabric.remedy import remedy_of_check
from pytest_gpufabric.remedy_rules import Context

ROOT = Path(__file__).parent.parent
#: a real single-GPU acceptance holding all four shipped diagnostics (H100 80GB HBM3)
RECORDED = json.loads((ROOT / "tests/data/results/single-gpu-on-h100-x1/run-6/acceptance-results.json").read_text())

RULES = [(module.__name__.rsplit(".", 1)[-1], rule) for module in kinds.families()
         for rule in [*(r for kind in getattr(module, "KINDS", ()) for r in kind.checks),
                      *getattr(module, "CHECKS", ())]]


@pytest.mark.parametrize(("family", "rule"), RULES, ids=[f"{family}:{rule.name}" for family, rule in RULES])
def test_every_shipped_check_rule_has_a_remedy_and_words(family: str, rule: CheckRule):
    assert callable(rule.remedy)
    assert rule.phrase is not None or rule.limits is not None, f"{family}: {rule.name} has neither phrase nor limits"


def test_a_check_rule_without_a_remedy_is_refused():
    with pytest.raises(TypeError):
        CheckRule("example")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'example': its remedy must be a function"):
        CheckRule("example", None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", kinds.diagnostics(), ids=lambda kind: kind.name)
def test_a_failed_diagnostic_points_to_its_kinds_own_remedy(kind):
    """The recorded check of each diagnostic, failed, gets its kind's remedy, never the fallback for an unknown
    check."""
    check = next(c for c in RECORDED["checks"] if c["name"] == kind.name)
    failed = {**check, "verdict": "failed"}
    own = kind.checks[0].remedy(failed, Context())
    own = own if isinstance(own, list) else [own]
    remedy = remedy_of_check(failed)
    assert remedy in own
    assert "no rule reads this check's evidence" not in remedy[1]


def test_each_measurement_is_declared_by_its_family():
    """measurements.py is a view: every entry is a family's (``MEASUREMENTS``, judged by that family's suite) or a
    per-GPU diagnostic's, built from its kind; none is declared there by hand."""
    from pytest_gpufabric.measurements import REGISTRY

    declared = {entry.name: family for family in kinds.families() for entry in getattr(family, "MEASUREMENTS", ())}
    diagnostic = {kind.measurement.diagnostic.measurement for kind in kinds.diagnostics()}
    assert set(REGISTRY) == set(declared) | diagnostic and not set(declared) & diagnostic
    assert {name: f"suites/{family.SUITE}" for name, family in declared.items()} == \
        {name: REGISTRY[name].suite for name in declared}
    assert [entry.name for entry in kinds.suite_measurements()] == list(REGISTRY)[:len(declared)]
