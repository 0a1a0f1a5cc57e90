"""YAML -> validated Profile: find by name or path, resolve ``extends``, validate, and say exactly what is wrong.

Every failure is a ProfileError naming the file, the JSON path and the problem; the plugin turns it into a
pytest usage error (exit 4) before anything runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from ..errors import ProfileError
from ..formats.strict import StrictReadError, load_yaml_text
from ..paths import PROFILE_PATH_ENV, did_you_mean, name_search_dirs, shipped_profiles_dir
from ..units import memory_as_sold, parse_bytes
from .model import Profile
from .quantities import (
    KINDS,
    non_finite_problem,
    not_above_zero,
    numbers_in,
    quantities_in,
    quantity_problem,
    schema,
)
from .quantities import json_path as _json_path

_SUFFIXES = (".yaml", ".yml")


# --- finding ------------------------------------------------------------------------------------------


def search_dirs(rootdir: Path | None = None) -> list[Path]:
    """Where names are looked up, first match wins: ./profiles of the folder the command was started in
    (``rootdir``, default the current folder), GPUFABRIC_PROFILE_PATH, the shipped ones (paths.name_search_dirs)."""
    return name_search_dirs("profiles", PROFILE_PATH_ENV, shipped_profiles_dir(), rootdir)


def available_profiles(rootdir: Path | None = None) -> dict[str, Path]:
    """Every profile name that can be given to --gpu-profile, with the file it resolves to."""
    found: dict[str, Path] = {}
    for directory in search_dirs(rootdir):
        if directory.is_dir():
            for path in sorted(directory.iterdir()):
                if path.suffix in _SUFFIXES and path.stem not in found:
                    found[path.stem] = path
    return found


def _a_directory(spec: str) -> str:
    return (f"{spec} is a directory, not a profile: give a profile's YAML file (such as {spec.rstrip('/')}/NAME.yaml) "
            "or a profile's name")


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith(_SUFFIXES)


def find_profile(spec: str, rootdir: Path | None = None, *, relative_to: Path | None = None) -> Path:
    """A name ('titan-rtx-nvlink') or a path ('./my.yaml') -> the profile file."""
    if _looks_like_path(spec):
        try:
            path = Path(spec).expanduser()
        except RuntimeError:  # "~nosuchuser/p.yaml": no such user's home
            user = spec.split("/")[0]
            raise ProfileError(f"profile file not found: {spec} (no home directory for {user!r})") from None
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        if path.is_dir():
            raise ProfileError(_a_directory(spec))
        if not path.is_file():
            raise ProfileError(f"profile file not found: {spec}")
        return path
    candidates = available_profiles(rootdir)
    if relative_to is not None:  # `extends` may name a sibling file first
        for suffix in _SUFFIXES:
            sibling = relative_to / f"{spec}{suffix}"
            if sibling.is_file():
                return sibling
    if spec in candidates:
        return candidates[spec]
    if (relative_to or Path.cwd()).joinpath(spec).is_dir():  # a folder given as the profile, not a profile's name
        raise ProfileError(_a_directory(spec))
    names = ", ".join(sorted(candidates)) or "none"
    where = ", ".join(str(d) for d in search_dirs(rootdir))
    raise ProfileError(f"unknown profile {spec!r}{did_you_mean(spec, sorted(candidates))}; available profiles: "
                       f"{names} (searched {where}; `gpufabric profile list` lists them)")


# --- loading ------------------------------------------------------------------------------------------


@functools.cache
def _yaml_loader(yaml):
    """PyYAML's safe loader with YAML 1.2's booleans: only true and false. YAML 1.1 also reads on/off/yes/no as
    booleans, so `iommu: off` (a value the schema names) arrived as False and failed validation. Made per ``yaml``
    module object: its errors must be the classes the caller catches, also where a module was imported again."""
    import re

    class ProfileLoader(yaml.SafeLoader):
        pass

    bool_tag = "tag:yaml.org,2002:bool"
    ProfileLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    ProfileLoader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return ProfileLoader


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile: {exc.strerror}", path=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"not UTF-8 text (byte {exc.start}): a profile is a YAML file", path=str(path)) from None
    try:
        # a safe loader with YAML 1.2's booleans, refusing aliases and keys named twice (formats/strict.py)
        doc = load_yaml_text(text, loader=_yaml_loader(yaml))
    except StrictReadError as exc:
        raise ProfileError(str(exc), path=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"not valid YAML{where}: {problem}", path=str(path)) from None
    except (ValueError, IndexError, TypeError, OverflowError) as exc:
        # a value PyYAML's constructors cannot build: an integer of more digits than Python converts ("a: 1111...1",
        # 4,301 of them), an explicitly tagged empty scalar ("!!int" alone: IndexError inside PyYAML)
        detail = "an empty value under an explicit YAML tag (!!int, !!float, ...)" if isinstance(exc, IndexError) \
            else str(exc)[:120] or type(exc).__name__
        raise ProfileError(f"not a value a profile can hold: {detail}", path=str(path)) from None
    except RecursionError:  # "[{a: [{a: [...": YAML's parser recurses once per level
        raise ProfileError("not a profile: the YAML nests deeper than any profile does", path=str(path)) from None
    if not isinstance(doc, dict):
        raise ProfileError("a profile is a YAML mapping (name:, gpus:, ...)", path=str(path), json_path="$")
    _reject_non_string_keys(doc, path, [])
    return doc


def _reject_non_string_keys(node: object, path: Path, where: list, seen: frozenset = frozenset()) -> None:
    """YAML reads `0: X` as an integer key, which JSON Schema's key patterns do not see: say so here. An alias
    that contains itself (`a: &a [*a]`) has no end, and no profile has one."""
    if isinstance(node, (dict, list)):
        if id(node) in seen:
            raise ProfileError("a YAML alias refers to itself (&anchor inside its own value)", path=str(path),
                               json_path=_json_path(where))
        seen = seen | {id(node)}
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise ProfileError(f"key {key!r} is a {type(key).__name__}; write it as a name such as GPU{key}"
                                   if isinstance(key, int) else f"key {key!r} is not a string",
                                   path=str(path), json_path=_json_path(where))
            _reject_non_string_keys(value, path, [*where, key], seen)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _reject_non_string_keys(value, path, [*where, index], seen)


def _schema() -> dict:
    return schema()  # read once, shared with the quantities' walk


def name_pattern() -> str:
    """The regular expression a profile's name matches (the schema's)."""
    return _schema()["properties"]["name"]["pattern"]


@functools.cache
def _validators():
    from jsonschema import Draft202012Validator

    full = Draft202012Validator(_schema())
    # A profile that extends another may leave out what it inherits: its own file is checked without the
    # `required` of its objects; the merged result is checked with it. A `required` that picks a branch of a
    # oneOf/anyOf (one floor or the other) stays: without it every branch would match and oneOf fail.
    return full, Draft202012Validator(_without_required(_schema()))


def _without_required(schema: object) -> object:
    if isinstance(schema, list):
        return [_without_required(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _without_required(value) for key, value in schema.items() if key != "required"}
    for key in ("oneOf", "anyOf"):
        if key in schema:
            out[key] = [{**_without_required(branch), **({"required": branch["required"]} if "required" in branch
                                                           else {})} for branch in schema[key]]
    return out


def validate_document(doc: dict, path: Path, *, partial: bool = False) -> None:
    full, lenient = _validators()
    validator = lenient if partial else full
    errors = sorted(validator.iter_errors(doc), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ProfileError(_message(first) + more, path=str(path), json_path=_json_path(first.absolute_path))
    _check_semantics(doc, path)


def _message(error) -> str:
    """jsonschema's message, said in a profile's terms where it is about a quantity with a unit (issue 32: `memory:
    80` gave "80 is not of type 'string'")."""
    defs = _schema()["$defs"]
    key = next((part for part in reversed(list(error.absolute_path)) if isinstance(part, str)), "")
    above_zero = (error.validator, error.validator_value) in (("exclusiveMinimum", 0), ("minimum", 1))
    if above_zero and key.startswith("min"):
        return not_above_zero(key, error.instance)
    kind = next((k for k in KINDS if error.schema == defs.get(k)), None)
    if kind is None or error.validator not in ("type", "pattern"):
        return error.message
    what, example, units = KINDS[kind].what, KINDS[kind].example, KINDS[kind].units
    value = error.instance
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value} needs a unit: write {what} such as `{example}` (units: {units})"
    return (f"{value!r} does not match the form of {what}: write a positive number and its unit, such as `{example}` "
            f"(units: {units})")


def _more_memory_than_the_model_has(model: str, memory: str) -> str | None:
    """Why a memory promise in GiB fails every healthy board of the model because of its unit, as the accept-time
    check says it (units.memory_as_sold): `80 GiB` on an H100 sold as 80 GB (79.65 GiB as NVML counts, the reference
    catalogue's total). None for any other promise: a figure that is not the sold number may be another SKU's (an
    H100 NVL's 94 GB)."""
    from ..reference import find_reference

    ref = find_reference(model)
    has, sold = getattr(ref, "memory_bytes_nvml", None), getattr(ref, "memory_gb_sold", None)
    promised = parse_bytes(memory)
    if (not isinstance(has, int) or promised <= has or memory_as_sold(promised, has) is None
            or promised >> 30 != sold):
        return None
    return (f"{memory!r} is more than a healthy {ref.name} has ({has} bytes, {has / (1 << 30):.2f} GiB as NVML "
            f"reports it): every such board would fail this promise. The board is sold as {sold:g} GB (1e9 bytes "
            f"each), which it has: promise memory as sold, `memory: {sold:g} GB`, not GiB.")


def _check_semantics(doc: dict, path: Path) -> None:
    """What JSON Schema cannot say: quantities parse, the matrix is square and symmetric, pairs exist."""

    def fail(message: str, json_path: str) -> None:
        raise ProfileError(message, path=str(path), json_path=json_path)

    # every quantity and number wherever the schema puts one: a new section is covered by its schema alone
    for quantity in quantities_in(doc):
        problem = quantity_problem(quantity)
        if problem:
            fail(problem, quantity.json_path)
    for keys, value in numbers_in(doc):
        problem = non_finite_problem(keys, value)
        if problem:
            fail(problem, _json_path(keys))
    gpus = doc.get("gpus", {})
    if isinstance(gpus.get("memory"), str) and isinstance(gpus.get("model"), str):
        more = _more_memory_than_the_model_has(gpus["model"], gpus["memory"])
        if more:
            fail(more, "$.gpus.memory")
    matrix = doc.get("topology", {}).get("matrix", {})
    for row, cells in matrix.items():
        if cells.get(row, "X") != "X":
            fail(f"the diagonal cell must be X, found {cells[row]!r}", f"$.topology.matrix.{row}.{row}")
        for col, label in cells.items():
            if col == row:
                continue
            mirror = matrix.get(col, {}).get(row)
            if col in matrix and mirror is not None and mirror != label:
                fail(
                    f"{row}-{col} is {label!r} but {col}-{row} is {mirror!r}; the matrix is symmetric",
                    f"$.topology.matrix.{row}.{col}",
                )
    count = gpus.get("count")
    if count is not None:
        for i, pair in enumerate(doc.get("pairs", [])):
            for gpu in pair:
                if gpu >= count:
                    fail(f"GPU {gpu} is not among the profile's {count} GPUs", f"$.pairs[{i}]")
        for row in matrix:
            if row.startswith("GPU") and int(row[3:]) >= count:
                fail(f"{row} is not among the profile's {count} GPUs", f"$.topology.matrix.{row}")
        for i, device in enumerate(doc.get("rdma", {}).get("devices", [])):
            for gpu in device.get("gpus", []) if isinstance(device, dict) else []:
                if isinstance(gpu, int) and gpu >= count:
                    fail(f"GPU {gpu} is not among the profile's {count} GPUs (GPU0 to GPU{count - 1})",
                         f"$.rdma.devices[{i}].gpus")


def _merge(base: dict, override: dict) -> dict:
    """Maps merge key by key; anything else (lists, scalars) is replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def canonical_json(doc: dict) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _resolve(path: Path, rootdir: Path | None, seen: tuple[Path, ...]) -> tuple[dict, tuple[Path, ...]]:
    resolved_path = path.resolve()
    if resolved_path in seen:
        cycle = " -> ".join(str(p) for p in (*seen, resolved_path))
        raise ProfileError(f"profiles extend each other in a cycle: {cycle}", path=str(path), json_path="$.extends")
    doc = _read_yaml(path)
    validate_document(doc, path, partial="extends" in doc)
    if "name" not in doc:  # never inherited: a profile that extends another still names itself
        raise ProfileError("'name' is a required property", path=str(path), json_path="$")
    chain = (*seen, resolved_path)
    if "extends" not in doc:
        return doc, chain
    try:
        parent_path = find_profile(doc["extends"], rootdir, relative_to=path.parent)
    except ProfileError as exc:
        raise ProfileError(str(exc), path=str(path), json_path="$.extends") from None
    parent, chain = _resolve(parent_path, rootdir, chain)
    child = {k: v for k, v in doc.items() if k != "extends"}
    return _merge(parent, child), chain


def load_profile(spec: str | Path, rootdir: Path | None = None) -> Profile:
    """Find, read, resolve ``extends`` and validate a profile. Raises ProfileError."""
    path = find_profile(str(spec), rootdir)
    doc, chain = _resolve(path, rootdir, ())
    validate_document(doc, path)
    sha256 = hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()
    return Profile(name=doc["name"], path=path, sha256=sha256, data=doc, chain=chain)
