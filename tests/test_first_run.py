"""A new user's first run, as they meet it: the README's command in a fresh clone of this repository.

The copy is a git checkout of the working tree (the repository's own test guard looks at git's view of the
checkout), and its own package is imported (PYTHONPATH), so the shipped suites run below the copy's root as they do
after `pip install -e .`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a checkout")


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=first-run", "-c", "user.email=first-run@localhost", *args],
                          cwd=cwd, capture_output=True, text=True, check=True, timeout=120)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The working tree's files (tracked and new, nothing git ignores) committed into a fresh git checkout."""
    listed = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").stdout.split("\0")
    copy = tmp_path_factory.mktemp("first-run") / "pytest-gpufabric"
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a file deleted in the working tree is still listed by --cached
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-q", "-m", "a fresh clone")
    return copy


def _run(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def _fresh(copy: Path) -> None:
    """Nothing from an earlier run: reports/ as git holds it."""
    for written in (copy / "reports").iterdir():
        if written.name != ".gitkeep":
            shutil.rmtree(written) if written.is_dir() else written.unlink()


@needs_git
def test_the_readme_command_gives_its_verdict_on_its_first_run_in_a_fresh_clone(clone):
    """`gpufabric accept` (no driver here: the profile's shipped acceptance bundle) gives its verdict the first time,
    when reports/ is empty, and again the second time: ACCEPTED (exit 0), every promise of the demo profile passed on
    the recording; the repository's test set-up has no say in a user's run. The
    user's `pip install -e .` brings none of the test tools: without pytest-xdist, whose hook tests/conftest.py
    answers, that conftest must still load."""
    _fresh(clone)
    for attempt in ("first", "second"):
        done = _run(clone, "-m", "pytest_gpufabric", "accept", "-p", "no:cacheprovider", "-p", "no:xdist")
        assert done.returncode == 0, (attempt, done.stdout[-3000:], done.stderr[-3000:])
        assert "ACCEPTED: all 22 promise(s) checked passed" in done.stdout
        assert "into the repository" not in done.stdout
        assert (clone / "reports" / "acceptance.html").is_file()
        assert (clone / "reports" / "gpufabric-results.json").is_file()


@needs_git
def test_the_readme_commands_in_order_the_tests_after_accept(clone):
    """The README's first command leaves reports/ in the clone; its second (the tests) must not read it as a node's
    acceptance (tests/test_nodehealth_live.py failed so: `gpufabric health` took the current folder's results)."""
    _fresh(clone)
    done = _run(clone, "-m", "pytest_gpufabric", "accept", "-p", "no:cacheprovider", "-p", "no:xdist")
    assert done.returncode == 0 and (clone / "reports" / "gpufabric-results.json").is_file()
    tests = _run(clone, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                 "tests/test_nodehealth_live.py")
    _fresh(clone)
    assert tests.returncode == 0, (tests.stdout[-3000:], tests.stderr[-3000:])


@needs_git
def test_pytest_with_a_profile_from_the_clone_root_is_the_users_run(clone):
    """What `gpufabric accept` runs, typed by hand at the root: pytest finds tests/ (pyproject's testpaths) and
    loads its conftest, whose guard leaves a run of the shipped suites alone."""
    _fresh(clone)
    done = _run(clone, "-m", "pytest", "-p", "no:cacheprovider", "--gpu-profile", "h200-nvswitch-x2",
                "--gpu-replay", "h200-nvswitch-x2-acceptance")
    assert done.returncode == 6, (done.stdout[-3000:], done.stderr[-3000:])
    assert "INCOMPLETE: 1 promise(s) not checked: xid-events" in done.stdout
    assert (clone / "reports" / "gpufabric-results.json").is_file()


@needs_git
def test_the_repositorys_own_tests_still_may_not_write_into_it(clone):
    """The guard still holds for the repository's own test run: a test that writes reports/ fails the run."""
    _fresh(clone)
    careless = clone / "tests" / "test_careless.py"
    careless.write_text("from pathlib import Path\n\n\ndef test_writes_a_report():\n"
                        "    Path('reports/careless.html').write_text('x')\n")
    try:
        done = _run(clone, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/test_careless.py")
    finally:
        careless.unlink()
        _fresh(clone)
    assert done.returncode == 1, (done.stdout[-3000:], done.stderr[-3000:])
    assert "1 passed" in done.stdout
    assert "the tests wrote 1 file(s) into the repository: reports/careless.html" in done.stdout


@pytest.fixture
def unwritable_cwd(tmp_path) -> Path:
    """A working directory the run cannot write reports/ into: read-only, and (for root, whom permissions do not
    stop) with a file where the folder would go."""
    cwd = tmp_path / "read-only"
    cwd.mkdir()
    (cwd / "reports").write_text("not a folder\n")
    cwd.chmod(0o555)
    yield cwd
    cwd.chmod(0o755)


def _accept(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_gpufabric", "accept", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=600)


def test_a_read_only_working_directory_with_the_report_dir_elsewhere(unwritable_cwd, tmp_path):
    """The HTML report goes to --report-dir with the results (it went to reports/ where the command ran, and
    pytest-html's INTERNALERROR ended the run), unless --html says otherwise."""
    out = tmp_path / "out"
    done = _accept(unwritable_cwd, "--report-dir", str(out))
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert "ACCEPTED: all 22 promise(s) checked passed" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["acceptance.html", "gpufabric-results.json"]
    assert f"Generated html report: file://{out}/acceptance.html" in done.stdout
    elsewhere = tmp_path / "html" / "report.html"
    done = _accept(unwritable_cwd, "--report-dir", str(out), "--html", str(elsewhere))
    assert done.returncode == 0 and elsewhere.is_file(), (done.stdout[-3000:], done.stderr[-3000:])


def test_a_read_only_working_directory_without_a_report_dir_says_so(unwritable_cwd):
    """Nowhere to write: one line before anything runs, naming the flag that writes elsewhere; exit 4."""
    done = _accept(unwritable_cwd)
    assert (done.returncode, done.stdout) == (4, "")  # a usage error, as pytest says it
    assert done.stderr.startswith("gpufabric: cannot write results to reports: ")
    assert done.stderr.endswith("; give --report-dir DIR to write elsewhere\n") and done.stderr.count("\n") == 1
