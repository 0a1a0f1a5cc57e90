"""What fraction of the published peaks did this project's own recorded runs reach?

Reads every recording in the repo that carries bandwidth numbers, finds each one's GPU model in the reference
catalogue (pytest_gpufabric/references/), and writes into that model's YAML a ``recorded:`` section: per
measurement (all_reduce and sendrecv busbw at each size and rank count, GPU-to-GPU copy, pinned host<->device
copy) the range measured, its fraction of the published peak per direction (NVLink from the reference, PCIe from
the reference) and of the link rate the machine itself reported (NVML's NVLink speeds summed over active links,
as the bandwidth checks use; PCIe gen x width after line coding, units.pcie_peak_gbps: gen 5 x16 = 63.0 GB/s),
and the files it came from.

Recordings read:
- tests/data/bundles/*/bandwidth.json (the bandwidth suite's workloads), with the bundle's nvml.json;
- tests/data/bundles/*/hbm.json (the HBM test: its best figure per GPU against memory_bandwidth_gbps);
- tests/data/bundles/*/nccl-tests-*.txt (nccl-tests output), with the bundle's nvidia-smi -q -x and nvlink -s;
- tests/data/results/**/*.json (results of live runs: the bandwidth and copy checks' found values).

    python benchmarks/reference_fractions.py            # rewrite the recorded: sections
    python benchmarks/reference_fractions.py --check    # exit 1 if a YAML is not what the recordings give
    python benchmarks/reference_fractions.py nvml-probe # print NVML's memory figures of this machine's GPUs

``nvml-probe`` is how pytest_gpufabric/references/recordings/h100-sxm-nvml-memory.json was made (ctypes on
libnvidia-ml, nothing else needed): bus width, max memory clock, total memory, power limits, max PCIe link.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from pytest_gpufabric.formats.nccl_tests import parse_nccl_tests
from pytest_gpufabric.formats.nvlink import parse_nvlink_status
from pytest_gpufabric.reference import REFERENCES_DIR, Reference, find_reference, load_references
from pytest_gpufabric.units import pcie_peak_gbps

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ROOT / "tests" / "data" / "bundles"
RESULTS = ROOT / "tests" / "data" / "results"
SCRIPT = "benchmarks/reference_fractions.py"
MARKER = "# --- recorded: written by benchmarks/reference_fractions.py from this repo's recordings; do not edit ---"

NVLINK, PCIE, MEMORY = "nvlink", "pcie", "memory"
HBM_WHAT = "HBM bandwidth, best of copy/read/write, each GPU"


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _measure(model: str, what: str, size: int | None, ranks: int | None, gbps: list[float], path_kind: str,
             link_rate: float | None, file: Path) -> dict:
    return {"model": model, "what": what, "size_bytes": size, "ranks": ranks, "gbps": gbps, "path": path_kind,
            "link_rate_gbps": round(link_rate, 3) if link_rate else None, "file": _rel(file)}


def _nvml_link_rate(gpus: list[dict]) -> float | None:
    """The slowest GPU's sum of active NVLink speeds (NVML reports MB/s), as checks.bandwidth.link_peak."""
    rates = [sum(lk["speed_mbps"] for lk in g.get("nvlinks", []) if lk.get("state") == 1) / 1000 for g in gpus]
    return min(rates) if rates and all(rates) else None


def _pcie_rate(gpus: list[dict], gen_key: str = "pcie_gen_max", width_key: str = "pcie_width_max") -> float | None:
    known = [(g.get(gen_key), g.get(width_key)) for g in gpus]
    if not known or any(not isinstance(gen, int) or not isinstance(width, int) for gen, width in known):
        return None
    return min(pcie_peak_gbps(gen, width) for gen, width in known)


def _model_of(names: set[str], refs: dict[str, Reference]) -> str | None:
    found = {getattr(find_reference(name, refs), "model", None) for name in names}
    return next(iter(found)) if len(found) == 1 else None


def from_bandwidth_bundles(refs: dict[str, Reference]) -> Iterator[dict]:
    for path in sorted(BUNDLES.glob("*/bandwidth.json")):
        nvml = json.loads((path.parent / "nvml.json").read_text())
        gpus = nvml["gpus"]
        model = _model_of({g["name"] for g in gpus}, refs)
        if model is None:
            continue
        nvlink, pcie = _nvml_link_rate(gpus), _pcie_rate(gpus)
        doc = json.loads(path.read_text())
        coll = doc.get("collectives") or {}
        for op, rows in (coll.get("ops") or {}).items():
            for row in rows:
                yield _measure(model, f"{op} busbw, torch.distributed over NCCL", row["size"], coll["world_size"],
                               [row["busbw"]], NVLINK, nvlink, path)
        copy = doc.get("copy") or {}
        pairs = [row["gbps"] for row in copy.get("gpu_to_gpu", []) if row.get("path") == "p2p"]
        if pairs:
            yield _measure(model, "GPU-to-GPU copy (peer to peer), each ordered pair", None, None, pairs, NVLINK,
                           nvlink, path)
        for direction in ("host_to_device", "device_to_host"):
            values = [row[direction]["gbps"] for row in copy.get("host_device", []) if direction in row]
            if values:
                yield _measure(model, f"{direction.replace('_', '-')} copy, pinned, each GPU", None, None, values,
                               PCIE, pcie, path)


def from_hbm_bundles(refs: dict[str, Reference]) -> Iterator[dict]:
    """The HBM test's best figure per GPU (hbm.json), its link rate the peak NVML's bus width and memory clock give."""
    for path in sorted(BUNDLES.glob("*/hbm.json")):
        gpus = json.loads(path.read_text()).get("gpus") or []
        model = _model_of({g.get("name") for g in gpus}, refs)
        values = [g["best_gbps"] for g in gpus if isinstance(g.get("best_gbps"), (int, float))]
        peaks = [g["peak_gbps"] for g in gpus if isinstance(g.get("peak_gbps"), (int, float))]
        if model is not None and values:
            yield _measure(model, HBM_WHAT, None, None, values, MEMORY, min(peaks) if peaks else None, path)


def from_nccl_tests_bundles(refs: dict[str, Reference]) -> Iterator[dict]:
    for path in sorted(BUNDLES.glob("*/nccl-tests-*.txt")):
        names = set(re.findall(r"<product_name>([^<]+)<", (path.parent / "nvidia-smi-q.xml").read_text()))
        model = _model_of(names, refs)
        if model is None:
            continue
        status = parse_nvlink_status((path.parent / "nvidia-smi-nvlink-s.txt").read_text())
        rates = [sum(lk.speed_gbps for lk in gpu["links"] if lk.active is True) for gpu in status.values()]
        nvlink = min(rates) if rates and all(rates) else None
        by_key: dict[tuple, list[float]] = {}
        for run in parse_nccl_tests(path.read_text()):
            version = run.get("version", "?")
            for row in run["rows"]:
                if row.get("oop"):
                    key = (f"{run['op']} busbw, nccl-tests {version} (out of place)", row["size"], run.get("nranks"))
                    by_key.setdefault(key, []).append(row["oop"]["busbw"])
        for (what, size, ranks), values in by_key.items():
            yield _measure(model, what, size, ranks, values, NVLINK, nvlink, path)


def from_results(refs: dict[str, Reference]) -> Iterator[dict]:
    for path in sorted(RESULTS.glob("**/*.json")):
        try:
            doc = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if not isinstance(doc, dict) or not doc.get("checks"):
            continue
        gpus = (doc.get("machine") or {}).get("gpus") or []
        model = _model_of({g.get("name") for g in gpus}, refs)
        if model is None:
            continue
        pcie = _pcie_rate([g.get("pcie") or {} for g in gpus], "gen_max", "width_max")
        checks = [c for c in doc["checks"] if c["name"].startswith(("bandwidth-", "copy-", "hbm-bandwidth"))]
        nvlink = next((c["found"].get("peak_gbps") for c in checks
                       if c["name"].startswith("bandwidth-") and str(c["found"].get("peak", "")).startswith("NVLink")),
                      None)
        for check in checks:
            found, expected = check.get("found") or {}, check.get("expected") or {}
            if check["name"].startswith("bandwidth-") and isinstance(found.get("busbw_gbps"), (int, float)):
                op = check["name"].removeprefix("bandwidth-")
                path_kind = NVLINK if str(found.get("peak", "")).startswith("NVLink") else PCIE
                yield _measure(model, f"{op} busbw, torch.distributed over NCCL", expected.get("size_bytes"),
                               found.get("ranks"), [found["busbw_gbps"]], path_kind, found.get("peak_gbps"), path)
            elif check["name"] == "hbm-bandwidth":
                if isinstance(found.get("best_gbps"), (int, float)):
                    yield _measure(model, HBM_WHAT, None, None, [found["best_gbps"]], MEMORY, found.get("peak_gbps"),
                                   path)
            elif check["name"].startswith("copy-"):
                values = [v for v in found.values() if isinstance(v, (int, float))]
                kind = check["name"].removeprefix("copy-")
                if not values:
                    continue
                if kind == "gpu_to_gpu":
                    yield _measure(model, "GPU-to-GPU copy (peer to peer), each ordered pair", None, None, values,
                                   NVLINK, nvlink, path)
                else:
                    yield _measure(model, f"{kind.replace('_', '-')} copy, pinned, each GPU", None, None, values,
                                   PCIE, pcie, path)


def _fractions(values: list[float], peak: float | None) -> list[float] | None:
    return [round(min(values) / peak, 3), round(max(values) / peak, 3)] if peak else None


def recorded_sections(refs: dict[str, Reference] | None = None) -> dict[str, dict]:
    """Per model id, the ``recorded:`` section: measurements grouped by what, size, ranks and link rate."""
    refs = refs if refs is not None else load_references()
    groups: dict[tuple, dict] = {}
    for m in (*from_bandwidth_bundles(refs), *from_hbm_bundles(refs), *from_nccl_tests_bundles(refs),
              *from_results(refs)):
        key = (m["model"], m["what"], m["size_bytes"], m["ranks"], m["link_rate_gbps"], m["path"])
        group = groups.setdefault(key, {**m, "values": {}, "files": []})
        # a live run's results file repeats the numbers of the bundle recorded in the same run: one sample each
        group["values"].update({round(v, 6): v for v in m["gbps"]})
        if m["file"] not in group["files"]:
            group["files"].append(m["file"])
    sections: dict[str, dict] = {}
    for key in sorted(groups, key=lambda k: (k[0], k[5], k[1], k[3] or 0, k[2] or 0, k[4] or 0)):
        g = groups[key]
        g["gbps"] = list(g["values"].values())
        ref = refs[g["model"]]
        published = {NVLINK: ref.nvlink_gbps_per_direction, PCIE: ref.pcie_gbps_per_direction,
                     MEMORY: ref.memory_bandwidth_gbps}[g["path"]]
        section = sections.setdefault(g["model"], {
            "script": SCRIPT,
            "note": ("fractions are [lowest, highest] over the samples: of_published against the published peak per "
                     "direction below, of_link_rate against link_rate_gbps, the rate the machine reported (NVML's "
                     "NVLink speeds summed over active links; PCIe gen x width after line coding; for HBM, NVML's "
                     "bus width x max memory clock x 2). busbw is "
                     "nccl-tests' bus bandwidth; the 1 MiB sizes are latency-bound, not bandwidth-bound. Copies carry "
                     "no size: the bundles' copies moved 1 GiB (bandwidth.json copy.size), the results files do not "
                     "record it. A results file of a run that also recorded a bundle repeats its numbers; such "
                     "repeats count as one sample."),
            "published_peaks_gbps": {NVLINK: ref.nvlink_gbps_per_direction, PCIE: ref.pcie_gbps_per_direction,
                                     MEMORY: ref.memory_bandwidth_gbps},
            "fractions": [],
        })
        entry = {"what": g["what"]}
        if g["size_bytes"] is not None:
            entry["size_bytes"] = g["size_bytes"]
        if g["ranks"] is not None:
            entry["ranks"] = g["ranks"]
        entry.update({"gbps": [round(min(g["gbps"]), 1), round(max(g["gbps"]), 1)],
                      "of_published": _fractions(g["gbps"], published),
                      "of_link_rate": _fractions(g["gbps"], g["link_rate_gbps"]),
                      "link_rate_gbps": g["link_rate_gbps"], "samples": len(g["gbps"]), "files": g["files"]})
        section["fractions"].append(entry)
    return {model: {k: v for k, v in s.items() if v is not None} for model, s in sections.items()}


def render(section: dict) -> str:
    import yaml

    body = yaml.safe_dump({"recorded": section}, sort_keys=False, default_flow_style=None, width=120)
    return f"{MARKER}\n{body}"


def updated_text(path: Path, section: dict | None) -> str:
    """The YAML's hand-written part, then the generated recorded: section (none when the model has no runs)."""
    text = path.read_text(encoding="utf-8")
    head = text.split(MARKER)[0].rstrip("\n") + "\n"
    return head if section is None else f"{head}\n{render(section)}"


def write(check: bool) -> int:
    import yaml

    sections = recorded_sections()
    stale = []
    for path in sorted(REFERENCES_DIR.glob("*.yaml")):
        model = yaml.safe_load(path.read_text(encoding="utf-8"))["model"]
        new = updated_text(path, sections.get(model))
        if new != path.read_text(encoding="utf-8"):
            stale.append(path)
            if not check:
                path.write_text(new, encoding="utf-8")
    for model, section in sections.items():
        print(f"{model}: {len(section['fractions'])} measurements")
    if stale:
        verb = "out of date" if check else "rewritten"
        print("\n".join(f"{verb}: {_rel(p)}" for p in stale))
    return 1 if check and stale else 0


def nvml_probe() -> dict:
    """NVML's memory, clock, power and PCIe figures of every GPU here, through ctypes (no Python bindings)."""
    import ctypes as c
    import subprocess

    nvml = c.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise SystemExit("nvmlInit failed")

    def uint(fn: str, *args) -> int | str:
        value = c.c_uint()
        rc = getattr(nvml, fn)(*args, c.byref(value))
        return value.value if rc == 0 else f"rc={rc}"

    class Memory(c.Structure):
        _fields_ = [("total", c.c_ulonglong), ("free", c.c_ulonglong), ("used", c.c_ulonglong)]

    driver = c.create_string_buffer(96)
    nvml.nvmlSystemGetDriverVersion(driver, 96)
    count = c.c_uint()
    nvml.nvmlDeviceGetCount_v2(c.byref(count))
    out: dict = {"driver_version": driver.value.decode(), "gpus": []}
    for i in range(count.value):
        handle = c.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, c.byref(handle))
        name = c.create_string_buffer(96)
        nvml.nvmlDeviceGetName(handle, name, 96)
        memory = Memory()
        nvml.nvmlDeviceGetMemoryInfo(handle, c.byref(memory))
        low, high = c.c_uint(), c.c_uint()
        rc = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle, c.byref(low), c.byref(high))
        out["gpus"].append({
            "index": i, "name": name.value.decode(), "memory_total_bytes": memory.total,
            "memory_bus_width_bits": uint("nvmlDeviceGetMemoryBusWidth", handle),
            "max_clock_memory_mhz": uint("nvmlDeviceGetMaxClockInfo", handle, 2),  # NVML_CLOCK_MEM
            "max_clock_sm_mhz": uint("nvmlDeviceGetMaxClockInfo", handle, 1),  # NVML_CLOCK_SM
            "power_default_limit_mw": uint("nvmlDeviceGetPowerManagementDefaultLimit", handle),
            "power_limit_constraints_mw": [low.value, high.value] if rc == 0 else f"rc={rc}",
            "pcie_max_gen": uint("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            "pcie_max_width": uint("nvmlDeviceGetMaxPcieLinkWidth", handle),
        })
    query = ["nvidia-smi", "--query-gpu=name,memory.total,clocks.max.memory,power.default_limit,power.max_limit,"
             "pcie.link.gen.max,pcie.link.width.max", "--format=csv"]
    out["nvidia_smi_query"] = subprocess.run(query, capture_output=True, text=True).stdout
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["write", "nvml-probe"], default="write")
    parser.add_argument("--check", action="store_true", help="only report YAMLs the recordings would change")
    args = parser.parse_args(argv)
    if args.command == "nvml-probe":
        print(json.dumps(nvml_probe(), indent=1))
        return 0
    return write(args.check)


if __name__ == "__main__":
    sys.exit(main())
