"""The files a live run writes and a bundle replays: their names and format tags, and what they hold.

Below both fabric/ (the bundle reads them) and workloads/ (the live run writes them), so neither imports the
other for a file name or a format tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVLINK_TRAFFIC_FORMAT = "gpufabric-nvlink-traffic/1"
BANDWIDTH_FORMAT = "gpufabric-bandwidth/1"


@dataclass
class BandwidthMeasurement:
    """What the bandwidth suite judges: live, or as a bundle recorded it (bandwidth.json, nccl-tests output)."""

    collectives: dict | None = None  # collectives.py's result
    copy: dict | None = None  # copy_bw.py's result
    nccl_tests: list[dict] = field(default_factory=list)  # parsed all_reduce_perf runs
    source: str = "live"
    errors: dict[str, str] = field(default_factory=dict)  # part -> why it could not be measured

    def to_json(self) -> dict:
        return {"format": BANDWIDTH_FORMAT, "collectives": self.collectives, "copy": self.copy,
                "nccl_tests": self.nccl_tests, "errors": self.errors}
