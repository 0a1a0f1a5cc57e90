"""A promise kind is named in one place: its family under kinds/ and the modules that family declares its own
(``OWN_MODULES``: its check, its suite, its workload, its recording's descriptor). Every other module of the package
reaches a kind through the registry's objects, so a kind's id typed as a string anywhere else fails here; so does
the key of a profile section only a per-GPU diagnostic or the NVLink traffic suite reads (docstrings are prose).

Words that are a kind's id and also mean something else where they stand are listed in SAME_WORD with that meaning.
The sections whose keys are also ordinary words of the package (memory, power, platform, burn_in, bandwidth, rdma,
gpus, topology, nvlink) are not held here: they name measurements, record types and series too."""

from __future__ import annotations

import ast
from pathlib import Path

from pytest_gpufabric import kinds

PACKAGE = Path(kinds.__file__).resolve().parents[1]

#: sections no other word of the package is spelled as
DISTINCT_SECTIONS = ("memory_bandwidth", "memory_pattern", "pcie_load", "nvlink_traffic")

#: (module, word) -> what the word means there, other than the kind
SAME_WORD = {
    **{(module, "nvlinks"): "the NVML record's key for a GPU's links" for module in (
        "fabric/from_text.py", "fabric/nvml.py", "fabric/nvml_record.py", "nodehealth/derive.py",
        "nodehealth/passive.py")},
    ("nodehealth/passive.py", "gpu-count"): "the health check's own finding: a GPU fewer than its baseline",
    ("nodehealth/passive.py", "ecc-mode"): "the health check's own finding: ECC off where the baseline had it on",
    ("formats/dcgm_diag.py", "memory_bandwidth"): "DCGM's name of its memory bandwidth test",
    ("reference_judge.py", "memory_bandwidth"): "DCGM's name of its memory bandwidth test",
}


def _owners() -> dict[str, set[Path]]:
    """Each kind id and distinct section -> the files allowed to name it."""
    owners: dict[str, set[Path]] = {}
    for family in kinds.families():
        home = Path(family.__file__).resolve()
        allowed = {home} if home.name != "__init__.py" else set(home.parent.rglob("*.py"))
        allowed |= {(PACKAGE / own).resolve() for own in getattr(family, "OWN_MODULES", ())}
        for kind in getattr(family, "KINDS", ()):
            for name in (kind.name, *(s for s in kind.sections if s in DISTINCT_SECTIONS)):
                owners.setdefault(name, set()).update(allowed)
    return owners


def _strings(source: str):
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _package() -> dict[Path, str]:
    return {path.resolve(): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}


def _strays(sources: dict[Path, str]) -> list[str]:
    owners = _owners()
    strays = []
    for path, source in sources.items():
        where = path.relative_to(PACKAGE).as_posix()
        for line, text in _strings(source):
            name = text.split("[", 1)[0]
            if name in owners and path not in owners[name] and (where, name) not in SAME_WORD:
                strays.append(f"{where}:{line}: {text!r}")
    return strays


def test_every_kind_and_distinct_section_has_an_owner():
    owners = _owners()
    assert {kind for kind in kinds.promise_kinds()} <= set(owners)
    assert set(DISTINCT_SECTIONS) <= set(owners)


def test_no_module_but_the_kinds_own_names_a_kind():
    strays = _strays(_package())
    assert not strays, "kind ids or sections named outside their family:\n" + "\n".join(strays)


def test_the_guard_finds_a_kind_named_elsewhere():
    """The scan is not vacuous: a module naming a kind's id, or a distinct section, outside its family is found."""
    sources = {**_package(), PACKAGE / "report" / "cover.py": 'WHICH = "hbm-bandwidth[GPU0]"\nKEY = "pcie_load"\n'}
    assert _strays(sources) == ["report/cover.py:1: 'hbm-bandwidth[GPU0]'", "report/cover.py:2: 'pcie_load'"]


def test_each_same_word_is_still_there():
    """An entry of SAME_WORD whose word left its module goes too."""
    for (module, word), _meaning in SAME_WORD.items():
        source = (PACKAGE / module).read_text(encoding="utf-8")
        assert any(text.split("[", 1)[0] == word for _, text in _strings(source)), (module, word)
