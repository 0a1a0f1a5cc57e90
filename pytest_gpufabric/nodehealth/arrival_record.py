"""The record the acceptance judges a machine's arrival state by: the health check's own reader, live (NVML and
/dev/kmsg, once) or from a bundle (its health.json, else what its nvml.json and nvidia-smi-q.xml recorded). The
judging is arrival.py's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ..errors import HardwareUnavailable
from ..formats.typed import Unreadable
from .derive import NVML_FILE, SMI_XML_FILE, can_derive, derive
from .record import HEALTH_FILE, NodeHealthRecord, health_from_record, load_health_file, read_live


@dataclass(frozen=True)
class ArrivalRecord:
    """The health record the acceptance judges: ``node`` typed, or ``why`` it cannot be had."""

    node: NodeHealthRecord | None
    raw: dict | None  # as read live (written to the report folder as health.json); None for a bundle's own file
    why: str | None = None

    def to_json(self) -> dict:
        return self.raw if self.raw is not None else {"error": self.why}


def read_arrival_live() -> ArrivalRecord:
    """This machine's record, through the health check's own reader (NVML and /dev/kmsg, once)."""
    try:
        raw = read_live()
    except HardwareUnavailable as exc:
        return ArrivalRecord(None, None, f"NVML not available: {exc.why}")
    try:
        return ArrivalRecord(health_from_record(json.loads(json.dumps(raw)), "NVML"), raw)
    except Unreadable as exc:
        return ArrivalRecord(None, raw, str(exc))


def read_arrival_bundle(directory: Path) -> ArrivalRecord | None:
    """The bundle's health.json, else the record its nvml.json and nvidia-smi-q.xml give; None when it holds
    neither."""
    path = directory / HEALTH_FILE
    if path.is_file():
        try:
            return ArrivalRecord(load_health_file(path), None)
        except Unreadable as exc:
            return ArrivalRecord(None, None, str(exc))
    if not can_derive(directory):
        return None
    where = f"{directory / NVML_FILE} with {SMI_XML_FILE}"
    try:
        return ArrivalRecord(health_from_record(derive(directory), where), None)
    except (OSError, ValueError, KeyError, TypeError, ET.ParseError) as exc:
        return ArrivalRecord(None, None, f"{where}: cannot be read as a health record ({exc})")
    except Unreadable as exc:
        return ArrivalRecord(None, None, str(exc))
