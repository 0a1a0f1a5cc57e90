"""health.json's later readings: each GPU's NVLink error counters, its row remapper's bank histogram, its InfoROM's
validity and the compute processes on it. record.py reads them live beside the others and types them here.

A record written before they were read (the shipped bundles, an older gpufabric) lacks them: they are then
``not_recorded`` (said in a note, never a failure and never an unknown finding); a live read always has them.
"""

from __future__ import annotations

from ..fabric import nvml
from ..formats.typed import Unreadable

#: nvmlNvLinkErrorCounter_t (nvml.h): the data-link counters summed over a GPU's links
NVLINK_ERROR_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
#: nvmlRowRemapperHistogramValues_t: banks by how many of their reserved rows are left (max: all, none: no row)
REMAP_HISTOGRAM = ("max", "high", "partial", "low", "none")
#: the keys this module adds to a GPU's record, as flattened in GpuHealthRecord.values
EXTRA_KEYS = ("nvlink_errors", "remap_histogram", "inforom_valid", "compute_processes")
_COUNT_MAX = 2**64 - 1


def read_extra(p, h, ask, links: int) -> dict:
    """The readings of this module for one GPU (``ask``: record._answer bound to the handle; ``links``: how many
    NVLinks nvmlDeviceGetNvLinkState answered for)."""
    rec: dict = {}
    sums = dict.fromkeys(NVLINK_ERROR_COUNTERS, 0)
    for link in range(links):
        for name, counter in NVLINK_ERROR_COUNTERS.items():
            value = ask(p.nvmlDeviceGetNvLinkErrorCounter, link, counter)
            if nvml.is_error(value):
                sums = value
                break
            sums[name] += int(value)
        if nvml.is_error(sums):
            break
    rec["nvlink_errors"] = sums if links else nvml.recorded_error("NOT_SUPPORTED")
    histogram = ask("nvmlDeviceGetRowRemapperHistogram")
    rec["remap_histogram"] = histogram if nvml.is_error(histogram) else {
        key: int(getattr(histogram, key)) for key in REMAP_HISTOGRAM}
    valid = ask("nvmlDeviceValidateInforom")  # None when valid; CORRUPTED_INFOROM when not
    rec["inforom_valid"] = True if valid is None else valid
    processes = ask("nvmlDeviceGetComputeRunningProcesses")
    rec["compute_processes"] = processes if nvml.is_error(processes) else [
        {"pid": int(proc.pid), "used_memory_bytes": proc.usedGpuMemory if isinstance(proc.usedGpuMemory, int)
         else None} for proc in processes]
    return rec


def type_extra(gpu: dict, where: str, record, typed, not_applicable: frozenset[str]) -> None:
    """Type this module's readings of one GPU's dict into ``record`` (a GpuHealthRecord): values, not_applicable,
    unreadable, not_recorded."""
    for key in EXTRA_KEYS:
        path = f"{where}.{key}"
        if key not in gpu:
            record.not_recorded.add(key)
            continue
        value = gpu[key]
        if nvml.is_error(value):
            answer = str(value.get("error"))
            if key == "inforom_valid" and answer == "CORRUPTED_INFOROM":
                record.values[key] = False
            elif answer in not_applicable:
                record.not_applicable[key] = answer
            else:
                record.unreadable[key] = f"NVML answered {answer} [{typed.where}: {path}]"
            continue
        try:
            if key == "inforom_valid":
                if value is not True:
                    raise typed._refuse("the InfoROM validity", value, path, "true, or NVML's error")
                record.values[key] = True
            elif key == "compute_processes":
                if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                    raise typed._refuse("the compute processes", value, path, "a list of {pid, used_memory_bytes}")
                record.values[key] = [typed.whole(v.get("pid"), f"{path}[{n}].pid", "a process id", 0, 2**32)
                                      for n, v in enumerate(value)]
            else:
                names = NVLINK_ERROR_COUNTERS if key == "nvlink_errors" else REMAP_HISTOGRAM
                if not isinstance(value, dict):
                    raise typed._refuse(f"the {key.replace('_', ' ')}", value, path, "an object of counts")
                for name in names:
                    record.values[f"{key}.{name}"] = typed.whole(value.get(name), f"{path}.{name}",
                                                                 f"{key.replace('_', ' ')} {name}", 0, _COUNT_MAX)
        except Unreadable as exc:  # said of this key alone
            record.unreadable[key] = str(exc)
