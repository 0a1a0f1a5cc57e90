"""The PCIe link under load: what it measures and records (kinds/pcie_load/ binds its launcher, --measure step
and check)."""

from __future__ import annotations

from ..formats.typed import ANY, BOARD, TEXT, Opt, reading, value
from . import Diagnostic, frozen

POSITION = 64

_LINK = Opt({"gen": reading("generation"), "width": reading("lanes")})
SHAPE = {
    "format": TEXT, "size": value("bytes"), "seconds": value("seconds"), "read_interval_s": value("seconds", False),
    "gpus": [{**BOARD, "h2d_gbps": reading("gbps"), "d2h_gbps": reading("gbps"),
              "copies": {"h2d": value("count"), "d2h": value("count")},
              "link": Opt({"idle": _LINK, "after": _LINK,
                           "max": Opt({"gen": reading("generation"), "width": reading("lanes"),
                                       "gpu_gen": reading("generation")}),
                           "under_load": Opt({"gen_min": reading("generation"), "width_min": reading("lanes"),
                                              "gen_max": reading("generation"), "width_max": reading("lanes"),
                                              "reads": value("count"), "gen_reads": Opt({"*": value("count")}),
                                              "width_reads": Opt({"*": value("count")})})}),
              "replay_counter": Opt({"before": reading("count"), "after": reading("count"),
                                     "rise": reading("count")}),
              "unread": Opt({"*": ANY})}],
}

DIAGNOSTIC = PCIE_LOAD = Diagnostic(
    name="pcie-under-load", key="pcie_load", what="PCIe link under load", one="PCIe-under-load measurement",
    recording="PCIe under load", fixture="pcie_load",
    doc="Each GPU's PCIe link under host<->device copies: its generation and width read during the load (a link "
        "that trains down shows only then) and its replay counter's rise (live), or the bundle's pcie-load.json.",
    measurement="pcie_load", record_file="pcie-load.json", format="gpufabric-pcie-load/1", shape=SHAPE,
    script="pcie_load.py", check="checks/pcie_load.py", per_gpu=True,
    # long enough to read the link under load, short enough for a single-GPU acceptance within 45 s
    measure_as="pcie", measure_section=frozen({"seconds": 2}))
