"""The package's import graph: no circle, and no import running up the layers of pytest_gpufabric/layers.py.

Every module's imports are read from its source with ast: at module level, inside functions and under
``if TYPE_CHECKING:`` (an import for annotations still ties the two modules' designs together), relative and
absolute, ``from . import x`` resolved to the module x. Literal strings that name a module of the package
("pytest_gpufabric.checks.hbm:measured_hbm", ``importlib.import_module("pytest_gpufabric.x")``) are read as
late-bound edges: listed and held apart, since a registry loading a function by name is a dependency too.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

from pytest_gpufabric.layers import LAYERS, RESERVED

PACKAGE = "pytest_gpufabric"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
TOP = "__init__"  # the package's own __init__.py, by its name in layers.py


def _name_of(path: Path) -> str:
    """A module's name in layers.py: "fabric.nvml", "fabric" for fabric/__init__.py, "__init__" for the top's."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


MODULES = {_name_of(path): path for path in sorted(ROOT.rglob("*.py"))}


def _resolve(dotted: str) -> str | None:
    """The package's module a dotted name names (its longest existing prefix), None outside the package."""
    if dotted != PACKAGE and not dotted.startswith(PACKAGE + "."):
        return None
    name = dotted[len(PACKAGE) + 1:]
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or TOP


def _base_of(module: str, is_package: bool) -> list[str]:
    """The dotted parts a relative import of level 1 starts from: the module's package."""
    here = [PACKAGE] if module == TOP else [PACKAGE, *module.split(".")]
    return here if is_package or module == TOP else here[:-1]


#: a literal string naming a module of the package, with a function after a colon or not
_MODULE_STRING = re.compile(rf"^({PACKAGE}(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?::[A-Za-z_][A-Za-z0-9_]*)?$")


def _imports(module: str, source: str, is_package: bool = False) -> tuple[dict[str, int], dict[str, int]]:
    """(the package's modules ``module`` imports -> the first line that does, those a literal string names -> its
    line). Imports anywhere count: module level, functions, ``if TYPE_CHECKING:``."""
    imported: dict[str, int] = {}
    named: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _base_of(module, is_package)
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from .fabric import nvml` imports a module; `from .fabric.nvml import query` a name of one
            targets = [f"{prefix}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_STRING.match(node.value):
            target = _resolve(_MODULE_STRING.match(node.value).group(1))
            if target is not None and target != module:
                named.setdefault(target, node.lineno)
            continue
        else:
            continue
        for target in filter(None, map(_resolve, targets)):
            if target != module:
                imported[target] = min(imported.get(target, node.lineno), node.lineno)
    return imported, named


_READ = {module: _imports(module, path.read_text(encoding="utf-8"), path.name == "__init__.py")
         for module, path in MODULES.items()}
#: module -> {imported module -> line}
GRAPH = {module: imported for module, (imported, _) in _READ.items()}
#: module -> {module a literal string names -> line}: registries that load a function by its name
LATE_BOUND = {module: named for module, (_, named) in _READ.items() if named}


def _layers_of(module: str) -> list[int]:
    return [index for index, (_, patterns) in enumerate(LAYERS)
            if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns)]


def _layer(module: str) -> int:
    return _layers_of(module)[0]


def _cycles(graph: dict[str, dict[str, int] | set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each an import circle, sorted."""
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


def _circle_through(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """One circle inside a strongly connected ``component``, each step with the line of its import."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first: the shortest way back to the start
        following = []
        for module in frontier:
            for target in sorted(graph.get(module, ())):
                if target == start:
                    steps = [*paths[module], start]
                    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(steps)) + f" -> {start}"
                if target in members and target not in paths:
                    paths[target] = [*paths[module], target]
                    following.append(target)
        frontier = following
    return " -> ".join(component)


def _upward(graph: dict[str, dict[str, int]]) -> list[str]:
    return sorted(f"{module} [{LAYERS[_layer(module)][0]}] -> {target} [{LAYERS[_layer(target)][0]}] (line {line})"
                  for module, targets in graph.items() for target, line in targets.items()
                  if _layer(target) > _layer(module))


# --- the reader ------------------------------------------------------------------------------------------------


def test_the_reader_resolves_every_form_of_import():
    """Relative and absolute, at module top, inside functions and for annotations, a module or a name of one."""
    source = ("import json\n"
              "from typing import TYPE_CHECKING\n"
              "from ..units import GIB\n"
              "from . import nvml\n"
              "import pytest_gpufabric.errors\n"
              "if TYPE_CHECKING:\n"
              "    from ..session import FabricSession\n"
              "def f():\n"
              "    from ..checks.result import passed\n"
              "    from pytest_gpufabric.formats import topo\n")
    imported, _ = _imports("fabric.model", source)
    assert set(imported) == {"units", "fabric.nvml", "errors", "session", "checks.result", "formats.topo"}
    assert imported["session"] == 7 and imported["checks.result"] == 9
    imported, _ = _imports("fabric", "from .model import Fabric\nfrom .. import units\nfrom . import nvml\n",
                           is_package=True)
    assert set(imported) == {"fabric.model", "units", "fabric.nvml"}
    imported, _ = _imports(TOP, "from . import units\nfrom pytest_gpufabric import __version__\n")
    assert set(imported) == {"units"}  # its own __version__ is no edge


def test_the_reader_lists_module_names_in_strings():
    source = ('LAUNCH = "pytest_gpufabric.workloads.diagnostics:launch_hbm"\n'
              'importlib.import_module("pytest_gpufabric.checks.hbm")\n'
              'TEXT = "pytest_gpufabric is a plugin"\n')
    imported, named = _imports("diagnostics", source)
    assert imported == {} and named == {"workloads.diagnostics": 1, "checks.hbm": 2}


def test_the_cycle_finder_finds_a_circle_and_shows_it():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _circle_through(["a", "b", "c"], graph) == "a (line 1) -> b (line 2) -> c (line 3) -> a"


# --- the layers ------------------------------------------------------------------------------------------------


def test_every_module_is_in_exactly_one_layer():
    unplaced = sorted(m for m in MODULES if not _layers_of(m))
    twice = {m: [LAYERS[i][0] for i in _layers_of(m)] for m in MODULES if len(_layers_of(m)) > 1}
    assert not unplaced, f"give these modules a layer in pytest_gpufabric/layers.py: {unplaced}"
    assert not twice, f"modules that several layers name: {twice}"


def test_every_pattern_of_the_layers_names_a_module():
    """A pattern that names no module is left over from a move (only the kinds' registry is still to come)."""
    stale = [(name, pattern) for name, patterns in LAYERS for pattern in patterns
             if pattern not in RESERVED and not any(fnmatch.fnmatchcase(m, pattern) for m in MODULES)]
    assert not stale, f"patterns in pytest_gpufabric/layers.py that name no module: {stale}"


def test_the_layers_are_few_and_named_once():
    names = [name for name, _ in LAYERS]
    assert len(names) == len(set(names)) and 8 <= len(names) <= 12, names
    assert names.index("checks") < names.index("kinds") < names.index("promises") < names.index("report")


def test_no_import_circle():
    circles = [_circle_through(component, GRAPH) for component in _cycles(GRAPH)]
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_no_import_runs_up_the_layers():
    upward = _upward(GRAPH)
    assert not upward, "imports running up the layers (pytest_gpufabric/layers.py):\n" + "\n".join(upward)


#: the module names in strings that run up a layer or close a circle, each the registry of per-GPU diagnostics
#: (diagnostics.py) naming its launcher and its measure function by string; the promise kinds' registry (kinds/,
#: above checks/) is to own both ends, and this set is to shrink to nothing, never to grow
KNOWN_LATE_BOUND_UPWARD: set[tuple[str, str]] = set()


def test_module_names_in_strings_name_real_functions():
    """Every "pytest_gpufabric.x:f" a module holds names a module that exists and a function it defines."""
    broken = []
    for module, path in MODULES.items():
        if module not in LATE_BOUND:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value \
                    and _MODULE_STRING.match(node.value):
                dotted, function = node.value.split(":")
                target = MODULES.get(dotted[len(PACKAGE) + 1:])
                defined = target is not None and re.search(rf"^def {function}\(", target.read_text(encoding="utf-8"),
                                                           re.MULTILINE)
                if not defined:
                    broken.append(f"{module} (line {node.lineno}): {node.value}")
    assert not broken, f"strings naming no function: {broken}"


def test_module_names_in_strings_run_up_only_where_known():
    """With the strings read as edges, what runs up or closes a circle is exactly the known set."""
    joined = {module: {**GRAPH[module], **LATE_BOUND.get(module, {})} for module in GRAPH}
    in_circles = {(module, target) for component in _cycles(joined) for module in component
                  for target in LATE_BOUND.get(module, {}) if target in component}
    upward = {(module, target) for module, targets in LATE_BOUND.items() for target in targets
              if _layer(target) > _layer(module)}
    assert upward | in_circles == KNOWN_LATE_BOUND_UPWARD, (
        f"new: {sorted((upward | in_circles) - KNOWN_LATE_BOUND_UPWARD)}; "
        f"gone (drop them from the known set): {sorted(KNOWN_LATE_BOUND_UPWARD - (upward | in_circles))}")


def test_package_inits_import_nothing_of_the_package():
    """Importing a module runs its package's __init__ first: one that imported siblings would hide edges. cli's is
    the `gpufabric` command's entry (cli:main), imported by nothing of the package. A package whose __init__ and
    every module below it sit in one layer (the promise kinds: the registry, each kind's declaration) hides no edge
    across layers: what its __init__ imports is held to that layer like any of its modules."""
    busy = {m: sorted(GRAPH[m]) for m, p in MODULES.items() if p.name == "__init__.py" and GRAPH[m] and m != "cli"
            and not _one_layer(m)}
    assert not busy, f"package __init__ modules that import the package: {busy}"


def _one_layer(package: str) -> bool:
    below = [m for m in MODULES if m == package or m.startswith(package + ".")]
    return len({_layer(m) for m in below}) == 1


def test_the_bundle_finder_knows_every_recording():
    """fabric/bundle.py names the measurements' recordings itself (it sits below measurements.py): one list."""
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
