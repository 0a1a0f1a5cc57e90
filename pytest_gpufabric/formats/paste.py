"""What a person pastes around a tool's output, so the parsers can step over it and read the output itself.

Outputs reach this plugin from support tickets, chat, wikis and README files as often as from a bundle: with the
shell prompt and the command line above them (``root@node:~# nvidia-smi topo -m``, ``$ nvidia-smi nvlink -s -i
0``, ``> nvidia-smi topo --matrix``), in Markdown fences, with the loop that printed them and its banners
(``for i in ...; do``, ``=== GPU 0 ===``), with ``...`` where the author cut a repetitive part, and indented as a
whole. None of that is the tool's output; all of it is recognisable by its shape. Anything else a parser does not
expect stays an error naming its line: a wrong file must never read as an empty or partial machine.
"""

from __future__ import annotations

import re

__all__ = ["ANSI", "command_program", "paste_noise"]

#: Recent drivers underline nvidia-smi's headers with ``ESC[4m`` ... ``ESC[0m`` even when stdout is not a terminal.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

#: Programs whose command lines appear above the outputs read here (``sudo``, ``env``, launchers, paths allowed).
_PROGRAMS = r"nvidia-smi|[A-Za-z][\w-]*_perf|ib_\w+_(?:bw|lat)|ibv_devinfo|mpirun|mpiexec|srun|torchrun|docker|kubectl"
#: A shell prompt: optional "(venv) ", then "user@host:path", "[user@host dir]" or nothing, then $ # % or >, in front
#: of the command (a space after it is usual but some prompts, and emoji themes, have none).
_PROMPT = r"(?:\([^)]*\)\s*)?(?:[\w.-]+@[\w.-]+(?::\S*)?\s*|\[[^\]]*\]\s*|\S*\s+)?[$#%>]\s*"
_WRAPPERS = r"(?:(?:sudo|env|time|nohup)(?:\s+-\S+)*\s+|[A-Z_][A-Z0-9_]*=\S*\s+)*"
_COMMAND_LINE = re.compile(rf"^\s*`*(?:{_PROMPT})?`*{_WRAPPERS}(?P<program>(?:\S*/)?(?:{_PROGRAMS}))(?:\s|`|$)")
_SHELL_SYNTAX = re.compile(r"^\s*(?:for|while|do|done|echo|printf|if|then|fi|else)\b")
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_ELISION = re.compile(r"^\s*(?:\.{3,}|…|\[\.\.\.\]|<snip>|\(\.\.\.\))\s*$", re.IGNORECASE)
#: Three or more of one punctuation character opening the line: "=== GPU 0 ===", "-----", "#### node17".
_BANNER = re.compile(r"^\s*([=\-*~+_#])\1{2,}")


#: a prompt and the program's name are within the first characters of a command line; the patterns, which can
#: backtrack on a line of blanks, see no more than this of it
_HEAD = 256


def command_program(line: str) -> str | None:
    """The program of a shell command line as pasted (``root@n:~# sudo nvidia-smi topo -m`` -> ``nvidia-smi``,
    ``$ mpirun -np 8 ./build/all_reduce_perf -b 8`` -> ``mpirun``), or None when the line is no such command."""
    m = _COMMAND_LINE.match(ANSI.sub("", line[:_HEAD]).lstrip()[:_HEAD])
    return m.group("program").rsplit("/", 1)[-1] if m else None


def paste_noise(line: str, *, banners: bool = True) -> str | None:
    """Why ``line`` is something pasted around a tool's output ("a shell command line", "a banner", ...), or
    None when it is not. ``banners=False`` for formats whose own lines start with ``#`` runs."""
    text = ANSI.sub("", line[:_HEAD * 4]).lstrip()[:_HEAD]
    if _FENCE.match(text):
        return "a Markdown fence"
    if _ELISION.match(text):
        return "an elision"
    if command_program(text):
        return "a shell command line"
    if _SHELL_SYNTAX.match(text):
        return "a line of the shell script that printed the output"
    if banners and _BANNER.match(text):
        return "a banner"
    return None
