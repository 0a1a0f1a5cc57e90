"""Where the run's FabricSession lives in pytest's config stash.

The key sits here, below session.py, so that the modules the session is built on (records.py, parametrize.py) find
it without importing the session; they see it as a RunState, the part of it they read. The modules above the
session get it whole from session_factory.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from .catalogue import PromiseKind
    from .profile.model import Profile


class RunState(Protocol):
    """What the modules below the session read of the run's FabricSession."""

    results: list[dict]  # the check records (records.record appends them)
    records_journal: Any  # a pytest-xdist worker's journal of its check records; None elsewhere
    site_kinds: tuple[PromiseKind, ...]  # what a site's plugin adds to the promises (hookspecs.py)

    @property
    def profile(self) -> Profile | None: ...


SESSION_KEY: pytest.StashKey[RunState] = pytest.StashKey()


def run_state(config: pytest.Config) -> RunState | None:
    """The run's session where --gpu-profile or --gpu-replay built it at start-up; None in a plain run."""
    return config.stash.get(SESSION_KEY, None)
