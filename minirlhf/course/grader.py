"""Grade a learner's notebook against the solutions: ``python -m minirlhf.course.grader NOTEBOOK ...``.

For each notebook:

1. **Run it.** The notebook is read into memory and run top to bottom in a fresh kernel
   (nbclient), with the notebook's folder as working directory so that it behaves as in
   JupyterLab. The file itself is only read, never written. A cell that fails is recorded
   and the run goes on; a cell that runs too long is interrupted. The notebook's own check
   cells do nothing during the run (``GRADING_ENV``): the grader runs those cases itself.
2. **Pick the exercises.** Those of the notebook's chapter (its ``NN_`` prefix) from the
   registry :mod:`minirlhf.course.exercises`; a renamed notebook is recognised by its check cells.
3. **Call the learner's functions.** Each exercise gets its cases plus ``n_random``
   randomized inputs from ``random_kwargs`` (a fresh seed each run, printed so a run can be
   repeated with ``--seed``). The inputs go to the kernel in a pickle file (they may hold
   torch tensors), and a one-line cell calls the learner's function by name on each, through
   :func:`minirlhf.course.cases.call_safely` (time limit, captured prints, mutated inputs). What
   each call returned is pickled back.
4. **Judge here.** The expected values never enter the kernel: the reference solution runs
   in this process and :func:`minirlhf.course.cases.judge` compares, with the exercise's
   comparator. Passing therefore means agreeing with the reference on inputs the notebook
   never saw.

Why the calls run in the learner's kernel and not here: their function may use anything
the notebook defined (globals, imports, helpers), and only that kernel has it.

The grader never hangs: calls run in slices of about a second, each slice a cell with a
timeout. Inside the kernel every call has the exercise's time limit (an alarm signal); a
call that ignores it is interrupted from here, and a kernel that ignores the interrupt too
is restarted and the notebook run again for the exercises still to grade.

Exit status: 0 when every exercise of every notebook passes, 1 when one fails, 2 when a
notebook could not be graded (missing file, not a notebook, no exercises, no kernel).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import io
import math
import os
import pickle
import re
import secrets
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .cases import (Call, Case, CaseResult, Exercise, Report, call_safely, describe, shorten,
                       failure_lines, judge, next_hint, not_run)

__all__ = ["grade_notebook", "NotebookGrade", "ExerciseGrade", "CellProblem", "render", "main"]

SLICE = 1.0  # seconds of calls per grading cell, so the grader can step in between
GRACE = 3.0  # seconds a kernel gets to answer after a time limit or an interrupt
CELL_TIMEOUT = 120.0  # seconds any one notebook cell may run
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

    @property
    def passed(self) -> bool:
        return not self.error and all(e.passed for e in self.exercises)


# --------------------------------------------------------------------------- kernel side
# This part runs inside the learner's kernel. It sees the inputs, never the expected values.

_SESSIONS: dict = {}


class _KernelSession:
    """Calls one learner function on a list of inputs, a slice at a time, recording each call."""

    def __init__(self, namespace: dict, spec: dict):
        self.spec = spec
        self.out = open(spec["results"], "ab")
        self.i = 0
        self.done = False
        self.start = time.perf_counter()
        name = spec["name"]
        fn = namespace.get(name)
        if fn is None:
            own = sorted(k for k, v in namespace.items()
                         if callable(v) and getattr(v, "__module__", None) == "__main__" and not k.startswith("_"))
            self._finish(setup="missing", names=own)
        elif not callable(fn):
            self._finish(setup="not callable", detail=f"{name} is a {type(fn).__name__}, not a function")
        elif str(getattr(fn, "__module__", "")).startswith("minirlhf"):
            self._finish(setup="not yours", detail=f"{fn.__module__}.{getattr(fn, '__name__', name)}")
        else:
            self.fn = fn
            with open(spec["inputs"], "rb") as f:
                self.inputs = pickle.load(f)

    def _write(self, record: dict) -> None:
        pickle.dump(record, self.out)
        self.out.flush()

    def _finish(self, **record) -> None:
        self._write({"done": True, **record})
        self.out.close()
        self.done, self.inputs = True, []

    def step(self) -> None:
        """Run calls for about ``spec['slice']`` seconds, or to the end."""
        if self.done:
            return
        until = time.perf_counter() + self.spec["slice"]
        while self.i < len(self.inputs) and time.perf_counter() < until:
            call = call_safely(self.fn, self.inputs[self.i], self.spec["time_limit"])
            self._write(_call_record(self.i, call))
            self.i += 1
            if call.kind == "timeout":
                return self._finish(reason="timeout")
            if time.perf_counter() - self.start > self.spec["budget"]:
                return self._finish(reason="budget")
        if self.i >= len(self.inputs):
            self._finish(reason="all")


class _Pickler(pickle.Pickler):
    """Pickles a tensor that requires grad as its detached copy, marked to require grad again:
    a loss with a grad_fn is a right answer, but autograd graphs cannot leave a process."""

    def reducer_override(self, obj):
        if type(obj).__module__.startswith("torch") and getattr(obj, "requires_grad", False):
            return _requiring_grad, (obj.detach(),)
        return NotImplemented


def _requiring_grad(tensor):
    return tensor.requires_grad_(True)


def _call_record(index: int, call: Call) -> dict:
    """Return a picklable record of a call; the returned value is pickled on its own."""
    record = {"index": index, "kind": call.kind, "message": call.message,
              "n_printed": call.n_printed, "seconds": call.seconds, "value": None}
    if call.kind in ("ok", "mutated"):
        buffer = io.BytesIO()
        try:
            _Pickler(buffer).dump(call.value)
            record["value"] = buffer.getvalue()
        except Exception:
            record["type"] = type(call.value).__name__
            record["text"] = describe(call.value)
    return record


def _kernel_step(namespace: dict, spec: dict) -> None:
    """Entry point of the grading cell: start or continue the session for ``spec``."""
    session = _SESSIONS.get(spec["results"])
    if session is None:
        session = _SESSIONS[spec["results"]] = _KernelSession(namespace, spec)
    session.step()  # a finished session stays, so a late step does not start it again


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
    return CellProblem(number, text, line, shorten(code, 100), defines)


def _error_text(output: dict) -> tuple[str, int | None]:
    """Return (one line saying what an error output means, the line of the cell it points at)."""
    ename, evalue = output.get("ename", "Error"), str(output.get("evalue", ""))
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


class _Runner:
    """A kernel running one notebook, plus the grading cells. Owns the kernel's lifetime."""

    def __init__(self, nb, cwd: Path, cell_timeout: float, grace: float = GRACE):
        from nbclient import NotebookClient

        from .exercises import GRADING_ENV
        from .frontend import BOOK_BUILD_ENV

        class QuietClient(NotebookClient):
            def output(self, outs, msg, display_id, cell_index):
                # Keep errors only: a cell that prints a flood must not fill the memory.
                if msg["msg_type"] == "error":
                    return super().output(outs, msg, display_id, cell_index)
                return None

        self.nb = nb
        self.cell_timeout, self.grace = cell_timeout, grace
        self.nb.cells.append(_new_code_cell(""))  # scratch cell for the grading code
        self.scratch = len(self.nb.cells) - 1
        env = dict(os.environ, **{GRADING_ENV: "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        env.pop(BOOK_BUILD_ENV, None)  # solutions and learners run in the live (JupyterLab) mode
        self.start_kwargs = {"env": env, "cwd": str(cwd),
                             "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.client = QuietClient(nb, kernel_name="python3", allow_errors=True,
                                  timeout=math.ceil(cell_timeout), startup_timeout=60,
                                  shutdown_kernel="immediate")
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        self.client.km = _current_env_kernel_manager()
        self.client.start_new_kernel(**self.start_kwargs)
        self.client.start_new_kernel_client()

    def restart(self) -> None:
        """Kill the kernel and start a fresh one (the notebook must then be run again)."""
        self.shutdown()
        self.restarts += 1
        self._start()

    def shutdown(self) -> None:
        try:
            self.client._cleanup_kernel()
        except Exception:  # already gone
            pass

    def execute(self, index: int, timeout: float, store_history: bool = True) -> str:
        """Run cell ``index``; return "ok", "timeout" or "dead" (the kernel died)."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = max(1, math.ceil(timeout))
        try:
            self.client.execute_cell(self.nb.cells[index], index, store_history=store_history)
        except CellTimeoutError:
            return "timeout"
        except DeadKernelError:
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
                problems[index] = _cell_problem(number, cell.source,
                                                f"ran longer than {self.cell_timeout:g} s and was stopped")
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


def _read_records(path: Path) -> list[dict]:
    records = []
    try:
        with open(path, "rb") as f:
            while True:
                records.append(pickle.load(f))
    except FileNotFoundError:
        pass
    except Exception:  # EOF, or a record cut short by a killed kernel
        pass
    return records


def _call_in_kernel(runner: _Runner, spec: dict, n_inputs: int) -> tuple[list, str, str]:
    """Run the grading cell step by step until the kernel session is done.

    Return (the records written, what went wrong if it did not finish, how it ended:
    "" when it finished, "error" when the grading cell failed, "restart" when the kernel had
    to be restarted).
    """
    code = f'__import__("minirlhf.course.grader", fromlist=["_"])._kernel_step(globals(), {spec!r})'
    results = Path(spec["results"])
    for _ in range(n_inputs + 2):  # every step makes at least one call, so this is plenty
        status = runner.run_code(code, SLICE + spec["time_limit"] + runner.grace)
        if status == "timeout" and runner.recover():
            status = "ok"  # the interrupt stopped the call, which is recorded as a time-out
        records = _read_records(results)
        if records and records[-1].get("done"):
            return records, "", ""
        if status == "ok":
            error = runner.error_of(runner.scratch)
            if error:  # the grading cell itself failed: say so rather than try again
                return records, f"could not be graded ({error})", "error"
            continue
        if status == "dead":
            runner.restart()
            return _read_records(results), "stopped the kernel (a crash, exit() or out of memory)", "restart"
        return _read_records(results), (f"ran past the {spec['time_limit']:g} s time limit and ignored the "
                                        "interrupt (an `except:` that catches everything?); the kernel "
                                        "was restarted"), "restart"
    return _read_records(results), "could not be graded (the grading cell made no progress)", "error"


def _grade_exercise(runner: _Runner, exercise: Exercise, seed: int, tmp: Path,
                    time_limit: float | None, budget: float | None) -> tuple[ExerciseGrade, bool]:
    """Grade one exercise in the runner's kernel; return the grade and whether the kernel was restarted."""
    grade = ExerciseGrade(exercise, n_cases=len(exercise.cases))
    everything = list(exercise.cases) + _random_cases(exercise, seed)
    limit = time_limit or exercise.time_limit
    spec = {"name": exercise.name, "inputs": str(tmp / f"{exercise.name}.in.pkl"),
            "results": str(tmp / f"{exercise.name}.out.pkl"), "time_limit": limit,
            "slice": SLICE, "budget": budget or max(60.0, 3 * limit)}
    with open(spec["inputs"], "wb") as f:
        pickle.dump([c.kwargs for c in everything], f)  # the inputs only: expected values stay here
    records, stuck, ending = _call_in_kernel(runner, spec, len(everything))
    restarted = ending == "restart"

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
        grade.results.append(CaseResult(everything[len(grade.results)], False, None, stuck, kind="timeout"))
    why = (f"not run: the calls took more than {spec['budget']:g} s in all" if done.get("reason") == "budget"
           else "not run: an earlier input ran out of time or stopped the kernel")
    for case in everything[len(grade.results):]:
        grade.results.append(dataclasses.replace(not_run(case), message=why))
    return grade, restarted


def _judge_record(record: dict, case: Case, exercise: Exercise) -> CaseResult:
    kind = record["kind"]
    value = None
    if kind in ("ok", "mutated"):
        if record["value"] is None:
            return CaseResult(case, False, None, f"returned a {record['type']} ({record['text']}), "
                                                 "which is not a value the contract allows", kind="error")
        try:
            value = pickle.loads(record["value"])
        except Exception:
            return CaseResult(case, False, None, "returned an object of a class defined in the notebook, "
                                                 "which is not a value the contract allows", kind="error")
    call = Call(kind, value, record["message"], "", record["n_printed"], record["seconds"])
    return judge(call, case, exercise.expect)


def grade_notebook(path, seed: int | None = None, time_limit: float | None = None,
                   cell_timeout: float = CELL_TIMEOUT, budget: float | None = None,
                   grace: float = GRACE, exercises: list | None = None) -> NotebookGrade:
    """Run the notebook at ``path`` in a fresh kernel and grade its exercises; never raises
    because of what the notebook holds.

    ``time_limit`` overrides each exercise's limit per call; ``budget`` caps the seconds of
    calls per exercise; ``grace`` is how long a kernel gets to answer an interrupt.
    """
    import nbformat

    path = Path(path)
    seed = secrets.randbelow(10**6) if seed is None else seed
    grade = NotebookGrade(path, seed)
    started = time.perf_counter()
    if not path.is_file():
        grade.error = f"no notebook at {path}" + _did_you_mean(path)
        return grade
    try:
        nb = nbformat.read(str(path), as_version=4)  # a copy in memory; the file is never written
    except Exception as exc:
        grade.error = f"{path} is not a notebook Jupyter can read ({type(exc).__name__}: {shorten(str(exc), 120)})"
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

    with tempfile.TemporaryDirectory(prefix="minirlhf-check-") as tmp:
        try:
            runner = _Runner(nb, path.resolve().parent, cell_timeout, grace)
        except Exception as exc:
            grade.error = f"could not start a Python kernel ({type(exc).__name__}: {exc})"
            return grade
        try:
            problems, skip = {}, set()
            runner.run_notebook(problems, skip)
            grade.cells = [problems[i] for i in sorted(problems)]
            for exercise in exercises:
                one, restarted = _grade_exercise(runner, exercise, seed, Path(tmp), time_limit, budget)
                grade.exercises.append(one)
                if restarted:
                    runner.run_notebook({}, skip)  # a new kernel: define everything again
        except Exception as exc:  # a fault of the grader or of Jupyter, not of the notebook
            grade.error = f"grading stopped: {type(exc).__name__}: {shorten(str(exc), 200)}"
        finally:
            grade.restarts = runner.restarts
            runner.shutdown()
    grade.seconds = time.perf_counter() - started
    return grade


def _did_you_mean(path: Path) -> str:
    """Suggest the notebook meant: a close name, or the one with the same chapter number."""
    folder = path.parent
    if not folder.is_dir():
        return f" (the folder {folder} does not exist either)"
    found = sorted(folder.glob("*.ipynb"))
    close = difflib.get_close_matches(path.stem, [p.stem for p in found], n=1, cutoff=0.75)
    prefix = re.match(r"\d+_", path.name)
    same_chapter = [p for p in found if prefix and p.name.startswith(prefix[0])]
    if close:
        return f": did you mean {folder / (close[0] + '.ipynb')}?"
    if len(same_chapter) == 1:
        return f": did you mean {same_chapter[0]}?"
    return f" (notebooks in {folder}: {', '.join(p.name for p in found) or 'none'})"


# --------------------------------------------------------------------------- report


class _Style:
    """ANSI colors when writing to a terminal that wants them, nothing otherwise."""

    CODES = {"pass": "1;32", "fail": "1;31", "todo": "1;33", "dim": "2", "bold": "1"}

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


def render(grade: NotebookGrade, color: bool = False) -> str:
    """Return the plain (or colored) text report of one notebook."""
    s = _Style(color)
    if grade.error:
        return f"{s('fail', 'ERROR')} {grade.error}"
    if grade.note:
        return f"{s('bold', str(grade.path))}  {grade.note}"
    lines = [f"{s('bold', str(grade.path))}  (randomized inputs from seed {grade.seed}; "
             f"--seed {grade.seed} repeats them)"]
    for problem in grade.cells:
        lines.append(f"  {s('fail', 'CELL')}  {problem}")
        lines.append(f"        {s('dim', '|')} {problem.code}")
    width = max((len(e.exercise.name) for e in grade.exercises), default=0)
    for e in grade.exercises:
        word = {"pass": "PASS", "fail": "FAIL", "todo": "TODO"}[e.state]
        name = e.exercise.name.ljust(width)
        if e.problem:
            culprit = next((p for p in grade.cells if e.exercise.name in p.defines), None)
            if e.problem.startswith("not found") and culprit:
                lines.append(f"  {s('fail', word)}  {name}  not defined, because code cell {culprit.number} "
                             "failed (above)")
            else:
                lines.append(f"  {s('fail', word)}  {name}  {e.problem}")
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
        lines.append(f"  {s(e.state, word)}  {name}  {counts}")
        if e.state == "fail":
            first = next(r for r in e.results if not r.passed)
            label = first.case.why if first.kind != "not run" else ""
            lines.append(f"        first failure: {label}" if label else "        first failure:")
            lines += [f"          {s('dim', f'{k:<9}')} {v}" for k, v in failure_lines(first)]
            not_run_n = sum(r.kind == "not run" for r in e.results)
            if not_run_n:
                lines.append(f"          {not_run_n} inputs not run after that")
            number, text = next_hint(e.exercise.hints, e.n_passed, len(e.results))
            if text:
                lines.append(f"        {s('bold', f'hint {number} of {len(e.exercise.hints)}')}: {text}")
        if e.printed:
            lines.append(f"        note: it printed {e.printed:,} characters over {len(e.results)} calls (prints or "
                         "warnings, not shown); only what it returns counts.")
    return "\n".join(lines)


def summary_line(grades: list[NotebookGrade], color: bool = False) -> str:
    s = _Style(color)
    exercises = [e for g in grades for e in g.exercises]
    broken = [g for g in grades if g.error]
    n_pass = sum(e.passed for e in exercises)
    text = f"{n_pass} of {len(exercises)} exercises pass"
    if broken:
        text += f"; {len(broken)} notebook{'s' if len(broken) > 1 else ''} could not be graded"
    ok = not broken and n_pass == len(exercises)
    return s("pass" if ok else "fail", "Result:") + " " + text + "."


def exit_status(grades: list[NotebookGrade]) -> int:
    if any(g.error for g in grades):
        return 2
    return 0 if all(g.passed for g in grades) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minirlhf.course.grader",
        description="Grade your notebooks: run each in a fresh kernel and check its exercises on the "
                    "cases and on randomized inputs against the reference solutions.")
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="e.g. notebooks/01_kl_penalty.ipynb")
    parser.add_argument("--seed", type=int, default=None, help="seed of the randomized inputs (default: a new one)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds per call of your function (default: each exercise's own, usually 10)")
    parser.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT,
                        help=f"seconds any notebook cell may run (default {CELL_TIMEOUT:g})")
    parser.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                        help="color the report (auto: on a terminal, unless NO_COLOR is set)")
    args = parser.parse_args(argv)
    color = use_color(sys.stdout, args.color)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    grades = []
    try:
        for name in args.notebooks:
            print(f"grading {name} ...", file=sys.stderr, flush=True)
            grade = grade_notebook(name, seed=seed, time_limit=args.time_limit, cell_timeout=args.cell_timeout)
            grades.append(grade)
            print(render(grade, color), flush=True)
    except KeyboardInterrupt:  # the kernel was shut down on the way out
        print("interrupted", file=sys.stderr)
        return 130
    if len(grades) > 1 or not grades[0].error:
        print(summary_line(grades, color))
    return exit_status(grades)


if __name__ == "__main__":
    sys.exit(main())
