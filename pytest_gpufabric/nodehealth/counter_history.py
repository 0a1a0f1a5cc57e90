"""The counters' last reading, kept between runs for their rates (counters.py): health-counters.json in the state
folder, beside health-state.json, written atomically. It holds only readings: a file that cannot be read costs one
rate, said in a note, and is replaced by this run's reading. A reading of this boot dated at or after this run's
time (the clock went back) keeps its counters, dated this run's time, so the next check rates the whole rise since
it over the time since this run (at most the real time: the rate is never understated; counters.rate_findings)."""

from __future__ import annotations

import json
from pathlib import Path

from .counters import counter_readings, reading_ahead
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
    """This run's readings; boards not read this run keep their last one, and one whose last reading is ahead of
    ``now`` keeps its counters, dated ``now``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    gpus, _ = load_history(folder)
    for board, counters in counter_readings(node).items():
        last = gpus.get(board)
        gpus[board] = {"at": now, "boot_id": boot, "counters": last["counters"] if reading_ahead(last, now, boot)
                       else counters}
    write_atomically(folder / COUNTERS_FILE, json.dumps({"format": FORMAT, "gpus": gpus}, indent=1) + "\n")
