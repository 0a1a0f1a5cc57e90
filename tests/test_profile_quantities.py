"""Every quantity of every profile section is checked when the profile loads (issue 41): a typo in a size, a
bandwidth, a bit rate or a time is a usage error naming the file, the JSON path and the value (pytest exit 4,
`gpufabric accept` exit 4), never a REJECTED machine.

The fields come from walking the schema here (not from the loader's own list): every key whose schema is one of
the quantity $defs. Each is planted, with a typo, into a copy of a shipped profile, its section made where the
profile has none from the least content the schema allows. A guard holds every other text and number of the
schema to a form or a range, so no quantity can hide there as free text.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pytest_gpufabric.cli import EXIT_USAGE, main
from pytest_gpufabric.errors import ProfileError
from pytest_gpufabric.profile.loader import load_profile

ROOT = Path(__file__).parent.parent
SCHEMA = json.loads((ROOT / "pytest_gpufabric" / "profile" / "profile.schema.json").read_text(encoding="utf-8"))
BASE = ROOT / "profiles" / "h200-nvswitch-x2.yaml"  # the shipped profile with the most sections

#: per quantity $def: a value of its form, a typo of it, and one past anything a GPU server has
QUANTITY_DEFS = {
    "size": ("1 GiB", "4 GiBs", "5000 TB"),
    "bandwidth": ("1 GB/s", "fast", "900 TB/s"),
    "bitrate": ("1 Gb/s", "25 GB/s", "99999 Gb/s"),  # GB/s is bytes: no bit rate
    "duration": ("1 us", "40 usec", "100000 s"),
}
#: text a profile holds that is no quantity: names, versions, commands, free words
FREE_TEXT = {
    "name", "description", "extends", "gpus.model", "topology.nics.*", "rdma.devices[].name",
    "rdma.ib_write_bw.device", "rdma.ib_write_bw.server_device", "rdma.ib_write_bw.peer", "rdma.ib_write_bw.ssh",
    "rdma.ib_write_bw.binary", "rdma.ib_write_bw.extra_args[]", "bandwidth.nccl_tests.binary",
    "platform.driver.exact", "platform.driver.min", "platform.vbios.exact", "platform.vbios.min",
    "platform.nic_firmware.exact", "platform.nic_firmware.min", "platform.nic_firmware.devices[]",
    "platform.cpu_governor", "power.forbid_throttle[]", "waive[].promise", "waive[].reason",
}
#: numbers with no lower bound, on purpose
UNBOUNDED_NUMBERS = {"memory_pattern.seed"}
#: quantities where zero means something: Caffe's -lms 0 offloads every saved tensor
ZERO_ALLOWED = {"$.memory.lms[0].threshold"}


def _resolve(node: dict) -> tuple[str | None, dict]:
    ref = node.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        return name, SCHEMA["$defs"][name]
    return None, node


def _schema_leaves(node: dict, keys: tuple = ()):
    """(keys, def name, schema) of every leaf of the schema; a list's item is key 0, a map's value its first name."""
    name, resolved = _resolve(node)
    if name in QUANTITY_DEFS or not any(k in resolved for k in ("properties", "items", "additionalProperties")):
        yield keys, name, resolved
        return
    for key, child in resolved.get("properties", {}).items():
        yield from _schema_leaves(child, (*keys, key))
    if isinstance(resolved.get("items"), dict):
        yield from _schema_leaves(resolved["items"], (*keys, 0))
    extra = resolved.get("additionalProperties")
    if isinstance(extra, dict):
        names = resolved.get("propertyNames", {})
        yield from _schema_leaves(extra, (*keys, names["enum"][0] if "enum" in names else "*"))


def _dotted(keys: tuple) -> str:
    return "".join("[]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")


def _key(keys: tuple) -> str:
    """The name the message gives a value: its own key, or its list's."""
    return next(k for k in reversed(keys) if isinstance(k, str))


def _json_path(keys: tuple) -> str:
    return "$" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)


LEAVES = list(_schema_leaves(SCHEMA))
QUANTITIES = [(keys, name) for keys, name, _ in LEAVES if name in QUANTITY_DEFS]
NUMBERS = [keys for keys, name, node in LEAVES if node.get("type") in ("number", "integer") and "enum" not in node
           and "*" not in keys]
#: YAML's .nan and .inf are floats, which an integer field refuses already
FLOATS = [keys for keys, _, node in LEAVES if node.get("type") == "number" and "*" not in keys]


def _least(node: dict) -> object:
    """The least content the schema allows at ``node``: its required keys (and a oneOf/anyOf's first branch's)."""
    name, node = _resolve(node)
    if name in QUANTITY_DEFS:
        return QUANTITY_DEFS[name][0]
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        branch = (node.get("oneOf") or node.get("anyOf") or [{}])[0]
        required = [*node.get("required", []), *branch.get("required", [])]
        return {key: _least(node["properties"][key]) for key in required}
    if kind == "array":
        return [_least(node["items"]) for _ in range(node.get("minItems", 0))]
    if kind in ("integer", "number"):
        low = node.get("minimum", node.get("exclusiveMinimum", 0) + 1)
        return min(low, node.get("maximum", low))
    return "x"


def _child_schema(node: dict, key) -> dict:
    _, node = _resolve(node)
    if isinstance(key, int):
        return node["items"]
    return node.get("properties", {}).get(key) or node["additionalProperties"]


def _walk_schema(keys: tuple) -> dict:
    node = SCHEMA
    for key in keys:
        node = _child_schema(node, key)
    return node


def _plant(keys: tuple, value: object) -> dict:
    """A copy of the base profile with ``value`` at ``keys``, every container on the way made when missing."""
    doc = yaml.safe_load(BASE.read_text(encoding="utf-8"))
    schema, here = SCHEMA, doc
    for depth, key in enumerate(keys, 1):
        parent, schema = schema, _child_schema(schema, key)
        if isinstance(key, int):
            while len(here) <= key:
                here.append(_least(schema))
        elif key not in here:
            here[key] = _least(schema)
        if depth == len(keys):
            here[key] = value
            branches = [branch.get("required", []) for branch in _resolve(parent)[1].get("oneOf", [])]
            if any(key in required for required in branches):  # one floor or the other: the planted one's
                for other in {k for required in branches if key not in required for k in required}:
                    here.pop(other, None)
        else:
            here = here[key]
    return doc


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_the_schema_walk_finds_the_quantities_of_every_section():
    """The walk itself: every section that holds a quantity is found, the diagnostic ones included."""
    sections = {keys[0] for keys, _ in QUANTITIES}
    assert sections == {"gpus", "nvlink", "bandwidth", "rdma", "platform", "memory", "memory_bandwidth",
                        "memory_pattern", "pcie_load", "fabric"}
    assert (("memory_bandwidth", "min"), "bandwidth") in QUANTITIES
    assert (("pcie_load", "size"), "size") in QUANTITIES


def test_no_quantity_hides_as_free_text_or_an_unbounded_number():
    """A text of the schema has a form ($ref, pattern or enum) unless it is a name, version or command; a number
    has a lower bound. A new section's `size: {type: string}` fails here until it is typed."""
    untyped = [_dotted(keys) for keys, name, node in LEAVES
               if node.get("type") == "string" and not name and "pattern" not in node and "enum" not in node
               and _dotted(keys) not in FREE_TEXT]
    assert untyped == []
    unbounded = [_dotted(keys) for keys in NUMBERS
                 if not {"minimum", "exclusiveMinimum"} & set(_resolve(_walk_schema(keys))[1])
                 and _dotted(keys) not in UNBOUNDED_NUMBERS]
    assert unbounded == []


@pytest.mark.parametrize("keys,kind", QUANTITIES, ids=[_json_path(k) for k, _ in QUANTITIES])
def test_a_typo_in_any_quantity_is_a_usage_error(pytester: pytest.Pytester, keys: tuple, kind: str):
    valid, typo, _ = QUANTITY_DEFS[kind]
    load_profile(str(_write(pytester.path, _plant(keys, valid))))  # the control: the made section is valid
    path = _write(pytester.path, _plant(keys, typo))
    with pytest.raises(ProfileError) as raised:
        load_profile(str(path))
    assert raised.value.json_path == _json_path(keys)
    assert f"{typo!r} does not match the form of" in str(raised.value)
    run = pytester.runpytest("--gpu-profile", str(path), "--gpu-replay", "h100-x1", "-p", "no:cacheprovider")
    assert run.ret == 4
    assert run.stderr.lines[0].startswith(f"ERROR: --gpu-profile: {path} at {_json_path(keys)}: {typo!r} does not "
                                          "match the form of a")  # (fnmatch would read [0] as a set of characters)


@pytest.mark.parametrize("keys,kind", QUANTITIES, ids=[_json_path(k) for k, _ in QUANTITIES])
def test_a_quantity_of_zero_or_past_any_machine_is_refused_at_load(tmp_path: Path, keys: tuple, kind: str):
    """What a pattern cannot say: zero (a floor that passes everything, a size that measures nothing) and a figure
    past anything a GPU server has (a unit slip, 900 TB/s for 900 GB/s)."""
    valid, _, too_much = QUANTITY_DEFS[kind]
    zero = "0 " + valid.split()[1]
    if _json_path(keys) in ZERO_ALLOWED:
        load_profile(str(_write(tmp_path, _plant(keys, zero))))
    else:
        with pytest.raises(ProfileError, match=rf"{_key(keys)}: '{zero}' is not above zero") as raised:
            load_profile(str(_write(tmp_path, _plant(keys, zero))))
        assert raised.value.json_path == _json_path(keys)
    with pytest.raises(ProfileError, match=rf"{_key(keys)}: '{too_much}' is more than any GPU server has") as raised:
        load_profile(str(_write(tmp_path, _plant(keys, too_much))))
    assert raised.value.json_path == _json_path(keys)


@pytest.mark.parametrize("keys", FLOATS, ids=[_json_path(k) for k in FLOATS])
def test_a_number_that_is_not_finite_is_refused_at_load(tmp_path: Path, keys: tuple):
    """`.nan` passes every range JSON Schema states (each comparison with NaN is false): a `min_fraction: .nan`
    loaded and then failed every machine."""
    with pytest.raises(ProfileError, match=rf"{_key(keys)}: nan is not a number a profile can promise") as raised:
        load_profile(str(_write(tmp_path, _plant(keys, math.nan))))
    assert raised.value.json_path == _json_path(keys)


#: the three typos of issue 41, each of which ended REJECTED with remedy "software"
ISSUE_41 = [(("memory_bandwidth", "min"), "fast"), (("pcie_load", "size"), "big"),
            (("memory_bandwidth", "size"), "4 GiBs")]


@pytest.mark.parametrize("keys,typo", ISSUE_41, ids=[_json_path(k) for k, _ in ISSUE_41])
def test_the_typos_of_issue_41_are_usage_errors_for_pytest_and_accept(pytester: pytest.Pytester, capsys,
                                                                       keys: tuple, typo: str):
    path = _write(pytester.path, _plant(keys, typo))
    expected = f"{path} at {_json_path(keys)}: {typo!r} does not match the form of a "
    run = pytester.runpytest("--gpu-profile", str(path), "--gpu-replay", "h100-x1", "-p", "no:cacheprovider")
    assert run.ret == 4
    assert run.stderr.lines[0].startswith(f"ERROR: --gpu-profile: {expected}")
    capsys.readouterr()
    assert main(["accept", "--profile", str(path), "--replay", "h100-x1"]) == EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"gpufabric: {expected}")


def test_the_typed_view_gives_the_sections_other_modules_read():
    """The sections modules outside profile/ read go through Profile (tests/test_kind_names.py holds them to it):
    a promised device's rate parsed to Gb/s, and {} for a section the profile does not hold."""
    roce = load_profile(str(ROOT / "profiles" / "a100-pcie-roce.yaml"))
    assert roce.rdma_device_rates() == [25.0]
    assert roce.memory == {} and roce.burn_in == {} and roce.platform == {}
    full = load_profile(str(BASE))
    assert full.memory is full.data["memory"] and full.burn_in is full.data["burn_in"]
    assert full.rdma_device_rates() == [full.quantity("rdma", "devices", i, "rate")
                                        for i in range(len(full.rdma_devices))]
