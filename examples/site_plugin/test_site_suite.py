"""The site's suite: one test per site promise, judged like the shipped ones (checks/result.py's verdicts)."""

from __future__ import annotations

from pytest_gpufabric.checks.result import failed, passed, unknown
from pytest_gpufabric.promise import promise


@promise("site-driver-branch")
def test_driver_branch(gpu_profile, fabric, gpufabric_check):
    want = str(gpu_profile.data["site"]["driver_branch"])
    found = fabric.driver_version
    if not found:
        result = unknown("site-driver-branch", "driver", want, f"{fabric.source} records no driver version")
    elif str(found).split(".", 1)[0] == want:
        result = passed("site-driver-branch", "driver", want, found, f"driver {found}: branch {want}")
    else:
        result = failed("site-driver-branch", "driver", want, found,
                        f"driver {found} is not of the {want} branch this site qualified: install a {want} driver")
    gpufabric_check(result)
