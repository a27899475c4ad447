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

Checking one case has two halves, so that the grader (:mod:`minirlhf.course.grader`) can run them in
different processes: :func:`call_safely` calls the function and records what it did (it
needs no expected value), and :func:`judge` compares that with the expected value.
:func:`run_case` does both.

Between the two halves a returned value travels as plain data: :func:`to_plain` turns it into
JSON-ready numbers, strings, lists and tagged arrays and tensors, and :func:`from_plain` checks
that data and builds the value again. Whatever is not plain data (an object of the learner's
own class, a float subclass, a value bigger than :data:`RETURN_CAP`) arrives as an
:class:`Opaque` and "cannot be graded". The check cell sends every value through the same
round trip, so it gives the same verdict as the grader.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import html
import io
import math
import os
import re
import signal
import sys
import sysconfig
import textwrap
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..palette import BLUE, DARK_YELLOW, GREEN, ORANGE

__all__ = [
    "Case", "Raises", "Exercise", "Slip", "known_slip", "Call", "CaseResult", "Report", "Opaque", "MISTAKES", "REPORT_WIDTH",
    "ExpectFloat2", "ExpectDict2", "ExpectArray", "ExpectFloat", "ExpectScalarTensor",
    "call_safely", "judge", "run_case", "run_cases", "not_run", "next_hint",
    "raised", "printable", "NO_GRADIENT", "to_plain", "from_plain", "describe", "describe_kwargs", "failure_lines", "shorten", "wrap",
    "STATE_STYLE", "RETURN_CAP",
]

PRINT_CAP = 2000  # characters of a call's printed output that are kept; the rest is counted
RETURN_CAP = 10_000  # numbers (and characters of text) a returned value may hold; no answer needs more
_MAX_DEPTH = 32  # levels of nesting of a returned value
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
class Call:
    """What one call of the learner's function did.

    ``kind`` is "ok" (returned ``value``), "todo" (raised NotImplementedError), "error"
    (raised something else), "timeout" (ran out of time or was interrupted) or "mutated"
    (returned ``value`` but changed an input in place).
    """

    kind: str
    value: Any = None
    message: str = ""
    printed: str = ""  # the first PRINT_CAP characters written to stdout or stderr
    n_printed: int = 0  # how many characters were written in all
    seconds: float = 0.0
    # With ``grad_wrt``: the gradient of the returned loss with respect to each of those inputs
    # (None where the loss has no path to it), or a sentence when it could not be computed.
    grads: Any = None
    # With ``mentions``: whether the raised exception's whole message names it.
    named: bool | None = None


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


# Characters that move the cursor, end a line, or reorder text on a terminal: a message from the
# learner's code must not be able to draw a line of its own (a fake "PASS" or "Result" line).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Return ``text`` with every control, line-breaking or bidirectional character written as
    an escape (``\\n``, ``\\x1b``, ``\\u202e``), so that it stays on one line and draws nothing."""
    def escape(m) -> str:
        c = m[0]
        return _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")

    return _UNPRINTABLE.sub(escape, str(text))


def shorten(text: str, width: int) -> str:
    """Return ``text``, cut to ``width`` characters with "..." at the end when it is longer."""
    return text if len(text) <= width else text[: width - 3] + "..."


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


# --------------------------------------------------------------------------- comparisons
# A comparator's ``diagnose`` returns None when the answer is right, else (mistake, message):
# the message says in plain words what is wrong, with the numbers.


def _a(value) -> str:
    """Name the type of ``value`` as a person would: "None", "a list", "a NumPy array", ..."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return "a NumPy array"
    if isinstance(value, np.floating):
        return "a NumPy float"
    if isinstance(value, np.generic):
        return f"a NumPy scalar ({np.dtype(type(value)).name})"
    if type(value).__module__.startswith("torch"):
        return "a torch tensor"
    name = {str: "string", int: "int", float: "float", bool: "bool"}.get(type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def _num(x: float) -> str:
    """A number as the report prints it: exact up to 12 significant digits, 0.0 not 0."""
    text = f"{x:.12g}"
    return text if any(c in text for c in ".en") else text + ".0"


def _pair(got: float, want: float, digits: int = 4) -> tuple[str, str]:
    """Two different numbers printed with as few digits (at least ``digits``) as tell them apart."""
    for d in range(digits, 13):
        a, b = f"{got:.{d}g}", f"{want:.{d}g}"
        if a != b:
            return tuple(t if any(c in t for c in ".en") else t + ".0" for t in (a, b))
    return _num(got), _num(want)


_MISSING_RETURN = ": is a return statement missing?"


class Expect:
    """How a returned value is compared with the expected one.

    ``diagnose`` returns None or (mistake, message); ``problem`` returns just the message.
    ``what`` names the result in messages ("the loss", "the advantages"); ``slips`` are the
    usual wrong versions of the function (see :class:`Slip`), which :func:`judge` tries
    when the numbers are wrong.
    """

    what = "the result"
    plural = False
    slips: tuple = ()
    # A loss's differentiable inputs: the checker makes them require a gradient, differentiates
    # the returned value with respect to them, and compares that with the reference's gradient.
    grad_wrt: tuple = ()

    def diagnose(self, got, expected) -> tuple[str, str] | None:  # pragma: no cover - interface
        raise NotImplementedError

    def problem(self, got, expected) -> str | None:
        found = self.diagnose(got, expected)
        return None if found is None else found[1]

    def _named(self, what: str | None, plural: bool | None, slips) -> None:
        if what is not None:
            self.what = what
        if plural is not None:
            self.plural = plural
        self.slips = tuple(slips)

    def _verb(self, singular: str, plural: str) -> str:
        return plural if self.plural else singular


def _float_problem(got, expected, what: str = "the result") -> tuple[str, str] | None:
    if isinstance(got, Opaque):  # inside a dict: the whole value was plain, this part is not
        return "opaque", f"{what} is a {got.type_name}, which cannot be graded" + (f" ({got.why})" if got.why else "")
    if isinstance(got, np.generic):
        return "numpy-scalar", (f"{what} is a NumPy scalar ({type(got).__module__}.{type(got).__name__}); "
                                "the contract asks for a Python float: convert it before any rounding, "
                                "round(float(x), 2) (float(round(x, 2)) keeps NumPy's rounding rule)")
    if type(got).__module__.startswith("torch"):
        return "type", f"{what} is a torch tensor; the contract asks for a Python float: use float(...) or .item()"
    if got is None:
        return "type", f"{what} is None, expected a Python float{_MISSING_RETURN}"
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return "type", f"{what} is a {type(got).__name__}, expected a Python float"
    if isinstance(got, int):
        return "int", f"{what} is an int ({got}); the contract asks for a float: float(...)"
    if math.isnan(got):
        return "nan", f"{what} is NaN: look for a 0/0, a log of a negative number, or an empty mean"
    if math.isinf(got):
        return "inf", f"{what} is infinite: look for an exp of a large number or a division by zero"
    return None


class ExpectFloat2(Expect):
    """A Python float rounded to 2 decimals, equal to the expected one."""

    def __init__(self, what: str | None = None, slips=()):
        self._named(what, None, slips)

    def diagnose(self, got, expected, what: str | None = None) -> tuple[str, str] | None:
        what = what or self.what
        bad = _float_problem(got, expected, what)
        if bad:
            return bad
        if abs(got - expected) <= 1e-9:
            return None
        if round(got, 2) != got and abs(round(got, 2) - expected) <= 1e-9:
            return "not-rounded", f"{what} is {_num(got)}, right but not rounded: return round(value, 2)"
        if abs(got + expected) <= 1e-9 and expected != 0:
            return "sign", f"{what} has the wrong sign: {_num(got)}, expected {_num(expected)}"
        return "value", f"{what} is {_num(got)}, expected {_num(expected)}"


class ExpectFloat(Expect):
    """A Python float within an absolute tolerance of the expected one."""

    def __init__(self, atol: float = 1e-6, what: str | None = None, slips=()):
        self.atol = atol
        self._named(what, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        bad = _float_problem(got, expected, self.what)
        if bad:
            return bad
        if abs(got - expected) <= self.atol:
            return None
        a, b = _pair(got, expected, 6)
        if expected != 0 and abs(got + expected) <= self.atol:
            return "sign", f"{self.what} has the wrong sign: {a}, expected {b}"
        return "value", f"{self.what} is {a}, expected {b} (off by {abs(got - expected):.3g})"


class ExpectDict2(Expect):
    """A dict with exactly these keys, each a Python float rounded to 2 decimals."""

    def __init__(self, keys, slips=()):
        self.keys = tuple(keys)
        self._one = ExpectFloat2()
        self._named(None, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if not isinstance(got, dict):
            missing = _MISSING_RETURN if got is None else ""
            return "type", f"the result is {_a(got)}, expected a dict with keys {list(self.keys)}{missing}"
        missing = [k for k in self.keys if k not in got]
        if missing:
            return "missing-key", f"the dict has no key {missing[0]!r} (the contract's keys: {list(self.keys)})"
        extra = [k for k in got if k not in self.keys]
        if extra:
            return "extra-key", f"the dict has a key the contract does not have, {extra[0]!r} (its keys: {list(self.keys)})"
        for k in self.keys:
            bad = self._one.diagnose(got[k], expected[k], what=str(k))
            if bad:
                return bad
        return None


class ExpectArray(Expect):
    """A NumPy array or torch tensor of the expected shape, close to the expected values."""

    def __init__(self, atol: float = 1e-5, kind: str = "any", what: str | None = None, plural: bool | None = None,
                 slips=()):
        self.atol, self.kind = atol, kind  # kind: "numpy", "torch" or "any"
        self._named(what, plural, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        is_torch = type(got).__module__.startswith("torch")
        what, is_ = self.what, self._verb("is", "are")
        missing = _MISSING_RETURN if got is None else ""
        if self.kind == "torch" and not is_torch:
            return "type", f"the result is {_a(got)}; the contract asks for a torch tensor{missing}"
        if self.kind == "numpy" and not isinstance(got, np.ndarray):
            fix = ": np.asarray(...)" if isinstance(got, (list, tuple, np.generic)) else missing
            return "type", f"the result is {_a(got)}; the contract asks for a NumPy array{fix}"
        if not (is_torch or isinstance(got, (np.ndarray, np.generic, float, int))):
            return "type", f"the result is {_a(got)}; the contract asks for an array{missing}"
        arr = np.asarray(got.detach().cpu().numpy() if is_torch else got, dtype=float)
        want = np.asarray(expected.detach().numpy() if hasattr(expected, "detach") else expected, dtype=float)
        if arr.shape != want.shape:
            return "shape", (f"{what} {self._verb('has', 'have')} shape {tuple(arr.shape)}, "
                             f"expected {tuple(want.shape)}")
        if np.isnan(arr).any():
            where = _index(np.argwhere(np.isnan(arr))[0]) if arr.ndim else ""
            return "nan", (f"{what} {self._verb('holds', 'hold')} NaN{' at ' + where if where else ''}: "
                           "look for a 0/0, a log of 0, or an empty mean")
        gap = np.abs(arr - want)
        if not (gap <= self.atol).all():
            worst = np.unravel_index(int(np.argmax(np.where(np.isnan(gap), np.inf, gap))), arr.shape)
            a, b = _pair(float(arr[worst]), float(want[worst]))
            if not arr.ndim:
                return "value", f"{what} {is_} {a}, expected {b}"
            off, n = int((~(gap <= self.atol)).sum()), arr.size
            return "value", (f"{what} {self._verb('differs', 'differ')} in {off} of {n} places; the largest "
                             f"gap is at {_index(worst)}: {a}, expected {b}")
        return None


def _index(index) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


class ExpectScalarTensor(ExpectArray):
    """A 0-d torch tensor (a loss that can be backpropagated) close to the expected number.

    Says in plain words what the usual slips look like: a Python float from ``.item()``, one
    value per ``per`` instead of their mean, an infinity (``why_inf`` says where it comes
    from) and, with ``sign_hint``, the objective returned in place of the loss.
    """

    def __init__(self, atol: float = 1e-4, per: str = "position", why_inf: str = "",
                 sign_hint: str = "", what: str = "the loss", slips=(), grad_wrt=()):
        super().__init__(atol=atol, kind="torch", what=what, plural=False, slips=slips)
        self.per, self.why_inf, self.sign_hint = per, why_inf, sign_hint
        self.grad_wrt = tuple(grad_wrt)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if isinstance(got, (float, int, np.generic)) and not isinstance(got, bool):
            return "not-a-tensor", (f"the result is {_a(got)}; return {self.what} as a torch tensor "
                                    "(no .item() or float(): the tensor carries the gradient that training needs)")
        if not (type(got).__module__.startswith("torch") and hasattr(got, "detach")):
            return super().diagnose(got, expected)
        if tuple(got.shape) != ():
            return "not-averaged", (f"{self.what} has shape {tuple(got.shape)}, expected a single number (a 0-d "
                                    f"tensor): one value per {self.per} still has to be averaged")
        value, want = float(got.detach().double()), float(expected)
        if math.isinf(value):
            return "inf", f"{self.what} is infinite" + (f": {self.why_inf}" if self.why_inf else "")
        if math.isnan(value):
            return "nan", f"{self.what} is NaN: look for a 0/0 (an empty mask?) or a log of a negative number"
        if abs(value - want) <= self.atol:
            return None
        a, b = _pair(value, want)
        if abs(value + want) <= self.atol:
            return "sign", f"{self.what} has the wrong sign: {a}, expected {b}" + (
                f"; {self.sign_hint}" if self.sign_hint else "")
        return "value", f"{self.what} is {a}, expected {b} (off by {abs(value - want):.4g})"


# --------------------------------------------------------------------------- plain data
# A returned value crosses from the learner's kernel to the grader as JSON: numbers, strings,
# None, lists, and objects with one tag (tuple, dict, complex, a non-finite float, a NumPy
# scalar or array, a torch tensor, or an opaque stand-in). Nothing is unpickled, so no code of
# the learner's runs in the grader, and an object cannot rebuild itself as something else.


class Opaque:
    """A returned value that is not plain data and so cannot be graded: its type's name, why,
    and a short text for the report. Made from the type alone: no method of the value runs."""

    def __init__(self, type_name: str, module: str = "", why: str = "", text: str = ""):
        self.type_name, self.module = shorten(str(type_name), 80), shorten(str(module), 80)
        self.why = shorten(str(why), 200)
        self.text = shorten(str(text), 90) or f"<{self.type_name}>"

    def problem(self) -> str:
        return f"returned a {self.type_name}, which cannot be graded" + (f" ({self.why})" if self.why else "")

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Opaque({self.type_name!r}, why={self.why!r})"


_PLAIN_WHY = ("the grader takes numbers, strings, None, lists, tuples, dicts, NumPy arrays and torch "
              "tensors")
_NUMPY_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128"}
_TORCH_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32",
                 "float64", "complex64", "complex128"}
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class _TooBig(Exception):
    pass


_type_name = type.__dict__["__name__"].__get__  # a class's own name and module, read without
_type_module = type.__dict__["__module__"].__get__  # running anything a metaclass defines
_NUMPY_SCALARS = {np.dtype(name).type for name in _NUMPY_DTYPES}


class _Encoder:
    """Turns a value into plain data, counting numbers and characters against ``cap``.

    It looks at ``type(x)`` only (an object cannot pretend to be another type) and reads
    containers with the base types' own methods, so no method of the learner's classes runs.
    """

    def __init__(self, cap: int):
        self.cap, self.used = cap, 0

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise _TooBig

    @staticmethod
    def number(x):
        if type(x) in (bool, int):
            return x
        if type(x) is float:
            return x if math.isfinite(x) else repr(x)
        if type(x) is complex:
            return [_Encoder.number(x.real), _Encoder.number(x.imag)]
        raise TypeError(_type_name(type(x)))

    def encode(self, x, depth: int = 0):
        kind = type(x)
        if depth > _MAX_DEPTH:
            return _opaque_plain(x, f"nested more than {_MAX_DEPTH} levels deep")
        if x is None or kind is bool:
            self.spend(1)
            return x
        if kind is int:
            self.spend(1)
            return x if x.bit_length() <= 1024 else _opaque_plain(x, "an int too large for a float")
        if kind is float:
            self.spend(1)
            return x if math.isfinite(x) else {"float": repr(x)}
        if kind is complex:
            self.spend(2)
            return {"complex": self.number(x)}
        if kind is str:
            self.spend(len(x))
            return x
        if kind in _NUMPY_SCALARS:
            self.spend(1)
            return {"numpy": np.dtype(kind).name, "value": self.number(x.item())}
        if kind is np.ndarray:
            return self.array(x)
        if issubclass(kind, list):
            self.spend(1)
            return [self.encode(v, depth + 1) for v in list(list.__iter__(x))]
        if issubclass(kind, tuple):  # a tuple, or a named tuple, torch.Size, ...
            self.spend(1)
            return {"tuple": [self.encode(v, depth + 1) for v in list(tuple.__iter__(x))]}
        if issubclass(kind, dict):  # a dict, or an OrderedDict, a defaultdict, ...
            self.spend(1)
            pairs = []
            for k, v in list(dict.items(x)):
                if type(k) not in (str, int, float, bool, type(None)):
                    return _opaque_plain(x, f"a dict with a key of type {_type_name(type(k))}")
                pairs.append([self.encode(k, depth + 1), self.encode(v, depth + 1)])
            return {"dict": pairs}
        if issubclass(kind, float) and not issubclass(kind, np.generic):
            return _opaque_plain(x, "a subclass of float; the contract asks for a plain Python float: "
                                    "float(...)", text=float.__repr__(x))
        if issubclass(kind, (int, str, complex)):
            base = next(b for b in (int, str, complex) if issubclass(kind, b))
            return _opaque_plain(x, f"a subclass of {base.__name__}; return a plain {base.__name__}")
        if issubclass(kind, np.generic):
            return _opaque_plain(x, f"a NumPy scalar of dtype {np.dtype(kind).name}"
                                    if _type_module(kind) == "numpy" else _PLAIN_WHY)
        torch = sys.modules.get("torch")
        if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
            return self.tensor(x, torch)
        return _opaque_plain(x, _PLAIN_WHY)

    def array(self, x):
        dtype = x.dtype.name
        if dtype not in _NUMPY_DTYPES:
            return _opaque_plain(x, f"a NumPy array of dtype {dtype}")
        self.spend(x.size * (2 if x.dtype.kind == "c" else 1))
        return {"ndarray": dtype, "shape": list(x.shape), "data": [self.number(v) for v in x.ravel().tolist()]}

    def tensor(self, x, torch):
        dtype = str(x.dtype).removeprefix("torch.")
        if dtype not in _TORCH_DTYPES or x.layout != torch.strided or x.is_meta:
            return _opaque_plain(x, f"a torch tensor of dtype {dtype}, layout "
                                    f"{str(x.layout).removeprefix('torch.')}, device {x.device}")
        self.spend(x.numel() * (2 if x.is_complex() else 1))
        flat = x.detach().cpu().reshape(-1).tolist()
        return {"tensor": dtype, "shape": list(x.shape), "data": [self.number(v) for v in flat],
                "requires_grad": bool(x.requires_grad)}


def _opaque_plain(x, why: str, text: str = "") -> dict:
    kind = type(x)
    name, module = _type_name(kind), _type_module(kind)
    return {"opaque": name, "module": module if type(module) is str else "", "why": why,
            "text": text or f"<{name}>"}


def to_plain(value, cap: int = RETURN_CAP):
    """Return ``value`` as JSON-ready plain data (see :func:`from_plain`); never raises.

    Only the types named in :data:`_PLAIN_WHY` are carried, read with the base types' own
    methods, so no method of the learner's runs. Anything else, and any value holding more than
    ``cap`` numbers or characters, becomes an opaque stand-in that says why.
    """
    try:
        return _Encoder(cap).encode(value)
    except _TooBig:
        return _opaque_plain(value, f"it holds more than {cap:,} numbers or characters; the grader takes "
                                    f"at most {cap:,}")
    except RecursionError:
        return _opaque_plain(value, f"nested more than {_MAX_DEPTH} levels deep")
    except BaseException as exc:  # a broken array or tensor
        return _opaque_plain(value, f"it could not be read ({type(exc).__name__})")


def _plain_number(item, kind: str):
    """Check one element of an array's data against the array's kind ("b", "i", "f" or "c")."""
    if kind == "b":
        if type(item) is not bool:
            raise ValueError("a bool array holds a non-bool")
        return item
    if kind == "i":
        if type(item) is not int:
            raise ValueError("an int array holds a non-int")
        return item
    if kind == "c":
        if type(item) is not list or len(item) != 2:
            raise ValueError("a complex element is not a [real, imag] pair")
        return complex(_plain_number(item[0], "f"), _plain_number(item[1], "f"))
    if type(item) is str and item in _NONFINITE:
        return _NONFINITE[item]
    if type(item) not in (int, float) or (type(item) is float and not math.isfinite(item)):
        raise ValueError("a float element is not a number")
    return float(item)


class _Decoder:
    def __init__(self, cap: int):
        self.cap, self.used = cap, 0

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise ValueError(f"more than {self.cap} numbers or characters")

    def decode(self, node, depth: int = 0):
        if depth > _MAX_DEPTH + 2:
            raise ValueError("nested too deep")
        kind = type(node)
        if node is None or kind is bool or kind is int:
            self.spend(1)
            return node
        if kind is float:
            if not math.isfinite(node):
                raise ValueError("a non-finite float not in its tagged form")
            self.spend(1)
            return node
        if kind is str:
            self.spend(len(node))
            return node
        if kind is list:
            self.spend(1)
            return [self.decode(v, depth + 1) for v in node]
        if kind is not dict or len(node) == 0:
            raise ValueError(f"unexpected {kind.__name__}")
        tag = next(iter(node))
        fields = set(node)
        if tag == "float" and fields == {"float"}:
            if node["float"] not in _NONFINITE:
                raise ValueError("a bad non-finite float")
            self.spend(1)
            return _NONFINITE[node["float"]]
        if tag == "complex" and fields == {"complex"}:
            self.spend(2)
            return _plain_number(node["complex"], "c")
        if tag == "tuple" and fields == {"tuple"} and type(node["tuple"]) is list:
            self.spend(1)
            return tuple(self.decode(v, depth + 1) for v in node["tuple"])
        if tag == "dict" and fields == {"dict"} and type(node["dict"]) is list:
            self.spend(1)
            out = {}
            for pair in node["dict"]:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("a dict entry is not a [key, value] pair")
                key = self.decode(pair[0], depth + 1)
                if type(key) not in (str, int, float, bool, type(None)):
                    raise ValueError("a dict key that is not a string or a number")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "numpy" and fields == {"numpy", "value"} and node["numpy"] in _NUMPY_DTYPES:
            dtype = np.dtype(node["numpy"])
            self.spend(1)
            return dtype.type(_plain_number(node["value"], _kind_of(dtype.kind)))
        if tag == "ndarray" and fields == {"ndarray", "shape", "data"} and node["ndarray"] in _NUMPY_DTYPES:
            dtype = np.dtype(node["ndarray"])
            data = self.elements(node, _kind_of(dtype.kind))
            return np.array(data, dtype=dtype).reshape(node["shape"])
        if (tag == "tensor" and fields == {"tensor", "shape", "data", "requires_grad"}
                and node["tensor"] in _TORCH_DTYPES and type(node["requires_grad"]) is bool):
            import torch

            dtype = getattr(torch, node["tensor"])
            probe = torch.empty((), dtype=dtype)
            kind = "b" if dtype == torch.bool else "c" if probe.is_complex() else "f" if probe.is_floating_point() else "i"
            data = self.elements(node, kind)
            tensor = torch.tensor(data, dtype=dtype).reshape(node["shape"])
            return tensor.requires_grad_(True) if node["requires_grad"] and kind in "fc" else tensor
        if (tag == "opaque" and fields == {"opaque", "module", "why", "text"}
                and all(type(node[k]) is str for k in fields)):
            return Opaque(node["opaque"], node["module"], node["why"], node["text"])
        raise ValueError(f"an unknown or malformed tag {shorten(str(tag), 20)!r}")

    def elements(self, node, kind: str) -> list:
        shape, data = node["shape"], node["data"]
        if type(shape) is not list or len(shape) > 32 or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError("a bad shape")
        if type(data) is not list or len(data) != math.prod(shape):
            raise ValueError("the data do not fill the shape")
        self.spend(len(data) * (2 if kind == "c" else 1))
        return [_plain_number(v, kind) for v in data]


def _kind_of(numpy_kind: str) -> str:
    return {"b": "b", "i": "i", "u": "i", "f": "f", "c": "c"}[numpy_kind]


def from_plain(data, cap: int = RETURN_CAP):
    """Return the value that :func:`to_plain` turned into ``data``; raise ValueError if
    ``data`` is not exactly what :func:`to_plain` makes (any tag, type, size or shape out of
    place), so that what arrives from a kernel is checked before anything uses it."""
    try:
        return _Decoder(cap * 2 + 16).decode(data)
    except RecursionError:
        raise ValueError("nested too deep") from None
    except (TypeError, OverflowError, KeyError, RuntimeError) as exc:
        raise ValueError(f"malformed ({type(exc).__name__}: {shorten(str(exc), 80)})") from None


def _round_trip(value):
    """Return ``value`` as the grader would receive it from a kernel (see :func:`to_plain`)."""
    try:
        return from_plain(to_plain(value))
    except ValueError as exc:  # cannot happen for what to_plain makes; say so rather than crash
        return Opaque(type(value).__name__, "", f"it could not be carried ({exc})")


# --------------------------------------------------------------------------- running


class _TimeLimit(BaseException):
    """Raised into the learner's code when time is up. A BaseException, like
    KeyboardInterrupt, so that an ``except Exception`` in their loop does not swallow it."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Raise ``_TimeLimit`` after ``seconds`` where signals are available (main thread, Unix)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or not seconds:
        yield
        return

    def on_alarm(signum, frame):
        raise _TimeLimit()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _InputCalled(BaseException):
    """Raised by ``input()`` during a call: nobody is there to type an answer."""


@contextlib.contextmanager
def _no_input():
    """Make ``input()`` raise ``_InputCalled`` instead of waiting for someone to type."""

    def refuse(*args, **kwargs):
        raise _InputCalled()

    previous = builtins.input
    builtins.input = refuse
    try:
        yield
    finally:
        builtins.input = previous


@contextlib.contextmanager
def _noting_interrupts(note: dict):
    """Set ``note["signal"]`` when a real interrupt (SIGINT: the stop button, the grader) arrives,
    so that a KeyboardInterrupt the function raises itself is told apart from one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_interrupt(signum, frame):
        note["signal"] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


_LIBRARY_DIRS = tuple({os.path.normpath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"],
                                                             sysconfig.get_paths()["purelib"],
                                                             sysconfig.get_paths()["platlib"])})


def _raised_by_library(exc: BaseException) -> bool:
    """True when the innermost frame of ``exc`` is in the standard library or an installed
    package (not in the learner's code, nor in this course's package)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    where = os.path.normpath(frames[-1].filename)
    return where.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in where


class _CappedText(io.StringIO):
    """A text stream that keeps the first ``cap`` characters written and counts the rest."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap, self.total = cap, 0

    def write(self, s: str) -> int:
        room = self.cap - self.total
        self.total += len(s)
        if room > 0:
            super().write(s[:room])
        return len(s)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # minirlhf/


def _where(exc: BaseException) -> str:
    """Return ' (in f, line N: code)' for the innermost frame outside this package."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    if not frames:
        return ""
    f = frames[-1]
    return f" (in {f.name}, line {f.lineno}: {f.line.strip() if f.line else ''})"


def _same(a, b) -> bool:
    try:
        if hasattr(a, "detach"):
            return bool(a.shape == b.shape and (a == b).all())
        if isinstance(a, np.ndarray):
            return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))
        return a == b
    except Exception:
        return True


def _exception_name(exc: BaseException) -> str:
    """The name of ``exc``'s class: ``ValueError`` for Python's own, ``module.Name`` for any
    other, so that a class of the notebook's called ValueError is not taken for Python's."""
    kind = type(exc)
    name, module = _type_name(kind), _type_module(kind)
    return name if module == "builtins" else f"{module if type(module) is str else '?'}.{name}"


def _exception_text(exc: BaseException) -> tuple[str, bool]:
    """Return (``str(exc)`` on one line, True) or, when that raises, runs past a second or is
    not a string, ("<unprintable Name>", False). Never raises."""
    try:
        with _time_limit(1.0):
            text = str(exc)
        if not isinstance(text, str):
            raise TypeError
        return printable(str.__getitem__(text, slice(0, 100_000))), True
    except BaseException:  # its __str__ is the learner's code too
        return f"<unprintable {_exception_name(exc)}>", False


def _require_grad(kwargs: dict, names) -> None:
    """Make the floating-point tensors ``kwargs[name]`` leaves that require a gradient."""
    if not names:
        return
    import torch

    for name in names:
        value = kwargs.get(name)
        if type(value) is torch.Tensor and value.is_floating_point():
            kwargs[name] = value.detach().clone().requires_grad_(True)


def _gradients(loss, kwargs: dict, names):
    """Return {input name: gradient of ``loss`` (None where it has no path to that input)} for
    the inputs ``names`` that require a gradient, or None when ``loss`` is not a 0-d float tensor."""
    import torch

    inputs = [(k, kwargs[k]) for k in names if type(kwargs.get(k)) is torch.Tensor and kwargs[k].requires_grad]
    if (not inputs or type(loss) not in (torch.Tensor, torch.nn.Parameter) or loss.dim() != 0
            or not loss.is_floating_point()):
        return None
    if loss.grad_fn is None:  # a leaf (torch.tensor(x.item(), requires_grad=True)) or no gradient at all
        return {k: None for k, _ in inputs}
    found = torch.autograd.grad(loss, [t for _, t in inputs], allow_unused=True)
    return {k: None if g is None else g.detach().clone() for (k, _), g in zip(inputs, found)}


def call_safely(fn: Callable, kwargs: dict, time_limit: float | None = None, grad_wrt=(),
                mentions: str | None = None) -> Call:
    """Return what ``fn(**kwargs)`` did, called on a copy of ``kwargs``; never raises.

    Printed output is captured (the first ``PRINT_CAP`` characters kept); ``time_limit``
    seconds stop a call that runs too long, where the platform has interval timers.
    ``grad_wrt`` names the inputs of a loss: they are made to require a gradient, and the
    returned loss's gradient with respect to them is recorded (``Call.grads``). ``mentions``:
    a word the contract's exception must name; whether the whole message names it is recorded
    (``Call.named``), so that a message cut short for the report is still judged whole.
    """
    kwargs = copy.deepcopy(kwargs)
    _require_grad(kwargs, grad_wrt)
    before = copy.deepcopy(kwargs)
    out = _CappedText(PRINT_CAP)
    start = time.perf_counter()

    note = {"signal": False}
    extra = {}

    def done(kind, value=None, message=""):
        return Call(kind, value, message, out.getvalue(), out.total, time.perf_counter() - start, **extra)

    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), _time_limit(time_limit), \
                _noting_interrupts(note), _no_input():
            got = fn(**kwargs)
    except NotImplementedError as exc:
        if _raised_by_library(exc):  # torch or Python saying it cannot do something, not a blank exercise
            text, _ = _exception_text(exc)
            return done("error", message=f"raised NotImplementedError: {shorten(text, 200)}{_where(exc)}")
        return done("todo", message="not implemented yet")
    except _InputCalled as exc:
        return done("error", message=f"called input(){_where(exc)}, which waits for someone to type: "
                                     "the function must take everything it needs from its arguments")
    except _TimeLimit:
        return done("timeout", message=f"took longer than {time_limit:g} s: is there a loop that never ends?")
    except KeyboardInterrupt as exc:
        if not note["signal"]:  # raised by the function itself, not by an interrupt
            return done("error", message=f"raised KeyboardInterrupt{_where(exc)}, which stops the program: "
                                         "return the answer instead")
        return done("timeout", message=f"interrupted after {time.perf_counter() - start:.1f} s: "
                                       "is there a loop that never ends?")
    except RecursionError:
        return done("error", message="raised RecursionError: the function calls itself without end")
    except SystemExit:
        return done("error", message="called exit(): return a value instead")
    except BaseException as exc:  # the learner's code may raise anything
        text, readable = _exception_text(exc)
        if mentions is not None:
            extra["named"] = readable and mentions.lower() in text.lower()
        return done("error", message=f"raised {_exception_name(exc)}: {text}{_where(exc)}")
    if time_limit and time.perf_counter() - start > time_limit:  # it swallowed the alarm, or no alarms here
        return done("timeout", message=f"took longer than {time_limit:g} s: is there a loop that never ends?")
    for key in before:
        if not _same(before[key], kwargs[key]):
            return done("mutated", got, f"changed its input {key!r} in place: work on a copy")
    if grad_wrt:
        extra["grads"] = _grads_safely(got, kwargs, grad_wrt, time_limit)
    return done("ok", got)


def _grads_safely(loss, kwargs: dict, names, time_limit: float | None):
    """:func:`_gradients` of the learner's loss, or a sentence saying why there is none."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                _time_limit(time_limit), _no_input():
            return _gradients(loss, kwargs, names)
    except _TimeLimit:
        return f"its gradient took longer than {time_limit:g} s to compute"
    except BaseException as exc:  # a backward of the learner's own (an autograd.Function) may raise
        text, _ = _exception_text(exc)
        return f"computing its gradient raised {_exception_name(exc)}: {shorten(text, 200)}"


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
    """Return (value, gradients) of ``fn`` on a copy of ``kwargs``, as :func:`_gradients` gives them."""
    kwargs = copy.deepcopy(kwargs)
    _require_grad(kwargs, names)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        value = fn(**kwargs)
        return value, _gradients(value, kwargs, names)


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
        a, b = _pair(a, b)
        kind, says = _which_grad_slip(expect, grads, want, case)
        at = f" at {_index(where)}" if where else ""
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

    The returned value is judged as the grader would receive it (see :func:`to_plain`), so a
    check cell and the grader give the same verdict.
    """
    mentions = case.expected.mentions if isinstance(case.expected, Raises) else None
    call = call_safely(fn, case.kwargs, exercise.time_limit, exercise.expect.grad_wrt, mentions)
    if call.kind in ("ok", "mutated"):
        call.value = _round_trip(call.value)
        call.grads = _round_trip(call.grads)
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

