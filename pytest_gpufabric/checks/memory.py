"""Memory checks: the estimate predicts fit or out-of-memory and the peak, an oversized batch fails cleanly and
the device recovers, large-model support completes it at a known cost and changes no result."""

from __future__ import annotations

import math

from ..units import format_bytes, is_number, parse_bytes
from .limits import LOWER, Limit, figure
from .result import CheckResult, failed, passed, unknown

#: a time per image agrees with its step's seconds / batch within this share (they are one division apart)
_SAME_TIME = 1e-3


def _same_gpu(a: object, b: object) -> bool:
    """Two names of one GPU model ('NVIDIA H200' as CUDA and NVML name it; a profile's 'H200')."""
    a, b = str(a or "").strip().lower(), str(b or "").strip().lower()
    return bool(a and b) and (a == b or a in b or b in a)


def _step_time_problem(step: dict, what: str) -> str | None:
    """A step whose time per image is not its seconds / batch: the record contradicts itself."""
    seconds, batch, per_image = step.get("seconds"), step.get("batch"), step.get("time_per_image_s")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in (seconds, batch, per_image)) or not batch:
        return None  # not all there: typed reading says what is missing
    if abs(per_image - seconds / batch) > _SAME_TIME * max(per_image, seconds / batch):
        return (f"{what}: time_per_image_s = {per_image!r}, but {seconds!r} s for a batch of {batch} is "
                f"{seconds / batch!r} s per image: the record contradicts itself")
    return None


def memory_evidence(section: dict, result: dict, machine_gpus: list, promised_model: str | None) -> list[str]:
    """Why the memory suite's record (memory.json, or the live result) cannot be judged against the profile's
    ``memory`` section on this machine: what its typed reading found (formats/records.py); a run of another
    budget, input, mode, baseline batch, probe batches or model than promised (each named, the record's and the
    profile's); a board this machine does not have (serial, UUID, where the record names them) or another GPU
    model than the machine's (else than the profile's, where the bundle records no GPUs); batches and times that
    contradict each other. ``machine_gpus``: the machine's fabric.Gpu list (empty where none is recorded)."""
    reasons = list(result.problems_of()) if hasattr(result, "problems_of") else []
    if reasons:
        return reasons
    name = "memory.json"
    budget = parse_bytes(section["budget"])
    if result.get("budget_bytes") != budget:
        recorded = result.get("budget_bytes")
        reasons.append(f"{name}: budget_bytes = {recorded!r} ({format_bytes(recorded)}), the profile promises a "
                       f"{format_bytes(budget)} budget")
    if list(result.get("input") or []) != list(section["input"]):
        reasons.append(f"{name}: input = {result.get('input')!r} (a batch of {(result.get('input') or ['?'])[0]}), the "
                       f"profile promises {list(section['input'])} (a batch of {section['input'][0]})")
    promised = {"mode": section.get("mode", "train"), "fit_batch": section.get("fit_batch", 1)}
    for key, value in promised.items():
        if result.get(key) != value:
            reasons.append(f"{name}: {key} = {result.get(key)!r}, the profile promises {value!r}")
    probes = [p.get("batch") for p in result.get("probes") or []]
    promised_probes = section.get("probe_batches", [2, 4, 8])
    if probes != list(promised_probes):
        reasons.append(f"{name}: probe batches {probes}, the profile promises {list(promised_probes)}")
    if section.get("model", "auto") != "auto" and result.get("model") != section["model"]:
        reasons.append(f"{name}: model = {result.get('model')!r}, the profile promises {section['model']!r}")
    reasons += _memory_board(result, machine_gpus, promised_model)
    baseline = result.get("baseline") or {}
    if baseline.get("batch") != result.get("fit_batch"):
        reasons.append(f"{name}: the baseline ran batch {baseline.get('batch')!r}, its fit_batch is "
                       f"{result.get('fit_batch')!r}: the record contradicts itself")
    oversized = (result.get("oversized") or {}).get("batch")
    if result.get("input") and oversized != result["input"][0]:
        reasons.append(f"{name}: the oversized batch was {oversized!r}, its input batch {result['input'][0]!r}: the "
                       "record contradicts itself")
    for run in result.get("lms") or []:
        if run.get("outcome") == "completed" and result.get("input") and run.get("batch") != result["input"][0]:
            reasons.append(f"{name}: the offload run >= {run.get('threshold_bytes')} B ran batch {run.get('batch')!r}, "
                           f"its input batch is {result['input'][0]!r}: the record contradicts itself")
    why = _step_time_problem(baseline, f"{name}: baseline")
    return [*reasons, why] if why else reasons


def _memory_board(result: dict, machine_gpus: list, promised_model: str | None) -> list[str]:
    name = "memory.json"
    board = result.get("board") or {}
    device = result.get("device") or board.get("name")
    if board and machine_gpus and any(getattr(g, "serial", None) or getattr(g, "uuid", None) for g in machine_gpus):
        ours = next((g for g in machine_gpus if (board.get("serial") and g.serial == board.get("serial"))
                     or (board.get("uuid") and g.uuid == board.get("uuid"))), None)
        if ours is None:
            return [f"{name} was recorded on serial {board.get('serial')} ({board.get('uuid')}): this machine has no "
                    f"such board (its GPUs: {', '.join(f'serial {g.serial}' for g in machine_gpus)})"]
        mismatch = [key for key in ("serial", "uuid") if getattr(ours, key) and board.get(key) != getattr(ours, key)]
        if mismatch:
            return [f"{name}: board {board}: its {' and '.join(mismatch)} disagree with this machine's "
                    f"{ours.label} ({ours.serial}, {ours.uuid}): the record contradicts the machine"]
    if not device:
        return [f"{name} does not say which GPU it ran on (device)"]
    names = sorted({g.name for g in machine_gpus if getattr(g, "name", None)})
    if names and not any(_same_gpu(device, n) for n in names):
        return [f"{name} was recorded on a {device}; this machine's GPUs are {', '.join(names)}"]
    if not names and promised_model and not _same_gpu(device, promised_model):
        return [f"{name} was recorded on a {device}; the profile promises a {promised_model}"]
    return []


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


def estimate_limits(record: dict) -> list[Limit]:
    """The estimate's worst relative error over the batches that fitted against the tolerance, in percent."""
    tolerance, found = record.get("expected"), record.get("found")
    if not is_number(tolerance) or not isinstance(found, dict) or not isinstance(found.get("rows"), list):
        return []
    errors = [abs(r["error"]) for r in found["rows"] if isinstance(r, dict) and is_number(r.get("error"))]
    if not errors:
        return []
    return [Limit("error", max(errors) * 100, tolerance * 100, "%", LOWER, stated=f"max {tolerance:.0%}")]


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
    # the slowdown from the record's own times, never its stored ratio
    per_image, base = run.get("time_per_image_s"), baseline.get("time_per_image_s")
    contradiction = _step_time_problem(run, f"memory.json: offload >= {threshold} B")
    if contradiction:
        return unknown("memory-lms", subject, spec, contradiction)
    if not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in (per_image, base)):
        return unknown("memory-lms", subject, spec, f"memory.json: time per image {per_image!r} with offload, "
                       f"{base!r} at the baseline: the slowdown cannot be computed")
    ratio = per_image / base
    stored = run.get("ratio_vs_baseline")
    ignored = (f" (the record's own ratio_vs_baseline, {stored:.2f}x, is not its times': not used)"
               if isinstance(stored, (int, float)) and abs(stored - ratio) > 0.005 * ratio else "")
    summary = (f"{subject}: batch {run['batch']} completed, {run['time_per_image_s'] * 1e3:.1f} ms per image vs "
               f"{baseline['time_per_image_s'] * 1e3:.1f} ms at batch {baseline['batch']} ({ratio:.2f}x), peak "
               f"{format_bytes(run['peak_bytes'])}, {run['offloaded_tensors']} tensors "
               f"({format_bytes(run['offloaded_bytes'])}) through host memory")
    limit = spec.get("max_slowdown")
    if limit is not None and ratio > limit:
        return failed("memory-lms", subject, spec, run, f"{summary}{ignored}: slower than the {limit}x allowed. Usual "
                      "causes: a slow CPU-GPU link (PCIe gen or width, or the far NUMA node), or pinned memory "
                      "that could not be allocated. The ratio also rises when the batch-1 step alone runs fast "
                      "(one short step, which moves from run to run: docs/margins.md): compare the time per image "
                      "with offload against earlier runs.")
    return passed("memory-lms", subject, spec, run, summary)


def lms_limits(record: dict) -> list[Limit]:
    """The time per image with offload, and its ratio to batch 1's against ``max_slowdown``: the fleet compares
    both."""
    spec, found = record.get("expected"), record.get("found")
    if not isinstance(spec, dict) or not isinstance(found, dict):
        return []
    limits = []
    if is_number(found.get("time_per_image_s")):
        limits.append(Limit("time_per_image_s", found["time_per_image_s"], None, "s", LOWER, fleet=True))
    if is_number(found.get("ratio_vs_baseline")):
        ceiling = spec.get("max_slowdown")
        bounds = [(ceiling, f"max {ceiling:g}x")] if is_number(ceiling) else []
        limits += figure("ratio_vs_baseline", found["ratio_vs_baseline"], bounds, "x", LOWER, of="batch 1",
                         fleet=True)
    return limits


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
