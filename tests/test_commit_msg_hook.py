"""The commit-msg hook in .githooks refuses a subject over 72 characters (docs/development.md says how to enable it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HOOK = Path(__file__).parent.parent / ".githooks" / "commit-msg"


def run_hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run([str(HOOK), str(path)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("message", [
    "x" * 72 + "\n",
    "Short subject\n\n" + "a body line may run as long as it likes " * 5 + "\n",
    "# Please enter the commit message\n\n" + "é" * 72 + "\n",  # characters, not bytes; git's comments skipped
])
def test_a_subject_of_at_most_72_characters_passes(tmp_path: Path, message: str):
    done = run_hook(tmp_path, message)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_subject_of_73_characters_is_refused_saying_why(tmp_path: Path):
    done = run_hook(tmp_path, "y" * 73 + "\n\nbody\n")
    assert done.returncode == 1
    assert done.stderr == ("commit-msg: the subject is 73 characters, at most 72: put the details in the body\n"
                           f"  {'y' * 73}\n")
