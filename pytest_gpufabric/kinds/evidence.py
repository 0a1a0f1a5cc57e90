"""Evidence from other tools a customer brings (evidence.py): each `dcgmi diag` result is judged as the promise it
speaks to (checks/evidence.py names its record dcgm-<test>); nvbandwidth's copies are judged as the copy bandwidth
(kinds/bandwidth.py). Its promises come from the evidence given, not from the profile: no kind of its own."""

from __future__ import annotations

from ..remedy_classes import RERUN, RESEAT, RESET, RMA, SOFTWARE, Remedy
from ..remedy_rules import Context, _lead
from ..report.phrases import settings_phrase
from .base import CheckRule

POSITION = 100
OWN_MODULES = ("evidence.py", "checks/evidence.py", "suites/test_evidence.py", "formats/dcgm_diag.py",
               "formats/nvbandwidth.py")

#: DCGM's test (the check's name, dcgm-<test>) -> what its failure points to; any other test: a reset, then dcgmi diag
#: again (DCGM's message names the cause)
_DCGM = {"software": SOFTWARE, "deployment": SOFTWARE, "context-create": SOFTWARE, "nvbandwidth": RERUN,
         "deployment-page-retirement": RESET, "memory-bandwidth": RESET, "pcie": RESEAT, "targeted-power": RESEAT,
         "targeted-stress": RESEAT, "pulse-test": RESEAT, "sm-stress": RESEAT, "memory": RMA, "memtest": RMA,
         "diagnostic": RMA, "eud": RMA, "cpu-eud": RMA, "deployment-inforom": RMA}


def _dcgm(check: dict, ctx: Context) -> Remedy:
    """By DCGM's test (``_DCGM``), the longest name that the test's is or starts with."""
    test = str(check.get("name", "")).removeprefix("dcgm-")
    key = next((k for k in sorted(_DCGM, key=len, reverse=True) if test == k or test.startswith(k + "-")), None)
    return _DCGM.get(key, RESET), f"{_lead(check)}: DCGM failed its {test} test"


CHECKS = (CheckRule("dcgm-", _dcgm, settings_phrase),)
