"""Health verdicts on a window of work (a test, a burn-in chunk): the counters the profile forbids to rise, the
temperature it allows, the clock-event reasons it forbids. Judged on the recorded window (see
fabric.health.window_record), so a live run and a recorded one are judged alike."""

from __future__ import annotations

from ..fabric.health import COUNTERS, DEFAULT_FORBIDDEN, DEFAULT_FORBIDDEN_THROTTLE, base_counter


def forbidden_counters(section: dict) -> set[str]:
    return set(section.get("forbid", DEFAULT_FORBIDDEN))


def counter_problems(rose: dict[str, int], section: dict) -> list[str]:
    """One sentence per forbidden counter that rose, naming its links:
    'nvlink_crc_data rose by 951 on 2 links (0: +461, 1: +490) (NVLink data with CRC errors)'."""
    forbidden = forbidden_counters(section)
    by_counter: dict[str, dict[str, int]] = {}
    for name, delta in rose.items():
        if base_counter(name) in forbidden:
            by_counter.setdefault(base_counter(name), {})[name.split(":", 1)[1] if ":" in name else ""] = delta
    problems = []
    for counter, deltas in sorted(by_counter.items()):
        total = sum(deltas.values())
        links = sorted((link for link in deltas if link), key=int)
        if not links:
            where = ""
        elif len(links) == 1:
            where = f" on link {links[0]}"
        else:
            where = f" on {len(links)} links (" + ", ".join(f"{link}: +{deltas[link]}" for link in links) + ")"
        problems.append(f"{counter} rose by {total}{where} ({COUNTERS[counter]})")
    return problems


def peak_problems(peak_temperature_c: int | None, throttle_seen: list[str], section: dict) -> list[str]:
    """The hottest reading above the profile's limit; clock-event reasons it forbids that were ever active."""
    problems = []
    limit = section.get("max_temperature_c")
    if limit is not None and peak_temperature_c is not None and peak_temperature_c > limit:
        problems.append(f"reached {peak_temperature_c} C, above the {limit} C allowed")
    slowed = sorted(set(throttle_seen) & set(section.get("forbid_throttle", DEFAULT_FORBIDDEN_THROTTLE)))
    if slowed:
        problems.append(f"clocks held back by {', '.join(slowed)}")
    return problems


def health_problems(window: dict[str, dict], section: dict) -> list[str]:
    """What a test did to the GPUs' health that the profile forbids: one sentence per GPU, naming it, its serial,
    and each counter (with its links), temperature or clock event.

    ``window``: fabric.health.window_record's per-GPU records (older recordings lack the peaks: their closing
    read stands in)."""
    problems = []
    for index, record in sorted(window.items(), key=lambda item: int(item[0])):
        peak = record.get("peak_temperature_c", record.get("temperature_c"))
        seen = record.get("throttle_seen", record.get("throttle") or [])
        found = counter_problems(record.get("rose", {}), section) + peak_problems(peak, seen, section)
        if found:
            problems.append(f"GPU{index} (serial {record.get('serial') or 'unknown'}) during this test: "
                            + "; ".join(found))
    return problems
