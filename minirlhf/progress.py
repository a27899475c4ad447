"""Progress of long runs, shown in the form that suits where the output goes.

The caller decides *whether* to show progress (every training function takes ``progress``);
this module decides *how*:

* standard error is a terminal: a text bar that redraws itself in place;
* inside a Jupyter kernel: a widget bar (``tqdm.auto``);
* anything else (a log file, CI): one line per stage when it ends, never the hundreds of
  carriage-return refreshes a bar would write into a file (a bar over runs made by worker
  processes writes one line per finished run).

Status lines (``loaded ...``, ``training it now``) are ordinary output and go to standard
output, so JupyterLab does not paint them as errors.

A worker process of :mod:`minirlhf.parallel` calls :func:`silence`: it shows nothing, and the
process that handed it the runs shows their progress instead.
"""

from __future__ import annotations

import sys
import time

__all__ = ["progress_bar", "status", "in_notebook", "silence"]

_SILENT = False  # set by silence()


def in_notebook() -> bool:
    """Return True inside a Jupyter kernel (JupyterLab, nbclient, nbval)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return getattr(shell, "kernel", None) is not None


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


class _OneLine(_Silent):
    """Counts silently and prints ``desc: n/total steps in s (postfix)`` once, at the end."""

    def __init__(self, total: int, desc: str, stream):
        self.total, self.desc, self.stream = total, desc, stream
        self.n, self.postfix, self.start = 0, "", time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        seconds = time.perf_counter() - self.start
        tail = f" ({self.postfix})" if self.postfix else ""
        print(f"{self.desc}: {self.n}/{self.total} steps in {seconds:.1f} s{tail}", file=self.stream, flush=True)


class _EachLine(_OneLine):
    """Prints ``desc: n/total (postfix)`` at every update: for a few long steps, in a log."""

    def update(self, n: int = 1) -> None:
        super().update(n)
        tail = f" ({self.postfix})" if self.postfix else ""
        print(f"{self.desc}: {self.n}/{self.total}{tail}", file=self.stream, flush=True)

    def close(self) -> None:
        pass


def silence() -> None:
    """Show no bar and no status line in this process from now on, whatever the caller asks
    (a worker process, whose runs' progress the calling process shows)."""
    global _SILENT
    _SILENT = True


def progress_bar(total: int, desc: str, enabled: bool = True, stream=None, each_line: bool = False):
    """Return a bar over ``total`` steps with ``update``, ``set_postfix_str`` and ``close``.

    ``enabled=False`` gives a silent stand-in. Otherwise the form follows ``stream``
    (standard error by default): see the module's docstring. ``each_line`` is for a few long
    steps: in a log, a line per step (set the postfix before ``update``), not one at the end.
    """
    if not enabled or _SILENT:
        return _Silent()
    stream = stream or sys.stderr
    if in_notebook():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False)
    if getattr(stream, "isatty", lambda: False)():
        from tqdm import tqdm

        return tqdm(
            total=total,
            desc=desc,
            leave=False,
            file=stream,
            ncols=72,
            bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}",
        )
    return (_EachLine if each_line else _OneLine)(total, desc, stream)


def status(message: str, enabled: bool = True) -> None:
    """Print a one-line status ``message`` on standard output when ``enabled``."""
    if enabled and not _SILENT:
        print(message, flush=True)
