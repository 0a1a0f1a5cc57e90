"""`gpufabric fleet rack`: an NVL72 rack accepted as a fleet of its compute trays plus the rack's own promises.

A GB200/GB300 NVL72 rack is 18 compute trays of 4 GPUs whose 72 GPUs share one NVLink domain through the rack's
NVLink switch trays. Each tray is a node of the fleet (its own acceptance: `gpufabric fleet report`'s
fleet-results.json, given with --fleet); the rack adds what no tray can show alone:

- ``rack-trays``: every expected tray reported, each with its GPUs (--trays, --gpus-per-tray, --expect), and its
  evidence its own: no board in two tray folders, no linked folder, no bundle of another tray's host, no two
  readings in one folder that disagree, and where the folder has a manifest.json no reading it does not list, lists
  without its sha256 or as not written, or whose sha256 differs (failed); a reading the reader could not read
  whole, or a malformed manifest, is not checked;
- ``rack-fabric-registration``: every GPU's fabric state Completed and status Success, its health not degraded
  (formats/gpu_fabric.py, the one judgement of a GPU's registration);
- ``rack-nvlink-domain``: one cluster UUID and one clique id across the rack's GPUs (a tray the fabric manager left
  out of the partition reports another clique, or clique 0 with an all-zero UUID);
- ``rack-trays-accepted``: each tray ACCEPTED, once, in fleet results that are a whole verdict (their own verdict,
  integrity block, no duplicate hosts; not checked without --fleet);
- ``rack-all-reduce``: the file's last run an all_reduce, no wrong values, its own rank count the rack's, at least
  --min-busbw at its largest size (a device list cut short leaves the count unknown); a run whose device lines
  name another GPU model, host or bus id than the trays', or another rank count per host, is not checked;
- ``rack-imex``: the IMEX domain UP, one READY node per tray, every pair connected, each node one tray by its
  recorded IP addresses or hostname (`nvidia-imex-ctl -N` saved on one tray, --imex; fleet/rack_imex.py).

Each tray is a folder of RACKDIR named after the tray, holding a bundle (`gpufabric snapshot`: nvml.json and/or
nvidia-smi-q.xml) or a saved `nvidia-smi -q` text (nvidia-smi-q.txt). A failed promise names the tray and GPU; the
verdict is REJECTED when one failed, INCOMPLETE when one is not checked, else ACCEPTED (docs/verdict.md's rule).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GpuFabricError
from ..formats.gpu import Gpu
from ..formats.gpu_fabric import rack_fabric_problems
from ..units import NA, parse_gbps
from ..verdict import EXIT_CODES
from .hostlist import expand_hostlist
from .rack_imex import imex_promise

__all__ = ["all_reduce_run", "judge_rack", "read_trays", "register_rack"]

FORMAT = "gpufabric-rack-result/1"
SMI_Q_TEXT = "nvidia-smi-q.txt"
PASSED, FAILED, NOT_CHECKED = "passed", "failed", "not checked"
_EXIT_USAGE = 4


@dataclass
class Tray:
    """One compute tray as its folder recorded it: its GPUs (with their fabric registration), or why none."""

    name: str
    gpus: list[Gpu] = field(default_factory=list)
    source: str = ""
    unreadable: str | None = None
    hostname: str | None = None  # the host the bundle was recorded on, where it says
    #: what the folder's evidence contradicts (a link to another folder, two files that disagree): never a pass
    contradictions: list[str] = field(default_factory=list)
    #: what the reader could not tell from the evidence (its ``unknown`` sentences): not checked
    unknown: list[str] = field(default_factory=list)
    #: the host's own IP addresses that name it alone (fabric/host_addresses.py), tied to its bundle; None where
    #: not recorded or not tied (``addresses_why``); ``address_families``: the IP versions they were recorded for
    addresses: list[str] | None = None
    addresses_why: str | None = None
    address_families: tuple[int, ...] = ()
    recorded_at: str | None = None  # the bundle's manifest.json recorded_at, where it has one


def read_trays(rack: Path) -> list[Tray]:
    """Every tray folder of ``rack``, by name: a bundle (nvml.json / nvidia-smi-q.xml) or nvidia-smi-q.txt."""
    from ..fabric.bundle import KNOWN_FILES, BundleError, load_bundle
    from ..fabric.host_addresses import ADDRESS_FILES, not_as_recorded, read_host_addresses, tie_to_bundle

    if not rack.is_dir():
        raise GpuFabricError(f"{rack}: not a folder of tray folders")
    trays = []
    for folder in sorted((p for p in rack.iterdir() if p.is_dir()), key=lambda p: _natural(p.name)):
        tray = Tray(name=folder.name)
        text = folder / SMI_Q_TEXT
        evidence = [folder / name for name in ("nvml.json", "nvidia-smi-q.xml", SMI_Q_TEXT)]
        links = [path for path in (folder, *evidence, *(folder / n for n in ADDRESS_FILES)) if path.is_symlink()]
        if links:
            tray.contradictions.append(f"{links[0].name} is a link to {links[0].resolve()}: not the tray's own "
                                       "evidence")
        try:
            if evidence[0].is_file() or evidence[1].is_file():
                bundle = load_bundle(folder)
                tray.gpus, tray.source, tray.hostname = bundle.gpus, "bundle", bundle.hostname
                if text.is_file():  # a second reading of the same tray: both must say the same
                    tray.contradictions += _disagreements(tray.gpus, _read_text(text, tray))
            elif text.is_file():
                tray.gpus, tray.source = _read_text(text, tray), SMI_Q_TEXT
            else:
                tray.unreadable = f"no nvml.json, nvidia-smi-q.xml or {SMI_Q_TEXT} in {folder}"
        except (BundleError, ValueError, OSError) as exc:
            tray.unreadable = str(exc)
        # each reading read must be its manifest's (listed, written, its sha256): else not the tray's recording
        read = (*KNOWN_FILES, SMI_Q_TEXT) if evidence[0].is_file() or evidence[1].is_file() else (SMI_Q_TEXT,)
        not_recorded, undecided = not_as_recorded(folder, read)
        tray.contradictions += not_recorded
        tray.unknown += undecided
        recorded = read_host_addresses(folder)
        untied, tray.recorded_at = tie_to_bundle(folder, recorded, tray.hostname)
        if recorded.addresses is not None and untied is not None:
            tray.addresses_why = f"{recorded.source} not tied to the tray's bundle: {untied}"
        else:
            tray.addresses, tray.addresses_why = recorded.addresses, recorded.why
            tray.address_families = recorded.families
        trays.append(tray)
    return trays


def _read_text(path: Path, tray: Tray) -> list[Gpu]:
    """The GPUs of a saved `nvidia-smi -q`; what the reader could not tell goes to the tray's ``unknown``."""
    from ..formats.nvidia_smi_text import parse_smi_q

    parsed = parse_smi_q(path.read_text(encoding="utf-8", errors="replace"))
    tray.unknown += [f"{path.name}: {why}" for why in parsed.unknown]
    return parsed.gpus


def _fabric_facts(gpu: Gpu) -> tuple:
    info = gpu.fabric
    return (None,) * 4 if info is None else (info.state, info.status, info.clique_id, info.cluster_uuid)


def _disagreements(bundle: list[Gpu], text: list[Gpu]) -> list[str]:
    """Where the bundle and the tray's nvidia-smi-q.txt say different things of its GPUs (UUIDs, fabric state,
    status, clique, cluster UUID)."""
    by_uuid = {g.uuid: g for g in text}
    if sorted(map(str, by_uuid)) != sorted(str(g.uuid) for g in bundle):
        return [f"its bundle and {SMI_Q_TEXT} name different GPUs"]
    return [f"its bundle and {SMI_Q_TEXT} disagree on {g.label}'s fabric: {_fabric_facts(g)} vs "
            f"{_fabric_facts(by_uuid[g.uuid])}" for g in bundle if _fabric_facts(g) != _fabric_facts(by_uuid[g.uuid])]


def _natural(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _gpu_words(tray: Tray, gpu: Gpu) -> str:
    uuid = gpu.uuid if isinstance(gpu.uuid, str) and gpu.uuid is not NA else "UUID unknown"
    return f"tray {tray.name} {gpu.label} ({uuid})"


def judge_rack(trays: list[Tray], *, expected: list[str] | None = None, tray_count: int = 18,
               gpus_per_tray: int = 4, fleet: dict | None = None, all_reduce: dict | None = None,
               min_busbw: float | None = None, imex: dict | None = None) -> dict:
    """The rack's result document: each promise with its outcome and reason, the trays, the verdict."""
    promises = [_trays_promise(trays, expected, tray_count, gpus_per_tray)]
    members = [(_gpu_words(tray, gpu), gpu.fabric) for tray in trays for gpu in tray.gpus]
    read = [(who, info) for who, info in members if info is not None]
    # evidence without the reading, or a reading without a fact the promises need: not checked
    unread = [who for who, info in members if info is None]
    partial = [(who, _lacking(info)) for who, info in read if _lacking(info)]
    own, outside, domain = rack_fabric_problems(read)
    promises.append(_outcome("rack-fabric-registration", own, "every GPU's fabric Completed / Success",
                             unread=unread, nothing=not read, partial=partial))
    if domain is None and read:
        promises.append({"id": "rack-nvlink-domain", "outcome": FAILED,
                         "reason": "no GPU reports a rack cluster UUID and clique (every one all-zero or not "
                                   "supported): the GPUs are in no multi-node NVLink partition"})
    else:
        promises.append(_outcome("rack-nvlink-domain", outside, f"one NVLink domain: {domain}", unread=unread,
                                 nothing=not read, trays_out=_trays_out(trays, outside), partial=partial))
    promises.append(_fleet_promise(trays, fleet, expected, tray_count))
    promises.append(_all_reduce_promise(all_reduce, min_busbw, tray_count * gpus_per_tray, trays, gpus_per_tray))
    promises.append(imex_promise(imex, tray_count, trays, expected))
    outcomes = {p["outcome"] for p in promises}
    verdict = "REJECTED" if FAILED in outcomes else "INCOMPLETE" if NOT_CHECKED in outcomes else "ACCEPTED"
    first = next((p for p in promises if p["outcome"] == FAILED), None) or \
        next((p for p in promises if p["outcome"] == NOT_CHECKED), None)
    return {
        "format": FORMAT, "verdict": verdict,
        "reason": f"{first['id']}: {first['reason']}" if first else "every promise of the rack held",
        "domain": domain, "promises": promises,
        "trays": [{"name": t.name, "source": t.source, "unreadable": t.unreadable, "addresses": t.addresses,
                   "gpus": [{"gpu": g.label, "uuid": _plain(g.uuid), "pci_bus_id": _plain(g.pci_bus_id),
                             "fabric": g.fabric.to_json() if g.fabric is not None else None} for g in t.gpus]}
                  for t in trays],
    }


def _plain(value):
    return "N/A" if value is NA else value


def _lacking(info) -> str:
    """The facts a registered GPU's reading must hold that this one lacks ('' when whole or Not Supported)."""
    if info.state is NA:
        return ""
    facts = (("state", info.state), ("status", info.status), ("clique id", info.clique_id),
             ("cluster UUID", info.cluster_uuid))
    return ", ".join(name for name, value in facts if value is None)


def _outcome(promise: str, problems: list[tuple[str, str]], held: str, *, unread: list[str], nothing: bool,
             trays_out: list[str] | None = None, partial: list[tuple[str, str]] | None = None) -> dict:
    if problems:
        named = "; ".join(f"{who}: {why}" for who, why in problems[:8])
        more = f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""
        lead = f"tray{'s' if len(trays_out) > 1 else ''} {', '.join(trays_out)} out of the rack's NVLink domain: " \
            if trays_out else ""
        return {"id": promise, "outcome": FAILED, "reason": lead + named + more,
                "gpus": [who for who, _ in problems]}
    if nothing:
        return {"id": promise, "outcome": NOT_CHECKED, "reason": "no GPU's fabric reading in the trays' evidence"}
    if unread or partial:
        said = []
        if unread:
            more = f" (+{len(unread) - 4} more)" if len(unread) > 4 else ""
            said.append(f"no fabric reading for {', '.join(unread[:4])}{more}")
        if partial:
            more = f" (+{len(partial) - 4} more)" if len(partial) > 4 else ""
            said.append("a fabric reading without " + "; ".join(f"{why} for {who}" for who, why in partial[:4])
                        + more)
        return {"id": promise, "outcome": NOT_CHECKED, "reason": "; ".join(said)}
    return {"id": promise, "outcome": PASSED, "reason": held}


def _trays_out(trays: list[Tray], outside: list[tuple[str, str]]) -> list[str]:
    """The trays every one of whose GPUs is outside the rack's domain: the tray is out, not one GPU."""
    named = {who for who, _ in outside}
    return [t.name for t in trays if t.gpus and all(_gpu_words(t, g) in named for g in t.gpus)]


def _trays_promise(trays: list[Tray], expected: list[str] | None, tray_count: int, gpus_per_tray: int) -> dict:
    names = [t.name for t in trays]
    failed, unknown = [], []
    if expected is not None:
        if len(expected) != tray_count:
            unknown.append(f"--expect names {len(expected)} trays, the rack has {tray_count}")
        unknown += [f"tray {name} did not report" for name in expected if name not in names]
        failed += [f"tray {name} is not one of the rack's (--expect)" for name in names if name not in expected]
    elif len(trays) < tray_count:
        unknown.append(f"{len(trays)} tray folders of {tray_count}: {tray_count - len(trays)} did not report")
    elif len(trays) > tray_count:
        failed.append(f"{len(trays)} tray folders, the rack has {tray_count}")
    for tray in trays:
        failed += [f"tray {tray.name}: {why}" for why in tray.contradictions]
        if tray.hostname and tray.hostname != tray.name and tray.hostname in names:
            failed.append(f"tray {tray.name}'s bundle was recorded on {tray.hostname}, another tray of the rack")
        if tray.unreadable:
            unknown.append(f"tray {tray.name}: {tray.unreadable}")
        elif len(tray.gpus) != gpus_per_tray:
            failed.append(f"tray {tray.name} has {len(tray.gpus)} GPUs, a tray has {gpus_per_tray}")
        unknown += [f"tray {tray.name}: {why}" for why in tray.unknown]
    failed += _same_boards(trays)
    if failed:
        return {"id": "rack-trays", "outcome": FAILED, "reason": "; ".join(failed + unknown)}
    if unknown:
        return {"id": "rack-trays", "outcome": NOT_CHECKED, "reason": "; ".join(unknown)}
    return {"id": "rack-trays", "outcome": PASSED,
            "reason": f"{len(trays)} trays of {gpus_per_tray} GPUs"}


def _same_boards(trays: list[Tray]) -> list[str]:
    """GPU UUIDs or serials found in two tray folders: one board cannot sit in two trays (a copied bundle)."""
    seen: dict[tuple[str, str], str] = {}
    found = []
    for tray in trays:
        for gpu in tray.gpus:
            for what, value in (("UUID", gpu.uuid), ("serial", gpu.serial)):
                if not isinstance(value, str) or value is NA or not value.strip():
                    continue
                other = seen.setdefault((what, value), tray.name)
                if other != tray.name:
                    found.append(f"GPU {what} {value} in tray {other} and tray {tray.name}: the same board twice")
    return found


def _fleet_promise(trays: list[Tray], fleet: dict | None, expected: list[str] | None, tray_count: int) -> dict:
    """Each tray ACCEPTED in a fleet-results.json that is itself a whole verdict of these trays: its own verdict,
    its integrity block, no host twice, one entry per tray and none of another rack."""
    if fleet is None:
        return {"id": "rack-trays-accepted", "outcome": NOT_CHECKED,
                "reason": "the trays' own acceptance was not given (--fleet fleet-results.json)"}
    failed, unknown = _fleet_document_problems(fleet)
    names = expected if expected is not None else [t.name for t in trays]
    if len(names) != tray_count:
        unknown.append(f"{len(names)} trays to look up, the rack has {tray_count}")
    entries: dict[str, list[dict]] = {}
    for node in fleet["nodes"]:
        entries.setdefault(node["name"], []).append(node)
    for name, listed in entries.items():
        if len(listed) > 1:
            failed.append(f"tray {name} is listed {len(listed)} times in the fleet results")
        if name not in names:
            unknown.append(f"the fleet results hold {name}, not a tray of this rack")
    for name in names:
        listed = entries.get(name, [])
        if len(listed) > 1:  # failed above: which entry is the tray's cannot be told
            continue
        verdict, reason = (listed[0].get("verdict"), listed[0].get("reason", "")) if listed else \
            (None, "not in the fleet results")
        if verdict == "REJECTED":
            failed.append(f"tray {name} REJECTED: {reason}")
        elif verdict != "ACCEPTED":
            unknown.append(f"tray {name} {verdict or 'without results'}: {reason}")
    if failed:
        return {"id": "rack-trays-accepted", "outcome": FAILED, "reason": "; ".join(failed + unknown)}
    if unknown:
        return {"id": "rack-trays-accepted", "outcome": NOT_CHECKED, "reason": "; ".join(unknown)}
    return {"id": "rack-trays-accepted", "outcome": PASSED, "reason": f"all {len(names)} trays ACCEPTED"}


def _fleet_document_problems(fleet: dict) -> tuple[list[str], list[str]]:
    """What the fleet results say against themselves (failed) and what they leave open (not checked)."""
    from ..report.integrity import INTEGRITY_KEY, verify_document

    failed, unknown = [], []
    verdict = fleet.get("verdict")
    if verdict == "REJECTED":
        failed.append(f"the fleet results' own verdict is REJECTED: {fleet.get('reason', '')}")
    elif verdict != "ACCEPTED":
        unknown.append(f"the fleet results' own verdict is {verdict or 'missing'}")
    hosts = fleet.get("duplicate_hosts")
    if hosts:
        failed.append(f"the fleet results name a host for more than one node: {hosts!r}"[:300])
    if not isinstance(fleet.get(INTEGRITY_KEY), dict):
        unknown.append("the fleet results carry no integrity block (written by `gpufabric fleet report`)")
    else:
        try:
            problems = verify_document(fleet, None, "fleet results", "the fleet results").problems
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a block of the wrong shape
            problems = [f"its integrity block cannot be checked ({type(exc).__name__})"]
        failed += [f"integrity: {why[:200]}{' ...' if len(why) > 200 else ''}" for why in problems]
    return failed, unknown


_RANK_LINE = re.compile(r"^#\s+Rank\s+(\d+)\s", re.MULTILINE)
_CHECK_FAILED = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+FAILED")


def all_reduce_run(text: str) -> dict:
    """The last run of an nccl-tests output, with its own ``ranks`` (the rank count where its device list shows
    ranks 0 to N-1, else None) and ``ranks_at_least`` (one more than its highest rank printed): a list cut short
    leaves the count unknown, never counted from what is visible. ``out_of_bounds_failed``: the data check's
    failed count where the output says `Out of bounds values : N FAILED` (anywhere in the file)."""
    from ..formats.nccl_tests import _RANK, parse_nccl_tests

    runs = parse_nccl_tests(text, "all_reduce")
    run = dict(runs[-1])
    printed = sorted({d["rank"] for d in run.get("devices", [])})
    run["ranks"] = run.get("nranks")
    if not printed and len(runs) == 1:  # device lines pasted above the run's header: the file's one run
        lines = [int(rank) for rank in _RANK_LINE.findall(text)]
        run["devices"] = [{"rank": int(m[1]), "host": m[4], "pci_bus_id": m[6], "name": m[7]}
                          for m in map(_RANK.match, text.splitlines()) if m]
        printed = sorted(set(lines))
        whole = printed == list(range(len(printed))) and len(lines) == len(printed)
        run["ranks"] = len(printed) if printed and whole else None
    run["ranks_at_least"] = printed[-1] + 1 if printed else None
    run["runs_in_file"] = len(runs)
    failed = [int(n) for n in _CHECK_FAILED.findall(text)]
    run["out_of_bounds_failed"] = max(failed) if failed else None
    return run


def _bus(words) -> tuple | None:
    """A PCI bus id as (domain, bus, device): NVML's 00000008:01:00.0 or nccl-tests' 0008:01:00; None for less."""
    parts = str(words or "").split(".")[0].split(":")
    try:
        return tuple(int(part, 16) for part in parts) if len(parts) == 3 else None
    except ValueError:
        return None


def _foreign_ranks(run: dict, trays: list[Tray], gpus_per_tray: int) -> tuple[list[str], list[str]]:
    """Why the run's device lines are not this rack's GPUs (each rank's GPU name the trays' model, the trays' GPUs
    per host, the trays' hosts and bus ids where both sides name them), and what could not be compared."""
    devices = run.get("devices") or []
    models = sorted({g.name for t in trays for g in t.gpus if isinstance(g.name, str) and g.name is not NA})
    foreign, notes = [], []
    if not devices:
        return [], ["it prints no device line to compare with the trays"]
    if models:
        other = [d for d in devices if d.get("name") not in models]
        if other:
            more = f" (+{len(other) - 3} more ranks)" if len(other) > 3 else ""
            foreign.append("; ".join(f"rank {d['rank']} names {d.get('name') or 'no GPU'}" for d in other[:3])
                           + f"{more}, the trays' GPUs are {', '.join(models)}")
    else:
        notes.append("GPU names not compared: the trays' evidence names no GPU model")
    per_host: dict[str, int] = {}
    for d in devices:
        per_host[d["host"]] = per_host.get(d["host"], 0) + 1
    if run.get("ranks") is not None and len(devices) == run["ranks"]:  # a whole device list
        crowded = [f"{host} ran {count}" for host, count in per_host.items() if count != gpus_per_tray]
        if crowded:
            more = f" (+{len(crowded) - 3} more hosts)" if len(crowded) > 3 else ""
            foreign.append(f"ranks per host: {', '.join(crowded[:3])}{more}, a tray has {gpus_per_tray} GPUs")
    by_host = {t.hostname: t for t in trays}
    if not trays or None in by_host or "" in by_host:
        notes.append("hosts and bus ids not compared: a tray's evidence names no host")
        return foreign, notes
    strangers = [host for host in per_host if host not in by_host]
    if strangers:
        more = f" (+{len(strangers) - 3} more)" if len(strangers) > 3 else ""
        foreign.append(f"host{'s' if len(strangers) > 1 else ''} {', '.join(strangers[:3])}{more} "
                       f"{'are' if len(strangers) > 1 else 'is'} no tray's "
                       f"(the trays' hosts: {', '.join(sorted(by_host)[:3])}{' ...' if len(by_host) > 3 else ''})")
    ours = [d for d in devices if d["host"] in by_host]
    if any(_bus(d.get("pci_bus_id")) is None for d in ours):
        said = next(d.get("pci_bus_id") for d in ours if _bus(d.get("pci_bus_id")) is None)
        notes.append(f"bus ids not compared: the device lines print [{said}], not a domain:bus:device")
    else:
        off = [f"rank {d['rank']} [{d['pci_bus_id']}] on {d['host']}" for d in ours
               if _bus(d["pci_bus_id"]) not in {_bus(g.pci_bus_id) for g in by_host[d["host"]].gpus}]
        if off:
            more = f" (+{len(off) - 3} more)" if len(off) > 3 else ""
            foreign.append(f"{'; '.join(off[:3])}{more}: no GPU of that tray has that bus id")
    return foreign, notes


def _all_reduce_promise(run: dict | None, min_busbw: float | None, rack_gpus: int, trays: list[Tray] | None = None,
                        gpus_per_tray: int = 4) -> dict:
    """The rack's all_reduce over every GPU against --min-busbw (out of place, at its largest size); a run whose
    device lines are not the trays' GPUs is no evidence of the rack (not checked)."""
    if run is None or min_busbw is None:
        return {"id": "rack-all-reduce", "outcome": NOT_CHECKED,
                "reason": "no all_reduce over the rack's GPUs given (--all-reduce FILE --min-busbw GB/s)"}
    from ..formats.nccl_tests import row_groups, wrong_count

    if run.get("op") != "all_reduce":
        return {"id": "rack-all-reduce", "outcome": FAILED,
                "reason": f"the output's last run is {run.get('op') or 'of no named test'}, not an all_reduce"}
    foreign, notes = _foreign_ranks(run, trays, gpus_per_tray) if trays is not None else ([], [])
    if foreign:
        return {"id": "rack-all-reduce", "outcome": NOT_CHECKED,
                "reason": "the all_reduce is not a run over the rack's GPUs: " + "; ".join(foreign)}
    noted = "".join(f"; {note}" for note in notes)
    wrong = [(r["size"], label, wrong_count(group)) for r in run.get("rows", []) for label, group in row_groups(r)
             if (wrong_count(group) or 0) > 0]
    if wrong or run.get("out_of_bounds_failed"):
        said = [f"{count} wrong values at {size} B {label}" for size, label, count in wrong[:3]]
        if run.get("out_of_bounds_failed"):
            said.append(f"Out of bounds values : {run['out_of_bounds_failed']} FAILED")
        return {"id": "rack-all-reduce", "outcome": FAILED,
                "reason": "the all_reduce's data check failed: " + "; ".join(said) + noted}
    rows = [r for r in run.get("rows", []) if isinstance((r.get("oop") or {}).get("busbw"), int | float)]
    if not rows:
        return {"id": "rack-all-reduce", "outcome": NOT_CHECKED, "reason": "the all_reduce output has no result row"}
    last = max(rows, key=lambda r: r["size"])
    busbw = last["oop"]["busbw"]
    figure = f"{busbw:g} GB/s busbw at {last['size']} B, floor {min_busbw:g} GB/s"
    ranks, at_least = run.get("ranks"), run.get("ranks_at_least")
    if ranks is not None and ranks != rack_gpus:
        return {"id": "rack-all-reduce", "outcome": FAILED,
                "reason": f"the all_reduce ran over {ranks} ranks, the rack has {rack_gpus} GPUs ({figure}){noted}"}
    if ranks is None:
        count = (f"its device list is cut (ranks printed up to {at_least - 1}: at least {at_least} ranks)"
                 if at_least else "it prints no device list")
        return {"id": "rack-all-reduce", "outcome": NOT_CHECKED,
                "reason": f"the rank count is unknown, {count}, so it cannot show an all_reduce over the rack's "
                          f"{rack_gpus} GPUs ({figure}){noted}"}
    if run.get("unfinished"):
        # the floor is the run's at its largest size: a run that died before it measured no row the floor is for
        return {"id": "rack-all-reduce", "outcome": NOT_CHECKED,
                "reason": f"{run['unfinished']}: the floor is held at the largest size of a whole run, which this run "
                          f"did not reach (all_reduce over {ranks} ranks: {figure}, its last size measured){noted}"}
    return {"id": "rack-all-reduce", "outcome": PASSED if busbw >= min_busbw else FAILED,
            "reason": f"all_reduce over {ranks} ranks: {figure}{noted}"}


# ---------------------------------------------------------------------------------------------------------
# the command


def register_rack(fleet_sub: argparse._SubParsersAction) -> None:
    rack = fleet_sub.add_parser(
        "rack", help="accept an NVL72 rack: its trays plus the rack's NVLink domain",
        description="An NVL72 rack accepted as a fleet of its compute trays plus the rack's promises: every GPU's "
                    "fabric Completed/Success, one cluster UUID and clique across the rack, each tray ACCEPTED in "
                    "the fleet results, the all_reduce over the rack's GPUs (docs/blackwell.md). RACKDIR holds one "
                    "folder per tray, named after it: a bundle (gpufabric snapshot) or nvidia-smi-q.txt.")
    rack.add_argument("rackdir", metavar="RACKDIR", help="one folder per compute tray")
    rack.add_argument("--trays", type=int, default=18, help="compute trays in the rack (default %(default)s)")
    rack.add_argument("--gpus-per-tray", type=int, default=4, help="GPUs per tray (default %(default)s)")
    rack.add_argument("--expect", metavar="HOSTLIST", help="the trays' names in Slurm's hostlist syntax "
                      "(tray[01-18]), as many as --trays: a missing one is named")
    rack.add_argument("--fleet", metavar="FILE", help="the trays' fleet-results.json (`gpufabric fleet report`)")
    rack.add_argument("--all-reduce", metavar="FILE", help="nccl-tests all_reduce_perf output over the rack's GPUs")
    rack.add_argument("--min-busbw", metavar="GB/s", help="the all_reduce busbw floor at its largest size")
    rack.add_argument("--imex", metavar="FILE", help="`nvidia-imex-ctl -N` saved on one tray: the IMEX domain")
    rack.add_argument("--json", action="store_true", help="print the rack result as JSON")
    rack.set_defaults(func=cmd_fleet_rack)


def cmd_fleet_rack(args: argparse.Namespace) -> int:
    """Exit 0 accepted, 1 rejected, 6 incomplete; 4 a usage error (a file that is not what it should be)."""
    try:
        document = _rack_document(args)
    except GpuFabricError as exc:
        print(f"gpufabric fleet rack: {exc}", file=sys.stderr)
        return _EXIT_USAGE
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(f"gpufabric: {document['verdict']} rack {Path(args.rackdir).name}: {document['reason']}")
        for promise in document["promises"]:
            print(f"  {promise['id']}: {promise['outcome']}: {promise['reason']}")
    return EXIT_CODES[document["verdict"]]


def _rack_document(args: argparse.Namespace) -> dict:
    from ..formats.clean import clean_values
    from ..formats.imex import parse_imex_status

    if args.trays < 1 or args.gpus_per_tray < 1:
        raise GpuFabricError("--trays and --gpus-per-tray are whole numbers of at least 1")
    if (args.all_reduce is None) != (args.min_busbw is None):
        raise GpuFabricError("--all-reduce and --min-busbw go together")
    expected = None
    if args.expect:
        try:
            expected = expand_hostlist(args.expect)
        except ValueError as exc:
            raise GpuFabricError(f"--expect: {exc}") from None
        if len(set(expected)) != args.trays or len(expected) != args.trays:
            raise GpuFabricError(f"--expect names {len(expected)} trays, --trays is {args.trays}: they must agree "
                                 "(one distinct name per tray)")
    fleet = _read_fleet(Path(args.fleet)) if args.fleet else None
    run = floor = None
    if args.all_reduce:
        try:
            floor = parse_gbps(args.min_busbw)
            run = all_reduce_run(Path(args.all_reduce).read_text(encoding="utf-8", errors="replace"))
        except (ValueError, OSError) as exc:
            raise GpuFabricError(f"--all-reduce/--min-busbw: {exc}") from None
        if not floor > 0:  # a floor of 0 passes any run: no promise
            raise GpuFabricError(f"--min-busbw {args.min_busbw!r}: give a bandwidth above 0")
    imex = None
    if args.imex:
        try:
            imex = parse_imex_status(Path(args.imex).read_text(encoding="utf-8", errors="replace"))
        except (ValueError, OSError) as exc:
            raise GpuFabricError(f"--imex {args.imex}: {exc}") from None
    trays = read_trays(Path(args.rackdir))
    return clean_values(judge_rack(trays, expected=expected, tray_count=args.trays,
                                   gpus_per_tray=args.gpus_per_tray, fleet=fleet, all_reduce=run, min_busbw=floor,
                                   imex=imex))


def _read_fleet(path: Path) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GpuFabricError(f"--fleet {path}: not a readable fleet-results.json ({exc})") from None
    nodes = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and isinstance(n.get("name"), str)
                                              for n in nodes):
        raise GpuFabricError(f"--fleet {path}: not a fleet-results.json (no nodes list with names)")
    return document
