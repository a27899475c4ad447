"""Every exercise of the book, found by name: cases, hints and the reference solution.

Each chapter keeps its exercises in its own module ``chNN.py`` with a list ``EXERCISES``;
this package collects them. The notebooks call :func:`check` in their check cells.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..checking import Exercise, Report, run_cases

__all__ = ["EXERCISES", "get", "check"]


def _collect() -> dict:
    found = {}
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("ch")):
        for ex in importlib.import_module(f"{__name__}.{mod}").EXERCISES:
            if ex.name in found:
                raise RuntimeError(f"exercise {ex.name!r} is defined twice")
            found[ex.name] = ex
    return found


EXERCISES: dict[str, Exercise] = _collect()


def get(name: str) -> Exercise:
    """Return the exercise called ``name``, or raise a KeyError listing the known ones."""
    try:
        return EXERCISES[name]
    except KeyError:
        raise KeyError(f"no exercise called {name!r}; known: {sorted(EXERCISES)}") from None


def check(name: str, fn, show: bool = True) -> Report:
    """Run the learner's ``fn`` on every case of exercise ``name`` and show the verdict.

    Never raises because of the learner's code. In Jupyter the verdict is a coloured table;
    elsewhere it is plain text. Returns the report (``report.passed`` is True when all pass).
    """
    report = run_cases(fn, get(name))
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
    return report
