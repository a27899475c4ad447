"""The grader's text report: one block per notebook (:func:`render`) and the closing
``Result:`` line (:func:`summary_line`), in color on a terminal that wants it
(:func:`use_color`).

Every text that came from the notebook was made printable on arrival, so the report's lines are
the grader's own.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...safe_text import printable
from ..report import failure_lines

if TYPE_CHECKING:
    from .grading import ExerciseGrade, NotebookGrade


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
        return (
            f"right on {inputs}, then the {e.budget:g} s budget (--budget) ran out with "
            f"{left} of {total} inputs left{per_call}",
            "not a wrong answer: make it faster, or grade with a larger --budget",
        )
    number, stop = next((i, r) for i, r in enumerate(e.results, 1) if r.kind == "timeout")
    label = stop.case.why or f"input {number}"
    inputs = f"all {ran} inputs that ran" if ran > 1 else "the one input that ran"
    return (
        f"right on {inputs}, then {label} took longer than the {e.time_limit:g} s limit "
        f"per call (--time-limit); {left} of {total} inputs not finished{per_call}",
        "not a wrong answer: make it faster (or look for a loop that does not end on that input)",
    )


def render(grade: NotebookGrade, color: bool = False) -> str:
    """Return the plain (or colored) text report of one notebook."""
    s = _Style(color)
    if grade.error:
        return f"{s('fail', 'ERROR')} {grade.error}"
    if grade.note:
        return f"{s('bold', str(grade.path))}  {grade.note}"
    lines = [
        f"{s('bold', str(grade.path))}  (randomized inputs from seed {grade.seed}; --seed {grade.seed} repeats them)"
    ]
    if grade.file_problem:
        lines.append(f"  {s('fail', 'FILE')}  {grade.file_problem}")
    if grade.not_run:
        n = len(grade.not_run)
        if grade.first_not_run:
            place, first_line = grade.first_not_run
            where = f"cell {place} of the notebook, text cells counted, which starts `{first_line}`"
            cells = f"the last code cell ({where}) is" if n == 1 else f"the last {n} code cells, from {where}, are"
        else:
            cells = "the last code cell is" if n == 1 else f"the last {n} code cells are"
        they, come, them = ("it", "comes", "it") if n == 1 else ("they", "come", "them")
        lines.append(
            f"  {s('dim', 'note')}  {cells} not run: {they} {come} after the last exercise, and "
            f"no grade depends on {them} (run the notebook to see {them})"
        )
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
                lines.append(
                    f"  {s('fail', word)}  {name}  not defined, because code cell {culprit.number} failed (above)"
                )
            else:
                lines.append(f"  {s('fail', word)}  {name}  {printable(e.problem)}")
            continue
        counts = f"{e.n_passed}/{len(e.results)}"
        n_random = len(e.results) - e.n_cases
        if n_random:
            counts += (
                f"  (cases {sum(r.passed for r in e.results[: e.n_cases])}/{e.n_cases}, "
                f"randomized {sum(r.passed for r in e.results[e.n_cases :])}/{n_random})"
            )
        if e.state == "todo":
            lines.append(
                f"  {s('todo', word)}  {name}  not implemented yet: write its body in the notebook, then grade again"
            )
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
                why = f" (the calls used up the {e.budget:g} s budget, --budget)" if e.stopped == "budget" else ""
                lines.append(f"          {not_run_n} inputs not run after that{why}")
            number, text, held = e.shown_hint()
            if text:
                lines.append(f"        {s('bold', f'hint {number} of {len(e.exercise.hints)}')}: {text}")
            elif held:
                last = len(e.exercise.hints)
                lines.append(
                    f"        hint {last} of {last} (nearly the answer) fits this mistake: it is in "
                    "the notebook, under the exercise"
                )
        if e.printed:
            lines.append(
                f"        note: it printed {e.printed:,} characters over {len(e.results)} calls "
                "(prints or warnings, not shown); only what it returns counts."
            )
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
