"""Evidence from other tools: `dcgmi diag` and `nvbandwidth` outputs a customer brings, judged with the rest.

Such files come with ``--gpu-evidence FILE`` (repeatable) or in a bundle (``dcgm*.json``, ``dcgm*.txt``,
``dcgmi*``, ``nvbandwidth*``); formats/dcgm_diag.py and formats/nvbandwidth.py read them. Each result is judged as
a promise of ours where one matches, so the tool's word and our own measurement of the same thing meet in one
promise (a failure from either fails it):

- a DCGM test, per GPU: memory -> ``memory-pattern[GPUi]``, memory bandwidth -> ``hbm-bandwidth[GPUi]``, PCIe ->
  ``pcie-under-load[GPUi]``, targeted power / targeted stress / pulse -> ``power-hold[GPUi]``, the others
  ``dcgm-<test>[GPUi]`` (deployment checks, per machine: ``dcgm-deployment[<check>]``). Given evidence is a promise
  to pass it: a test DCGM failed fails, naming the GPU and DCGM's message; one it skipped, did not run, warned on or
  whose status a cut paste lost is not checked;
- an nvbandwidth test case of host<->device or device-to-device copies against the profile's ``bandwidth.copy``
  floors, as ``copy-bandwidth[<kind>]`` (the same promise the copy suite judges).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import GpuFabricError
from .formats.dcgm_diag import _SEVERITY, parse_dcgm_diag
from .formats.nvbandwidth import parse_nvbandwidth

__all__ = ["BUNDLE_PATTERNS", "ToolEvidence", "dcgm_results", "nvbandwidth_copies", "read_evidence"]

BUNDLE_PATTERNS = ("dcgm*.json", "dcgm*.txt", "dcgmi*.json", "dcgmi*.txt", "nvbandwidth*.json", "nvbandwidth*.txt")
_MAX_BYTES = 32 << 20

#: nvbandwidth's test case -> the profile's bandwidth.copy kind it measures
NVBANDWIDTH_COPIES = {"host_to_device_memcpy_ce": "host_to_device", "host_to_device_memcpy_sm": "host_to_device",
                      "device_to_host_memcpy_ce": "device_to_host", "device_to_host_memcpy_sm": "device_to_host",
                      "device_to_device_memcpy_read_ce": "gpu_to_gpu", "device_to_device_memcpy_write_ce": "gpu_to_gpu",
                      "device_to_device_memcpy_read_sm": "gpu_to_gpu", "device_to_device_memcpy_write_sm": "gpu_to_gpu"}


class EvidenceError(GpuFabricError):
    """A file given as evidence that is neither tool's output (a usage error: the operator gave it)."""


@dataclass(frozen=True)
class ToolEvidence:
    kind: str  # "dcgm-diag" or "nvbandwidth"
    source: str  # the file's name
    parsed: dict  # what the parser read

    def to_json(self) -> dict:
        return {"kind": self.kind, "source": self.source, "parsed": self.parsed}


def read_evidence(paths: list[Path]) -> list[ToolEvidence]:
    """Each file read by the parser of the tool it is from (DCGM first: nvbandwidth text never holds its table);
    raises EvidenceError naming the file when it is neither."""
    evidence = []
    for path in paths:
        try:
            if path.stat().st_size > _MAX_BYTES:
                raise EvidenceError(f"{path}: over {_MAX_BYTES >> 20} MiB: not a tool's output")
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise EvidenceError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        problems = []
        for kind, parse in (("dcgm-diag", parse_dcgm_diag), ("nvbandwidth", parse_nvbandwidth)):
            try:
                evidence.append(ToolEvidence(kind, path.name, parse(text)))
                break
            except ValueError as exc:
                problems.append(f"not `{'dcgmi diag' if kind == 'dcgm-diag' else kind}` output ({exc})")
        else:
            raise EvidenceError(f"{path}: " + "; ".join(problems))
    return evidence


def bundle_evidence_files(directory: Path) -> list[Path]:
    return sorted({p for pattern in BUNDLE_PATTERNS for p in directory.glob(pattern) if p.is_file()})


def dcgm_results(evidence: list[ToolEvidence], gpu_count: int = 0, *, promises: Mapping[str, str]) -> list[dict]:
    """One row per DCGM test and GPU (per machine for the deployment checks): {"promise", "test", "gpu",
    "status", "message", "source", "version", "level", "driver", "uncovered", "for_all"}, in the order the files gave
    them.

    A tool's result counts only for the GPUs it names. A result DCGM gave for all GPUs at once ("Pass - All") counts
    for the GPUs the run covered (_covered: its ``-i`` list, its GPU Device IDs, the GPUs it names elsewhere) and
    for no other; where the output does not say which GPUs those were, each of the ``gpu_count`` GPUs the profile
    promises gets a row with ``uncovered`` saying so (not checked). A GPU the profile does not promise likewise.
    ``promises``: DCGM's test (as the parser names it) -> the kind of ours it speaks to (kinds.equivalents("dcgm"));
    any other test is the promise dcgm-<test>."""
    rows = []
    for item in evidence:
        if item.kind != "dcgm-diag":
            continue
        covered, why_not = _covered(item, gpu_count)
        for test in item.parsed["tests"]:
            name = test["name"]
            results = test["gpus"] or [{"gpu": None, "status": test.get("status"), "message": None}]
            if not name.startswith("deployment:") and gpu_count:
                results = [dict(r, gpu=i, for_all=r.get("gpu") is None,
                                uncovered=None if covered is not None or r.get("gpu") is not None else why_not)
                           for r in results for i in
                           ([r["gpu"]] if r.get("gpu") is not None else covered or range(gpu_count))]
            for result in results:
                gpu = result.get("gpu")
                uncovered = result.get("uncovered")
                if gpu is not None and gpu_count and gpu >= gpu_count and not name.startswith("deployment:"):
                    uncovered = (f"the profile promises {gpu_count} GPU(s), GPU0 to GPU{gpu_count - 1}: not evidence "
                                 "of a board of this machine")
                if name.startswith("deployment:"):
                    promise = f"dcgm-deployment[{name.split(':', 1)[1]}]"
                else:
                    base = promises.get(name, f"dcgm-{name.replace('_', '-')}")
                    promise = f"{base}[GPU{gpu}]" if gpu is not None else base
                rows.append({"promise": promise, "test": name, "gpu": gpu, "status": result.get("status"),
                             "message": result.get("message") or "", "source": item.source,
                             "version": item.parsed.get("dcgm_version"), "level": item.parsed.get("level"),
                             "driver": item.parsed.get("driver_version"), "uncovered": uncovered,
                             "for_all": bool(result.get("for_all"))})
    return _one_per_promise(rows)


def _covered(item: ToolEvidence, gpu_count: int) -> tuple[list[int] | None, str]:
    """The GPUs a dcgmi diag run covered, by index, for its results on "All" GPUs; (None, why) when the output
    does not say which GPUs they were. Read from, in order: the ``-i`` list of the command line pasted above it
    (checked against the GPU Device IDs DCGM 3.1+ prints, one per GPU tested), the GPUs it names elsewhere when
    they are as many as those IDs, the IDs when they are as many as the GPUs promised, and a pasted command without
    ``-i`` or ``-g`` (DCGM's default group: every GPU)."""
    parsed = item.parsed
    ids = parsed.get("device_ids")
    listed = parsed.get("gpu_list")
    named = sorted({g["gpu"] for t in parsed["tests"] if not t["name"].startswith("deployment:")
                    for g in t["gpus"] if g.get("gpu") is not None and not g.get("entity")})
    tested = f"DCGM detected {len(ids)} GPU(s) (GPU Device IDs Detected: {','.join(ids)})" if ids else ""
    if parsed.get("gpu_list_text") and listed is None:
        return None, f"its `-i {parsed['gpu_list_text']}` does not say which GPUs were tested"
    if listed is not None:
        if ids and len(ids) != len(listed):
            return None, (f"its command names GPU(s) {', '.join(map(str, listed))} but {tested}: which GPUs its "
                          "results are for cannot be told")
        return listed, ""
    if ids and named and len(named) == len(ids):
        return named, ""
    if ids and gpu_count and len(ids) == gpu_count and not parsed.get("group"):
        return list(range(gpu_count)), ""
    if not ids and parsed.get("command") and not parsed.get("group"):
        return list(range(gpu_count)), ""  # `dcgmi diag -r N` alone runs on DCGM's default group: every GPU
    if ids:
        return None, (f"{tested} and the output does not say which of the {gpu_count} promised: a result for all "
                      "GPUs counts for none of them (paste the command line with its -i list)")
    return None, ("the output does not say which GPUs it tested (no command line with -i, no GPU Device IDs "
                  "Detected): a result for all GPUs counts for none of them")


def _one_per_promise(rows: list[dict]) -> list[dict]:
    """Deployment checks DCGM repeats per GPU, and a test given twice: one row per promise, the worst status."""
    best: dict[tuple, dict] = {}
    for row in rows:
        key = (row["promise"], row["source"])
        if key not in best or _SEVERITY.get(row["status"], 9) < _SEVERITY.get(best[key]["status"], 9):
            best[key] = row
    return list(best.values())


def nvbandwidth_copies(evidence: list[ToolEvidence]) -> list[dict]:
    """One row per nvbandwidth test case that measures a copy the profile can promise: {"testcase", "kind",
    "rows": [{"label", "gbps", "gpu"/"src","dst"}], "status", "source", "version"}."""
    out = []
    for item in evidence:
        if item.kind != "nvbandwidth":
            continue
        for case in item.parsed["testcases"]:
            kind = NVBANDWIDTH_COPIES.get(case["name"])
            if kind is None:
                continue
            rows = []
            for r, line in enumerate(case.get("matrix") or []):
                for c, value in enumerate(line):
                    if value is None or (kind == "gpu_to_gpu" and r == c):
                        continue
                    if kind == "gpu_to_gpu":
                        rows.append({"label": f"GPU{r}->GPU{c}", "src": r, "dst": c, "gbps": value})
                    else:
                        rows.append({"label": f"GPU{c}", "gpu": c, "gbps": value})
            out.append({"testcase": case["name"], "kind": kind, "rows": rows, "status": case.get("status"),
                        "source": item.source, "version": item.parsed.get("version"),
                        "devices": [d.get("name") for d in item.parsed.get("devices") or []],
                        "driver": item.parsed.get("driver")})
    return out


def of_another_machine(row: dict, fabric, profile) -> str | None:
    """Why a result is evidence of another machine than this one (its GPU names or its driver are not this
    machine's, or not the profile's model where the machine was not read), or None when nothing says so."""
    names = [n for n in row.get("devices") or [] if n]
    if names and fabric is not None and fabric.gpus_recorded:
        mine = [str(g.name) for g in fabric.gpus]
        if any(name not in mine for name in names):
            return (f"{row['source']} ran on {', '.join(sorted(set(names)))}; this machine has "
                    f"{', '.join(sorted(set(mine)))}")
    elif names and profile.gpu_model and not all(profile.gpu_model.lower() in n.lower() for n in names):
        return f"{row['source']} ran on {', '.join(sorted(set(names)))}, not the profile's {profile.gpu_model}"
    driver = row.get("driver")
    if driver and fabric is not None and fabric.driver_version and str(fabric.driver_version) != str(driver):
        return f"{row['source']} ran on driver {driver}; this machine's is {fabric.driver_version}"
    return None
