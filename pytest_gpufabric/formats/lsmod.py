"""``lsmod`` and ``/proc/modules`` as a customer pastes them: the module list, and what the pasted command lines did
to it (``lsmod | grep nvidia_peermem``, ``lsmod | grep -v nv``).

A whole list shows every loaded module: one it lacks is not loaded. A filtered list shows only the lines its
filter let through: a module it lacks is shown absent only where the filter would have let that module's line
through (``grep peermem`` would print ``nvidia_peermem``'s line; ``grep -v nv`` hides it, and so proves nothing).
Reads no files; raises ValueError naming the line on text that is not a module list.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

__all__ = ["ModuleList", "command_shows", "parse_module_list"]

_MODULE_LINE = re.compile(r"^(?P<name>[A-Za-z0-9_]+)\s+(?P<size>\d+)\s+(?P<refs>\d+|-)(?:\s|$)")
_HEADER = re.compile(r"^Module\s+Size\s+Used by")
#: the command that prints the list, where a pasted command line starts being the command
_LISTING = re.compile(r"\blsmod\b|\bcat\s+/proc/modules\b|/proc/modules")
_EMPTY_PROMPT = re.compile(r"^(?:\([^)]*\)\s*)?(?:\[[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*)?)?\s*[$#%>]$")
#: programs in a pipeline that print every line they are given (in some order)
_TRANSPARENT = ("sort", "cat", "less", "more", "tee", "uniq")
#: a pattern that means itself: no regular-expression character in it
_PLAIN = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class ModuleList:
    """What a module list paste holds: the modules it lists, and the command lines that filtered it."""

    loaded: set[str] = field(default_factory=set)
    #: each pasted command that filters the list, from the listing command on: "lsmod | grep -v nv"
    commands: list[str] = field(default_factory=list)
    unfiltered: bool = False  # a pasted command printed the list unfiltered (`lsmod` alone)

    @property
    def complete(self) -> bool:
        """No pasted command filtered the list, or one printed it whole: it shows every loaded module."""
        return not self.commands or self.unfiltered

    def searched(self) -> list[str]:
        """The patterns of the commands that are one plain ``grep PATTERN`` (for saying what was searched)."""
        out = []
        for command in self.commands:
            stages = _stages(command)
            if stages and len(stages) == 1 and stages[0] is not None and not stages[0]["invert"] \
                    and len(stages[0]["patterns"]) == 1:
                out.append(stages[0]["patterns"][0])
        return out


def parse_module_list(text: str) -> ModuleList:
    """The modules ``/proc/modules`` or ``lsmod`` (or a filter of either) lists, with the filtering commands.

    ``/proc/modules`` lines are ``name size refcount deps state address``; lsmod's ``name size used-by``, under its
    ``Module Size Used by`` header. A pasted command line (prompt and all) that pipes the list through a filter
    makes the list not whole."""
    modules = ModuleList()
    for raw in text.splitlines():
        line = raw.strip().strip("`")
        if not line or line.startswith(("```", "~~~")) or _HEADER.match(line):
            continue
        if m := _MODULE_LINE.match(line):
            modules.loaded.add(m.group("name"))
            continue
        if listing := _LISTING.search(line):  # the command line above the output
            command = line[listing.start():].strip()
            if "|" in command:
                modules.commands.append(command)
            else:
                modules.unfiltered = True
            continue
        if _EMPTY_PROMPT.match(line):  # the prompt after the last command
            continue
        raise ValueError(f"not /proc/modules or lsmod output: {line[:80]!r} (expected 'name size used-by')")
    return modules


def _grep(argv: list[str]) -> dict | None:
    """A grep's options and patterns ({"invert", "ignore_case", "word", "extended", "patterns"}); None for options
    whose output this does not reason about (-c, -o, -n, -l, context lines ...)."""
    opts = {"invert": False, "ignore_case": False, "word": False, "extended": argv[0] == "egrep", "patterns": []}
    flags = {"v": "invert", "i": "ignore_case", "y": "ignore_case", "w": "word", "E": "extended"}
    longs = {"--invert-match": "invert", "--ignore-case": "ignore_case", "--word-regexp": "word",
             "--extended-regexp": "extended"}
    args = argv[1:]
    rest: list[str] = []
    while args:
        arg = args.pop(0)
        if arg in longs:
            opts[longs[arg]] = True
        elif arg.startswith("--regexp="):
            opts["patterns"].append(arg.split("=", 1)[1])
        elif arg.startswith("--color") or arg in ("-F", "--fixed-strings", "-s", "--no-messages"):
            continue
        elif arg.startswith("-") and len(arg) > 1 and not rest:
            letters = arg[1:]
            for position, letter in enumerate(letters):
                if letter == "e":  # -e PATTERN, or -ePATTERN
                    pattern = letters[position + 1:] or (args.pop(0) if args else "")
                    opts["patterns"].append(pattern)
                    break
                if letter not in flags:
                    return None
                opts[flags[letter]] = True
        else:
            rest.append(arg)
    if not opts["patterns"] and rest:
        opts["patterns"].append(rest.pop(0))
    return opts if opts["patterns"] and not rest else None


def _stages(command: str) -> list[dict | None] | None:
    """The filters after the listing command: a grep's options, {} for a program that passes every line, None for
    one this does not reason about; None for the whole when the command cannot be split."""
    parts = command.split("|")[1:]
    stages: list[dict | None] = []
    for part in parts:
        try:
            argv = shlex.split(part)
        except ValueError:
            return None
        if not argv:
            return None
        program = argv[0].rsplit("/", 1)[-1]
        if program in ("grep", "egrep"):
            stages.append(_grep([program, *argv[1:]]))
        elif program in _TRANSPARENT:
            stages.append({})
        else:
            stages.append(None)
    return stages


def _alternatives(pattern: str, extended: bool) -> list[str] | None:
    parts = pattern.split("|") if extended else pattern.split(r"\|")
    return parts if all(_PLAIN.match(p) for p in parts) else None


def command_shows(command: str, name: str) -> bool:
    """Whether ``command``'s output lists module ``name``'s line when it is loaded: every stage is a grep that finds
    it (a plain pattern in the name; ``-w``: the name itself) or passes every line. An inverted grep (``-v``) never
    counts: what it hides depends on the rest of the line (the modules using this one), so its silence proves
    nothing."""
    stages = _stages(command)
    if not stages:
        return False
    for stage in stages:
        if stage is None or stage.get("invert"):
            return False
        if not stage:
            continue
        found = False
        for pattern in stage["patterns"]:
            alternatives = _alternatives(pattern, stage["extended"])
            if alternatives is None:
                return False
            for alt in alternatives:
                text, target = (alt.lower(), name.lower()) if stage["ignore_case"] else (alt, name)
                found = found or (text == target if stage["word"] else text in target)
        if not found:
            return False
    return True
