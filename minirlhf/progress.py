"""Progress of long runs, shown in the form that suits where the output goes.

The caller decides *whether* to show progress (every training function takes ``progress``);
this module decides *how*:

* standard error is a terminal: a text bar that redraws itself in place;
* inside a Jupyter kernel: a widget bar (``tqdm.auto``);
* anything else (a log file, CI): one line per stage when it ends, never the hundreds of
  carriage-return refreshes a bar would write into a file.

Status lines (``loaded ...``, ``training it now``) are ordinary output and go to standard
output, so JupyterLab does not paint them as errors.
"""

from __future__ import annotations

import sys
import time

__all__ = ["progress_bar", "status", "in_notebook"]


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


def progress_bar(total: int, desc: str, enabled: bool = True, stream=None):
    """Return a bar over ``total`` steps with ``update``, ``set_postfix_str`` and ``close``.

    ``enabled=False`` gives a silent stand-in. Otherwise the form follows ``stream``
    (standard error by default): see the module's docstring.
    """
    if not enabled:
        return _Silent()
    stream = stream or sys.stderr
    if in_notebook():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False)
    if getattr(stream, "isatty", lambda: False)():
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, leave=False, file=stream, ncols=72,
                    bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}")
    return _OneLine(total, desc, stream)


def status(message: str, enabled: bool = True) -> None:
    """Print a one-line status ``message`` on standard output when ``enabled``."""
    if enabled:
        print(message, flush=True)
