"""What a per-GPU diagnostic measures and records, as plain data: the measurement part of its kind's declaration.

A descriptor says where the diagnostic is promised (its profile section, whose keys and defaults
profile.schema.json owns: ``settings`` reads them from there and nowhere else), what it runs (its standalone
workload), what it records (its bundle file, format tag and typed shape) and what ``gpufabric profile init
--measure`` runs for it. Its kind (kinds/<family>/) binds it to the functions above this layer: the launcher, the
``--measure`` step and the suite's check (kinds.base.Measurement).

The shipped diagnostics' descriptors sit in this package, one module each (``DIAGNOSTIC``, placed by its
``POSITION``), because their own check and workload modules, below kinds/, read them; ``recorded()`` lists them for
the layers below kinds/ that read every recording (formats/records.py, fabric/bundle.py). A diagnostic whose check
and workload need no descriptor may declare it in its kind package instead. docs/adding-a-diagnostic.md says how.

Besides ``name``, a descriptor keeps the spellings that recordings, result files and users' tests already carry
(file names, format tags, fixtures, the results' ``series`` key). This package imports nothing of the plugin but
the typed shapes (formats/typed.py).
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

__all__ = ["Diagnostic", "frozen", "recorded"]

SCHEMA = Path(__file__).parent.parent / "profile" / "profile.schema.json"


@functools.cache
def _schema_sections() -> dict:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))["properties"]


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
    shape: Mapping  # the recording's typed shape (formats/typed.py): one row per GPU under ``gpus``
    script: str  # its standalone workload under workloads/: "pcie_load.py" ("" where it has none yet)
    check: str  # its check module, package-relative: "checks/pcie_load.py"
    per_gpu: bool  # a worker process per GPU (else one process drives every GPU)
    measure_as: str  # how `profile init --measure` names it as it goes: "pcie"
    measure_section: Mapping  # the section `--measure` runs and promises: {"seconds": 2}
    spread: bool = False  # `--measure` repeats it to see its spread (else it runs once)

    @property
    def defaults(self) -> dict:
        """The section's defaults, as profile.schema.json states them."""
        keys = _schema_sections()[self.key]["properties"]
        return {key: copy.deepcopy(spec["default"]) for key, spec in keys.items() if "default" in spec}

    def settings(self, section: Mapping) -> dict:
        """A profile section with the schema's defaults where it leaves a key out."""
        return {**self.defaults, **section}

    @property
    def file_kind(self) -> tuple[str, Mapping, str]:
        """(format tag, typed shape, what it is in words): how formats/records.py reads its file."""
        return self.format, self.shape, self.recording


def frozen(mapping: dict) -> Mapping:
    return MappingProxyType(mapping)


@functools.cache
def recorded() -> tuple[Diagnostic, ...]:
    """The shipped diagnostics whose descriptor sits in this package, in promise order (each module's POSITION)."""
    modules = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    modules = sorted((m for m in modules if hasattr(m, "DIAGNOSTIC")), key=lambda m: (m.POSITION, m.__name__))
    return tuple(module.DIAGNOSTIC for module in modules)
