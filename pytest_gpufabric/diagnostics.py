"""The per-GPU diagnostics, one descriptor each: every name a layer knows it by, declared once.

A descriptor says where the diagnostic is promised (its profile section, whose keys and defaults
profile.schema.json owns: ``settings`` reads them from there and nowhere else), how it runs (its standalone
workload and the launcher that starts it), what it records (its bundle file, format tag and typed shape), which
check judges it, and what ``gpufabric profile init --measure`` runs and promises for it. The layers loop over
``DIAGNOSTICS``: the promise catalogue, the measurement registry and its fixtures, the bundle readers, the
evidence of ``dcgmi diag``, ``--measure`` and the tests that hold them together; the report and the fleet follow
from the check's limits (checks/limits.py). docs/adding-a-diagnostic.md says how to add one.

Besides ``name``, a descriptor keeps the spellings that recordings, result files and users' tests already carry
(file names, format tags, fixtures, the results' ``series`` key), so that every layer looks them up here.

Plain data: this module imports nothing of the plugin but the typed shapes (formats/typed.py); launchers and
``--measure`` functions are named as ``module:function`` and imported when used.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from .formats.typed import ANY, BOARD, NOTE, TEXT, Field, Opt, reading, value

__all__ = ["DIAGNOSTICS", "HBM", "MEMORY_PATTERN", "PCIE_LOAD", "POWER_HOLD", "Diagnostic", "by_name"]

SCHEMA = Path(__file__).parent / "profile" / "profile.schema.json"


@functools.cache
def _schema_sections() -> dict:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))["properties"]


def _resolve(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True, eq=False)  # one object per diagnostic: compared and hashed by identity
class Diagnostic:
    name: str  # the promise and its check: "pcie-under-load"; every other name below is looked up from here
    key: str  # the profile section that promises it: "pcie_load"
    what: str  # the promise in words: "PCIe link under load"
    one: str  # one GPU's measurement in words, as a reason names it: "PCIe-under-load measurement"
    recording: str  # its recording in words, as a problem with the file names it: "PCIe under load"
    fixture: str  # the fixture its suite test asks for: "pcie_load"
    doc: str  # that fixture's docstring
    measurement: str  # its entry in the measurement registry and the results' ``series``: "pcie_load"
    record_file: str  # the bundle file a live run writes and a replay reads: "pcie-load.json"
    format: str  # the ``format`` tag of its workload's result (the standalone script spells it too)
    shape: dict  # the recording's typed shape (formats/typed.py): one row per GPU under ``gpus``
    script: str  # its standalone workload under workloads/: "pcie_load.py"
    launcher: str  # "module:function": (section, env, boards, fabric, *, repeats, plant_fault) -> [result]
    check: str  # its check module under checks/: "pcie_load"
    per_gpu: bool  # a worker process per GPU (else one process drives every GPU)
    measure_as: str  # how `profile init --measure` names it as it goes: "pcie"
    measure_section: Mapping  # the section `--measure` runs and promises: {"seconds": 2}
    measure: str  # "module:function" (measured, results, margin, where) writing that section and its notes
    spread: bool = False  # `--measure` repeats it to see its spread (else it runs once)
    dcgm: tuple[str, ...] = ()  # the `dcgmi diag` tests that speak to the same promise (evidence.py)

    @property
    def defaults(self) -> dict:
        """The section's defaults, as profile.schema.json states them."""
        keys = _schema_sections()[self.key]["properties"]
        return {key: copy.deepcopy(spec["default"]) for key, spec in keys.items() if "default" in spec}

    def settings(self, section: Mapping) -> dict:
        """A profile section with the schema's defaults where it leaves a key out."""
        return {**self.defaults, **section}

    def launcher_function(self) -> Callable[..., list[dict]]:
        return _resolve(self.launcher)

    def measure_function(self) -> Callable[..., None]:
        return _resolve(self.measure)


# --- the recordings' shapes ---------------------------------------------------------------------------------


def _frozen(mapping: dict) -> Mapping:
    return MappingProxyType(mapping)


_HBM = {
    "format": TEXT, "size_bytes": value("bytes"), "iters": value("count"), "warmup": value("count", False),
    "gpus": [{**BOARD, "copy_gbps": value("gbps"), "read_gbps": value("gbps"), "write_gbps": value("gbps"),
              "best_gbps": value("gbps"), "peak_gbps": reading("gbps"), "bus_width_bits": reading("count"),
              "max_mem_clock_mhz": reading("mhz"), "fraction_of_peak": reading("ratio")}],
}
_PATTERN = {
    "format": TEXT, "fraction": value("fraction", False), "seconds": value("seconds", False),
    "patterns": Opt([TEXT]), "chunk_bytes": value("bytes", False, True),
    "gpus": [{**BOARD, "free_bytes": value("bytes"), "total_bytes": value("bytes"), "tested_bytes": value("bytes"),
              "coverage": reading("fraction"), "chunks": reading("count"), "allocation_stopped": NOTE,
              "passes": [{"pattern": TEXT, "bytes": value("bytes"), "seconds": value("seconds"),
                          "mismatches": value("count")}],
              "mismatches": value("count"), "seconds": value("seconds"), "planted": Field("flag", False),
              "error": NOTE,
              "first_mismatches": Opt([{"offset_bytes": value("bytes"), "pattern": TEXT, "expected": ANY,
                                        "found": ANY, "xor_bits": Opt([value("count")])}])}],
}
_POWER = {
    "format": TEXT, "seconds": value("seconds"), "interval_s": value("seconds"), "warmup_s": value("seconds", False),
    "gpus": [{**BOARD, "power_limit_w": reading("watts"), "max_sm_clock_mhz": reading("mhz"),
              "thresholds_c": Opt({"*": reading("celsius")}), "tflops": reading("tflops"),
              "iterations": value("count", False), "unread": Opt({"*": ANY}),
              "samples": [{"t_s": value("seconds"), "power_w": reading("watts"), "sm_clock_mhz": reading("mhz"),
                           "temperature_c": reading("celsius"), "margin_c": reading("celsius"),
                           "reasons": Opt([TEXT])}]}],
}
_LINK = Opt({"gen": reading("generation"), "width": reading("lanes")})
_PCIE = {
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

# --- the diagnostics, in the order they are promised ----------------------------------------------------------

HBM = Diagnostic(
    name="hbm-bandwidth", key="memory_bandwidth", what="memory bandwidth", one="HBM bandwidth measurement",
    recording="HBM bandwidth", fixture="hbm_bandwidth",
    doc="Device-memory (HBM) bandwidth per GPU: copy, read and write, the best of N runs, against the peak NVML's "
        "bus width and maximum memory clock give (live), or the bundle's hbm.json.",
    measurement="hbm", record_file="hbm.json", format="gpufabric-hbm/1", shape=_HBM, script="hbm.py",
    launcher="pytest_gpufabric.workloads.diagnostics:launch_hbm", check="hbm", per_gpu=True,
    measure_as="hbm", measure_section=_frozen({"size": "4 GiB", "iters": 10}),
    measure="pytest_gpufabric.checks.hbm:measured_hbm", spread=True, dcgm=("memory_bandwidth",))

MEMORY_PATTERN = Diagnostic(
    name="memory-pattern", key="memory_pattern", what="memory pattern test", one="memory pattern test",
    recording="memory pattern test", fixture="memory_pattern",
    doc="The memory pattern test on every GPU at once (walking ones and zeros, address in address, random) over a "
        "stated fraction of free memory (live), or the bundle's memory-pattern.json.",
    measurement="memory_pattern", record_file="memory-pattern.json", format="gpufabric-mem-pattern/1",
    shape=_PATTERN, script="mem_pattern.py",
    launcher="pytest_gpufabric.workloads.diagnostics:launch_mem_pattern", check="hbm", per_gpu=False,
    # no floor to measure: the golden machine must pass it
    measure_as="pattern", measure_section=_frozen({"seconds": 5}),
    measure="pytest_gpufabric.checks.hbm:measured_pattern", dcgm=("memory",))

POWER_HOLD = Diagnostic(
    name="power-hold", key="power", what="sustained power and thermal behaviour", one="power hold",
    recording="power hold", fixture="power_hold",
    doc="Every GPU held at its power limit under a bf16 GEMM load for a stated time, NVML's power, SM clock, "
        "temperature and clock event reasons sampled throughout (live), or the bundle's power-hold.json.",
    measurement="power_hold", record_file="power-hold.json", format="gpufabric-power-hold/1",
    shape=_POWER, script="power_hold.py",
    launcher="pytest_gpufabric.workloads.power_pcie:launch_power_hold", check="power", per_gpu=False,
    # long enough to reach the power limit and hold it (an H100 is there within a second of the 3 s warm-up),
    # short enough for a single-GPU acceptance within 45 s; the burn-in is where a GPU is held for long
    measure_as="power", measure_section=_frozen({"seconds": 6}),
    measure="pytest_gpufabric.checks.power:measured_power",
    dcgm=("targeted_power", "targeted_stress", "pulse_test"))

PCIE_LOAD = Diagnostic(
    name="pcie-under-load", key="pcie_load", what="PCIe link under load", one="PCIe-under-load measurement",
    recording="PCIe under load", fixture="pcie_load",
    doc="Each GPU's PCIe link under host<->device copies: its generation and width read during the load (a link "
        "that trains down shows only then) and its replay counter's rise (live), or the bundle's pcie-load.json.",
    measurement="pcie_load", record_file="pcie-load.json", format="gpufabric-pcie-load/1", shape=_PCIE,
    script="pcie_load.py", launcher="pytest_gpufabric.workloads.power_pcie:launch_pcie_load", check="pcie_load",
    per_gpu=True,
    # long enough to read the link under load, short enough for a single-GPU acceptance within 45 s
    measure_as="pcie", measure_section=_frozen({"seconds": 2}),
    measure="pytest_gpufabric.checks.pcie_load:measured_pcie", dcgm=("pcie",))

DIAGNOSTICS: tuple[Diagnostic, ...] = (HBM, MEMORY_PATTERN, POWER_HOLD, PCIE_LOAD)


def by_name(name: str) -> Diagnostic | None:
    return next((d for d in DIAGNOSTICS if d.name == name), None)
