"""Grading one notebook: pick its exercises, run it in a fresh kernel, have each exercise's
function called on its cases and on randomized inputs in that kernel, judge what comes back
here, and gather everything in a :class:`NotebookGrade`.

:func:`grade_notebook` is the entry point; it never raises because of what the notebook holds.
The calls of one exercise share a budget (:data:`BUDGET`); a function that is right on every
input it finished but runs out of time is SLOW, never wrong. The expected values never enter the
kernel: the inputs go there in a pickle file written here, the answers come back as plain data.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import pickle
import re
import secrets
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ...safe_text import printable, shorten
from ..cases import Case, CaseResult, Exercise, Raises, not_run
from ..report import Report
from .notebook_file import _check_file, _read_notebook, is_kept_copy
from .records import _judge_record
from .runner import GRACE, SLICE, _call_in_kernel, _Runner

CELL_TIMEOUT = 120.0  # seconds any one notebook cell may run
BUDGET = 60.0  # seconds of calls per exercise, all its inputs together
MAX_SECONDS = 86400.0  # the largest --cell-timeout or --budget taken (a day)
MAX_TIME_LIMIT = 3600.0  # the largest --time-limit taken (an hour: the alarm's range is finite)
MIN_TIME_LIMIT = 0.1  # the smallest --time-limit taken: a right call may take that long on a busy machine


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
    cells: list = field(default_factory=list)  # runner.CellProblem, in notebook order
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


def _chapter_exercises(path: Path, nb) -> list[Exercise]:
    """Return the notebook's exercises: by its NN_ prefix, else by the check cells it holds."""
    from ..exercises import EXERCISES, for_chapter

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
    first = next((text.strip() for text in nb.cells[index].source.splitlines() if text.strip()), "")
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


def _reference_name(exercise: Exercise) -> list | None:
    """Return [module, name] of the exercise's reference when it is a function of the package."""
    ref = exercise.reference
    module, name = getattr(ref, "__module__", ""), getattr(ref, "__qualname__", "")
    if isinstance(module, str) and module.startswith("minirlhf.") and name.isidentifier():
        return [module, name]
    return None


TMP_PREFIX = "minirlhf-check-"  # the grader's temporary folder: the kernel's files, its working folder
OWNER_FILE = "grader.pid"  # in that folder: the process id of the grader that made it


def _remove_dead_graders_folders() -> None:
    """Remove the temporary folders of graders that were killed before they could (SIGKILL):
    this user's, whose grader's process is gone. A folder whose owner cannot be read is left."""
    import shutil

    for folder in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            pid = int((folder / OWNER_FILE).read_text(encoding="utf-8").strip())
            if pid <= 0 or pid == os.getpid():
                continue
            os.kill(pid, 0)
        except ProcessLookupError:  # its grader is gone
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError, OverflowError):  # not ours to judge: leave it
            continue


def _renamed(name: str, defined: list) -> list:
    """The one function the notebook defines that looks like ``name`` renamed (``kl_penalty2``,
    ``my_kl_penalty``), if any: not another exercise's function (``fix_run_f`` is not
    ``tell_run_a`` renamed), and close enough that the suggestion is likely right."""
    from ..exercises import EXERCISES

    others = [n for n in defined if isinstance(n, str) and n not in EXERCISES]
    return difflib.get_close_matches(name, others, n=1, cutoff=0.75)


def _grade_exercise(
    runner: _Runner, exercise: Exercise, seed: int, tmp: Path, time_limit: float | None, budget: float
) -> tuple[ExerciseGrade, bool]:
    """Grade one exercise in the runner's kernel; return the grade and whether the kernel was restarted."""
    limit = time_limit or exercise.time_limit
    cases = tuple(exercise.cases)
    grade = ExerciseGrade(exercise, n_cases=len(cases), time_limit=limit, budget=budget)
    everything = list(cases) + _random_cases(exercise, seed)
    spec = {
        "name": exercise.name,
        "inputs": str(tmp / f"{exercise.name}.in.pkl"),
        "results": str(tmp / f"{exercise.name}.out.jsonl"),
        "time_limit": limit,
        "slice": SLICE,
        "budget": budget,
        "reference": _reference_name(exercise),
        "also_blocks": list(exercise.also_blocks),
        "grad_wrt": list(exercise.expect.grad_wrt),
        "mentions": [c.expected.mentions if isinstance(c.expected, Raises) else None for c in everything],
    }
    with open(spec["inputs"], "wb") as f:
        pickle.dump([c.kwargs for c in everything], f)  # the inputs only: expected values stay here
    records, stuck, ending = _call_in_kernel(runner, spec, len(everything))
    restarted = ending in ("restart", "dead")

    done = records[-1] if records and records[-1].get("done") else {}
    if done.get("setup") == "missing":
        close = _renamed(exercise.name, done.get("names", []))
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
        grade.results.append(
            CaseResult(
                everything[len(grade.results)],
                False,
                None,
                stuck,
                kind=kind,
                seconds=limit if kind == "timeout" else 0.0,
            )
        )
    if done.get("reason") == "budget":
        grade.stopped, why = "budget", f"not run: the calls took more than the {budget:g} s budget in all"
    else:
        why = "not run: an earlier input ran out of time or stopped the kernel"
        if any(r.kind == "timeout" for r in grade.results):
            grade.stopped = "time limit"
    for case in everything[len(grade.results) :]:
        grade.results.append(dataclasses.replace(not_run(case), message=why))
    return grade, restarted


def _check_options(seed, time_limit, cell_timeout, budget, grace) -> None:
    """Raise ValueError naming the first option out of range."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    for name, value, top in (
        ("time_limit", time_limit, MAX_TIME_LIMIT),
        ("cell_timeout", cell_timeout, MAX_SECONDS),
        ("budget", budget, MAX_SECONDS),
        ("grace", grace, MAX_SECONDS),
    ):
        if value is None and name in ("time_limit", "budget"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= top:
            raise ValueError(f"{name} must be a number of seconds above 0 and at most {top:g}, got {value!r}")


def grade_notebook(
    path,
    seed: int | None = None,
    time_limit: float | None = None,
    cell_timeout: float = CELL_TIMEOUT,
    budget: float | None = None,
    grace: float = GRACE,
    exercises: list | None = None,
) -> NotebookGrade:
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
        grade.error = (
            f"{path.name}: no exercises to grade (the name should start with the chapter "
            "number, like 01_kl_penalty.ipynb, or the notebook should keep its check cells)"
        )
        return grade
    waiting = next((line for ex in exercises if ex.ready is not None for line in [ex.ready()] if line), None)
    if waiting:  # answers measured on runs the notebook has not stored yet: say so, run nothing
        grade.error = f"{path.name}: not graded yet: {waiting}"
        return grade
    if not any(c.cell_type == "code" and c.source.strip() for c in nb.cells):
        grade.error = (
            f"{path} has no code cells, so there is nothing to grade (an empty notebook, or not "
            "the one with your work?)"
        )
        return grade

    _remove_dead_graders_folders()
    with tempfile.TemporaryDirectory(prefix=TMP_PREFIX) as tmp:
        tmp = Path(tmp)
        (tmp / OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")
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
