"""Evidence from other tools (evidence.py): each `dcgmi diag` result and each nvbandwidth copy a customer brings
(``--gpu-evidence FILE``, or in the bundle) judged as the promise it speaks to, beside our own measurements of it.
"""

from __future__ import annotations

import pytest

from pytest_gpufabric.checks.bandwidth import check_copy, link_peak, pcie_peak
from pytest_gpufabric.checks.evidence import check_dcgm_result
from pytest_gpufabric.evidence import dcgm_results, nvbandwidth_copies, of_another_machine
from pytest_gpufabric.kinds import equivalents, promise_kinds
from pytest_gpufabric.kinds.bandwidth import COPY_BANDWIDTH
from pytest_gpufabric.parametrize import over
from pytest_gpufabric.promise import not_checked, promise
from pytest_gpufabric.session_factory import built_session


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test per `dcgmi diag` result and per nvbandwidth copy of the evidence read at start-up."""
    fabric_session = built_session(metafunc.config)
    profile = fabric_session.profile if fabric_session is not None else None
    evidence = fabric_session.evidence if profile else []
    if "dcgm_result" in metafunc.fixturenames:
        results = dcgm_results(evidence, profile.gpu_count if profile else 0, promises=equivalents("dcgm"))
        over(metafunc, "dcgm_result", results, [f"{r['source']}:{r['promise']}" for r in results])
    if "nvbandwidth_copy" in metafunc.fixturenames:
        copies = nvbandwidth_copies(evidence)
        over(metafunc, "nvbandwidth_copy", copies, [f"{r['source']}:{r['testcase']}" for r in copies])


@promise(lambda params: (params["dcgm_result"] or {}).get("promise", "dcgm-diag"), "dcgmi diag results")
def test_dcgm_diag(gpu_profile, dcgm_result, gpufabric_run, gpufabric_check):
    fabric = gpufabric_run.fabric
    foreign = of_another_machine(dcgm_result, fabric, gpu_profile)
    if foreign:
        not_checked(f"not evidence of this machine: {foreign}")
    gpu = fabric.gpu(dcgm_result["gpu"]) if fabric is not None and dcgm_result["gpu"] is not None else None
    kind = promise_kinds().get(str(dcgm_result.get("promise") or "").split("[", 1)[0])
    section = next((key for key in kind.sections if key in gpu_profile.data), None) if kind is not None else None
    gpufabric_check(check_dcgm_result(dcgm_result, gpu, stands_for=f"`{section}:` section" if section else None))


@promise(lambda params: f"{COPY_BANDWIDTH.name}[{(params['nvbandwidth_copy'] or {}).get('kind', 'nvbandwidth')}]",
         "copy bandwidth from nvbandwidth")
def test_nvbandwidth_copy(gpu_profile, nvbandwidth_copy, gpufabric_run, gpufabric_check):
    fabric = gpufabric_run.fabric
    kind = nvbandwidth_copy["kind"]
    foreign = of_another_machine(nvbandwidth_copy, fabric, gpu_profile)
    if foreign:
        not_checked(f"not evidence of this machine: {foreign}")
    status = nvbandwidth_copy.get("status")
    not_whole = (f"{nvbandwidth_copy['source']}: nvbandwidth's {nvbandwidth_copy['testcase']} is {status}, not a "
                 "whole result")
    if status not in ("passed", "incomplete"):
        not_checked(not_whole)  # waived, error, not found: no measurement

    def peak_of(row):
        if fabric is None:
            return None, "the machine was not read"
        if kind == "gpu_to_gpu":
            return link_peak(fabric, [row["src"], row["dst"]])
        gpu = fabric.gpu(row["gpu"])
        return pcie_peak([gpu]) if gpu is not None else (None, "unknown")

    source = f"nvbandwidth {nvbandwidth_copy['version'] or ''} {nvbandwidth_copy['testcase']} " \
             f"({nvbandwidth_copy['source']})".replace("  ", " ")
    if status == "incomplete":
        # a test that died or was cut mid-matrix: a cell it measured below the floor fails; else never passed
        check = check_copy(kind, gpu_profile.copy_thresholds()[kind], nvbandwidth_copy["rows"], peak_of, source)
        if check.verdict != "failed":
            not_checked(not_whole)
        check.message += f" ({not_whole}: a cell it measured is already below the floor)"
        gpufabric_check(check)
        return
    gpufabric_check(check_copy(kind, gpu_profile.copy_thresholds()[kind], nvbandwidth_copy["rows"], peak_of, source,
                               gpu_count=gpu_profile.gpu_count))
