"""What a node is held to (baseline.py finds it): the profile, and the boards its acceptance saw."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AcceptedBoard:
    index: int
    serial: str | None
    uuid: str | None
    pcie_width_current: int | None
    nvlinks_active: int | None


@dataclass
class Baseline:
    profile: object  # profile.model.Profile
    profile_from: str  # in words: "--profile", "the accepted results reports/gpufabric-results.json"
    boards: list[AcceptedBoard] | None = None  # None: no accepted results to name the boards
    accepted_from: str | None = None
    accepted_driver: str | None = None
    accepted_verdict: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"profile": {"name": self.profile.name, "sha256": self.profile.sha256, "path": str(self.profile.path),
                            "from": self.profile_from},
                "accepted": None if self.accepted_from is None else {
                    "results": self.accepted_from, "verdict": self.accepted_verdict,
                    "driver_version": self.accepted_driver,
                    "boards": [{"index": b.index, "serial": b.serial} for b in self.boards or []]},
                "notes": self.notes}
