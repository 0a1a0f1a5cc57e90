"""The package's layers, lowest first: a module may import modules of its own layer and of the layers below it,
never of one above, and no import circle anywhere (tests/test_import_layers.py holds every import to this, those
under ``if TYPE_CHECKING:`` and inside functions too). A layer is a responsibility; docs/architecture.md says what
each holds and why it sits where it does.

Modules are named by their dotted path inside the package (``fabric.nvml``); a package by its own name (``fabric``,
its ``__init__.py``), the package's top ``__init__.py`` as ``__init__``. A pattern is a glob over those names
(``fabric.*``: every module below fabric/). Every module matches exactly one layer: a new module gets its place here.
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("__init__", "units", "errors", "paths", "verdict", "selection", "hookspecs", "option_values",
              "remedy_classes", "layers")),
    ("formats", ("formats", "formats.*", "evidence", "reference", "diagnostics", "diagnostics.*")),
    ("machine", ("fabric", "fabric.*", "workloads", "workloads.*", "nodehealth.record", "nodehealth.derive",
                 "nodehealth.arrival_record", "nodehealth.record_extra", "nodehealth.sxid_lines")),
    ("profile", ("profile", "profile.*")),
    ("checks", ("checks", "checks.*", "reference_judge", "reference_normal", "nodehealth.finding", "nodehealth.model",
                "nodehealth.passive", "nodehealth.arrival", "nodehealth.xid_catalog",
                "nodehealth.counters", "nodehealth.rdma_ports", "nodehealth.sxid", "nodehealth.sxid_catalog",
                "nodehealth.peer_memory",
                # the words and remedy helpers every kind phrases and judges its records with
                "report.phrases", "remedy_rules")),
    ("kinds", ("kinds", "kinds.*")),
    ("promises", ("measurements", "catalogue", "rejudge", "markers", "promise", "records", "session_key",
                  "parametrize", "watchdog")),
    ("report", ("report", "report.cells", "report.charts", "report.check_words", "report.cover", "report.figures",
                "report.finishing", "report.grouped", "report.html", "report.html_signing", "report.integrity",
                "report.metrics", "report.promise_rows", "report.provenance", "report.recorder", "report.render",
                "report.results", "report.results_document", "report.sections", "report.series", "report.signing",
                "report.versions", "remedy")),
    ("fleet", ("fleet", "fleet.*", "nodehealth", "nodehealth.baseline", "nodehealth.command", "nodehealth.output",
               "nodehealth.quick", "nodehealth.state", "nodehealth.metrics", "nodehealth.quick_gpus",
               "nodehealth.counter_history")),
    ("session", ("session", "run_options")),
    ("entry", ("plugin", "session_factory", "fixtures", "suites", "suites.*", "cli", "cli.*", "command", "__main__")),
)

#: patterns of a layer whose package is still to come (the promise kinds' registry): they may match no module yet
RESERVED = ("kinds", "kinds.*")
