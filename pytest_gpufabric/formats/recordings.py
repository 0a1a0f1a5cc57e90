"""The files a live run writes and a bundle replays: their names and format tags, and what they hold.

Below both fabric/ (the bundle reads them) and workloads/ (the live run writes them), so neither imports the
other for a file name or a format tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NVLINK_TRAFFIC_FORMAT = "gpufabric-nvlink-traffic/1"
BANDWIDTH_FORMAT = "gpufabric-bandwidth/1"
#: workloads/fabric_pairs.py's result (that standalone script spells it out too: FORMAT there)
FABRIC_FORMAT = "gpufabric-fabric/1"


@dataclass
class BandwidthMeasurement:
    """What the bandwidth suite judges: live, or as a bundle recorded it (bandwidth.json, nccl-tests output)."""

    collectives: dict | None = None  # collectives.py's result
    copy: dict | None = None  # copy_bw.py's result
    nccl_tests: list[dict] = field(default_factory=list)  # parsed runs of <op>_perf binaries
    source: str = "live"
    #: part -> why it could not be measured ("collectives", "copy", "nccl_tests" for a configured binary that is
    #: not there, "nccl_tests:<op>" for one op's binary that failed)
    errors: dict[str, str] = field(default_factory=dict)
    nccl_tests_missing: dict[str, str] = field(default_factory=dict)  # op -> where its <op>_perf was looked for
    #: part ("collectives", "copy") -> the tool it needs that is not installed (torch): not measured, not failed
    tools_missing: dict[str, str] = field(default_factory=dict)
    #: a bundle's nccl-tests file that could not be read -> why (its promises are not checked, naming it)
    unreadable: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"format": BANDWIDTH_FORMAT, "collectives": self.collectives, "copy": self.copy,
                "nccl_tests": self.nccl_tests, "errors": self.errors, "nccl_tests_missing": self.nccl_tests_missing,
                "tools_missing": self.tools_missing}
