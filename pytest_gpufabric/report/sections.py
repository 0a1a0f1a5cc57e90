"""The report's sections after the promises, as plain data: the machine (inventory and topology), health around
each test, the burn-in chunk by chunk, the skipped checks, and the digests and signature of the results.
"""

from __future__ import annotations

from pathlib import Path

from ..formats.topo import normalize_label
from ..units import format_bytes
from .cells import _cell, _relative_paths, _short_nodeid, _text
from .figures import health_charts
from .provenance import display_path
from .render import render

# --- the machine ----------------------------------------------------------------------------------------


def _recorded(value: object) -> str:
    """A value of the inventory as text; None (the evidence does not have it): 'not recorded'. A value that is
    the text 'None' (a GPU so named) stays 'None'."""
    return "not recorded" if value is None else str(value)


def inventory_data(fabric) -> dict:
    if fabric is None:
        return {"error": "not read"}
    rows = [
        [g.label, _recorded(g.name), _recorded(g.serial), _recorded(g.uuid), _recorded(g.pci_bus_id),
         _recorded(None if g.memory_bytes is None else format_bytes(g.memory_bytes)),
         _recorded(None if g.pcie_gen_max is None and g.pcie_width_max is None
                   else f"gen {g.pcie_gen_max} x{g.pcie_width_max}"),
         _recorded(g.vbios_version),
         _recorded(None if g.nvlinks is None else len(g.active_nvlinks()))]
        for g in fabric.gpus
    ]
    header = ["GPU", "Name", "Serial", "UUID", "PCI bus id", "Memory", "PCIe max", "VBIOS", "NVLinks active"]
    return {"error": None, "header": header, "rows": rows,
            "nics": [[n.label, _text(n.device)] for n in fabric.nics]}


def topology_data(expected: dict[str, dict[str, str]], found: dict[str, dict[str, str]]) -> dict:
    """The matrix as `topo -m` lays it out, each cell 'found' or 'expected → found' where they differ."""
    devices = list(dict.fromkeys([*expected, *found]))
    rows = []
    for row in devices:
        cells: list = [row]
        for col in devices:
            want = expected.get(row, {}).get(col)
            have = found.get(row, {}).get(col)
            if want is None:
                cells.append(have or "")
            elif normalize_label(want) == normalize_label(have):
                cells.append(_cell(str(have), "match"))
            else:
                cells.append(_cell(f"expected {want}, found {have if have is not None else 'no such device'}",
                                   "mismatch"))
        rows.append(cells)
    return {"header": ["", *devices], "rows": rows}


# --- health and burn-in ---------------------------------------------------------------------------------


def _counter_order(item: tuple[str, int]) -> tuple[str, int]:
    """'nvlink_ecc_data:10' after 'nvlink_ecc_data:9' (links in number order, not text order)."""
    name, _ = item
    base, _, link = name.partition(":")
    return base, int(link) if link.isdigit() else -1


def _counters_risen(rose: dict[str, int]) -> str:
    """One phrase per counter, its links summed: 'nvlink_ecc_data +53,886 on 18 links, pcie_replay +3'; the
    per-link figures go in the cell's title (36 links of two counters do not fit a table cell)."""
    totals: dict[str, list[int]] = {}
    links: dict[str, list[str]] = {}
    for name, delta in sorted(rose.items(), key=_counter_order):
        base, _, link = name.partition(":")
        totals.setdefault(base, []).append(delta)
        if link:
            links.setdefault(base, []).append(link)
    phrases = []
    for base, deltas in totals.items():
        where = links.get(base, [])
        if not where:
            on = ""
        elif len(where) <= 3:
            on = f" on link{'s' if len(where) > 1 else ''} {', '.join(where)}"
        else:
            on = f" on {len(where)} links"
        phrases.append(f"{base} +{sum(deltas):,}{on}")
    return ", ".join(phrases) or "none"


#: the columns _window_cells fills, after the caller's own
_WINDOW_COLUMNS = ["Counters that rose", "Hottest °C", "Peak power W", "Clock events"]


def _window_cells(window: dict | None) -> list:
    """One GPU's health over a stretch of work (a test, a burn-in chunk: fabric.health.window_record), as table
    cells: the counters that rose (each link's figure in the title), the hottest read, the highest power and the
    clock-event reasons seen. Recordings without background peaks show their closing read; None: not read."""
    if window is None:
        return ["not read", "-", "-", "-"]
    rose = window.get("rose", {})
    per_link = ", ".join(f"{name} +{delta}" for name, delta in sorted(rose.items(), key=_counter_order))
    hottest = window.get("peak_temperature_c", window.get("temperature_c"))
    power = window.get("peak_power_w", window.get("power_w"))
    seen = window.get("throttle_seen", window.get("throttle")) or []
    return [_cell(_counters_risen(rose), title=per_link), "-" if hottest is None else str(hottest),
            "-" if power is None else f"{power:.0f}", ", ".join(map(str, seen)) or "-"]


def health_data(health: dict, replay: bool = False) -> dict:
    """The watchdog's table: per test and GPU, the counters that rose, the hottest temperature and highest power
    read during it, and the clock-event reasons seen; the temperature and power through the run."""
    rows = [[_short_nodeid(nodeid), f"GPU{gpu}", *_window_cells(record)]
            for nodeid, gpus in (health.get("tests") or {}).items() for gpu, record in sorted(gpus.items())]
    if replay:
        why = ("No health reads in a replay: the watchdog reads every GPU around each test of a live run (that run's "
               "results JSON keeps them). A burn-in's own reads are under Burn-in.")
    else:
        why = "No health reads: the watchdog runs around each test of a live run."
    xid = health.get("xid_events") or []
    return {"rows": rows, "why": why, "xid": f"{len(xid)} ({health.get('xid_watch', 'not watched')})",
            "header": ["Test", "GPU", "Counters that rose during the test", *_WINDOW_COLUMNS[1:]],
            "charts": health_charts(health.get("timeline") or [], "The run") if rows else []}


def health_html(health: dict, replay: bool = False) -> str:
    """The Health section alone, as HTML (for tests and tools that show it without a whole report)."""
    return render("report/health.html.j2", health=health_data(health, replay))


def _between_chunks(chunk: dict) -> tuple[str, str, bool]:
    """(workload, result, went wrong) for a burn-in log line that is not a GEMM chunk."""
    if "error" in chunk:  # a workload that failed: the GEMM burn's own line, or an all_reduce or memory run
        return chunk.get("workload", chunk["type"]), f"failed: {chunk['error']}", True
    if chunk["type"] == "all_reduce":
        row = chunk["row"]
        wrong = row.get("wrong", 0)
        return (f"all_reduce {format_bytes(row['size'])}",
                f"busbw {row['busbw']:.1f} GB/s, {wrong} wrong element(s)", bool(wrong))
    oversized = chunk.get("oversized") or {}
    completed = [r for r in chunk.get("lms") or [] if r.get("outcome") == "completed"]
    recovered = "recovered" if oversized.get("recovered") else "NOT recovered"
    return ("memory", f"oversized batch: {oversized.get('outcome')}, {recovered}; "
            f"{len(completed)} of {len(chunk.get('lms') or [])} offload run(s) completed", False)


def _board_title(gpu: dict, serials: dict) -> str:
    """A burn-in row's board: its serial (the chunk's own, else the log's start line) and the CUDA device the
    GEMMs ran on, where the log says."""
    serial = gpu.get("serial") or serials.get(str(gpu["gpu"])) or "not recorded"
    return f"serial {serial}" + (f", CUDA device {gpu['cuda_index']}" if "cuda_index" in gpu else "")


def burn_in_data(burn_in: dict | None, base: Path | None = None) -> dict | None:
    """The burn-in chunk by chunk: per GPU its rate, checks and wrong elements, the hottest read, the highest power,
    the clock events and the counters that rose; the workloads run between the chunks; and temperature and power
    through it, from the reads each chunk logged (so a replayed burn-in log shows them too)."""
    if not burn_in:
        return None

    gemm_s = burn_in.get("gemm_s", burn_in["elapsed_s"])
    minutes = f"{burn_in['elapsed_s'] / 60:.1f} of {burn_in['duration_s'] / 60:.1f} minutes of GEMM burn"
    if abs(gemm_s - burn_in["elapsed_s"]) >= 3:  # a log with wall-clock times: both said
        minutes = (f"{gemm_s / 60:.1f} minutes of GEMM burn in {burn_in['elapsed_s'] / 60:.1f} of "
                   f"{burn_in['duration_s'] / 60:.1f} minutes")
    state = "finished" if burn_in["finished"] else "not finished: a rerun with the same profile and duration resumes it"
    summary = f"{minutes} on every GPU ({state})" + (
        f", resumed at {burn_in['resumed_from_s'] / 60:.1f} min" if burn_in.get("resumed_from_s") else "")
    planted = ""
    if burn_in.get("plant_fault") is not None:
        board = burn_in.get("plant_fault_board")
        where = (f"CUDA device {burn_in['plant_fault']}, which is GPU{board['index']} (serial "
                 f"{board.get('serial') or 'not recorded'})" if board else f"GPU{burn_in['plant_fault']}")
        planted = (f"A fault was planted on {where} (--gpu-burn-in-plant-fault): its products were corrupted on "
                   "purpose, to show that the check catches a wrong result. This run accepts nothing.")
    serials = burn_in.get("serials") or {}
    rows, between, points = [], [], []
    chunk_number = 0
    for chunk in burn_in["chunks"]:
        if chunk["type"] != "gemm":
            workload, result, wrong = _between_chunks(chunk)
            between.append([str(chunk_number), str(workload), _cell(str(result), "mismatch" if wrong else "")])
            continue
        chunk_number += 1
        points += chunk.get("timeline") or []
        health = chunk.get("health") or {}
        for gpu in chunk["result"]["gpus"]:
            wrong = gpu["errors_self"] + gpu["errors_cross"]
            rows.append([
                str(chunk_number), f"{chunk['seconds']:.0f}",
                _cell(f"GPU{gpu['gpu']}", title=_board_title(gpu, serials)),
                _cell(f"{gpu['tflops']:.0f}", "num"), _cell(f"{gpu['iterations']:,}", "num"),
                _cell(f"{gpu['checks']:,}", "num"), _cell(f"{wrong:,}", "num mismatch" if wrong else "num"),
                *_window_cells(health.get(str(gpu["gpu"]))),
            ])
    return {"summary": summary, "log": display_path(str(burn_in["log"]), base), "planted": planted,
            "header": ["Chunk", "s", "GPU", "TFLOP/s", "GEMMs", "Checks", "Wrong elements", *_WINDOW_COLUMNS],
            "rows": rows, "between": between, "charts": health_charts(points, "The burn-in")}


def skipped_data(skip_reasons: dict[str, str], tests: dict[str, str], base: Path | None = None) -> dict:
    skipped = [nodeid for nodeid, outcome in tests.items() if outcome == "skipped"]
    skipped += [nodeid for nodeid in skip_reasons if nodeid not in tests]
    return {"rows": [[_cell(_short_nodeid(n), title=n), _cell(_relative_paths(skip_reasons.get(n) or
                                                                               "no reason recorded", base), "note")]
                     for n in skipped]}


def integrity_data(document: dict) -> dict:
    block = document.get("integrity") or {}
    evidence = document.get("evidence") or {}
    signature = block.get("signature") if isinstance(block.get("signature"), dict) else None
    facts = [("Results sha256", _cell(block.get("results_sha256") or "not computed: the run did not finish",
                                      "digest")),
             ("Profile sha256", _cell(block.get("profile_sha256") or "no profile", "digest")),
             ("Bundle", evidence.get("bundle") or "none: a live run"),
             ("Bundle sha256", _cell(block.get("bundle_sha256") or "—", "digest")),
             ("Signature", f"Ed25519, key {signature.get('key_id')}" if signature else "not signed")]
    how = ("Check them with `gpufabric verify REPORT.html --key PUB.pem` (or the results JSON): it names any part "
           "changed since the run, and any other key." if signature else
           "Without --gpu-sign-key the digests show a change, but not who made the file.")
    return {"facts": facts, "how": how}
