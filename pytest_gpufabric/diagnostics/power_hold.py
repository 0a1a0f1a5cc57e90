"""The power hold: what it measures and records (kinds/power_hold/ binds its launcher, --measure step and check)."""

from __future__ import annotations

from ..formats.typed import ANY, BOARD, TEXT, Opt, reading, value
from . import Diagnostic, frozen

POSITION = 63

SHAPE = {
    "format": TEXT, "seconds": value("seconds"), "interval_s": value("seconds"), "warmup_s": value("seconds", False),
    "gpus": [{**BOARD, "power_limit_w": reading("watts"), "max_sm_clock_mhz": reading("mhz"),
              "thresholds_c": Opt({"*": reading("celsius")}), "tflops": reading("tflops"),
              "iterations": value("count", False), "unread": Opt({"*": ANY}),
              "samples": [{"t_s": value("seconds"), "power_w": reading("watts"), "sm_clock_mhz": reading("mhz"),
                           "temperature_c": reading("celsius"), "margin_c": reading("celsius"),
                           "reasons": Opt([TEXT])}]}],
}

DIAGNOSTIC = POWER_HOLD = Diagnostic(
    name="power-hold", key="power", what="sustained power and thermal behaviour", one="power hold",
    recording="power hold", fixture="power_hold",
    doc="Every GPU held at its power limit under a bf16 GEMM load for a stated time, NVML's power, SM clock, "
        "temperature and clock event reasons sampled throughout (live), or the bundle's power-hold.json.",
    measurement="power_hold", record_file="power-hold.json", format="gpufabric-power-hold/1",
    shape=SHAPE, script="power_hold.py", check="checks/power.py", per_gpu=False,
    # long enough to reach the power limit and hold it (an H100 is there within a second of the 3 s warm-up),
    # short enough for a single-GPU acceptance within 45 s; the burn-in is where a GPU is held for long
    measure_as="power", measure_section=frozen({"seconds": 6}))
