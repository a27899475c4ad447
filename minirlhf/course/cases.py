"""Run a learner's exercise function on a list of cases and say, per case, what happened.

The checker never raises. A missing implementation, an exception, a wrong return type, NaN,
a wrong shape, a missing dict key, a mutated input or a run that takes too long each get
their own plain sentence, so the learner sees the point and not a stack trace.

Each exercise says how its answers are compared through an ``Expect`` object: a Python float
rounded to 2 decimals, a dict of such floats, or an array or tensor of a given shape.

Checking one case has two halves, so that the grader (:mod:`minirlhf.course.grader`) can run them in
different processes: :func:`call_safely` calls the function and records what it did (it
needs no expected value), and :func:`judge` compares that with the expected value.
:func:`run_case` does both.
"""

from __future__ import annotations

import contextlib
import copy
import html
import io
import math
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..palette import DARK_YELLOW, GREEN, ORANGE

__all__ = [
    "Case", "Exercise", "Call", "CaseResult", "Report",
    "ExpectFloat2", "ExpectDict2", "ExpectArray", "ExpectFloat", "ExpectScalarTensor",
    "call_safely", "judge", "run_case", "run_cases", "not_run", "next_hint",
    "describe", "describe_kwargs", "failure_lines", "shorten", "STATE_STYLE",
]

PRINT_CAP = 2000  # characters of a call's printed output that are kept; the rest is counted


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: keyword arguments, the answer, and what it tests."""

    kwargs: dict
    expected: Any
    why: str = ""


@dataclass(frozen=True)
class Exercise:
    """An exercise: its function name, cases, progressive hints and reference solution."""

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


@dataclass
class CaseResult:
    case: Case
    passed: bool
    returned: Any = None
    message: str = ""
    printed: str = ""
    n_printed: int = 0
    kind: str = "ok"  # the Call kind, or "not run" after an earlier case ran out of time

    @property
    def status(self) -> str:
        """Return "pass", "todo" (not implemented yet) or "fail"."""
        if self.passed:
            return "pass"
        return "todo" if self.kind == "todo" or self.message.startswith("not implemented") else "fail"


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
    def first_failure(self) -> CaseResult | None:
        return next((r for r in self.results if not r.passed), None)

    @property
    def state(self) -> str:
        """Return "pass", "todo" or "fail"."""
        return "pass" if self.passed else ("todo" if self.not_implemented else "fail")

    def hint(self) -> tuple[int, str]:
        """Return (number, text) of the hint this report suggests (see :func:`next_hint`)."""
        return next_hint(self.exercise.hints, self.n_passed, len(self.results))

    def _shown_failures(self, at_most: int = 3) -> tuple[list, int, int]:
        """Return (failures to show with their case numbers, failures not shown, cases not run)."""
        failed = [(i, r) for i, r in enumerate(self.results, 1) if not r.passed and r.kind != "not run"]
        not_run = sum(r.kind == "not run" for r in self.results)
        return failed[:at_most], max(0, len(failed) - at_most), not_run

    # ---- rendering: plain text for terminals and nbval, HTML for JupyterLab and the book
    def summary(self) -> str:
        name, n, total = self.exercise.name, self.n_passed, len(self.results)
        if self.not_implemented:
            return f"{name}: not implemented yet (0/{total} cases run). Write the function, then run this cell again."
        if self.passed:
            return f"{name}: all {total} cases pass."
        return f"{name}: {n}/{total} cases pass."

    def __str__(self) -> str:
        lines = [self.summary()]
        if self.state != "fail":
            return lines[0]
        shown, more, not_run = self._shown_failures()
        for i, r in shown:
            lines.append(f"  FAIL case {i}" + (f": {r.case.why}" if r.case.why else ""))
            lines += [f"       {label:<9} {text}" for label, text in failure_lines(r)]
        if more:
            lines.append(f"  ... and {more} more failing case{'s' if more > 1 else ''}")
        if not_run:
            lines.append(f"  {not_run} case{'s' if not_run > 1 else ''} not run after the time-out")
        number, text = self.hint()
        if text:
            lines.append(f"Hint {number} of {len(self.exercise.hints)}: {text}")
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
                           f"<td {cell}>{html.escape(r.message)}</td></tr>")
            out.append("</tbody></table>")
            notes = []
            if more:
                notes.append(f"and {more} more failing case{'s' if more > 1 else ''}")
            if not_run:
                notes.append(f"{not_run} case{'s' if not_run > 1 else ''} not run after the time-out")
            if notes:
                out.append(f'<p style="margin:0.3em 0">{html.escape("; ".join(notes))}.</p>')
            number, text = self.hint()
            if text:
                out.append(f'<p style="margin:0.3em 0"><b>Hint {number} of {len(self.exercise.hints)}:</b> '
                           f"{_inline_code(text)}</p>")
        elif state == "pass":
            rows = "".join(f"<li><code>{html.escape(describe_kwargs(r.case.kwargs))}</code>"
                           f" &rarr; <code>{html.escape(describe(r.case.expected))}</code>"
                           + (f": {html.escape(r.case.why)}" if r.case.why else "") + "</li>"
                           for r in self.results)
            out.append(f'<details><summary>the {len(self.results)} cases</summary><ol>{rows}</ol></details>')
        out.append("</div>")
        return "".join(out)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


# Okabe-Ito colors (safe for color blindness); the word says the same thing as the color.
STATE_STYLE = {"pass": (GREEN, "PASS"), "fail": (ORANGE, "FAIL"), "todo": (DARK_YELLOW, "TODO")}


def _inline_code(text: str) -> str:
    """Escape ``text`` for HTML and turn `backticks` into <code> elements."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def failure_lines(r: CaseResult) -> list[tuple[str, str]]:
    """Return the (label, text) lines that explain one failed case: input, expected, returned, problem."""
    lines = [("input", describe_kwargs(r.case.kwargs)), ("expected", describe(r.case.expected))]
    if r.kind in ("ok", "mutated"):
        lines.append(("returned", describe(r.returned)))
    lines.append(("problem", r.message))
    return lines


def shorten(text: str, width: int) -> str:
    """Return ``text``, cut to ``width`` characters with "..." at the end when it is longer."""
    return text if len(text) <= width else text[: width - 3] + "..."


def describe(value, width: int = 90) -> str:
    """Return a short, stable text form of an input or output (numbers to 4 significant digits)."""
    return shorten(_describe(value), width)


def describe_kwargs(kwargs: dict, width: int = 120) -> str:
    """Return ``name=value, ...`` for a call's keyword arguments, shortened to ``width``."""
    return shorten(", ".join(f"{k}={_describe(v)}" for k, v in kwargs.items()), width)


def _describe(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return repr(value)
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
        body = ", ".join(_describe(v) for v in value)
        return f"[{body}]" if isinstance(value, list) else f"({body})"
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({_describe(value.item())})"
    if isinstance(value, np.ndarray):
        return "array(" + _describe(value.tolist()) + ")"
    if type(value).__module__.startswith("torch") and hasattr(value, "tolist"):
        return "tensor(" + _describe(value.detach().tolist()) + ")"
    return f"<{type(value).__name__}>"


# --------------------------------------------------------------------------- comparisons


class Expect:
    """How a returned value is compared with the expected one: ``problem`` says what is wrong."""

    def problem(self, got, expected) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError


def _float_problem(got, expected, what: str = "the result") -> str | None:
    if isinstance(got, np.generic):
        return (f"{what} is a NumPy scalar ({type(got).__module__}.{type(got).__name__}); "
                "the contract asks for a Python float: wrap it in float(...)")
    if type(got).__module__.startswith("torch"):
        return f"{what} is a torch {type(got).__name__}; the contract asks for a Python float: use float(...) or .item()"
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return f"{what} is a {type(got).__name__}, expected a Python float"
    if isinstance(got, int):
        return f"{what} is an int ({got}); return a float, e.g. float(...)"
    if math.isnan(got):
        return f"{what} is NaN: look for a 0/0, a log of a negative number, or an empty mean"
    if math.isinf(got):
        return f"{what} is infinite: look for an exp of a large number or a division by zero"
    return None


class ExpectFloat2(Expect):
    """A Python float rounded to 2 decimals, equal to the expected one."""

    def problem(self, got, expected, what: str = "the result") -> str | None:
        bad = _float_problem(got, expected, what)
        if bad:
            return bad
        if abs(got - expected) <= 1e-9:
            return None
        if round(got, 2) != got and abs(round(got, 2) - expected) <= 1e-9:
            return f"{what} is right but not rounded: return round(value, 2)"
        if abs(got + expected) <= 1e-9 and expected != 0:
            return f"{what} has the wrong sign"
        return f"{what} differs from the expected value"


class ExpectFloat(Expect):
    """A Python float within an absolute tolerance of the expected one."""

    def __init__(self, atol: float = 1e-6):
        self.atol = atol

    def problem(self, got, expected, what: str = "the result") -> str | None:
        bad = _float_problem(got, expected, what)
        if bad:
            return bad
        return None if abs(got - expected) <= self.atol else f"{what} differs from the expected value by more than {self.atol:g}"


class ExpectDict2(Expect):
    """A dict with exactly these keys, each a Python float rounded to 2 decimals."""

    def __init__(self, keys):
        self.keys = tuple(keys)
        self._one = ExpectFloat2()

    def problem(self, got, expected) -> str | None:
        if not isinstance(got, dict):
            return f"the result is a {type(got).__name__}, expected a dict with keys {list(self.keys)}"
        missing = [k for k in self.keys if k not in got]
        if missing:
            return f"the dict has no key {missing[0]!r} (keys expected: {list(self.keys)})"
        extra = [k for k in got if k not in self.keys]
        if extra:
            return f"the dict has an unexpected key {extra[0]!r} (keys expected: {list(self.keys)})"
        for k in self.keys:
            bad = self._one.problem(got[k], expected[k], what=f"got[{k!r}]")
            if bad:
                return bad
        return None


class ExpectArray(Expect):
    """A NumPy array or torch tensor of the expected shape, close to the expected values."""

    def __init__(self, atol: float = 1e-5, kind: str = "any"):
        self.atol, self.kind = atol, kind  # kind: "numpy", "torch" or "any"

    def problem(self, got, expected) -> str | None:
        is_torch = type(got).__module__.startswith("torch")
        if self.kind == "torch" and not is_torch:
            return f"the result is a {type(got).__name__}, expected a torch tensor"
        if self.kind == "numpy" and not isinstance(got, np.ndarray):
            return f"the result is a {type(got).__name__}, expected a NumPy array"
        if not (is_torch or isinstance(got, (np.ndarray, np.generic, float, int))):
            return f"the result is a {type(got).__name__}, expected an array"
        arr = np.asarray(got.detach().cpu().numpy() if is_torch else got, dtype=float)
        want = np.asarray(expected.detach().numpy() if hasattr(expected, "detach") else expected, dtype=float)
        if arr.shape != want.shape:
            return f"the result has shape {tuple(arr.shape)}, expected shape {tuple(want.shape)}"
        if np.isnan(arr).any():
            return "the result holds NaN: look for a 0/0, a log of 0, or an empty mean"
        if not np.allclose(arr, want, atol=self.atol, rtol=0):
            worst = int(np.argmax(np.abs(arr - want)))
            return f"the values differ (largest gap {np.abs(arr - want).flat[worst]:.3g} at flat index {worst})"
        return None


class ExpectScalarTensor(ExpectArray):
    """A 0-d torch tensor (a loss that can be backpropagated) close to the expected number.

    Says in plain words what the usual slips look like: a Python float from ``.item()``, one
    value per ``per`` instead of their mean, an infinity (``why_inf`` says where it comes
    from) and, with ``sign_hint``, the objective returned in place of the loss.
    """

    def __init__(self, atol: float = 1e-4, per: str = "position", why_inf: str = "",
                 sign_hint: str = ""):
        super().__init__(atol=atol, kind="torch")
        self.per, self.why_inf, self.sign_hint = per, why_inf, sign_hint

    def problem(self, got, expected) -> str | None:
        if isinstance(got, (float, int, np.generic)) and not isinstance(got, bool):
            return (f"the result is a {type(got).__name__}; return the loss as a torch tensor "
                    "(no .item() or float(): the tensor carries the gradient that training needs)")
        if not (type(got).__module__.startswith("torch") and hasattr(got, "detach")):
            return super().problem(got, expected)
        if tuple(got.shape) != ():
            return (f"the result has shape {tuple(got.shape)}, expected a single number (a 0-d tensor): "
                    f"one value per {self.per} still has to be averaged")
        value, want = float(got.detach().double()), float(expected)
        if math.isinf(value):
            return "the result is infinite" + (f": {self.why_inf}" if self.why_inf else "")
        if math.isnan(value):
            return "the result is NaN: look for a 0/0 (an empty mask?) or a log of a negative number"
        if abs(value - want) <= self.atol:
            return None
        if self.sign_hint and abs(value + want) <= self.atol:
            return f"the result has the wrong sign: {self.sign_hint}"
        return f"the value is off by {abs(value - want):.4g}"


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


def _where(exc: BaseException) -> str:
    """Return ' (in f, line N: code)' for the innermost frame outside this package."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "minirlhf" not in f.filename.replace("\\", "/").split("/")[-2:-1]]
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


def call_safely(fn: Callable, kwargs: dict, time_limit: float | None = None) -> Call:
    """Return what ``fn(**kwargs)`` did, called on a copy of ``kwargs``; never raises.

    Printed output is captured (the first ``PRINT_CAP`` characters kept); ``time_limit``
    seconds stop a call that runs too long, where the platform has interval timers.
    """
    kwargs = copy.deepcopy(kwargs)
    before = copy.deepcopy(kwargs)
    out = _CappedText(PRINT_CAP)
    start = time.perf_counter()

    def done(kind, value=None, message=""):
        return Call(kind, value, message, out.getvalue(), out.total, time.perf_counter() - start)

    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), _time_limit(time_limit):
            got = fn(**kwargs)
    except NotImplementedError:
        return done("todo", message="not implemented yet")
    except _TimeLimit:
        return done("timeout", message=f"took longer than {time_limit:g} s: is there a loop that never ends?")
    except KeyboardInterrupt:
        return done("timeout", message=f"interrupted after {time.perf_counter() - start:.1f} s: "
                                       "is there a loop that never ends?")
    except RecursionError:
        return done("error", message="raised RecursionError: the function calls itself without end")
    except SystemExit:
        return done("error", message="called exit(): return a value instead")
    except BaseException as exc:  # the learner's code may raise anything
        return done("error", message=f"raised {type(exc).__name__}: {exc}{_where(exc)}")
    if time_limit and time.perf_counter() - start > time_limit:  # it swallowed the alarm, or no alarms here
        return done("timeout", message=f"took longer than {time_limit:g} s: is there a loop that never ends?")
    for key in before:
        if not _same(before[key], kwargs[key]):
            return done("mutated", got, f"changed its input {key!r} in place: work on a copy")
    return done("ok", got)


def judge(call: Call, case: Case, expect: Expect) -> CaseResult:
    """Compare what a call did with the case's expected value; return the case's result."""
    if call.kind != "ok":
        return CaseResult(case, False, call.value, call.message, call.printed, call.n_printed, call.kind)
    try:
        bad = expect.problem(call.value, case.expected)
    except Exception as exc:
        bad = f"returned a value that could not be compared ({type(exc).__name__}: {exc})"
    return CaseResult(case, bad is None, call.value, bad or "", call.printed, call.n_printed, "ok")


def run_case(fn: Callable, case: Case, exercise: Exercise) -> CaseResult:
    """Call ``fn(**case.kwargs)`` safely and compare with ``case.expected``."""
    return judge(call_safely(fn, case.kwargs, exercise.time_limit), case, exercise.expect)


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

