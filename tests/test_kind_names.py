"""A promise kind is named in one place: its family under kinds/ and the modules that family declares its own
(``OWN_MODULES``: its check, its suite, its workload, its recording's descriptor). Every other module of the package
reaches a kind through the registry's objects, so a kind's id typed as a string anywhere else fails here; so does
the key of any profile section a kind declares (``Kind.sections``; docstrings are prose).

A section is read through the profile's typed view (profile/model.py's Profile properties and methods) or through
its family's declaration (``SECTION``). The profile format's own modules, the "schema part" of every kind, may name
every section: profile/ (the loader and its JSON Schema, the typed quantities, the typed view, the schema's page and
the writers of `gpufabric profile init` and `--measure`), the one layer below kinds/ that knows what a profile holds.

Two rules hold a section key:

- the key as a string outside its owners, unless SAME_WORD lists that (module, word) with what the word means there
  instead (a measurement's or a marker's name, a recording's file or record key, another tool's test name, ...);
- the key indexing a profile outside its owners, whatever SAME_WORD says: a subscript, ``.get``/``.pop``/
  ``.quantity``/``.setdefault`` or ``in`` on an expression whose source mentions ``profile``
  (``profile.data["memory"]``, ``profile_data.get("rdma")``).

"gpus" is held by the second rule only: it is nearly everywhere the key of an NVML, health or results record.
A profile read or written through a name that does not say so (``doc["bandwidth"]`` in the fleet's golden profile)
is held by the first rule alone, so SAME_WORD lists no such use: each entry was judged by reading its line.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_gpufabric import kinds

PACKAGE = Path(kinds.__file__).resolve().parents[1]

#: the profile format's own modules: they may name every section
PROFILE_FORMAT = tuple(sorted(path.resolve() for path in (PACKAGE / "profile").glob("*.py")))

#: section keys held by the second rule only (the key indexing a profile): elsewhere they are record keys
RECORD_WORDS = ("gpus",)

#: the calls that index a mapping by their first argument
_INDEXING_CALLS = ("get", "pop", "setdefault", "quantity")

_MEASUREMENT = "the measurement's name (measurements.REGISTRY, FabricSession.measurement)"
_MARKER = "the pytest marker's name (@pytest.mark.{})"
_PARSE_READER = "the `gpufabric parse` reader's name"
_DCGM_MEMORY = "DCGM's name of its memory test"

#: (module, word) -> what the word means there, other than the kind or the profile section
SAME_WORD = {
    **{(module, "nvlinks"): "the NVML record's key for a GPU's links" for module in (
        "fabric/from_text.py", "fabric/nvml.py", "fabric/nvml_record.py", "nodehealth/derive.py",
        "nodehealth/passive.py")},
    ("nodehealth/passive.py", "gpu-count"): "the health check's own finding: a GPU fewer than its baseline",
    ("nodehealth/passive.py", "ecc-mode"): "the health check's own finding: ECC off where the baseline had it on",
    ("formats/nvidia_smi_q.py", "bandwidth"): "the XML tag of the fabric health's bandwidth state (<fabric><health>)",
    ("formats/nvidia_smi_text.py", "memory"): "the regular expression's group of a process's memory in the table",
    ("nodehealth/passive.py", "nvlink"): "the nvlink-state finding's fault word in the scheduler's drain reason",
    ("formats/dcgm_diag.py", "memory_bandwidth"): "DCGM's name of its memory bandwidth test",
    ("reference_judge.py", "memory_bandwidth"): "DCGM's name of its memory bandwidth test",
    ("formats/dcgm_diag.py", "memory"): _DCGM_MEMORY,
    ("kinds/evidence.py", "memory"): _DCGM_MEMORY,
    ("kinds/memory_pattern/__init__.py", "memory"): _DCGM_MEMORY + " (the kind's equivalent)",
    ("kinds/base.py", "burn_in"): "the part of the acceptance the operator asks for (--gpu-burn-in)",
    ("cli/machine.py", "nvlink"): "nvidia-smi's subcommand",
    ("cli/parse.py", "nvlink"): _PARSE_READER,
    ("cli/reference.py", "memory"): "a column heading of the published figures: the GPU's memory size",
    ("fabric/bundle.py", "bandwidth"): "what bandwidth.json holds, in the bundle reader's messages",
    ("fabric/platform_record.py", "platform"): "the bundle's folder of platform files",
    ("report/provenance.py", "platform"): "the bundle's folder of platform files",
    ("fleet/analysis.py", "burn_in"): "the fleet node record's key of its burn-in",
    ("fleet/html_cells.py", "burn_in"): "the fleet node record's key of its burn-in",
    ("formats/records.py", "memory"): "the memory.json recording's name",
    ("report/sections.py", "memory"): "the report's section of the memory measurement",
    ("report/results_document.py", "burn_in"): "the results document's key of the burn-in",
    ("report/html.py", "burn_in"): "the results document's key of the burn-in",
    ("report/figures.py", "nvlink"): "a results series' name (report/series.py)",
    ("report/figures.py", "memory"): "a results series' name (report/series.py)",
    ("report/figures.py", "power"): "a chart's name and a series of samples",
    ("report/figures.py", "bandwidth"): "a chart group's name",
    ("report/series.py", "nvlink"): "a results series' name, and the measurement it comes from",
    ("report/series.py", "memory"): "a results series' name, and the measurement it comes from",
    ("report/series.py", "bandwidth"): "a results series' name",
    ("reference_normal.py", "nvlink"): "the basis a published figure is normalised to",
    ("reference_normal.py", "memory"): "the basis a published figure is normalised to",
    ("reference_judge.py", "memory"): "the basis a published figure is normalised to",
    ("markers.py", "nvlink"): _MARKER.format("nvlink"),
    ("markers.py", "rdma"): _MARKER.format("rdma"),
    ("promise.py", "rdma"): _MARKER.format("rdma"),
    ("kinds/nvlink_traffic.py", "nvlink"): _MEASUREMENT + " of the training traffic",
}


def _owners() -> dict[str, set[Path]]:
    """Each kind id and section -> the files allowed to name it."""
    owners: dict[str, set[Path]] = {}
    for family in kinds.families():
        home = Path(family.__file__).resolve()
        allowed = {home} if home.name != "__init__.py" else set(home.parent.rglob("*.py"))
        allowed |= {(PACKAGE / own).resolve() for own in getattr(family, "OWN_MODULES", ())}
        for kind in getattr(family, "KINDS", ()):
            owners.setdefault(kind.name, set()).update(allowed)
            for section in kind.sections:
                owners.setdefault(section, set()).update(allowed | set(PROFILE_FORMAT))
    return owners


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _strings(source: str):
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _key(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _profile_indexes(source: str):
    """(line, key) of each string key indexing an expression whose source mentions a profile."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            key, indexed = _key(node.slice), node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _INDEXING_CALLS and node.args):
            key, indexed = _key(node.args[0]), node.func.value
        elif (isinstance(node, ast.Compare) and len(node.ops) == 1
              and isinstance(node.ops[0], (ast.In, ast.NotIn))):
            key, indexed = _key(node.left), node.comparators[0]
        else:
            continue
        if key is not None and "profile" in ast.unparse(indexed).lower():
            yield node.lineno, key


def _package() -> dict[Path, str]:
    return {path.resolve(): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}


def _strays(sources: dict[Path, str]) -> list[str]:
    owners = _owners()
    sections = {section for kind in kinds.promise_kinds().values() for section in kind.sections}
    strays = []
    for path, source in sources.items():
        where = path.relative_to(PACKAGE).as_posix()
        for line, text in _strings(source):
            name = text.split("[", 1)[0]
            if (name in owners and name not in RECORD_WORDS and path not in owners[name]
                    and (where, name) not in SAME_WORD):
                strays.append(f"{where}:{line}: {text!r}")
        for line, key in _profile_indexes(source):
            if key in sections and path not in owners[key]:
                strays.append(f"{where}:{line}: {key!r} indexes a profile")
    return sorted(set(strays), key=lambda stray: (stray.split(":")[0], int(stray.split(":")[1]), stray))


def test_every_kind_and_section_has_an_owner():
    owners = _owners()
    assert set(kinds.promise_kinds()) <= set(owners)
    assert set(kinds.claimed_sections()) <= set(owners)
    assert set(RECORD_WORDS) <= set(kinds.claimed_sections())


def test_no_module_but_the_kinds_own_names_a_kind_or_a_section():
    strays = _strays(_package())
    assert not strays, "kind ids or sections named outside their family:\n" + "\n".join(strays)


def test_the_guard_finds_a_kind_or_a_section_named_elsewhere():
    """The scan is not vacuous: a kind's id, a section's key, and a section indexing a profile (even a word SAME_WORD
    lists for that module, or "gpus") outside their family are found."""
    sources = {**_package(),
               PACKAGE / "report" / "cover.py": 'WHICH = "hbm-bandwidth[GPU0]"\nKEY = "pcie_load"\nX = "topology"\n'
                                                'N = len(profile.data["gpus"])\n',
               PACKAGE / "markers.py": 'RATE = fabric_session.profile.data.get("rdma", {})\n'
                                       'ASKED = "burn_in" in profile_data\n'}
    assert _strays(sources) == [
        "markers.py:1: 'rdma' indexes a profile", "markers.py:2: 'burn_in'",
        "markers.py:2: 'burn_in' indexes a profile",
        "report/cover.py:1: 'hbm-bandwidth[GPU0]'", "report/cover.py:2: 'pcie_load'", "report/cover.py:3: 'topology'",
        "report/cover.py:4: 'gpus' indexes a profile"]


def test_the_profile_format_may_name_every_section():
    """The typed view reads the sections by their keys: the profile format is every kind's schema part."""
    assert (PACKAGE / "profile" / "model.py").resolve() in PROFILE_FORMAT
    assert any(text == "topology" for _, text in _strings((PACKAGE / "profile" / "model.py").read_text()))
    assert not [s for s in _strays(_package()) if s.startswith("profile/")]


def test_each_same_word_is_still_there():
    """An entry of SAME_WORD whose word left its module goes too."""
    for (module, word), _meaning in SAME_WORD.items():
        source = (PACKAGE / module).read_text(encoding="utf-8")
        assert any(text.split("[", 1)[0] == word for _, text in _strings(source)), (module, word)
