"""The validated profile as typed data: what the machine was sold as."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..fabric.model import nvlink_count_of_label
from ..verdict import Waiver
from .quantities import Quantity, quantities_in


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    sha256: str  # of the resolved profile (inheritance applied) as canonical JSON; see loader.canonical_json
    data: dict  # the resolved document, as validated
    chain: tuple[Path, ...] = field(default=())  # this file first, then what it extends

    # --- quantities -----------------------------------------------------------------------------------
    @cached_property
    def _quantities(self) -> dict[tuple[str | int, ...], Quantity]:
        return {quantity.keys: quantity for quantity in quantities_in(self.data)}

    def quantity(self, *keys: str | int, default: float | int | None = None) -> float | int | None:
        """The number at ``keys``, parsed once, in its schema $def's unit (bytes, GB/s, Gb/s or seconds):
        ``quantity("memory_bandwidth", "min")`` -> 3000.0 for `3000 GB/s`; ``default`` where the profile gives
        none. ``data`` keeps the text as written (the sha256 and the results embed it). Raises ValueError for a
        text that does not parse, which only a profile read without the loader (embedded in results) can hold."""
        found = self._quantities.get(keys)
        return default if found is None else found.parsed

    # --- gpus -----------------------------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        return int(self.data["gpus"]["count"])

    @property
    def gpu_model(self) -> str | None:
        return self.data["gpus"].get("model")

    @property
    def gpu_memory_bytes(self) -> int | None:
        return self.quantity("gpus", "memory")

    @property
    def pcie(self) -> dict:
        return self.data["gpus"].get("pcie", {})

    @property
    def ecc(self) -> bool | None:
        return self.data["gpus"].get("ecc")

    # --- topology -------------------------------------------------------------------------------------
    @property
    def topology(self) -> dict:
        return self.data.get("topology", {})

    @property
    def matrix(self) -> dict[str, dict[str, str]]:
        return self.topology.get("matrix", {})

    @property
    def nics(self) -> dict[str, str]:
        """NIC column -> device: the `nics` legend, and every non-GPU row of the matrix (its device unnamed
        unless the legend names it or the column is the device name, as older drivers print it)."""
        named = dict(self.topology.get("nics", {}))
        for row in self.matrix:
            if not row.startswith("GPU") and row not in named:
                named[row] = None if row.startswith("NIC") else row
        return named

    # --- nvlink ---------------------------------------------------------------------------------------
    @property
    def nvlink(self) -> dict:
        return self.data.get("nvlink", {})

    @property
    def nvlink_min_speed_gbps(self) -> float | None:
        return self.quantity("nvlink", "min_speed")

    def nvlinks_between(self, a: int, b: int) -> int:
        """NVLinks the profile's matrix promises between two GPUs (0: none promised)."""
        return nvlink_count_of_label(self.matrix.get(f"GPU{a}", {}).get(f"GPU{b}", ""))

    # --- rdma -----------------------------------------------------------------------------------------
    @property
    def rdma(self) -> dict:
        return self.data.get("rdma", {})

    @property
    def rdma_devices(self) -> list[dict]:
        return self.rdma.get("devices", [])

    def rdma_device_rates(self) -> list[float | None]:
        """Each promised RDMA device's rate in Gb/s, parsed (None where it promises none), in profile order."""
        return [self.quantity("rdma", "devices", i, "rate") for i in range(len(self.rdma_devices))]

    # --- bandwidth ------------------------------------------------------------------------------------
    @property
    def bandwidth(self) -> dict:
        return self.data.get("bandwidth", {})

    def collective_thresholds(self) -> list[tuple[str, dict]]:
        """(op, threshold) for every promised collective bandwidth, in profile order."""
        return [(op, threshold) for op, thresholds in self.bandwidth.get("collectives", {}).items()
                for threshold in thresholds]

    def all_reduce_busbw_floors(self) -> list[dict]:
        """The all_reduce thresholds that set a bus-bandwidth floor (the burn-in holds its all_reduce to them)."""
        return [t for op, t in self.collective_thresholds() if op == "all_reduce" and "min_busbw" in t]

    def copy_thresholds(self) -> dict[str, dict]:
        return {kind: spec for kind, spec in self.bandwidth.get("copy", {}).items() if kind != "size"}

    # --- memory, burn-in, platform ---------------------------------------------------------------------
    @property
    def memory(self) -> dict:
        """The ``memory`` section: the memory suite's (and the burn-in's memory workload's) settings."""
        return self.data.get("memory", {})

    @property
    def burn_in(self) -> dict:
        """The ``burn_in`` section: the burn-in's settings and floors."""
        return self.data.get("burn_in", {})

    @property
    def has_burn_in(self) -> bool:
        """The profile has a ``burn_in`` section (its floors hold a burn-in the operator asks for)."""
        return "burn_in" in self.data

    @property
    def platform(self) -> dict:
        """The ``platform`` section: the host settings promised ({} where none, or a null section)."""
        return self.data.get("platform") or {}

    @property
    def waivers(self) -> list:
        """The profile's ``waive:`` list as verdict.Waiver records (agreed in writing, shown on the cover)."""
        return [Waiver(w["promise"], w["reason"], f"profile {self.name}") for w in self.data.get("waive", [])]

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """The GPU pairs suites exercise: as listed, else every pair the matrix joins by NVLink."""
        if "pairs" in self.data:
            return [(int(a), int(b)) for a, b in self.data["pairs"]]
        return [
            (a, b)
            for a, b in itertools.combinations(range(self.gpu_count), 2)
            if self.nvlinks_between(a, b) > 0
        ]
