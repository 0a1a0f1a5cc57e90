"""Published figures of GPU models, each with its source: what a profile's floors can be compared against.

One YAML per model in ``pytest_gpufabric/references/`` (shipped inside the package), validated against
``references/reference.schema.json`` and then against the rules a schema cannot say: every number is finite, every
non-null figure is backed by a source's ``what`` (or by ``derived``, arithmetic on sourced figures), every null
figure is named in ``notes`` with why, and ``derived`` only names figures the file has.

Units are in the names (house style): ``*_gbps`` GB/s per direction unless it says ``bidirectional``, ``*_bytes``,
``*_mhz``, ``*_w``. "GB" as NVIDIA sells memory is taken as 1e9 bytes (``memory_bytes_sold``); what NVML reports
(``memory_bytes_nvml``) is the number a machine shows.

    >>> find_reference("NVIDIA H100 80GB HBM3").model
    'h100-sxm'
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import GpuFabricError
from .paths import PACKAGE_DIR
from .units import MIB

REFERENCES_DIR = PACKAGE_DIR / "references"
SCHEMA_PATH = REFERENCES_DIR / "reference.schema.json"
#: per-model floors of memory bandwidth as a fraction of NVML's peak, where a profile states none
HBM_FRACTION_FLOORS_PATH = REFERENCES_DIR / "hbm-fraction-floors.json"

#: the spec figures a source must back when they are not null (``memory_nvml_observed`` and ``recorded`` carry
#: their own provenance per entry)
NUMERIC_FIELDS = (
    "memory_gb_sold", "memory_bytes_sold", "memory_bytes_nvml", "memory_bandwidth_gbps", "memory_bus_width_bits",
    "memory_max_clock_mhz", "nvlink_generation", "nvlink_links", "nvlink_gbps_per_link_per_direction",
    "nvlink_gbps_per_direction", "nvlink_gbps_bidirectional", "pcie_generation", "pcie_width",
    "pcie_gbps_per_direction", "pcie_gbps_bidirectional", "power_limit_w", "bf16_tflops_dense", "fp16_tflops_dense",
    "bf16_tflops_sparse", "fp16_tflops_sparse", "host_link_gbps_per_direction", "host_link_gbps_bidirectional",
)
#: fields a source's ``what`` may name besides the numbers
DESCRIPTIVE_FIELDS = ("nvml_names", "memory_type", "nvlink_supported", "memory_nvml_observed", "recorded", "host_link")


class ReferenceDataError(GpuFabricError):
    """A reference file that is not valid: the file, the JSON path and what is wrong. A bug in the shipped data."""


@dataclass(frozen=True, eq=False)  # eq=False: holds dicts, so compare and hash by identity
class Reference:
    """One GPU model's published figures (see the module docstring for units); ``None`` = not sourced."""

    model: str
    name: str
    nvml_names: tuple[str, ...]
    aliases: tuple[str, ...]
    memory_gb_sold: float | None
    memory_bytes_sold: int | None
    memory_bytes_nvml: int | None
    memory_type: str | None
    memory_bandwidth_gbps: float | None
    memory_bus_width_bits: int | None
    memory_max_clock_mhz: float | None
    nvlink_supported: bool
    nvlink_generation: int | None
    nvlink_links: int | None
    nvlink_gbps_per_link_per_direction: float | None
    nvlink_gbps_per_direction: float | None
    nvlink_gbps_bidirectional: float | None
    pcie_generation: int | None
    pcie_width: int | None
    pcie_gbps_per_direction: float | None
    pcie_gbps_bidirectional: float | None
    power_limit_w: float | None
    bf16_tflops_dense: float | None
    fp16_tflops_dense: float | None
    sources: tuple[dict, ...]
    notes: tuple[str, ...]
    path: Path
    bf16_tflops_sparse: float | None = None
    fp16_tflops_sparse: float | None = None
    memory_nvml_observed: tuple[dict, ...] = ()
    derived: dict[str, str] = field(default_factory=dict)
    recorded: dict | None = None
    #: optional, for GPUs whose host CPU is not behind PCIe (GB200/GB300: "NVLink-C2C"); None = PCIe, the pcie_* fields
    host_link: str | None = None
    host_link_gbps_per_direction: float | None = None
    host_link_gbps_bidirectional: float | None = None

    @property
    def memory_peak_from_clock_gbps(self) -> float | None:
        """Bus width / 8 x NVML's max memory clock x 2 (two transfers per clock, as NVML reports HBM and GDDR6
        clocks): the peak the machine's own numbers give, to hold against the published bandwidth."""
        if self.memory_bus_width_bits is None or self.memory_max_clock_mhz is None:
            return None
        return self.memory_bus_width_bits / 8 * self.memory_max_clock_mhz * 2 / 1000

    def sources_for(self, field_name: str) -> list[dict]:
        """The sources whose ``what`` names this field."""
        return [s for s in self.sources if field_name in s["what"]]

    def to_json(self) -> dict:
        """A JSON-ready dict of every field (the source file as a string)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["path"] = str(self.path)
        for key in ("nvml_names", "aliases", "notes"):
            out[key] = list(out[key])
        out["sources"] = [dict(s) for s in self.sources]
        out["memory_nvml_observed"] = [dict(o) for o in self.memory_nvml_observed]
        out["memory_peak_from_clock_gbps"] = self.memory_peak_from_clock_gbps
        return out


# --- validation ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _json_path(parts) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _walk_numbers(node: object, where: tuple = ()) -> Iterator[tuple[tuple, float]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk_numbers(value, (*where, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk_numbers(value, (*where, i))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield where, node


def validation_errors(doc: object, path: Path | str = "<reference>") -> list[str]:
    """Every problem with one reference document, as 'file: $.json.path: message' lines ([] when valid)."""
    errors = [f"{path}: {_json_path(e.absolute_path)}: {e.message}"
              for e in sorted(_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
    if not isinstance(doc, dict):
        return errors
    for where, number in _walk_numbers(doc):
        if not math.isfinite(number):
            errors.append(f"{path}: {_json_path(where)}: {number!r} is not a finite number")
    stem = Path(str(path)).stem
    if Path(str(path)).suffix in (".yaml", ".yml") and doc.get("model") not in (None, stem):
        errors.append(f"{path}: $.model: {doc.get('model')!r} is not the file's name {stem!r}")
    sources = doc.get("sources") if isinstance(doc.get("sources"), list) else []
    derived = doc.get("derived") if isinstance(doc.get("derived"), dict) else {}
    backed = {name for s in sources if isinstance(s, dict) for name in s.get("what", []) if isinstance(name, str)}
    known = set(NUMERIC_FIELDS) | set(DESCRIPTIVE_FIELDS)
    for i, s in enumerate(sources):
        for j, name in enumerate(s.get("what", []) if isinstance(s, dict) else []):
            if name not in known:
                errors.append(f"{path}: $.sources[{i}].what[{j}]: {name!r} is not a reference field")
    for name, formula in derived.items():
        if name not in NUMERIC_FIELDS:
            errors.append(f"{path}: $.derived.{name}: not a numeric reference field")
        elif doc.get(name) is None:
            errors.append(f"{path}: $.derived.{name}: derived, but the figure is null")
        elif not any(other in str(formula) for other in NUMERIC_FIELDS if other != name):
            errors.append(f"{path}: $.derived.{name}: the formula {formula!r} names no other reference field")
    observed = [o.get("mib") for o in doc.get("memory_nvml_observed", []) if isinstance(o, dict)]
    nvml_bytes = doc.get("memory_bytes_nvml")
    if isinstance(nvml_bytes, int) and observed:
        if any(mib * MIB != nvml_bytes for mib in observed):
            errors.append(f"{path}: $.memory_bytes_nvml: {nvml_bytes} disagrees with memory_nvml_observed "
                          f"({sorted(set(observed))} MiB): set it only when every observation agrees")
        else:
            backed.add("memory_bytes_nvml")  # each observation names its own source
    notes = " ".join(n for n in doc.get("notes", []) if isinstance(n, str))
    for name in NUMERIC_FIELDS:
        value = doc.get(name)
        if value is None:
            if name in doc and name not in notes:
                errors.append(f"{path}: $.{name}: null, and notes do not say why (name the field in a note)")
        elif name not in backed and name not in derived:
            errors.append(f"{path}: $.{name}: {value!r} has no source (no sources[].what names it, not derived)")
    return errors


def _reference_from(doc: dict, path: Path) -> Reference:
    names = {f.name for f in dataclasses.fields(Reference)}
    values = {key: value for key, value in doc.items() if key in names}
    for key in ("nvml_names", "aliases", "notes", "sources", "memory_nvml_observed"):
        if key in values:
            values[key] = tuple(values[key])
    return Reference(path=path, **values)


def load_reference_file(path: Path) -> Reference:
    """One YAML file -> a validated Reference. Raises ReferenceDataError naming every problem."""
    import yaml

    from .formats.strict import load_yaml_text

    try:
        doc = load_yaml_text(path.read_text(encoding="utf-8"))  # aliases and duplicate keys refused
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise ReferenceDataError(f"{path}: cannot read the reference: {exc}") from None
    errors = validation_errors(doc, path)
    if errors:
        raise ReferenceDataError("\n".join(errors))
    return _reference_from(doc, path)


def reference_files(directory: Path = REFERENCES_DIR) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))


@functools.lru_cache(maxsize=4)
def _load(directory: Path) -> dict[str, Reference]:
    refs: dict[str, Reference] = {}
    for path in reference_files(directory):
        ref = load_reference_file(path)
        refs[ref.model] = ref
    claimed: dict[str, str] = {}
    for ref in refs.values():
        for key in (*ref.nvml_names, *ref.aliases, ref.model):
            other = claimed.setdefault(key.lower(), ref.model)
            if other != ref.model:
                raise ReferenceDataError(f"{ref.path}: {key!r} also names {other!r}: names and aliases must be unique")
    return refs


def load_references(directory: Path | None = None) -> dict[str, Reference]:
    """Every shipped reference by its short id ('h100-sxm'). Raises ReferenceDataError on invalid data."""
    return dict(_load(Path(directory) if directory is not None else REFERENCES_DIR))


def find_reference(name: str, references: dict[str, Reference] | None = None) -> Reference | None:
    """The reference for an NVML name or a typed name: an exact NVML name, else one case-insensitively, else a
    model id or alias (case-insensitive), else the one model whose NVML name or alias contains `name` as a
    substring ('2080 Ti'). None when nothing matches or a substring matches more than one model."""
    refs = references if references is not None else load_references()
    text = name.strip()
    if not text:
        return None
    for ref in refs.values():
        if text in ref.nvml_names:
            return ref
    lowered = text.lower()
    for ref in refs.values():
        if lowered in (n.lower() for n in ref.nvml_names):
            return ref
    for ref in refs.values():
        if lowered == ref.model or lowered in ref.aliases:
            return ref
    hits = {ref.model: ref for ref in refs.values()
            for candidate in (*ref.nvml_names, *ref.aliases, ref.name) if lowered in candidate.lower()}
    return next(iter(hits.values())) if len(hits) == 1 else None


@functools.cache
def _hbm_fraction_floors() -> tuple[tuple[str, float], ...]:
    """(the text a GPU's NVML name contains, its floor), in the data file's order; checked when read."""
    path = HBM_FRACTION_FLOORS_PATH
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["floors"]
        floors = tuple((row["model_name_contains"], row["min_fraction_of_peak"]) for row in rows)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ReferenceDataError(f"{path}: not a list of floors ({exc})") from None
    for index, (text, fraction) in enumerate(floors):
        if not isinstance(text, str) or not text or isinstance(fraction, bool) \
                or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise ReferenceDataError(f"{path}: $.floors[{index}]: a model name and a fraction in (0, 1] are needed")
    return floors


def hbm_fraction_floor(gpu_name: object) -> float | None:
    """The fraction of NVML's peak memory bandwidth a GPU of this NVML name is held to where the profile states no
    floor (references/hbm-fraction-floors.json): the first row whose model its name contains; None for another GPU."""
    return next((fraction for text, fraction in _hbm_fraction_floors() if text in str(gpu_name or "")), None)
