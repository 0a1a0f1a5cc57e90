"""What to do next about a promise that failed or was not checked: one remedy class, with the evidence that points
there. Operators of fleets ask exactly this: a health check that blames the GPUs where the image was at fault
sends boards back that were never broken.

The classes, from the cheapest to the dearest:

- SOFTWARE: software or configuration (the driver, the image, a setting, the profile itself);
- RERUN: rerun (noise, an interrupted run, evidence that could not be read: nothing says the hardware is at fault);
- RESET: reset or reboot (a GPU that asks for one: rows pending remapping, a link trained down, a GPU off the bus);
- RESEAT: reseat or recable (a link, a bridge, a riser or a slot: PCIe width, NVLink count, signal-integrity errors);
- RMA: return to the vendor (the board computes wrong results, fails its memory test, cannot remap a row).

Each check's evidence is read by the rule its kind declares (kinds/, ``CheckRule.remedy``): its expected and found
figures, never its message. Where one piece of evidence fits two classes the cheapest it supports is taken (a low HBM
bandwidth is a reset before it is a return); where a promise holds several pieces (a burn-in with wrong results and
NVLink replays), the dearest stands: the cheaper remedies would not mend what it shows. Plain functions of plain
data, as ``CheckResult.to_dict()`` and the results document give them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .kinds import check_rule
from .kinds.topology import missing_gpu
from .remedy_classes import CLASSES, RERUN, RESET, SOFTWARE, Remedy
from .remedy_rules import Context, _first, _lead, _watchdog, _window
from .verdict import HEALTH_WATCHDOG

# --- the mapping ------------------------------------------------------------------------------------------------


def remedy_of_check(check: dict, ctx: Context | None = None) -> Remedy | None:
    """(class, why) of one check record (``CheckResult.to_dict()``, as the results hold it): a failure by its kind's
    rule (kinds/), the dearest where its evidence holds several faults; a record the evidence could not judge is a
    rerun with what it lacked; None for a pass. ``ctx``: the run around it (health, platform findings, site kinds)."""
    ctx = ctx or Context()
    verdict = check.get("verdict")
    if verdict in ("not checked", "unknown"):
        return RERUN, f"the evidence could not show it ({_first(check.get('message'))}): record or measure it again"
    if verdict != "failed":
        return None
    rule = _rule_of(str(check.get("name", "")), ctx.site_kinds)
    if rule is None:  # a check of a user's own or another plugin's: nothing known of its evidence
        return RERUN, f"{_lead(check)}: no rule reads this check's evidence; its message says what failed"
    found = rule(check, ctx)
    return _dearest(found if isinstance(found, list) else [found])


def _rule_of(name: str, site_kinds: tuple) -> Callable | None:
    """The remedy rule of a check name: its kind's (kinds/: shipped, then the site's), None for a check no kind
    declares (a user's own)."""
    declared = check_rule(name, site_kinds)
    return declared.remedy if declared is not None else None


def remedy_of_promise(promise: dict, ctx: Context) -> Remedy | None:
    """(class, why) of a promise of a results document (``promises``), or None for one that passed or was waived.

    A failed promise: its failed checks and the health windows of its tests, the dearest; one failed without either
    (a measurement that broke off, a GPU missing) by what the run shows. A promise not checked: the software where
    its suite could not be collected, its test broke or the machine could not be read; else a rerun, naming why."""
    outcome, tests = promise.get("outcome"), list(promise.get("tests") or [])
    reason = _first(promise.get("reason"))
    checks = [c for t in tests for c in ctx.checks.get(t, [])]
    if outcome == "failed":
        found = [r for c in checks if c.get("verdict") == "failed" and (r := remedy_of_check(c, ctx))]
        found += [r for t in tests for r in _window((ctx.health.get("tests") or {}).get(t) or {}, ctx)]
        if promise.get("id") == HEALTH_WATCHDOG:
            found += _watchdog(ctx) or [(RESET, f"the watchdog saw forbidden counters rise outside any test ({reason})"
                                                ": reset the GPUs and run again")]
        missing = None if found else missing_gpu(ctx)
        if missing:
            found.append((missing[0], f"its GPU is missing: {missing[1]}"))
        return _dearest(found) if found else (SOFTWARE, f"its test failed without a measurement to judge ({reason}): "
                                                        "the error names what to mend in the software first")
    if outcome != "not checked":
        return None
    suite = ctx.suites.get(promise.get("id", ""))
    if promise.get("id") in ctx.collection_errors or (
            not tests and suite and any(nodeid.endswith(suite) for nodeid in ctx.collection_errors)):
        return SOFTWARE, f"{reason}: the image lacks what its tests import"
    if ctx.machine_error and ctx.machine_error in str(promise.get("reason")):
        return SOFTWARE, f"the machine could not be read ({_first(ctx.machine_error)}): the driver"
    if any(ctx.tests.get(t) == "error" for t in tests):
        missing = missing_gpu(ctx)
        if missing:
            return missing[0], f"its GPU is missing: {missing[1]}"
        return SOFTWARE, f"{reason}: the software around the measurement, not the machine, failed"
    if not tests:
        return RERUN, f"no test judged it ({reason}): run the acceptance whole"
    if any(c.get("verdict") in ("not checked", "unknown") for c in checks):
        return RERUN, f"the evidence could not show it ({reason}): record or measure it again with what that names"
    return RERUN, f"{reason}: run it again with what that names (the tool, the bundle's file)"


def annotate(document: dict, findings_of: Callable[[], Sequence[str]] = list, site_kinds: tuple = ()) -> dict:
    """Each failed or not-checked promise of a results document gains ``remedy``: {"class", "why"}; returns the
    document. ``findings_of``: the run's platform findings (checks/platform.bandwidth_findings), asked for only
    when a bandwidth fell short; ``site_kinds``: the kinds a site's plugin added, whose rules read its checks."""
    ctx = Context.of(document, findings_of, site_kinds)
    for promise in document.get("promises") or []:
        found = remedy_of_promise(promise, ctx)
        if found is not None:
            promise["remedy"] = {"class": found[0], "why": found[1]}
    return document


def remedies_by_class(promises: Sequence[dict]) -> dict[str, dict]:
    """A node's failed promises by remedy class, cheapest first: {class: {"promises": [ids], "why": the first's}}
    (the fleet's view of a node; results without remedies give {})."""
    out: dict[str, dict] = {}
    for promise in promises:
        remedy = promise.get("remedy") if isinstance(promise, dict) else None
        if promise.get("outcome") != "failed" or not isinstance(remedy, dict) or remedy.get("class") not in CLASSES:
            continue
        entry = out.setdefault(remedy["class"], {"promises": [], "why": str(remedy.get("why") or "")})
        entry["promises"].append(str(promise.get("id")))
    return {cls: out[cls] for cls in CLASSES if cls in out}


def _dearest(found: list[Remedy]) -> Remedy:
    return max(found, key=lambda remedy: CLASSES.index(remedy[0]))
