"""The five remedy classes, cheapest first (remedy.py says what each means and how a promise gets one), and what
each kind of health evidence points to.
"""

from __future__ import annotations

SOFTWARE = "software or configuration"
RERUN = "rerun"
RESET = "reset or reboot"
RESEAT = "reseat or recable"
RMA = "return to the vendor"

#: the classes in the order a technician tries them
CLASSES = (SOFTWARE, RERUN, RESET, RESEAT, RMA)
#: one word each, for a drain reason of 128 characters
SHORT = {SOFTWARE: "software", RERUN: "rerun", RESET: "reset", RESEAT: "reseat", RMA: "rma"}

#: (class, why: one sentence naming the evidence that points there)
Remedy = tuple[str, str]

#: a health counter that rose (fabric/health.py COUNTERS) -> what it points to. Uncorrectable errors and a failed
#: remap are memory that loses data: the board goes back; a pending remap and corrected errors ask for the reset that
#: applies the remap; replays and recoveries are a link's signal: its cable, bridge, riser or slot
COUNTER_REMEDY = {
    "xid": RESET, "ecc_corrected": RESET, "remapped_rows_pending": RESET,
    "ecc_uncorrected": RMA, "remapped_rows_uncorrectable": RMA, "remapped_rows_failure": RMA, "retired_pages": RMA,
    "pcie_replay": RESEAT, "nvlink_replay": RESEAT, "nvlink_recovery": RESEAT, "nvlink_crc_flit": RESEAT,
    "nvlink_crc_data": RESEAT, "nvlink_ecc_data": RESEAT,
}
#: the XID codes whose meaning is settled (NVIDIA's XID catalogue) -> what they point to; any other code: RESET
XID_REMEDY = {13: SOFTWARE, 31: SOFTWARE, 43: SOFTWARE, 48: RMA, 63: RESET, 64: RMA, 74: RESEAT, 79: RESET, 94: RESET,
              95: RMA}
#: a clock-event reason seen under load (checks/power.py REASON_MEANING) -> what it points to: the board protecting
#: itself from heat or its power feed is its cooling and cabling; a cap or clock setting is configuration
THROTTLE_REMEDY = {
    "hw_slowdown": RESEAT, "hw_thermal_slowdown": RESEAT, "hw_power_brake_slowdown": RESEAT,
    "sw_thermal_slowdown": RESEAT, "sw_power_cap": SOFTWARE, "applications_clocks_setting": SOFTWARE,
    "sync_boost": SOFTWARE, "display_clocks_setting": SOFTWARE, "gpu_idle": RERUN,
}
