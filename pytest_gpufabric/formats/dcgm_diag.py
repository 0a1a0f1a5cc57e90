"""What ``dcgmi diag -r N`` of NVIDIA DCGM printed, as a table or as ``-j`` JSON, read into one shape.

A DCGM diagnostic is the vendor's own verdict on a GPU, so an acceptance run must be able to take it as evidence,
including a run someone pasted into a ticket. Its layout changed with every major version (NVIDIA/DCGM
``dcgmi/Diag.cpp``):

- 1.x to 3.x print one row per test with a summary of the GPUs: ``| GPU Memory | Pass - All |``,
  ``| PCIe | Pass - GPUs: 0, 1 |`` then ``| | Fail - GPU: 2 |``; deployment checks (``Blacklist``, renamed
  ``Denylist`` in 3.0, ``Persistence Mode``, ...) print a bare ``Pass``/``Fail``/``Skip``; 3.1 added a ``Metadata``
  section with ``DCGM Version``. Messages are ``Warning``/``Error``/``Info`` rows cut into 45-character pieces;
  nvvs begins one about a single GPU of a test with ``GPU 1 `` (``| Warning | GPU 1 Max power of 224.1 did not
  reach desire |``), which names that GPU.
- 4.x prints one row per test with its overall result, then one ``GPU0: Pass`` row per entity, and names the tests
  in lower case (``software``, ``memory``, ``memory_bandwidth``, ``targeted_stress``); entity messages are
  ``Warning: GPU0`` rows.
- ``-j`` before 4.0 is ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
  [{"gpu_ids" | "gpu_id", "status", "warnings", "info"}]}]}], "version"}}``; nvvs itself wrote ``PASS`` in capitals
  and left ``null`` holes in the list. 4.x renamed the key to ``"DCGM Diagnostic"``, describes each result by
  ``entity_group``/``entity_id``, adds a ``test_summary`` per test and moves the version into ``"metadata"``.

A paste cut off mid-table or mid-JSON is read as far as it is whole; everything after the cut, and every line that
could not be read, is listed in ``unreadable``, and nothing that was cut is ever reported as a pass. Text that holds
no dcgmi table and no DCGM JSON document is refused with ValueError naming its first line.

A cut JSON document is read by :func:`formats.cut_json.read_cut_json` (shared with the nvbandwidth parser; named
here too, where it was first).
"""

from __future__ import annotations

import re
from typing import Any

from pytest_gpufabric.formats.cut_json import CUT_ARRAY, CUT_OBJECT, read_cut_json
from pytest_gpufabric.formats.paste import ANSI, paste_noise

__all__ = ["CUT_ARRAY", "CUT_OBJECT", "STATUSES", "parse_dcgm_diag", "read_cut_json"]

#: What a test or one GPU's result can be. "unreadable" is ours: the paste was cut where the status stood.
STATUSES = ("pass", "fail", "warn", "skip", "not run", "unreadable")
#: Worst first: a test's overall status is the worst of its GPUs'.
_SEVERITY = {"fail": 0, "unreadable": 1, "warn": 2, "not run": 3, "skip": 4, "pass": 5}


_STATUS_WORDS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "warn": "warn",
                 "warning": "warn", "skip": "skip", "skipped": "skip", "not run": "not run", "notrun": "not run",
                 "not_run": "not run"}

# Display names of the same test across versions -> one canonical name.
_TEST_NAMES = {
    "gpu memory": "memory", "memory": "memory", "memory bandwidth": "memory_bandwidth",
    "memory_bandwidth": "memory_bandwidth", "pcie": "pcie", "targeted power": "targeted_power",
    "targeted_power": "targeted_power", "targeted stress": "targeted_stress", "targeted_stress": "targeted_stress",
    "targeted performance": "targeted_stress", "sm stress": "sm_stress", "sm_stress": "sm_stress",
    "sm performance": "sm_stress", "diagnostic": "diagnostic", "pulse test": "pulse_test", "pulse_test": "pulse_test",
    "memtest": "memtest", "eud test": "eud", "eud": "eud", "cpu eud test": "cpu_eud", "cpu_eud": "cpu_eud",
    "context create": "context_create", "context_create": "context_create", "nvbandwidth": "nvbandwidth",
    "software": "software",
}
# Deployment checks of 1.x-3.x (and of nvvs's JSON), whose names changed between releases.
_DEPLOYMENT_NAMES = {
    "blacklist": "denylist", "denylist": "denylist", "nvml library": "nvml_library",
    "cuda main library": "cuda_main_library", "cuda toolkit libraries": "cuda_toolkit_libraries",
    "cuda runtime library": "cuda_runtime_library", "permissions and os blocks": "permissions",
    "permissions and os-related blocks": "permissions", "persistence mode": "persistence_mode",
    "environment variables": "environment_variables", "environmental variables": "environment_variables",
    "page retirement": "page_retirement", "page retirement/row remap": "page_retirement",
    "graphics processes": "graphics_processes", "inforom": "inforom", "fabric manager": "fabric_manager",
}

# --- the table -------------------------------------------------------------------------------------------------

_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<info>.*)\|\s*$")
_SECTION = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-{2,}\+-*[|+]?\s*$")
_BORDER = re.compile(r"^\+[-=]{5,}\+[-=]{5,}\+\s*$")
_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$")
_DIAG_COMMAND = re.compile(r"(?:^|[\s/])dcgmi(?:\s+-\S+)*\s+diag\b(?P<args>.*)$")
_LEVEL = re.compile(r"(?:^|\s)(?:-r|--run)(?:\s+|=)(?P<level>[1-4])(?=\s|$)")
#: the GPUs a run was given: ``-i 0,1`` / ``--gpuList 0-3`` / ``-i gpu:0``; a group: ``-g 2`` / ``--group 2``
_GPU_LIST = re.compile(r"(?:^|\s)(?:-i|--gpuList)(?:\s+|=)(?P<ids>\S+)")
_GROUP = re.compile(r"(?:^|\s)(?:-g|--group)(?:\s+|=)(?P<group>\S+)")
_DEVICE_IDS = "GPU Device IDs Detected"
_WORDS = r"Pass|Fail|Warn|Skip|Not Run"
_SUMMARY = re.compile(rf"^(?P<status>{_WORDS})(?:\s+-\s+(?P<who>All|GPUs?:\s*(?P<ids>[\d,\s]*)))?\s*$")
_ENTITY_RESULT = re.compile(rf"^(?P<group>GPU|CPU|NvSwitch|VGPU|Link|None)(?P<id>\d+):\s*(?P<status>{_WORDS}|)$")
_MESSAGE_NAME = re.compile(r"^(?P<kind>Warning|Error|Info)(?::\s*(?P<group>[A-Za-z]+)(?P<id>\d+))?$")
#: 1.x-3.x: nvvs starts a message about one GPU with "GPU 1 " or "GPU 1: " (NVIDIA/DCGM nvvs/src/JsonOutput.cpp),
#: and dcgmi prints it under a bare "Warning"/"Info" name
_GPU_PREFIX = re.compile(r"^GPU (?P<id>\d+):? ")
#: what dcgmi (and the nvvs it runs) may print before its JSON document
_PREAMBLE = re.compile(r"^(?:Successfully ran diagnostic for group\.|WARNING:|Warning:)")
#: 4.x: a category the table prints, by the heading dcgmi gives it
_CATEGORIES = {"deployment": "Deployment", "hardware": "Hardware", "integration": "Integration", "stress": "Stress",
               "performance": "Performance", "metadata": "Metadata", "custom": "Custom"}
#: dcgmi's cell widths: "| " name(25) " | " info(46) " |"; a message is cut into pieces of 45 characters
_INFO_START, _INFO_WIDTH, _PIECE = 30, 46, 45


def _status(word: str) -> str | None:
    return _STATUS_WORDS.get(word.strip().lower())


def _canonical(name: str, category: str | None) -> str:
    """``GPU Memory`` and ``memory`` -> ``memory``; deployment checks -> ``deployment:<item>``."""
    key = " ".join(name.split()).lower()
    if key in _TEST_NAMES:
        return _TEST_NAMES[key]
    if key in _DEPLOYMENT_NAMES:
        return "deployment:" + _DEPLOYMENT_NAMES[key]
    slug = re.sub(r"[^a-z0-9]+", "_", key).strip("_") or "unnamed"
    return f"deployment:{slug}" if category == "Deployment" else slug


def _worst(statuses: list[str]) -> str:
    return min(statuses, key=lambda s: _SEVERITY.get(s, 0)) if statuses else "unreadable"


class _Test:
    def __init__(self, display: str, category: str | None, lineno: int) -> None:
        self.display = display
        self.category = category
        self.lineno = lineno
        self.printed: str | None = None  # the status on the test's own row, where the layout prints one
        self.gpus: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []  # {"kind", "gpu", "text"}
        self.summary_layout = False  # 1.x-3.x: "Pass - All" / "Fail - GPU: 1"
        self.cut = False

    def result(self) -> dict[str, Any]:
        gpus = [dict(g) for g in self.gpus]
        if not gpus and not self.summary_layout and self.printed is not None and not self.cut:
            # a deployment check (1.x-3.x) says nothing of GPUs; a 4.x test whose GPU rows were cut says nothing
            gpus = [{"gpu": None, "status": self.printed, "message": None}]
        warnings = [m for m in self.messages if m["kind"] in ("warning", "error")]
        for gpu in gpus:
            mine = [m["text"] for m in warnings if m["gpu"] is not None and m["gpu"] == gpu["gpu"]]
            if not mine and len(gpus) == 1:
                # the only entry takes the test's messages; all of them where dcgmi named no GPU ("Pass - All")
                mine = [m["text"] for m in warnings if m["gpu"] is None or gpu["gpu"] is None]
            gpu["message"] = "\n".join(mine) if mine else None
        if self.summary_layout or self.printed is None:
            status = _worst([g["status"] for g in gpus]) if gpus else (self.printed or "unreadable")
        else:
            status = self.printed
        if self.cut and self.summary_layout and status == "pass":
            # 1.x-3.x list a test's GPUs over several rows ("Pass - GPU: 0", "Fail - GPU: 1"): cut after the first,
            # the test's result is not known; a status printed on the test's own row stays what it says
            status = "unreadable"
        return {"name": _canonical(self.display, self.category), "display_name": self.display,
                "category": self.category, "gpus": gpus, "status": status,
                "messages": [dict(m) for m in self.messages]}


def _info_piece(raw: str, info: str, fixed: bool) -> str:
    """One 45-character piece of a message, its spaces kept where dcgmi's fixed widths let us see them."""
    if fixed:
        return raw[_INFO_START:_INFO_START + _PIECE]
    return info.strip()


def _parse_table(lines: list[str], start: int) -> dict[str, Any]:
    """The table whose first line is ``lines[start]`` (0-based); returns the result dict less tool/format."""
    unreadable: list[str] = []
    tests: list[_Test] = []
    meta: dict[str, str] = {}
    category: str | None = None
    test: _Test | None = None
    message: dict[str, Any] | None = None  # the message whose continuation pieces may follow
    closed = False
    last_lineno = start + 1
    end = len(lines)
    for index in range(start, len(lines)):
        raw = lines[index]
        lineno = index + 1
        line = ANSI.sub("", raw).rstrip("\r\n")
        stripped = line.strip()
        if not stripped:
            continue
        if paste_noise(line, banners=False) is not None and not stripped.startswith(("|", "+")):
            continue
        last_lineno = lineno
        if _HEADER.match(stripped):
            continue
        if m := _SECTION.match(stripped):
            name = m.group("name").strip().lower()
            category = _CATEGORIES.get(name, m.group("name").strip())
            test, message = None, None
            continue
        if _BORDER.match(stripped):
            # the footer closes the table; the border under the header (=====) does not
            if "=" not in stripped and (tests or meta):
                closed = True
                end = index + 1
                break
            continue
        m = _ROW.match(stripped)
        if m is None:
            if stripped.startswith(("|", "+")):
                unreadable.append(f"line {lineno}: table line cut off: {stripped[:80]!r}")
                if test is not None:
                    test.cut = True
            else:
                unreadable.append(f"line {lineno}: not part of the dcgmi table: {stripped[:80]!r}")
            message = None
            continue
        name, info = m.group("name").strip(), m.group("info")
        fixed = len(stripped) >= _INFO_START + _INFO_WIDTH and stripped[_INFO_START - 3:_INFO_START] == " | "
        info_text = info.strip()
        if category == "Metadata":
            if name:
                meta[name] = info_text
            continue
        if name and (mm := _MESSAGE_NAME.match(name)):
            gpu = int(mm.group("id")) if mm.group("id") is not None else None
            if test is None:
                unreadable.append(f"line {lineno}: {mm.group('kind')} row outside any test: {info_text[:60]!r}")
                message = None
                continue
            message = {"kind": mm.group("kind").lower(), "gpu": gpu, "text": _info_piece(stripped, info, fixed)}
            test.messages.append(message)
            continue
        if name:
            test = _Test(name, category, lineno)
            tests.append(test)
            message = None
            if info_text == "":
                test.printed = "unreadable"
                unreadable.append(f"line {lineno}: {name}: no status printed")
                continue
            if (s := _SUMMARY.match(info_text)) is not None:
                status = _status(s.group("status"))
                assert status is not None
                if s.group("who") is None:
                    test.printed = status
                else:
                    test.summary_layout = True
                    _add_summary(test, status, s.group("ids"), s.group("who"))
                continue
            test.printed = "unreadable"
            unreadable.append(f"line {lineno}: {name}: status {info_text[:40]!r} is not one dcgmi prints")
            continue
        # a row with an empty name: a GPU's result (4.x), more GPUs (1.x-3.x), or the next piece of a message
        if test is not None and (e := _ENTITY_RESULT.match(info_text)) is not None:
            message = None
            status = _status(e.group("status")) if e.group("status") else None
            entry: dict[str, Any] = {"gpu": int(e.group("id")), "status": status or "unreadable", "message": None}
            if e.group("group") != "GPU":
                entry["entity"] = e.group("group")
            if status is None:
                unreadable.append(f"line {lineno}: {test.display}: {info_text!r} has no status")
            test.gpus.append(entry)
            continue
        if test is not None and (s := _SUMMARY.match(info_text)) is not None and s.group("who") is not None:
            status = _status(s.group("status"))
            assert status is not None
            test.summary_layout = True
            _add_summary(test, status, s.group("ids"), s.group("who"))
            message = None
            continue
        if message is not None:
            message["text"] += _info_piece(stripped, info, fixed) if fixed else " " + info_text
            continue
        unreadable.append(f"line {lineno}: row belongs to no test: {info_text[:60]!r}")
    for t in tests:
        for m in t.messages:
            m["text"] = m["text"].strip()
            if t.summary_layout and m["gpu"] is None and (g := _GPU_PREFIX.match(m["text"])) is not None:
                m["gpu"] = int(g.group("id"))
    if not closed:
        unreadable.append(f"line {last_lineno}: the table ends without its closing border: it was cut there, and "
                          "whatever dcgmi printed after it was not read")
        if tests:
            tests[-1].cut = True
    return {"tests": tests, "meta": meta, "unreadable": unreadable, "end": end}


def _add_summary(test: _Test, status: str, ids: str | None, who: str | None) -> None:
    if who == "All":
        test.gpus.append({"gpu": None, "status": status, "message": None})
        return
    for part in (ids or "").split(","):
        if part.strip().isdigit():
            test.gpus.append({"gpu": int(part.strip()), "status": status, "message": None})


def _parse_text(text: str) -> dict[str, Any]:
    lines = text.splitlines()
    level: int | None = None
    start: int | None = None
    for index, raw in enumerate(lines):
        line = ANSI.sub("", raw).strip()
        if (c := _DIAG_COMMAND.search(line)) is not None and start is None:
            if (lv := _LEVEL.search(c.group("args"))) is not None:
                level = int(lv.group("level"))
            continue
        if _HEADER.match(line) or _SECTION.match(line):
            start = index
            break
    if start is None:
        first = next(((i + 1, ln.strip()) for i, ln in enumerate(lines) if ln.strip()), None)
        if first is None:
            raise ValueError("no dcgmi diag output: the text is empty")
        raise ValueError(f"line {first[0]}: not dcgmi diag output (no '| Diagnostic | Result |' table and no DCGM "
                         f"JSON document): {first[1][:80]!r}")
    # the border above the header belongs to the table too
    if start > 0 and _BORDER.match(ANSI.sub("", lines[start - 1]).strip()):
        start -= 1
    table = _parse_table(lines, start)
    unreadable = table["unreadable"]
    for index in range(table["end"], len(lines)):
        line = ANSI.sub("", lines[index]).strip()
        if _HEADER.match(line):
            unreadable.append(f"line {index + 1}: a second dcgmi diag table starts here and was not read (one run "
                              "per call)")
            break
    meta = table["meta"]
    return {"tool": "dcgmi diag", "dcgm_version": meta.get("DCGM Version") or None, "format": "text",
            "level": level, "driver_version": meta.get("Driver Version Detected") or None,
            "device_ids": _device_ids(meta.get(_DEVICE_IDS)),
            "tests": [t.result() for t in table["tests"]], "unreadable": unreadable}


# --- JSON -----------------------------------------------------------------------------------------------------------


def _gpu_ids(result: dict[str, Any]) -> list[int | None]:
    for key in ("entity_id", "gpu_id", "gpu_ids"):
        if key in result:
            value = result[key]
            if isinstance(value, bool):
                return [None]
            if isinstance(value, int):
                return [value]
            if isinstance(value, str):
                ids = [int(p) for p in value.replace(" ", "").split(",") if p.isdigit()]
                return ids if ids and len(ids) == len([p for p in value.split(",") if p.strip()]) else [None]
            return [None]
    return [None]


def _texts(value: Any) -> list[str]:
    """Messages as dcgmi writes them: a string, a list of strings, or a list of {"warning": ...} objects."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    out: list[str] = []
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str) and item != CUT_ARRAY and item.strip():
                out.append(item)
            elif isinstance(item, dict):
                for key in ("warning", "warnings", "error", "msg"):
                    if isinstance(item.get(key), str):
                        out.append(item[key])
                        break
    return out


def _json_status(value: Any) -> str:
    return (_status(value) if isinstance(value, str) else None) or "unreadable"


def _parse_json(text: str) -> dict[str, Any]:
    doc, unreadable = read_cut_json(text)
    if not isinstance(doc, dict):
        raise ValueError("line 1: the JSON document is not a dcgmi diag result (not an object)")
    top_key = next((k for k in ("DCGM Diagnostic", "DCGM GPU Diagnostic") if k in doc), None)
    if top_key is None:
        keys = ", ".join(repr(k) for k in list(doc)[:5])
        raise ValueError(f"line 1: the JSON document is not a dcgmi diag result (keys: {keys})")
    body = doc[top_key]
    if not isinstance(body, dict):
        raise ValueError(f"line 1: {top_key!r} is not an object")
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = metadata.get("version") or body.get("version")
    driver = metadata.get("Driver Version Detected") or body.get("Driver Version Detected")
    tests: list[dict[str, Any]] = []
    categories = body.get("test_categories")
    if categories is None and CUT_OBJECT not in body and "runtime_error" not in body:
        unreadable.append("the document has no test_categories")
    if isinstance(categories, list):
        for cat in categories:
            if not isinstance(cat, dict):
                continue
            category = cat.get("category") if isinstance(cat.get("category"), str) else None
            for test in cat.get("tests") or []:
                if test is None or test == CUT_ARRAY:
                    continue  # nvvs leaves null holes in the list
                if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                    unreadable.append(f"a test of category {category!r} has no name (cut)")
                    continue
                tests.append(_json_test(test, category, unreadable))
    if isinstance(body.get("runtime_error"), str):
        unreadable.append(f"dcgmi reported a runtime error: {body['runtime_error']}")
    ids = metadata.get(_DEVICE_IDS) or body.get(_DEVICE_IDS)
    return {"tool": "dcgmi diag", "dcgm_version": version if isinstance(version, str) else None, "format": "json",
            "level": None, "driver_version": driver if isinstance(driver, str) else None,
            "device_ids": _device_ids(ids if isinstance(ids, str) else None), "tests": tests,
            "unreadable": unreadable}


def _json_test(test: dict[str, Any], category: str | None, unreadable: list[str]) -> dict[str, Any]:
    name = test["name"]
    cut = CUT_OBJECT in test
    gpus: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    results = test.get("results") if isinstance(test.get("results"), list) else []
    if isinstance(results, list) and CUT_ARRAY in results:
        cut = True
    for result in results:
        if not isinstance(result, dict):
            continue
        result_cut = CUT_OBJECT in result
        status = _json_status(result.get("status"))
        if result_cut and "status" not in result:
            status = "unreadable"
        if result_cut:
            unreadable.append(f"{name}: a result was cut off")
        warnings = _texts(result.get("warnings"))
        info = _texts(result.get("info"))
        group = result.get("entity_group")
        for gpu in _gpu_ids(result):
            entry: dict[str, Any] = {"gpu": gpu, "status": status, "message": "\n".join(warnings) or None}
            if isinstance(group, str) and group != "GPU":
                entry["entity"] = group
            gpus.append(entry)
            messages += [{"kind": "warning", "gpu": gpu, "text": t} for t in warnings]
            messages += [{"kind": "info", "gpu": gpu, "text": t} for t in info]
    summary = test.get("test_summary")
    if isinstance(summary, dict):
        status = _json_status(summary.get("status"))
        messages += [{"kind": "warning", "gpu": None, "text": t} for t in _texts(summary.get("warnings"))]
        messages += [{"kind": "info", "gpu": None, "text": t} for t in _texts(summary.get("info"))]
        if CUT_OBJECT in summary and "status" not in summary:
            status = "unreadable"
    else:
        status = _worst([g["status"] for g in gpus])
    if cut:
        unreadable.append(f"{name}: the test's entry was cut off; its results may be incomplete")
        if status == "pass":
            status = "unreadable"
    return {"name": _canonical(name, category), "display_name": name, "category": category, "gpus": gpus,
            "status": status, "messages": messages}


# --- what the run covered ------------------------------------------------------------------------------------------


def _device_ids(text: str | None) -> list[str] | None:
    """3.1+'s ``GPU Device IDs Detected`` (``2237,2237,2237,2237``): one PCI device id per GPU the run tested."""
    if not text:
        return None
    ids = [part.strip() for part in text.split(",")]
    return ids if all(re.fullmatch(r"[0-9A-Fa-f]{4}", i) for i in ids) else None


def _gpu_list(text: str) -> list[int] | None:
    """``0,1`` / ``0-3`` / ``gpu:0,gpu:2`` -> [0, 1, ...]; None for what dcgmi accepts but this does not read."""
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip().lower().removeprefix("gpu:")
        if m := re.fullmatch(r"(\d+)-(\d+)", part):
            ids.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        elif part.isdigit():
            ids.append(int(part))
        else:
            return None
    return sorted(set(ids)) or None


def _command(text: str) -> dict[str, Any]:
    """What the ``dcgmi diag`` command line pasted above the output says of the run: {"command": the line or None,
    "gpu_list": the GPUs ``-i`` named, or None, "gpu_list_text": ``-i``'s argument as written, "group": ``-g``'s}."""
    for raw in text.splitlines():
        line = ANSI.sub("", raw).strip()
        if (c := _DIAG_COMMAND.search(line)) is not None:
            args = c.group("args")
            listed = _GPU_LIST.search(args)
            group = _GROUP.search(args)
            return {"command": line, "gpu_list": _gpu_list(listed.group("ids")) if listed else None,
                    "gpu_list_text": listed.group("ids") if listed else None,
                    "group": group.group("group") if group else None}
        if _HEADER.match(line) or _SECTION.match(line) or line.startswith("{"):
            break
    return {"command": None, "gpu_list": None, "gpu_list_text": None, "group": None}


# --- entry point ----------------------------------------------------------------------------------------------------


def parse_dcgm_diag(text: str) -> dict[str, Any]:
    """``dcgmi diag`` output (table or ``-j`` JSON, any version 1.x to 4.x) as one dict.

    ``{"tool": "dcgmi diag", "dcgm_version": "3.3.8" | None, "format": "text" | "json", "level": 2 | None,
    "driver_version": str | None, "tests": [...], "unreadable": [...]}``. Each test is ``{"name": "memory",
    "display_name": "GPU Memory", "category": "Hardware" | None, "gpus": [{"gpu": 0 | None, "status", "message"}],
    "status", "messages": [{"kind": "warning" | "error" | "info", "gpu", "text"}]}``; statuses are those of
    :data:`STATUSES`. ``gpu`` is None where dcgmi did not say which GPU (``Pass - All``, deployment checks).
    ``level`` comes from a ``dcgmi diag -r N`` command line pasted above the table. What the run covered, for
    results given for "All" GPUs: ``device_ids`` (3.1+'s ``GPU Device IDs Detected``, one per GPU tested, or None),
    ``command`` (the command line pasted above, or None), ``gpu_list`` (the GPUs its ``-i`` named, or None),
    ``gpu_list_text`` (``-i``'s argument as written) and ``group`` (its ``-g``). ``unreadable`` lists, with line
    numbers, every line or value that was cut or could not be read. Raises ValueError, naming the first line, for
    text that is not dcgmi diag output.
    """
    text = ANSI.sub("", text)
    offset = 0
    for raw in text.splitlines(keepends=True):
        line = raw.strip()
        if line and paste_noise(raw, banners=False) is None and not _DIAG_COMMAND.search(line) \
                and not _PREAMBLE.match(line):
            if line.startswith("{"):
                result = _parse_json(text[offset:])
                command = _command(text[:offset])
                if command["command"] and (lv := _LEVEL.search(command["command"])) is not None:
                    result["level"] = int(lv.group("level"))
                return {**result, **command}
            break
        offset += len(raw)
    return {**_parse_text(text), **_command(text)}
