"""What each NVML read the health watchdog makes costs, and which field values read the same counters in one call.

Per GPU: the median time of every per-call read the watchdog makes (ECC, remapped rows, PCIe replay, temperature,
power, clocks, clock-event reasons), one sweep of nvmlDeviceGetNvLinkErrorCounter over every active link and
counter (values and time), and nvmlDeviceGetFieldValues batches of candidate fields: the device totals (CRC flit,
CRC data, ECC data, replay, recovery; the DL_* fields 161-163 without a scope), the DL_* fields scoped by link,
the per-link L0-L11 fields, ECC volatile totals, remapped rows and PCIe replay. Every value is written beside the
per-call value it should equal, so the mapping is read off the recording, not assumed.

Reads only; changes nothing on the GPU (no counter reset, no setting). Writes JSON to the path given.

    python3 hardware/nvml_read_cost_probe.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import pynvml as p

REPEAT = 20
COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3, "ecc_data": 4}
#: device totals: field id -> the per-call counter whose sum over links it should be
TOTALS = {38: "crc_flit", 45: "crc_data", 160: "ecc_data", 52: "replay", 59: "recovery",
          161: "replay", 162: "recovery", 163: "crc_flit"}
#: per-link fields L0-L11 of each counter (nvml.h)
PER_LINK = {
    "crc_flit": [32, 33, 34, 35, 36, 37, 96, 97, 98, 99, 100, 101],
    "crc_data": [39, 40, 41, 42, 43, 44, 102, 103, 104, 105, 106, 107],
    "replay": [46, 47, 48, 49, 50, 51, 108, 109, 110, 111, 112, 113],
    "recovery": [53, 54, 55, 56, 57, 58, 114, 115, 116, 117, 118, 119],
    "ecc_data": list(range(148, 160)),
}
SCOPED = {161: "replay", 162: "recovery", 163: "crc_flit"}
DEVICE_FIELDS = {3: "ecc_sbe_volatile_total", 4: "ecc_dbe_volatile_total", 142: "remapped_cor", 143: "remapped_unc",
                 144: "remapped_pending", 145: "remapped_failure", 94: "pcie_replay", 186: "power_instant_mw"}


def timed(fn, *args, repeat: int = REPEAT) -> tuple[float, object]:
    """Median milliseconds of ``repeat`` calls, and the last answer (or the error's name)."""
    times, answer = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        try:
            answer = fn(*args)
        except p.NVMLError as exc:
            answer = f"error: {exc}"
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 4), answer


def plain(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


def field_batch(handle, ids) -> tuple[float, list]:
    """One nvmlDeviceGetFieldValues call of ``ids`` ((field, scope) or field): its median time and each value."""
    ms, values = timed(p.nvmlDeviceGetFieldValues, handle, list(ids))
    if isinstance(values, str):
        return ms, [values] * len(ids)
    out = []
    for value in values:
        if value.nvmlReturn != p.NVML_SUCCESS:
            out.append(f"error {value.nvmlReturn}")
            continue
        member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
            value.valueType)
        out.append(getattr(value.value, member) if member else f"type {value.valueType}")
    return ms, out


def probe_gpu(index: int) -> dict:
    h = p.nvmlDeviceGetHandleByIndex(index)
    record = {"index": index, "name": plain(p.nvmlDeviceGetName(h)), "serial": plain(p.nvmlDeviceGetSerial(h)),
              "uuid": plain(p.nvmlDeviceGetUUID(h)), "per_call_ms": {}}
    event_reasons = getattr(p, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        p.nvmlDeviceGetCurrentClocksThrottleReasons
    calls = {
        "ecc_corrected": (p.nvmlDeviceGetTotalEccErrors, h, p.NVML_MEMORY_ERROR_TYPE_CORRECTED, p.NVML_VOLATILE_ECC),
        "ecc_uncorrected": (p.nvmlDeviceGetTotalEccErrors, h, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            p.NVML_VOLATILE_ECC),
        "remapped_rows": (p.nvmlDeviceGetRemappedRows, h),
        "pcie_replay": (p.nvmlDeviceGetPcieReplayCounter, h),
        "temperature": (p.nvmlDeviceGetTemperature, h, p.NVML_TEMPERATURE_GPU),
        "power": (p.nvmlDeviceGetPowerUsage, h),
        "sm_clock": (p.nvmlDeviceGetClockInfo, h, p.NVML_CLOCK_SM),
        "mem_clock": (p.nvmlDeviceGetClockInfo, h, p.NVML_CLOCK_MEM),
        "clock_event_reasons": (event_reasons, h),
    }
    for name, (fn, *args) in calls.items():
        ms, answer = timed(fn, *args)
        record["per_call_ms"][name] = ms
        record.setdefault("per_call_value", {})[name] = plain(answer)
    links = []
    for link in range(18):
        try:
            if p.nvmlDeviceGetNvLinkState(h, link) == 1:
                links.append(link)
        except p.NVMLError:
            break
    record["active_links"] = links
    # one sweep of the per-call NVLink error counters, timed as a whole and per call
    per_link: dict[str, dict[int, object]] = {name: {} for name in COUNTERS}
    start = time.perf_counter()
    calls_made = 0
    for link in links:
        for name, counter in COUNTERS.items():
            try:
                per_link[name][link] = p.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)
            except p.NVMLError as exc:
                per_link[name][link] = f"error: {exc}"
            calls_made += 1
    sweep_ms = (time.perf_counter() - start) * 1000
    record["nvlink_per_call"] = {"sweep_ms": round(sweep_ms, 3), "calls": calls_made,
                                 "ms_per_call": round(sweep_ms / calls_made, 4) if calls_made else None,
                                 "values": {k: {str(link): v for link, v in d.items()} for k, d in per_link.items()}}
    ms, values = field_batch(h, list(TOTALS))
    sums = {name: sum(v for v in per_link[name].values() if isinstance(v, int)) for name in COUNTERS}
    record["totals"] = {"ms": ms, "fields": [{"field": f, "counter": TOTALS[f], "value": v,
                                              "sum_of_per_call": sums[TOTALS[f]]}
                                             for f, v in zip(TOTALS, values, strict=True)]}
    scoped_ids = [(f, link) for f in SCOPED for link in links]
    ms, values = field_batch(h, scoped_ids)
    record["scoped"] = {"ms": ms, "fields": [{"field": f, "link": link, "counter": SCOPED[f], "value": v,
                                              "per_call": per_link[SCOPED[f]].get(link)}
                                             for (f, link), v in zip(scoped_ids, values, strict=True)]}
    ids = [(name, link, fid) for name, fids in PER_LINK.items() for link, fid in enumerate(fids) if link in links]
    ms, values = field_batch(h, [fid for _, _, fid in ids])
    record["per_link_fields"] = {"ms": ms, "fields": [{"field": fid, "link": link, "counter": name, "value": v,
                                                       "per_call": per_link[name].get(link)}
                                                      for (name, link, fid), v in zip(ids, values, strict=True)]}
    ms, values = field_batch(h, list(DEVICE_FIELDS))
    record["device_fields"] = {"ms": ms, "fields": [{"field": f, "name": DEVICE_FIELDS[f], "value": v}
                                                    for f, v in zip(DEVICE_FIELDS, values, strict=True)]}
    # the batch the watchdog would make per read: totals, device fields (one call)
    ms, _ = field_batch(h, list(TOTALS) + list(DEVICE_FIELDS))
    record["one_batch_ms"] = ms
    return record


def main() -> int:
    out = sys.argv[1]
    p.nvmlInit()
    try:
        document = {"driver": plain(p.nvmlSystemGetDriverVersion()), "nvml": plain(p.nvmlSystemGetNVMLVersion()),
                    "pynvml": getattr(p, "__version__", None), "gpus": []}
        for index in range(p.nvmlDeviceGetCount()):
            document["gpus"].append(probe_gpu(index))
            with open(out, "w") as handle:  # on disk after each GPU: a call cut short keeps what it measured
                json.dump(document, handle, indent=1)
    finally:
        p.nvmlShutdown()
    for gpu in document["gpus"]:
        print(f"GPU{gpu['index']} {gpu['name']}: links {len(gpu['active_links'])}, per-call NVLink sweep "
              f"{gpu['nvlink_per_call']['sweep_ms']:.1f} ms ({gpu['nvlink_per_call']['ms_per_call']} ms/call), "
              f"one field batch {gpu['one_batch_ms']:.3f} ms, per-call reads "
              + ", ".join(f"{k} {v:.3f}" for k, v in gpu["per_call_ms"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
