"""The verdict on one exercise and how it is shown: a :class:`Report` holds a result per case,
says which hint fits, and renders itself as plain text (terminals, nbval) and as HTML (JupyterLab,
the book).

Its helpers write any value of a case in a stable, short form (:func:`describe`,
:func:`describe_kwargs`) and break a report's lines at :data:`REPORT_WIDTH` columns without cutting
anything (:func:`wrap`); the grader's own report uses them too.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..palette import BLUE, DARK_YELLOW, GREEN, ORANGE
from ..safe_text import printable, shorten
from .plain import Opaque

if TYPE_CHECKING:  # cases.py imports this module
    from .cases import CaseResult, Exercise

__all__ = ["Report", "next_hint", "describe", "describe_kwargs", "failure_lines", "wrap", "STATE_STYLE", "REPORT_WIDTH"]

REPORT_WIDTH = 77  # characters per line of the text report (what a notebook prints)


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
            return (
                0,
                "",
                (
                    f"Hint {number} of {number} (nearly the answer) shows here if the check fails "
                    "the same way again; the hints above open one at a time."
                ),
            )
        return number, text, ""

    @property
    def mistake(self) -> str:
        """The mistake the hint is about: that of the first failure whose mistake the exercise
        ties to a hint, or "" when no failure's mistake has one."""
        hints, hint_for = self.exercise.hints, self.exercise.hint_for
        return next(
            (
                r.mistake
                for r in self.results
                if not r.passed and r.mistake and 1 <= hint_for.get(r.mistake, 0) <= len(hints)
            ),
            "",
        )

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
        badge = (
            f'<span style="background:{color};color:#fff;font-weight:bold;padding:0 0.4em;'
            f'border-radius:3px">{word}</span>'
        )
        head = html.escape(self.summary()).replace(
            html.escape(self.exercise.name), f"<code>{html.escape(self.exercise.name)}</code>", 1
        )
        out = [
            f'<div class="mr-check mr-{state}" style="border-left:4px solid {color};'
            f'padding:0.1em 0.8em;margin:0.3em 0">',
            f'<p style="margin:0.3em 0">{badge} {head}</p>',
        ]
        if state == "fail":
            shown, more, not_run = self._shown_failures()
            cell = 'style="text-align:left;vertical-align:top;padding:0.15em 0.6em"'
            heads = "".join(f"<th {cell}>{h}</th>" for h in ("case", "input", "expected", "returned", "what is wrong"))
            out.append(
                f'<table class="mr-check-table" style="margin:0.3em 0;border-collapse:collapse">'
                f"<thead><tr>{heads}</tr></thead><tbody>"
            )
            for i, r in shown:
                returned = describe(r.returned) if r.kind in ("ok", "mutated") else "-"
                why = f"<br><small>{html.escape(r.case.why)}</small>" if r.case.why else ""
                out.append(
                    f"<tr><td {cell}>{i}{why}</td>"
                    f"<td {cell}><code>{html.escape(describe_kwargs(r.case.kwargs))}</code></td>"
                    f"<td {cell}><code>{html.escape(describe(r.case.expected))}</code></td>"
                    f"<td {cell}><code>{html.escape(returned)}</code></td>"
                    f"<td {cell}>{html.escape(printable(r.message))}</td></tr>"
                )
            out.append("</tbody></table>")
            notes = _left_out(more, not_run)
            if notes:
                out.append(f'<p style="margin:0.3em 0">{html.escape("; ".join(notes))}.</p>')
            number, text, held = self.shown_hint()
            if text:
                out.append(
                    f'<p style="margin:0.3em 0"><b>Hint {number} of {len(self.exercise.hints)}:</b> '
                    f"{_inline_code(text)}</p>"
                )
            if held:
                out.append(f'<p style="margin:0.3em 0"><small>{html.escape(held)}</small></p>')
        elif state == "pass":
            rows = "".join(
                f"<li><code>{html.escape(describe_kwargs(r.case.kwargs))}</code>"
                f" &rarr; <code>{html.escape(describe(r.case.expected))}</code>"
                + (f": {html.escape(r.case.why)}" if r.case.why else "")
                + "</li>"
                for r in self.results
            )
            cases = "the case" if len(self.results) == 1 else f"the {len(self.results)} cases"
            out.append(f"<details><summary>{cases}</summary><ol>{rows}</ol></details>")
        out.append("</div>")
        return "".join(out)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


# Okabe-Ito colors (safe for color blindness); the word says the same thing as the color.
STATE_STYLE = {"pass": (GREEN, "PASS"), "fail": (ORANGE, "FAIL"), "todo": (DARK_YELLOW, "TODO"), "slow": (BLUE, "SLOW")}


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


def wrap(text: str, first: str, rest: str, pieces: list | None = None, width: int = REPORT_WIDTH) -> list[str]:
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
    long array is summarized by its shape; what is still longer than ``width`` is cut. It is one
    line that draws nothing: a control character from the learner's value (a dict's key, a
    class's name) is written as its escape."""
    text = printable(_describe(value))
    return text if width is None else shorten(text, width)


def _kwarg_pieces(kwargs: dict) -> list[str]:
    return [f"{k}={_describe(v)}" for k, v in kwargs.items()]


def describe_kwargs(kwargs: dict, width: int | None = None) -> str:
    """Return ``name=value, ...`` for a call's keyword arguments: every argument, none cut
    (a long array is summarized by its shape), unless ``width`` asks for a cut."""
    text = printable(", ".join(_kwarg_pieces(kwargs)))
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
    if getattr(type(value), "described_by_str", False):
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
        return (
            "{"
            + ", ".join(
                f"{k}={_describe(v)}" if isinstance(k, str) and "=" not in k else f"{k!r}: {_describe(v)}"
                for k, v in value.items()
            )
            + "}"
        )
    if isinstance(value, (list, tuple)):
        body = ", ".join(_describe(v, whole) for v in value)
        if isinstance(value, tuple) and len(value) == 1:
            body += ","  # a 1-tuple keeps its comma, as Python writes it
        text = f"[{body}]" if isinstance(value, list) else f"({body})"
        if not whole and len(text) > LONG_ARRAY and all(isinstance(v, (int, float)) for v in value):
            return _summary("a list" if isinstance(value, list) else "a tuple", (len(value),), list(value))
        return text
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
