"""The promise list and the shipped suites agree: every promise the catalogue says a profile makes has a test
that judges it (else it could only ever be "not checked"), and every suite test is of a kind the catalogue knows
(else its id could never be on the list, and it would be skipped as not promised)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpufabric.catalogue import BURN_IN, KINDS, promise_list
from pytest_gpufabric.paths import SUITES_DIR, shipped_profiles_dir
from pytest_gpufabric.profile.loader import load_profile
from pytest_gpufabric.promise import promise_of

#: the shipped profiles, and one that promises every platform setting (recorded with hardware/record-platform.sh)
PLATFORM_ALL = Path(__file__).parent / "data" / "captures" / "platform" / "h100-sxm-x2" / "platform-all.yaml"
PROFILES = [*sorted(p.stem for p in shipped_profiles_dir().glob("*.yaml")), str(PLATFORM_ALL)]


@pytest.mark.parametrize("name", PROFILES, ids=lambda p: Path(p).stem)
def test_every_promise_of_a_shipped_profile_has_a_test(pytester: pytest.Pytester, name: str):
    profile = load_profile(name)
    items, _ = pytester.inline_genitems("--gpu-profile", name, "--gpu-replay", "h200-nvswitch-x2-acceptance")
    judged = {promise_of(item, SUITES_DIR)[0] for item in items}
    listed = promise_list(profile, asked={BURN_IN}).ids()
    assert listed, name
    if "platform" in profile.data:
        assert any(pid.startswith("platform-") for pid in listed)
    assert set(listed) <= judged, sorted(set(listed) - judged)


def test_every_suite_test_is_of_a_known_kind(pytester: pytest.Pytester):
    items, _ = pytester.inline_genitems("--gpu-profile", "h200-nvswitch-x4", "--gpu-replay", "h200-nvswitch-x4")
    bases = {promise_of(item, SUITES_DIR)[0].split("[", 1)[0] for item in items if item.path.parent == SUITES_DIR
             and item.originalname not in ("test_dcgm_diag", "test_nvbandwidth_copy")}  # ids from the evidence
    assert bases and bases <= set(KINDS), sorted(bases - set(KINDS))
