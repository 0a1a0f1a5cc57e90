"""The repo's own test set-up, nothing the plugin needs.

pytester is enabled with `-p pytester` in pyproject's addopts rather than `pytest_plugins` here: in a source
checkout the shipped suites live below this file, so pytest also loads it for the runs pytester starts, and
`pytest_plugins` is only allowed in the rootdir's conftest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "tests" / "data"


@pytest.fixture
def bundles() -> Path:
    """Bundles recorded from real machines (also what the package ships)."""
    return DATA / "bundles"


@pytest.fixture
def captures() -> Path:
    """Tool outputs of real machines, as captured."""
    return DATA / "captures"


@pytest.fixture
def judged():
    """assert_judged(result, passed=, failed=): exactly these outcomes, no errors, every other test skipped.
    Later suites add skipped tests (not promised, not recorded); they must not add passes or failures."""

    def assert_judged(result, passed: int, failed: int = 0) -> None:
        outcomes = result.parseoutcomes()
        assert outcomes.get("passed", 0) == passed, outcomes
        assert outcomes.get("failed", 0) == failed, outcomes
        assert not outcomes.get("errors") and not outcomes.get("error"), outcomes

    return assert_judged
