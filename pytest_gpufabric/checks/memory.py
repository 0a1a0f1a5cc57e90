"""Memory checks: the estimate predicts fit or out-of-memory and the peak, an oversized batch fails cleanly and
the device recovers, large-model support completes it at a known cost and changes no result."""

from __future__ import annotations

from ..units import format_bytes, parse_bytes
from .result import CheckResult, failed, passed, unknown


def predicted_peak_bytes(estimate: dict, batch: int, train: bool) -> int:
    """Weights (and their gradients when training), plus per image every activation tensor (forward hooks and
    autograd's saved tensors, each storage once) and, while backward runs, the gradient of the largest one."""
    per_image = estimate["union_bytes_per_image"] + (estimate["largest_activation_bytes_per_image"] if train else 0)
    return estimate["param_bytes"] * (2 if train else 1) + batch * per_image


def check_estimate(section: dict, result: dict) -> CheckResult:
    """The prediction of fit vs OOM matches every batch that ran, and the predicted peak is within the
    tolerance of the measured one at every batch that fitted."""
    train = result["mode"] == "train"
    budget = result["budget_bytes"]
    estimate = result["estimate"]
    tolerance = section.get("estimate_tolerance", 0.1)
    subject = f"{result['model']} {result['mode']} at {result['input'][2]}x{result['input'][3]}"
    runs = [{"batch": result["fit_batch"], "outcome": "fit", "peak_bytes": result["baseline"]["peak_bytes"]},
            *result.get("probes", []), {"batch": result["input"][0], "outcome": result["oversized"]["outcome"]}]
    problems, rows = [], []
    for run in runs:
        predicted = predicted_peak_bytes(estimate, run["batch"], train)
        predicted_outcome = "oom" if predicted > budget else "fit"
        rows.append({"batch": run["batch"], "predicted_bytes": predicted, "predicted": predicted_outcome,
                     "outcome": run["outcome"], "measured_peak_bytes": run.get("peak_bytes")})
        if predicted_outcome != run["outcome"]:
            problems.append(f"batch {run['batch']}: predicted {predicted_outcome} ({format_bytes(predicted)} of "
                            f"{format_bytes(budget)}), it was {run['outcome']}")
    fitted = [r for r in rows if r["measured_peak_bytes"]]
    if not fitted:
        return unknown("memory-estimate", subject, tolerance, "no batch fitted: the peak cannot be compared")
    for row in fitted:
        row["error"] = row["predicted_bytes"] / row["measured_peak_bytes"] - 1
        if abs(row["error"]) > tolerance:
            problems.append(f"at batch {row['batch']} the predicted peak {format_bytes(row['predicted_bytes'])} is "
                            f"{row['error']:+.1%} off the measured {format_bytes(row['measured_peak_bytes'])} "
                            f"(tolerance {tolerance:.0%})")
    found = {"rows": rows, "activation_bytes_per_image": estimate["activation_bytes_per_image"]}
    errors = ", ".join(f"{r['error']:+.1%} at batch {r['batch']}" for r in fitted)
    summary = (f"{subject}: {format_bytes(estimate['activation_bytes_per_image'])} of activations per image by "
               f"forward hooks ({format_bytes(estimate['union_bytes_per_image'])} with autograd's saved tensors); "
               f"predicted vs measured peak {errors}")
    if problems:
        return failed("memory-estimate", subject, tolerance, found, f"{summary}: " + "; ".join(problems),
                      details=problems)
    return passed("memory-estimate", subject, tolerance, found, summary + "; every fit/OOM predicted")


def check_oom_clean(section: dict, result: dict) -> CheckResult:
    over = result["oversized"]
    expect = section.get("expect", "oom")
    subject = f"batch {over['batch']} without offload in {format_bytes(result['budget_bytes'])}"
    problems = []
    if over["outcome"] != expect:
        problems.append(f"expected {expect}, it was {over['outcome']}")
    if not over.get("recovered"):
        problems.append(f"memory did not return to its baseline: {format_bytes(over['allocated_after_bytes'])} "
                        f"allocated after, {format_bytes(over['baseline_allocated_bytes'])} before")
    healthy = over.get("healthy_after", {})
    if not healthy.get("ok"):
        problems.append(f"a batch of {healthy.get('batch')} failed afterwards: {healthy.get('error')}")
    summary = (f"{subject}: {over['outcome']}"
               + (f" ({over['error']})" if over.get("error") else "")
               + f"; allocated {format_bytes(over['allocated_after_bytes'])} after vs "
               f"{format_bytes(over['baseline_allocated_bytes'])} before; batch {healthy.get('batch')} ran after")
    if problems:
        return failed("memory-oom", subject, expect, over, f"{summary}: " + "; ".join(problems), details=problems)
    return passed("memory-oom", subject, expect, over, summary)


def check_lms(spec: dict, run: dict | None, baseline: dict) -> CheckResult:
    threshold = parse_bytes(spec["threshold"])
    subject = f"offload >= {format_bytes(threshold)} past {spec.get('usage_fraction', 0):.0%} of the budget"
    if run is None:
        return unknown("memory-lms", subject, spec, "the recording has no run with these settings")
    if run["outcome"] != "completed":
        return failed("memory-lms", subject, spec, run, f"{subject}: the oversized batch did not complete: "
                      f"{run.get('error')} (offloaded {run['offloaded_tensors']} tensors, "
                      f"{format_bytes(run['offloaded_bytes'])}). Usual causes: a threshold above the tensors that "
                      "fill the card, or a usage fraction reached too late.")
    ratio = run["ratio_vs_baseline"]
    summary = (f"{subject}: batch {run['batch']} completed, {run['time_per_image_s'] * 1e3:.1f} ms per image vs "
               f"{baseline['time_per_image_s'] * 1e3:.1f} ms at batch {baseline['batch']} ({ratio:.2f}x), peak "
               f"{format_bytes(run['peak_bytes'])}, {run['offloaded_tensors']} tensors "
               f"({format_bytes(run['offloaded_bytes'])}) through host memory")
    limit = spec.get("max_slowdown")
    if limit is not None and ratio > limit:
        return failed("memory-lms", subject, spec, run, f"{summary}: slower than the {limit}x allowed. Usual "
                      "causes: a slow CPU-GPU link (PCIe gen or width, or the far NUMA node), or pinned memory "
                      "that could not be allocated. The ratio also rises when the batch-1 step alone runs fast "
                      "(one short step, which moves from run to run: docs/margins.md): compare the time per image "
                      "with offload against earlier runs.")
    return passed("memory-lms", subject, spec, run, summary)


def check_lms_equality(result: dict) -> CheckResult:
    eq = result.get("equality")
    if eq is None:
        return unknown("memory-lms-equality", "offload", None, "the recording has no equality run")
    subject = f"batch {eq['batch']} with and without offload"
    tolerance = 1e-5 * max(eq["max_grad_abs"], 1e-30)
    ok = eq["loss_equal"] and eq["max_grad_abs_diff"] <= tolerance
    summary = (f"{subject}: loss {eq['loss_without']:.6f} vs {eq['loss_with']:.6f}, largest gradient difference "
               f"{eq['max_grad_abs_diff']:.3g} (largest gradient {eq['max_grad_abs']:.3g}), "
               f"{eq['offloaded_tensors']} tensors offloaded")
    if ok:
        return passed("memory-lms-equality", subject, {"loss_equal": True, "grad_rtol": 1e-5}, eq, summary)
    return failed("memory-lms-equality", subject, {"loss_equal": True, "grad_rtol": 1e-5}, eq,
                  f"{summary}: offload changed the result: a tensor came back different (a host buffer reused "
                  "before its copy finished?)")
