"""Completeness per member: a record that announces a set (a count of GPUs, a world size, a device list) and
describes fewer of them shows nothing of the ones it leaves out. Each such member is unknown: its promises are
not checked, naming it, never passed on the others' rows and never dropped unsaid.

One rule for every recorded file (nvml.json's ``gpu_count`` against its ``gpus``, bandwidth.json's
``world_size`` against the ``devices`` its ranks ran on, ...): the readers ask ``not_described`` which members
are missing and ``undescribed_reason`` for the sentence that names them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def not_described(announced: int | Iterable[object], described: Iterable[object]) -> list[object]:
    """The members ``announced`` (a count ``n``: the members 0 .. n-1; else the members themselves) that
    ``described`` does not hold, in order."""
    members = range(announced) if isinstance(announced, int) and not isinstance(announced, bool) else announced
    seen = set(described)
    return [m for m in members if m not in seen]


def undescribed_reason(where: str, announcement: str, description: str, missing: Iterable[str]) -> str:
    """``nvml.json announces 2 GPU(s) (gpu_count) but describes 1 (gpus): GPU1 is not described, so nothing of it
    is known``."""
    names = list(missing)
    verb = "is" if len(names) == 1 else "are"
    return (f"{where} announces {announcement} but describes {description}: {', '.join(names)} {verb} not "
            f"described, so nothing of {'it' if len(names) == 1 else 'them'} is known")


def undescribed_members(where: str, announced: int | Iterable[object], described: Iterable[object], *,
                        announcement: str, description: str,
                        name: Callable[[object], str] = str) -> dict[str, str]:
    """Each member ``announced`` that ``described`` leaves out, by ``name``, with the sentence that says so;
    {} where the record describes every member it announces."""
    described = list(described)
    missing = [name(m) for m in not_described(announced, described)]
    if not missing:
        return {}
    why = undescribed_reason(where, announcement, description, missing)
    return {member: why for member in missing}
