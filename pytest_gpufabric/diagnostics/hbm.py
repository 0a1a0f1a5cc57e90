"""HBM bandwidth: what it measures and records (kinds/hbm/ binds its launcher, --measure step and check)."""

from __future__ import annotations

from ..formats.typed import BOARD, TEXT, reading, value
from . import Diagnostic, frozen

POSITION = 61

SHAPE = {
    "format": TEXT, "size_bytes": value("bytes"), "iters": value("count"), "warmup": value("count", False),
    "gpus": [{**BOARD, "copy_gbps": value("gbps"), "read_gbps": value("gbps"), "write_gbps": value("gbps"),
              "best_gbps": value("gbps"), "peak_gbps": reading("gbps"), "bus_width_bits": reading("count"),
              "max_mem_clock_mhz": reading("mhz"), "fraction_of_peak": reading("ratio")}],
}

DIAGNOSTIC = HBM = Diagnostic(
    name="hbm-bandwidth", key="memory_bandwidth", what="memory bandwidth", one="HBM bandwidth measurement",
    recording="HBM bandwidth", fixture="hbm_bandwidth",
    doc="Device-memory (HBM) bandwidth per GPU: copy, read and write, the best of N runs, against the peak NVML's "
        "bus width and maximum memory clock give (live), or the bundle's hbm.json.",
    measurement="hbm", record_file="hbm.json", format="gpufabric-hbm/1", shape=SHAPE, script="hbm.py",
    check="checks/hbm.py", per_gpu=True, measure_as="hbm", measure_section=frozen({"size": "4 GiB", "iters": 10}),
    spread=True)
