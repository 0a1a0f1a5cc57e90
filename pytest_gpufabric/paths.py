"""Where the shipped profiles, bundles and suites live, installed or in a source checkout.

A wheel carries the repo's ``profiles/`` and ``tests/data/bundles/`` inside the package (pyproject's
force-include); a source checkout (editable install, CI) reads them in place, so there is one copy of each.
"""

from __future__ import annotations

import difflib
import os
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


#: where a profile or bundle name is looked up after the start folder's own ``profiles/`` or ``bundles/``
PROFILE_PATH_ENV = "GPUFABRIC_PROFILE_PATH"
BUNDLE_PATH_ENV = "GPUFABRIC_BUNDLE_PATH"


def name_search_dirs(folder: str, env_var: str, shipped: Path, start_dir: Path | None = None) -> list[Path]:
    """Where a name is looked up, first match wins, for every command alike: ``folder`` (``profiles``, ``bundles``)
    under the folder the command was started in, the folders of ``env_var``, then the shipped ones. ``start_dir``
    defaults to the current folder (pytest passes its invocation folder, never its rootdir)."""
    start = Path.cwd() if start_dir is None else Path(start_dir)
    dirs = [start / folder, *(Path(p) for p in os.environ.get(env_var, "").split(os.pathsep) if p), shipped]
    unique: list[Path] = []  # in a source checkout ./profiles is the shipped folder: name it once
    for directory in dirs:
        if not any(_same_dir(directory, seen) for seen in unique):
            unique.append(directory)
    return unique


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def did_you_mean(name: str, names: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for a close name among ``names``, else ``""``."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
