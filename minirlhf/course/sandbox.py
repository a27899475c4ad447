"""The sandbox: call a learner's function so that nothing it does can stop the checker.

:func:`call_safely` calls the function on a copy of its inputs and returns a :class:`Call`, the
record of what it did; it never raises. The function's prints are captured (the first
:data:`PRINT_CAP` characters kept), a call that runs too long is stopped by an alarm signal (the
time limit), ``input()`` raises instead of waiting for someone to type, a real interrupt is told
apart from a KeyboardInterrupt the function raises itself, an input changed in place is noticed,
and for a loss the gradient with respect to its inputs is computed under the same guards.

The grader's kernel side runs the very same function, so a check cell and the grader record a
call alike. What the record means for the verdict is :func:`minirlhf.course.cases.judge`'s job.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import io
import os
import signal
import sysconfig
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..safe_text import printable, shorten
from .plain import class_module, class_name

__all__ = ["Call", "call_safely", "PRINT_CAP"]

PRINT_CAP = 2000  # characters of a call's printed output that are kept; the rest is counted


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


_LIBRARY_DIRS = tuple(
    {
        os.path.normpath(p) + os.sep
        for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    }
)


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
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)
    ]
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


def _identifier(text) -> str:
    return text if type(text) is str and all(part.isidentifier() for part in text.split(".")) else "?"


def _exception_name(exc: BaseException) -> str:
    """The name of ``exc``'s class: ``ValueError`` for Python's own (the very class of that name
    in ``builtins``); ``module.Name`` for any other, so that a class of the notebook's called
    ValueError is not taken for Python's, whatever module it claims; ``module.Name(ValueError)``
    for one whose nearest built-in base is an exception of Python's own (a learner's
    ``GroupSizeError(ValueError)`` is a ValueError)."""
    kind = type(exc)
    name, module = class_name(kind), class_module(kind)
    if module == "builtins" and getattr(builtins, name, None) is kind:
        return name
    text = f"{_identifier(module)}.{_identifier(name)}"
    for base in type.__dict__["__mro__"].__get__(kind)[1:]:
        base_name = class_name(base)
        if class_module(base) == "builtins" and getattr(builtins, base_name, None) is base:
            return text + (f"({base_name})" if base_name not in ("Exception", "BaseException") else "")
    return text


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


def require_grad(kwargs: dict, names) -> None:
    """Make the floating-point tensors ``kwargs[name]`` leaves that require a gradient."""
    if not names:
        return
    import torch

    for name in names:
        value = kwargs.get(name)
        if type(value) is torch.Tensor and value.is_floating_point():
            kwargs[name] = value.detach().clone().requires_grad_(True)


def loss_gradients(loss, kwargs: dict, names):
    """Return {input name: gradient of ``loss`` (None where it has no path to that input)} for
    the inputs ``names`` that require a gradient, or None when ``loss`` is not a float tensor. For
    a result of more than one number, the gradient of its sum."""
    import torch

    inputs = [(k, kwargs[k]) for k in names if type(kwargs.get(k)) is torch.Tensor and kwargs[k].requires_grad]
    if not inputs or type(loss) not in (torch.Tensor, torch.nn.Parameter) or not loss.is_floating_point():
        return None
    if loss.grad_fn is None:  # a leaf (torch.tensor(x.item(), requires_grad=True)) or no gradient at all
        return {k: None for k, _ in inputs}
    # a result of more than one number (log-probs a run's loss is built from): the gradient of its sum
    total = loss if loss.dim() == 0 else loss.sum()
    found = torch.autograd.grad(total, [t for _, t in inputs], allow_unused=True)
    return {k: None if g is None else g.detach().clone() for (k, _), g in zip(inputs, found)}


def call_safely(
    fn: Callable, kwargs: dict, time_limit: float | None = None, grad_wrt=(), mentions: str | None = None
) -> Call:
    """Return what ``fn(**kwargs)`` did, called on a copy of ``kwargs``; never raises.

    Printed output is captured (the first ``PRINT_CAP`` characters kept); ``time_limit``
    seconds stop a call that runs too long, where the platform has interval timers.
    ``grad_wrt`` names the inputs of a loss: they are made to require a gradient, and the
    returned loss's gradient with respect to them is recorded (``Call.grads``). ``mentions``:
    a word the contract's exception must name; whether the whole message names it is recorded
    (``Call.named``), so that a message cut short for the report is still judged whole.
    """
    kwargs = copy.deepcopy(kwargs)
    require_grad(kwargs, grad_wrt)
    before = copy.deepcopy(kwargs)
    out = _CappedText(PRINT_CAP)
    start = time.perf_counter()

    note = {"signal": False}
    extra = {}

    def done(kind, value=None, message=""):
        return Call(kind, value, message, out.getvalue(), out.total, time.perf_counter() - start, **extra)

    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(out),
            _time_limit(time_limit),
            _noting_interrupts(note),
            _no_input(),
        ):
            got = fn(**kwargs)
    except NotImplementedError as exc:
        if _raised_by_library(exc):  # torch or Python saying it cannot do something, not a blank exercise
            text, _ = _exception_text(exc)
            return done("error", message=f"raised NotImplementedError: {shorten(text, 200)}{_where(exc)}")
        return done("todo", message="not implemented yet")
    except _InputCalled as exc:
        return done(
            "error",
            message=f"called input(){_where(exc)}, which waits for someone to type: "
            "the function must take everything it needs from its arguments",
        )
    except _TimeLimit:
        return done("timeout", message=f"took longer than {time_limit:g} s: is there a loop that never ends?")
    except KeyboardInterrupt as exc:
        if not note["signal"]:  # raised by the function itself, not by an interrupt
            return done(
                "error",
                message=f"raised KeyboardInterrupt{_where(exc)}, which stops the program: return the answer instead",
            )
        elapsed = time.perf_counter() - start
        if time_limit and elapsed < time_limit:  # not the time limit's interrupt: say so
            return done(
                "timeout",
                message=f"interrupted after {elapsed:.1f} s, before its {time_limit:g} s limit, by an "
                "interrupt (SIGINT) from outside the check: the stop button, or a signal the function "
                "sent itself (os.kill)?",
            )
        return done("timeout", message=f"interrupted after {elapsed:.1f} s: is there a loop that never ends?")
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
    """:func:`loss_gradients` of the learner's loss, or a sentence saying why there is none."""
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            _time_limit(time_limit),
            _no_input(),
        ):
            return loss_gradients(loss, kwargs, names)
    except _TimeLimit:
        return f"its gradient took longer than {time_limit:g} s to compute"
    except BaseException as exc:  # a backward of the learner's own (an autograd.Function) may raise
        text, _ = _exception_text(exc)
        return f"computing its gradient raised {_exception_name(exc)}: {shorten(text, 200)}"
