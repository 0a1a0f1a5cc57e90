"""reports/gpufabric-results.json: the run's results for pipelines, written atomically.

Its shape is ``results.schema.json`` (JSON Schema draft 2020-12, shipped in the package). The results are
written without validating them first: a run never loses its results to a schema problem; the tests
validate every document they produce.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from ..errors import GpuFabricError
from ..units import finite_or_none

SCHEMA_PATH = Path(__file__).with_name("results.schema.json")
#: the results format a run writes (results.schema.json says what each version holds); 4: each check record
#: names the promise it judges and the verdict is made from them, and a live run names its host and boot
RESULTS_SCHEMA_VERSION = 4


def json_default(value: object) -> object:
    """For json.dump: NA prints as "N/A", Paths as text."""
    return str(value)


def json_text(document: object, indent: int | None = 2) -> str:
    """Strict JSON: a number that is not finite is written as null (json.dumps would write the NaN and Infinity
    tokens, which jq, Go and JavaScript refuse); the checks never judged it (units.non_finite)."""
    try:
        return json.dumps(document, indent=indent, default=json_default, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: the rare case pays for the copy
        return json.dumps(finite_or_none(document), indent=indent, default=json_default, allow_nan=False)


def write_json(document: dict, path: Path) -> Path:
    """Write via a temporary file, on disk before it is renamed over the old one: a reader, or a machine that
    lost power, never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json_text(document)
    fd, tmp = tempfile.mkstemp(prefix=".gpufabric-results.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, published_mode())  # mkstemp makes it 0600: a pipeline running as another user must read it
        os.replace(tmp, path)
    except BaseException:
        # a full disk, or Ctrl-C mid-write: the old file stays whole, and no half-written copy is left beside it
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def published_mode() -> int:
    """The mode a plain ``open(path, "w")`` gives: 0666 less the user's umask (0644 under the usual 022)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def check_writable_dir(directory: Path) -> None:
    """Make ``directory`` if needed and write a file in it, or raise GpuFabricError saying why not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise GpuFabricError(f"cannot write results to {directory}: {exc.strerror or exc}") from None


def results_schema() -> dict:
    """The JSON Schema of the results document."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def results_validator(definition: str | None = None):
    """A draft 2020-12 validator of a whole results document, or of one of its parts (``definition``: a name
    under the schema's ``$defs``, e.g. "machine" or "check")."""
    from jsonschema import Draft202012Validator

    schema = results_schema()
    if definition is not None:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_errors(document: object, definition: str | None = None) -> list[str]:
    """What in ``document`` the schema does not allow, one line each ('at $.summary: ...'); [] when valid."""
    errors = results_validator(definition).iter_errors(document)
    return [f"at {error.json_path}: {error.message}" for error in sorted(errors, key=lambda e: e.json_path)]


def nccl_versions(measured: dict) -> list[str]:
    """The NCCL versions any of the run's measurements recorded (``nccl_version`` keys, at any depth)."""
    found: list[str] = []

    def walk(value: object, depth: int) -> None:
        if depth > 5 or len(found) > 8:
            return
        if isinstance(value, dict):
            version = value.get("nccl_version")
            if isinstance(version, (str, int, float)) and str(version) and str(version) not in found:
                found.append(str(version))
            for item in list(value.values())[:50]:
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value[:50]:
                walk(item, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (type, BaseException)):
            walk(vars(value), depth + 1)

    try:
        for value in list(measured.values()):
            walk(value, 0)
    except Exception:  # a report section must never break the run
        return found
    return found
