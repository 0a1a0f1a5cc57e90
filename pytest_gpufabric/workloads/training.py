"""The data-parallel training step as the NVLink suite runs it: one rank per GPU, started together as torchrun
would start them (runner.run_ranks), with the NVLink sampler bracketing exactly the measured steps."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import WorkloadError
from ..fabric.nvlink_sampler import NvlinkTraffic, NvmlCounterReader
from ..formats.recordings import NVLINK_TRAFFIC_FORMAT
from .environment import gpu_environment, require_torch, workload_environment
from .runner import run_ranks

DDP_STEP_SCRIPT = Path(__file__).with_name("ddp_step.py")


@dataclass(frozen=True)
class TrainingSettings:
    """What the profile's `nvlink_traffic` section asks for (defaults: FACTS.md's 8 x Linear(4096, 4096))."""

    steps: int = 10
    warmup: int = 2
    layers: int = 8
    width: int = 4096
    batch: int = 64
    timeout_s: float = 300.0

    @classmethod
    def from_profile(cls, section: dict) -> TrainingSettings:
        model = section.get("model", {})
        return cls(
            steps=section.get("steps", cls.steps),
            warmup=section.get("warmup", cls.warmup),
            layers=model.get("layers", cls.layers),
            width=model.get("width", cls.width),
            batch=section.get("batch", cls.batch),
            timeout_s=section.get("timeout_s", cls.timeout_s),
        )

    @property
    def gradient_bytes(self) -> int:
        """fp32 weights and biases of the Linear layers: what DDP all-reduces every step."""
        return self.layers * (self.width * self.width + self.width) * 4


def ddp_script(settings: TrainingSettings, backend: str) -> list[str]:
    """One rank's command line."""
    return [
        sys.executable, str(DDP_STEP_SCRIPT),
        "--steps", str(settings.steps), "--warmup", str(settings.warmup), "--layers", str(settings.layers),
        "--width", str(settings.width), "--batch", str(settings.batch), "--backend", backend,
    ]


def ddp_command(nprocs: int, settings: TrainingSettings, backend: str) -> list[str]:
    """The same job under torchrun on this node, as a user would start it by hand."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nprocs}"]
    return [*launcher, *ddp_script(settings, backend)[1:]]


def run_ddp_training(nprocs: int, settings: TrainingSettings, *, backend: str = "nccl", measure=None,
                     env: dict[str, str] | None = None) -> dict:
    """Run the training steps, one rank per GPU (runner.run_ranks); ``measure`` (a context manager such as
    NvlinkTraffic) brackets the steps; ``env``: the workload's whole environment (default:
    workload_environment())."""
    if importlib.util.find_spec("torch") is None:
        raise WorkloadError([sys.executable], None, "", "", "torch is not installed in this Python "
                            "(pip install 'pytest-gpufabric[torch]')")
    on_begin = measure.__enter__ if measure is not None else None
    on_end = (lambda: measure.__exit__(None, None, None)) if measure is not None else None
    return run_ranks(ddp_script(settings, backend), nprocs, timeout_s=settings.timeout_s,
                     env=env or workload_environment(), on_begin=on_begin, on_end=on_end)


@dataclass
class NvlinkMeasurement:
    """NVLink counters around a training step (live), or as a bundle recorded them (replay)."""

    traffic: object  # fabric.nvlink_sampler.NvlinkTraffic
    workload: dict | None  # ddp_step's result; None when the recording has none (the TITAN RTX samples)
    source: str

    @property
    def env(self) -> dict[str, str]:
        return (self.workload or {}).get("env", {})

    @property
    def expected_bytes(self) -> float | None:
        return None if self.workload is None else float(self.workload["allreduce_bytes_per_rank"])

    def describe(self) -> str:
        if self.workload is None:
            return f"while training ran ({len(self.traffic.samples)} counter reads, {self.source})" + self._gaps()
        w = self.workload
        return (f"during {w['steps']} DDP steps on {w['world_size']} ranks "
                f"({w['model']['layers']}x Linear({w['model']['width']}), {w['gradient_bytes'] / 1e6:.0f} MB "
                "of gradients)" + self._gaps())

    def _gaps(self) -> str:
        failed = getattr(self.traffic, "failed_reads", 0)
        if not failed:
            return ""
        return (f"; {failed} background counter read(s) failed ({self.traffic.errors[0]}): the timeline has "
                "gaps, the totals are the reads before and after")

    def to_json(self) -> dict:
        return {"format": NVLINK_TRAFFIC_FORMAT, **self.traffic.to_json(), "workload": self.workload}


def recorded_training_traffic(recording) -> NvlinkMeasurement | None:
    """A bundle's NvlinkRecording as a measurement (None: the bundle has none)."""
    if recording is None:
        return None
    traffic = NvlinkTraffic.recorded(recording.samples, recording.interval_s)
    if recording.sampler:  # the live run's gaps, so the replay says what the live run said
        traffic.failed_reads = int(recording.sampler.get("failed_reads", 0))
        traffic.errors = list(recording.sampler.get("errors", []))
    return NvlinkMeasurement(traffic, recording.workload, recording.source)


def measure_training_traffic(boards: list[dict], section: dict, on_sample=None) -> NvlinkMeasurement:
    """Train across the promised ``boards`` (environment.promised_boards) with NCCL while sampling every active
    NVLink of them; ``on_sample`` is told of each counter sample as it is taken."""
    require_torch("the NVLink traffic suite")

    settings = TrainingSettings.from_profile(section)
    reader = NvmlCounterReader(sorted(b["index"] for b in boards))
    try:
        traffic = NvlinkTraffic(reader, interval_s=section.get("sample_interval_s", 0.05), on_sample=on_sample)
        workload = run_ddp_training(len(boards), settings, measure=traffic, env=gpu_environment(boards))
    finally:
        reader.close()
    return NvlinkMeasurement(traffic, workload, "live: NVML " + traffic.kind + " counters")
