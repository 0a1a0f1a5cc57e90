"""How each check's evidence points to a remedy class (remedy_classes.py): the run around a check (``Context``), one
rule per check name (``RULES``) reading the check's expected and found figures, never its message, and the rules
of the health windows. remedy.py maps a check or a promise through them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from .checks.power import REASON_MEANING
from .checks.result import is_measurement
from .checks.topology import matrix_cause, matrix_differences
from .fabric.health import COUNTERS, DEFAULT_FORBIDDEN, DEFAULT_FORBIDDEN_THROTTLE
from .remedy_classes import (
    CLASSES,
    COUNTER_REMEDY,
    RERUN,
    RESEAT,
    RESET,
    RMA,
    SOFTWARE,
    THROTTLE_REMEDY,
    XID_REMEDY,
    Remedy,
)
from .report.phrases import number, short
from .units import format_bytes, memory_as_sold
from .units import is_number as _number

# --- what the run knows beside one check ------------------------------------------------------------------------


@dataclass
class Context:
    """The run around a check: its other records, health, platform findings and profile. Built from a results
    document (``Context.of``); an empty one judges a check record on its own."""

    checks: dict[str, list[dict]] = field(default_factory=dict)  # test node id -> its check records
    tests: dict[str, str] = field(default_factory=dict)  # test node id -> pytest outcome
    health: dict = field(default_factory=dict)  # the watchdog's record (live runs)
    section: dict = field(default_factory=dict)  # the profile's health: section
    collection_errors: dict[str, str] = field(default_factory=dict)
    suites: dict[str, str] = field(default_factory=dict)  # promise id -> the suite file that judges it
    machine_error: str | None = None
    findings_of: Callable[[], Sequence[str]] = list  # checks/platform.bandwidth_findings of the run, when asked

    @classmethod
    def of(cls, document: dict, findings_of: Callable[[], Sequence[str]] = list) -> Context:
        checks: dict[str, list[dict]] = {}
        for check in document.get("checks") or []:
            if is_measurement(check):  # a record without a measurement: the promise's reason says it
                checks.setdefault(str(check.get("test")), []).append(check)
        promised = (document.get("promised") or {}).get("promised") or []
        return cls(checks, dict(document.get("tests") or {}), document.get("health") or {},
                   ((document.get("profile") or {}).get("data") or {}).get("health") or {},
                   dict(document.get("collection_errors") or {}),
                   {p["id"]: p.get("suite", "") for p in promised if isinstance(p, dict) and "id" in p},
                   document.get("machine_error"), findings_of)

    @cached_property
    def findings(self) -> list[str]:
        return list(self.findings_of())

    @cached_property
    def forbidden(self) -> set[str]:  # the counters the profile forbids to rise
        return set(self.section.get("forbid", DEFAULT_FORBIDDEN))

    @cached_property
    def forbidden_throttle(self) -> set[str]:  # the clock-event reasons it forbids
        return set(self.section.get("forbid_throttle", DEFAULT_FORBIDDEN_THROTTLE))

    @cached_property
    def xid_codes(self) -> dict[int, list[int]]:
        """GPU index -> the XID codes the driver reported during the run."""
        codes: dict[int, list[int]] = {}
        for event in self.health.get("xid_events") or []:
            if isinstance(event, dict) and isinstance(event.get("gpu"), int) and isinstance(event.get("xid"), int):
                codes.setdefault(event["gpu"], []).append(event["xid"])
        return codes

    @cached_property
    def link_errors(self) -> dict[int, str]:
        """GPU index -> the NVLink replay or recovery count that rose on it during the run (a link retrained)."""
        rises: dict[int, str] = {}
        for window in (w for w in (self.health.get("tests") or {}).values() if isinstance(w, dict)):
            for index, record in ((i, r) for i, r in window.items() if str(i).isdigit() and isinstance(r, dict)):
                for name, delta in (record.get("rose") or {}).items():
                    if _base(name) in ("nvlink_replay", "nvlink_recovery"):
                        rises.setdefault(int(index), f"{_base(name)} rose by {delta}")
        return rises

    @cached_property
    def missing_gpu(self) -> Remedy | None:
        """The GPU count's remedy where it failed with fewer GPUs than promised: every test of a missing GPU fails or
        breaks for that, and no other remedy mends it."""
        for check in (c for records in self.checks.values() for c in records):
            found, expected = check.get("found"), check.get("expected")
            if check.get("name") == "gpu-count" and check.get("verdict") == "failed" and _number(found) \
                    and _number(expected) and found < expected:
                return _gpu_count(check, self)
        return None


# --- the rules, one per check name ------------------------------------------------------------------------------

Rule = Callable[[dict, Context], Remedy]


def _fixed(cls: str, because: str) -> Rule:
    """A rule whose class is the same whatever the figures: the check's own first sentence, then ``because``."""
    return lambda check, ctx: (cls, f"{_lead(check)}: {because}")


def _gpu_count(check: dict, ctx: Context) -> Remedy:
    expected, found = check.get("expected"), check.get("found")
    if _number(found) and _number(expected) and found > expected:
        return SOFTWARE, (f"{found} GPUs where the profile promises {expected}: the profile describes another "
                          "machine; judge it against its own")
    fell_off = [f"GPU{gpu}" for gpu, codes in ctx.xid_codes.items() if 79 in codes]
    if fell_off:
        return RESET, (f"{found} of the {expected} GPUs promised answer, and the driver reported XID 79 (fell off the "
                       f"bus) for {', '.join(fell_off)}: a reset brings it back; reseat it if it falls off again")
    return RESEAT, (f"{found} of the {expected} GPUs promised answer: a board that is not on the bus is reseated "
                    "first (its slot, riser and power cables)")


def _gpu_memory(check: dict, ctx: Context) -> Remedy:
    expected, found = check.get("expected"), check.get("found")
    if memory_as_sold(expected, found) is not None:
        return SOFTWARE, (f"{check.get('subject')} has {format_bytes(found)}, all of the {expected >> 30} GB it is "
                          "sold as: the profile promises GiB where the board is sold in GB; write the promise as sold")
    # fewer bytes than any unit explains: a board of another SKU than sold (the vendor's to exchange)
    return RMA, (f"{check.get('subject')} has {format_bytes(found) if _number(found) else found} of the "
                 f"{format_bytes(expected) if _number(expected) else expected} promised: a board of another SKU than "
                 "sold")


def _matrix(check: dict, ctx: Context) -> Remedy:
    cells = matrix_differences(check.get("expected") or {}, check.get("found") or {})
    if not cells:
        return RERUN, f"{_lead(check)}: the record does not show which cells differ; run it again"
    row, col, want, seen = cells[0]
    points = {"MISSING": "a device the profile names is not on the bus: reseat it",
              "NV_COUNT": "fewer NVLinks than sold between them: a bridge or cable not fully seated",
              "NV_TO_PCIE": "the pair talks over PCIe where NVLinks were sold: a missing or unseated NVLink bridge",
              "PCIE": "another PCIe path than sold: the cards sit in other slots, or behind another riser"}
    more = f" (and {len(cells) - 1} more cell(s))" if len(cells) > 1 else ""
    return RESEAT, (f"{row}-{col}: expected {want}, found {seen if seen is not None else 'no such device'}{more}: "
                    f"{points[matrix_cause(want, seen)]}")


def _nvlinks(check: dict, ctx: Context) -> Remedy:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    who, count, want = check.get("subject"), found.get("active_links"), expected.get("links_per_gpu")
    inactive = found.get("inactive") or []
    fewer = _number(count) and _number(want) and count < want
    if fewer or inactive:
        what = (f"{count} active NVLinks of {want}" if fewer else "") + (", " if fewer and inactive else "") + (
            f"link(s) {', '.join(map(str, inactive))} inactive" if inactive else "")
        errors = ctx.link_errors.get(_gpu_index(who))
        if errors:
            return RESET, f"{who}: {what}, after its {errors}: links trained down after errors; a reset retrains them"
        return RESEAT, f"{who}: {what}: a bridge or cable not seated"
    if found.get("slow"):
        return RESET, (f"{who}: link(s) {', '.join(map(str, found['slow']))} trained below the promised speed: a reset "
                       "retrains them; reseat the bridge if they train low again")
    if _number(count) and _number(want) and count > want:
        return SOFTWARE, f"{who}: {count} active NVLinks where the profile promises {want}: another machine's profile"
    return SOFTWARE, f"{_lead(check)}: the NVLink layout differs from the profile's (NVSwitch or direct links)"


def _bandwidth(check: dict, ctx: Context) -> Remedy:
    """burn-in-collectives' remedy: a collective's (kinds/bandwidth.py), until the burn-in family binds it there
    (``bandwidth_rule(its limits reader)``); its limits wherever they are declared, kinds/ or checks/limits."""
    from .kinds import record_limits as declared_limits  # the rule moved up with its kind; this entry follows it
    from .kinds.bandwidth import bandwidth_remedy

    return bandwidth_remedy(check, ctx, declared_limits(check))


def _pattern(check: dict, ctx: Context) -> Remedy:
    who, found = check.get("subject"), check.get("found") or {}
    planted = " (planted by --plant-fault: it proves the check, not the board)" if found.get("planted") else ""
    if _number(found.get("mismatches")) and found["mismatches"] > 0:
        return RMA, f"{who}: {found['mismatches']} word(s) read back other than written: failing device memory{planted}"
    if found.get("error"):
        return RESET, (f"{who}: the memory test stopped with a device error ({_first(found['error'], 120)}): reset it "
                       f"and test again; a board that fails again goes back{planted}")
    return RERUN, f"{_lead(check)}: too little memory was free to test (another process held it): test it again"


def _power(check: dict, ctx: Context) -> list[Remedy]:
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found") or {}
    reasons = found.get("reasons_seen") or {}
    out = [(THROTTLE_REMEDY.get(r, RESEAT), f"{who}: {r} in {reasons[r]:.0%} of the samples under load "
            f"({REASON_MEANING.get(r, r)})") for r in expected.get("forbidden_reasons") or []
           if _number(reasons.get(r)) and reasons[r] > 0]
    hottest, ceiling = found.get("temperature_c_max"), expected.get("max_temperature_c")
    if _number(hottest) and _number(ceiling) and hottest > ceiling:
        out.append((RESEAT, f"{who}: reached {hottest} C under load, above the {ceiling} C allowed: its cooling "
                            "(airflow, fans, a seated heat sink)"))
    floor = expected.get("min_sm_clock_mhz")
    at_limit, median = found.get("sm_clock_mhz_median_at_limit"), found.get("sm_clock_mhz_median")
    if _number(floor) and _number(at_limit) and at_limit < floor:
        out.append((SOFTWARE, f"{who}: SM clock {at_limit:.0f} MHz at its {found.get('power_limit_w')} W power limit, "
                              f"below the {floor:g} MHz promised: a power limit set lower than the profile assumes"))
    elif _number(floor) and at_limit is None and _number(median) and median < floor:
        out.append((RESET, f"{who}: SM clock {median:.0f} MHz without reaching its power limit, below the {floor:g} "
                           "MHz promised: the board holds its clocks itself; reset it, and return it if it stays"))
    if not out:
        out.append((RERUN, f"{_lead(check)}: slower under sustained load with no clock event or heat to explain it: "
                           "measure it once more"))
    return out


def _pcie_load(check: dict, ctx: Context) -> list[Remedy]:
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found") or {}
    out = []
    for part, unit in (("width", "x"), ("gen", "gen ")):
        low, want = found.get(f"{part}_min"), expected.get(part)
        if _number(low) and _number(want) and low < want:
            out.append((RESEAT, f"{who}: the link ran at {unit}{low} under load, below {unit}{want}: a card, riser, "
                                "cable or retimer that does not hold the link"))
    rise, allowed = found.get("replay_rise"), expected.get("max_replay_rise", 0)
    if _number(rise) and _number(allowed) and rise > allowed:
        out.append((RESEAT, f"{who}: the PCIe replay counter rose by {rise} during the copies: the link's signal is "
                            "marginal (riser, slot, retimer)"))
    if not out:
        out.append((RERUN, f"{_lead(check)}: copies below the floor on a link at full width and speed: measure once "
                           "more"))
    return out


def _burn_in(check: dict, ctx: Context) -> list[Remedy]:
    who, expected, found = check.get("subject"), check.get("expected") or {}, check.get("found")
    if not isinstance(found, dict):
        return [(SOFTWARE, f"{who}: took no part in the burn-in: the workload did not see the GPU (CUDA_VISIBLE_"
                           "DEVICES; a GPU off the bus shows in the GPU count)")]
    wrong = sum(found[k] for k in ("errors_self", "errors_cross") if _number(found.get(k)))
    out = []
    if wrong:
        out.append((RMA, f"{who}: {wrong} wrong element(s) in {found.get('checks')} cross-checks of its GEMM results: "
                         "the board computes wrong results"))
    forbidden = set(expected.get("forbidden_counters") or ctx.forbidden)
    out += _counters(found.get("counters_rose") or {}, forbidden, who, ctx.xid_codes.get(_gpu_index(who)))
    out += _heat(found.get("max_temperature_c"), found.get("clock_events") or [], who, ctx)
    floor, rate = expected.get("min_tflops"), found.get("tflops")
    if _number(floor) and _number(rate) and rate < floor and not out:
        if "sw_power_cap" in (found.get("clock_events") or []):
            out.append((SOFTWARE, f"{who}: {rate:.0f} TFLOP/s, below the {floor:g} promised, held at its power cap: "
                                  "a power limit set lower than the profile assumes"))
        else:
            out.append((RERUN, f"{who}: {rate:.0f} TFLOP/s, below the {floor:g} promised, with no clock event or heat "
                               "to explain it: burn it in once more"))
    if not out:
        out.append((RERUN, f"{who}: its figures hold no fault (the GEMM workload stopped?): burn it in once more"))
    return out


def _memory(check: dict, ctx: Context) -> Remedy:
    found = check.get("found")
    if check.get("name") == "memory-lms" and isinstance(found, dict) and found.get("outcome") == "completed":
        return RERUN, (f"{_lead(check)}: the offload completed, slower than allowed: the ratio moves from run to run "
                       "(docs/margins.md); measure it once more")
    return SOFTWARE, f"{_lead(check)}: the memory behaviour is the CUDA, PyTorch and driver stack's: the image"


#: check name (ending in "-": every check so named) -> its rule. The table a reader checks against the docs'
#: "What to do next" section (docs/acceptance-report.md)
RULES: dict[str, Callable[[dict, Context], Remedy | list[Remedy]]] = {
    "gpu-count": _gpu_count,  # fewer: RESEAT (RESET where XID 79 says it fell off the bus); more: SOFTWARE
    # the profile states what was sold: a board of another model is the vendor's to exchange (a profile of another
    # machine fails every board and every promise with them: the operator sees that before any remedy)
    "gpu-model": _fixed(RMA, "a board of another model than sold"),
    "gpu-memory": _gpu_memory,  # the GB a board is sold in, promised in GiB: SOFTWARE; fewer bytes: RMA
    "pcie-link": _fixed(RESEAT, "a card in a narrower or older slot, or a riser or retimer that limits the link"),
    "ecc-mode": _fixed(SOFTWARE, "a setting (nvidia-smi -e, then a reboot)"),
    "topology-matrix": _matrix,  # a device missing, fewer NVLinks, PHB where NV# was sold, another slot: RESEAT
    "nvlink-links": _nvlinks,  # fewer or inactive: RESEAT (RESET after link errors); slower: RESET
    "affinity": _fixed(SOFTWARE, "the BIOS's NUMA settings (NUMA per socket, sub-NUMA clustering)"),
    "platform-": _fixed(SOFTWARE, "a host setting, version or module"),
    "hbm-bandwidth": _fixed(RESET, "a memory clock held low or rows pending remapping clear on a reset; still low "
                                   "after it, the HBM stack is degraded and the board goes back"),
    "memory-pattern": _pattern,  # a word read back wrong: RMA; a device error: RESET; too little tested: RERUN
    "power-hold": _power,  # by the clock-event reasons (THROTTLE_REMEDY), the heat and the clock at the power limit
    "pcie-under-load": _pcie_load,  # narrower, slower or replaying under load: RESEAT
    "burn-in-gpu": _burn_in,  # wrong results: RMA; counters (COUNTER_REMEDY), heat, clock events; slow: RERUN
    "burn-in-collectives": _bandwidth,
    "burn-in-memory": _memory,
    "memory-": _memory,  # the stack's behaviour: SOFTWARE; a slow offload: RERUN
}


# --- health -----------------------------------------------------------------------------------------------------


def _counters(rose: dict, forbidden: set[str], who: str, xids: list[int] | None = None) -> list[Remedy]:
    """One remedy per forbidden counter that rose (links summed); an XID by its code where the driver gave it."""
    totals: dict[str, int] = {}
    for name, delta in rose.items():
        if _base(name) in forbidden and _number(delta):
            totals[_base(name)] = totals.get(_base(name), 0) + delta
    out = []
    for counter, total in sorted(totals.items()):
        cls = COUNTER_REMEDY.get(counter, RESET)
        if counter == "xid" and xids:
            cls = max((XID_REMEDY.get(code, RESET) for code in xids), key=CLASSES.index)
            out.append((cls, f"{who}: the driver reported XID {', '.join(map(str, sorted(set(xids))))}"))
            continue
        out.append((cls, f"{who}: {counter} rose by {total} ({COUNTERS.get(counter, counter)})"))
    return out


def _heat(hottest: object, seen: Sequence[str], who: str, ctx: Context) -> list[Remedy]:
    """The temperature above the profile's limit, and the clock-event reasons it forbids that were seen."""
    out = []
    limit = ctx.section.get("max_temperature_c")
    if _number(hottest) and _number(limit) and hottest > limit:
        out.append((RESEAT, f"{who}: reached {hottest} C, above the {limit} C allowed: its cooling (airflow, fans, a "
                            "seated heat sink)"))
    out += [(THROTTLE_REMEDY.get(r, RESEAT), f"{who}: clocks held back by {r} ({REASON_MEANING.get(r, r)})")
            for r in sorted(set(seen) & ctx.forbidden_throttle)]
    return out


def _window(window: dict, ctx: Context) -> list[Remedy]:
    """What a test's health window (fabric.health.window_record) shows that the profile forbids."""
    out = []
    for index, record in sorted((i, r) for i, r in window.items() if isinstance(r, dict)):
        who = f"GPU{index} (serial {record.get('serial') or 'unknown'})"
        gpu = int(index) if str(index).isdigit() else None
        out += _counters(record.get("rose") or {}, ctx.forbidden, who, ctx.xid_codes.get(gpu))
        out += _heat(record.get("peak_temperature_c", record.get("temperature_c")),
                     record.get("throttle_seen", record.get("throttle") or []), who, ctx)
    return out


def _watchdog(ctx: Context) -> list[Remedy]:
    """The forbidden counters the watchdog saw rise outside every test's window (its NVLink sweeps)."""
    return [remedy for rise in ctx.health.get("nvlink_rises") or [] if isinstance(rise, dict)
            for remedy in _counters({str(rise.get("counter")): rise.get("delta")}, ctx.forbidden,
                                    f"GPU{rise.get('gpu')} (serial {rise.get('serial') or 'unknown'})")]


# --- small helpers ----------------------------------------------------------------------------------------------


def _base(counter: str) -> str:
    return str(counter).split(":", 1)[0]


def _gpu_index(subject: object) -> int | None:
    """'GPU3 (serial 1654...)' -> 3: the label every per-GPU check's subject starts with."""
    match = re.match(r"GPU(\d+)\b", str(subject or ""))
    return int(match.group(1)) if match else None


def _first(text: object, limit: int = 240) -> str:
    """The first line of a reason, at most ``limit`` characters (ended at a word, with '…' where it was longer)."""
    return short(next((part.strip() for part in str(text or "").splitlines() if part.strip()), ""), limit)


def _lead(check: dict) -> str:
    """A check's first sentence (expected and found, before its usual causes), for a why."""
    message = next((part.strip() for part in str(check.get("message") or "").splitlines() if part.strip()), "")
    return _first(re.split(r"\.\s+(?=[A-Z])", message, maxsplit=1)[0].rstrip(".:"), 200)


def _shortfall(check: dict, limits: Sequence) -> tuple[float | None, str]:
    """(the worst figure as a share of its limit, 'busbw 297.4 GB/s below its 400 GB/s floor'), from ``limits``, the
    limits the record states (checks/limits.Limit); (None, 'short of its promise') where it states none."""
    worst = None
    for limit in limits:
        bound, value = limit.bound, limit.value
        if not (_number(bound) and _number(value)) or bound <= 0 or value <= 0:
            continue
        share = value / bound if limit.higher_is_better else bound / value
        if share < 1 and (worst is None or share < worst[0]):
            words = "below its" if limit.higher_is_better else "above its"
            worst = (share, f"{number(value, limit.unit)} {words} {number(bound, limit.unit)} "
                            f"{'floor' if limit.higher_is_better else 'limit'}")
    return worst if worst is not None else (None, "short of its promise")
