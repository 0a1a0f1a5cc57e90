"""What a health check found: one record per finding, and the node's verdict from all of them.

A finding names the board (NVML index and serial; None for the node as a whole), says what it found in a few
words (``what``: the drain reason's middle), carries the figures it rests on (``evidence``), how bad it is
(``severity``) and what to do (``remedy``: one of remedy_classes.py's classes).

Severity: ``drain`` (take the node out of service), ``warn`` (shown, the node stays in service), ``unknown``
(a reading the check needs could not be had: the node is never called healthy on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import remedy_classes

DRAIN, WARN, UNKNOWN = "drain", "warn", "unknown"
HEALTHY, DRAIN_VERDICT, UNKNOWN_VERDICT = "HEALTHY", "DRAIN", "UNKNOWN"
#: exit status of `gpufabric health` by verdict: 0 healthy, 1 drain, 6 could not tell (as INCOMPLETE is 6)
EXIT_CODES = {HEALTHY: 0, DRAIN_VERDICT: 1, UNKNOWN_VERDICT: 6}


@dataclass
class Finding:
    check: str  # "remapped-rows-pending", "pcie-width", ...
    severity: str  # DRAIN, WARN or UNKNOWN
    what: str  # "rows pending remapping": short, for the 128-character drain reason
    gpu: int | None = None  # NVML index; None: the node
    serial: str | None = None
    remedy: str | None = None  # one of remedy_classes.CLASSES
    evidence: dict = field(default_factory=dict)  # the figures and where they were read
    detail: str = ""  # the longer sentence: usual causes, what to run

    @property
    def board(self) -> str:
        """``GPU3 (serial 1653724061974)``, ``GPU3`` without a serial, ``node`` for the machine."""
        if self.gpu is None:
            return "node"
        return f"GPU{self.gpu} (serial {self.serial})" if self.serial else f"GPU{self.gpu}"

    def to_dict(self) -> dict:
        return {"check": self.check, "severity": self.severity, "gpu": self.gpu, "serial": self.serial,
                "what": self.what, "remedy": self.remedy,
                "remedy_short": remedy_classes.SHORT.get(self.remedy) if self.remedy else None,
                "evidence": self.evidence, "detail": self.detail}


def verdict_of(findings: list[Finding]) -> str:
    """DRAIN when anything drains (a fault seen is a fault, whatever else could not be read), else UNKNOWN when
    anything could not be told, else HEALTHY (warnings included)."""
    severities = {f.severity for f in findings}
    if DRAIN in severities:
        return DRAIN_VERDICT
    if UNKNOWN in severities:
        return UNKNOWN_VERDICT
    return HEALTHY


#: the order a drain reason picks its finding in: the dearest remedy first (the one that decides the ticket)
_REMEDY_RANK = {name: rank for rank, name in enumerate(reversed(remedy_classes.CLASSES))}


def headline(findings: list[Finding], severity: str) -> Finding | None:
    """The finding a one-line reason names: of ``severity``, the dearest remedy first, then the lowest GPU."""
    chosen = [f for f in findings if f.severity == severity]
    if not chosen:
        return None
    return min(chosen, key=lambda f: (_REMEDY_RANK.get(f.remedy, len(_REMEDY_RANK)),
                                      -1 if f.gpu is None else f.gpu))
