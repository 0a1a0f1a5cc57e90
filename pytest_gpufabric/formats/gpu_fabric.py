"""One GPU's NVLink fabric registration and the one judgement of it: NVML's GPU fabric info
(nvmlDeviceGetGpuFabricInfoV: state, status, clique id, cluster UUID, health mask) and `nvidia-smi -q`'s
``Fabric`` section say the same facts, read here into one record (GpuFabricInfo) in the words nvidia-smi prints.

A GPU on an NVSwitch or NVL72 fabric is usable for NVLink peers only once the fabric manager has registered it:
state ``Completed`` and status ``Success``. On an NVL72 rack every GPU of the NVLink domain also reports the same
cluster UUID and clique id; a GPU with another clique (or clique 0 with an all-zero cluster UUID, the answer of a
GPU the fabric manager did not place in the rack's partition) cannot reach the others over NVLink. A GPU without
NVSwitch (PCIe boards, a single GPU) answers "Not Supported": recorded as that, never as a failure.

Pure: reads no files and no NVML. fabric/gpu_fabric.py reads it live; nvml_record.py, formats/nvidia_smi_text.py and
fleet/rack.py fill and judge it through these functions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..units import NA, NAType

__all__ = ["GpuFabricInfo", "STATE_WORDS", "HEALTH_FIELDS", "ZERO_CLUSTER_UUID", "fabric_info_from_record",
           "fabric_problem", "rack_fabric_problems"]

#: nvmlGpuFabricState_t (nvml.h) as nvidia-smi -q prints it
STATE_WORDS = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
COMPLETED, SUCCESS = "Completed", "Success"
ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

#: the health mask's fields (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*): name, shift, width, value -> word
HEALTH_FIELDS = (
    ("Bandwidth", 0, 3, {1: "Degraded", 2: "Full"}),
    ("Route Recovery in progress", 2, 3, {1: "True", 2: "False"}),
    ("Route Unhealthy", 4, 3, {1: "True", 2: "False"}),
    ("Access Timeout Recovery", 6, 3, {1: "True", 2: "False"}),
    ("Incorrect Configuration", 8, 15, {1: "None", 2: "Incorrect SysGUID", 3: "Incorrect Chassis Serial Number",
                                        4: "No Partition", 5: "Insufficient NVLinks", 6: "Incompatible GPU Firmware",
                                        7: "Invalid Location", 8: "GPU State Invalid"}),
    ("Partition Assigned", 12, 3, {1: "True", 2: "False"}),
)
#: a health field's word that says the GPU's fabric is not whole, by field
_HEALTH_BAD = {"Bandwidth": {"Degraded"}, "Route Unhealthy": {"True"}, "Summary": {"Unhealthy", "Limited Capacity"},
               "Route Recovery in progress": {"True"}, "Access Timeout Recovery": {"True"},
               "Partition Assigned": {"False"}}
#: health fields whose every word but these says the GPU is misplaced (NVML's INCORRECT_CONFIGURATION_NONE)
_HEALTH_ONLY_GOOD = {"Incorrect Configuration": {"None", "N/A", "Not Supported"}}
_HEALTH_SUMMARY = {1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
#: a health field's NVML numbers by field name, and names and words in their printed case (matched ignoring case)
_HEALTH_MEANINGS = {**{name: meaning for name, _, _, meaning in HEALTH_FIELDS}, "Summary": _HEALTH_SUMMARY}
_HEALTH_NAMES = {name.lower(): name for name in _HEALTH_MEANINGS}
_HEALTH_WORDS = {word.lower(): word for meaning in _HEALTH_MEANINGS.values() for word in meaning.values()}


@dataclass
class GpuFabricInfo:
    """What the GPU says of its fabric registration, in nvidia-smi's words; None: not said, NA: "Not Supported" or
    N/A (no NVSwitch fabric: not judged)."""

    state: str | NAType | None = None  # "Completed" | "In Progress" | "Not Started"
    status: str | NAType | None = None  # "Success", or the NVML answer nvidia-smi names ("Insufficient Resources")
    clique_id: int | NAType | None = None
    cluster_uuid: str | NAType | None = None  # lower case, 8-4-4-4-12
    #: the health lines ("Bandwidth": "Full", "Summary": "Unhealthy"), as printed or decoded from NVML's mask
    health: dict[str, str] = field(default_factory=dict)
    #: what was said but cannot be read, by field: why
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def supported(self) -> bool:
        return self.state is not NA and self.state is not None

    def to_json(self) -> dict:
        def plain(value):
            return "N/A" if value is NA else value
        return {"state": plain(self.state), "status": plain(self.status), "clique_id": plain(self.clique_id),
                "cluster_uuid": plain(self.cluster_uuid), "health": dict(self.health),
                **({"unreadable": dict(self.unreadable)} if self.unreadable else {})}


def health_words(mask: int, summary: int | None = None) -> dict[str, str]:
    """NVML's health mask (and v3's summary) in nvidia-smi's words; a field the GPU does not support is left out."""
    words = {}
    for name, shift, width, meaning in HEALTH_FIELDS:
        value = (mask >> shift) & width
        if value in meaning:
            words[name] = meaning[value]
    if summary in _HEALTH_SUMMARY:
        words["Summary"] = _HEALTH_SUMMARY[summary]
    return words


#: nvmlReturn_t codes (nvml.h) a fabric status takes, as nvidia-smi prints them
_STATUS_WORDS = {0: SUCCESS, 3: "Not Supported", 10: "Timeout", 23: "Insufficient Resources", 27: "Not Ready",
                 999: "Unknown Error"}


def status_words(code: int) -> str:
    """An nvmlReturn_t as nvidia-smi prints it: 0 'Success', 23 'Insufficient Resources'."""
    return _STATUS_WORDS.get(code, f"NVML return {code}")


def status_code(words: str) -> int:
    """nvidia-smi's fabric status words as the nvmlReturn_t NVML gives: 'Insufficient Resources' 23; 999 (Unknown
    Error) for words it does not know."""
    return next((code for code, said in _STATUS_WORDS.items() if said == words.strip()), 999)


def fabric_info_from_record(value, where: str, who: str) -> GpuFabricInfo | None:
    """The ``fabric`` entry of a GPU in nvml.json (docs/bundles.md: NVML's numbers, ``state`` 3, ``status`` 0, or
    nvidia-smi's words): None when not recorded; an NVML error ({"error": "NOT_SUPPORTED"}) is NA throughout; a
    value of the wrong shape is said in ``unreadable``."""
    if value is None:
        return None
    if isinstance(value, dict) and set(value) == {"error"}:
        return GpuFabricInfo(state=NA, status=NA, clique_id=NA, cluster_uuid=NA)
    info = GpuFabricInfo()
    if not isinstance(value, dict):
        info.unreadable["fabric"] = f"{who} fabric {value!r} in {where} is not an object"
        return info
    state, status = value.get("state"), value.get("status")
    if _whole(state) and state in STATE_WORDS:
        state = STATE_WORDS[state]
    if _whole(status):
        status = status_words(status)
    if state in STATE_WORDS.values():
        info.state = NA if state == "Not Supported" else state
    elif state is not None:
        words = sorted(STATE_WORDS.values())
        info.unreadable["state"] = f"{who} fabric state {state!r} in {where} is not one of {words}"
    if isinstance(status, str) and status:
        info.status = status
    elif status is not None:
        info.unreadable["status"] = f"{who} fabric status {status!r} in {where} is not a word"
    clique = value.get("clique_id")
    if isinstance(clique, int) and not isinstance(clique, bool) and 0 <= clique < 1 << 32:
        info.clique_id = clique
    elif clique is not None:
        info.unreadable["clique_id"] = f"{who} fabric clique id {clique!r} in {where} is not a whole number"
    uuid = value.get("cluster_uuid")
    if isinstance(uuid, str) and _UUID.match(uuid):
        info.cluster_uuid = uuid.lower()
    elif uuid is not None:
        info.unreadable["cluster_uuid"] = f"{who} fabric cluster UUID {uuid!r} in {where} is not a UUID"
    _read_health(value, info, where, who)
    if info.state is NA:
        info.status = info.clique_id = info.cluster_uuid = NA
    return info


def _read_health(value: dict, info: GpuFabricInfo, where: str, who: str) -> None:
    """The health words of a ``health`` dict (words, or NVML's per-field numbers decoded like the mask) and of
    ``health_mask``: both are judged, a field missing from one is taken from the other, and a field the two
    readings name differently is a contradiction (``unreadable``: a failure, never the better word)."""
    health, mask = value.get("health"), value.get("health_mask")
    named = {}
    if isinstance(health, dict):
        for key, said in health.items():
            name = _HEALTH_NAMES.get(str(key).strip().lower(), str(key))
            if _whole(said):
                word = _HEALTH_MEANINGS.get(name, {}).get(said)
                if word is None:
                    info.unreadable[f"health {name}"] = f"{who} fabric health {name} {said!r} in {where} is no " \
                                                        "value NVML defines"
                    continue
            elif isinstance(said, str):
                word = _HEALTH_WORDS.get(said.strip().lower(), said.strip())
            else:
                continue
            named[name] = word
    if _whole(mask):
        summary = value.get("health_summary")
        decoded = health_words(mask, summary if _whole(summary) else None)
        disagree = [f"{name} {named[name]} vs {word}" for name, word in decoded.items()
                    if name in named and named[name].lower() != word.lower()]
        if disagree:
            info.unreadable["health"] = f"{who} fabric health and health_mask in {where} disagree: " \
                                        + "; ".join(disagree)
        named = {**decoded, **named}
    info.health = named


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fabric_problem(info: GpuFabricInfo | None) -> str | None:
    """Why one GPU's fabric registration is not whole (state not Completed, status not Success, a health line that
    says degraded or unhealthy), or None: fine, not supported (no NVSwitch fabric) or not recorded."""
    if info is None or info.state is NA:
        return None
    if info.unreadable:
        return next(iter(info.unreadable.values()))
    if info.state is None:
        return None
    if info.state != COMPLETED:
        return f"fabric state {info.state}, not {COMPLETED} (the fabric manager has not registered the GPU)"
    if info.status not in (SUCCESS, None, NA):
        return f"fabric status {info.status}, not {SUCCESS}"
    said = {name.lower(): (name, word) for name, word in info.health.items()}  # case-insensitive, both sides
    for name, bad in _HEALTH_BAD.items():
        field_name, word = said.get(name.lower(), (name, ""))
        if str(word).strip().lower() in {b.lower() for b in bad}:
            return f"fabric health {field_name} {word}"
    for name, good in _HEALTH_ONLY_GOOD.items():
        field_name, word = said.get(name.lower(), (name, None))
        if word is not None and str(word).strip().lower() not in {g.lower() for g in good}:
            return f"fabric health {field_name} {word}"
    return None


def rack_fabric_problems(members: list[tuple[str, GpuFabricInfo | None]], *, require_fabric: bool = True,
                         ) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str | None]:
    """One NVLink domain's GPUs (label, fabric info): each GPU whose own registration is not whole, then each GPU
    whose cluster UUID and clique id are not the domain's. The domain's (cluster UUID, clique) is the one most GPUs
    report; an all-zero cluster UUID is never it (no multi-node partition: one HGX board reports clique 0 and an
    all-zero UUID when healthy). ``require_fabric``: a GPU without a reading, or Not Supported, is a problem too
    (a rack's GPUs are all on its NVLink fabric). Returns the (label, why) pairs of the GPUs whose own
    registration is not whole, those of the GPUs outside the domain, and the domain's identity in words (None when
    no GPU reports one)."""
    problems: list[tuple[str, str]] = []
    ids: dict[tuple, list[str]] = {}
    for label, info in members:
        why = fabric_problem(info)
        if why is not None:
            problems.append((label, why))
        if info is None or info.state is NA:
            if not require_fabric:
                continue
            problems.append((label, "no fabric reading" if info is None else "fabric Not Supported: the GPU is not "
                             "on an NVLink switch fabric"))
            continue
        if isinstance(info.cluster_uuid, str) and info.cluster_uuid is not NA and _whole(info.clique_id):
            ids.setdefault((info.cluster_uuid, info.clique_id), []).append(label)
    candidates = [key for key in ids if key[0] != ZERO_CLUSTER_UUID]
    if not candidates:
        return problems, [], None
    domain = max(candidates, key=lambda key: len(ids[key]))
    words = f"cluster UUID {domain[0]}, clique {domain[1]}"
    outside = [(label, f"cluster UUID {key[0]}, clique {key[1]}: not the rack's ({words})")
               for key, labels in ids.items() if key != domain for label in labels]
    return problems, outside, words
