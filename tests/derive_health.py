"""DERIVED health records: ``health.json`` put together from what a shipped bundle already holds, for the bundles
recorded before `gpufabric snapshot` wrote health.json (the health check's tests plant their faults in copies).

From the bundle's ``nvml.json`` (what `gpufabric snapshot` read through NVML): the inventory (index, name, UUID,
serial, PCI bus id), the PCIe link, each NVLink's state, the ECC mode, the driver and the GPU count. From its
``nvidia-smi-q.xml`` (`nvidia-smi -q -x` of the same snapshot, matched to nvml.json's GPU by PCI bus id): volatile
ECC errors (corrected: SRAM + DRAM correctable; uncorrected: SRAM parity + SRAM SEC-DED + DRAM uncorrectable),
remapped rows, retired pages, the PCIe replay counter, the clock-event reasons (as NVML's bits), the temperature,
the power draw, persistence mode, the fabric state and status, the recovery action. Driver 580's XML gives the
thresholds relative to T.Limit: the absolute ones are ``gpu_temp + gpu_temp_tlimit`` (the GPU's maximum operating
temperature) minus each ``*_tlimit_threshold``; on the H100 of tests/data/bundles/h100-x1-diagnostics that gives
slowdown 89 C, shutdown 95 C, maximum 87 C, what NVML itself answered there (power-hold.json, thresholds_c). The
T.Limit margin is NVML's margin temperature (power-hold.json: 64 C with 23 C of margin to 87 C).

No kernel log was recorded: Xid lines are "not read". Run ``python tests/derive_health.py`` to write them again.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BUNDLES = Path(__file__).parent / "data" / "bundles"
DERIVED_BUNDLES = ("h100-x1", "h100-x2-identity", "h200-nvswitch-x2", "h200-nvswitch-x4")
_REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
                "hw_power_brake_slowdown": 0x80, "display_clocks_setting": 0x100}
_FABRIC_STATES = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
_NA = {"error": "NOT_SUPPORTED"}


def _text(node: ET.Element, path: str) -> str:
    found = node.find(path)
    if found is None or found.text is None:
        raise ValueError(f"nvidia-smi-q.xml has no {path}")
    return found.text.strip()


def _number(node: ET.Element, path: str, unit: str = "") -> float | int | dict:
    text = _text(node, path)
    if text == "N/A":
        return _NA
    text = text.removesuffix(unit).strip()
    return float(text) if "." in text else int(text)


def _yes(node: ET.Element, path: str) -> int | dict:
    text = _text(node, path)
    return _NA if text == "N/A" else int(text in ("Yes", "Enabled", "Active"))


def _xml_gpu(gpu: ET.Element) -> dict:
    volatile = gpu.find("ecc_errors/volatile")
    corrected = sum(_number(volatile, k) for k in ("sram_correctable", "dram_correctable"))
    uncorrected = sum(_number(volatile, k) for k in ("sram_uncorrectable_parity", "sram_uncorrectable_secded",
                                                     "dram_uncorrectable"))
    rows = {"correctable": _number(gpu, "remapped_rows/remapped_row_corr"),
            "uncorrectable": _number(gpu, "remapped_rows/remapped_row_unc"),
            "pending": _yes(gpu, "remapped_rows/remapped_row_pending"),
            "failure": _yes(gpu, "remapped_rows/remapped_row_failure")}
    retired = gpu.find("retired_pages")
    pages = ({"single_bit_ecc": _number(retired, "multiple_single_bit_retirement/retired_count"),
              "double_bit_ecc": _number(retired, "double_bit_retirement/retired_count"),
              "pending": _yes(retired, "pending_retirement")})
    if any(value == _NA for value in pages.values()):
        pages = _NA
    reasons = sum(bit for name, bit in _REASON_BITS.items()
                  if _text(gpu, f"clocks_event_reasons/clocks_event_reason_{name}") == "Active")
    temperature = _number(gpu, "temperature/gpu_temp", " C")
    margin = _number(gpu, "temperature/gpu_temp_tlimit", " C")
    limit = temperature + margin  # the GPU's maximum operating temperature (T.Limit)
    state = _text(gpu, "fabric/state")
    fabric = _NA if state == "N/A" else {"state": _FABRIC_STATES[state],
                                         "status": 0 if _text(gpu, "fabric/status") == "Success" else 999}
    recovery = gpu.find("gpu_recovery_action")
    return {
        "ecc_uncorrected_volatile": uncorrected, "ecc_corrected_volatile": corrected,
        "remapped_rows": rows, "retired_pages": pages,
        "pcie_replay": _number(gpu, "pci/replay_counter"),
        "clock_event_reasons": reasons, "temperature_c": temperature,
        "slowdown_temperature_c": limit - _number(gpu, "temperature/gpu_temp_slow_tlimit_threshold", " C"),
        "shutdown_temperature_c": limit - _number(gpu, "temperature/gpu_temp_max_tlimit_threshold", " C"),
        "gpu_max_temperature_c": limit - _number(gpu, "temperature/gpu_temp_max_gpu_tlimit_threshold", " C"),
        "margin_temperature_c": margin,
        "power_w": _number(gpu, "gpu_power_readings/instant_power_draw", " W"),
        "persistence_mode": _yes(gpu, "persistence_mode"), "fabric": fabric,
        "recovery_action": ({"error": "FUNCTION_NOT_FOUND"} if recovery is None
                            else 0 if (recovery.text or "").strip() == "None" else {"error": "UNKNOWN"}),
    }


def derive(bundle: Path) -> dict:
    """The DERIVED health record of a bundle holding nvml.json and nvidia-smi-q.xml."""
    nvml = json.loads((bundle / "nvml.json").read_text(encoding="utf-8"))
    xml = {gpu.get("id"): gpu for gpu in ET.parse(bundle / "nvidia-smi-q.xml").getroot().iter("gpu")}
    gpus = []
    for gpu in nvml["gpus"]:
        record = {key: gpu[key] for key in ("index", "name", "uuid", "serial", "pci_bus_id", "pcie_gen_current",
                                             "pcie_gen_max", "pcie_width_current", "pcie_width_max")}
        record["nvlink_states"] = [link["state"] for link in gpu["nvlinks"]]
        record["ecc_mode"] = gpu["ecc_mode"]["current"]
        record.update(_xml_gpu(xml[gpu["pci_bus_id"]]))
        gpus.append(record)
    return {
        "format": "gpufabric-health/1",
        "derived": (f"DERIVED by tests/derive_health.py from this bundle's nvml.json and nvidia-smi-q.xml (gpufabric "
                    f"snapshot, {nvml['recorded_at']}): not read by the health reader; no kernel log recorded"),
        "recorded_at": nvml["recorded_at"], "hostname": nvml["hostname"],
        "driver_version": nvml["driver_version"], "gpu_count": nvml["gpu_count"], "pci_gpus": None, "gpus": gpus,
        "kernel_log": {"source": None, "error": "not recorded: a DERIVED record (the bundle holds no kernel log)",
                       "xids": []},
    }


def main() -> int:
    for name in DERIVED_BUNDLES:
        path = BUNDLES / name / "health.json"
        path.write_text(json.dumps(derive(BUNDLES / name), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
