"""A check's outcome as data: the terminal, the JSON results and the HTML report all render these records."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..formats.clean import clean_line, clean_text, clean_values
from ..units import non_finite

PASSED = "passed"
FAILED = "failed"
#: The promise could not be judged from this evidence (a bundle that did not record it, a setting the machine hides,
#: a number that is not finite): the test is skipped as "not checked", with the reason, and the run cannot be
#: ACCEPTED while it stays so (verdict.py)
NOT_CHECKED = "not checked"

#: the name of a record that judges without a measurement (promise.not_checked, promise.fail_promise): the verdict
#: counts it; the report's rows and the remedies, which read measurements, leave it out and show the reason instead
NO_MEASUREMENT = "no-measurement"


def is_measurement(check: dict) -> bool:
    return check.get("name") != NO_MEASUREMENT


@dataclass
class CheckResult:
    name: str  # "gpu-count", "topology-matrix", ...
    subject: str  # what was checked: "machine", "GPU0", "GPU0-GPU1"
    expected: Any
    found: Any
    verdict: str
    message: str  # one paragraph a customer can read: expected, found, and what usually causes a miss
    unit: str | None = None
    details: list[str] = field(default_factory=list)  # per-cell / per-link lines

    def __post_init__(self) -> None:
        # a record quotes machine text (a GPU's name, a serial, a tool's line): what it says reaches pytest's failure
        # lines, the terminal summary and the report with no terminal control byte (formats/clean.py)
        self.subject = clean_line(str(self.subject))
        self.message = clean_text(str(self.message))
        self.expected, self.found = clean_values(self.expected), clean_values(self.found)
        self.details = [clean_line(str(line)) for line in self.details]

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    def to_dict(self) -> dict:
        return asdict(self)


def passed(name: str, subject: str, expected: Any, found: Any, message: str = "", **kw: Any) -> CheckResult:
    return CheckResult(name, subject, expected, found, PASSED, message or f"{subject}: {found} as expected", **kw)


def failed(name: str, subject: str, expected: Any, found: Any, message: str, **kw: Any) -> CheckResult:
    return CheckResult(name, subject, expected, found, FAILED, message, **kw)


def unknown(name: str, subject: str, expected: Any, why: str) -> CheckResult:
    """The evidence cannot tell: the promise is not checked, and ``why`` says what was missing."""
    return CheckResult(name, subject, expected, None, NOT_CHECKED, why)


def finite_only(result: CheckResult, replay: bool) -> CheckResult:
    """A pass resting on numbers that are not all finite judged nothing (``nan < floor`` is false, so a NaN passes
    a floor): a recording holding one leaves the promise not checked; a number this run measured so is a failure
    of the run's own measurement, said as such. The checks refuse such numbers themselves; this is the net under
    them (the plugin passes every check through it). A failure stands: it names its own figures."""
    bad = non_finite(result.found) if result.verdict == PASSED else []
    if not bad:
        return result
    what = "; ".join(bad)
    if replay:
        result.verdict = NOT_CHECKED
        result.message = f"not a finite number in the recording ({what}): {result.subject} cannot be judged"
    else:
        result.verdict = FAILED
        result.message = f"this run measured a number that is not finite ({what}): {result.subject} was not measured"
    result.details = [*result.details, *bad]
    return result
