"""Memory pattern test: every GPU at once writes patterns over most of its free memory, reads them back and compares.

Standalone (imports torch, the standard library and its sibling modules only); one process, one thread per GPU,
each on its own CUDA device and stream:

    python mem_pattern.py --fraction 0.9 --seconds 5 --patterns walking_ones,walking_zeros,address,random \
        --seed 1 --result out.json

Each pass writes one pattern (``pattern_chunk``: walking_ones, walking_zeros, address, random) over ``--fraction``
of the free memory before reading any of it back, so a write that lands in the wrong place shows in the chunk it
spoiled. What a pass does, the region, each pattern and the figures of an H100: docs/evidence/diagnostics.md,
"How the diagnostics measure".

``--plant-fault GPU`` flips bit ``--plant-bit`` (17) of the word at ``--plant-offset`` (the middle of the region)
on that CUDA device after the first pass wrote it: the result must then name that GPU, the offset and the bit
(the tests and a demonstration run prove the failing path with it). ``--device cpu --workers N`` runs the same
code on N CPU "devices" (for tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from pathlib import Path

import torch

try:  # run as a script: its folder is on sys.path; imported as a module (tests): relative
    from handshake import handshake, reporting_failure
    from identity import workload_devices
except ImportError:
    from .handshake import handshake, reporting_failure
    from .identity import workload_devices

FORMAT = "gpufabric-mem-pattern/1"
PATTERNS = ("walking_ones", "walking_zeros", "address", "random")
WORD_BYTES = 8
#: above this many elements one arange is not trusted (the 2**32 bug, with a margin); a chunk is far below it
MAX_CHUNK_ELEMENTS = 2**31
_MASK64 = (1 << 64) - 1
#: the mismatch mask is scanned for the first mismatches in slices of this many words, so a chunk full of errors
#: never needs an index tensor of its size
_SCAN_WORDS = 1 << 20


def _signed64(value: int) -> int:
    """An unsigned 64-bit value as the int64 that holds the same bits."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def hex64(value: int) -> str:
    """The 64 bits of an int64 as 16 hex digits: ``-1`` is ``0xffffffffffffffff``."""
    return f"0x{value & _MASK64:016x}"


def xor_bits(expected: int, found: int) -> list[int]:
    """The bit positions (0 = least significant) where two 64-bit words differ."""
    diff = (expected ^ found) & _MASK64
    return [bit for bit in range(64) if diff >> bit & 1]


#: word j of the walking-ones pattern, for j = 0..63
_WALKING = [_signed64(1 << bit) for bit in range(64)]


def pattern_chunk(kind: str, base_index: int, count: int, seed: int, device) -> torch.Tensor:
    """``count`` int64 words of pattern ``kind`` for the global word indexes ``base_index .. base_index+count-1``.

    A pure function of its arguments: called again with the same ones it gives the same words, which is how a chunk
    is checked. ``seed`` seeds the generator of the ``random`` pattern (the caller passes one per chunk); the other
    patterns depend on the global index only. Indexes are 64-bit throughout (``base_index`` may be past 2**32);
    ``count`` stays below MAX_CHUNK_ELEMENTS."""
    if not 0 <= count < MAX_CHUNK_ELEMENTS or base_index < 0:
        raise ValueError(f"pattern_chunk: count {count} at base {base_index}: a chunk is 0 <= count < 2**31 words")
    if kind == "address":
        return torch.arange(count, dtype=torch.int64, device=device).add_(base_index)
    if kind in ("walking_ones", "walking_zeros"):
        # periodic with period 64: the table rolled to the chunk's start, repeated; no index arithmetic on the GPU
        table = torch.tensor(_WALKING, dtype=torch.int64, device=device).roll(-(base_index % 64))
        words = table.repeat(-(-count // 64))[:count]
        return words.bitwise_not_() if kind == "walking_zeros" else words
    if kind == "random":
        generator = torch.Generator(device=device).manual_seed(seed)
        return torch.empty(count, dtype=torch.int64, device=device).random_(-(2**63), None, generator=generator)
    raise ValueError(f"unknown pattern {kind!r} (known: {', '.join(PATTERNS)})")


def _host_available_bytes() -> int:
    """MemAvailable of /proc/meminfo (what a CPU run calls free), else the free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _is_device_error(exc: BaseException) -> bool:
    """A CUDA error (an uncorrectable ECC error, an Xid) is the GPU's result; anything else is our bug."""
    accelerator_error = getattr(torch, "AcceleratorError", ())
    return isinstance(exc, accelerator_error) or (isinstance(exc, RuntimeError) and "CUDA" in str(exc))


class DeviceTest:
    """The pattern test of one device: its region, its passes, its mismatches. ``run`` is one thread's work."""

    def __init__(self, cuda: int, device: torch.device, board: dict, name: str, args: argparse.Namespace) -> None:
        self.cuda, self.device, self.board, self.name, self.args = cuda, device, board, name, args
        self.chunks: list[torch.Tensor] = []
        self.words = self.chunk_count = 0  # kept when the chunks are given back
        self.free_bytes = self.total_bytes = 0
        self.allocation_stopped: str | None = None
        self.passes: list[dict] = []
        self.first_mismatches: list[dict] = []
        self.mismatches = 0
        self.seconds = 0.0
        self.planted = False
        self.plant: dict | None = None
        self.error: str | None = None

    def _context(self):
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.device(self.device))
        stack.enter_context(torch.cuda.stream(self.stream))
        return stack

    def allocate(self) -> None:
        args = self.args
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # the CUDA runtime's current device is per thread
            self.stream = torch.cuda.Stream(device=self.device)
            self.free_bytes, self.total_bytes = torch.cuda.mem_get_info(self.device)  # after the context exists
        else:
            self.free_bytes = _host_available_bytes()
            self.total_bytes = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        chunk_bytes = args.chunk_bytes - args.chunk_bytes % WORD_BYTES
        budget = int(self.free_bytes * args.fraction)
        # the comparison's scratch (the chunk generated again, its bool mask, the walking table) comes out of the
        # same fraction: the test takes no more than it says
        scratch = chunk_bytes + chunk_bytes // WORD_BYTES + (2 << 20)
        region = max(0, budget - scratch) if args.bytes is None else min(args.bytes, max(0, budget - scratch))
        region -= region % WORD_BYTES
        with self._context():
            while region > 0:
                size = min(chunk_bytes, region)
                try:
                    self.chunks.append(torch.empty(size // WORD_BYTES, dtype=torch.int64, device=self.device))
                except torch.cuda.OutOfMemoryError as exc:  # free memory that another process took meanwhile
                    self.allocation_stopped = f"allocation refused after {self.tested_bytes} bytes: {exc}"[:500]
                    break
                region -= size
                self.words += size // WORD_BYTES
        self.chunk_count = len(self.chunks)

    @property
    def tested_bytes(self) -> int:
        return self.words * WORD_BYTES

    def _seed(self, kind: str, chunk: int, cycle: int) -> int:
        return self.args.seed + chunk + cycle * len(self.chunks) if kind == "random" else 0

    def _plant_fault(self) -> None:
        """Flip one bit of one word: the fault a failing cell gives, where the result must find it."""
        offset = self.args.plant_offset if self.args.plant_offset is not None else self.words // 2 * WORD_BYTES
        if not 0 <= offset < self.tested_bytes or offset % WORD_BYTES:
            raise ValueError(f"--plant-offset {offset}: not a word of the {self.tested_bytes}-byte region")
        index = offset // WORD_BYTES
        for chunk in self.chunks:
            if index < chunk.numel():
                flip = torch.tensor([_signed64(1 << self.args.plant_bit)], dtype=torch.int64, device=self.device)
                chunk[index:index + 1].bitwise_xor_(flip)
                break
            index -= chunk.numel()
        self.planted = True
        self.plant = {"offset_bytes": offset, "bit": self.args.plant_bit}

    def _verify(self, kind: str, cycle: int) -> int:
        """Read every chunk back against the pattern generated again; the first mismatches are kept."""
        wrong, base = 0, 0
        for number, chunk in enumerate(self.chunks):
            expected = pattern_chunk(kind, base, chunk.numel(), self._seed(kind, number, cycle), self.device)
            mask = chunk != expected
            count = int(mask.sum())
            if count:
                wrong += count
                self._keep_first(kind, base, chunk, expected, mask)
            base += chunk.numel()
            del expected, mask
        return wrong

    def _keep_first(self, kind: str, base: int, chunk: torch.Tensor, expected: torch.Tensor,
                    mask: torch.Tensor) -> None:
        room = self.args.report_mismatches - len(self.first_mismatches)
        start = 0
        while room > 0 and start < mask.numel():
            part = mask[start:start + _SCAN_WORDS]
            if bool(part.any()):
                where = part.nonzero().flatten()[:room] + start
                for index, want, got in zip(where.tolist(), expected[where].tolist(), chunk[where].tolist(),
                                            strict=True):
                    self.first_mismatches.append({
                        "pattern": kind, "offset_bytes": (base + index) * WORD_BYTES, "expected": hex64(want),
                        "found": hex64(got), "xor_bits": xor_bits(want, got)})
                room -= where.numel()
            start += _SCAN_WORDS

    def run(self) -> None:
        """Passes over the region until the time is up (the first cycle of patterns always whole)."""
        args = self.args
        if not self.chunks:
            return
        patterns = args.patterns
        with self._context():
            start = time.perf_counter()
            number = 0
            while number < len(patterns) or time.perf_counter() - start < args.seconds:
                kind, cycle = patterns[number % len(patterns)], number // len(patterns)
                began = time.perf_counter()
                base = 0
                for chunk_number, chunk in enumerate(self.chunks):
                    chunk.copy_(pattern_chunk(kind, base, chunk.numel(), self._seed(kind, chunk_number, cycle),
                                              self.device))
                    base += chunk.numel()
                if number == 0 and args.plant_fault == self.cuda:
                    self._plant_fault()
                wrong = self._verify(kind, cycle)  # its counts wait for the GPU: the pass is over when they come
                self.mismatches += wrong
                self.passes.append({"pattern": kind, "bytes": self.tested_bytes,
                                    "seconds": time.perf_counter() - began, "mismatches": wrong})
                number += 1
            self.seconds = time.perf_counter() - start

    def row(self) -> dict:
        tested = self.tested_bytes
        return {
            "cuda": self.cuda, "index": self.board["nvml_index"], "uuid": self.board["uuid"],
            "serial": self.board["serial"], "name": self.name, "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes, "tested_bytes": tested,
            "coverage": tested / self.free_bytes if self.free_bytes else None,
            "chunks": self.chunk_count, "allocation_stopped": self.allocation_stopped,
            "passes": self.passes, "mismatches": self.mismatches, "first_mismatches": self.first_mismatches,
            "seconds": self.seconds, "planted": self.planted, "plant": self.plant, "error": self.error,
        }


def _worker(test: DeviceTest, allocated: threading.Barrier, go: threading.Barrier,
            bugs: list[BaseException]) -> None:
    """One device's thread: allocate, wait until every device has, run when the runner says go. A CUDA error is
    this device's result (its row says it); any other exception is a bug and stops the run."""
    failure: BaseException | None = None
    try:
        test.allocate()
    except BaseException as exc:  # noqa: B036 - every thread must reach the barrier, whatever happened
        failure = exc
    try:
        allocated.wait()
        go.wait()
    except threading.BrokenBarrierError:
        return  # the main thread gave up (the handshake failed): it reports why
    if failure is None:
        try:
            test.run()
        except BaseException as exc:  # noqa: B036
            failure = exc
    if failure is not None:
        if _is_device_error(failure):
            test.error = f"{type(failure).__name__}: {failure}"[:2000]
        else:
            bugs.append(failure)
    test.chunks = []  # the region goes back before the next device's result is written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the settings a profile section holds are required: the launcher passes them, with profile.schema.json's
    # defaults for what the section leaves out (this script cannot read the schema)
    parser.add_argument("--fraction", type=float, required=True, help="of the free memory, scratch included")
    parser.add_argument("--bytes", type=int, default=None, help="cap on the tested region (required on cpu)")
    parser.add_argument("--seconds", type=float, required=True, help="per GPU; the first pattern cycle always runs")
    parser.add_argument("--patterns", required=True, help=f"comma-separated, of {','.join(PATTERNS)}")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--chunk-bytes", type=int, default=1 << 30)
    parser.add_argument("--report-mismatches", type=int, default=10, help="first mismatches kept per GPU")
    parser.add_argument("--plant-fault", type=int, default=None, metavar="GPU", help="CUDA index (tests, demos)")
    parser.add_argument("--plant-offset", type=int, default=None, help="byte offset of the flipped word")
    parser.add_argument("--plant-bit", type=int, default=17)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--workers", type=int, default=2, help="with --device cpu: how many CPU devices")
    parser.add_argument("--handshake", type=Path, default=None)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    args.patterns = [p.strip() for p in args.patterns.split(",") if p.strip()]
    unknown = sorted(set(args.patterns) - set(PATTERNS))
    if unknown or not args.patterns:
        parser.error(f"--patterns: unknown {', '.join(unknown) or '(none named)'}; known: {', '.join(PATTERNS)}")
    if not 0 < args.fraction < 1:
        parser.error(f"--fraction {args.fraction}: between 0 and 1 (of the free memory)")
    if not WORD_BYTES <= args.chunk_bytes < MAX_CHUNK_ELEMENTS * WORD_BYTES:
        parser.error(f"--chunk-bytes {args.chunk_bytes}: 8 bytes to 16 GiB")
    if not 0 <= args.plant_bit < 64:
        parser.error(f"--plant-bit {args.plant_bit}: 0 to 63")
    if args.device == "cpu" and args.bytes is None:
        parser.error("--device cpu needs --bytes (the test never takes a fraction of the host's memory)")

    if args.device == "cuda" and torch.cuda.device_count() == 0:
        parser.exit(2, "mem_pattern: no CUDA device\n")
    devices, names, boards = workload_devices(torch, args.device, args.workers)  # before anything is measured
    if args.plant_fault is not None and not 0 <= args.plant_fault < len(devices):
        parser.exit(2, f"mem_pattern: --plant-fault {args.plant_fault}: there are {len(devices)} device(s)\n")

    tests = [DeviceTest(i, devices[i], boards[i], names[i], args) for i in range(len(devices))]
    allocated, go = threading.Barrier(len(tests) + 1), threading.Barrier(len(tests) + 1)
    bugs: list[BaseException] = []
    threads = [threading.Thread(target=_worker, args=(t, allocated, go, bugs), name=f"mem-pattern-{t.cuda}",
                                daemon=True) for t in tests]
    for thread in threads:
        thread.start()
    try:
        allocated.wait()
        # the runner may bracket the passes (ECC counters, clocks): every region is allocated, none written yet
        handshake(lambda: None, 0, args.handshake, "ready", "go")
        go.wait()
    except BaseException:
        go.abort()
        raise
    for thread in threads:
        thread.join()
    handshake(lambda: None, 0, args.handshake, "done", "release")
    if bugs:
        raise bugs[0]

    plant = None
    if args.plant_fault is not None:
        plant = {"cuda": args.plant_fault, **(tests[args.plant_fault].plant or {})}
    result = {
        "format": FORMAT, "fraction": args.fraction, "seconds": args.seconds, "patterns": args.patterns,
        "seed": args.seed, "chunk_bytes": args.chunk_bytes, "bytes_cap": args.bytes, "device": args.device,
        "plant_fault": plant, "gpus": [t.row() for t in tests], "torch_version": torch.__version__,
    }
    for row in result["gpus"]:
        print(f"GPU{row['index']} ({row['serial'] or row['uuid'] or row['name']}): {len(row['passes'])} passes over "
              f"{row['tested_bytes'] / 2**30:.2f} GiB ({row['coverage'] or 0:.1%} of free) in {row['seconds']:.1f} s, "
              f"{row['mismatches']} mismatches" + (f", error: {row['error']}" if row["error"] else ""), flush=True)
    args.result.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(reporting_failure(main))
