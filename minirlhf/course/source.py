"""Show the engine's own source in a notebook, so that the page cannot drift from it.

``Source(ppo.rollout)`` as the last line of a cell displays the function's source as a
Python code block: as Markdown (``text/markdown``), which the book renders with syntax
highlighting and JupyterLab as a plain code block, and as plain text (``text/plain``), the
same lines. Both are read from the package with :func:`inspect.getsource` each time the
cell runs, and nbval compares them with the stored notebook, so a change to the engine shows
up as a failing cell until the notebook is regenerated.
"""

from __future__ import annotations

import inspect
import textwrap

__all__ = ["Source", "source_text"]


def source_text(obj) -> str:
    """Return the source of ``obj`` (a function or class), dedented, without a final newline."""
    return textwrap.dedent(inspect.getsource(obj)).rstrip("\n")


class Source:
    """Display the source of ``obj`` as a Python code block (Markdown) or plain text."""

    def __init__(self, obj):
        self.obj = obj
        self.text = source_text(obj)

    def _repr_markdown_(self) -> str:
        return f"```python\n{self.text}\n```"

    def __repr__(self) -> str:
        return self.text


PAGE_WIDTH = 77  # characters of a code line the book's page and a phone show without scrolling


def shown_in(chapter) -> list:
    """Return the objects whose source the chapter at ``chapter`` (a ``chapters/NN_*.py``
    path) shows with ``Source(...)``, in its order: read from the chapter's own text, with
    its imports, so that no list of them is kept by hand."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(chapter).read_text(encoding="utf-8"))
    namespace: dict = {}
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(body=imports, type_ignores=[]), str(chapter), "exec"), namespace)
    shown = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Source"
            and len(node.args) == 1
        ):
            shown.append((node.lineno, eval(compile(ast.Expression(node.args[0]), str(chapter), "eval"), namespace)))
    return [obj for _, obj in sorted(shown, key=lambda item: item[0])]
