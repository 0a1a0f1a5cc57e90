"""The package's floors: no import circle between its modules, and imports run down the layers.

Every module's imports are read from its source (ast: imports inside functions count too, since a function-level
import is still a dependency, only a later one), resolved to the package's modules, and checked against the layer
order below. A new module gets its floor here on purpose: one that no layer names fails the test.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = "pytest_gpufabric"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

#: bottom up. A module may import its own layer and those below it. A name is a module or a package (all its
#: modules); "" is the package's own __init__.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # option_values.py: the checks of option values every command and the plugin share
    # remedy_classes.py: the names of the remedies, which the health check's findings use too
    ("base", ("", "units", "errors", "paths", "verdict", "selection", "hookspecs", "option_values", "remedy_classes")),
    # what other tools print and what the plugin records, with the machine's per-board records they fill;
    # evidence.py reads other tools' files of a bundle, reference.py the published GPU figures; diagnostics.py
    # declares each per-GPU diagnostic (formats/records.py reads its records by it)
    ("formats", ("formats", "evidence", "reference", "diagnostics")),
    # the health check's record of a node: read live or from a bundle (nodehealth/record.py, derive.py)
    ("fabric", ("fabric", "nodehealth.record", "nodehealth.derive", "nodehealth.arrival_record")),
    ("workloads", ("workloads",)),
    ("measurements", ("measurements",)),
    ("profile", ("profile",)),
    # the health check's findings, judged from the record (the acceptance's arrival promises judge with them)
    ("checks", ("checks", "reference_judge", "reference_normal", "nodehealth.finding", "nodehealth.model",
                "nodehealth.passive", "nodehealth.arrival")),
    # records.py: each check record bound to its promise, into the session or a worker's journal
    ("promises", ("catalogue", "promise", "rejudge", "markers", "watchdog", "parametrize", "records")),
    ("suites", ("suites",)),
    ("report", ("report", "remedy", "remedy_rules")),
    ("fleet", ("fleet",)),
    ("session", ("session", "run_options")),
    ("entry", ("plugin", "fixtures", "cli", "command", "__main__", "nodehealth")),
]

#: the imports allowed to run up, as (importing module, the layer it reaches up into), each with why
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    """Dotted name below the package ("fabric.nvml", "" for its __init__) -> file."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(dotted: str) -> str | None:
    """The package's module a dotted import names (its longest existing prefix), None outside the package."""
    if dotted != PACKAGE and not dotted.startswith(PACKAGE + "."):
        return None
    name = dotted[len(PACKAGE) + 1:]
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` (or typing.TYPE_CHECKING): imports for annotations only, never run."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, source: str, is_package: bool = False) -> set[str]:
    """The package's modules ``module`` imports, anywhere in its ``source``."""
    here = [PACKAGE, *module.split(".")] if module else [PACKAGE]
    out = set()
    tree = ast.parse(source)
    annotations_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                        for sub in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from .fabric import nvml` imports a module; `from .fabric.nvml import query` a name of one
            targets = [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        out.update(t for t in map(_resolve, targets) if t is not None and t != module)
    return out


GRAPH = {module: _imports(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
         for module, path in MODULES.items()}


def _layer(module: str) -> int | None:
    for index, (_, names) in enumerate(LAYERS):
        if any(module == n or (n and module.startswith(n + ".")) for n in names):
            return index
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_reader_resolves_every_form_of_import():
    """Relative and absolute, at module top and inside functions, a module or a name of one."""
    source = ("import json\n"
              "from ..units import GIB\n"
              "from . import nvml\n"
              "import pytest_gpufabric.errors\n"
              "def f():\n"
              "    from ..checks.result import passed\n"
              "    from pytest_gpufabric.formats import topo\n")
    assert _imports("fabric.model", source) == {"units", "fabric.nvml", "errors", "checks.result", "formats.topo"}
    assert _imports("fabric", "from .model import Fabric\nfrom .. import units\n", is_package=True) == {
        "fabric.model", "units"}
    annotations = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..session import FabricSession\n"
    assert _imports("fabric.model", annotations) == set()


def test_every_module_has_a_floor():
    unplaced = sorted(m for m in MODULES if _layer(m) is None)
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"


#: package __init__ modules that are entry points, imported by nothing of the package: `gpufabric` is cli:main
ENTRY_PACKAGES = {"cli"}


def test_package_inits_import_nothing_of_the_package():
    """Importing a module runs its package's __init__ first: one that imported siblings would hide edges."""
    busy = {m: sorted(GRAPH[m]) for m, p in MODULES.items()
            if p.name == "__init__.py" and GRAPH[m] and m not in ENTRY_PACKAGES}
    assert not busy, f"package __init__ modules that import the package: {busy}"


def test_no_import_circle():
    circles = _cycles(GRAPH)
    assert not circles, f"import circles: {circles}"


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_run_down_the_layers():
    upward = {}
    for module, targets in GRAPH.items():
        for target in targets:
            if _layer(target) > _layer(module):
                upward.setdefault((module, LAYERS[_layer(target)][0]), []).append(target)
    unexpected = {key: sorted(targets) for key, targets in upward.items() if key not in ALLOWED_UPWARD}
    assert not unexpected, f"imports running up the layers: {unexpected}"
    assert len(ALLOWED_UPWARD) <= 1
    assert set(upward) == ALLOWED_UPWARD, "an allowed upward import that no longer runs up: drop it"


def test_the_bundle_finder_knows_every_recording():
    """fabric/bundle.py names the measurements' recordings itself (it may not import measurements.py): one list."""
    from pytest_gpufabric.fabric.bundle import RECORDING_FILES
    from pytest_gpufabric.measurements import REGISTRY

    assert sorted(RECORDING_FILES) == sorted(m.record_file for m in REGISTRY.values() if m.record_file)


def test_importing_the_plugin_imports_no_heavy_module():
    """The plugin's entry, as pytest loads it in any project, imports no NVML, YAML, schema or torch."""
    code = ("import sys, pytest_gpufabric.plugin; "
            "print(sorted(m for m in ('pynvml', 'yaml', 'jsonschema', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
