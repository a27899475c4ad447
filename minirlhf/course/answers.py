"""Keep a worked answer's numbers folded until the learner opens them.

The end-of-chapter questions each have a worked answer in a dropdown, and under it a cell that
prints the numbers the answer rests on. On "Run all" those numbers would sit in plain view,
under a question the learner has not tried yet. In the learner's notebook such a cell starts
with the cell magic ``%%worked_answer``: while a person watches (JupyterLab), what the cell
prints and shows is gathered and shown folded, in a dropdown to open on purpose. A notebook
run by a machine (nbval, the generator, the grader) runs the cell as it is.

A cell that fails or is interrupted (the stop button) ends in that error as a plain cell does,
so that "Run all" stops there: what it printed is shown unfolded, then its traceback.
"""

from __future__ import annotations

import base64
import html
from contextlib import contextmanager

from .frontend import someone_watching

__all__ = ["MAGIC", "Folded", "register"]

MAGIC = "worked_answer"
SUMMARY = "The numbers of the worked answer (open it once you have your own answer)"


class Folded:
    """What a cell printed and showed, behind a dropdown (as HTML), or plain (as text)."""

    def __init__(self, stdout: str, outputs: list):
        self.stdout, self.outputs = stdout, outputs

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        parts = []
        if self.stdout:
            parts.append(f'<pre style="margin:0.3em 0">{html.escape(self.stdout)}</pre>')
        texts = [self.stdout]
        for output in self.outputs:
            data = getattr(output, "data", {}) or {}
            if "image/png" in data:
                png = data["image/png"]
                png = png if isinstance(png, str) else base64.b64encode(png).decode("ascii")
                alt = html.escape(str(data.get("text/plain", "a figure")))
                parts.append(f'<img src="data:image/png;base64,{png}" alt="{alt}" style="max-width:100%">')
            elif "text/html" in data:
                parts.append(str(data["text/html"]))
            elif "text/plain" in data:
                parts.append(f'<pre style="margin:0.3em 0">{html.escape(str(data["text/plain"]))}</pre>')
            if "text/plain" in data:
                texts.append(str(data["text/plain"]))
        page = f'<details class="mr-answer"><summary>{html.escape(SUMMARY)}</summary>' + "".join(parts) + "</details>"
        return {"text/html": page, "text/plain": "\n".join(t.rstrip("\n") for t in texts if t)}


@contextmanager
def _tracebacks_held(shell):
    """Within the block, the tracebacks ``shell`` shows are kept in the list it yields instead
    (a UsageError's line is dropped: IPython shows it again from the exception), so that the
    magic shows the cell's own error after the cell's output, and only once."""
    held: list = []
    own = {name: shell.__dict__.get(name) for name in ("_showtraceback", "show_usage_error")}  # None: the class's
    shell._showtraceback = lambda etype, evalue, stb: held.append(stb)
    shell.show_usage_error = lambda exc: None
    try:
        yield held
    finally:
        for name, method in own.items():
            if method is None:
                delattr(shell, name)
            else:
                setattr(shell, name, method)


def _raise_as_the_cell_would(error: BaseException, held: list):
    """Raise ``error``, the cell's own, so that the cell that holds the magic ends in it (its
    reply is "error" and "Run all" stops), showing the traceback the cell showed (``held``)."""
    if held:
        lines = [line for stb in held for line in stb]
        if isinstance(error, SyntaxError):  # IPython would show it with the magic's frames, not as the cell did
            stand_in = type(type(error).__name__, (Exception,), {"_render_traceback_": lambda self: lines})
            raise stand_in(str(error)) from None
        try:
            error._render_traceback_ = lambda: lines  # IPython shows these lines for the exception
        except (AttributeError, TypeError):  # an exception that takes no attributes: its traceback from here
            pass
    raise error


def worked_answer(line: str, cell: str):
    """The cell magic: run the cell; while a person watches, show its output folded. An error
    (or an interrupt) in the cell ends the cell in that error, after its output."""
    from IPython import get_ipython
    from IPython.display import display
    from IPython.utils.capture import capture_output

    shell = get_ipython()
    if not someone_watching():  # a machine runs it: as it is, and an error fails the cell
        shell.run_cell(cell, store_history=False).raise_error()
        return None
    with capture_output(stdout=True, stderr=False, display=True) as captured, _tracebacks_held(shell) as held:
        result = shell.run_cell(cell, store_history=False)
    if not result.success:  # nothing to hide in a traceback: the output as it is, then the error
        captured.show()
        _raise_as_the_cell_would(result.error_before_exec or result.error_in_exec, held)
    display(Folded(captured.stdout, captured.outputs))
    return None


def register() -> None:
    """Make ``%%worked_answer`` available in the running IPython, if there is one."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and MAGIC not in shell.magics_manager.magics["cell"]:
        shell.register_magic_function(worked_answer, magic_kind="cell", magic_name=MAGIC)
