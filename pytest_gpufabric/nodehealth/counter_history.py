"""The counters' last reading, kept between runs for their rates (counters.py): health-counters.json in the state
folder, beside health-state.json, written atomically. It holds only readings, each with the wall time of its check
(``at``), the kernel's boot clock at its read (``uptime_s``: the record's; None where the record has none) and the
boot id: a file that cannot be read costs one rate, said in a note, and is replaced by this run's reading.

Rates are timed by the shorter of the two positive intervals since the last reading, the boot clock's (where both
readings recorded it) and the wall clock's, so neither a stepped wall clock nor a planted or stale boot clock can
understate a rate. A reading of this boot that neither clock puts before this run's (two checks at once, an older
record replayed) keeps its counters for the next check, dated this run's wall time and its own boot clock read.
"""

from __future__ import annotations

import json
from pathlib import Path

from .counters import counter_readings, elapsed, reading_ahead
from .output import write_atomically
from .record import NodeHealthRecord

COUNTERS_FILE = "health-counters.json"
FORMAT = "gpufabric-health-counters/1"


def load_history(folder: Path) -> tuple[dict, list[str]]:
    """({board: {"at", "boot_id", "counters"}}, notes)."""
    path = Path(folder) / COUNTERS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, []
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: not readable ({exc}): counter rates from the next run on"]
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("gpus"), dict):
        return {}, [f"{path}: not a {FORMAT} file: counter rates from the next run on"]
    return data["gpus"], []


def save_history(folder: Path, node: NodeHealthRecord, now: float, boot: str | None) -> None:
    """This run's readings; boards not read this run keep their last one, and one whose last reading is no earlier
    than this one by both clocks keeps its counters (counters.reading_ahead), dated ``now`` and its own boot clock
    reading (a boot clock that went back, a reboot the replay did not see, is judged by the wall clock instead)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    gpus, _ = load_history(folder)
    for board, counters in counter_readings(node).items():
        last = gpus.get(board)
        if reading_ahead(last, node, now, boot):
            before = last.get("uptime_s")
            kept = before if elapsed(last, node, now, boot)[1] else node.uptime_s
            gpus[board] = {"at": now, "uptime_s": kept, "boot_id": boot, "counters": last["counters"]}
        else:
            gpus[board] = {"at": now, "uptime_s": node.uptime_s, "boot_id": boot, "counters": counters}
    write_atomically(folder / COUNTERS_FILE, json.dumps({"format": FORMAT, "gpus": gpus}, indent=1) + "\n")
