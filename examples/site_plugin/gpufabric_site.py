"""A site's own promises, added to pytest-gpufabric's from a plugin of the site's (no edit of the package).

This one promises the NVIDIA driver branch a site has qualified (``site: {driver_branch: "580"}`` in a profile):
the driver's major version must be that branch. Its kind is the object the shipped kinds are (kinds/base.py): it
claims the profile's ``site:`` section (with the JSON Schema that section must hold), and its check's rule says
the check in words for the report (``phrase``) and what a failure points to (``remedy``). Load it with
``-p gpufabric_site`` (on ``PYTHONPATH``), or as an installed plugin's ``pytest11`` entry point; its test module,
beside it, joins the shipped suites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpufabric.kinds.base import CheckRule, Kind
from pytest_gpufabric.remedy_classes import SOFTWARE

SUITE = Path(__file__).with_name("test_site_suite.py")
NAME = "site-driver-branch"

#: what the site's section holds: checked when the run starts, before any test runs
SITE_SECTION = {"type": "object", "properties": {"driver_branch": {"type": "string", "pattern": "^[0-9]+$"}}}


def _driver_branch(profile) -> list[str]:
    return [""] if (profile.data.get("site") or {}).get("driver_branch") else []


def _phrase(check: dict) -> tuple[str, str]:
    """(Expected, Found) in the report's promise table: the branch, and the driver found with its branch."""
    found = str(check.get("found") or "")
    return f"a driver of the {check.get('expected')} branch", f"{found} (branch {found.split('.', 1)[0]})"


def _remedy(check: dict, ctx) -> tuple[str, str]:
    """A driver of another branch is the image's to change, never the board's."""
    return SOFTWARE, (f"driver {check.get('found')} is installed where the site qualified the {check.get('expected')} "
                      f"branch: install a {check.get('expected')} driver in the image")


DRIVER_BRANCH = Kind(NAME, "the driver branch this site qualified", SUITE.name, _driver_branch,
                     sections=("site",), section_schema={"site": SITE_SECTION},
                     checks=(CheckRule(NAME, remedy=_remedy, phrase=_phrase),))


def pytest_gpufabric_promise_kinds(profile):
    return [DRIVER_BRANCH]


@pytest.hookimpl(trylast=True)  # after pytest-gpufabric put its suites on the command line
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("gpu_profile", None) and str(SUITE) not in config.args:
        config.args.append(str(SUITE))
