"""Hooks a site's own pytest plugin implements to extend the acceptance without editing this package, as
pytest-html and pytest-xdist publish theirs (the plugin registers them through ``pytest_addhooks``).

A site promise is judged like a shipped one: the profile says whether it is made (its ``site:`` section, which
this package leaves to the site's plugin, and refuses where no loaded kind claims it), the promise list holds it
before any test runs, a test marked ``@promise("<kind>")`` judges it, and a promise no test judged is not checked.
``examples/site_plugin/`` is one.
"""

from __future__ import annotations

import pytest


@pytest.hookspec
def pytest_gpufabric_promise_kinds(profile) -> list:
    """Return the kinds of promise a site adds: ``pytest_gpufabric.kinds.base.Kind`` objects, as the shipped kinds
    are. Each has its name (the id without parameters; start it with ``site-``), what it is in words, the file name
    of the test module that judges it, and ``ids(profile) -> list[str]``: the parameter ids of the promises this
    profile makes ([""] for one promise without parameters, [] for none). Optionally: ``sections`` (the profile
    sections it claims, ``("site",)``), ``section_schema`` (section -> the JSON Schema it must hold, checked before
    anything runs) and ``checks`` (``CheckRule``: how its check records read in the report, ``phrase``, and what a
    failure points to, ``remedy``; without one a failure says "rerun")."""
