"""A spare Python interpreter for the next workload script: torch is imported while another workload runs, then it
waits for the one command it will run (runner.py's SpareInterpreters).

Importing torch takes about 5 s on the GPU machines (measured: 4.8 s of the memory workload on an H100 SXM); a
single-GPU acceptance runs six workloads one after the other, so cold starts would be a quarter of its time. A spare is
still a fresh process for every workload (its own CUDA context, allocator and crash), only started early.
``--imports torch,torchvision``: what it imports ahead (default torch). Only the memory workload's model needs
torchvision, which takes 5 s more on an H100: a spare that imports it is ready that much later, so a workload
asks for the imports it needs and the others get a spare that is ready sooner (runner.run_workload's
``spare_imports``).

Protocol: one JSON line on stdin, ``{"argv": [script, args...], "stdout": PATH, "stderr": PATH, "env": {...}}``
(env: the workload's environment, which differs from the spare's own only in pytest's PYTEST_ variables); the
script then runs as ``python script args...`` would (``__main__``, its folder first on sys.path) and its exit
status is this process's. End of input without a line: not needed, exit 0.
"""

import importlib
import json
import os
import runpy
import sys


def _import_ahead(names: list[str]) -> None:
    """The point of a spare: these modules are imported before the workload is known. One that is missing or
    broken (a torchvision built for another torch raises RuntimeError on import) is left to the script: one that
    needs it fails with its own message, and one that does not runs as it would cold."""
    for name in filter(None, (name.strip() for name in names)):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  whatever the import raised, the script's own import says it
            pass


_import_ahead(sys.argv[sys.argv.index("--imports") + 1].split(",") if "--imports" in sys.argv else ["torch"])


def main() -> int:
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        with open(path, "a") as stream:
            os.dup2(stream.fileno(), fd)
    if request.get("env") is not None:  # the same as at start, but for what changes per test (PYTEST_...)
        os.environ.clear()
        os.environ.update(request["env"])
    argv = request["argv"]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    try:
        runpy.run_path(argv[0], run_name="__main__")
        status = 0
    except SystemExit as done:  # the script's exit status, as the interpreter would make it
        status = exit_status(done.code)
    # the script has written its result: end without the interpreter's teardown of torch and CUDA (half a second
    # a workload); the driver frees the GPU as the process ends, before the runner sees it exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def exit_status(code) -> int:
    """What the interpreter exits with for ``SystemExit(code)``: 0 for None, the number, else 1 with the text."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
