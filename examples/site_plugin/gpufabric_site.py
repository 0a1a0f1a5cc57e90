"""A site's own promises, added to pytest-gpufabric's from a plugin of the site's (no edit of the package).

This one promises the NVIDIA driver branch a site has qualified (``site: {driver_branch: "580"}`` in a profile):
the driver's major version must be that branch. Load it with ``-p gpufabric_site`` (on ``PYTHONPATH``), or as an
installed plugin's ``pytest11`` entry point; its test module, beside it, joins the shipped suites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpufabric.catalogue import PromiseKind

SUITE = Path(__file__).with_name("test_site_suite.py")


def _driver_branch(profile) -> list[str]:
    return [""] if (profile.data.get("site") or {}).get("driver_branch") else []


def pytest_gpufabric_promise_kinds(profile):
    return [PromiseKind("site-driver-branch", "the driver branch this site qualified", SUITE.name, _driver_branch)]


@pytest.hookimpl(trylast=True)  # after pytest-gpufabric put its suites on the command line
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("gpu_profile", None) and str(SUITE) not in config.args:
        config.args.append(str(SUITE))
