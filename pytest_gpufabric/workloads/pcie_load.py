"""PCIe under load: pinned host <-> device copies per GPU while NVML reads the link, as `dcgmi diag`'s PCIe test
looks at it.

Standalone (imports torch, the standard library and nvidia-ml-py only); one process, one GPU after another:

    python pcie_load.py --size 1073741824 --seconds 3 --result out.json

or one worker process per GPU (``--gpu CUDA_INDEX``), as the plugin runs it (power_pcie.measure_pcie_load, through
runner.run_workers): every worker starts at once and does its set-up (its CPUs, its CUDA context, its pinned and
device buffers) before it says ``ready``; then it copies when the runner lets it go, one GPU at a time unless the
runner put GPUs that share neither a PCIe root complex nor a NUMA node (nor so host memory) in one round, and says
``done``. The set-up of every GPU so overlaps; the copies of GPUs that share a path never do.

Per GPU, the link's generation and width are read idle, then under ``--seconds`` of pinned copies each way, with
the replay counter before and after: a GPU slows its link when idle, and a link that trained down shows only under
load. What is read when, on which CPUs, and why: docs/evidence/diagnostics.md, "How the diagnostics measure".

NVML answers that are data (NOT_SUPPORTED, ...) are null, with their names under the GPU's ``unread``; any other
NVML error fails the workload. Nothing is set. ``--device cpu --workers N`` copies between host tensors without
NVML (for tests): every NVML field is null and ``nvml.available`` false.

The result's format (``pcie-load.json``): docs/evidence/diagnostics.md, "Record formats".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

import torch

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import TIMEOUT_S, handshake, reporting_failure
    from identity import workload_devices
    from nvml_reads import Nvml
except ImportError:
    from .handshake import TIMEOUT_S, handshake, reporting_failure
    from .identity import workload_devices
    from .nvml_reads import Nvml

FORMAT = "gpufabric-pcie-load/1"
_WARMUP_COPIES = 2
_CPU_SET_WORDS = 16  # nvmlDeviceGetCpuAffinity: 64 CPUs a word, room for 1024


class LinkReader:
    """The link of one GPU (generation, width, replay counter); every value None without NVML."""

    def __init__(self, nvml: Nvml | None, handle, unread: dict) -> None:
        self.nvml, self.handle, self.unread = nvml, handle, unread

    def _get(self, key: str, name: str):
        return None if self.nvml is None else self.nvml.get(self.unread, key, name, self.handle)

    def current(self, where: str) -> dict:
        return {"gen": self._get(f"link.{where}.gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                "width": self._get(f"link.{where}.width", "nvmlDeviceGetCurrPcieLinkWidth")}

    def maximum(self) -> dict:
        return {"gen": self._get("link.max.gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                "width": self._get("link.max.width", "nvmlDeviceGetMaxPcieLinkWidth"),
                "gpu_gen": self._get("link.max.gpu_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration")}

    def replays(self, where: str) -> int | None:
        return self._get(f"replay_counter.{where}", "nvmlDeviceGetPcieReplayCounter")

    def cpus(self) -> set[int] | None:
        if self.nvml is None:
            return None
        words = self.nvml.get(self.unread, "cpu_affinity", "nvmlDeviceGetCpuAffinity", self.handle, _CPU_SET_WORDS)
        if words is None:
            return None
        return {w * 64 + bit for w, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1}


class UnderLoad(threading.Thread):
    """Reads the current generation and width every ``interval_s`` until stopped."""

    def __init__(self, link: LinkReader, interval_s: float) -> None:
        super().__init__(name="pcie-link-reader", daemon=True)
        self.link, self.interval_s = link, interval_s
        self.reads: list[dict] = []
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                self.reads.append(self.link.current("under_load"))
                self.stopped.wait(self.interval_s)
        except BaseException as exc:
            self.error = exc

    def summary(self) -> dict:
        gens = [r["gen"] for r in self.reads if r["gen"] is not None]
        widths = [r["width"] for r in self.reads if r["width"] is not None]

        def histogram(values: list[int]) -> dict[str, int]:
            return {str(v): values.count(v) for v in sorted(set(values))}

        return {"gen_min": min(gens) if gens else None, "width_min": min(widths) if widths else None,
                "gen_max": max(gens) if gens else None, "width_max": max(widths) if widths else None,
                "reads": min(len(gens), len(widths)), "gen_reads": histogram(gens), "width_reads": histogram(widths)}


def _timed_copies(copy, seconds: float, cuda: bool) -> list[float]:
    """Seconds per copy, copies back to back for ``seconds`` after a warm-up (at least one copy is timed)."""
    for _ in range(_WARMUP_COPIES):
        copy()
    if cuda:
        torch.cuda.synchronize()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while not times or time.perf_counter() < deadline:
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            copy()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start_s = time.perf_counter()
            copy()
            times.append(time.perf_counter() - start_s)
    return times


class HostLoad:
    """One GPU's copy buffers: a pinned host buffer (on the CPUs this process runs on) and a device buffer."""

    def __init__(self, device: torch.device, size: int) -> None:
        self.device, self.cuda = device, device.type == "cuda"
        if self.cuda:
            torch.cuda.set_device(device)
        self.host = torch.empty(size, dtype=torch.uint8, pin_memory=self.cuda)
        self.host.fill_(7)
        self.target = torch.empty(size, dtype=torch.uint8, device=device)

    def copy_both_ways(self, link: LinkReader, seconds: float,
                       read_interval_s: float) -> tuple[dict[str, list[float]], dict]:
        """Seconds per copy in each direction, and the link as read while they ran."""
        cuda, host, target = self.cuda, self.host, self.target
        # the reader starts after the first warm-up copies have woken the link: an idle link read as "under load"
        # would fail a healthy GPU whose link sleeps at idle
        for _ in range(_WARMUP_COPIES):
            target.copy_(host, non_blocking=cuda)
        if cuda:
            torch.cuda.synchronize()
        reader = UnderLoad(link, read_interval_s)
        reader.start()
        try:
            copies = {"h2d": _timed_copies(lambda: target.copy_(host, non_blocking=cuda), seconds, cuda),
                      "d2h": _timed_copies(lambda: host.copy_(target, non_blocking=cuda), seconds, cuda)}
        finally:
            reader.stopped.set()
            reader.join()
        if reader.error is not None:
            raise RuntimeError(f"reading the PCIe link under load failed: {reader.error!r}") from reader.error
        return copies, reader.summary()


def _release_pinned() -> None:
    """torch keeps a freed pinned buffer for the next request of its size: the next GPU would copy from this
    GPU's socket. Emptying that cache makes each GPU's buffer its own (where this torch can)."""
    empty = getattr(torch._C, "_host_emptyCache", None)
    if empty is not None:
        empty()


def _own_cpus(link: LinkReader) -> list[int] | None:
    """The GPU's CPUs (NVML) that this process may run on; None where NVML cannot say or none is allowed."""
    allowed = os.sched_getaffinity(0)
    cpus = link.cpus()
    return sorted(cpus & allowed) if cpus and cpus & allowed else None


def _row(size: int, copies: dict[str, list[float]], under_load: dict, bound: list[int] | None, idle: dict,
         after_link: dict, maximum: dict, before: int | None, after: int | None) -> dict:
    if before is None or after is None:
        rise = None
    else:
        rise = after - before if after >= before else after  # lower after: the counter was reset, all of it is new
    return {"h2d_gbps": size / statistics.median(copies["h2d"]) / 1e9,
            "d2h_gbps": size / statistics.median(copies["d2h"]) / 1e9,
            "copies": {direction: len(times) for direction, times in copies.items()},
            "cpu_affinity": _cpu_text(bound),
            "link": {"idle": idle, "under_load": under_load, "after": after_link, "max": maximum},
            "replay_counter": {"before": before, "after": after, "rise": rise}}


def measure_gpu(device: torch.device, link: LinkReader, size: int, seconds: float, read_interval_s: float) -> dict:
    """One GPU's copies both ways with its link read before, during and after (the standalone run: one GPU after
    another in one process, bound to each GPU's CPUs in turn)."""
    idle, maximum, before = link.current("idle"), link.maximum(), link.replays("before")
    allowed = os.sched_getaffinity(0)
    bound = _own_cpus(link)
    if bound:
        os.sched_setaffinity(0, bound)  # before the pinned buffer is allocated: its pages land on this socket
    try:
        copies, under_load = HostLoad(device, size).copy_both_ways(link, seconds, read_interval_s)
    finally:
        if bound:
            os.sched_setaffinity(0, allowed)
        if device.type == "cuda":
            _release_pinned()
    return _row(size, copies, under_load, bound, idle, link.current("after"), maximum, before,
                link.replays("after"))


def measure_gpu_when_let_go(device: torch.device, link: LinkReader, size: int, seconds: float,
                            read_interval_s: float, directory: Path | None, wait_s: float) -> dict:
    """One GPU's worker (``--gpu``): the link read idle, this process bound to the GPU's CPUs for good, the buffers
    made; then ``ready``, and the copies once the runner says ``go`` (its round: at most ``wait_s`` later),
    ``done`` after them."""
    idle, maximum = link.current("idle"), link.maximum()
    bound = _own_cpus(link)
    if bound:
        os.sched_setaffinity(0, bound)  # every thread started from here on (torch's pinning threads) runs there too
    load = HostLoad(device, size)
    if load.cuda:
        torch.cuda.synchronize()
    handshake(lambda: None, 0, directory, "ready", "go", timeout_s=wait_s)
    before = link.replays("before")
    copies, under_load = load.copy_both_ways(link, seconds, read_interval_s)
    row = _row(size, copies, under_load, bound, idle, link.current("after"), maximum, before, link.replays("after"))
    handshake(lambda: None, 0, directory, "done", "release")
    return row


def _cpu_text(cpus: list[int] | None) -> str | None:
    """[0, 1, 2, 5] -> '0-2,5', as nvidia-smi prints CPU lists."""
    if not cpus:
        return None
    ranges, start, prev = [], cpus[0], cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(ranges)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the settings a profile section holds are required: the launcher passes them, with profile.schema.json's
    # defaults for what the section leaves out (this script cannot read the schema)
    parser.add_argument("--size", type=int, required=True, help="bytes per copy")
    parser.add_argument("--seconds", type=float, required=True, help="copies back to back, per direction and GPU")
    parser.add_argument("--read-interval", type=float, default=0.02, help="seconds between link reads under load")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=1, help="with --device cpu: how many host-copy 'GPUs'")
    parser.add_argument("--gpu", type=int, default=None,
                        help="this CUDA device only, as one worker of the runner's (ready/go around its copies)")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.size <= 0 or args.seconds <= 0 or args.read_interval <= 0:
        parser.exit(2, "pcie_load: --size, --seconds and --read-interval must be positive\n")

    nvml = None
    # before anything is measured (it needs NVML: no GPU is judged unnamed)
    devices, names, boards = workload_devices(torch, args.device, args.workers)
    if args.device == "cuda":
        if not boards:
            parser.exit(2, "pcie_load: no CUDA device\n")
        nvml = Nvml()
        handles = [nvml.handle(b["uuid"]) for b in boards]
        nvml_state = {"available": True, "why": None}
    else:
        handles = [None] * args.workers
        nvml_state = {"available": False, "why": "--device cpu: no GPU, NVML not read"}
    if args.gpu is not None and not 0 <= args.gpu < len(devices):
        parser.exit(2, f"pcie_load: --gpu {args.gpu}: this process sees {len(devices)} device(s)\n")
    chosen = range(len(devices)) if args.gpu is None else [args.gpu]
    gpus = []
    try:
        for i in chosen:
            board, device, name, handle = boards[i], devices[i], names[i], handles[i]
            unread: dict = {}
            link = LinkReader(nvml, handle, unread)
            if args.gpu is None:
                row = measure_gpu(device, link, args.size, args.seconds, args.read_interval)
            else:
                # its round may come after every other GPU's copies: wait for them, and for the runner as ever
                wait_s = TIMEOUT_S + len(devices) * (2 * args.seconds + 30)
                row = measure_gpu_when_let_go(device, link, args.size, args.seconds, args.read_interval,
                                              args.handshake, wait_s)
            gpus.append({"cuda": board["cuda_index"], "index": board["nvml_index"], "uuid": board["uuid"],
                         "serial": board["serial"], "name": name, **row, "unread": unread})
            load = row["link"]["under_load"]
            print(f"GPU{board['nvml_index']} {name}: host->device {row['h2d_gbps']:.1f} GB/s, device->host "
                  f"{row['d2h_gbps']:.1f} GB/s; link idle gen {row['link']['idle']['gen']} x"
                  f"{row['link']['idle']['width']}, under load gen {load['gen_min']}-{load['gen_max']} x"
                  f"{load['width_min']}-{load['width_max']} ({load['reads']} reads), max gen "
                  f"{row['link']['max']['gen']} x{row['link']['max']['width']}; replays +"
                  f"{row['replay_counter']['rise']}", flush=True)
    finally:
        if nvml is not None:
            nvml.close()
    result = {"format": FORMAT, "device": args.device, "size": args.size, "seconds": args.seconds,
              "read_interval_s": args.read_interval, "nvml": nvml_state, "gpus": gpus,
              "torch_version": torch.__version__}
    args.result.write_text(json.dumps(result, indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
