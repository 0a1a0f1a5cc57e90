"""Check records: the verdict's only source (verdict.record_rows), kept out of pytest's report stream.

A check record is a CheckResult as a dict, bound to the test that made it and the promise that test judges
(``{"test": ..., "promise": ..., "verdict": ...}``). A hook can rewrite a TestReport's outcome and its
``user_properties``; it cannot reach these records:

- without pytest-xdist the test's process is the run's: a record goes straight into the FabricSession;
- under pytest-xdist each worker appends its records to a journal file of its own, one JSON line each, in a
  folder the controller made for this run and handed to the workers through ``workerinput``; the controller reads
  what was appended before it writes the results (after every test's teardown report, so a results file written
  mid-run holds the records so far, and at the end). A worker that crashed keeps what it had written.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .paths import SUITES_DIR
from .session_key import SESSION_KEY

#: the folder of the run's journals, handed from the pytest-xdist controller to its workers
JOURNAL_INPUT = "gpufabric_records_journal"
#: a journal line that carries a worker's usage error instead of a record
REFUSED = "refused"

_running: list[pytest.Item] = []  # the test whose set-up, call or teardown runs now (one at a time per process)


@contextlib.contextmanager
def running(item: pytest.Item) -> Iterator[None]:
    """While ``item`` runs, records made without naming a test (promise.not_checked, promise.fail) are its own."""
    _running.append(item)
    try:
        yield
    finally:
        _running.remove(item)


def current_item() -> pytest.Item | None:
    return _running[-1] if _running else None


def record(item: pytest.Item | None, promise_id: str, result: dict) -> None:
    """Record ``result`` (a CheckResult's dict) as a check of ``item``, bound to ``promise_id``, the promise ``item``
    judges (promise.promise_of). Nothing is recorded outside a test, or in a run without the plugin's session."""
    if item is None or SESSION_KEY not in item.config.stash:
        return
    fabric_session = item.config.stash[SESSION_KEY]
    entry = {"test": item.nodeid, "promise": promise_id, "judge": judge_of(item, promise_id, fabric_session),
             **result}
    fabric_session.results.append(entry)
    journal = fabric_session.records_journal
    if journal is not None:
        journal.append(entry)


#: who made a record: a shipped suite's test, the test of a site's registered kind, or a test of the user's own
SUITE, SITE, USER = "suite", "site", "user"


def judge_of(item: pytest.Item, promise_id: str, fabric_session) -> str:
    """Who judges, read off the code the test runs (the file its function was written in, which its module and its
    path must agree on), not its node id, markers or path alone, which hooks can rewrite: only a shipped suite's
    record, or a site kind's from the site's own suite file (``Kind.suite``), can judge a promise of the profile's
    list (verdict.record_rows)."""
    written_in = defining_file(item)
    if written_in is not None and written_in.parent == SUITES_DIR.resolve():
        return SUITE
    kind = next((k for k in fabric_session.site_kinds if k.name == promise_id.split("[", 1)[0]), None)
    if kind is not None and written_in is not None and written_in.name == kind.suite:
        return SITE
    return USER


def defining_file(item: pytest.Item) -> Path | None:
    """The file a test's function was written in, where its code object, its module and its path agree; None where
    they do not (a hook moved the item, or swapped its function) or it has no function."""
    code = getattr(getattr(item, "function", None), "__code__", None)
    files = [getattr(code, "co_filename", None), getattr(getattr(item, "module", None), "__file__", None),
             getattr(item, "path", None)]
    if any(f is None for f in files):
        return None
    resolved = {Path(f).resolve() for f in files}
    return resolved.pop() if len(resolved) == 1 else None


class WorkerJournal:
    """A pytest-xdist worker's records, appended to ``<folder>/<worker id>.jsonl`` as they are made."""

    def __init__(self, folder: Path, worker_id: str) -> None:
        self.path = folder / f"{worker_id}.jsonl"

    def append(self, entry: dict) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")  # one line; a NaN a recording held reads back as NaN


class ControllerJournal:
    """The pytest-xdist controller's side: the folder its workers write to, read as far as each file is whole."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gpufabric-records-"))
        self._offsets: dict[Path, int] = {}
        self.refused: list[str] = []  # a worker's usage error (a test of the user's own claiming a shipped kind)

    def read_new(self) -> list[dict]:
        """The records appended since the last read (whole lines only: a worker may be writing the next)."""
        entries: list[dict] = []
        for path in sorted(self.folder.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            whole = data[:data.rfind(b"\n") + 1]
            self._offsets[path] = offset + len(whole)
            entries += [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]
        self.refused += [str(entry[REFUSED]) for entry in entries if REFUSED in entry]
        return [entry for entry in entries if REFUSED not in entry]

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def worker_journal(config: pytest.Config) -> WorkerJournal | None:
    """This pytest-xdist worker's journal, where the controller handed it one; None outside a worker."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or JOURNAL_INPUT not in workerinput:
        return None
    return WorkerJournal(Path(workerinput[JOURNAL_INPUT]), str(workerinput.get("workerid", "worker")))
