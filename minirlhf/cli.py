"""What the package's commands share: an argument parser whose errors are one line, parsers of
numbers and folders that name their limits, and stop signals that keep what is finished.

A command (``python -m minirlhf.commands.experiment``, ``minirlhf.commands.trl_run``,
``minirlhf.commands.bench``, ``minirlhf.course.grader``) runs its work inside
:func:`stops_as_interrupt`, so that SIGTERM and SIGHUP stop it as Ctrl-C does (a
:class:`Stopped`, which is a KeyboardInterrupt); it writes what is finished inside
:func:`signals_ignored`, so that a second signal cannot cut a write short; and it ends with
:func:`stop_status`, 128 plus the signal's number, as a shell reports it.

A signal's handler raises wherever Python happens to be, and that may be a finaliser
(``__del__``), whose exceptions Python prints ("Exception ignored in ...") and drops. So a stop
signal is also noted, and so is a Ctrl-C that Python dropped, and long work calls
:func:`raise_if_stopped` at its boundaries (each step, each run): the stop is raised again there.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "Parser",
    "whole_number",
    "finite_number",
    "seconds",
    "folder",
    "duration",
    "STOP_SIGNALS",
    "Stopped",
    "stops_as_interrupt",
    "raise_if_stopped",
    "stop_arrived",
    "signals_ignored",
    "stop_name",
    "stop_status",
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ending in where to look."""

    hint = "--help lists the options"

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.hint})\n")


def whole_number(low: int = 1, high: int | None = None, why: str = ""):
    """Return a parser of a whole number from ``low`` to ``high`` (None: no upper limit); a
    number above ``high`` is refused with ``why`` in brackets."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {low}, got {value}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}" + (f" ({why})" if why else ""))
        return value

    return parse


def finite_number(low: float = 0.0, above: bool = False):
    """Return a parser of a finite number ``>= low`` (``> low`` with ``above``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and (value > low if above else value >= low)):
            raise argparse.ArgumentTypeError(f"must be a finite number {'>' if above else '>='} {low:g}, got {text}")
        return value

    return parse


def seconds(most: float, least: float = 0.0):
    """Return a parser of a number of seconds, more than 0, at least ``least`` and at most ``most``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not (math.isfinite(value) and 0 < value <= most):
            raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {most:g}, got {text}")
        if value < least:
            raise argparse.ArgumentTypeError(
                f"must be at least {least:g} s (a right call may take that long on a busy machine), got {text}"
            )
        return value

    return parse


def folder(example: str):
    """Return a parser of a folder's path that refuses an empty one, naming ``example``."""

    def parse(text: str) -> Path:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"is empty: name a folder, e.g. {example}")
        return Path(text)

    return parse


def duration(secs: float) -> str:
    """Return ``secs`` as text: seconds below 90, minutes above."""
    return f"{secs:.0f} s" if secs < 90 else f"{secs / 60:.1f} min"


# ---------------------------------------------------------------------------- stop signals

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_stopped_by: list[int] = []  # the stop signal that arrived, if one did
_dropped: list[type] = []  # the type of a KeyboardInterrupt (Ctrl-C or a stop) Python dropped in a finaliser
_block = {"inside": False, "checked": False}  # inside stops_as_interrupt; its work has called raise_if_stopped


class Stopped(KeyboardInterrupt):
    """Raised when SIGTERM or SIGHUP arrives inside :func:`stops_as_interrupt`: a
    KeyboardInterrupt, so that everything that cleans up after Ctrl-C cleans up after it too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_stop_signal(signum, frame):
    for sig in STOP_SIGNALS:  # one is enough: what is finished is kept undisturbed
        signal.signal(sig, signal.SIG_IGN)
    _stopped_by.append(signum)
    raise Stopped(signum)


@contextmanager
def stops_as_interrupt():
    """Within the block, SIGTERM and SIGHUP raise :class:`Stopped` as Ctrl-C raises
    KeyboardInterrupt; the handlers before it come back after it. A stop signal, and a
    KeyboardInterrupt that Python drops (raised in a finaliser), are noted for
    :func:`raise_if_stopped`; once the work has called it, such a drop is not printed, since it
    is acted on. Ctrl-C keeps Python's own handler (asyncio looks for it)."""
    _stopped_by.clear()
    _dropped.clear()
    previous = {sig: signal.signal(sig, _on_stop_signal) for sig in STOP_SIGNALS}
    unraisable = sys.unraisablehook

    def note_dropped(dropped):
        stop = dropped.exc_type is not None and issubclass(dropped.exc_type, KeyboardInterrupt)
        if stop:
            _dropped.append(dropped.exc_type)  # not the exception: its frames would keep the object alive
        if not (stop and _block["checked"]):  # Python's "Exception ignored in ...", unless it is acted on
            unraisable(dropped)

    sys.unraisablehook = note_dropped
    _block.update(inside=True, checked=False)
    try:
        yield
    finally:
        _block.update(inside=False, checked=False)
        sys.unraisablehook = unraisable
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def raise_if_stopped() -> None:
    """Raise :class:`Stopped` if a stop signal arrived inside :func:`stops_as_interrupt`, or
    KeyboardInterrupt if Python dropped one there (the block still running); else nothing.

    For the boundaries of long work: a signal's exception may be raised inside a finaliser
    and dropped by Python, and the work would go on to its end. Once a stop has arrived,
    every later call raises again."""
    if not _block["inside"]:
        return
    _block["checked"] = True
    if _stopped_by:
        raise Stopped(_stopped_by[0])
    if _dropped:
        raise KeyboardInterrupt


@contextmanager
def signals_ignored():
    """Within the block, Ctrl-C, SIGTERM and SIGHUP are ignored: for writing what is finished."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_arrived() -> bool:
    """True when a stop signal arrived inside :func:`stops_as_interrupt`, or Python dropped a
    KeyboardInterrupt there: a command that finished its work anyway still says it was stopped."""
    return bool(_stopped_by or _dropped)


def stop_name() -> str:
    """How the command was stopped, in words: "interrupted" (Ctrl-C) or "stopped by SIGTERM"."""
    return f"stopped by {signal.Signals(_stopped_by[0]).name}" if _stopped_by else "interrupted"


def stop_status() -> int:
    """The exit status of a stopped command: 128 plus the number of the signal that stopped it."""
    return 128 + (_stopped_by[0] if _stopped_by else signal.SIGINT)
