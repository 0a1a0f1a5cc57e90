"""pytest-html sections: the customer's acceptance report.

At the top of the report (moved above pytest-html's Environment table): a cover with the verdict and its reason,
the customer, the system (hostname, DMI serials where recorded), the evidence (live, or the replay of a bundle named
by its name) with the date the machine was measured, the profile and its sha256, the operator, the tool's version and
every GPU's identity; then one row per promise in words and units (expected, found, margin, result; the whole record
one click away), the plots (inline SVG, drawn from the results), the inventory and topology, health, the burn-in,
the skipped checks, and the digests and signature of the results.

The page is drawn from the results document the run wrote (reports/gpufabric-results.json, signed where
--gpu-sign-key was given), so the report and the JSON say the same thing, and the document itself is embedded in
the page for ``gpufabric verify``. Registered only when pytest-html is active (its hooks are unknown otherwise).

cover.py, promise_rows.py and sections.py prepare plain data (str, numbers, lists, dicts); the Jinja2 templates in
templates/ lay it out with autoescaping on, so whatever a bundle, a profile, the customer or the machine says (a
hostname, a GPU's name, a serial, a message) is text: a GPU named ``<script>...`` shows as that name and never runs.
"""

from __future__ import annotations

import json
import os
import re
from html import escape
from pathlib import Path

from .cells import _relative_paths
from .cover import cover_data
from .figures import report_figures
from .html_signing import embed_results_json, sign_html
from .promise_rows import promise_rows
from .provenance import bundle_name, display_path
from .recorder import RunRecorder, skip_reason
from .render import render, trusted
from .sections import burn_in_data, health_data, integrity_data, inventory_data, skipped_data, topology_data

REPORT_ID = "gpufabric-report"


def add_environment(config, fabric_session) -> None:
    """Machine and profile facts for pytest-html's Environment table (via pytest-metadata).

    pytest-html 4.x draws that table in the browser, each value through innerHTML (`<div>${value}</div>` in its
    app.js): a value is HTML there. So where pytest-html writes a report (--html), the values are stored escaped
    (<, > and &; text without them is unchanged) and a GPU or host named with markup shows as its name. Otherwise
    they stay plain text (pytest-metadata's -v header, its JUnit properties). Paths are shown relative to where
    pytest was started, or by name: never a local absolute path."""
    try:
        from pytest_metadata.plugin import metadata_key
    except ImportError:
        return
    if metadata_key not in config.stash:
        return

    base = config.invocation_params.dir
    facts: dict[str, str] = {}
    customer = fabric_session.options.customer
    if customer:
        facts["Customer"] = customer
    profile = fabric_session.profile
    if profile is not None:
        facts["GPU profile"] = f"{profile.name} ({display_path(str(profile.path), base)})"
        facts["GPU profile sha256"] = profile.sha256
    fabric = fabric_session.fabric
    if fabric is not None:
        facts["Machine source"] = (f"bundle {bundle_name(fabric_session.replay, fabric_session.bundle_dir)}"
                                   if fabric_session.replay else fabric.source)
        facts["NVIDIA driver"] = str(fabric.driver_version or "not recorded")
        facts["CUDA driver"] = str(fabric.cuda_driver_version or "not recorded")
        facts["GPUs"] = ", ".join(f"{g.label} {g.name or '?'} (serial {g.serial or '?'})" for g in fabric.gpus)
    elif fabric_session.discovery_error is not None:
        facts["Machine"] = _relative_paths(str(fabric_session.discovery_error), base)
    as_html = config.pluginmanager.hasplugin("html") and bool(config.getoption("htmlpath", None))
    config.stash[metadata_key].update({key: escape(str(value), quote=False) if as_html else str(value)
                                       for key, value in facts.items()})


# --- the whole section ----------------------------------------------------------------------------------


def report_html(document: dict, *, fabric=None, expected_matrix: dict | None = None, customer: str | None = None,
                nccl: list[str] | None = None, base: Path | None = None, embed: bool = True,
                site_kinds: tuple = ()) -> str:
    """The report's sections (a fragment pytest-html's page holds) for a results document; ``fabric``: the
    machine read (its inventory and topology), None where it could not be read; ``site_kinds``: the kinds a site's
    plugin added to the run (their checks' phrases)."""
    nccl = nccl if nccl is not None else list((document.get("software") or {}).get("nccl") or [])
    error = document.get("machine_error")
    inventory = inventory_data(fabric) if fabric is not None else {"error": error or "not read"}
    topology = topology_data(expected_matrix or {}, fabric.matrix) if fabric is not None else {"rows": []}
    replay = (document.get("run") or {}).get("mode") == "replay"
    return render(
        "report.html.j2", page=False, page_id=REPORT_ID, css_class="", title="GPU acceptance report",
        cover=cover_data(document, customer, nccl, base), promises=promise_rows(document, base, site_kinds),
        figures=report_figures(document), inventory=inventory, topology=topology,
        health=health_data(document.get("health") or {}, replay), burn_in=burn_in_data(document.get("burn_in"), base),
        skipped=skipped_data(document.get("skip_reasons") or {}, document.get("tests") or {}, base),
        integrity=integrity_data(document),
        results_json=trusted(embed_results_json(document)) if embed and document.get("integrity") else "")


# --- pytest-html ----------------------------------------------------------------------------------------


def _report_path(config) -> Path | None:
    """Where pytest-html writes the report (as it works it out: the --html path below the working folder)."""
    path = config.getoption("htmlpath", None)
    if not path:
        return None
    return Path.cwd() / Path(os.path.expandvars(path)).expanduser()


class HtmlSections:
    """pytest-html hook implementations, bound to the run's FabricSession and its RunRecorder (recorder.py), whose
    results document the page shows."""

    def __init__(self, fabric_session, recorder: RunRecorder) -> None:
        self.fabric_session = fabric_session
        self.recorder = recorder
        self.written = False
        self.last_report: bytes | None = None  # the page an earlier run left, read where this run judged nothing

    def pytest_html_report_title(self, report) -> None:
        profile = self.fabric_session.profile
        report.title = f"GPU acceptance report: {profile.name}" if profile else "GPU fabric report"

    def pytest_html_results_table_row(self, report, cells) -> None:
        """pytest-html's results table: a test by its file and name, not the path the suites were loaded from."""
        for index, cell in enumerate(cells):
            if 'class="col-testId"' in cell:
                inner = _unescape(re.sub(r"^<td[^>]*>|</td>$", "", cell))
                cells[index] = f'<td class="col-testId">{escape(_relative_paths(inner, self._base))}</td>'

    def pytest_html_results_table_html(self, report, data) -> None:
        """A skipped test's log is its reason, not pytest's raw (path, line, reason) tuple; local paths in any log
        are written relative."""
        base = self._base
        if report.skipped:
            data[:] = [escape(f"Skipped: {_relative_paths(skip_reason(report), base)}") + "\n"]
            return
        data[:] = [escape(_relative_paths(_unescape(part), base)) for part in data]

    @property
    def _base(self) -> Path | None:
        return getattr(self, "_invocation_dir", None)

    def pytest_sessionstart(self, session) -> None:
        self._invocation_dir = session.config.invocation_params.dir

    def pytest_sessionfinish(self, session) -> None:
        """After the recorder (tryfirst) said whether the run judged anything, before pytest-html (trylast) writes
        this run's page: the last run's page is read where it is to be put back."""
        path = _report_path(session.config)
        if not self.recorder.nothing_judged or path is None:
            return
        try:
            self.last_report = path.read_bytes()
        except OSError:
            self.last_report = None
        _silence_html_summary(session.config)


    def _document(self, session) -> dict:
        """The results document the run wrote; what the session knows where it could not be read."""
        path = self.recorder.results_path
        if path is not None:
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
        # the results are on no disk (a full report folder): the page says so, and shows no verdict of its own
        profile, error = self.fabric_session.profile, self.fabric_session.discovery_error
        unwritten = self.recorder.write_error or "the run wrote no results"
        software = (self.recorder.document or {}).get("software") or {}
        return {"profile": None if profile is None else {"name": profile.name, "path": str(profile.path),
                                                         "sha256": profile.sha256},
                "run": {"mode": self.fabric_session.mode, "replay": self.fabric_session.replay},
                "machine_error": None if error is None else str(error), "checks": self.fabric_session.results,
                "software": software,
                "summary": {"verdict": None, "verdict_reason": f"no verdict: {unwritten}, so this page has no "
                                                               "verdict to show; rerun where the report folder "
                                                               "can be written"}}

    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        document = self._document(session)
        fabric = self.fabric_session.fabric
        nccl = (document.get("software") or {}).get("nccl") or []
        profile = self.fabric_session.profile
        if fabric is None and not document.get("machine_error") and self.fabric_session.discovery_error:
            document["machine_error"] = str(self.fabric_session.discovery_error)
        prefix.append(report_html(document, fabric=fabric, expected_matrix=profile.matrix if profile else {},
                                  customer=self.fabric_session.options.customer, nccl=list(nccl),
                                  base=session.config.invocation_params.dir,
                                  site_kinds=self.fabric_session.site_kinds))
        self.written = True  # pytest-html writes it unescaped (`{{ p|safe }}`)

    def pytest_unconfigure(self, config) -> None:
        """After pytest-html wrote the page: its integrity block (signed with --gpu-sign-key). A run that judged
        nothing leaves the page of the last run as it was, as it leaves that run's results."""
        path = _report_path(config)
        if not self.written or path is None or not path.is_file():
            return
        if self.recorder.nothing_judged:
            _put_back(path, self.last_report)
            return
        try:
            sign_html(path, self.recorder.sign_key)
        except OSError as exc:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"gpufabric: could not sign {path}: {exc.strerror or exc}", red=True)


def _put_back(path: Path, earlier: bytes | None) -> None:
    """The page an earlier run wrote back in place of this run's (replaced whole), or none where there was none."""
    try:
        if earlier is None:
            path.unlink()
            return
        spare = path.with_name(f".{path.name}.{os.getpid()}")
        spare.write_bytes(earlier)
        os.replace(spare, path)
    except OSError:
        pass  # this run's page stays: it says it judged nothing


def _unescape(text: str) -> str:
    from html import unescape

    return unescape(text)


def _silence_html_summary(config) -> None:
    """No "Generated html report" line for a run that judged nothing: its page is put back as the last run's.
    pytest-html's own sessionfinish still runs (pluggy calls the hook's implementations as they were when it
    began); its terminal summary, a later call, no longer does."""
    from pytest_html.basereport import BaseReport

    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, BaseReport):
            config.pluginmanager.unregister(plugin)
