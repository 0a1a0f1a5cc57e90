"""The results document (reports/gpufabric-results.json) as a pure function: what the run's session knows
(RunFacts) and what the recorder collected from the test reports (ReportedOutcomes) in, the document out.

Its shape is ``results.schema.json`` (the tests validate every document they produce against it). The session
gathers its facts (FabricSession.run_facts), the recorder adds who ran it, the evidence and the integrity block
(recorder.py); nothing here reads a clock, a file or the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..checks.platform import bandwidth_findings
from ..errors import GpuFabricError
from ..kinds.platform import PLATFORM_FACTS
from ..remedy import annotate
from ..verdict import EXIT_CODES, HEALTH_WATCHDOG, Waiver, build_promises, judge, record_rows
from ..verdict import counts as promise_counts
from .results import RESULTS_SCHEMA_VERSION, nccl_versions

if TYPE_CHECKING:
    from ..catalogue import PromiseList
    from ..fabric.model import Fabric
    from ..profile.model import Profile


@dataclass(frozen=True)
class RunFacts:
    """What the run's session knows when a document is written (FabricSession.run_facts)."""

    run_id: str
    started_at: str
    mode: str  # live or replay
    replay: str | None
    host: str
    user: str | None
    fleet_id: str | None
    profile: Profile | None
    promises: PromiseList | None  # the promises to judge; None without a profile
    waivers: list[Waiver]
    fabric: Fabric | None  # the machine read; None where it could not be
    machine_error: str | None  # why it could not be read
    measurements: Mapping[str, Any]  # measurement name -> what it measured, or the GpuFabricError that stopped it
    checks: list[dict]  # the check records (records.record)
    health: dict  # the watchdog's record
    burn_in: dict | None  # the burn-in as the results carry it; None where the run has none
    site_kinds: tuple = ()  # the kinds a site's plugin added: their rules read their checks (remedy.annotate)


@dataclass(frozen=True)
class ReportedOutcomes:
    """What the recorder read from the test reports, by test node id, and why promises went unjudged."""

    outcomes: dict[str, str] = field(default_factory=dict)  # passed, failed, skipped or error
    skip_reasons: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)  # seconds, set-up + call + teardown
    promise_ids: dict[str, str] = field(default_factory=dict)  # the promise each test judged
    messages: dict[str, str] = field(default_factory=dict)  # why a test failed or broke
    not_run: dict[str, str] = field(default_factory=dict)  # promise id -> why no test judged it
    collection_errors: dict[str, str] = field(default_factory=dict)  # node id -> why it could not be collected


#: pytest's exit statuses of a run that did not get to its end
_CUT_SHORT = {2: "the run was interrupted", 3: "pytest hit an internal error", 4: "the run stopped on a usage error"}


def results_document(facts: RunFacts, tests: ReportedOutcomes, exitstatus: int, finished_at: str | None) -> dict:
    """The JSON results: machine, profile, each check, each promise's outcome, and the verdict a customer signs.

    The promises come from the profile (``promised``, catalogue.py), not from the tests that ran, and each is
    judged by its check records alone (verdict.py). While the run goes on (``finished_at`` None) the document has
    no end time and the verdict INCOMPLETE: what a crash or a power loss leaves on disk says so, with everything
    measured until then."""
    finished = finished_at is not None
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    for outcome in tests.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    rows = [(nodeid, tests.promise_ids.get(nodeid), outcome,
             tests.skip_reasons.get(nodeid, "") if outcome == "skipped" else
             ("the test broke: " if outcome == "error" else "") + tests.messages.get(nodeid, ""))
            for nodeid, outcome in tests.outcomes.items()]
    rows += [(nodeid, None, "error", f"could not be collected: {message}")
             for nodeid, message in tests.collection_errors.items()]
    findings = facts.health.get("findings") or []
    if findings:  # forbidden counters that rose where no test could be failed for them (watchdog.py)
        rows.append((HEALTH_WATCHDOG, None, "failed", "health: " + "\n".join(findings)))
    promise_list = facts.promises if facts.profile is not None else None
    if promise_list is not None:  # each promise of the list judged by its check records alone (verdict.py)
        rows = record_rows(rows, facts.checks, promise_list.ids(), facts.waivers)
    promises = build_promises(rows, promise_list.ids() if promise_list else None, dict(tests.not_run))
    scope = promise_list.scope if promise_list else ""
    if facts.profile is None:
        verdict, reason = None, "no profile: nothing was promised"
    else:
        unfinished = (_CUT_SHORT.get(exitstatus) if finished else
                      f"the run had not finished when this was written ({len(tests.outcomes)} test(s) reported)")
        verdict, reason = judge(promises, facts.machine_error, unfinished)
        if scope:
            reason += f"; {scope}: {'; '.join(promise_list.to_json()['left_out_why'].values())}"
    profile = facts.profile
    document = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "plugin_version": __version__,
        "started_at": facts.started_at,
        "finished_at": finished_at,
        "run": {"id": facts.run_id, "mode": facts.mode, "replay": facts.replay, "host": facts.host,
                "user": facts.user, "fleet_id": facts.fleet_id},
        "profile": None if profile is None else {
            "name": profile.name, "path": str(profile.path), "sha256": profile.sha256, "data": profile.data,
        },
        "machine": None if facts.fabric is None else machine_summary(facts.fabric),
        "software": {"nccl": nccl_versions(facts.measurements)},
        "machine_error": facts.machine_error,
        "checks": facts.checks,
        "tests": tests.outcomes,
        "skip_reasons": dict(tests.skip_reasons),
        "durations": {nodeid: round(seconds, 6) for nodeid, seconds in tests.durations.items()},
        "promised": promise_list.to_json() if promise_list else None,
        "promises": [p.to_dict() for p in promises],
        "not_run": {p.id: p.reason for p in promises if not p.tests and p.outcome == "not checked"},
        "collection_errors": dict(tests.collection_errors),
        "waivers": [{"promise": w.promise, "reason": w.reason, "source": w.source,
                     "matched": [p.id for p in promises if p.outcome == "waived" and w.matches(p.id)]}
                    for w in facts.waivers],
        "summary": {**counts, "promises": promise_counts(promises), "verdict": verdict, "verdict_reason": reason,
                    "scope": scope, "exit_code": EXIT_CODES.get(verdict) if verdict else None},
        # the watchdog's record (live runs): per test the counters that rose, the timeline, XID events
        "health": facts.health,
        **({"burn_in": facts.burn_in} if facts.burn_in is not None else {}),
    }

    # each failed or not-checked promise says what to do next, from its checks and the run's health
    return annotate(document, lambda: platform_findings(facts.measurements), facts.site_kinds)


def platform_findings(measurements: Mapping[str, Any]) -> list[str]:
    """What in the platform explains a low bandwidth (checks/platform.bandwidth_findings), where the run read the
    platform (a failed bandwidth check reads it; nothing is read for this)."""
    platform = measurements.get(PLATFORM_FACTS.name)
    if platform is None or isinstance(platform, GpuFabricError):
        return []

    return bandwidth_findings(platform)


def machine_summary(fabric: Fabric) -> dict:
    """The machine as the results carry it (``machine`` in results.schema.json)."""
    return {
        "source": fabric.source,
        "hostname": fabric.hostname,
        "driver_version": fabric.driver_version,
        "cuda_driver_version": fabric.cuda_driver_version,
        "gpus": [
            {
                "index": g.index, "name": g.name, "uuid": g.uuid, "serial": g.serial, "pci_bus_id": g.pci_bus_id,
                "memory_bytes": g.memory_bytes, "vbios_version": g.vbios_version,
                "compute_capability": g.compute_capability,
                "pcie": {"gen_max": g.pcie_gen_max, "gen_current": g.pcie_gen_current,
                         "width_max": g.pcie_width_max, "width_current": g.pcie_width_current},
                "ecc_mode": g.ecc_mode, "nvlinks_active": None if g.nvlinks is None else len(g.active_nvlinks()),
                "nvlink_speed_gbps": _slowest_link(g),
            }
            for g in fabric.gpus
        ],
        "nics": [{"label": n.label, "device": n.device} for n in fabric.nics],
        "matrix": fabric.matrix,
        "cpu_affinity": fabric.cpu_affinity,
        "numa_affinity": fabric.numa_affinity,
        "provenance": fabric.provenance,
        "damaged": fabric.damaged,
    }


def _slowest_link(gpu) -> float | None:
    """The slowest active NVLink's speed (GB/s per direction), None where no link or speed is recorded."""
    speeds = [link.speed_gbps for link in gpu.active_nvlinks() or [] if isinstance(link.speed_gbps, (int, float))]
    return min(speeds) if speeds else None
