"""Sustained power and thermal: a GEMM load on every GPU at once while NVML is read in the background, as
`dcgmi diag`'s targeted power and targeted stress tests look at a GPU, without changing any GPU setting.

Standalone (imports torch, the standard library and nvidia-ml-py only); one process drives every GPU:

    python power_hold.py --seconds 20 --warmup 3 --size 8192 --dtype bfloat16 --interval 0.25 --result out.json

A thread per GPU multiplies two random ``--size`` square matrices back to back (a few products queued ahead, so
the GPU never waits for the host) for ``--warmup`` seconds at most (less once every GPU draws its power limit:
``_hold``) and then for ``--seconds``: the measured window.
During that window a sampler thread reads, every ``--interval`` seconds and per GPU: the power draw
(nvmlDeviceGetPowerUsage: on Ampere and later a one-second average), the SM clock, the temperature, the
headroom to the slowdown temperature (nvmlDeviceGetMarginTemperature, where the driver has it) and the clock
event reasons, decoded into names. Read once per GPU: the enforced power limit, the maximum SM clock and the
slowdown / shutdown / GPU-maximum temperature thresholds. Every NVML call here is a Get: the script never sets
clocks, power limits, persistence or application clocks, so what it measures is the machine as delivered.

An NVML answer that is data (NOT_SUPPORTED, NO_PERMISSION, ...) is recorded as null with its name under the
GPU's ``unread``; any other NVML error (GPU_IS_LOST, ...) fails the workload. ``--device cpu --workers N`` runs
the same logic on CPU threads without NVML (for tests): every NVML field is null and ``nvml.available`` false.

The result's format (``power-hold.json``): docs/evidence/diagnostics.md, "Record formats".
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import handshake, reporting_failure
    from identity import workload_devices
    from nvml_reads import Nvml
    from power_figures import AT_LIMIT, power_figures
except ImportError:
    from .handshake import handshake, reporting_failure
    from .identity import workload_devices
    from .nvml_reads import Nvml
    from .power_figures import AT_LIMIT, power_figures

FORMAT = "gpufabric-power-hold/1"
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
#: nvmlClocksEventReason* bits (nvml.h; the same bits as the older nvmlClocksThrottleReason*)
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clocks_setting"}
#: GEMMs queued ahead of the one the host waits for: deep enough that the GPU never idles between products,
#: shallow enough that the load stops within a few products of the window's end
_QUEUE_DEPTH = 4
MIN_WARMUP_S = 1.0  # the warm-up's least length: NVML's power figure averages the last second


def decode_reasons(mask: int) -> list[str]:
    """The names of the clock event reason bits set in ``mask`` (unknown bits as ``bit_0x...``)."""
    names = [name for bit, name in REASONS.items() if mask & bit]
    unknown = mask & ~sum(REASONS)
    names += [f"bit_{1 << b:#x}" for b in range(32) if unknown >> b & 1]
    return names


def static_facts(nvml: Nvml, handle, unread: dict) -> dict:
    """What does not change during the run: the enforced power limit, the maximum SM clock, the thresholds."""
    p = nvml.p
    limit_mw = nvml.get(unread, "power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit",), handle)
    thresholds = {}
    for key, constant in (("slowdown", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),
                          ("shutdown", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"),
                          ("gpu_max", "NVML_TEMPERATURE_THRESHOLD_GPU_MAX")):
        thresholds[key] = nvml.get(unread, f"thresholds_c.{key}", ("nvmlDeviceGetTemperatureThreshold",), handle,
                                   getattr(p, constant))
    return {"power_limit_w": None if limit_mw is None else limit_mw / 1000,
            "max_sm_clock_mhz": nvml.get(unread, "max_sm_clock_mhz", ("nvmlDeviceGetMaxClockInfo",), handle,
                                         p.NVML_CLOCK_SM),
            "thresholds_c": thresholds}


def read_sample(nvml: Nvml, handle, unread: dict, t_s: float) -> dict:
    """One read of one GPU under load."""
    p = nvml.p
    power_mw = nvml.get(unread, "power_w", ("nvmlDeviceGetPowerUsage",), handle)
    # renamed from ...ThrottleReasons in NVML 12.2; older nvidia-ml-py has only the old name
    mask = nvml.get(unread, "reasons", ("nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetCurrentClocksThrottleReasons"), handle)
    return {"t_s": round(t_s, 3), "power_w": None if power_mw is None else power_mw / 1000,
            "sm_clock_mhz": nvml.get(unread, "sm_clock_mhz", ("nvmlDeviceGetClockInfo",), handle, p.NVML_CLOCK_SM),
            "temperature_c": nvml.get(unread, "temperature_c", ("nvmlDeviceGetTemperature",), handle,
                                      p.NVML_TEMPERATURE_GPU),
            "margin_c": nvml.get(unread, "margin_c", ("nvmlDeviceGetMarginTemperature",), handle),
            "reasons": None if mask is None else decode_reasons(int(mask))}


def summarize(samples: list[dict], power_limit_w: float | None) -> dict:
    """Each GPU's ``summary``: the figures a verdict rests on (power_figures.py, as the check derives them)."""
    figures = power_figures(samples, power_limit_w)
    del figures["samples_with_reasons"]
    return figures


class Load(threading.Thread):
    """GEMMs on one device: ``ready`` once its matrices exist, warm-up until ``measure`` is set, then counted until
    ``stop`` is set. The counted window runs from an empty queue to an empty queue: the rate holds only finished
    products."""

    def __init__(self, device: torch.device, size: int, dtype, measure: threading.Event, stop: threading.Event):
        super().__init__(name=f"gemm-{device}", daemon=True)
        self.device, self.size, self.dtype, self.measure, self.stop = device, size, dtype, measure, stop
        self.ready = threading.Event()
        self.iterations, self.elapsed_s = 0, 0.0
        self.error: BaseException | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self) -> None:
        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            # random data: a product of zeros draws far less power than a real one
            generator = torch.Generator(device=self.device).manual_seed(1234)
            a, b = (torch.randn(self.size, self.size, generator=generator, device=self.device, dtype=self.dtype)
                    for _ in range(2))
            out = torch.empty(self.size, self.size, dtype=self.dtype, device=self.device)
            self._sync()
            self.ready.set()
            self._loop(a, b, out, until=self.measure)
            self._sync()
            start = time.perf_counter()
            self.iterations = self._loop(a, b, out, until=self.stop)
            self._sync()
            self.elapsed_s = time.perf_counter() - start
        except BaseException as exc:  # re-raised by main(): a GPU that fails under load fails the workload
            self.error = exc
        finally:
            self.ready.set()

    def _loop(self, a, b, out, until: threading.Event) -> int:
        queued: deque = deque()
        count = 0
        while not until.is_set():
            torch.matmul(a, b, out=out)
            count += 1
            if self.device.type == "cuda":
                event = torch.cuda.Event()
                event.record()
                queued.append(event)
                if len(queued) > _QUEUE_DEPTH:
                    queued.popleft().synchronize()
        return count


class Sampler(threading.Thread):
    """Reads every GPU every ``interval_s`` until stopped; without NVML each sample holds only its time."""

    def __init__(self, nvml: Nvml | None, handles: list, unread: list[dict], interval_s: float):
        super().__init__(name="nvml-sampler", daemon=True)
        self.nvml, self.handles, self.unread, self.interval_s = nvml, handles, unread, interval_s
        self.samples: list[list[dict]] = [[] for _ in handles]
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        start = time.perf_counter()
        tick = 0
        try:
            while not self.stopped.is_set():
                t_s = time.perf_counter() - start
                for i, handle in enumerate(self.handles):
                    if self.nvml is None:
                        self.samples[i].append({"t_s": round(t_s, 3), "power_w": None, "sm_clock_mhz": None,
                                                "temperature_c": None, "margin_c": None, "reasons": None})
                    else:
                        self.samples[i].append(read_sample(self.nvml, handle, self.unread[i], t_s))
                tick += 1
                # on a fixed grid: a slow read does not shift every later sample
                self.stopped.wait(max(0.0, start + tick * self.interval_s - time.perf_counter()))
        except BaseException as exc:
            self.error = exc


def _hold(loads: list[Load], sampler: Sampler, seconds: float, warmup_s: float, directory: Path | None,
          measure: threading.Event, stop: threading.Event,
          at_limit: Callable[[], bool] | None = None) -> tuple[float, float]:
    """Warm-up, the measured window (the sampler running), the end of the load; the warm-up's and the window's
    length in seconds.

    The warm-up runs from the moment every GPU has its matrices: power, clocks and temperature settle under load.
    It ends after ``warmup_s``, or sooner once ``at_limit()`` (every GPU draws at least AT_LIMIT of its power limit)
    after MIN_WARMUP_S: NVML's power reading is a one-second average on Ampere and later, so a GPU it shows at the
    limit has been there for about a second, and the power-capped clocks the window judges are then what it
    holds (an H100 SXM read 692-700 W of 700 W from the window's first sample, after 3 s)."""
    for load in loads:
        load.start()
    for load in loads:
        load.ready.wait()
    warmup_start = time.perf_counter()
    deadline = warmup_start + warmup_s
    while time.perf_counter() < deadline and not any(load.error for load in loads):
        if at_limit is not None and time.perf_counter() - warmup_start >= MIN_WARMUP_S and at_limit():
            break
        time.sleep(min(0.05, max(0.0, deadline - time.perf_counter())))
    warmed_s = time.perf_counter() - warmup_start
    # the runner's ready/go and done/release: a sampler in the pytest process may bracket exactly this window
    handshake(lambda: None, 0, directory, "ready", "go")
    measure.set()
    window_start = time.perf_counter()
    sampler.start()
    deadline = window_start + seconds
    while time.perf_counter() < deadline and not any(load.error for load in loads) and sampler.error is None:
        time.sleep(min(0.05, max(0.0, deadline - time.perf_counter())))
    sampler.stopped.set()
    sampler.join()
    window_s = time.perf_counter() - window_start
    stop.set()
    for load in loads:
        load.join()
    handshake(lambda: None, 0, directory, "done", "release")
    return warmed_s, window_s


def _all_at_limit(nvml: Nvml, handles: list, limits_w: list[float | None]) -> Callable[[], bool]:
    """Every GPU's power draw at AT_LIMIT of its limit or more. False where NVML cannot say, whatever it answered:
    the warm-up then runs its whole length, and an NVML that fails for good fails the window's sampler, which
    reports it with the GPU it read."""

    def at_limit() -> bool:
        for handle, limit_w in zip(handles, limits_w, strict=True):
            try:
                power_mw = nvml.get({}, "power_w", ("nvmlDeviceGetPowerUsage",), handle)
            except Exception:  # noqa: BLE001  GPU_IS_LOST and the like: the sampler meets it and says so
                return False
            if not limit_w or power_mw is None or power_mw / 1000 < AT_LIMIT * limit_w:
                return False
        return True

    return at_limit


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the settings a profile section holds are required: the launcher passes them, with profile.schema.json's
    # defaults for what the section leaves out (this script cannot read the schema)
    parser.add_argument("--seconds", type=float, required=True, help="the measured window")
    parser.add_argument("--warmup", type=float, required=True,
                        help="at most this much load before the window (less once every GPU is at its power limit)")
    parser.add_argument("--full-warmup", action="store_true",
                        help="run the whole --warmup even at the limit (to compare warm-ups: hardware/)")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), required=True)
    parser.add_argument("--interval", type=float, required=True, help="seconds between NVML reads")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=1, help="with --device cpu: how many CPU workers")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.seconds <= 0 or args.interval <= 0 or args.warmup < 0 or args.size <= 0:
        parser.exit(2, "power_hold: --seconds, --interval and --size must be positive, --warmup not negative\n")

    nvml = None
    # before anything is measured (it needs NVML: no GPU is judged unnamed)
    devices, names, boards = workload_devices(torch, args.device, args.workers)
    if args.device == "cuda":
        if not boards:
            parser.exit(2, "power_hold: no CUDA device\n")
        dtype = _DTYPES[args.dtype]
        nvml = Nvml()
        handles = [nvml.handle(b["uuid"]) for b in boards]
        nvml_state = {"available": True, "why": None}
    else:
        dtype = torch.float32  # a CPU product in bf16 is slow and proves nothing more
        handles = [None] * args.workers
        nvml_state = {"available": False, "why": "--device cpu: no GPU, NVML not read"}
    unread: list[dict] = [{} for _ in devices]
    try:
        facts = [static_facts(nvml, h, u) if nvml else
                 {"power_limit_w": None, "max_sm_clock_mhz": None,
                  "thresholds_c": {"slowdown": None, "shutdown": None, "gpu_max": None}}
                 for h, u in zip(handles, unread, strict=True)]
        measure, stop = threading.Event(), threading.Event()
        loads = [Load(d, args.size, dtype, measure, stop) for d in devices]
        sampler = Sampler(nvml, handles, unread, args.interval)
        try:
            at_limit = (_all_at_limit(nvml, handles, [f["power_limit_w"] for f in facts])
                        if nvml and not args.full_warmup else None)
            warmed_s, window_s = _hold(loads, sampler, args.seconds, args.warmup, args.handshake, measure, stop,
                                       at_limit)
        finally:  # whatever stopped the run, no GEMM thread outlives it
            measure.set()
            stop.set()
            sampler.stopped.set()
    finally:
        if nvml is not None:
            nvml.close()
    for load in loads:
        if load.error is not None:
            raise RuntimeError(f"the GEMM load on {load.device} failed: {load.error!r}") from load.error
    if sampler.error is not None:
        raise RuntimeError(f"reading NVML under load failed: {sampler.error!r}") from sampler.error

    flops = 2 * args.size**3
    gpus = []
    for i, (board, load) in enumerate(zip(boards, loads, strict=True)):
        samples = sampler.samples[i]
        gpus.append({"cuda": board["cuda_index"], "index": board["nvml_index"], "uuid": board["uuid"],
                     "serial": board["serial"], "name": names[i], **facts[i],
                     "tflops": load.iterations * flops / load.elapsed_s / 1e12 if load.elapsed_s > 0 else None,
                     "iterations": load.iterations, "unread": unread[i], "samples": samples,
                     "summary": summarize(samples, facts[i]["power_limit_w"])})
    result = {"format": FORMAT, "device": args.device, "seconds": window_s, "warmup_s": round(warmed_s, 3),
              "warmup_max_s": args.warmup,
              "interval_s": args.interval, "size": args.size, "dtype": str(dtype).replace("torch.", ""),
              "nvml": nvml_state, "gpus": gpus, "torch_version": torch.__version__}
    for gpu in gpus:
        s = gpu["summary"]
        print(f"GPU{gpu['index']} {gpu['name']}: {gpu['tflops'] or 0:.1f} TFLOP/s, power median "
              f"{s['power_w_median']} W of {gpu['power_limit_w']} W, SM clock at the limit "
              f"{s['sm_clock_mhz_median_at_limit']} MHz (max {gpu['max_sm_clock_mhz']}), hottest "
              f"{s['temperature_c_max']} C, reasons {s['reasons_seen']}", flush=True)
    args.result.write_text(json.dumps(result, indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
