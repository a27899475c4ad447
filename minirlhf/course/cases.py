"""The exercise data model and the judging: run a learner's function on an exercise's cases
and say, per case, what happened.

An :class:`Exercise` holds its :class:`Case` list, its comparator (:mod:`minirlhf.course.expect`),
its hints, its reference solution and its :class:`Slip` list (the usual wrong versions of the
function). :func:`run_cases` checks a function on every case and returns a
:class:`~minirlhf.course.report.Report`, which renders the verdict.

The checker never raises. A missing implementation, an exception, a wrong return type, NaN,
a wrong shape, a missing dict key, a mutated input or a run that takes too long each get
their own plain sentence, so the learner sees the point and not a stack trace.

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
records what it did (a :class:`~minirlhf.course.sandbox.Call`; it needs no expected value), and
:func:`judge` compares that with the expected value. :func:`run_case` does both.

Between the two halves a returned value travels as plain data (:mod:`minirlhf.course.plain`):
whatever is not plain data arrives as an :class:`~minirlhf.course.plain.Opaque` and "cannot be
graded". The check cell sends every value through the same round trip, so it gives the same
verdict as the grader.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..safe_text import shorten
from .expect import Expect, index_text, number_texts_apart
from .plain import Opaque, round_trip
from .report import Report, describe
from .sandbox import Call, call_safely, loss_gradients, require_grad

__all__ = [
    "Case",
    "Raises",
    "Exercise",
    "Slip",
    "known_slip",
    "CaseResult",
    "MISTAKES",
    "NO_GRADIENT",
    "judge",
    "raised",
    "run_case",
    "run_cases",
    "not_run",
    "NotReady",
    "MeasuredCases",
]


# The mistakes a failure can carry. The comparators set the general ones; an exercise's slips
# add their own keys (see each exercise's ``slips``).
MISTAKES = {
    "value": "the number is wrong, and no usual slip explains it",
    "sign": "the right size with the wrong sign",
    "not-rounded": "right, but not rounded as the contract asks",
    "rounded": "rounded where the contract asks for the number as computed",
    "float32": "computed in single precision (float32) where the contract asks for float64",
    "dtype": "an array or tensor of another dtype than the contract asks for (bool or int for float)",
    "type": "a value of another type than the contract asks for",
    "numpy-scalar": "a NumPy scalar where the contract asks for a Python float",
    "int": "an int where the contract asks for a float",
    "not-a-tensor": "a Python or NumPy number where the contract asks for a torch tensor",
    "shape": "an array or tensor of the wrong shape",
    "not-averaged": "one value per item where the contract asks for their mean",
    "nan": "NaN",
    "inf": "an infinity",
    "no-grad": "a loss that carries no gradient",
    "grad": "a loss with the right value and the wrong gradient",
    "missing-key": "a dict without a key of the contract",
    "extra-key": "a dict with a key too many",
    "opaque": "a value the checker cannot read",
    "mutated": "an input changed in place",
    "error": "an exception",
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

    described_by_str = True  # a failing case shows str(self) as what was expected

    def __post_init__(self):
        if not (isinstance(self.error, type) and issubclass(self.error, Exception)):
            raise TypeError(f"Raises needs an exception class, got {self.error!r}")

    def accepts(self, name: str) -> bool:
        """True when an exception called ``name`` (as :func:`raised` reads it) is ``error``, a
        built-in subclass of it, or a class of the learner's own whose nearest built-in base is
        one of those (``module.GroupSizeError(ValueError)``). A class that only takes a built-in's
        name (``module.ValueError``) is not."""
        own = re.fullmatch(r"[\w.?]+\((\w+)\)", name)
        name = own[1] if own else name
        if "." in name:
            return False
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

    ``cases`` is a tuple, or, for an exercise whose answer is measured on stored runs (chapter
    10's tells), :class:`MeasuredCases`, which computes them from the runs each time they are
    read. Such an exercise has ``ready``: a function that returns None when those runs are
    there, else the one line of :class:`NotReady` saying what to run first, which the grader
    asks before it runs a notebook.
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
    ready: Callable | None = None  # () -> None when the cases can be computed, else what to run first
    # The package's other functions that compute this exercise's answer ("module.name"): the
    # grader blocks them with the reference while the exercise is graded.
    also_blocks: tuple = ()


class NotReady(Exception):
    """An exercise whose cases are measured on stored runs was checked before they were made;
    the message says, in one line, what to run first."""


class MeasuredCases(Sequence):
    """The cases of an exercise whose answer is measured, not written down: ``make()`` returns
    them, computed from what it reads (chapter 10's stored runs), each time they are read, so
    that a change of the runs changes the answer key with them; it raises :class:`NotReady`
    when that is not there yet."""

    def __init__(self, make: Callable[[], tuple]):
        self.make = make

    def _now(self) -> tuple:
        return tuple(self.make())

    def __getitem__(self, i):
        return self._now()[i]

    def __len__(self) -> int:
        return len(self._now())

    def __iter__(self):
        return iter(self._now())


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


# --------------------------------------------------------------------------- judging


def judge(call: Call, case: Case, expect: Expect, reference: Callable | None = None) -> CaseResult:
    """Compare what a call did with the case's expected value; return the case's result,
    with the kind of mistake when it failed (see :data:`MISTAKES` and :class:`Slip`).

    For a loss (``expect.grad_wrt``) whose value is right, the gradient the call recorded is
    compared with ``reference``'s on the same input."""
    if isinstance(case.expected, Raises):
        return _judge_raise(call, case, case.expected)
    if call.kind != "ok":
        mistake = call.kind if call.kind in ("mutated", "error") else ""
        message = call.message
        if call.kind == "error" and _IN_PLACE_ON_LEAF in message:  # torch's words for what "mutated" says
            where = _WHERE.search(message)
            mistake, message = (
                "mutated",
                (
                    f"changed an input in place{where[0] if where else ''}, which torch refuses for a tensor "
                    "that requires a gradient: work on a copy (x = x / t, not x /= t)"
                ),
            )
        return CaseResult(
            case, False, call.value, message, call.printed, call.n_printed, call.kind, call.seconds, mistake
        )
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
    return CaseResult(case, bad is None, call.value, message, call.printed, call.n_printed, "ok", call.seconds, mistake)


# The message call_safely writes for an exception: "raised ValueError: ..." for Python's own,
# "raised module.Name: ..." for another class, "raised module.Name(ValueError): ..." for another
# class that is a built-in exception (its nearest built-in base in brackets).
_RAISED = re.compile(r"raised ([\w.?]+(?:\(\w+\))?): (.*)\Z", re.S)
_IN_PLACE_ON_LEAF = "a leaf Variable that requires grad is being used in an in-place operation"
_WHERE = re.compile(r" \(in [^\n(]*, line \d+: [^\n]*\)\Z")  # its closing " (in f, line N: code)"


def raised(message: str) -> tuple[str, str] | None:
    """Return (the exception's type name, its own message) from the message
    :func:`~minirlhf.course.sandbox.call_safely` writes for a call that raised (``raised ValueError:
    ... (in f, line 3: code)``), or None when the message is not of that form. The place in the
    code is left out."""
    found = _RAISED.match(message)
    return None if found is None else (found[1], _WHERE.sub("", found[2]))


def _judge_raise(call: Call, case: Case, want: Raises) -> CaseResult:
    """Judge a call whose case expects it to raise ``want``."""

    def result(passed: bool, mistake: str = "", message: str | None = None) -> CaseResult:
        return CaseResult(
            case,
            passed,
            call.value,
            call.message if message is None else message,
            call.printed,
            call.n_printed,
            call.kind,
            call.seconds,
            mistake,
        )

    error = want.error.__name__
    naming = f" whose message names {want.mentions}" if want.mentions else ""
    if call.kind in ("todo", "timeout"):
        return result(False)
    if call.kind in ("ok", "mutated"):
        return result(
            False,
            "no-raise",
            f"returned {describe(call.value, 60)}, but on this input the "
            f"contract asks for a {error}{naming}: check the input and raise it",
        )
    what = raised(call.message) if call.kind == "error" else None
    if what is None:  # input(), exit(), a KeyboardInterrupt of its own, the reference: not a raise
        return result(False, "error")
    name, text = what
    if not want.accepts(name):
        return result(
            False,
            "wrong-error",
            f"raised {name} ({shorten(text, 120)}), but on this input the "
            f"contract asks for a {error}{naming}: check the input first and "
            f"raise it yourself",
        )
    named = call.named if call.named is not None else want.mentions.lower() in text.lower()
    if not named:
        return result(
            False,
            "error-message",
            f"raised {name} ({shorten(text, 120)}), but its message does "
            f"not name {want.mentions}: say which argument is wrong",
        )
    return result(True, message="")


def _an_input(value, case: Case) -> bool:
    """True when ``value`` is a number the case passed in: returned as it came, not rounded."""
    return type(value) in (int, float) and any(type(v) in (int, float) and v == value for v in case.kwargs.values())


def _which_slip(expect: Expect, got, case: Case) -> tuple[str, str]:
    """Return (kind, says) of the slip of ``expect`` whose answer to ``case`` is wrong and
    equals ``got``. When several slips of one kind give that answer, the kind and no words
    (the numbers cannot tell which slip it is); ("", "") when none does, or when slips of
    different kinds do. The expected value rounded, where the contract asks for it as computed
    (``expect.rounding``), counts as one more slip, "rounded"."""
    rounded = None if _an_input(got, case) else expect.rounding(got, case.expected)
    found = [Slip("rounded", _no_function, rounded)] if rounded else []
    for slip in expect.slips:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                wrong = slip.fn(**copy.deepcopy(case.kwargs))
            if expect.problem(wrong, case.expected) is not None and expect.problem(got, wrong) is None:
                found.append(slip)
        except Exception:  # a slip that does not apply to this input (a shape it cannot take)
            continue
    return _named_slips(found)


def _no_function(**kwargs):  # the function of a slip known by its answer alone (a rounded number)
    raise NotImplementedError


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
    """Return (value, gradients) of ``fn`` on a copy of ``kwargs``, as :func:`loss_gradients` gives
    them: of the loss, or of the sum of a tensor of results that a run differentiates (chapter
    10's log-probs)."""
    kwargs = copy.deepcopy(kwargs)
    require_grad(kwargs, names)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        value = fn(**kwargs)
        return value, loss_gradients(_summed(value), kwargs, names)


def _summed(value):
    """A tensor of more than one number, summed (its gradient is the sum's); anything else as it is."""
    if hasattr(value, "dim") and hasattr(value, "sum") and value.dim() > 0 and value.is_floating_point():
        return value.sum()
    return value


def _grad_gap(got, want) -> tuple | None:
    """None when two gradients agree, else (index, got, expected) at the largest gap. A missing
    gradient (no path to that input) counts as zeros."""
    w = np.asarray(want.detach().double().numpy() if want is not None else 0.0, dtype=float)
    g = np.asarray(
        got.detach().double().numpy() if hasattr(got, "detach") else (got if got is not None else 0.0), dtype=float
    )
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
    """Compare the gradient a call recorded with the reference's; None when they agree.

    For a result of more than one number (chapter 10's log-probs), the gradient compared is that
    of its sum; one the call did not record (None) is not compared: the sandbox records the
    gradient of a 0-d loss only, and the comparator checks that such a result carries a gradient
    at all (``ExpectArray.grad_why``)."""
    if isinstance(grads, str):
        return "error", f"the value is right, but {grads}"
    try:
        value, want = _input_grads(reference, case.kwargs, expect.grad_wrt)
    except Exception:  # the reference cannot differentiate this input: nothing to compare
        return None
    if not want:
        return None
    many = _summed(value) is not value  # a tensor of results, not a loss
    if many and grads is None:
        return None
    loss = expect.what if many else "this loss"
    if not isinstance(grads, dict) or set(grads) != set(want):
        return "no-grad", f"{_no_gradient(expect, many)} (its gradient could not be read)"
    if all(g is None for g in grads.values()) and any(g is not None for g in want.values()):
        names = " and ".join(want)
        why = expect.grad_why or "training moves the policy through the gradient"
        return "no-grad", (
            f"{_no_gradient(expect, many)} The value is right, but {why} with respect to {names}, "
            f"and {loss} {'have' if many and expect.plural else 'has'} none."
        )
    for name in want:
        gap = _grad_gap(grads[name], want[name])
        if gap is None:
            continue
        where, a, b = gap
        a, b = number_texts_apart(a, b)
        kind, says = _which_grad_slip(expect, grads, want, case)
        at = f" at {index_text(where)}" if where else ""
        of = f" of the sum of {expect.what}" if many else ""
        text = f"the value is right, but the gradient{of} with respect to {name} is not: {a}{at}, expected {b}"
        if kind or says:
            return kind or "grad", f"{text}; {says}"
        detached = [".detach()", ".item()"]
        if "old_logp" in case.kwargs and "new_logp" in case.kwargs:
            detached.append("old_logp in place of new_logp")
        return "grad", (
            f"{text}. A term built from a detached tensor ({', '.join(detached)}) keeps its value and "
            "loses its gradient"
        )
    return None


def _no_gradient(expect: Expect, many: bool) -> str:
    """The first words of a failure for a result with no gradient."""
    if not many:
        return NO_GRADIENT
    return (
        f"{expect.what} {'have' if expect.plural else 'has'} no gradient: "
        "were they computed under no_grad, or from a detached tensor?"
    )


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

    The returned value is judged as the grader would receive it (see
    :func:`~minirlhf.course.plain.round_trip`), so a check cell and the grader give the same verdict.
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
        bad = CaseResult(
            Case({}, None, ""), False, fn, f"{exercise.name} is a {type(fn).__name__}, not a function", kind="error"
        )
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
