"""The README stays a short front page, and what users read names hardware as users know it.

A user knows a machine as "2x H200 SXM 141GB", not by the names of the machines this project borrowed to record
its evidence (nvidia-h200-x2, ...), and has no use for how long we held one (issues 32 and 33). The rule covers the
README and docs/, the package (its code, templates and the reference catalogue `gpufabric reference` prints, with
its recordings), the shipped profiles, the examples, benchmarks/README.md and hardware/README.md.
docs/profile-reference.md is generated from the schema and checked by tests/test_profile_reference.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
GENERATED = {ROOT / "docs" / "profile-reference.md"}
USER_DOCS = [README, *(path for path in sorted((ROOT / "docs").rglob("*.md")) if path not in GENERATED)]
#: the suffixes of the text files read in the package and the examples
TEXT = {".md", ".py", ".yaml", ".yml", ".json", ".j2", ".txt", ".sh", ".sbatch", ""}


def _text_files(folder: Path) -> list[Path]:
    return [path for path in sorted(folder.rglob("*"))
            if path.is_file() and path.suffix in TEXT and "__pycache__" not in path.parts]


USER_FILES = [*_text_files(ROOT / "pytest_gpufabric"), *sorted((ROOT / "profiles").glob("*.yaml")),
              *_text_files(ROOT / "examples"), ROOT / "benchmarks" / "README.md", ROOT / "hardware" / "README.md"]

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


@pytest.mark.parametrize("path", USER_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_shipped_files_name_hardware_not_lent_machines(path: Path):
    assert _lent_words(path.read_text(encoding="utf-8")) == []


def test_the_rule_reads_the_reference_catalogue_and_the_notes_beside_the_code():
    named = {str(path.relative_to(ROOT)) for path in USER_FILES}
    assert {"pytest_gpufabric/references/h100-sxm.yaml", "pytest_gpufabric/references/h200-sxm.yaml",
            "pytest_gpufabric/references/recordings/README.md",
            "pytest_gpufabric/references/recordings/h100-sxm-nvml-memory.json",
            "profiles/h200-nvswitch-x2.yaml", "profiles/h200-nvswitch-x4.yaml",
            "benchmarks/README.md", "hardware/README.md", "examples/kubernetes/Dockerfile"} <= named


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
