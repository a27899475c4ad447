"""Where a chapter's notebook is running, so that it shows what suits the reader there.

Three questions, asked by the notebooks, never by the engine:

* :func:`building_book`: is the notebook being executed to render the static book? There is
  no kernel behind a rendered page, so sliders become precomputed frames.
* :func:`recording_book_forms`: is the notebook generator recording the solutions, whose
  outputs the book shows? Then each figure and slider also carries the book's form (the
  precomputed frames, a phone-width rendering) in its output's metadata. A learner's run, in
  JupyterLab, by nbval or by the grader, does not make what it never shows: in chapter 1 that
  was ten of its eighteen seconds.
* :func:`someone_watching`: is a person watching the output? Then long runs show progress
  bars and status lines; a notebook executed by a machine (the book build, nbval, the
  notebook generator, the grader) shows neither, so its recorded outputs do not depend on
  timing or on whether a model was already on disk.
"""

from __future__ import annotations

import os

__all__ = ["BOOK_BUILD_ENV", "RECORDING_ENV", "building_book", "recording_book_forms", "someone_watching"]

BOOK_BUILD_ENV = "MINIRLHF_BUILDING_BOOK"
"""Set to 1 by ``make book`` while Jupyter Book executes the notebooks."""


RECORDING_ENV = "MINIRLHF_RECORDING"
"""Set to 1 by the notebook generator while it executes the solutions."""


def building_book() -> bool:
    """Return True while the notebooks are executed to render the book."""
    return os.environ.get(BOOK_BUILD_ENV) == "1"


def recording_book_forms() -> bool:
    """Return True while the notebook generator records the solutions the book shows."""
    return os.environ.get(RECORDING_ENV) == "1" and not building_book()


def someone_watching() -> bool:
    """Return True in a terminal, or in a notebook run by hand in Jupyter.

    A Jupyter front end used by a person sends ``allow_stdin`` with each cell; the notebook
    executors (Jupyter Book, nbval, nbclient) do not.
    """
    if building_book():
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return True
    kernel = getattr(get_ipython(), "kernel", None)
    return True if kernel is None else bool(getattr(kernel, "_allow_stdin", False))
