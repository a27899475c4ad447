"""Progress bars and status messages that show up for a person and stay out of recorded notebooks.

A learner in JupyterLab gets a widget bar (``tqdm.auto``); a terminal gets a short text line
on stderr. A notebook executed by a machine (the book build, nbval, the notebook generator)
gets nothing, so the recorded outputs do not depend on timing or on whether a trained model
was already on disk. Set ``MINIRLHF_PROGRESS=0`` or ``=1`` to force either way.
"""

from __future__ import annotations

import os
import sys

from .paths import book_mode

__all__ = ["show_progress", "progress_bar", "notify"]


def _kernel():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


def show_progress() -> bool:
    """Return True when someone is watching: a terminal, or a notebook run by hand in Jupyter.

    A Jupyter front end run by a person sends ``allow_stdin`` with each cell; the notebook
    executors used for the book and for nbval do not, and so they get no bars and no notes.
    """
    forced = os.environ.get("MINIRLHF_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    if book_mode():
        return False
    kernel = _kernel()
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    return True


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, enabled: bool | None = True):
    """Return a progress bar over ``total`` steps (a silent stand-in when nobody is watching).

    ``enabled=False`` silences it; ``True`` (the default) shows it when :func:`show_progress`.
    """
    if not enabled or not show_progress():
        return _NoBar()
    if _kernel() is not None:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False, file=sys.stderr, ncols=72,
                bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}")


def notify(message: str, enabled: bool | None = True) -> None:
    """Print a one-line status ``message`` on stderr when :func:`show_progress` (else nothing)."""
    if enabled and show_progress():
        print(message, file=sys.stderr, flush=True)
