"""Markers -> requirements -> a decision: run, skip (not promised) or fail (promised and missing).

The rule users rely on: with a profile, a test of hardware the profile does not promise is skipped, and a
test of hardware it promises fails when the machine lacks it; every reason names the missing thing. Where the
evidence cannot tell (no driver, a bundle without GPUs) the promise is "not checked", never failed. Without
a profile nothing is promised, so a requirement the machine does not meet is a skip.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .fabric.model import Fabric, nvlink_count_of_label
from .profile.model import Profile
from .units import GIB, is_na

MARKERS = {
    "gpu": "gpu(count=1, model=None, min_memory_gib=None): needs that many GPUs, of that model, with that memory",
    "nvlink": "nvlink(min_links=1, all_pairs=False): needs a GPU pair (or every pair) joined by that many NVLinks",
    "rdma": "rdma(count=1, link_layer=None, min_rate_gbps=None): needs that many RDMA devices",
}


@dataclass(frozen=True)
class Decision:
    action: str  # "run" | "skip" (not promised) | "fail" (promised and missing) | "not checked" (no evidence)
    reason: str = ""


RUN = Decision("run")


def _gpu_promised(profile: Profile, count: int, model: str | None, min_memory_gib: float | None) -> str | None:
    if profile.gpu_count < count:
        return f"profile {profile.name} promises {profile.gpu_count} GPU(s); the test needs {count}"
    if model and (not profile.gpu_model or model.lower() not in profile.gpu_model.lower()):
        return f"profile {profile.name} promises {profile.gpu_model or 'no particular model'}; the test needs {model}"
    if min_memory_gib is not None:
        memory = profile.gpu_memory_bytes
        if memory is None or memory < min_memory_gib * GIB:
            have = "no memory size" if memory is None else f"{memory / GIB:.1f} GiB"
            return f"profile {profile.name} promises {have} per GPU; the test needs {min_memory_gib} GiB"
    return None


def _gpu_present(fabric: Fabric, count: int, model: str | None, min_memory_gib: float | None) -> str | None:
    if len(fabric.gpus) < count:
        return f"the machine has {len(fabric.gpus)} GPU(s); {count} needed"
    for gpu in fabric.gpus[:count]:
        if model and gpu.name is not None and model.lower() not in str(gpu.name).lower():
            return f"{gpu.label} is a {gpu.name}, not a {model}"
        if min_memory_gib is not None and isinstance(gpu.memory_bytes, int) and not is_na(gpu.memory_bytes):
            if gpu.memory_bytes < min_memory_gib * GIB:
                return f"{gpu.label} has {gpu.memory_bytes / GIB:.1f} GiB; {min_memory_gib} GiB needed"
    return None


def _pairs_with_links(matrix_links, n: int, min_links: int) -> tuple[list, list]:
    pairs = list(itertools.combinations(range(n), 2))
    return pairs, [p for p in pairs if matrix_links(*p) >= min_links]


def _nvlink_promised(profile: Profile, min_links: int, all_pairs: bool) -> str | None:
    pairs, joined = _pairs_with_links(profile.nvlinks_between, profile.gpu_count, min_links)
    if not joined or (all_pairs and len(joined) < len(pairs)):
        which = "every GPU pair" if all_pairs else "a GPU pair"
        return f"profile {profile.name} promises no NVLink of {min_links}+ links between {which}"
    return None


def _nvlink_present(fabric: Fabric, min_links: int, all_pairs: bool) -> str | None:
    def links(a: int, b: int) -> int:
        return nvlink_count_of_label(fabric.label(f"GPU{a}", f"GPU{b}") or "")

    pairs, joined = _pairs_with_links(links, len(fabric.gpus), min_links)
    if not joined or (all_pairs and len(joined) < len(pairs)):
        shown = ", ".join(f"GPU{a}-GPU{b} {fabric.label(f'GPU{a}', f'GPU{b}')}" for a, b in pairs) or "no GPU pair"
        return f"no NVLink of {min_links}+ links between {'every' if all_pairs else 'a'} GPU pair (found {shown})"
    return None


def _matching(ports: list[tuple[str | None, float | None]], link_layer: str | None,
              min_rate_gbps: float | None) -> int:
    """How many (link layer, rate in Gb/s) ports meet the marker's link layer and rate."""
    return sum(1 for layer, rate in ports
               if (link_layer is None or layer == link_layer)
               and (min_rate_gbps is None or (rate is not None and rate >= min_rate_gbps)))


def _rdma_promised(profile: Profile, count: int, link_layer: str | None, min_rate_gbps: float | None) -> str | None:
    if profile.rdma_devices:
        ports = [(d.get("link_layer"), rate) for d, rate in zip(profile.rdma_devices, profile.rdma_device_rates(),
                                                                  strict=True)]
    else:  # only the topology's NIC columns: devices without promised properties
        ports = [(None, None)] * len(profile.nics)
    have = _matching(ports, link_layer, min_rate_gbps)
    if have < count:
        what = " ".join(filter(None, [link_layer, f">= {min_rate_gbps:g} Gb/s" if min_rate_gbps else None]))
        return (f"profile {profile.name} promises {have} RDMA port(s){' ' + what if what else ''}; "
                f"the test needs {count}")
    return None


def _rdma_present(fabric: Fabric, count: int, link_layer: str | None, min_rate_gbps: float | None,
                  devices: list | None = None) -> str | None:
    if devices is None:
        if len(fabric.nics) < count:
            return f"the machine shows {len(fabric.nics)} RDMA device(s) in its topology; {count} needed"
        return None
    from .fabric.rdma import line_rate

    ports = [(p.link_layer, line_rate(p)[0]) for d in devices for p in d.ports if p.state == "ACTIVE"]
    have = _matching(ports, link_layer, min_rate_gbps)
    if have < count:
        return f"the machine has {have} active RDMA port(s) that fit; {count} needed"
    return None


_REQUIREMENTS = {
    "gpu": (_gpu_promised, _gpu_present, {"count": 1, "model": None, "min_memory_gib": None}),
    "nvlink": (_nvlink_promised, _nvlink_present, {"min_links": 1, "all_pairs": False}),
    "rdma": (_rdma_promised, _rdma_present, {"count": 1, "link_layer": None, "min_rate_gbps": None}),
}


def marker_arguments(name: str, args: tuple, kwargs: dict) -> dict:
    """Positional and keyword marker arguments -> a full argument dict; TypeError on unknown ones."""
    defaults = _REQUIREMENTS[name][2]
    unknown = set(kwargs) - set(defaults)
    if unknown or len(args) > len(defaults):
        raise TypeError(f"@pytest.mark.{name} takes {', '.join(defaults)}; got {sorted(unknown) or args}")
    values = dict(defaults)
    values.update(dict(zip(defaults, args, strict=False)))  # fewer args than names is fine
    values.update(kwargs)
    return values


def decide(name: str, arguments: dict, profile: Profile | None, fabric: Fabric | None, why_no_fabric: str,
           rdma_devices: list | None = None) -> Decision:
    """What to do with a test carrying marker ``name``. ``rdma_devices``: the RDMA devices found, when known
    (the rdma marker then judges their ports, not only the topology's NIC columns)."""
    promised, present, _ = _REQUIREMENTS[name]
    if profile is not None:
        not_promised = promised(profile, **arguments)
        if not_promised:
            return Decision("skip", not_promised)
    if fabric is None and not (name == "rdma" and rdma_devices is not None):  # RDMA is read without NVML
        # the machine could not be read: a promise of it is not checked, never failed (nothing was examined)
        return Decision("not checked" if profile is not None else "skip", why_no_fabric)
    if name in ("gpu", "nvlink") and not fabric.gpus_recorded:
        why = f"{fabric.source} records no GPUs"
        return Decision("not checked" if profile is not None else "skip", why)
    missing = present(fabric, **arguments, devices=rdma_devices) if name == "rdma" else present(fabric, **arguments)
    if not missing:
        return RUN
    if name in ("gpu", "nvlink") and fabric.undescribed:  # GPUs the evidence announces, not describes: unknown
        why = next(iter(fabric.undescribed.values()))
        return Decision("not checked" if profile is not None else "skip", f"{missing}; {why}")
    if profile is not None:
        return Decision("fail", f"promised by profile {profile.name} but missing: {missing}")
    return Decision("skip", missing)
