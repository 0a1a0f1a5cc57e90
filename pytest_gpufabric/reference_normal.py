"""What is normal for a figure held against a GPU model's published peak: the peak, what this project's own
recorded runs reached of it, and the verdict in words. ``gpufabric parse --reference`` (reference_judge.py) and
the report's Reference column (``judge_check``) both judge by it.

What "normal" means, and where each threshold comes from:

- **The peak** is the catalogue's published figure per direction (``pytest_gpufabric/references/``): busbw and
  GPU-to-GPU copies against ``nvlink_gbps_per_direction`` when the model has NVLink (nccl-tests and nvbandwidth do
  not print whether the GPUs were NVLink-connected, so the basis is said, never guessed), else
  ``pcie_gbps_per_direction``; host<->device copies against the PCIe peak; DCGM's memory bandwidth against
  ``memory_bandwidth_gbps``; perftest against the port's line rate, which only the caller can give.
- **Normal** is at least :data:`NORMAL_OF_RECORDED` (0.9) of the lowest fraction of the same peak that this
  project's own recorded runs reached for the same kind of figure at the largest recorded size not above the one
  judged (the references' ``recorded:`` blocks, written by ``benchmarks/reference_fractions.py``). 0.9 is the margin
  ``gpufabric profile init --measure`` writes floors at; a healthy machine's repeats at one size spread by about
  1 % in those recordings (H200 all_reduce at 1 GiB: 0.730-0.737), so a figure below 0.9 of the lowest is not
  run-to-run noise. The model's own recordings are used where there are some, else every model's of the same
  basis (the line says whose); ops this project never recorded are held to all_reduce's, since nccl-tests' busbw is
  defined to be comparable with the hardware peak across operations (nccl-tests doc/PERFORMANCE.md).
- **Not on NVLink**: busbw at or below the model's published PCIe peak per direction (64 GB/s on H100 and H200,
  14 % of their NVLink peak) is no more than PCIe could have carried, so NVLink was most likely not in use.
- **perftest** is normal at :data:`PERFTEST_NORMAL_OF_LINE_RATE` (0.9) of the line rate or more: the floor of the
  shipped profile a100-pcie-roce (NVIDIA's usual 90 %), which the project's real capture meets at 23.14 of 25 Gb/s.
- **Not judged**, with why: ranks on more than one host (the network between them bounds busbw, and the file
  does not name it), sizes below every recorded size, figures of a kind this project has no recorded run of.
"""

from __future__ import annotations

import re
from typing import Any

from .diagnostics.hbm import HBM
from .reference import NUMERIC_FIELDS, Reference
from .units import GIB, KIB, MIB, is_number

#: normal = at least this fraction of the lowest fraction of the peak that this project's recorded runs reached
NORMAL_OF_RECORDED = 0.9
#: perftest: normal = at least this fraction of the line rate (profiles/a100-pcie-roce.yaml min_fraction_of_rate)
PERFTEST_NORMAL_OF_LINE_RATE = 0.9

NVLINK, PCIE, MEMORY, LINE_RATE = "nvlink", "pcie", "memory", "line_rate"
#: the catalogue field each basis's peak comes from
PEAK_FIELDS = {NVLINK: "nvlink_gbps_per_direction", PCIE: "pcie_gbps_per_direction", MEMORY: "memory_bandwidth_gbps"}
BASIS_WORDS = {NVLINK: "NVLink", PCIE: "PCIe", MEMORY: "memory bandwidth", LINE_RATE: "line rate"}

#: what to look at when a figure is low, by basis
LOOK_AT = {
    NVLINK: "look at NVLink state (`nvidia-smi nvlink -s`), NCCL_P2P_LEVEL, NCCL_P2P_DISABLE and PCIe ACS "
            "(`lspci -vvv | grep ACSCtl`)",
    PCIE: "look at the PCIe link's generation and width (`nvidia-smi -q`), PCIe ACS (`lspci -vvv | grep ACSCtl`), "
          "NCCL_P2P_DISABLE and the CPU/NUMA placement of the process",
    "pcie_host": "look at the PCIe link's generation and width (`nvidia-smi -q`), pinned host memory and the CPU/NUMA "
                 "placement of the process",
    MEMORY: "look at clocks and throttling (`nvidia-smi -q -d PERFORMANCE`), ECC and remapped rows",
    LINE_RATE: "look at the port's active speed and width (`ibv_devinfo -v`, `ethtool`), the MTU, PFC/ECN on RoCE "
               "and the NIC's PCIe link",
}

NORMAL, ABOVE_PEAK, LOW, NOT_ON_NVLINK, NOT_JUDGED = "normal", "above peak", "low", "not on NVLink", "not judged"
#: a row that is no measurement to hold against a peak: wrong elements, numbers that contradict each other, a
#: perftest figure above what the port can carry
WRONG_RESULTS, INCONSISTENT, ABOVE_LINE_RATE = "wrong results", "inconsistent", "above line rate"
#: models whose NVLink Switch trays reduce in the network (NVLink SHARP across the NVL72 rack's NVLink domain): an
#: all_reduce busbw there can pass the per-GPU NVLink peak, so such a figure is a reading, never an impossible one.
#: Sources: NVIDIA's NVLink / NVLink Switch page (https://www.nvidia.com/en-us/data-center/nvlink/, NVIDIA SHARP
#: in-network reductions), the public GB200 NVL72 72-rank all_reduce reaching 93 % of 900 GB/s
#: (tests/data/captures/public/blackwell/), references/gb200.yaml and gb300.yaml notes; docs/blackwell.md
IN_NETWORK_REDUCTION = frozenset({"gb200", "gb300"})
#: the collectives NVLink SHARP reduces in the switch: only they may pass the peak (sendrecv, all_gather, alltoall,
#: broadcast move the data as it is)
REDUCING_OPS = frozenset({"all_reduce", "reduce_scatter", "reduce"})
IN_NETWORK_WORDS = ("NVLink SHARP reduces in the rack's switch trays, so a busbw above the per-GPU NVLink peak is "
                    "possible here, not an impossible reading")


# --- the peak ------------------------------------------------------------------------------------------------


def peak_sources(ref: Reference, field_name: str) -> list[str]:
    """The urls of the sources behind one figure: those naming it, and for a derived figure those naming the figures
    its formula uses."""
    fields = [field_name]
    formula = ref.derived.get(field_name)
    if formula:
        fields += [w for w in re.findall(r"[a-z0-9_]+", formula) if w in NUMERIC_FIELDS and w != field_name]
    urls: list[str] = []
    for name in fields:
        for source in ref.sources_for(name):
            if source["url"] not in urls:
                urls.append(source["url"])
    return urls


# --- what this project's runs reached ------------------------------------------------------------------------


def _kind_of(what: str) -> tuple[str | None, str | None]:
    """A recorded entry's kind and operation from its ``what``: ('busbw', 'all_reduce'), ('copy', 'gpu_to_gpu')..."""
    if " busbw" in what:
        return "busbw", what.split(" busbw", 1)[0].strip()
    lowered = what.lower()
    for words, op in (("gpu-to-gpu copy", "gpu_to_gpu"), ("host-to-device copy", "host_to_device"),
                      ("device-to-host copy", "device_to_host")):
        if lowered.startswith(words):
            return "copy", op
    if "hbm" in lowered or "memory bandwidth" in lowered:
        return "memory", None
    return None, None


def _basis_of(entry: dict, ref: Reference) -> str | None:
    """Which published peak an entry's fractions are of: the one that its figure / its fraction gives back."""
    gbps, fractions = entry.get("gbps"), entry.get("of_published")
    if not gbps or not fractions or not fractions[0]:
        return None
    implied = gbps[0] / fractions[0]
    best = None
    for basis, field_name in PEAK_FIELDS.items():
        peak = getattr(ref, field_name)
        if peak and abs(implied - peak) / peak < 0.05 and (best is None or abs(implied - peak) < best[1]):
            best = (basis, abs(implied - peak))
    return best[0] if best else None


def recorded_samples(references: dict[str, Reference]) -> list[dict[str, Any]]:
    """Every recorded fraction of the catalogue as a flat record: model, name, kind, op, basis, size, ranks,
    [lowest, highest] fraction of the published peak, and the entry's ``what``."""
    samples = []
    for ref in references.values():
        for entry in (ref.recorded or {}).get("fractions", []):
            kind, op = _kind_of(entry.get("what", ""))
            basis = _basis_of(entry, ref)
            if kind is None or basis is None:
                continue
            samples.append({"model": ref.model, "name": ref.name, "kind": kind, "op": op, "basis": basis,
                            "size_bytes": entry.get("size_bytes"), "ranks": entry.get("ranks"),
                            "of_published": tuple(entry["of_published"]), "what": entry["what"]})
    return samples


def recorded_floor(samples: list[dict], ref: Reference, kind: str, op: str | None, basis: str,
                   size_bytes: int | None) -> dict[str, Any]:
    """The recorded fractions a figure is held to: the model's own runs of the same op where there are any, else
    every model's (then all_reduce's for a busbw op never recorded; memory bandwidth only ever the model's own), at
    the largest recorded size not above `size_bytes` (any size for copies and memory, which the recordings carry
    without one).

    Returns ``{"lowest", "highest", "size_bytes", "op", "models", "samples"}``, or ``{"why"}`` when nothing
    recorded compares."""
    same = [s for s in samples if s["kind"] == kind and s["basis"] == basis]
    own = [s for s in same if s["model"] == ref.model]
    if basis == MEMORY:
        # never another model's: HBM3 on an H100 reaches 0.95-0.98 of its peak, an A100's HBM2e or an L40S's GDDR6
        # reach less, so another model's share would call a healthy board low
        if not own:
            return {"why": f"this project has no recorded run of {ref.name}'s memory bandwidth to compare with "
                           "(other models' memories reach other shares of their peaks)"}
        same = own
    pools = [[s for s in own if s["op"] == op], [s for s in same if s["op"] == op]]
    if kind == "busbw" and op != "all_reduce":
        pools += [[s for s in own if s["op"] == "all_reduce"], [s for s in same if s["op"] == "all_reduce"]]
    pool = next((p for p in pools if p), None)
    if pool is None:
        what = f"{op} {kind}" if op else kind
        return {"why": f"this project has no recorded run of {what} against the {BASIS_WORDS[basis]} peak to "
                       "compare with"}
    if kind == "busbw":
        sizes = sorted({s["size_bytes"] for s in pool if s["size_bytes"] is not None})
        below = [s for s in sizes if size_bytes is not None and s <= size_bytes]
        if not below:
            return {"why": f"smaller than every size this project recorded ({format_size(sizes[0])}): "
                           "latency-bound, not judged against a peak"}
        pool = [s for s in pool if s["size_bytes"] == below[-1]]
    return {"lowest": min(s["of_published"][0] for s in pool), "highest": max(s["of_published"][1] for s in pool),
            "size_bytes": pool[0]["size_bytes"], "op": pool[0]["op"],
            "models": sorted({s["name"] for s in pool}), "samples": sorted({s["what"] for s in pool})}


# --- words ---------------------------------------------------------------------------------------------------


def format_size(n: int | None) -> str:
    """4294967296 -> '4 GiB', 268435456 -> '256 MiB', 1000 -> '1000 B' (whole units where they are whole)."""
    if n is None:
        return "?"
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit:
            value = n / unit
            return f"{value:g} {name}" if value == int(value) else f"{value:.2f} {name}"
    return f"{n} B"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _range(low: float, high: float) -> str:
    return f"{low * 100:.0f} %" if round(low * 100) == round(high * 100) else f"{low * 100:.0f}-{high * 100:.0f} %"


def judge(fraction: float, gbps: float, floor: dict, basis: str, ref: Reference | None,
          busbw: bool = False, host: bool = False, op: str | None = None) -> tuple[str, str]:
    """(verdict, words) for one figure already put as a fraction of its peak, against what was recorded: `busbw`
    for nccl-tests' bus bandwidth (of collective `op`), `host` for a copy between host and GPU (what to look at
    differs)."""
    if "why" in floor:
        return NOT_JUDGED, f"not judged: {floor['why']}"
    where = f" at {format_size(floor['size_bytes'])}" if floor.get("size_bytes") else ""
    stand_in = f"{floor['op']} " if floor.get("op_stand_in") else ""
    seen = (f"this project's {stand_in}runs on {', '.join(floor['models'])} reached "
            f"{_range(floor['lowest'], floor['highest'])}{where}")
    if stand_in:
        seen += "; busbw is comparable across operations"
    if fraction > 1:
        why = ("nccl-tests' busbw assumes a ring, and NCCL's in-switch (NVLS) and tree algorithms can go past it"
               if busbw else "check that the model and the basis are right")
        if busbw and basis == NVLINK and ref is not None and ref.model in IN_NETWORK_REDUCTION \
                and op in REDUCING_OPS:
            why = IN_NETWORK_WORDS
        return ABOVE_PEAK, f"above the published peak per direction ({seen}); {why}"
    for_size = " for this size" if floor.get("size_bytes") else ""
    if fraction >= NORMAL_OF_RECORDED * floor["lowest"]:
        return NORMAL, f"normal{for_size} ({seen})"
    pcie = ref.pcie_gbps_per_direction if ref is not None else None
    if basis == NVLINK and pcie is not None and gbps <= pcie:
        return NOT_ON_NVLINK, (f"no faster than PCIe could carry ({pcie:g} GB/s per direction): NVLink is most "
                               f"likely not in use ({seen}); {LOOK_AT[NVLINK]}")
    return LOW, f"low{for_size} ({seen}); {LOOK_AT['pcie_host' if host else basis]}"


def _floor(samples: list[dict], ref: Reference, kind: str, op: str | None, basis: str, size: int | None) -> dict:
    floor = recorded_floor(samples, ref, kind, op, basis, size)
    if "why" not in floor and floor["op"] != op:
        floor["op_stand_in"] = True
    return floor


# --- this project's own checks (the report's Reference column) ------------------------------------------

_OWN_BUSBW = re.compile(r"^(?:bandwidth|nccl-tests)-(.+)$")


def judge_check(check: dict, ref: Reference, samples: list[dict], nvlink: bool) -> dict | None:
    """One check record of a results document held against the model's published peak, by the same rule as
    ``parse --reference``: the figure the check judged (busbw at its size, the slowest copy, the best HBM figure)
    as a fraction of its peak, and normal, low or not judged against what this project's runs reached. ``nvlink``:
    the machine's GPUs have active NVLinks (the run knows its topology, so GPU-to-GPU traffic is held against the
    NVLink peak only where there are links). None for a check without such a figure or a peak to hold it to."""
    name, found, expected = str(check.get("name") or ""), check.get("found"), check.get("expected")
    if not isinstance(found, dict):
        return None
    expected = expected if isinstance(expected, dict) else {}
    fabric = NVLINK if nvlink and ref.nvlink_gbps_per_direction is not None else PCIE
    host = False
    match = _OWN_BUSBW.match(name)
    if match:
        kind, op, gbps, size = "busbw", match.group(1), found.get("busbw_gbps"), expected.get("size_bytes")
        if isinstance(found.get("ranks"), int) and found["ranks"] < 2:
            return None
        basis, what = fabric, f"{op} busbw at {format_size(size)}"
    elif name in ("copy-host_to_device", "copy-device_to_host", "copy-gpu_to_gpu"):
        kind, op, size = "copy", name[len("copy-"):], None
        values = [v for v in found.values() if is_number(v)]
        gbps = min(values) if values else None
        host = op != "gpu_to_gpu"
        basis, what = (PCIE if host else fabric), f"slowest {op.replace('_', '-')} copy"
    elif name == HBM.name:
        kind, op, size, gbps, basis, what = "memory", None, None, found.get("best_gbps"), MEMORY, "HBM bandwidth"
    else:
        return None
    peak = getattr(ref, PEAK_FIELDS[basis])
    if not is_number(gbps) or not is_number(peak) or peak <= 0:
        return None
    fraction = gbps / peak
    verdict, words = judge(fraction, gbps, _floor(samples, ref, kind, op, basis, size), basis, ref,
                           busbw=kind == "busbw", host=host, op=op)
    per = "" if basis == MEMORY else " per direction"
    return {"model": ref.name, "basis": basis, "peak_gbps": peak, "gbps": gbps, "fraction_of_peak": round(fraction, 4),
            "verdict": verdict, "text": f"{what}: {gbps:.1f} GB/s, {_pct(fraction)} of the {BASIS_WORDS[basis]} "
                                        f"peak of {ref.name} ({peak:g} GB/s{per}): {words}",
            "sources": peak_sources(ref, PEAK_FIELDS[basis])}
