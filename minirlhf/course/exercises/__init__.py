"""Every exercise of the book, found by name: cases, hints and the reference solution.

Each chapter keeps its exercises in its own module ``chNN.py``, in a tuple ``IN_THIS_CHAPTER``;
this package collects them. The notebooks call :func:`check` in their check cells, and the
grader (``python -m minirlhf.course.grader``) finds a notebook's exercises with :func:`for_chapter`.

A chapter's module is imported when one of its exercises is first asked for, so the check
cell of chapter 1 does not pay for the torch import of a later chapter.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Iterator, Mapping

from .. import answers
from ..cases import Exercise, NotReady, run_cases
from ..report import Report

__all__ = ["EXERCISES", "get", "for_chapter", "check", "GRADING_ENV"]

# Set in the kernel while the grader runs a notebook: the grader runs every case itself
# (and many more), so the notebook's own check cells skip the work.
GRADING_ENV = "MINIRLHF_GRADING"

# Exercise name -> {mistake: how many checks failed with it}, in this kernel: the last hint
# (nearly the answer) shows only when a check fails the same way a second time.
_FAILED: dict[str, dict[str, int]] = {}

_MODULES = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("ch"))


class _Registry(Mapping):
    """Exercise name -> Exercise, in chapter order, importing chapter modules on demand."""

    def __init__(self):
        self._by_module: dict[str, list[Exercise]] = {}
        self._by_name: dict[str, Exercise] = {}
        self._lock = threading.RLock()  # two threads asking at once load a module once

    def load(self, module: str) -> list[Exercise]:
        """Import chapter module ``module`` (once) and return its exercises."""
        with self._lock:
            if module not in self._by_module:
                found = list(importlib.import_module(f"{__name__}.{module}").IN_THIS_CHAPTER)
                for ex in found:
                    if ex.name in self._by_name:
                        raise RuntimeError(f"exercise {ex.name!r} is defined twice")
                    self._by_name[ex.name] = ex
                self._by_module[module] = found
            return self._by_module[module]

    def __getitem__(self, name: str) -> Exercise:
        with self._lock:
            for module in _MODULES:
                if name in self._by_name:
                    break
                self.load(module)
            return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter([ex.name for module in _MODULES for ex in self.load(module)])

    def __len__(self) -> int:
        return sum(len(self.load(module)) for module in _MODULES)


EXERCISES: Mapping[str, Exercise] = _Registry()

answers.register()  # the chapters import this module first: their worked answers' cells can fold


def get(name: str) -> Exercise:
    """Return the exercise called ``name``, or raise a KeyError listing the known ones."""
    try:
        return EXERCISES[name]
    except KeyError:
        raise KeyError(f"no exercise called {name!r}; known: {sorted(EXERCISES)}") from None


def for_chapter(chapter: int) -> list[Exercise]:
    """Return the exercises of chapter ``chapter``, in the order their module lists them."""
    module = f"ch{chapter:02d}"
    if module in _MODULES:
        return [ex for ex in EXERCISES.load(module) if ex.chapter == chapter]
    return [ex for ex in EXERCISES.values() if ex.chapter == chapter]


def check(name: str, fn, show: bool = True) -> Report:
    """Run the learner's ``fn`` on every case of exercise ``name`` and show the verdict.

    Never raises because of the learner's code. In Jupyter the verdict is a colored block
    (plain text where HTML is not shown); elsewhere it is plain text. Returns the report
    (``report.passed`` is True when all pass), except in IPython, where it was displayed and
    None is returned. While the grader runs the notebook it returns an empty report at once
    and shows nothing. An exercise whose answer is measured on runs not stored yet prints one
    line saying what to run first, and returns None.

    The verdict shows the diagnosis and the hint that fits the mistake; when that hint is the
    last one (nearly the answer), it shows only from the second check that fails the same way.
    """
    exercise = get(name)
    if os.environ.get(GRADING_ENV) == "1":
        return Report(exercise)
    try:
        report = run_cases(fn, exercise)
    except NotReady as exc:  # an answer measured on runs that are not stored yet: one line
        print(f"{name}: not checked yet: {exc}")
        return None
    if report.state == "fail":  # count the failures of each kind, for the hint it may show
        failed = _FAILED.setdefault(name, {})
        report.seen = failed.get(report.way, 0)
        failed[report.way] = report.seen + 1
    if show:
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # plain Python
            print(report)
        else:
            if get_ipython() is None:
                print(report)
            else:
                display(report)
                # Shown already. Returning it as well would show it twice wherever the cell's
                # trailing ";" is not honoured (nbval runs cells with store_history=False).
                return None
    return report
