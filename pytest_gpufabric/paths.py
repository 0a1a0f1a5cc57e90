"""Where the shipped profiles, bundles and suites live, installed or in a source checkout.

A wheel carries the repo's ``profiles/`` and ``tests/data/bundles/`` inside the package (pyproject's
force-include); a source checkout (editable install, CI) reads them in place, so there is one copy of each.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT_DIR = PACKAGE_DIR.parent

SUITES_DIR = PACKAGE_DIR / "suites"


def _shipped(inside_package: str, in_checkout: str) -> Path:
    installed = PACKAGE_DIR / inside_package
    if installed.is_dir():
        return installed
    return _CHECKOUT_DIR / in_checkout


def shipped_profiles_dir() -> Path:
    return _shipped("profiles", "profiles")


def shipped_bundles_dir() -> Path:
    return _shipped("bundles", "tests/data/bundles")
