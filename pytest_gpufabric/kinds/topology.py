"""The machine as sold, read from its inventory and `nvidia-smi topo -m` (checks/topology.py): the GPU count, each
GPU's model, memory, PCIe link and ECC mode (the profile's ``gpus:`` section), the topology matrix and the CPU/NUMA
affinity (``topology:``), and each GPU's NVLinks (``nvlink:``)."""

from __future__ import annotations

from ..checks.topology import gpu_memory_limits, matrix_cause, matrix_differences
from ..remedy_classes import RERUN, RESEAT, RESET, RMA, SOFTWARE, Remedy
from ..remedy_rules import Context, _fixed, _gpu_index, _lead
from ..report.phrases import GE, format_value, matrix_text, settings_phrase
from ..units import format_bytes, is_na, is_number, memory_as_sold
from .base import CheckRule, Kind, each_gpu, gpus, once

POSITION = 20
SUITE = "test_topology.py"
OWN_MODULES = ("checks/topology.py", "suites/test_topology.py")

#: the profile sections these kinds are made of
GPUS, TOPOLOGY, NVLINK = "gpus", "topology", "nvlink"


# --- the ids ----------------------------------------------------------------------------------------------------


def _affinity_ids(profile) -> list[str]:
    """The GPUs whose CPU or NUMA affinity the profile's topology section names."""
    return [label for label in gpus(profile)
            if any(label in profile.topology.get(key, {}) for key in ("cpu_affinity", "numa_affinity"))]


# --- phrases: a record's Expected and Found in words --------------------------------------------------------------


def _scalar(prefix: str = "", unit: str = ""):
    def phrase(check: dict) -> tuple[str, str]:
        expected, found = check.get("expected"), check.get("found")
        tail = f" {unit}" if unit else ""
        return f"{prefix}{format_value(expected)}{tail}", f"{format_value(found)}{tail}"

    return phrase


def _gpu_memory_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found")
    return (f"{GE} {format_bytes(expected)}" if is_number(expected) else format_value(expected),
            format_bytes(found) if is_number(found) else format_value(found))


def _gen_width(link: dict, gen: str, width: str) -> str:
    """A PCIe link's "gen 5 x16", or "gen and width not recorded" where the record lacks either."""
    if link.get(gen) is None or link.get(width) is None:
        return "gen and width not recorded"
    return f"gen {link[gen]} x{link[width]}"


def _pcie_link_phrase(check: dict) -> tuple[str, str]:
    """The promised gen and width, and the link's best and current; a record of another shape as settings."""
    if not isinstance(check.get("expected"), dict):
        return settings_phrase(check)
    expected, found = check["expected"], check.get("found") or {}
    if not isinstance(found, dict):
        return f"PCIe {_gen_width(expected, 'gen', 'width')}", format_value(found)
    return (f"PCIe {_gen_width(expected, 'gen', 'width')}",
            f"{_gen_width(found, 'gen_max', 'width_max')} "
            f"(running at {_gen_width(found, 'gen_current', 'width_current')})")


def _matrix_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected"), check.get("found")
    want = matrix_text(expected) if isinstance(expected, dict) else format_value(expected)
    got = matrix_text(found) if isinstance(found, dict) else format_value(found)
    if check.get("verdict") == "passed" and want == got:
        got = "as promised"
    return want or "one GPU: no link to promise", got or "one GPU"


def _nvlinks_phrase(check: dict) -> tuple[str, str]:
    expected, found = check.get("expected") or {}, check.get("found") or {}
    want = [f"{expected['links_per_gpu']} NVLinks" if "links_per_gpu" in expected else "NVLinks"]
    if expected.get("all_active"):
        want.append("all active")
    if expected.get("min_speed"):
        want.append(f"{GE} {expected['min_speed']} each")
    got = f"{found.get('active_links')} active" if isinstance(found, dict) and "active_links" in found else \
        format_value(found)
    if isinstance(found, dict) and found.get("inactive"):
        got += f"; inactive: {format_value(found['inactive'])}"
    return ", ".join(want), got


_AFFINITY_WORDS = {"cpu_affinity": "CPUs", "numa_affinity": "NUMA node"}


def _affinity_phrase(check: dict) -> tuple[str, str]:
    """The affinities the profile promises (CPUs, NUMA node: either may be left out), each as found; one the
    evidence does not give (None, topo -m's N/A) is "not recorded", never "None". A record of another shape as
    settings."""
    expected, found = check.get("expected"), check.get("found")
    if not isinstance(expected, dict):
        return settings_phrase(check)
    keys = [key for key in _AFFINITY_WORDS if key in expected]

    def words(values: dict) -> str:
        return ", ".join(f"{_AFFINITY_WORDS[key]} "
                         + ("not recorded" if values.get(key) is None or is_na(values.get(key)) else str(values[key]))
                         for key in keys)

    return words(expected), words(found) if isinstance(found, dict) else "not recorded"


# --- remedies: what a failure points to -------------------------------------------------------------------------


def _gpu_count_remedy(check: dict, ctx: Context) -> Remedy:
    """Fewer: RESEAT (RESET where XID 79 says it fell off the bus); more: SOFTWARE."""
    expected, found = check.get("expected"), check.get("found")
    if is_number(found) and is_number(expected) and found > expected:
        return SOFTWARE, (f"{found} GPUs where the profile promises {expected}: the profile describes another "
                          "machine; judge it against its own")
    fell_off = [f"GPU{gpu}" for gpu, codes in ctx.xid_codes.items() if 79 in codes]
    if fell_off:
        return RESET, (f"{found} of the {expected} GPUs promised answer, and the driver reported XID 79 (fell off the "
                       f"bus) for {', '.join(fell_off)}: a reset brings it back; reseat it if it falls off again")
    return RESEAT, (f"{found} of the {expected} GPUs promised answer: a board that is not on the bus is reseated "
                    "first (its slot, riser and power cables)")


def _gpu_memory_remedy(check: dict, ctx: Context) -> Remedy:
    """The GB a board is sold in, promised in GiB: SOFTWARE; fewer bytes: RMA."""
    expected, found = check.get("expected"), check.get("found")
    if memory_as_sold(expected, found) is not None:
        return SOFTWARE, (f"{check.get('subject')} has {format_bytes(found)}, all of the {expected >> 30} GB it is "
                          "sold as: the profile promises GiB where the board is sold in GB; write the promise as sold")
    # fewer bytes than any unit explains: a board of another SKU than sold (the vendor's to exchange)
    return RMA, (f"{check.get('subject')} has {format_bytes(found) if is_number(found) else found} of the "
                 f"{format_bytes(expected) if is_number(expected) else expected} promised: a board of another SKU "
                 "than sold")


_MATRIX_POINTS = {"MISSING": "a device the profile names is not on the bus: reseat it",
                  "NV_COUNT": "fewer NVLinks than sold between them: a bridge or cable not fully seated",
                  "NV_TO_PCIE": "the pair talks over PCIe where NVLinks were sold: a missing or unseated NVLink bridge",
                  "PCIE": "another PCIe path than sold: the cards sit in other slots, or behind another riser"}


def _matrix_remedy(check: dict, ctx: Context) -> Remedy:
    """A device missing, fewer NVLinks, PHB where NV# was sold, another slot: RESEAT."""
    cells = matrix_differences(check.get("expected") or {}, check.get("found") or {})
    if not cells:
        return RERUN, f"{_lead(check)}: the record does not show which cells differ; run it again"
    row, col, want, seen = cells[0]
    more = f" (and {len(cells) - 1} more cell(s))" if len(cells) > 1 else ""
    return RESEAT, (f"{row}-{col}: expected {want}, found {seen if seen is not None else 'no such device'}{more}: "
                    f"{_MATRIX_POINTS[matrix_cause(want, seen)]}")


def _nvlinks_remedy(check: dict, ctx: Context) -> Remedy:
    """Fewer or inactive: RESEAT (RESET after link errors); slower: RESET; more: SOFTWARE."""
    expected, found = check.get("expected") or {}, check.get("found") or {}
    who, count, want = check.get("subject"), found.get("active_links"), expected.get("links_per_gpu")
    inactive = found.get("inactive") or []
    fewer = is_number(count) and is_number(want) and count < want
    if fewer or inactive:
        what = (f"{count} active NVLinks of {want}" if fewer else "") + (", " if fewer and inactive else "") + (
            f"link(s) {', '.join(map(str, inactive))} inactive" if inactive else "")
        errors = ctx.link_errors.get(_gpu_index(who))
        if errors:
            return RESET, f"{who}: {what}, after its {errors}: links trained down after errors; a reset retrains them"
        return RESEAT, f"{who}: {what}: a bridge or cable not seated"
    if found.get("slow"):
        return RESET, (f"{who}: link(s) {', '.join(map(str, found['slow']))} trained below the promised speed: a reset "
                       "retrains them; reseat the bridge if they train low again")
    if is_number(count) and is_number(want) and count > want:
        return SOFTWARE, f"{who}: {count} active NVLinks where the profile promises {want}: another machine's profile"
    return SOFTWARE, f"{_lead(check)}: the NVLink layout differs from the profile's (NVSwitch or direct links)"


# --- the kinds --------------------------------------------------------------------------------------------------

GPU_COUNT = Kind("gpu-count", "GPU count", SUITE, lambda profile: [""], sections=(GPUS,),
                 checks=(CheckRule("gpu-count", _gpu_count_remedy, _scalar(unit="GPU(s)")),))
# the profile states what was sold: a board of another model is the vendor's to exchange (a profile of another
# machine fails every board and every promise with them: the operator sees that before any remedy)
GPU_MODEL = Kind("gpu-model", "GPU model", SUITE, each_gpu(lambda p: p.gpu_model), sections=(GPUS,),
                 checks=(CheckRule("gpu-model", _fixed(RMA, "a board of another model than sold"), _scalar()),))
GPU_MEMORY = Kind("gpu-memory", "GPU memory size", SUITE, each_gpu(lambda p: p.gpu_memory_bytes), sections=(GPUS,),
                  checks=(CheckRule("gpu-memory", _gpu_memory_remedy, _gpu_memory_phrase, gpu_memory_limits),))
PCIE_LINK = Kind("pcie-link", "PCIe generation or width", SUITE, each_gpu(lambda p: p.pcie), sections=(GPUS,),
                 checks=(CheckRule("pcie-link", _fixed(RESEAT, "a card in a narrower or older slot, or a riser or "
                                                               "retimer that limits the link"), _pcie_link_phrase),))
ECC_MODE = Kind("ecc-mode", "ECC mode", SUITE, each_gpu(lambda p: p.ecc is not None), sections=(GPUS,),
                checks=(CheckRule("ecc-mode", _fixed(SOFTWARE, "a setting (nvidia-smi -e, then a reboot)"),
                                  _scalar("ECC ")),))
TOPOLOGY_MATRIX = Kind("topology-matrix", "topology matrix", SUITE, once(lambda p: p.matrix), sections=(TOPOLOGY,),
                       checks=(CheckRule("topology-matrix", _matrix_remedy, _matrix_phrase),))
# its check records are named for what they count: the GPU's NVLinks
NVLINKS = Kind("nvlinks", "NVLinks", SUITE, each_gpu(lambda p: p.nvlink), sections=(NVLINK,),
               checks=(CheckRule("nvlink-links", _nvlinks_remedy, _nvlinks_phrase),))
AFFINITY = Kind("affinity", "CPU/NUMA affinity for this GPU", SUITE, _affinity_ids, sections=(TOPOLOGY,),
                checks=(CheckRule("affinity", _fixed(SOFTWARE, "the BIOS's NUMA settings (NUMA per socket, sub-NUMA "
                                                               "clustering)"), _affinity_phrase),))

KINDS = (GPU_COUNT, GPU_MODEL, GPU_MEMORY, PCIE_LINK, ECC_MODE, TOPOLOGY_MATRIX, NVLINKS, AFFINITY)


def missing_gpu(ctx: Context) -> Remedy | None:
    """The GPU count's remedy where it failed with fewer GPUs than promised: every test of a missing GPU fails or
    breaks for that, and no other remedy mends it."""
    for check in (c for records in ctx.checks.values() for c in records):
        found, expected = check.get("found"), check.get("expected")
        if check.get("name") == GPU_COUNT.name and check.get("verdict") == "failed" and is_number(found) \
                and is_number(expected) and found < expected:
            return _gpu_count_remedy(check, ctx)
    return None
