"""The README stays a short front page, and the user docs name hardware as users know it.

A user knows a machine as "2x H200 SXM 141GB", not by the names of the machines this project borrowed to record
its evidence (nvidia-h200-x2, ...), and has no use for how long we held one (issue 32). docs/profile-reference.md
is generated from the schema and checked by tests/test_profile_reference.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
GENERATED = {ROOT / "docs" / "profile-reference.md"}
USER_DOCS = [README, *(path for path in sorted((ROOT / "docs").rglob("*.md")) if path not in GENERATED)]

#: the names of the machines lent to this project, and the talk of holding them
LENT = re.compile(r"\bnvidia-h[12]00(?:-x\d+)?(?![\w-])|\bleases?\b|\bborrow(?:ed|s)?\b|\blent\b", re.IGNORECASE)


def _lent_words(text: str) -> list[str]:
    return [f"line {number}: {match.group(0)}" for number, line in enumerate(text.splitlines(), start=1)
            for match in LENT.finditer(line)]


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_user_docs_name_hardware_not_lent_machines(path: Path):
    assert _lent_words(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(("text", "found"), [
    ("measured on nvidia-h200-x2 (two GPUs)", ["line 1: nvidia-h200-x2"]),
    ("asked of nvidia-h200 and given an H100", ["line 1: nvidia-h200"]),
    ("one\nten leases of nvidia-h100-x1", ["line 2: leases", "line 2: nvidia-h100-x1"]),
    ("the scripts run on borrowed GPU machines; none are lent", ["line 1: borrowed", "line 1: lent"]),
    # what users say, and words that merely contain the letters
    ("2x H200 SXM 141GB, 1x H100 SXM 80GB; please report it; released; the bundle h200-nvswitch-x2", []),
    ("https://resources.nvidia.com/en-us-hopper-architecture/nvidia-h100-tensor-c", []),
])
def test_the_rule_finds_lent_names_and_nothing_else(text: str, found: list[str]):
    assert _lent_words(text) == found
