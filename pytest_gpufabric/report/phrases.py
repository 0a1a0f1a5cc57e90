"""A check record in words and units, as the report's promise table shows it.

``Expected`` says the promise ("≥ 312 GB/s all_reduce busbw at 1 GiB"), ``Found`` the figure that decides it
("326.2 GB/s"), ``Margin`` how far that figure is from its limit; the whole record (every value the check found, its
message, its detail lines) goes under the row, one click away. Every check the suites make has a phrase here; a
record of another shape gets the generic one (``format_value``: keys and values, units from the key names), never a
Python repr. Nothing here is cut: where the table shows a short form, ``short`` ends it at a word.
"""

from __future__ import annotations

from ..units import format_bytes, is_na, is_number, parse_bytes, parse_gbps

GE, LE = "≥", "≤"


# --- numbers and generic values -------------------------------------------------------------------------


_SUFFIXES = (("_bytes", "bytes"), ("_gbps", "GB/s"), ("_gbit", "Gb/s"), ("_us", "µs"), ("_s", "s"),
             ("_mhz", "MHz"), ("_w", "W"), ("_c", "°C"))


def number(value: float, unit: str | None = None) -> str:
    """A quantity as text: bytes in binary units, others to 5 significant digits, the unit after a space."""
    if unit == "bytes":
        return format_bytes(int(value))
    if isinstance(value, int):
        text = f"{value:,}" if abs(value) >= 10_000 else str(value)
    else:
        text = f"{value:.5g}" if abs(value) < 1e5 else f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def rate(value: float, unit: str = "GB/s") -> str:
    """A bandwidth as the table shows it: one decimal ('326.2 GB/s')."""
    return f"{value:,.1f} {unit}"


def limit_rate(value: float, unit: str = "GB/s") -> str:
    """A floor as the profile states it: '312 GB/s' for a round number, else one decimal ('239.1 GB/s')."""
    return f"{value:,.0f} {unit}" if float(value).is_integer() else rate(value, unit)


def size_text(size: object) -> str:
    """1073741824 -> '1 GiB'; 1536 -> '1.50 KiB'."""
    try:
        size = parse_bytes(size)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(size)
    for unit, value in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= value:
            return f"{size // value} {unit}" if size % value == 0 else format_bytes(size)
    return f"{size} B"


def _matrix_text(matrix: dict) -> str:
    """{'GPU0': {'GPU1': 'NV2'}, ...} -> 'GPU0-GPU1 NV2, ...' (the diagonal and mirrored cells left out)."""
    cells, shown = [], {}
    for row, columns in matrix.items():
        for col, label in columns.items():
            if row == col or shown.get((col, row)) == label:
                continue
            shown[(row, col)] = label
            cells.append(f"{row}-{col} {label}")
    return ", ".join(cells)


def format_value(value: object, unit: str | None = None) -> str:
    """A check's expected/found value as compact text: numbers with their units, dicts as 'key: value; ...',
    topology matrices as 'GPU0-GPU1 NV2, ...'; never a Python repr."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if is_number(value):
        return number(value, unit)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in value.values()):
            return _matrix_text(value)
        numeric = all(is_number(v) for v in value.values())
        parts = []
        for key, item in value.items():
            key, item_unit = str(key), None
            for suffix, suffix_unit in _SUFFIXES:
                if key.endswith(suffix) and is_number(item):
                    stripped = key[: -len(suffix)]
                    key = stripped if stripped and stripped not in value else key
                    item_unit = suffix_unit
                    break
            else:
                if numeric and "ratio" not in key and "fraction" not in key:
                    item_unit = unit  # a flat map of measurements, e.g. {'GPU0->GPU1 (p2p)': 393.1}
            parts.append(f"{key}: {format_value(item, item_unit)}")
        return "; ".join(parts) if parts else "—"
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        items = [format_value(v, unit) for v in value]
        return "[" + "], [".join(items) + "]" if any(isinstance(v, dict) for v in value) else ", ".join(items)
    return str(value)


def short(text: str, limit: int = 90) -> str:
    """``text`` up to ``limit`` characters, ended at a word (never mid-word) with '…' where it was longer."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    at = max(cut.rfind(c) for c in " ;,")
    cut = cut[:at] if at > limit // 3 else cut[: cut.rfind(" ")] if " " in cut else cut
    return cut.rstrip(" ;,:") + " …"


# --- margins --------------------------------------------------------------------------------------------


def _quantity(value: float, unit: str) -> str:
    if unit in ("%", "% of memory"):
        return f"{value:.1f} {unit}"
    return number(value, unit)


def _signed(value: float, unit: str) -> str:
    sign = "+" if value >= 0 else "−"
    if unit == "bytes":
        return f"{sign}{format_bytes(int(abs(value)))}"
    if unit in ("%", "% of memory"):
        return f"{sign}{abs(value):.1f} points"
    digits = 2 if unit in ("Gb/s", "x") else 0 if unit in ("MHz",) else 1
    return f"{sign}{abs(value):.{digits}f} {unit}"


# --- the phrases ----------------------------------------------------------------------------------------


def _hbm(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = []
    if expected.get("min"):
        want.append(f"{GE} {limit_rate(parse_gbps(expected['min']))} HBM bandwidth")
    if is_number(expected.get("min_fraction_of_peak")):
        peak = found.get("peak_gbps")
        of = f" of the {rate(peak)} peak" if is_number(peak) else " of the peak"
        want.append(f"({expected['min_fraction_of_peak']:.0%}{of})")
    best = found.get("best_gbps")
    if not is_number(best):
        return " ".join(want) or format_value(expected), format_value(found)
    kind = next((k.removesuffix("_gbps") for k in ("copy_gbps", "read_gbps", "write_gbps")
                 if found.get(k) == best), "best")
    share = f", {found['fraction_of_peak']:.1%} of peak" if is_number(found.get("fraction_of_peak")) else ""
    return " ".join(want) or format_value(expected), f"{rate(best)} ({kind}{share})"


def _pcie_load(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = f"PCIe gen {expected.get('gen')} x{expected.get('width')} held under load"
    if is_number(expected.get("max_replay_rise")):
        rise = expected["max_replay_rise"]
        want += ", no replays added" if rise == 0 else f", {LE} {rise} replays added"
    if is_number(expected.get("min_gbps")):
        want += f", {GE} {limit_rate(expected['min_gbps'])} each way"
    got = []
    if found.get("gen_min") is not None:
        got.append(f"gen {found.get('gen_min')} x{found.get('width_min')} at worst in {found.get('reads')} reads")
    speeds = [rate(found[k]) for k in ("h2d_gbps", "d2h_gbps") if is_number(found.get(k))]
    if speeds:
        got.append(" / ".join(speeds) + " (to / from the GPU)")
    if found.get("replay_rise") is not None:
        got.append(f"{found['replay_rise']} replays added")
    return want, "; ".join(got) or format_value(found)


def _power(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = []
    if is_number(expected.get("min_sm_clock_mhz")):
        want.append(f"SM clock {GE} {expected['min_sm_clock_mhz']} MHz at the power limit")
    if is_number(expected.get("max_temperature_c")):
        want.append(f"{LE} {expected['max_temperature_c']} °C")
    if is_number(expected.get("min_tflops")):
        want.append(f"{GE} {expected['min_tflops']} TFLOP/s")
    if expected.get("forbidden_reasons"):
        want.append("no " + ", ".join(expected["forbidden_reasons"]))
    got = []
    clock = found.get("sm_clock_mhz_median_at_limit", found.get("sm_clock_mhz_median"))
    if is_number(clock):
        got.append(f"{clock:.0f} MHz")
    if is_number(found.get("power_w_median")):
        limit = found.get("power_limit_w")
        got.append(f"{found['power_w_median']:.0f} W" + (f" of {limit:.0f} W" if is_number(limit) else ""))
    if is_number(found.get("temperature_c_max")):
        got.append(f"{found['temperature_c_max']} °C at most")
    if is_number(found.get("tflops")):
        got.append(f"{found['tflops']:.0f} TFLOP/s")
    reasons = found.get("reasons_seen")
    if isinstance(reasons, dict):
        got.append(", ".join(reasons) or "no clock event")
    return "; ".join(want) or format_value(expected), "; ".join(got) or format_value(found)


def _pattern(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = f"{expected.get('mismatches', 0)} mismatches"
    if is_number(expected.get("min_coverage")):
        want += f" over {GE} {expected['min_coverage']:.0%} of memory"
    if not isinstance(found, dict) or found.get("mismatches") is None:
        return want, format_value(found)
    got = f"{found['mismatches']:,} mismatches"
    if is_number(found.get("coverage")):
        got += f", {found['coverage']:.1%} of memory"
    if is_number(found.get("passes")):
        got += f" in {found['passes']} passes"
    return want, got


def _gpu_memory(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found")
    return (f"{GE} {format_bytes(expected)}" if is_number(expected) else format_value(expected),
            format_bytes(found) if is_number(found) else format_value(found))


def _nvlink_links(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = [f"{expected['links_per_gpu']} NVLinks" if "links_per_gpu" in expected else "NVLinks"]
    if expected.get("all_active"):
        want.append("all active")
    if expected.get("min_speed"):
        want.append(f"{GE} {expected['min_speed']} each")
    got = f"{found.get('active_links')} active" if isinstance(found, dict) and "active_links" in found else \
        format_value(found)
    if isinstance(found, dict) and found.get("inactive"):
        got += f"; inactive: {format_value(found['inactive'])}"
    return ", ".join(want), got


def _burn_in_gpu(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = [f"{expected.get('wrong_elements', 0)} wrong elements"]
    if is_number(expected.get("min_tflops")):
        want.append(f"{GE} {expected['min_tflops']} TFLOP/s")
    if expected.get("forbidden_counters"):
        want.append(f"none of {len(expected['forbidden_counters'])} error counters rising")
    if not isinstance(found, dict):
        return ", ".join(want), format_value(found)
    got = []
    if is_number(found.get("tflops")):
        got.append(f"{found['tflops']:.0f} TFLOP/s")
    wrong = sum(found.get(k) or 0 for k in ("errors_self", "errors_cross") if is_number(found.get(k)))
    if is_number(found.get("checks")):
        got.append(f"{wrong:,} wrong in {found['checks']:,} checks")
    if is_number(found.get("max_temperature_c")):
        got.append(f"{found['max_temperature_c']} °C at most")
    return ", ".join(want), "; ".join(got) or format_value(found)


def _burn_in_collectives(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found") or {}
    op = str(check.get("subject") or "collective")
    want = f"{GE} {limit_rate(expected)} {op} busbw in every run" if is_number(expected) else format_value(expected)
    if not isinstance(found, dict) or not is_number(found.get("busbw_min")):
        return want, format_value(found)
    return want, (f"{rate(found['busbw_min'])} at worst in {found.get('runs')} run(s), "
                  f"{found.get('wrong', 0):,} wrong elements")


def _memory_estimate(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found") or {}
    want = (f"the estimate within {expected:.0%} of the measured peak" if is_number(expected)
            else format_value(expected))
    rows = [r for r in found.get("rows") or [] if isinstance(r, dict)] if isinstance(found, dict) else []
    errors = [abs(r["error"]) for r in rows if is_number(r.get("error"))]
    if not errors:
        return want, format_value(found)
    return want, f"{max(errors):.1%} off at worst, over {len(errors)} measured batch(es)"


def _gen_width(link: dict, gen: str, width: str) -> str:
    """A PCIe link's "gen 5 x16", or "gen and width not recorded" where the record lacks either."""
    if link.get(gen) is None or link.get(width) is None:
        return "gen and width not recorded"
    return f"gen {link[gen]} x{link[width]}"


def _oom(check: dict) -> tuple[str, str]:
    found = check.get("found") or {}
    if isinstance(found, dict) and "oversized" in found:
        found = found["oversized"] or {}
    want = "a clean out-of-memory error, memory given back" if check.get("expected") == "oom" else \
        format_value(check.get("expected"))
    if not isinstance(found, dict):
        return want, format_value(found)
    outcome = {"oom": "out-of-memory error", None: "no outcome recorded"}.get(found.get("outcome"),
                                                                              str(found.get("outcome")))
    if found.get("recovered") is None:
        return want, outcome  # whether memory came back was not read: nothing is said of it
    recovered = "memory given back" if found["recovered"] else "memory NOT given back"
    return want, f"{outcome}, {recovered}"


def _lms(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = "completes"
    if is_number(expected.get("max_slowdown")):
        want += f", {LE} {expected['max_slowdown']:g}x the time without offload"
    got = format_value(found.get("outcome")) if isinstance(found, dict) else format_value(found)
    if isinstance(found, dict) and is_number(found.get("ratio_vs_baseline")):
        got += f", {found['ratio_vs_baseline']:.2f}x the time"
    return want, got


def _lms_equality(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = "the same loss" + (f", gradients within {expected['grad_rtol']:g}" if "grad_rtol" in expected else "")
    if not isinstance(found, dict):
        return want, format_value(found)
    same = "the same loss" if found.get("loss_equal") else "a different loss"
    diff = found.get("max_grad_abs_diff")
    return want, same + (f", gradients {diff:g} apart at most" if is_number(diff) else "")


def _scalar(prefix: str = "", unit: str = ""):
    def phrase(check: dict) -> tuple[str, str]:
        expected, found = check.get("expected"), check.get("found")
        tail = f" {unit}" if unit else ""
        return f"{prefix}{format_value(expected)}{tail}", f"{format_value(found)}{tail}"

    return phrase


def _settings(check: dict) -> tuple[str, str]:
    """The platform checks and other small maps: {'min': x} as '≥ x', {'exact': x} as 'exactly x', 'a_b: c' as
    'a b: c'."""
    expected, found = check.get("expected"), check.get("found")
    if isinstance(expected, dict) and len(expected) == 1:
        (key, value), = expected.items()
        word = {"min": f"{GE} ", "max": f"{LE} ", "exact": "exactly "}.get(key)
        want = f"{word}{format_value(value)}" if word else f"{_words(key)}: {format_value(value)}"
    else:
        want = format_value(_worded(expected))
    return want, format_value(_worded(found), check.get("unit"))


def _words(key: object) -> str:
    return str(key).replace("_", " ")


def _worded(value: object) -> object:
    """A map's keys as words ('max_payload' -> 'max payload'), units kept where the key names one."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        text = str(key)
        suffix = next((s for s, _ in _SUFFIXES if text.endswith(s)), "")
        out[_words(text[: len(text) - len(suffix)]) + suffix if suffix else _words(text)] = item
    return out


def _topology(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found")
    want = _matrix_text(expected) if isinstance(expected, dict) else format_value(expected)
    got = _matrix_text(found) if isinstance(found, dict) else format_value(found)
    if check.get("verdict") == "passed" and want == got:
        got = "as promised"
    return want or "one GPU: no link to promise", got or "one GPU"


_AFFINITY_WORDS = {"cpu_affinity": "CPUs", "numa_affinity": "NUMA node"}


def _affinity(check: dict) -> tuple[str, str]:
    """The affinities the profile promises (CPUs, NUMA node: either may be left out), each as found; one the
    evidence does not give (None, topo -m's N/A) is "not recorded", never "None"."""
    expected, found = check["expected"], check.get("found")
    keys = [key for key in _AFFINITY_WORDS if key in expected]

    def words(values: dict) -> str:
        return ", ".join(f"{_AFFINITY_WORDS[key]} "
                         + ("not recorded" if values.get(key) is None or is_na(values.get(key)) else str(values[key]))
                         for key in keys)

    return words(expected), words(found) if isinstance(found, dict) else "not recorded"


_PHRASES = {
    "hbm-bandwidth": _hbm,
    "pcie-under-load": _pcie_load,
    "power-hold": _power, "memory-pattern": _pattern, "gpu-memory": _gpu_memory, "nvlink-links": _nvlink_links,
    "burn-in-gpu": _burn_in_gpu,
    "burn-in-collectives": _burn_in_collectives, "burn-in-memory": _oom, "memory-estimate": _memory_estimate,
    "memory-oom": _oom, "memory-lms": _lms, "memory-lms-equality": _lms_equality,
    "topology-matrix": _topology, "gpu-count": _scalar(unit="GPU(s)"), "ecc-mode": _scalar("ECC "),
    "gpu-model": _scalar(),
}


def _figure_words(label: str) -> str:
    """'h2d_gbps' -> 'h2d': a limit's label without the unit its name ends in, in words."""
    suffix = next((s for s, _ in _SUFFIXES if label.endswith(s) and label != s), "")
    return _words(label[: len(label) - len(suffix)])

def legacy_phrase(check: dict) -> tuple[str, str] | None:
    """(Expected, Found) of a record of a kind whose phrase has not moved into its family (kinds/) yet, else None."""
    name = str(check.get("name") or "")
    if name in _PHRASES:
        return _PHRASES[name](check)
    if name == "pcie-link" and isinstance(check.get("expected"), dict):
        expected, found = check["expected"], check.get("found") or {}
        if not isinstance(found, dict):
            return f"PCIe {_gen_width(expected, 'gen', 'width')}", format_value(found)
        return (f"PCIe {_gen_width(expected, 'gen', 'width')}",
                f"{_gen_width(found, 'gen_max', 'width_max')} "
                f"(running at {_gen_width(found, 'gen_current', 'width_current')})")
    if name == "affinity" and isinstance(check.get("expected"), dict):
        return _affinity(check)
    return None
