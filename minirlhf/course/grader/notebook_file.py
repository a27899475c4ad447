"""The notebook file's safety: the grader reads a learner's notebook, never writes it, and keeps
what it graded when the file changes meanwhile.

:func:`_read_notebook` reads a notebook into memory, at most :data:`MAX_NOTEBOOK_BYTES` of it,
and says in one line what is wrong with a file that is not a notebook (a folder, a pipe, not
JSON, no cells, ...), suggesting the notebook meant when the path is wrong. After grading,
:func:`_check_file` compares the file with what was read: a deleted file is written back, and of
a changed one the version graded is kept in ``kept/`` (:func:`_keep_copy`), never beside the
notebook. A kept copy is never graded (:func:`is_kept_copy`).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tempfile
import time
from pathlib import Path

from ...paths import open_regular
from ...safe_text import shorten

MAX_NOTEBOOK_BYTES = 100_000_000  # a notebook file larger than this is not read


def _json_kind(data) -> str:
    return {
        list: "a list",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "true or false",
        type(None): "null",
    }.get(type(data), type(data).__name__)


def _read_notebook(path: Path):
    """Return (notebook, the file's bytes, "") or (None, None, what is wrong, in words)."""
    import nbformat

    if path.is_dir():
        return None, None, f"{path} is a folder, not a notebook file"
    if not path.exists():
        return None, None, f"no notebook at {path}" + _did_you_mean(path)
    if not path.is_file():  # a pipe would block the read, a device would never end
        return None, None, f"{path} is not a regular file (a pipe, a socket or a device?), so not a notebook"
    try:
        raw = _read_capped(path)
        if raw is None:
            return None, None, _too_large(path)
    except OSError as exc:
        return None, None, f"{path} could not be read ({exc.strerror or type(exc).__name__})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, None, f"{path} is not a notebook: it is not text (a notebook is JSON in UTF-8)"
    if not text.strip():
        return None, None, f"{path} is empty (0 cells, 0 bytes of JSON): not a notebook yet"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, None, f"{path} is not a notebook: it is not valid JSON ({shorten(str(exc), 100)})"
    if not isinstance(data, dict):
        return (
            None,
            None,
            (
                f"{path} is not a notebook: it holds {_json_kind(data)}, and a notebook is a "
                "JSON object with a list of cells"
            ),
        )
    try:
        nb = nbformat.reads(text, as_version=4)  # a copy in memory; the file is never written
        for cell in nb.cells:  # what the runner relies on
            if not isinstance(cell.get("source"), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
                raise ValueError("a cell without its type or source")
    except Exception as exc:
        return (
            None,
            None,
            (f"{path} is not a notebook Jupyter can read ({type(exc).__name__}: {shorten(str(exc), 120)})"),
        )
    return nb, raw, ""


def _read_capped(path: Path) -> bytes | None:
    """Return the bytes of the regular file ``path``, or None when it holds more than
    MAX_NOTEBOOK_BYTES (never read further, whatever the file grows to). Raises OSError."""
    file = open_regular(path)
    if file is None:
        raise FileNotFoundError(2, "no such file", str(path))
    with file:
        raw = file.read(MAX_NOTEBOOK_BYTES + 1)
    return None if len(raw) > MAX_NOTEBOOK_BYTES else raw


def _too_large(path: Path) -> str:
    return f"{path} is larger than any notebook the grader reads ({MAX_NOTEBOOK_BYTES / 1e6:,.0f} MB)"


def _check_file(path: Path, raw: bytes) -> str:
    """Compare the notebook file with the bytes read before grading; if it is gone or changed,
    keep the version graded and say where (empty when the file is as it was). The file is read
    only up to MAX_NOTEBOOK_BYTES: one that grew beyond that counts as changed."""
    try:
        now = _read_capped(path) if path.is_file() else None
        if now is None and path.is_file():  # grown past the cap: keep what was graded first
            return (
                f"the notebook file grew larger than any notebook the grader reads "
                f"({MAX_NOTEBOOK_BYTES / 1e6:,.0f} MB) while it was graded; the version graded is kept "
                f"in {_keep_copy(path, raw)}"
            )
    except OSError:
        now = None
    if now == raw:
        return ""
    if now is None and not path.exists() and not path.is_symlink():
        try:
            with open(path, "xb") as f:  # only where nothing is: never replaces anything
                f.write(raw)
            return (
                "the notebook file was deleted while it was graded (by its own code?); the grader "
                "wrote back the version it read"
            )
        except OSError:
            pass
        what = "was deleted"
    else:
        what = "changed"
    return (
        f"the notebook file {what} while it was graded (by its own code, or saved from an editor "
        f"meanwhile); the version graded is kept in {_keep_copy(path, raw)}"
    )


def _keep_copy(path: Path, raw: bytes) -> Path:
    """Write ``raw`` to a new file in the kept copies' folder (``paths.KEPT``; never the folder
    graded from), or else in the system's temporary folder, and return it."""
    from ...paths import KEPT

    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        KEPT.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    for k in range(100):
        candidate = KEPT / f"{path.stem}.graded-{stamp}{'' if k == 0 else f'-{k}'}.ipynb"
        try:
            with open(candidate, "xb") as f:
                f.write(raw)
            return candidate
        except FileExistsError:
            continue
        except OSError:
            break
    fd, name = tempfile.mkstemp(prefix=f"{path.stem}.graded-", suffix=".ipynb")
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return Path(name)


def is_kept_copy(path: Path) -> bool:
    """True for a copy a command kept of a learner's notebook (``NAME.graded*.ipynb``,
    ``NAME.backup*.ipynb``, or anything in ``paths.KEPT``): never graded."""
    from ...paths import KEPT

    if re.search(r"\.(graded|backup)(-[^.]*)?\.ipynb$", Path(path).name):
        return True
    try:
        return Path(path).resolve().is_relative_to(KEPT.resolve())
    except (OSError, ValueError):
        return False


def _did_you_mean(path: Path) -> str:
    """Suggest the notebook meant: a close name, or the one with the same chapter number."""
    folder = path.parent
    if not folder.is_dir():
        return f" (the folder {folder} does not exist either)"
    found = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and p.name != path.name)
    close = difflib.get_close_matches(path.stem, [p.stem for p in found], n=1, cutoff=0.75)
    prefix = re.match(r"\d+_", path.name)
    same_chapter = [p for p in found if prefix and p.name.startswith(prefix[0])]
    if close:
        return f": did you mean {folder / (close[0] + '.ipynb')}?"
    if len(same_chapter) == 1:
        return f": did you mean {same_chapter[0]}?"
    return f" (notebooks in {folder}: {', '.join(p.name for p in found) or 'none'})"
