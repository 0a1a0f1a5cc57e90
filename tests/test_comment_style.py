"""Comments and docstrings of the package say what and why; the stories of how it got there live in docs/.

Read with ``ast`` (docstrings, function spans) and ``tokenize`` (comments), never by matching code: a string that
holds one of the phrases is data, not a comment. Three rules: a module docstring is at most MODULE_DOC_MAX_LINES
lines (a format or a measurement method goes to docs/, with a link), a comment block inside a function is at most
COMMENT_BLOCK_MAX_LINES lines, and no comment or docstring narrates history (HISTORY).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "pytest_gpufabric"
MODULES = sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)

MODULE_DOC_MAX_LINES = 30
COMMENT_BLOCK_MAX_LINES = 4

#: phrases that tell how the code came to be rather than what it does: the run that found a bug, a session, an
#: issue number, the state before a fix
HISTORY = re.compile(
    r"\bit did,(?= on\b)"
    r"|\bon the first (?:[\w-]+ )?run\b"
    r"|\b(?:last|this|previous) session\b"
    r"|\bwe (?:found|saw|noticed|tried)\b"
    r"|\bturned out\b"
    r"|\bthere used to\b"
    r"|\bissue \d+"
    r"|\b(?:before|after) (?:the|this) fix\b"
    r"|\btook [\d.]+ ?\w* before this\b",
    re.IGNORECASE,
)

#: module -> the history phrases it still holds, for its owners to remove; an entry whose phrase is gone fails,
#: so the list only shrinks
PENDING = {"profile/loader.py": ["issue 32"]}


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _docstrings(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                found.append((node.body[0].lineno, text))
    return found


def _comments(source: str) -> list[tokenize.TokenInfo]:
    return [token for token in tokenize.generate_tokens(io.StringIO(source).readline)
            if token.type == tokenize.COMMENT]


def history_phrases(source: str) -> list[str]:
    """Every history phrase in the comments and docstrings of ``source``, as 'line N: phrase'."""
    texts = _docstrings(ast.parse(source)) + [(token.start[0], token.string) for token in _comments(source)]
    return [f"line {line + text[:match.start()].count(chr(10))}: {match.group(0)}"
            for line, text in sorted(texts) for match in HISTORY.finditer(text)]


def long_comment_blocks(source: str) -> list[str]:
    """Runs of more than COMMENT_BLOCK_MAX_LINES whole-line comments inside a function, as 'line N: K lines'."""
    tree = ast.parse(source)
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = [token.start[0] for token in _comments(source)
             if token.line.lstrip().startswith("#") and token.start[0] in in_function]
    blocks: list[list[int]] = []
    for line in lines:
        if blocks and blocks[-1][-1] == line - 1:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return [f"line {block[0]}: {len(block)} lines" for block in blocks if len(block) > COMMENT_BLOCK_MAX_LINES]


def module_doc_lines(source: str) -> int:
    text = ast.get_docstring(ast.parse(source), clean=False)
    return len(text.splitlines()) if text else 0


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_docstrings_are_short(path: Path):
    assert module_doc_lines(path.read_text(encoding="utf-8")) <= MODULE_DOC_MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_comment_blocks_inside_functions_are_short(path: Path):
    assert long_comment_blocks(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_comments_and_docstrings_tell_no_history(path: Path):
    found = [hit.split(": ", 1)[1] for hit in history_phrases(path.read_text(encoding="utf-8"))]
    assert found == PENDING.get(_name(path), [])


def test_every_pending_module_exists():
    assert [name for name in PENDING if not (PACKAGE / name).is_file()] == []


@pytest.mark.parametrize(("source", "found"), [
    ("x = 1  # would loop for ever (it did, on the first 10-minute run)\n",
     ["line 1: it did,", "line 1: on the first 10-minute run"]),
    ('"""The check a scheduler runs (issue 34)."""\n', ["line 1: issue 34"]),
    ('def f():\n    """One.\n\n    A Ctrl-C there used to cut that short."""\n', ["line 4: there used to"]),
    ("# a 60 s one took 142 s before this\n# as we found last session\n",
     ["line 1: took 142 s before this", "line 2: we found", "line 2: last session"]),
    # legitimate words: an outcome "as it did", runs, sessions of processes, what was read
    ('"""Why a promise ended as it did, whole; stopped: why the run ended early, if it did."""\n', []),
    ("# SIGTERM to the whole session; the first runs import torch; what was read, where it was\n", []),
    ('MESSAGE = "it did, on the first run"  # a string is data, not a comment\n', []),
])
def test_the_history_rule_finds_these_phrases_and_nothing_else(source: str, found: list[str]):
    assert history_phrases(source) == found


def test_the_block_rule_counts_whole_line_comments_inside_functions_only():
    def block(lines: int) -> str:
        return "".join(f"    # line {n}\n" for n in range(lines))

    assert long_comment_blocks(f"def f():\n{block(5)}    return 1\n") == ["line 2: 5 lines"]
    assert long_comment_blocks(f"def f():\n{block(4)}    return 1\n") == []
    assert long_comment_blocks("".join(f"# module note {n}\n" for n in range(6)) + "x = 1\n") == []
