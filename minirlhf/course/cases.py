"""Run a learner's exercise function on a list of cases and say, per case, what happened.

The checker never raises. A missing implementation, an exception, a wrong return type, NaN,
a wrong shape, a missing dict key, a mutated input or a run that takes too long each get
their own plain sentence, so the learner sees the point and not a stack trace.

Each exercise says how its answers are compared through an ``Expect`` object: a Python float
rounded to 2 decimals, a dict of such floats, or an array or tensor of a given shape.

A failure carries a *mistake*: a short, stable key for what went wrong ("type", "shape",
"sign", "nan", ...; see :data:`MISTAKES`). The comparator sets it, or one of the usual wrong
versions of the function (a :class:`Slip`) whose answer the learner's answer equals on that
input. An exercise maps mistakes to the hint that helps with each (``Exercise.hint_for``); the
report shows that hint, and picks one by the share of passing cases only when no failure's
mistake has a hint of its own.

A case may expect the call to raise instead of returning: its expected value is a
:class:`Raises` (the exception's type and a word its message must name). The call's record
says what it raised in its message (``raised ValueError: ...``), which is all :func:`judge`
needs, so such a case is judged the same way in the check cell and in the grader.

Checking one case has two halves, so that the grader (:mod:`minirlhf.course.grader`) can run
them in different processes: :func:`~minirlhf.course.sandbox.call_safely` calls the function and
records what it did (it needs no expected value), and :func:`judge` compares that with the
expected value. :func:`run_case` does both.

Between the two halves a returned value travels as plain data (:mod:`minirlhf.course.plain`):
whatever is not plain data arrives as an :class:`~minirlhf.course.plain.Opaque` and "cannot be
graded". The check cell sends every value through the same round trip, so it gives the same
verdict as the grader.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import html
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..palette import BLUE, DARK_YELLOW, GREEN, ORANGE
from .expect import Expect, index_text, number_texts_apart
from .plain import Opaque, round_trip
from .safe_text import printable, shorten
from .sandbox import Call, call_safely, loss_gradients, require_grad

__all__ = [
    "Case", "Raises", "Exercise", "Slip", "known_slip", "CaseResult", "Report", "MISTAKES", "REPORT_WIDTH",
    "judge", "run_case", "run_cases", "not_run", "next_hint",
    "raised", "NO_GRADIENT", "describe", "describe_kwargs", "failure_lines", "wrap",
    "STATE_STYLE",
]

REPORT_WIDTH = 77  # characters per line of the text report (what a notebook prints)

# The mistakes a failure can carry. The comparators set the general ones; an exercise's slips
# add their own keys (see each exercise's ``slips``).
MISTAKES = {
    "value": "the number is wrong, and no usual slip explains it",
    "sign": "the right size with the wrong sign",
    "not-rounded": "right, but not rounded as the contract asks",
    "type": "a value of another type than the contract asks for",
    "numpy-scalar": "a NumPy scalar where the contract asks for a Python float",
    "int": "an int where the contract asks for a float",
    "not-a-tensor": "a Python or NumPy number where the contract asks for a torch tensor",
    "shape": "an array or tensor of the wrong shape",
    "not-averaged": "one value per item where the contract asks for their mean",
    "nan": "NaN", "inf": "an infinity",
    "no-grad": "a loss that carries no gradient",
    "grad": "a loss with the right value and the wrong gradient",
    "missing-key": "a dict without a key of the contract", "extra-key": "a dict with a key too many",
    "opaque": "a value the checker cannot read",
    "mutated": "an input changed in place", "error": "an exception",
    "no-raise": "a value returned where the contract asks for an exception",
    "wrong-error": "an exception of another type than the contract asks for",
    "error-message": "the right exception, with a message that does not name what is wrong",
    # chapter 10's "name the tell" (minirlhf.course.tells)
    "unknown-metric": "a metric name that the dashboard does not show",
    "wrong-metric": "a metric that does not separate the runs by the whole-run paired test",
    "no-metric": "None (no metric separates the runs) where one does",
    "unknown-mechanism": "a mechanism number that the list does not have",
    "mechanism": "a mechanism that is not what the changed line does",
}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: keyword arguments, the answer, and what it tests."""

    kwargs: dict
    expected: Any
    why: str = ""


@dataclass(frozen=True)
class Raises:
    """The expected value of a case whose call must raise: an exception of type ``error`` (or
    of a built-in subclass of it) whose message names ``mentions`` (case-insensitive; "" for
    any message), e.g. ``Case({"group_size": 1, ...}, Raises(ValueError, "group_size"), why)``.

    The check reads what was raised from the call's message (see :func:`raised`), because
    that message is what the grader's kernel sends back.
    """

    error: type = ValueError
    mentions: str = ""

    def __post_init__(self):
        if not (isinstance(self.error, type) and issubclass(self.error, Exception)):
            raise TypeError(f"Raises needs an exception class, got {self.error!r}")

    def accepts(self, name: str) -> bool:
        """True when an exception called ``name`` is ``error`` or a built-in subclass of it."""
        if name == self.error.__name__:
            return True
        builtin = getattr(builtins, name, None)
        return isinstance(builtin, type) and issubclass(builtin, self.error)

    def __str__(self) -> str:
        return f"raises {self.error.__name__}" + (f" naming {self.mentions}" if self.mentions else "")


@dataclass(frozen=True)
class Slip:
    """A usual wrong version of an exercise's function, which names a mistake.

    When the learner's answer to a case is wrong, and equals what ``fn`` returns on the same
    input (while ``fn``'s answer is itself wrong there), the failure carries the mistake
    ``kind`` and its message ends with ``says``: what that slip is, in a few plain words.
    """

    kind: str
    fn: Callable
    says: str


def known_slip(kind: str, kinds) -> str:
    """Return ``kind`` when it is one of ``kinds``, else raise ValueError: a slip factory must not
    make a function for a kind it does not know, which would leave the computation right (an
    exact copy of the reference, reachable from the exercise registry)."""
    if kind not in kinds:
        raise ValueError(f"no slip called {kind!r}; known: {sorted(kinds)}")
    return kind


@dataclass(frozen=True)
class Exercise:
    """An exercise: its function name, cases, progressive hints and reference solution.

    ``hint_for`` maps a mistake (see :data:`MISTAKES` and the slips of ``expect``) to the
    number (1-based) of the hint that helps with it.
    """

    name: str
    chapter: int
    title: str
    expect: "Expect"
    cases: tuple
    hints: tuple
    reference: Callable
    random_kwargs: Callable | None = None  # rng -> kwargs, for hidden randomized checks
    time_limit: float = 10.0  # seconds per call
    n_random: int = 100  # randomized inputs the grader tries (fewer for slow exercises)
    hint_for: dict = field(default_factory=dict)  # mistake -> number of the hint that fits it


@dataclass
class CaseResult:
    case: Case
    passed: bool
    returned: Any = None
    message: str = ""
    printed: str = ""
    n_printed: int = 0
    kind: str = "ok"  # the Call kind, or "not run" after an earlier case ran out of time
    seconds: float = 0.0  # how long the call took
    mistake: str = ""  # what kind of mistake made it fail (see MISTAKES); "" when it passed

    @property
    def status(self) -> str:
        """Return "pass", "todo" (not implemented yet) or "fail"."""
        if self.passed:
            return "pass"
        return "todo" if self.kind == "todo" or self.message.startswith("not implemented") else "fail"

    @property
    def out_of_time(self) -> bool:
        """True when the case says nothing about correctness: it ran out of time, or was not run."""
        return self.kind in ("timeout", "not run")


def next_hint(hints, n_passed: int, total: int) -> tuple[int, str]:
    """Return (1-based number, text) of the hint to show after ``n_passed`` of ``total`` pass.

    Hints go from a nudge to nearly the answer, and the closer the function is to right, the
    more specific the hint it needs: the share of passing cases picks the hint on that scale
    (none passing gives hint 1, about half the middle one, nearly all the last).
    """
    if not hints:
        return 0, ""
    share = n_passed / total if total else 0.0
    i = min(len(hints) - 1, int(share * (len(hints) - 1) + 0.5))
    return i + 1, hints[i]


@dataclass
class Report:
    """The verdict on one exercise: a CaseResult per case, or a ``problem`` that kept the
    function from being graded at all (not found, ...)."""

    exercise: Exercise
    results: list = field(default_factory=list)
    problem: str = ""
    seen: int = 0  # earlier checks of this exercise that failed with the same mistake

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def passed(self) -> bool:
        return not self.problem and bool(self.results) and self.n_passed == len(self.results)

    @property
    def not_implemented(self) -> bool:
        return not self.problem and any(r.status == "todo" for r in self.results)

    @property
    def slow(self) -> bool:
        """True when every call that finished was right, but time ran out before the rest:
        correct so far, and too slow. Slowness is never a wrong answer."""
        if self.problem or not self.results:
            return False
        finished = [r for r in self.results if not r.out_of_time]
        return bool(finished) and len(finished) < len(self.results) and all(r.passed for r in finished)

    @property
    def first_failure(self) -> CaseResult | None:
        return next((r for r in self.results if not r.passed), None)

    @property
    def state(self) -> str:
        """Return "pass", "todo", "slow" (right so far, out of time) or "fail"."""
        if self.passed:
            return "pass"
        if self.not_implemented:
            return "todo"
        return "slow" if self.slow else "fail"

    def hint(self) -> tuple[int, str]:
        """Return (number, text) of the hint this report suggests, or (0, "") when the first
        failure ran out of time: a hint is about wrong answers, and a call that did not finish
        says nothing about its answer.

        The hint is the one the exercise ties to the mistake of the first failure that has
        one (``Exercise.hint_for``); when no failure's mistake has a hint, the share of passing
        cases picks it (see :func:`next_hint`).
        """
        first = self.first_failure
        if first is not None and first.out_of_time:
            return 0, ""
        hints = self.exercise.hints
        if self.mistake:
            number = self.exercise.hint_for[self.mistake]
            return number, hints[number - 1]
        return next_hint(hints, self.n_passed, len(self.results))

    @property
    def way(self) -> str:
        """How the function fails, for counting failures "the same way": the mistake the hint is
        about, else the first failure's mistake, else "" (it passes, or nothing failed)."""
        first = self.first_failure
        return self.mistake or (first.mistake if first is not None else "")

    def shown_hint(self) -> tuple[int, str, str]:
        """Return (number, text, note) of the hint the report shows: the one :meth:`hint` picks,
        except that the last hint (nearly the answer) is held back until the function has failed
        the same way before (``seen``). Held back, the text is "" and the note says when it shows."""
        number, text = self.hint()
        hints = self.exercise.hints
        if text and number == len(hints) > 1 and self.seen < 1:
            return 0, "", (f"Hint {number} of {number} (nearly the answer) shows here if the check fails "
                           "the same way again; the hints above open one at a time.")
        return number, text, ""

    @property
    def mistake(self) -> str:
        """The mistake the hint is about: that of the first failure whose mistake the exercise
        ties to a hint, or "" when no failure's mistake has one."""
        hints, hint_for = self.exercise.hints, self.exercise.hint_for
        return next((r.mistake for r in self.results if not r.passed and r.mistake
                     and 1 <= hint_for.get(r.mistake, 0) <= len(hints)), "")

    def _shown_failures(self, at_most: int = 3) -> tuple[list, int, int]:
        """Return (failures to show with their case numbers, failures not shown, cases not run)."""
        failed = [(i, r) for i, r in enumerate(self.results, 1) if not r.passed and r.kind != "not run"]
        not_run = sum(r.kind == "not run" for r in self.results)
        return failed[:at_most], max(0, len(failed) - at_most), not_run

    # ---- rendering: plain text for terminals and nbval, HTML for JupyterLab and the book
    def summary(self) -> str:
        name, n, total = self.exercise.name, self.n_passed, len(self.results)
        if self.not_implemented:
            cases = "its one case not run" if total == 1 else f"0/{total} cases run"
            return f"{name}: not implemented yet ({cases}). Write the function, then run this cell again."
        if self.passed:
            return f"{name}: its one case passes." if total == 1 else f"{name}: all {total} cases pass."
        if self.slow:
            return f"{name}: right so far, but too slow: {self.slow_text()}."
        return f"{name}: its one case fails." if total == 1 else f"{name}: {n}/{total} cases pass."

    def slow_text(self, noun: str = "case") -> str:
        """Say how far a slow function got: how many ran (all right), and what stopped it."""
        n, total = self.n_passed, len(self.results)
        number, stop = next((i, r) for i, r in enumerate(self.results, 1) if r.out_of_time)
        left = sum(r.out_of_time for r in self.results)
        text = f"the {n} {noun}s that ran are right" if n > 1 else f"the one {noun} that ran is right"
        if stop.kind == "timeout":
            text += f"; {noun} {number} {stop.message.split(':')[0]}"
        return text + f"; {left} of {total} not finished"

    def __str__(self) -> str:
        """The text report, every line at most :data:`REPORT_WIDTH` characters: a long line
        is wrapped, never cut, so every input of a case shows."""
        lines = wrap(self.summary(), "", "  ")
        if self.state != "fail":
            return "\n".join(lines)
        shown, more, not_run = self._shown_failures()
        for i, r in shown:
            lines += wrap(f"FAIL case {i}" + (f": {r.case.why}" if r.case.why else ""), "  ", "      ")
            for label, text in failure_lines(r):
                pieces = _kwarg_pieces(r.case.kwargs) if label == "input" else None
                lines += wrap(text, f"       {label:<9} ", " " * 17, pieces)
        lines += [f"  {'... ' if note.startswith('and') else ''}{note}" for note in _left_out(more, not_run)]
        number, text, held = self.shown_hint()
        if text:
            lines += wrap(f"Hint {number} of {len(self.exercise.hints)}: {text}", "", "  ")
        if held:
            lines += wrap(held, "", "  ")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        state = self.state
        color, word = STATE_STYLE[state]
        badge = (f'<span style="background:{color};color:#fff;font-weight:bold;padding:0 0.4em;'
                 f'border-radius:3px">{word}</span>')
        head = html.escape(self.summary()).replace(
            html.escape(self.exercise.name), f"<code>{html.escape(self.exercise.name)}</code>", 1)
        out = [f'<div class="mr-check mr-{state}" style="border-left:4px solid {color};'
               f'padding:0.1em 0.8em;margin:0.3em 0">',
               f'<p style="margin:0.3em 0">{badge} {head}</p>']
        if state == "fail":
            shown, more, not_run = self._shown_failures()
            cell = 'style="text-align:left;vertical-align:top;padding:0.15em 0.6em"'
            heads = "".join(f"<th {cell}>{h}</th>" for h in ("case", "input", "expected", "returned", "what is wrong"))
            out.append(f'<table class="mr-check-table" style="margin:0.3em 0;border-collapse:collapse">'
                       f"<thead><tr>{heads}</tr></thead><tbody>")
            for i, r in shown:
                returned = describe(r.returned) if r.kind in ("ok", "mutated") else "-"
                why = f'<br><small>{html.escape(r.case.why)}</small>' if r.case.why else ""
                out.append(f"<tr><td {cell}>{i}{why}</td>"
                           f"<td {cell}><code>{html.escape(describe_kwargs(r.case.kwargs))}</code></td>"
                           f"<td {cell}><code>{html.escape(describe(r.case.expected))}</code></td>"
                           f"<td {cell}><code>{html.escape(returned)}</code></td>"
                           f"<td {cell}>{html.escape(printable(r.message))}</td></tr>")
            out.append("</tbody></table>")
            notes = _left_out(more, not_run)
            if notes:
                out.append(f'<p style="margin:0.3em 0">{html.escape("; ".join(notes))}.</p>')
            number, text, held = self.shown_hint()
            if text:
                out.append(f'<p style="margin:0.3em 0"><b>Hint {number} of {len(self.exercise.hints)}:</b> '
                           f"{_inline_code(text)}</p>")
            if held:
                out.append(f'<p style="margin:0.3em 0"><small>{html.escape(held)}</small></p>')
        elif state == "pass":
            rows = "".join(f"<li><code>{html.escape(describe_kwargs(r.case.kwargs))}</code>"
                           f" &rarr; <code>{html.escape(describe(r.case.expected))}</code>"
                           + (f": {html.escape(r.case.why)}" if r.case.why else "") + "</li>"
                           for r in self.results)
            cases = "the case" if len(self.results) == 1 else f"the {len(self.results)} cases"
            out.append(f'<details><summary>{cases}</summary><ol>{rows}</ol></details>')
        out.append("</div>")
        return "".join(out)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


# Okabe-Ito colors (safe for color blindness); the word says the same thing as the color.
STATE_STYLE = {"pass": (GREEN, "PASS"), "fail": (ORANGE, "FAIL"), "todo": (DARK_YELLOW, "TODO"),
               "slow": (BLUE, "SLOW")}


def _left_out(more: int, not_run: int) -> list[str]:
    """The report's closing phrases: failing cases not shown, cases not run after a time-out."""
    notes = []
    if more:
        notes.append(f"and {more} more failing case{'s' if more > 1 else ''}")
    if not_run:
        notes.append(f"{not_run} case{'s' if not_run > 1 else ''} not run after the time-out")
    return notes


def _inline_code(text: str) -> str:
    """Escape ``text`` for HTML and turn `backticks` into <code> elements."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def failure_lines(r: CaseResult) -> list[tuple[str, str]]:
    """Return the (label, text) lines that explain one failed case: input, expected, returned, problem."""
    lines = [("input", describe_kwargs(r.case.kwargs)), ("expected", describe(r.case.expected))]
    if r.kind in ("ok", "mutated"):
        lines.append(("returned", describe(r.returned)))
    lines.append(("problem", printable(r.message)))
    return lines


def wrap(text: str, first: str, rest: str, pieces: list | None = None,
         width: int = REPORT_WIDTH) -> list[str]:
    """Return ``text`` as lines of at most ``width`` characters: the first line starts with
    ``first``, the others with ``rest``. Lines break at spaces; ``pieces`` (whose ", "-join
    is ``text``, such as a call's arguments) are kept whole where each fits on a line.
    Nothing is cut."""
    room = width - len(rest)
    if pieces and all(len(p) + 1 <= room for p in pieces):
        tokens = [p + ("," if i < len(pieces) - 1 else "") for i, p in enumerate(pieces)]
    else:  # words, with a `code span` kept whole where it fits on a line
        tokens = []
        for token in re.findall(r"(?:`[^`]*`|[^\s`]+|`)+", text):
            tokens += [token] if len(token) <= room else token.split()
    lines, line, empty = [], first, True
    for token in tokens:
        if empty or len(line) + 1 + len(token) <= width:
            line, empty = line + ("" if empty else " ") + token, False
        else:
            lines.append(line)
            line = rest + token
    return lines + [line.rstrip()]


# Arrays and lists longer than this (in characters) are described by their shape and first
# entries, or as "all equal to x", so that every input of a case fits in a few lines.
LONG_ARRAY = 160


def describe(value, width: int | None = 300) -> str:
    """Return a stable text form of an input or output (numbers to 4 significant digits); a
    long array is summarized by its shape; what is still longer than ``width`` is cut."""
    text = _describe(value)
    return text if width is None else shorten(text, width)


def _kwarg_pieces(kwargs: dict) -> list[str]:
    return [f"{k}={_describe(v)}" for k, v in kwargs.items()]


def describe_kwargs(kwargs: dict, width: int | None = None) -> str:
    """Return ``name=value, ...`` for a call's keyword arguments: every argument, none cut
    (a long array is summarized by its shape), unless ``width`` asks for a cut."""
    text = ", ".join(_kwarg_pieces(kwargs))
    return text if width is None else shorten(text, width)


def _summary(kind: str, shape: tuple, flat: list) -> str:
    """Describe a long array: its shape, and its one value or its first few."""
    dims = ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "")
    numbers = [v for v in flat if not isinstance(v, (list, tuple))]
    if numbers and all(v == numbers[0] for v in numbers) and len(numbers) == len(flat):
        return f"{kind} of shape ({dims}), every entry {_describe(numbers[0])}"
    head = ", ".join(_describe(v) for v in flat[:6])
    return f"{kind} of shape ({dims}): {head}, ... ({len(flat)} numbers)"


def _describe(value, whole: bool = False) -> str:
    """The text form of ``value``; ``whole`` keeps a long list whole (an array's rows)."""
    if value is None:
        return "None"
    if isinstance(value, Opaque):
        return value.text
    if isinstance(value, Raises) or getattr(type(value), "described_by_str", False):
        return str(value)  # an expected value that says what it asks for (Raises, a tell's Tell)
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, np.generic):  # before float: np.float64 is a float too
        return f"np.{type(value).__name__}({_describe(value.item())})"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        text = f"{value:.4g}"
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_describe(v)}" if isinstance(k, str) and "=" not in k else f"{k!r}: {_describe(v)}"
                                for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        body = ", ".join(_describe(v, whole) for v in value)
        text = f"[{body}]" if isinstance(value, list) else f"({body})"
        if not whole and len(text) > LONG_ARRAY and all(isinstance(v, (int, float)) for v in value):
            return _summary("a list" if isinstance(value, list) else "a tuple", (len(value),), list(value))
        return text
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({_describe(value.item())})"
    if isinstance(value, np.ndarray):
        text = "array(" + _describe(value.tolist(), True) + ")"
        if len(text) > LONG_ARRAY and value.ndim:
            return _summary("array", value.shape, value.ravel().tolist())
        return text
    if type(value).__module__.startswith("torch") and hasattr(value, "tolist"):
        text = "tensor(" + _describe(value.detach().tolist(), True) + ")"
        if len(text) > LONG_ARRAY and value.dim():
            return _summary("tensor", tuple(value.shape), value.detach().reshape(-1).tolist())
        return text
    return f"<{type(value).__name__}>"


def judge(call: Call, case: Case, expect: Expect, reference: Callable | None = None) -> CaseResult:
    """Compare what a call did with the case's expected value; return the case's result,
    with the kind of mistake when it failed (see :data:`MISTAKES` and :class:`Slip`).

    For a loss (``expect.grad_wrt``) whose value is right, the gradient the call recorded is
    compared with ``reference``'s on the same input."""
    if isinstance(case.expected, Raises):
        return _judge_raise(call, case, case.expected)
    if call.kind != "ok":
        mistake = call.kind if call.kind in ("mutated", "error") else ""
        return CaseResult(case, False, call.value, call.message, call.printed, call.n_printed, call.kind,
                          call.seconds, mistake)
    if isinstance(call.value, Opaque):
        bad = ("opaque", call.value.problem())
    else:
        try:
            bad = expect.diagnose(call.value, case.expected)
        except Exception as exc:
            bad = ("error", f"returned a value that could not be compared ({type(exc).__name__}: {exc})")
        if bad is not None and bad[0] in ("value", "sign"):
            kind, says = _which_slip(expect, call.value, case)
            if kind or says:
                bad = (kind or bad[0], f"{bad[1]}; {says}" if says else bad[1])
        if bad is None and expect.grad_wrt and reference is not None:
            bad = _grad_problem(call.grads, case, expect, reference)
    mistake, message = bad if bad is not None else ("", "")
    return CaseResult(case, bad is None, call.value, message, call.printed, call.n_printed, "ok", call.seconds,
                      mistake)


_RAISED = re.compile(r"raised ([\w.]+): (.*)\Z", re.S)  # the message call_safely writes for an exception
_WHERE = re.compile(r" \(in [^\n(]*, line \d+: [^\n]*\)\Z")  # its closing " (in f, line N: code)"


def raised(message: str) -> tuple[str, str] | None:
    """Return (the exception's type name, its own message) from the message :func:`call_safely`
    writes for a call that raised (``raised ValueError: ... (in f, line 3: code)``), or None
    when the message is not of that form. The place in the code is left out."""
    found = _RAISED.match(message)
    return None if found is None else (found[1], _WHERE.sub("", found[2]))


def _judge_raise(call: Call, case: Case, want: Raises) -> CaseResult:
    """Judge a call whose case expects it to raise ``want``."""
    def result(passed: bool, mistake: str = "", message: str | None = None) -> CaseResult:
        return CaseResult(case, passed, call.value, call.message if message is None else message, call.printed,
                          call.n_printed, call.kind, call.seconds, mistake)

    error = want.error.__name__
    naming = f" whose message names {want.mentions}" if want.mentions else ""
    if call.kind in ("todo", "timeout"):
        return result(False)
    if call.kind in ("ok", "mutated"):
        return result(False, "no-raise", f"returned {describe(call.value, 60)}, but on this input the contract "
                                         f"asks for a {error}{naming}: check the input and raise it")
    what = raised(call.message) if call.kind == "error" else None
    if what is None:  # input(), exit(), a KeyboardInterrupt of its own, the reference: not a raise
        return result(False, "error")
    name, text = what
    if not want.accepts(name):
        return result(False, "wrong-error", f"raised {name} ({shorten(text, 120)}), but on this input the "
                                            f"contract asks for a {error}{naming}: check the input first and "
                                            f"raise it yourself")
    named = call.named if call.named is not None else want.mentions.lower() in text.lower()
    if not named:
        return result(False, "error-message", f"raised {name} ({shorten(text, 120)}), but its message does not "
                                              f"name {want.mentions}: say which argument is wrong")
    return result(True, message="")


def _which_slip(expect: Expect, got, case: Case) -> tuple[str, str]:
    """Return (kind, says) of the slip of ``expect`` whose answer to ``case`` is wrong and
    equals ``got``. When several slips of one kind give that answer, the kind and no words
    (the numbers cannot tell which slip it is); ("", "") when none does, or when slips of
    different kinds do."""
    found = []
    for slip in expect.slips:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                wrong = slip.fn(**copy.deepcopy(case.kwargs))
            if expect.problem(wrong, case.expected) is not None and expect.problem(got, wrong) is None:
                found.append(slip)
        except Exception:  # a slip that does not apply to this input (a shape it cannot take)
            continue
    return _named_slips(found)


def _named_slips(found: list) -> tuple[str, str]:
    """(kind, says) for the slips whose answer the learner's equals: their kind ("" when they are
    of different kinds, which the numbers cannot tell apart), and every one's words ("either
    ..., or ...")."""
    if not found:
        return "", ""
    kind = found[0].kind if all(s.kind == found[0].kind for s in found) else ""
    says = list(dict.fromkeys(s.says for s in found if s.says))
    if len(says) > 1:
        return kind, "either " + ", or ".join(says)
    return kind, says[0] if says else ""


NO_GRADIENT = "your loss has no gradient: was it computed under no_grad, or rebuilt from .item()?"


def _input_grads(fn: Callable, kwargs: dict, names):
    """Return (value, gradients) of ``fn`` on a copy of ``kwargs``, as :func:`loss_gradients` gives them."""
    kwargs = copy.deepcopy(kwargs)
    require_grad(kwargs, names)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        value = fn(**kwargs)
        return value, loss_gradients(value, kwargs, names)


def _grad_gap(got, want) -> tuple | None:
    """None when two gradients agree, else (index, got, expected) at the largest gap. A missing
    gradient (no path to that input) counts as zeros."""
    w = np.asarray(want.detach().double().numpy() if want is not None else 0.0, dtype=float)
    g = np.asarray(got.detach().double().numpy() if hasattr(got, "detach") else (got if got is not None else 0.0),
                   dtype=float)
    if w.ndim and g.ndim and w.shape != g.shape:
        return (), math.nan, float(w.ravel()[0]) if w.size else math.nan
    g, w = np.broadcast_arrays(g, w)
    gap = np.abs(g - w)
    gap = np.where(np.isnan(gap), np.inf, gap)
    tol = 1e-5 + 1e-3 * np.abs(w)
    if (gap <= tol).all():
        return None
    worst = np.unravel_index(int(np.argmax(gap - tol)), gap.shape) if gap.ndim else ()
    return worst, float(g[worst]), float(w[worst])


def _grad_problem(grads, case: Case, expect: Expect, reference: Callable) -> tuple[str, str] | None:
    """Compare the gradient a call recorded with the reference's; None when they agree."""
    if isinstance(grads, str):
        return "error", f"the value is right, but {grads}"
    try:
        _, want = _input_grads(reference, case.kwargs, expect.grad_wrt)
    except Exception:  # the reference cannot differentiate this input: nothing to compare
        return None
    if not want:
        return None
    if not isinstance(grads, dict) or set(grads) != set(want):
        return "no-grad", f"{NO_GRADIENT} (its gradient could not be read)"
    if all(g is None for g in grads.values()) and any(g is not None for g in want.values()):
        names = " and ".join(want)
        return "no-grad", (f"{NO_GRADIENT} The value is right, but training moves the policy through the "
                           f"gradient with respect to {names}, and this loss has none.")
    for name in want:
        gap = _grad_gap(grads[name], want[name])
        if gap is None:
            continue
        where, a, b = gap
        a, b = number_texts_apart(a, b)
        kind, says = _which_grad_slip(expect, grads, want, case)
        at = f" at {index_text(where)}" if where else ""
        text = (f"the value is right, but the gradient with respect to {name} is not: {a}{at}, expected {b}")
        if kind or says:
            return kind or "grad", f"{text}; {says}"
        return "grad", (f"{text}. A term built from a detached tensor (.detach(), .item(), old_logp in place of "
                        f"new_logp) keeps its value and loses its gradient")
    return None


def _which_grad_slip(expect: Expect, grads: dict, want: dict, case: Case) -> tuple[str, str]:
    """(kind, says) of the slips whose value is right on ``case`` and whose gradient is wrong
    and equals the learner's."""
    found = []
    for slip in expect.slips:
        try:
            value, theirs = _input_grads(slip.fn, case.kwargs, expect.grad_wrt)
            if expect.problem(value, case.expected) is not None or not isinstance(theirs, dict):
                continue
            if all(_grad_gap(theirs[k], want[k]) is None for k in want):
                continue
            if all(_grad_gap(grads[k], theirs[k]) is None for k in want):
                found.append(slip)
        except Exception:
            continue
    return _named_slips(found)


def run_case(fn: Callable, case: Case, exercise: Exercise) -> CaseResult:
    """Call ``fn(**case.kwargs)`` safely and compare with ``case.expected``.

    The returned value is judged as the grader would receive it (see :func:`~.plain.round_trip`), so a
    check cell and the grader give the same verdict.
    """
    mentions = case.expected.mentions if isinstance(case.expected, Raises) else None
    call = call_safely(fn, case.kwargs, exercise.time_limit, exercise.expect.grad_wrt, mentions)
    if call.kind in ("ok", "mutated"):
        call.value = round_trip(call.value)
        call.grads = round_trip(call.grads)
    return judge(call, case, exercise.expect, exercise.reference)


def not_run(case: Case) -> CaseResult:
    """The result of a case skipped because an earlier one ran out of time."""
    return CaseResult(case, False, None, "not run: an earlier case ran out of time", kind="not run")


def run_cases(fn: Callable, exercise: Exercise, cases=None) -> Report:
    """Run every case (the exercise's own by default) and return the report.

    After a case runs out of time the rest are not run, so a loop that never ends costs one
    time limit, not one per case.
    """
    report = Report(exercise)
    if not callable(fn):
        bad = CaseResult(Case({}, None, ""), False, fn, f"{exercise.name} is a {type(fn).__name__}, not a function",
                         kind="error")
        report.results.append(bad)
        return report
    timed_out = False
    for case in exercise.cases if cases is None else cases:
        if timed_out:
            report.results.append(not_run(case))
            continue
        result = run_case(fn, case, exercise)
        timed_out = result.kind == "timeout"
        report.results.append(result)
    return report

