"""PCIe-under-load verdicts on one GPU's pcie-load row (workloads/pcie_load.py): the link's generation and width
while copies ran, the replay counter's rise, and the copy rates.

The link is judged under load only: a GPU may slow its link at idle to save power, and a link that trained down
(a marginal riser, slot, cable or retimer) shows only when asked for its full rate. On
2026-11-25 an H100 80GB HBM3 SXM read gen 5 x16 idle and in 300 of 300 reads under load, the replay counter 0
before and after, and copied 55.0 GB/s host to device, 55.1 GB/s back (1 GiB pinned: 87 % of the 63.0 GB/s
gen 5 x16 peak).
"""

from __future__ import annotations

import math

from ..diagnostics.pcie_load import PCIE_LOAD
from ..units import format_bytes, is_number, non_finite, parse_bytes, parse_gbps, pcie_peak_gbps
from .limits import HIGHER, Limit, figure, short_subject
from .result import CheckResult, failed, passed, unknown

#: the copies and the link reads cover the promised seconds when they reach this share of them (a copy in flight
#: when the time ran out, NVML reads taking time: 1 GiB for 2 s copied 1.98 s and read the link 201 times in 4 s on
#: an H100 SXM)
MIN_COPY_SHARE = 0.9
MIN_READ_SHARE = 0.5

_CAUSES = ("Usual causes: a link trained down (a riser, cable or retimer with poor signal, a card not fully "
           "seated, a slot wired narrower than it looks, a BIOS setting that caps the generation), or the host "
           "copy on the far socket")


def _label(row: dict) -> str:
    return f"GPU{row.get('index')} (serial {row.get('serial') or 'unknown'})"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def pcie_coverage(record: dict, gpu_row: dict, spec: dict) -> str | None:
    """Why a pcie-load record does not cover the load the profile's ``pcie_load`` section promises, or None: copies
    of another size, or for fewer seconds per direction (copies x size / rate, from the record's own figures), link
    reads under load fewer than half of one per ``read_interval_s`` over both directions, or a lowest generation or
    width that its own histogram of reads contradicts."""
    s = PCIE_LOAD.settings(spec)
    promised, size = float(s["seconds"]), parse_bytes(s["size"])
    gaps = []
    if record.get("size") != size:
        gaps.append(f"size = {record.get('size')!r}: copies of {format_bytes(record.get('size'))}, the profile "
                    f"promises {format_bytes(size)}")
    if not _finite(record.get("seconds")) or record["seconds"] < MIN_COPY_SHARE * promised:
        gaps.append(f"seconds = {record.get('seconds')!r} per direction, the profile promises {promised:g}")
    copies = gpu_row.get("copies") or {}
    for direction, key, words in (("h2d", "h2d_gbps", "host to device"), ("d2h", "d2h_gbps", "device to host")):
        count, gbps = copies.get(direction), gpu_row.get(key)
        if not isinstance(count, int) or count < 1:
            gaps.append(f"copies.{direction} = {count!r}: no {words} copy")
        elif _finite(gbps) and gbps > 0 and isinstance(record.get("size"), int):
            copied_s = count * record["size"] / (gbps * 1e9)
            if copied_s < MIN_COPY_SHARE * promised:
                gaps.append(f"{count} {words} copies at {gbps:.1f} GB/s: {copied_s:.2f} s of the {promised:g} s "
                            "promised")
    load = (gpu_row.get("link") or {}).get("under_load") or {}
    reads, every = load.get("reads"), record.get("read_interval_s")
    if isinstance(reads, int) and reads > 0 and _finite(every) and every > 0:
        need = max(2, int(MIN_READ_SHARE * 2 * promised / every))
        if reads < need:
            gaps.append(f"{reads} link reads under load, fewer than {need} (one every {every:g} s over 2 x "
                        f"{promised:g} s)")
    for part in ("gen", "width"):
        histogram, lowest = load.get(f"{part}_reads") or {}, load.get(f"{part}_min")
        seen = [int(v) for v in histogram if str(v).isdigit()]
        if seen and lowest != min(seen):
            gaps.append(f"link.under_load.{part}_min = {lowest!r}, but its reads ({_reads(histogram)}) go down to "
                        f"{min(seen)}: the record contradicts itself")
    if gaps:
        return (f"pcie-load.json: {_label(gpu_row)}: " + "; ".join(gaps)
                + ": the record does not cover the load promised")
    return None


def _link(gen, width) -> str:
    return f"gen {gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _reads(histogram: dict) -> str:
    return ", ".join(f"{value} in {count}" for value, count in histogram.items())


def pcie_limits(record: dict) -> list[Limit]:
    """Each direction's copy rate against ``min``, drawn as a bar each (the link's generation, width and replays are
    counts, judged exactly)."""
    expected, found = record.get("expected"), record.get("found")
    if not isinstance(expected, dict) or not isinstance(found, dict):
        return []
    floor = expected.get("min_gbps")
    bounds = [(floor, f"min {floor:g} GB/s")] if is_number(floor) else []
    who = short_subject(record)
    return [limit for key, way in (("h2d_gbps", "to"), ("d2h_gbps", "from")) if is_number(found.get(key))
            for limit in figure(key, found[key], bounds, "GB/s", HIGHER, chart="PCIe under load",
                                bar=f"PCIe {way} {who}")]


def measured_pcie(measured, results: list[dict], margin: float, where: str) -> None:
    """`profile init --measure`: the lowest generation and width each GPU's link held under load, no replay added
    (a count: no margin)."""
    links = [g["link"]["under_load"] for g in results[0]["gpus"]]
    gens = [link.get("gen_min") for link in links]
    widths = [link.get("width_min") for link in links]
    key = PCIE_LOAD.key
    section = {**PCIE_LOAD.measure_section, "max_replay_rise": 0}
    if all(isinstance(v, int) for v in gens + widths):
        section.update(gen=min(gens), width=min(widths))
    measured.sections[key] = section
    measured.note(key, f"{key}: the link under host<->device copies, {where}: "
                       + ", ".join(f"gen {g} x{w}" for g, w in zip(gens, widths, strict=True)))


def check_pcie_under_load(gpu_row: dict, spec: dict, source: str) -> CheckResult:
    """One GPU of a ``gpufabric-pcie-load/1`` result against the profile's ``spec``:

    - the lowest generation and width read under load against ``spec["gen"]``/``spec["width"]`` when given,
      else against the link's maximum (nvmlDeviceGetMaxPcieLinkGeneration/Width: what GPU and slot reach
      together, so a gen 5 GPU in a gen 4 slot passes unless the spec asks gen 5);
    - the replay counter's rise against ``spec.get("max_replay_rise", 0)``;
    - ``min`` (e.g. "50 GB/s"): a floor on both host-to-device and device-to-host GB/s.

    Each part that NVML could not read (a VM that hides the link, a driver without the counter) is not judged;
    the result is then "not checked" unless another part failed. Non-finite rates are not judged either."""
    name = PCIE_LOAD.name
    who = _label(gpu_row)
    link = gpu_row.get("link") or {}
    load = link.get("under_load") or {}
    maximum = link.get("max") or {}
    idle = link.get("idle") or {}
    want_gen = spec.get("gen", maximum.get("gen"))
    want_width = spec.get("width", maximum.get("width"))
    floor = parse_gbps(spec["min"]) if "min" in spec else None
    allowed_rise = spec.get("max_replay_rise", 0)
    replays = gpu_row.get("replay_counter") or {}
    before, after = replays.get("before"), replays.get("after")
    # from the two reads, not the row's own "rise": a recorded row is judged by its evidence
    rise = None if before is None or after is None else (after - before if after >= before else after)
    expected = {"gen": want_gen, "width": want_width, "max_replay_rise": allowed_rise,
                "min_gbps": floor, "of": "spec" if "gen" in spec or "width" in spec else "link maximum"}
    found = {"h2d_gbps": gpu_row.get("h2d_gbps"), "d2h_gbps": gpu_row.get("d2h_gbps"),
             "gen_min": load.get("gen_min"), "width_min": load.get("width_min"), "reads": load.get("reads", 0),
             "idle": {"gen": idle.get("gen"), "width": idle.get("width")},
             "max": {"gen": maximum.get("gen"), "width": maximum.get("width")}, "replay_rise": rise}
    bad = non_finite(found)
    if bad:
        return unknown(name, who, expected, f"{who}: not a finite number ({'; '.join(bad)}) [{source}]: the PCIe "
                       "link cannot be judged")

    lines, problems, unjudged = [], [], []
    gen_min, width_min = load.get("gen_min"), load.get("width_min")
    peak = pcie_peak_gbps(gen_min, width_min) if gen_min in (1, 2, 3, 4, 5, 6) and width_min else None
    for direction, key in (("host to device", "h2d_gbps"), ("device to host", "d2h_gbps")):
        gbps = gpu_row.get(key)
        if gbps is None:
            unjudged.append(f"no {direction} rate")
            continue
        lines.append(f"{direction} {gbps:.1f} GB/s" + (f" ({gbps / peak:.0%} of the {peak:.1f} GB/s "
                                                        f"{_link(gen_min, width_min)} peak)" if peak else ""))
        if floor is not None and gbps < floor:
            problems.append(f"{direction} {gbps:.1f} GB/s, below the {spec['min']} promised")

    if not load.get("reads") or gen_min is None or width_min is None:
        why = ", ".join(f"{k}: {v}" for k, v in sorted((gpu_row.get("unread") or {}).items())
                        if k.startswith("link.under_load")) or "no read under load"
        unjudged.append(f"NVML could not read the link under load ({why})")
    else:
        lines.append(f"link under load {_link(gen_min, width_min)} at the lowest of {load['reads']} reads "
                     f"(gen: {_reads(load.get('gen_reads') or {})}; width: {_reads(load.get('width_reads') or {})}), "
                     f"idle {_link(idle.get('gen'), idle.get('width'))}, maximum "
                     f"{_link(maximum.get('gen'), maximum.get('width'))}")
        of = "promised" if "gen" in spec or "width" in spec else "the link's maximum"
        if want_gen is None:
            unjudged.append("the link's maximum generation is not known and the spec names none")
        elif gen_min < want_gen:
            problems.append(f"the link ran at gen {gen_min} under load, below gen {want_gen} ({of})")
        if want_width is None:
            unjudged.append("the link's maximum width is not known and the spec names none")
        elif width_min < want_width:
            problems.append(f"the link ran at x{width_min} under load, narrower than x{want_width} ({of})")

    if rise is None:
        unjudged.append(f"NVML could not read the replay counter (before {before}, after {after})")
    else:
        lines.append(f"replay counter {before} -> {after} (+{rise})")
        if rise > allowed_rise:
            problems.append(f"the PCIe replay counter rose by {rise} during the copies (at most {allowed_rise} "
                            "allowed): packets were resent, the link's signal is marginal")

    summary = f"{who} {gpu_row.get('name') or ''}: " + "; ".join(lines)
    if problems:
        return failed(name, who, expected, found, f"{summary} [{source}]: " + "; ".join(problems) + ". " + _CAUSES,
                      unit="GB/s", details=problems + [f"not judged: {u}" for u in unjudged])
    if unjudged:
        return unknown(name, who, expected, f"{summary} [{source}]; not judged: " + "; ".join(unjudged))
    return passed(name, who, expected, found, f"{summary} [{source}]", unit="GB/s", details=lines)
