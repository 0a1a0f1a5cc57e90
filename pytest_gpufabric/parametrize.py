"""Parametrizing tests over what the run's profile promises: each shipped suite's module-level
``pytest_generate_tests`` (and fixtures.py's, for the public ``gpu_pair`` and ``promised_gpu``) says what its
parameters are, and these helpers give them their ids. The ids are part of the promise ids (``gpu-memory[GPU0]``)
that the results, the report and ``--gpu-waive`` name."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest

from .session_key import run_state

if TYPE_CHECKING:
    from .profile.model import Profile


def promised_profile(config: pytest.Config) -> Profile | None:
    """The profile of the run's session where --gpu-profile built it at start-up; None in a plain run."""
    state = run_state(config)
    return state.profile if state is not None else None


def per_gpu(metafunc: pytest.Metafunc, name: str, *, indirect: bool = False) -> None:
    """One case per GPU the profile promises, ids GPU0, GPU1, ...; without a profile, none."""
    profile = promised_profile(metafunc.config)
    indices = list(range(profile.gpu_count)) if profile else []
    metafunc.parametrize(name, indices, ids=[f"GPU{i}" for i in indices], indirect=indirect)


def over(metafunc: pytest.Metafunc, name: str, values: Iterable, ids: Iterable[str], *,
         indirect: bool = False) -> None:
    """One case per value, by ``ids``. None at all: one case ``none`` (the value None) that the test skips saying
    why, not pytest's "got empty parameter set"."""
    values, ids = list(values), list(ids)
    metafunc.parametrize(name, values or [None], ids=ids or ["none"], indirect=indirect)
