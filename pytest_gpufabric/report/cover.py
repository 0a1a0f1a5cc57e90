"""The report's cover: the verdict and its reason, the customer, the system, the evidence and when it was measured,
the profile, the operator, the tool, every GPU's identity, the signature, and the open promises a signer reads
first, each with why in full and what to do next.
"""

from __future__ import annotations

from pathlib import Path

from ..verdict import verdict_words
from .cells import _cell, _relative_paths, _text, _when
from .grouped import grouped
from .promise_rows import RESULTS_LABEL, _checks_by_test, remedy_text, whole_reason
from .provenance import bundle_name, display_path

VERDICT_CSS = {"ACCEPTED": "accepted", "REJECTED": "rejected", "INCOMPLETE": "incomplete",
                "NOT TESTED": "not-tested"}


def _system_text(document: dict) -> str:
    system = document.get("system") or {}
    machine = document.get("machine") or {}
    host = system.get("hostname") or machine.get("hostname")
    parts = [f"host {host}" if host else "hostname not recorded"]
    dmi = system.get("dmi") or {}
    product = " ".join(v for v in (dmi.get("sys_vendor"), dmi.get("product_name")) if v)
    if product:
        parts.append(product)
    serials = [f"{label} {dmi[key]}" for key, label in (("product_serial", "system serial"),
                                                        ("chassis_serial", "chassis serial"),
                                                        ("board_serial", "board serial")) if dmi.get(key)]
    serials += [f"chassis serial {s} (per nvidia-smi)" for s in system.get("gpu_chassis_serials") or []
                if s != dmi.get("chassis_serial")]
    if serials:
        parts += serials
    elif system:
        live = (document.get("evidence") or {}).get("kind") == "live"
        parts.append("DMI serials not readable here (root reads /sys/class/dmi/id)" if live
                     else "DMI serials not recorded by this bundle")
    return "; ".join(parts)


def _evidence_text(document: dict) -> tuple[str, str | None, str | None]:
    """(evidence, measured, judged) as the cover says them."""
    evidence = document.get("evidence") or {}
    run = document.get("run") or {}
    if evidence.get("kind") == "replay" or run.get("mode") == "replay":
        name = evidence.get("bundle") or bundle_name(run.get("replay"), None) or "a bundle"
        on = f", recorded on host {evidence['measured_on']}" if evidence.get("measured_on") else ""
        measured = _when(evidence.get("measured_at")) or "not recorded by the bundle (no manifest.json)"
        return (f"replay of bundle {name}{on} (judged here, not measured on this host)", measured,
                _when(evidence.get("judged_at") or document.get("finished_at")) or "not finished")
    machine = document.get("machine") or {}
    source = machine.get("source") or "NVML"
    return f"live: this machine, read through {source}", _when(evidence.get("measured_at")
                                                                or document.get("started_at")), None


def _gpus(machine: dict) -> tuple[dict | None, str]:
    gpus = machine.get("gpus") or []
    identity = ("name", "serial", "uuid", "vbios_version", "pci_bus_id")
    if gpus and all(g.get(k) is None for g in gpus for k in identity):
        return None, f"{len(gpus)} GPU(s); their serials, UUIDs and VBIOS versions are not recorded by this evidence."
    if not gpus:
        return None, ""
    rows = [[f"GPU{g.get('index')}", _text(g.get("name")), _text(g.get("serial")), _text(g.get("uuid")),
             _text(g.get("vbios_version")), _text(g.get("pci_bus_id"))] for g in gpus]
    return {"header": ["GPU", "Model", "Serial", "UUID", "VBIOS", "PCI bus id"], "rows": rows}, ""


def _open_promises(document: dict, base: Path | None = None) -> list[list]:
    """Every promise that failed, was not checked or was waived, with why in full and what to do next: what a
    customer must read first, failures first; a cause that several promises share is one row (grouped.py), as on the
    terminal: seven missing GPUs are one row naming them, not 46."""
    by_test = _checks_by_test(document)
    promises = document.get("promises") or []

    def row(p: dict) -> list:
        return [p["id"], _cell(*RESULTS_LABEL.get(p["outcome"], (p["outcome"], ""))),
                _relative_paths(whole_reason(p, [c for t in p.get("tests") or [] for c in by_test.get(t, [])]), base),
                _cell(remedy_text(p, base) or "—", "remedy")]

    rows = []
    groups = grouped(promises)
    for group in groups:
        first = group["first"]
        if len(group["ids"]) == 1:
            rows.append(row(first))
            continue
        why = f"{group['text']}\nThe {len(group['ids'])} promises: {', '.join(group['ids'])}"
        result = _cell(*RESULTS_LABEL.get(first["outcome"], (first["outcome"], "")))
        rows.append([f"{len(group['ids'])} promises", result, _relative_paths(why, base),
                     _cell(remedy_text(first, base) or "—", "remedy")])
    failed = sum(1 for group in groups if group["outcome"] == "failed")
    rows += [row(p) for p in promises if p.get("outcome") not in ("passed", "failed", "not checked")]
    by_id = {p.get("id"): p for p in promises}
    not_run = [[f"{pid} (not run)", _cell("not checked", "unknown"), why,
                _cell(remedy_text(by_id.get(pid), base) or "—", "remedy")]
               for pid, why in (document.get("not_run") or {}).items()]
    return rows[:failed] + not_run + rows[failed:] if not_run else rows


def _signature_text(document: dict) -> str:
    block = document.get("integrity") or {}
    signature = block.get("signature")
    if isinstance(signature, dict):
        return (f"signed with Ed25519 key {signature.get('key_id')}: `gpufabric verify` this file with the public "
                "key to see that nothing was changed")
    if block:
        return ("not signed (pytest --gpu-sign-key KEY.pem or gpufabric accept --sign-key KEY.pem signs it); digests "
                "on the last page")
    return "none: the run did not finish"


def _replay_banner(document: dict) -> str:
    """On the verdict's banner of a replay: whose machine was judged and when it was measured (the results' evidence
    block), so that a green banner is never read as this machine's."""
    evidence = document.get("evidence") or {}
    run = document.get("run") or {}
    if evidence.get("kind") != "replay" and run.get("mode") != "replay":
        return ""

    name = evidence.get("bundle") or bundle_name(run.get("replay"), None) or "a bundle"
    on = f" on host {evidence['measured_on']}" if evidence.get("measured_on") else ""
    when = _when(evidence.get("measured_at"))
    measured = f"measured {when}{on}" if when else f"measured{on} on a date the bundle does not record"
    return f"Replay of bundle {name}, {measured}: judged here, not measured on this machine"


def cover_data(document: dict, customer: str | None, nccl: list[str], base: Path | None = None) -> dict:
    summary = document.get("summary") or {}
    verdict = summary.get("verdict")
    tally = summary.get("promises") or {}
    counts = ", ".join(f"{tally[k]} {k.replace('_', ' ')}" for k in ("passed", "failed", "not_checked", "waived")
                       if tally.get(k))
    profile = document.get("profile") or {}
    machine = document.get("machine") or {}
    run = document.get("run") or {}
    evidence, measured, judged = _evidence_text(document)
    operator = run.get("operator") or run.get("user")
    facts = [
        ("Customer", customer or "not named (--gpu-customer NAME)"),
        ("System", _system_text(document) if machine or document.get("system")
         else f"not read: {document.get('machine_error') or 'unknown error'}"),
        ("Evidence", evidence),
        ("Measured", measured or "not recorded"),
    ]
    if judged:
        facts.append(("Judged", judged))
    facts += [
        ("Profile", f"{profile['name']} ({display_path(profile.get('path'), base)})" if profile
         else "none: nothing was promised"),
        ("Profile sha256", _cell(profile.get("sha256") or "—", "digest")),
        ("NVIDIA driver", _text(machine.get("driver_version"))),
        ("CUDA driver", _text(machine.get("cuda_driver_version"))),
        ("NCCL", ", ".join(nccl) if nccl else "not measured in this run"),
        ("Operator", (operator or "not recorded") + (f", on host {run['host']}" if run.get("host") else "")),
        ("Tool", f"pytest-gpufabric {_text(document.get('plugin_version'))}"),
        ("Signature", _signature_text(document)),
    ]
    gpus, gpus_note = _gpus(machine)
    waivers = [[w["promise"], w["reason"], w["source"], ", ".join(w.get("matched") or []) or "none"]
               for w in document.get("waivers") or []]
    return {"title": "GPU server acceptance" + (f": {customer}" if customer else ""),
            "verdict_css": VERDICT_CSS.get(verdict or "", "none"),
            "verdict_text": f"Verdict: {verdict_words(verdict, summary.get('scope') or '')}" if verdict
            else "No verdict",
            "verdict_note": _replay_banner(document),
            "reason": summary.get("verdict_reason") or "", "counts": counts, "facts": facts, "gpus": gpus,
            "gpus_note": gpus_note, "open_promises": _open_promises(document, base), "waivers": waivers,
            "customer": customer, "sign": bool(verdict)}
