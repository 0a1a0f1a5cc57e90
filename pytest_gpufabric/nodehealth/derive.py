"""A health record from what a bundle recorded before `gpufabric snapshot` wrote ``health.json``: its ``nvml.json``
(what the snapshot read through NVML) and its ``nvidia-smi-q.xml`` (`nvidia-smi -q -x` of the same snapshot).

From nvml.json: the inventory (index, name, UUID, serial, PCI bus id), the PCIe link, each NVLink's state, the ECC
mode, the driver and the GPU count. From nvidia-smi-q.xml, matched to nvml.json's GPU by PCI bus id: volatile ECC
errors (corrected: SRAM + DRAM correctable; uncorrected: SRAM parity + SRAM SEC-DED + DRAM uncorrectable), remapped
rows, retired pages, the PCIe replay counter, the clock-event reasons (as NVML's bits), the temperature, the power
draw, persistence mode, the fabric state and status, the recovery action. Driver 580's XML gives the thresholds
relative to T.Limit: the absolute ones are ``gpu_temp + gpu_temp_tlimit`` (the GPU's maximum operating temperature)
minus each ``*_tlimit_threshold``.

A reading the XML does not hold is left out of the record (the typed reader says "not recorded": never judged as
healthy). Neither file holds the kernel log: the record says so (``kernel_log.error``), and Xids are not read.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from ..formats.gpu_fabric import status_code
from .record import FORMAT

NVML_FILE, SMI_XML_FILE = "nvml.json", "nvidia-smi-q.xml"
#: what a derived record says of the kernel log it does not have
NO_KERNEL_LOG = "not recorded: a DERIVED record (the bundle holds no kernel log)"
_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
_FABRIC_STATES = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
_NA = {"error": "NOT_SUPPORTED"}


def can_derive(bundle: Path) -> bool:
    return (bundle / NVML_FILE).is_file() and (bundle / SMI_XML_FILE).is_file()


def _text(node: ET.Element | None, path: str) -> str:
    found = None if node is None else node.find(path)
    if found is None or found.text is None:
        raise KeyError(f"{SMI_XML_FILE} has no {path}")
    return found.text.strip()


def _number(node: ET.Element | None, path: str, unit: str = "") -> float | int | dict:
    text = _text(node, path)
    if text == "N/A":
        return _NA
    text = text.removesuffix(unit).strip()
    return float(text) if "." in text else int(text)


def _yes(node: ET.Element | None, path: str) -> int | dict:
    text = _text(node, path)
    return _NA if text == "N/A" else int(text in ("Yes", "Enabled", "Active"))


def _ecc(gpu: ET.Element) -> dict:
    volatile = gpu.find("ecc_errors/volatile")
    corrected = [_number(volatile, k) for k in ("sram_correctable", "dram_correctable")]
    uncorrected = [_number(volatile, k) for k in ("sram_uncorrectable_parity", "sram_uncorrectable_secded",
                                                  "dram_uncorrectable")]
    total = lambda counts: _NA if _NA in counts else sum(counts)  # noqa: E731
    return {"ecc_uncorrected_volatile": total(uncorrected), "ecc_corrected_volatile": total(corrected)}


def _rows(gpu: ET.Element) -> dict:
    return {"remapped_rows": {"correctable": _number(gpu, "remapped_rows/remapped_row_corr"),
                              "uncorrectable": _number(gpu, "remapped_rows/remapped_row_unc"),
                              "pending": _yes(gpu, "remapped_rows/remapped_row_pending"),
                              "failure": _yes(gpu, "remapped_rows/remapped_row_failure")}}


def _pages(gpu: ET.Element) -> dict:
    retired = gpu.find("retired_pages")
    pages = {"single_bit_ecc": _number(retired, "multiple_single_bit_retirement/retired_count"),
             "double_bit_ecc": _number(retired, "double_bit_retirement/retired_count"),
             "pending": _yes(retired, "pending_retirement")}
    return {"retired_pages": _NA if any(value == _NA for value in pages.values()) else pages}


def _clocks(gpu: ET.Element) -> dict:
    return {"clock_event_reasons": sum(bit for name, bit in _REASON_BITS.items()
                                       if _text(gpu, f"clocks_event_reasons/clocks_event_reason_{name}") == "Active")}


def _temperatures(gpu: ET.Element) -> dict:
    temperature = _number(gpu, "temperature/gpu_temp", " C")
    margin = _number(gpu, "temperature/gpu_temp_tlimit", " C")
    limit = temperature + margin  # the GPU's maximum operating temperature (T.Limit)
    return {"temperature_c": temperature,
            "slowdown_temperature_c": limit - _number(gpu, "temperature/gpu_temp_slow_tlimit_threshold", " C"),
            "shutdown_temperature_c": limit - _number(gpu, "temperature/gpu_temp_max_tlimit_threshold", " C"),
            "gpu_max_temperature_c": limit - _number(gpu, "temperature/gpu_temp_max_gpu_tlimit_threshold", " C"),
            "margin_temperature_c": margin}


def _fabric(gpu: ET.Element) -> dict:
    state = _text(gpu, "fabric/state")
    return {"fabric": _NA if state == "N/A" else {"state": _FABRIC_STATES[state],
                                                  "status": status_code(_text(gpu, "fabric/status"))}}


def _recovery(gpu: ET.Element) -> dict:
    recovery = gpu.find("gpu_recovery_action")
    return {"recovery_action": ({"error": "FUNCTION_NOT_FOUND"} if recovery is None
                                else 0 if (recovery.text or "").strip() == "None" else {"error": "UNKNOWN"})}


#: each part of a GPU's XML, in the record's key order; a part the XML lacks is left out of the record
_XML_PARTS = (_ecc, _rows, _pages,
              lambda gpu: {"pcie_replay": _number(gpu, "pci/replay_counter")}, _clocks, _temperatures,
              lambda gpu: {"power_w": _number(gpu, "gpu_power_readings/instant_power_draw", " W")},
              lambda gpu: {"persistence_mode": _yes(gpu, "persistence_mode")}, _fabric, _recovery)


def xml_gpu(gpu: ET.Element) -> dict:
    """The health readings of one ``<gpu>`` of nvidia-smi-q.xml that it holds."""
    record: dict = {}
    for part in _XML_PARTS:
        try:
            record.update(part(gpu))
        except (KeyError, ValueError, TypeError):
            continue  # not in this driver's XML: not recorded
    return record


def derive(bundle: Path) -> dict:
    """The DERIVED health record of a bundle holding nvml.json and nvidia-smi-q.xml. Raises OSError, ValueError
    (JSON, XML) or KeyError (nvml.json without a key it always has) for files that are not what they say."""
    nvml = json.loads((bundle / NVML_FILE).read_text(encoding="utf-8"))
    xml = {gpu.get("id"): gpu for gpu in ET.parse(bundle / SMI_XML_FILE).getroot().iter("gpu")}
    gpus = []
    for gpu in nvml["gpus"]:
        record = {key: gpu[key] for key in ("index", "name", "uuid", "serial", "pci_bus_id", "pcie_gen_current",
                                             "pcie_gen_max", "pcie_width_current", "pcie_width_max")}
        record["nvlink_states"] = [link["state"] for link in gpu["nvlinks"]]
        record["ecc_mode"] = gpu["ecc_mode"]["current"]
        if gpu["pci_bus_id"] in xml:
            record.update(xml_gpu(xml[gpu["pci_bus_id"]]))
        gpus.append(record)
    return {
        "format": FORMAT,
        "derived": (f"DERIVED from this bundle's {NVML_FILE} and {SMI_XML_FILE} (gpufabric snapshot, "
                    f"{nvml['recorded_at']}): not read by the health reader; no kernel log recorded"),
        "recorded_at": nvml["recorded_at"], "hostname": nvml["hostname"],
        "driver_version": nvml["driver_version"], "gpu_count": nvml["gpu_count"], "pci_gpus": None, "gpus": gpus,
        "kernel_log": {"source": None, "error": NO_KERNEL_LOG, "xids": []},
    }
