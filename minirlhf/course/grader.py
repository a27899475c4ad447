"""Grade a learner's notebook against the solutions: ``python -m minirlhf.course.grader NOTEBOOK ...``.

For each notebook:

1. **Run it.** The notebook is read into memory and run top to bottom in a fresh kernel
   (nbclient), as "Restart and run all" would. The kernel works in an empty temporary folder,
   so a relative path in the notebook cannot reach the notebook file; the file is only read,
   and compared after grading with what was read (a notebook whose code deleted or changed it
   is reported, and the version graded is kept in ``kept/``, never beside the notebook; a kept
   copy is never graded, and a file is read only up to MAX_NOTEBOOK_BYTES). A cell that fails
   is recorded and the run goes on; a cell that runs too long is interrupted. The notebook's
   own check cells do nothing during the run (``GRADING_ENV``): the grader runs those cases
   itself. The cells after the last one an exercise needs (its check or its definition) are
   the chapter's analyses, its long runs and figures: no grade depends on them, so they are
   not run, and the report says which were left out, naming the first of them the way a
   learner finds it in JupyterLab: its place among all cells, text cells included, and its
   first line.
2. **Pick the exercises.** Those of the notebook's chapter (its ``NN_`` prefix) from the
   registry :mod:`minirlhf.course.exercises`; a renamed notebook is recognised by its check cells.
3. **Call the learner's functions.** Each exercise gets its cases plus ``n_random``
   randomized inputs from ``random_kwargs`` (a fresh seed each run, printed so a run can be
   repeated with ``--seed``). The inputs go to the kernel in a pickle file written here (they
   may hold torch tensors), and a one-line cell calls the learner's function by name on each,
   through :func:`minirlhf.course.cases.call_safely` (time limit, captured prints, mutated
   inputs). While it runs, the package's own reference for that exercise raises when called,
   under any name (imported, wrapped, or in a ``functools.partial``).
4. **Bring the answers back as plain data.** What each call returned is turned into JSON in
   the kernel (:func:`minirlhf.course.cases.to_plain`: numbers, strings, lists, dicts, tagged
   arrays and tensors, at most ``RETURN_CAP`` numbers) and checked on arrival
   (:func:`~minirlhf.course.cases.from_plain`). Nothing from the kernel is unpickled here, so
   no code of the notebook runs in the grader; anything else "cannot be graded".
5. **Judge here.** The expected values never enter the kernel: the reference solution runs
   in this process and :func:`minirlhf.course.cases.judge` compares, with the exercise's
   comparator. Passing therefore means agreeing with the reference on inputs the notebook
   never saw.

Why the calls run in the learner's kernel and not here: their function may use anything
the notebook defined (globals, imports, helpers), and only that kernel has it.

The grader never hangs: calls run in slices of about a second, each slice a cell with a
timeout. Inside the kernel every call has the exercise's time limit (an alarm signal); a
call that ignores it is interrupted from here, and a kernel that ignores the interrupt too
is restarted and the notebook run again for the exercises still to grade. The calls of one
exercise share a budget (``--budget``, 60 s): a function that is right on every input it
finished but runs out of time is reported SLOW, never wrong.

The grader survives its notebook: the kernel runs in its own session, so a signal to the
kernel's process group does not reach the grader; a SIGTERM that does reach it stops the
grading with a message, after the kernel is shut down and the temporary files removed.

Exit status: 0 when every exercise of every notebook passes, 1 when one fails (or is too
slow), 2 when a notebook could not be graded (missing file, not a notebook, no exercises,
no kernel) or an option is wrong, 130 on Ctrl-C, 143 on SIGTERM.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import importlib
import json
import math
import os
import pickle
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .cases import Case, CaseResult, Exercise, Raises, judge, not_run
from .plain import RETURN_CAP, Opaque, from_plain, to_plain
from .report import Report, failure_lines
from .safe_text import printable, shorten
from .sandbox import Call, call_safely

__all__ = ["grade_notebook", "NotebookGrade", "ExerciseGrade", "CellProblem", "render", "main",
           "BUDGET", "CELL_TIMEOUT"]

SLICE = 1.0  # seconds of calls per grading cell, so the grader can step in between
GRACE = 3.0  # seconds a kernel gets to answer after a time limit or an interrupt
WARM_UP = '__import__("minirlhf.course.grader")'  # run in the kernel before the first call
WARM_UP_TIMEOUT = 120.0  # seconds that import may take (torch with it), the cell limit if longer
CELL_TIMEOUT = 120.0  # seconds any one notebook cell may run
BUDGET = 60.0  # seconds of calls per exercise, all its inputs together
MAX_SECONDS = 86400.0  # the largest --cell-timeout or --budget taken (a day)
MAX_TIME_LIMIT = 3600.0  # the largest --time-limit taken (an hour: the alarm's range is finite)
MAX_NOTEBOOK_BYTES = 100_000_000  # a notebook file larger than this is not read
_RECORD_CAP = 40 * RETURN_CAP + 4096  # characters of one result line from the kernel
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# --------------------------------------------------------------------------- results


@dataclass
class CellProblem:
    """A notebook cell that failed while the notebook ran."""

    number: int  # among the non-empty code cells, from 1: the In [n] of a run from the top
    text: str  # what went wrong, one line
    line: int | None = None  # the line of the cell it points at, when known
    code: str = ""  # that line's code (or the cell's first line)
    defines: tuple = ()  # the functions the cell defines (so a missing exercise can point here)

    def __str__(self) -> str:
        where = f"code cell {self.number}" + (f", line {self.line}" if self.line else "")
        return f"{where}: {self.text}"


@dataclass
class ExerciseGrade(Report):
    """The verdict on one exercise: its results on the cases, then on the randomized inputs."""

    n_cases: int = 0  # how many of ``results`` are the exercise's own cases
    printed: int = 0  # characters the function printed over all calls
    time_limit: float = 0.0  # seconds per call
    budget: float = 0.0  # seconds of calls in all
    stopped: str = ""  # "budget" when the budget ran out, "time limit" when a call ran past its limit

    @property
    def seconds_per_call(self) -> float:
        """The mean time of the calls that finished."""
        done = [r.seconds for r in self.results if not r.out_of_time]
        return sum(done) / len(done) if done else 0.0


@dataclass
class NotebookGrade:
    """Everything the grader found in one notebook."""

    path: Path
    seed: int | None = None
    error: str = ""  # set when the notebook could not be graded at all (exit status 2)
    note: str = ""  # set when there was nothing to grade (a chapter without exercises)
    cells: list = field(default_factory=list)  # CellProblem, in notebook order
    exercises: list = field(default_factory=list)  # ExerciseGrade
    restarts: int = 0
    seconds: float = 0.0
    file_problem: str = ""  # set when the notebook file was deleted or changed while it was graded
    not_run: list = field(default_factory=list)  # numbers of the code cells after the last exercise
    # the first of them as JupyterLab shows it: (its place among all cells, text cells included,
    # from 1; its first line)
    first_not_run: tuple = ()

    @property
    def passed(self) -> bool:
        return not self.error and all(e.passed for e in self.exercises)


# --------------------------------------------------------------------------- kernel side
# This part runs inside the learner's kernel. It sees the inputs, never the expected values.

_SESSIONS: dict = {}
_BLOCKED: dict = {}  # the reference function being graded -> its own code, while it is blocked


class _ReferenceNotAvailable(BaseException):
    """Raised by the package's reference solution while its exercise is graded. A
    BaseException, so that an ``except Exception`` around the call does not hide it."""

    used = False  # set by the stub, read after each call


def _reference_stub(*args, **kwargs):
    # Becomes the reference's code while it is blocked, so it runs with the reference's module
    # globals: it names nothing but builtins.
    grader = __import__("minirlhf.course.grader", fromlist=["_"])
    grader._ReferenceNotAvailable.used = True
    raise grader._ReferenceNotAvailable("the package's reference solution is not available while grading")


def _stub_code(n_free: int):
    """The code of :func:`_reference_stub`, with ``n_free`` free variables (a closure's code can
    only be swapped for code with as many)."""
    if n_free == 0:
        return _reference_stub.__code__
    names = [f"_v{i}" for i in range(n_free)]
    source = (f"def _outer():\n    {' = '.join(names)} = None\n"
              f"    def _reference_stub(*args, **kwargs):\n        {', '.join(names)}\n"
              "        grader = __import__('minirlhf.course.grader', fromlist=['_'])\n"
              "        grader._ReferenceNotAvailable.used = True\n"
              "        raise grader._ReferenceNotAvailable(\"the package's reference solution is not available "
              "while grading\")\n    return _reference_stub\n")
    space: dict = {}
    exec(compile(source, __file__, "exec"), space)
    return space["_outer"]().__code__


class _NoFreshCopy:
    """An import hook, first on ``sys.meta_path`` while an exercise is graded: it refuses to
    load the reference's module again (``importlib.reload``, or an import after deleting it from
    ``sys.modules``), which would make a fresh, unblocked copy of the reference."""

    def __init__(self, module: str):
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.module:
            _ReferenceNotAvailable.used = True
            raise _ReferenceNotAvailable(f"{fullname} cannot be loaded again while grading")
        return None


_HOOKS: list = []


def _block(fn) -> None:
    if isinstance(fn, types.FunctionType) and fn not in _BLOCKED:
        code = fn.__code__
        stub = _stub_code(len(code.co_freevars))
        _BLOCKED[fn] = code
        fn.__code__ = stub


def _block_reference(where, name: str = "") -> None:
    """Make the reference of exercise ``name`` (the function ``module.name``, ``where``) raise
    while its exercise is graded.

    Its code is swapped, not its name, so every way to reach it raises: the name imported
    from any module, a wrapper that calls it, a ``functools.partial`` of it, the exercise's
    own ``reference`` (a closure too). So is the code of every other function that is a copy
    of it (the same code, in a module loaded twice), and its module cannot be loaded again.
    """
    _unblock_references()
    found = []
    if name:
        try:
            from .exercises import get

            found.append(get(name).reference)
        except Exception:  # no such exercise here: the module and name below still apply
            pass
    if where:
        try:
            found.append(getattr(importlib.import_module(where[0]), where[1]))
        except Exception:  # not importable here: nothing to block
            pass
    found = [inspect_unwrap(fn) for fn in found]
    codes = {fn.__code__ for fn in found if isinstance(fn, types.FunctionType)}
    if not codes:
        return
    import gc

    for obj in gc.get_objects():  # copies of the reference: the same code in another function
        if type(obj) is types.FunctionType and obj.__code__ in codes:
            _block(obj)
    for fn in found:
        _block(fn)
    for module in {fn.__module__ for fn in found if isinstance(getattr(fn, "__module__", None), str)}:
        if module.startswith("minirlhf."):
            hook = _NoFreshCopy(module)
            sys.meta_path.insert(0, hook)
            _HOOKS.append(hook)


def inspect_unwrap(fn):
    """``fn`` without its ``functools.wraps`` wrappers."""
    import inspect

    try:
        return inspect.unwrap(fn)
    except Exception:
        return fn


def _unblock_references() -> None:
    while _HOOKS:
        hook = _HOOKS.pop()
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
    while _BLOCKED:
        fn, code = _BLOCKED.popitem()
        fn.__code__ = code


class _KernelSession:
    """Calls one learner function on a list of inputs, a slice at a time, recording each call
    as a line of JSON."""

    def __init__(self, namespace: dict, spec: dict):
        self.spec = spec
        self.out = open(spec["results"], "a", encoding="utf-8")
        self.i = 0
        self.spent = 0.0  # seconds of calls so far
        self.done = False
        name = spec["name"]
        fn = namespace.get(name)
        if fn is None:
            own = sorted(k for k, v in namespace.items()
                         if callable(v) and getattr(v, "__module__", None) == "__main__" and not k.startswith("_"))
            self._finish(setup="missing", names=own[:200])
        elif not callable(fn):
            self._finish(setup="not callable", detail=f"{name} is a {type(fn).__name__}, not a function")
        elif str(getattr(fn, "__module__", "")).startswith("minirlhf"):
            self._finish(setup="not yours", detail=f"{fn.__module__}.{getattr(fn, '__name__', name)}")
        else:
            self.fn = fn
            with open(spec["inputs"], "rb") as f:
                self.inputs = pickle.load(f)  # written by the grader, not by the notebook
            _block_reference(spec.get("reference"), name)

    def _write(self, record: dict) -> None:
        self.out.write(json.dumps(record, allow_nan=False) + "\n")
        self.out.flush()

    def _finish(self, **record) -> None:
        _unblock_references()
        self._write({"done": True, **record})
        self.out.close()
        self.done, self.inputs = True, []

    def step(self) -> None:
        """Run calls for about ``spec['slice']`` seconds, or to the end."""
        if self.done:
            return
        until = time.perf_counter() + self.spec["slice"]
        while self.i < len(self.inputs) and time.perf_counter() < until:
            _ReferenceNotAvailable.used = False
            mentions = self.spec.get("mentions") or [None] * len(self.inputs)
            call = call_safely(self.fn, self.inputs[self.i], self.spec["time_limit"],
                               tuple(self.spec.get("grad_wrt", ())), mentions[self.i])
            self._write(_call_record(self.i, call, _ReferenceNotAvailable.used, self.spec.get("reference")))
            self.i += 1
            self.spent += call.seconds
            if call.kind == "timeout":
                return self._finish(reason="timeout")
            if self.spent > self.spec["budget"] and self.i < len(self.inputs):
                return self._finish(reason="budget")
        if self.i >= len(self.inputs):
            self._finish(reason="all")


def _call_record(index: int, call: Call, used_reference: bool = False, reference=None) -> dict:
    """Return the JSON-ready record of a call: what happened, and what it returned as plain data."""
    record = {"index": index, "kind": call.kind, "message": shorten(str(call.message), 600),
              "n_printed": int(call.n_printed), "seconds": float(call.seconds), "value": None,
              "grads": None, "named": call.named if type(call.named) is bool else None}
    if used_reference:  # whatever it did after that, it leaned on the package's answer
        name = ".".join(reference) if reference else "the package's reference"
        record.update(kind="error", message=f"calls {name}, the package's own solution, which is not available "
                                            "while the grader runs: write the computation yourself")
    elif call.kind in ("ok", "mutated"):
        record["value"] = to_plain(call.value)
        record["grads"] = to_plain(call.grads)
    return record


def _kernel_step(namespace: dict, spec: dict) -> None:
    """Entry point of the grading cell: start or continue the session for ``spec``."""
    session = _SESSIONS.get(spec["results"])
    if session is None:
        session = _SESSIONS[spec["results"]] = _KernelSession(namespace, spec)
    session.step()  # a finished session stays, so a late step does not start it again


# --------------------------------------------------------------------------- what comes back

_KINDS = {"ok", "mutated", "todo", "error", "timeout"}
_REASONS = {"all", "timeout", "budget"}
_SETUPS = {"missing", "not callable", "not yours"}


def _no_constant(name: str):
    raise ValueError(f"{name} is not plain JSON")


def _parse_record(line: str | None, expected_index: int) -> dict:
    """Return the checked record on one line from the kernel. A line that is not exactly what
    the kernel side writes becomes a call that "cannot be graded"."""
    def broken(why: str) -> dict:
        return {"index": expected_index, "kind": "error", "n_printed": 0, "seconds": 0.0, "value": None,
                "message": f"its result arrived malformed from the kernel ({why}), so it cannot be graded"}

    if line is None:
        return broken("far too long")
    try:
        data = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return broken("not JSON")
    if not isinstance(data, dict):
        return broken("not a record")
    if data.get("done") is True:
        done = {"done": True}
        if data.get("reason") in _REASONS:
            done["reason"] = data["reason"]
        elif data.get("setup") in _SETUPS:
            done["setup"] = data["setup"]
            names = data.get("names", [])
            done["names"] = [n for n in names if isinstance(n, str)][:200] if isinstance(names, list) else []
            done["detail"] = printable(shorten(data["detail"], 200)) if isinstance(data.get("detail"), str) else ""
        else:
            return broken("an unknown ending")
        return done
    fields = {"index", "kind", "message", "n_printed", "seconds", "value"}
    if not fields <= set(data) <= fields | {"grads", "named"}:
        return broken("unexpected fields")
    data = {"grads": None, "named": None, **data}
    if (type(data["index"]) is not int or data["index"] != expected_index or data["kind"] not in _KINDS
            or type(data["message"]) is not str or type(data["n_printed"]) is not int or data["n_printed"] < 0
            or type(data["seconds"]) not in (int, float) or not 0 <= data["seconds"] < 1e9
            or data["named"] not in (None, True, False)):
        return broken("a field out of place")
    record = {k: data[k] for k in fields | {"grads", "named"}}
    record["message"] = printable(shorten(record["message"], 600))
    record["seconds"] = float(record["seconds"])
    if record["kind"] in ("ok", "mutated"):
        try:
            record["value"] = from_plain(data["value"])
        except ValueError as exc:
            record["value"] = Opaque("value", "", f"its data arrived malformed: {exc}")
        try:
            record["grads"] = from_plain(data["grads"])
        except ValueError as exc:
            record["grads"] = f"its gradient arrived malformed ({exc})"
    else:
        record["value"] = record["grads"] = None
    return record


def _read_records(path: Path, limit: int) -> list[dict]:
    """Return the records the kernel wrote to ``path`` (at most ``limit``), checked. A last
    line cut short (a kernel killed mid-write) is left out."""
    records: list[dict] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            while len(records) < limit:
                line = f.readline(_RECORD_CAP + 1)
                if not line:
                    break
                if not line.endswith("\n"):
                    if len(line) <= _RECORD_CAP:
                        break  # the end of the file, cut short
                    while line and not line.endswith("\n"):  # a record far too long: skip it
                        line = f.readline(_RECORD_CAP + 1)
                    line = None
                n_calls = sum("index" in r for r in records)
                records.append(_parse_record(line, n_calls))
                if records[-1].get("done"):
                    break
    except FileNotFoundError:
        pass
    return records


# --------------------------------------------------------------------------- grader side


def _chapter_exercises(path: Path, nb) -> list[Exercise]:
    """Return the notebook's exercises: by its NN_ prefix, else by the check cells it holds."""
    from .exercises import EXERCISES, for_chapter

    match = re.match(r"(\d+)_", path.name)
    if match and for_chapter(int(match[1])):
        return for_chapter(int(match[1]))
    names = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            names += [n for n in re.findall(r"""check\(\s*["'](\w+)["']""", cell.source) if n in EXERCISES]
    return [EXERCISES[n] for n in dict.fromkeys(names)]


def _after_last_exercise(nb, exercises: list[Exercise]) -> list[int]:
    """Return the indices of the code cells that come after the last cell an exercise needs:
    the last one that checks an exercise (``check("name"``) or defines one (``def name(``).

    Those cells are the chapter's analyses (long runs, figures); the grade cannot depend on
    them, so the grader does not run them. When no such cell is found (the check cells were
    deleted, say) every cell is needed and the list is empty.
    """
    names = "|".join(re.escape(e.name) for e in exercises)
    needed = re.compile(rf"""check\(\s*["']({names})["']|^\s*def\s+({names})\s*\(""", re.MULTILINE)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    last = max((i for i in code if needed.search(nb.cells[i].source)), default=None)
    return [] if last is None else [i for i in code if i > last]


def _where_in_lab(nb, index: int) -> tuple[int, str]:
    """Return (the place of cell ``index`` among all the notebook's cells, text cells included,
    counted from 1; its first line that is not blank), the two things a learner can find it
    by in JupyterLab, which numbers no cells."""
    if not 0 <= index < len(nb.cells):
        raise ValueError(f"index must name one of the notebook's {len(nb.cells)} cells, got {index}")
    first = next((l.strip() for l in nb.cells[index].source.splitlines() if l.strip()), "")
    return index + 1, printable(shorten(first, 60))


def _random_cases(exercise: Exercise, seed: int) -> list[Case]:
    """Return ``n_random`` randomized cases, their expected values from the reference."""
    if exercise.random_kwargs is None or exercise.n_random <= 0:
        return []
    import numpy as np

    rng = np.random.default_rng([seed, zlib.crc32(exercise.name.encode())])
    cases = []
    for k in range(1, exercise.n_random + 1):
        kwargs = exercise.random_kwargs(rng)
        try:
            expected = exercise.reference(**copy.deepcopy(kwargs))
        except ValueError:  # outside the contract: not a fair question
            continue
        cases.append(Case(kwargs, expected, f"randomized input {k}"))
    return cases


def _cell_problem(number: int, source: str, text: str, line: int | None = None) -> CellProblem:
    """Return the problem of a cell, quoting the line it points at (or its first line)."""
    lines = source.splitlines()
    if line and 1 <= line <= len(lines):
        code = lines[line - 1].strip()
    else:
        line, code = None, next((l.strip() for l in lines if l.strip()), "")
    defines = tuple(re.findall(r"^\s*def\s+(\w+)\s*\(", source, flags=re.M))
    return CellProblem(number, printable(text), line, printable(shorten(code, 100)), defines)


def _error_text(output: dict) -> tuple[str, int | None]:
    """Return (one line saying what an error output means, the line of the cell it points at).
    Control characters and line breaks of the error's text are escaped: a cell's error must not
    be able to draw lines of the report."""
    text, line = _error_text_raw(output)
    return printable(text), line


def _error_text_raw(output: dict) -> tuple[str, int | None]:
    ename, evalue = str(output.get("ename", "Error")), str(output.get("evalue", ""))
    trace = _ANSI.sub("", "\n".join(output.get("traceback", [])))
    line = re.search(r"In\s*\[\d*\], line (\d+)", trace)
    if ename in ("SyntaxError", "IndentationError", "TabError"):
        line = re.search(r", line (\d+)\)$", evalue) or line
        evalue = re.sub(r"\s*\([^()]*, line \d+\)$", "", evalue)
        return f"{ename}: {evalue}", int(line[1]) if line else None
    text = f"raised {ename}" + (f": {shorten(evalue, 100)}" if evalue else "")
    if ename == "NotImplementedError":
        text += " (it calls an exercise that is not written yet)"
    return text, int(line[1]) if line else None


def _quiet_leftovers(loop, context) -> None:
    """Event-loop error handler: drop the errors of nbclient's tasks that a cell time-out or a
    stop signal leaves behind (they fail later, on a socket that is gone, and nobody awaits
    them); pass anything else to asyncio's own handler."""
    task = context.get("future") or context.get("task")
    coro = task.get_coro() if hasattr(task, "get_coro") else None
    if getattr(coro, "__qualname__", "").startswith("NotebookClient."):
        return
    loop.default_exception_handler(context)


class _Runner:
    """A kernel running one notebook, plus the grading cells. Owns the kernel's lifetime."""

    def __init__(self, nb, cwd: Path, cell_timeout: float, grace: float = GRACE, tmp: Path | None = None):
        from jupyter_core.utils import ensure_event_loop
        from nbclient import NotebookClient

        from .exercises import GRADING_ENV
        from .frontend import BOOK_BUILD_ENV, RECORDING_ENV

        class QuietClient(NotebookClient):
            def output(self, outs, msg, display_id, cell_index):
                # Keep errors only: a cell that prints a flood must not fill the memory.
                if msg["msg_type"] == "error":
                    return super().output(outs, msg, display_id, cell_index)
                return None

        ensure_event_loop().set_exception_handler(_quiet_leftovers)  # a safety net for what is left
        self.nb = nb
        # nbclient's limit is whole seconds, at least 1: keep the one used, so messages name it
        self.cell_timeout, self.grace = max(1, math.ceil(cell_timeout)), grace
        self.nb.cells.append(_new_code_cell(""))  # scratch cell for the grading code
        self.scratch = len(self.nb.cells) - 1
        env = dict(os.environ, **{GRADING_ENV: "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        env.pop(BOOK_BUILD_ENV, None)  # solutions and learners run in the live (JupyterLab) mode
        env.pop(RECORDING_ENV, None)  # and make no book forms, which grading never shows
        if tmp is not None:  # the kernel's temporary files go where the grader removes them
            env.update(TMPDIR=str(tmp), TEMP=str(tmp), TMP=str(tmp))
        self.start_kwargs = {"env": env, "cwd": str(cwd),
                             "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if os.name == "posix":  # a session of its own: a signal to its process group stays there
            self.start_kwargs["start_new_session"] = True
        self.client = QuietClient(nb, kernel_name="python3", allow_errors=True,
                                  timeout=math.ceil(cell_timeout), startup_timeout=60,
                                  shutdown_kernel="immediate")
        self.restarts = 0
        self._start()
    def _start(self, attempts: int = 3) -> None:
        """Start the kernel and connect to it. A kernel that exits before it answers is started
        again (up to ``attempts`` in all): when many kernels start at once, two can be handed
        the same free port, and the one that loses the race exits at once."""
        for attempt in range(1, attempts + 1):
            self.client.km = _current_env_kernel_manager()
            try:
                self.client.start_new_kernel(**self.start_kwargs)
                self.client.start_new_kernel_client()
                return
            except RuntimeError as exc:
                if "died" not in str(exc) or attempt == attempts:
                    raise
                if self.client.km is not None:  # nbclient usually cleans up itself
                    try:
                        self.client._cleanup_kernel()
                    except Exception:
                        pass

    def restart(self) -> None:
        """Kill the kernel and start a fresh one (the notebook must then be run again)."""
        self.shutdown()
        self.restarts += 1
        self._start()

    def shutdown(self) -> None:
        self._drop_leftover_tasks()
        try:
            self.client._cleanup_kernel()
        except Exception:  # already gone
            pass

    @staticmethod
    def _drop_leftover_tasks() -> None:
        """Cancel the nbclient tasks a cell time-out (or a stop signal) leaves running, and let
        them end.

        On a time-out nbclient leaves the cell's output poller waiting: it would read the
        kernel's next messages and drop those of later cells, and fail with a traceback nobody
        retrieves ("Task exception was never retrieved") once the kernel's sockets close.
        """
        import asyncio

        from jupyter_core.utils import ensure_event_loop

        loop = ensure_event_loop()
        if loop.is_running():
            return
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()
                 and getattr(t.get_coro(), "__qualname__", "").startswith("NotebookClient.")]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def execute(self, index: int, timeout: float, store_history: bool = True) -> str:
        """Run cell ``index``; return "ok", "timeout" or "dead" (the kernel died)."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = max(1, math.ceil(timeout))
        try:
            self.client.execute_cell(self.nb.cells[index], index, store_history=store_history)
        except CellTimeoutError:
            self._drop_leftover_tasks()
            return "timeout"
        except DeadKernelError:
            self._drop_leftover_tasks()
            return "dead"
        return "ok"

    def error_of(self, index: int) -> str:
        """Return "Name: value" of the error cell ``index`` ended with, or ""."""
        for output in self.nb.cells[index].get("outputs", []):
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {shorten(str(output.get('evalue')), 200)}"
        return ""

    def run_code(self, code: str, timeout: float) -> str:
        self.nb.cells[self.scratch].source = code
        return self.execute(self.scratch, timeout, store_history=False)

    def recover(self) -> bool:
        """After a time-out: interrupt, and restart if the kernel does not answer. True if it answered."""
        from nbclient.util import run_sync

        try:
            run_sync(self.client.km.interrupt_kernel)()
        except Exception:  # the kernel is gone: the probe below fails and we restart
            pass
        if self.run_code("pass", self.grace) == "ok":
            return True
        self.restart()
        return False

    def run_notebook(self, problems: dict, skip: set) -> None:
        """Run every code cell but ``skip``; record failures in ``problems`` (by cell index)."""
        number = 0
        for index, cell in enumerate(self.nb.cells[: self.scratch]):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            number += 1
            if index in skip:
                continue
            status = self.execute(index, self.cell_timeout)
            if status == "ok":
                errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                if errors and index not in problems:
                    problems[index] = _cell_problem(number, cell.source, *_error_text(errors[0]))
                continue
            skip.add(index)
            if status == "timeout":
                problems[index] = _cell_problem(
                    number, cell.source,
                    f"ran longer than the {self.cell_timeout:g} s limit per cell (--cell-timeout) and was stopped")
                if self.recover():
                    continue
            else:
                problems[index] = _cell_problem(number, cell.source,
                                                "stopped the kernel (a crash, exit() or out of memory)")
                self.restart()
            return self.run_notebook(problems, skip)  # the kernel is new: run the notebook again


def _current_env_kernel_manager():
    """Return a kernel manager for this very Python (the environment that has minirlhf), not
    whatever a "python3" kernel spec elsewhere on the machine points to."""
    import ipykernel.kernelspec
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnv())


def _new_code_cell(source: str):
    import nbformat

    return nbformat.v4.new_code_cell(source)




def _call_in_kernel(runner: _Runner, spec: dict, n_inputs: int) -> tuple[list, str, str]:
    """Run the grading cell step by step until the kernel session is done.

    Return (the records written, what went wrong if it did not finish, how it ended:
    "" when it finished, "error" when the grading cell failed, "dead" when the kernel died and
    "restart" when it ignored the interrupt; in both last cases it was restarted).
    """
    # The grader's side is loaded into the kernel first, under a time limit of its own: after a
    # (re)start that import brings torch with it, which takes seconds when several kernels
    # start at once on a busy machine, and the learner's first call must not pay for it.
    warm_limit = max(runner.cell_timeout, WARM_UP_TIMEOUT)
    warm = runner.run_code(WARM_UP, warm_limit)
    if warm == "dead":
        runner.restart()
        return [], "stopped the kernel (a crash, exit() or out of memory)", "dead"
    if warm == "timeout" or runner.error_of(runner.scratch):
        why = runner.error_of(runner.scratch) or f"it took longer than {warm_limit:g} s"
        return [], f"could not be graded (the grader could not load in the kernel: {why})", "error"
    code = f'__import__("minirlhf.course.grader", fromlist=["_"])._kernel_step(globals(), {spec!r})'
    results = Path(spec["results"])
    limit = n_inputs + 1
    for _ in range(n_inputs + 2):  # every step makes at least one call, so this is plenty
        status = runner.run_code(code, SLICE + spec["time_limit"] + runner.grace)
        if status == "timeout" and runner.recover():
            status = "ok"  # the interrupt stopped the call, which is recorded as a time-out
        records = _read_records(results, limit)
        if records and records[-1].get("done"):
            return records, "", ""
        if status == "ok":
            error = runner.error_of(runner.scratch)
            if error:  # the grading cell itself failed: say so rather than try again
                return records, f"could not be graded ({error})", "error"
            continue
        if status == "dead":
            runner.restart()
            return (_read_records(results, limit), "stopped the kernel (a crash, exit() or out of memory)",
                    "dead")
        return _read_records(results, limit), (f"ran past the {spec['time_limit']:g} s time limit and ignored the "
                                               "interrupt (an `except:` that catches everything?); the kernel "
                                               "was restarted"), "restart"
    return _read_records(results, limit), "could not be graded (the grading cell made no progress)", "error"


def _reference_name(exercise: Exercise) -> list | None:
    """Return [module, name] of the exercise's reference when it is a function of the package."""
    ref = exercise.reference
    module, name = getattr(ref, "__module__", ""), getattr(ref, "__qualname__", "")
    if isinstance(module, str) and module.startswith("minirlhf.") and name.isidentifier():
        return [module, name]
    return None


def _grade_exercise(runner: _Runner, exercise: Exercise, seed: int, tmp: Path,
                    time_limit: float | None, budget: float) -> tuple[ExerciseGrade, bool]:
    """Grade one exercise in the runner's kernel; return the grade and whether the kernel was restarted."""
    limit = time_limit or exercise.time_limit
    grade = ExerciseGrade(exercise, n_cases=len(exercise.cases), time_limit=limit, budget=budget)
    everything = list(exercise.cases) + _random_cases(exercise, seed)
    spec = {"name": exercise.name, "inputs": str(tmp / f"{exercise.name}.in.pkl"),
            "results": str(tmp / f"{exercise.name}.out.jsonl"), "time_limit": limit,
            "slice": SLICE, "budget": budget, "reference": _reference_name(exercise),
            "grad_wrt": list(exercise.expect.grad_wrt),
            "mentions": [c.expected.mentions if isinstance(c.expected, Raises) else None for c in everything]}
    with open(spec["inputs"], "wb") as f:
        pickle.dump([c.kwargs for c in everything], f)  # the inputs only: expected values stay here
    records, stuck, ending = _call_in_kernel(runner, spec, len(everything))
    restarted = ending in ("restart", "dead")

    done = records[-1] if records and records[-1].get("done") else {}
    if done.get("setup") == "missing":
        close = difflib.get_close_matches(exercise.name, done.get("names", []), n=1, cutoff=0.5)
        grade.problem = "not found: did you rename it?" + (f" (the notebook defines {close[0]})" if close else "")
    elif done.get("setup") == "not callable":
        grade.problem = done["detail"]
    elif done.get("setup") == "not yours":
        grade.problem = f"is {done['detail']} imported from the package, not your own function"
    elif ending == "error":
        grade.problem = stuck
    if grade.problem:
        return grade, restarted

    calls = [r for r in records if "index" in r]
    for case, record in zip(everything, calls):
        grade.results.append(_judge_record(record, case, exercise))
        grade.printed += record["n_printed"]
    if stuck and len(grade.results) < len(everything):  # the call that was running when it ended
        kind = "error" if ending == "dead" else "timeout"  # a crash is not slowness
        grade.results.append(CaseResult(everything[len(grade.results)], False, None, stuck, kind=kind,
                                        seconds=limit if kind == "timeout" else 0.0))
    if done.get("reason") == "budget":
        grade.stopped, why = "budget", f"not run: the calls took more than the {budget:g} s budget in all"
    else:
        why = "not run: an earlier input ran out of time or stopped the kernel"
        if any(r.kind == "timeout" for r in grade.results):
            grade.stopped = "time limit"
    for case in everything[len(grade.results):]:
        grade.results.append(dataclasses.replace(not_run(case), message=why))
    return grade, restarted


def _judge_record(record: dict, case: Case, exercise: Exercise) -> CaseResult:
    call = Call(record["kind"], record["value"], record["message"], "", record["n_printed"], record["seconds"],
                record.get("grads"), record.get("named"))
    return judge(call, case, exercise.expect, exercise.reference)


# --------------------------------------------------------------------------- the notebook file


def _json_kind(data) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false",
            type(None): "null"}.get(type(data), type(data).__name__)


def _read_notebook(path: Path):
    """Return (notebook, the file's bytes, "") or (None, None, what is wrong, in words)."""
    import nbformat

    if path.is_dir():
        return None, None, f"{path} is a folder, not a notebook file"
    if not path.exists():
        return None, None, f"no notebook at {path}" + _did_you_mean(path)
    if not path.is_file():  # a pipe would block the read, a device would never end
        return None, None, f"{path} is not a regular file (a pipe, a socket or a device?), so not a notebook"
    try:
        raw = _read_capped(path)
        if raw is None:
            return None, None, _too_large(path)
    except OSError as exc:
        return None, None, f"{path} could not be read ({exc.strerror or type(exc).__name__})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, f"{path} is not a notebook: it is not text (a notebook is JSON in UTF-8)"
    if not text.strip():
        return None, None, f"{path} is empty (0 cells, 0 bytes of JSON): not a notebook yet"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, None, f"{path} is not a notebook: it is not valid JSON ({shorten(str(exc), 100)})"
    if not isinstance(data, dict):
        return None, None, (f"{path} is not a notebook: it holds {_json_kind(data)}, and a notebook is a "
                            "JSON object with a list of cells")
    try:
        nb = nbformat.reads(text, as_version=4)  # a copy in memory; the file is never written
        for cell in nb.cells:  # what the runner relies on
            if not isinstance(cell.get("source"), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
                raise ValueError("a cell without its type or source")
    except Exception as exc:
        return None, None, f"{path} is not a notebook Jupyter can read ({type(exc).__name__}: {shorten(str(exc), 120)})"
    return nb, raw, ""


def _read_capped(path: Path) -> bytes | None:
    """Return the bytes of the regular file ``path``, or None when it holds more than
    MAX_NOTEBOOK_BYTES (never read further, whatever the file grows to). Raises OSError."""
    from ..store import _open_regular

    file = _open_regular(path)
    if file is None:
        raise FileNotFoundError(2, "no such file", str(path))
    with file:
        raw = file.read(MAX_NOTEBOOK_BYTES + 1)
    return None if len(raw) > MAX_NOTEBOOK_BYTES else raw


def _too_large(path: Path) -> str:
    return f"{path} is larger than any notebook the grader reads ({MAX_NOTEBOOK_BYTES / 1e6:,.0f} MB)"


def _check_file(path: Path, raw: bytes) -> str:
    """Compare the notebook file with the bytes read before grading; if it is gone or changed,
    keep the version graded and say where (empty when the file is as it was). The file is read
    only up to MAX_NOTEBOOK_BYTES: one that grew beyond that counts as changed."""
    try:
        now = _read_capped(path) if path.is_file() else None
        if now is None and path.is_file():  # grown past the cap: keep what was graded first
            return (f"the notebook file grew larger than any notebook the grader reads "
                    f"({MAX_NOTEBOOK_BYTES / 1e6:,.0f} MB) while it was graded; the version graded is kept in "
                    f"{_keep_copy(path, raw)}")
    except OSError:
        now = None
    if now == raw:
        return ""
    if now is None and not path.exists() and not path.is_symlink():
        try:
            with open(path, "xb") as f:  # only where nothing is: never replaces anything
                f.write(raw)
            return ("the notebook file was deleted while it was graded (by its own code?); the grader "
                    "wrote back the version it read")
        except OSError:
            pass
        what = "was deleted"
    else:
        what = "changed"
    return (f"the notebook file {what} while it was graded (by its own code, or saved from an editor "
            f"meanwhile); the version graded is kept in {_keep_copy(path, raw)}")


def _keep_copy(path: Path, raw: bytes) -> Path:
    """Write ``raw`` to a new file in the kept copies' folder (``paths.KEPT``; never the folder
    graded from), or else in the system's temporary folder, and return it."""
    from ..paths import KEPT

    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        KEPT.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    for k in range(100):
        candidate = KEPT / f"{path.stem}.graded-{stamp}{'' if k == 0 else f'-{k}'}.ipynb"
        try:
            with open(candidate, "xb") as f:
                f.write(raw)
            return candidate
        except FileExistsError:
            continue
        except OSError:
            break
    fd, name = tempfile.mkstemp(prefix=f"{path.stem}.graded-", suffix=".ipynb")
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return Path(name)


def is_kept_copy(path: Path) -> bool:
    """True for a copy a command kept of a learner's notebook (``NAME.graded*.ipynb``,
    ``NAME.backup*.ipynb``, or anything in ``paths.KEPT``): never graded."""
    from ..paths import KEPT

    if re.search(r"\.(graded|backup)(-[^.]*)?\.ipynb$", Path(path).name):
        return True
    try:
        return Path(path).resolve().is_relative_to(KEPT.resolve())
    except (OSError, ValueError):
        return False


def _did_you_mean(path: Path) -> str:
    """Suggest the notebook meant: a close name, or the one with the same chapter number."""
    folder = path.parent
    if not folder.is_dir():
        return f" (the folder {folder} does not exist either)"
    found = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and p.name != path.name)
    close = difflib.get_close_matches(path.stem, [p.stem for p in found], n=1, cutoff=0.75)
    prefix = re.match(r"\d+_", path.name)
    same_chapter = [p for p in found if prefix and p.name.startswith(prefix[0])]
    if close:
        return f": did you mean {folder / (close[0] + '.ipynb')}?"
    if len(same_chapter) == 1:
        return f": did you mean {same_chapter[0]}?"
    return f" (notebooks in {folder}: {', '.join(p.name for p in found) or 'none'})"


# --------------------------------------------------------------------------- grading


def _check_options(seed, time_limit, cell_timeout, budget, grace) -> None:
    """Raise ValueError naming the first option out of range."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    for name, value, top in (("time_limit", time_limit, MAX_TIME_LIMIT), ("cell_timeout", cell_timeout, MAX_SECONDS),
                             ("budget", budget, MAX_SECONDS), ("grace", grace, MAX_SECONDS)):
        if value is None and name in ("time_limit", "budget"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= top:
            raise ValueError(f"{name} must be a number of seconds above 0 and at most {top:g}, got {value!r}")


def grade_notebook(path, seed: int | None = None, time_limit: float | None = None,
                   cell_timeout: float = CELL_TIMEOUT, budget: float | None = None,
                   grace: float = GRACE, exercises: list | None = None) -> NotebookGrade:
    """Run the notebook at ``path`` in a fresh kernel and grade its exercises; never raises
    because of what the notebook holds (a bad option raises ValueError).

    ``time_limit`` overrides each exercise's limit per call; ``budget`` caps the seconds of
    calls per exercise (default :data:`BUDGET`); ``grace`` is how long a kernel gets to answer
    an interrupt.
    """
    _check_options(seed, time_limit, cell_timeout, budget, grace)
    path = Path(path)
    seed = secrets.randbelow(10**6) if seed is None else seed
    budget = BUDGET if budget is None else float(budget)
    grade = NotebookGrade(path, seed)
    started = time.perf_counter()
    if is_kept_copy(path):
        grade.note = "not graded: a copy kept by the grader or by `make notebooks`, not a notebook to grade"
        return grade
    nb, raw, grade.error = _read_notebook(path)
    if grade.error:
        return grade
    exercises = exercises if exercises is not None else _chapter_exercises(path, nb)
    chapter = re.match(r"(\d+)_", path.name)
    if not exercises and chapter:
        grade.note = f"chapter {int(chapter[1])} has no exercises to grade"
        return grade
    if not exercises:
        grade.error = (f"{path.name}: no exercises to grade (the name should start with the chapter "
                       "number, like 01_kl_penalty.ipynb, or the notebook should keep its check cells)")
        return grade
    if not any(c.cell_type == "code" and c.source.strip() for c in nb.cells):
        grade.error = (f"{path} has no code cells, so there is nothing to grade (an empty notebook, or not "
                       "the one with your work?)")
        return grade

    with tempfile.TemporaryDirectory(prefix="minirlhf-check-") as tmp:
        tmp = Path(tmp)
        (tmp / "work").mkdir()  # the kernel's working folder: empty, away from the notebook
        (tmp / "tmp").mkdir()  # the kernel's temporary files
        try:
            runner = _Runner(nb, tmp / "work", cell_timeout, grace, tmp / "tmp")
        except Exception as exc:
            grade.error = f"could not start a Python kernel ({type(exc).__name__}: {exc})"
            return grade
        try:
            after = _after_last_exercise(nb, exercises)
            code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
            grade.not_run = [code.index(i) + 1 for i in after]
            grade.first_not_run = _where_in_lab(nb, after[0]) if after else ()
            problems, skip = {}, set(after)
            runner.run_notebook(problems, skip)
            grade.cells = [problems[i] for i in sorted(problems)]
            for exercise in exercises:
                one, restarted = _grade_exercise(runner, exercise, seed, tmp, time_limit, budget)
                grade.exercises.append(one)
                if restarted:
                    runner.run_notebook({}, skip)  # a new kernel: define everything again
        except Exception as exc:  # a fault of the grader or of Jupyter, not of the notebook
            grade.error = f"grading stopped: {type(exc).__name__}: {shorten(str(exc), 200)}"
        finally:
            grade.restarts = runner.restarts
            runner.shutdown()
            try:
                grade.file_problem = _check_file(path, raw)
            except OSError as exc:  # not even a copy could be written
                grade.file_problem = f"the notebook file could not be checked after grading ({exc})"
    grade.seconds = time.perf_counter() - started
    return grade


# --------------------------------------------------------------------------- report


class _Style:
    """ANSI colors when writing to a terminal that wants them, nothing otherwise."""

    CODES = {"pass": "1;32", "fail": "1;31", "todo": "1;33", "slow": "1;34", "dim": "2", "bold": "1"}

    def __init__(self, color: bool):
        self.color = color

    def __call__(self, kind: str, text: str) -> str:
        return f"\x1b[{self.CODES[kind]}m{text}\x1b[0m" if self.color else text


def use_color(stream, choice: str = "auto") -> bool:
    """Color when asked, or in auto mode when ``stream`` is a terminal and NO_COLOR is unset."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def _slow_lines(e: ExerciseGrade) -> tuple[str, str]:
    """The two lines of a SLOW verdict: how far it got, and what to do."""
    ran, total = e.n_passed, len(e.results)
    left = total - ran
    per_call = f"; a call takes {e.seconds_per_call:.2g} s" if e.seconds_per_call >= 0.01 else ""
    if e.stopped == "budget":
        inputs = f"all {ran} inputs that ran" if ran > 1 else "the one input that ran"
        return (f"right on {inputs}, then the {e.budget:g} s budget (--budget) ran out with "
                f"{left} of {total} inputs left{per_call}",
                "not a wrong answer: make it faster, or grade with a larger --budget")
    number, stop = next((i, r) for i, r in enumerate(e.results, 1) if r.kind == "timeout")
    label = stop.case.why or f"input {number}"
    inputs = f"all {ran} inputs that ran" if ran > 1 else "the one input that ran"
    return (f"right on {inputs}, then {label} took longer than the {e.time_limit:g} s limit "
            f"per call (--time-limit); {left} of {total} inputs not finished{per_call}",
            "not a wrong answer: make it faster (or look for a loop that does not end on that input)")


def render(grade: NotebookGrade, color: bool = False) -> str:
    """Return the plain (or colored) text report of one notebook."""
    s = _Style(color)
    if grade.error:
        return f"{s('fail', 'ERROR')} {grade.error}"
    if grade.note:
        return f"{s('bold', str(grade.path))}  {grade.note}"
    lines = [f"{s('bold', str(grade.path))}  (randomized inputs from seed {grade.seed}; "
             f"--seed {grade.seed} repeats them)"]
    if grade.file_problem:
        lines.append(f"  {s('fail', 'FILE')}  {grade.file_problem}")
    if grade.not_run:
        n = len(grade.not_run)
        if grade.first_not_run:
            place, first_line = grade.first_not_run
            where = f"cell {place} of the notebook, text cells counted, which starts `{first_line}`"
            cells = (f"the last code cell ({where}) is" if n == 1 else
                     f"the last {n} code cells, from {where}, are")
        else:
            cells = "the last code cell is" if n == 1 else f"the last {n} code cells are"
        they, come, them = ("it", "comes", "it") if n == 1 else ("they", "come", "them")
        lines.append(f"  {s('dim', 'note')}  {cells} not run: {they} {come} after the last exercise, and "
                     f"no grade depends on {them} (run the notebook to see {them})")
    for problem in grade.cells:
        lines.append(f"  {s('fail', 'CELL')}  {problem}")
        lines.append(f"        {s('dim', '|')} {problem.code}")
    width = max((len(e.exercise.name) for e in grade.exercises), default=0)
    for e in grade.exercises:
        word = {"pass": "PASS", "fail": "FAIL", "todo": "TODO", "slow": "SLOW"}[e.state]
        name = e.exercise.name.ljust(width)
        if e.problem:
            culprit = next((p for p in grade.cells if e.exercise.name in p.defines), None)
            if e.problem.startswith("not found") and culprit:
                lines.append(f"  {s('fail', word)}  {name}  not defined, because code cell {culprit.number} "
                             "failed (above)")
            else:
                lines.append(f"  {s('fail', word)}  {name}  {printable(e.problem)}")
            continue
        counts = f"{e.n_passed}/{len(e.results)}"
        n_random = len(e.results) - e.n_cases
        if n_random:
            counts += (f"  (cases {sum(r.passed for r in e.results[:e.n_cases])}/{e.n_cases}, "
                       f"randomized {sum(r.passed for r in e.results[e.n_cases:])}/{n_random})")
        if e.state == "todo":
            lines.append(f"  {s('todo', word)}  {name}  not implemented yet: write its body in the notebook, "
                         "then grade again")
            continue
        if e.state == "slow":
            what, advice = _slow_lines(e)
            lines.append(f"  {s('slow', word)}  {name}  {what}")
            lines.append(f"        {advice}")
        else:
            lines.append(f"  {s(e.state, word)}  {name}  {counts}")
        if e.state == "fail":
            first = next(r for r in e.results if not r.passed)
            label = first.case.why if first.kind != "not run" else ""
            lines.append(f"        first failure: {label}" if label else "        first failure:")
            lines += [f"          {s('dim', f'{k:<9}')} {v}" for k, v in failure_lines(first)]
            not_run_n = sum(r.kind == "not run" for r in e.results)
            if not_run_n:
                why = (f" (the calls used up the {e.budget:g} s budget, --budget)" if e.stopped == "budget"
                       else "")
                lines.append(f"          {not_run_n} inputs not run after that{why}")
            number, text, held = e.shown_hint()
            if text:
                lines.append(f"        {s('bold', f'hint {number} of {len(e.exercise.hints)}')}: {text}")
            elif held:
                last = len(e.exercise.hints)
                lines.append(f"        hint {last} of {last} (nearly the answer) fits this mistake: it is in the "
                             "notebook, under the exercise")
        if e.printed:
            lines.append(f"        note: it printed {e.printed:,} characters over {len(e.results)} calls (prints or "
                         "warnings, not shown); only what it returns counts.")
    return "\n".join(lines)


def summary_line(grades: list[NotebookGrade], color: bool = False) -> str:
    s = _Style(color)
    exercises = [e for g in grades for e in g.exercises]
    broken = [g for g in grades if g.error]
    n_pass = sum(e.passed for e in exercises)
    n_slow = sum(e.state == "slow" for e in exercises)
    text = f"{n_pass} of {len(exercises)} exercises pass"
    if n_slow:
        text += f"; {n_slow} {'is' if n_slow == 1 else 'are'} right so far but too slow"
    if broken:
        text += f"; {len(broken)} notebook{'s' if len(broken) > 1 else ''} could not be graded"
    ok = not broken and n_pass == len(exercises)
    return s("pass" if ok else "fail", "Result:") + " " + text + "."


def exit_status(grades: list[NotebookGrade]) -> int:
    if any(g.error for g in grades):
        return 2
    return 0 if all(g.passed for g in grades) else 1


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ending in where to look."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _seconds(top: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not (math.isfinite(value) and 0 < value <= top):
            raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {top:g}, got {text}")
        return value
    return parse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {value}")
    return value


class _Stopped(KeyboardInterrupt):
    """Raised in the grader when a SIGTERM or SIGHUP arrives, so that the kernel is shut down and
    the temporary files removed on the way out. A KeyboardInterrupt, so that the event loop
    lets it through at once, as it does Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _on_stop_signal(signum, frame):
    for sig in _STOP_SIGNALS:  # one is enough: clean up undisturbed
        signal.signal(sig, signal.SIG_IGN)
    raise _Stopped(signum)


def main(argv=None) -> int:
    parser = _Parser(
        prog="python -m minirlhf.course.grader",
        description="Grade your notebooks: run each in a fresh kernel and check its exercises on the "
                    "cases and on randomized inputs against the reference solutions.",
        epilog=f"Limits: each call of your function gets --time-limit seconds (each exercise sets its own, "
               f"usually 10); the calls of one exercise share --budget seconds ({BUDGET:g}); a returned "
               f"value may hold at most {RETURN_CAP:,} numbers. Exit status: 0 all pass, 1 one fails or is too "
               "slow, 2 a notebook could not be graded.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="e.g. notebooks/01_kl_penalty.ipynb")
    parser.add_argument("--seed", type=_seed, default=None,
                        help="seed of the randomized inputs, a whole number >= 0 (default: a new one)")
    parser.add_argument("--time-limit", type=_seconds(MAX_TIME_LIMIT), default=None,
                        help="seconds per call of your function (default: each exercise's own, usually 10)")
    parser.add_argument("--budget", type=_seconds(MAX_SECONDS), default=BUDGET,
                        help=f"seconds of calls per exercise, all its inputs together (default {BUDGET:g}); "
                             "a function right on every input it finished before the budget ran out is "
                             "reported SLOW")
    parser.add_argument("--cell-timeout", type=_seconds(MAX_SECONDS), default=CELL_TIMEOUT,
                        help=f"seconds any notebook cell may run (default {CELL_TIMEOUT:g})")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="color the report (auto: on a terminal, unless NO_COLOR is set)")
    args = parser.parse_args(argv)
    color = use_color(sys.stdout, args.color)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    grades, name = [], ""
    previous = {sig: signal.signal(sig, _on_stop_signal) for sig in _STOP_SIGNALS}
    try:
        for name in args.notebooks:
            print(f"grading {name} ...", file=sys.stderr, flush=True)
            grade = grade_notebook(name, seed=seed, time_limit=args.time_limit, cell_timeout=args.cell_timeout,
                                   budget=args.budget)
            grades.append(grade)
            print(render(grade, color), flush=True)
    except _Stopped as stop:  # the kernel was shut down and the temporary files removed on the way out
        print(f"grading stopped by {signal.Signals(stop.signum).name} while {name} was graded; if that notebook's "
              "code sends signals (os.kill(os.getppid(), ...)), that code is the cause. The notebook's kernel was "
              "shut down and the temporary files removed.", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:  # the kernel was shut down on the way out
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if len(grades) > 1 or not grades[0].error:
        print(summary_line(grades, color), flush=True)  # before anything the shell writes next
    return exit_status(grades)


if __name__ == "__main__":
    sys.exit(main())
