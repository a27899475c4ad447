"""Run a learner's exercise function on a list of cases and say, per case, what happened.

The checker never raises. A missing implementation, an exception, a wrong return type, NaN,
a wrong shape, a missing dict key, a mutated input or a run that takes too long each get
their own plain sentence, so the learner sees the point and not a stack trace.

Each exercise says how its answers are compared through an ``Expect`` object: a Python float
rounded to 2 decimals, a dict of such floats, or an array or tensor of a given shape.
"""

from __future__ import annotations

import contextlib
import copy
import html
import io
import math
import signal
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = [
    "Case", "Exercise", "CaseResult", "Report",
    "ExpectFloat2", "ExpectDict2", "ExpectArray", "ExpectFloat",
    "run_case", "run_cases", "describe",
]


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


@dataclass
class CaseResult:
    case: Case
    passed: bool
    returned: Any = None
    message: str = ""
    printed: str = ""

    @property
    def status(self) -> str:
        return "pass" if self.passed else ("todo" if self.message.startswith("not implemented") else "fail")


@dataclass
class Report:
    exercise: Exercise
    results: list = field(default_factory=list)

    @property
    def n_passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def passed(self) -> bool:
        return bool(self.results) and self.n_passed == len(self.results)

    @property
    def not_implemented(self) -> bool:
        return any(r.status == "todo" for r in self.results)

    @property
    def first_failure(self) -> CaseResult | None:
        return next((r for r in self.results if not r.passed), None)

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
        if self.not_implemented:
            return lines[0]
        for i, r in enumerate(self.results, 1):
            mark = "PASS" if r.passed else "FAIL"
            line = f"  {mark} case {i}: {describe(r.case.kwargs)}"
            if r.case.why:
                line += f"  ({r.case.why})"
            lines.append(line)
            if not r.passed:
                lines.append(f"       expected {describe(r.case.expected)}, got {describe(r.returned)}")
                lines.append(f"       {r.message}")
        if not self.passed:
            lines.append(f"Hint 1: {self.exercise.hints[0]}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = {"pass": "#1a7f37", "fail": "#b3261e", "todo": "#8a6d00"}
        head = html.escape(self.summary())
        state = "pass" if self.passed else ("todo" if self.not_implemented else "fail")
        out = [f'<div class="mr-check mr-{state}"><p style="color:{colour[state]};font-weight:bold">{head}</p>']
        if not self.not_implemented:
            out.append('<table class="mr-check-table"><thead><tr><th></th><th>input</th>'
                       '<th>expected</th><th>returned</th><th>note</th></tr></thead><tbody>')
            for r in self.results:
                sym = "&#10003;" if r.passed else "&#10007;"
                note = r.message if not r.passed else r.case.why
                out.append(
                    f'<tr><td style="color:{colour[r.status]}">{sym}</td>'
                    f"<td><code>{html.escape(describe(r.case.kwargs))}</code></td>"
                    f"<td><code>{html.escape(describe(r.case.expected))}</code></td>"
                    f"<td><code>{html.escape(describe(r.returned))}</code></td>"
                    f"<td>{html.escape(note)}</td></tr>"
                )
            out.append("</tbody></table>")
            if not self.passed:
                out.append(f"<p><b>Hint 1:</b> {html.escape(self.exercise.hints[0])}</p>")
        out.append("</div>")
        return "".join(out)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def describe(value, width: int = 90) -> str:
    """Return a short, stable text form of an input or output (numbers to 4 significant digits)."""
    text = _describe(value)
    return text if len(text) <= width else text[: width - 3] + "..."


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


# --------------------------------------------------------------------------- running


class _TimeLimit(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
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


def _where(exc: BaseException) -> str:
    """Return ' (line N of your function)' for the innermost frame outside this package."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "minirlhf" not in f.filename.replace("\\", "/").split("/")[-2:-1]]
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


def run_case(fn: Callable, case: Case, exercise: Exercise) -> CaseResult:
    """Call ``fn(**case.kwargs)`` safely and compare with ``case.expected``."""
    kwargs = copy.deepcopy(case.kwargs)
    before = copy.deepcopy(kwargs)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), _time_limit(exercise.time_limit):
            got = fn(**kwargs)
    except NotImplementedError:
        return CaseResult(case, False, None, "not implemented yet", out.getvalue())
    except _TimeLimit:
        return CaseResult(case, False, None,
                          f"took longer than {exercise.time_limit:g} s: is there a loop that never ends?",
                          out.getvalue())
    except RecursionError:
        return CaseResult(case, False, None, "raised RecursionError: the function calls itself without end")
    except Exception as exc:  # the learner's code may raise anything
        return CaseResult(case, False, None, f"raised {type(exc).__name__}: {exc}{_where(exc)}", out.getvalue())
    except KeyboardInterrupt:
        return CaseResult(case, False, None, "interrupted")
    printed = out.getvalue()
    for key in before:
        if not _same(before[key], kwargs[key]):
            return CaseResult(case, False, got, f"changed its input {key!r} in place: work on a copy", printed)
    try:
        bad = exercise.expect.problem(got, case.expected)
    except Exception as exc:
        bad = f"returned a value that could not be compared ({type(exc).__name__}: {exc})"
    return CaseResult(case, bad is None, got, bad or "", printed)


def run_cases(fn: Callable, exercise: Exercise, cases=None) -> Report:
    """Run every case (the exercise's own by default) and return the report."""
    report = Report(exercise)
    if not callable(fn):
        bad = CaseResult(Case({}, None, ""), False, fn, f"{exercise.name} is a {type(fn).__name__}, not a function")
        report.results.append(bad)
        return report
    for case in exercise.cases if cases is None else cases:
        report.results.append(run_case(fn, case, exercise))
    return report
