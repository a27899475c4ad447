"""Make the learner's notebooks and the executed solutions from one source per chapter.

A chapter's source is ``chapters/NN_name.py`` in the "percent" format that Jupytext, VS Code
and Spyder read as cells::

    # %% [markdown]
    # Prose, each line behind "# ".

    # %% tags=["solution"]
    def kl_penalty(logp_policy, logp_reference, beta):
        # BEGIN SOLUTION
        ...
        # END SOLUTION

    # %% [hints] kl_penalty

From it come two notebooks:

* ``notebooks/NN_name.ipynb``, the learner's: every ``BEGIN SOLUTION ... END SOLUTION``
  block becomes ``raise NotImplementedError``, and there are no outputs;
* ``solutions/NN_name.ipynb``: the complete code, executed, outputs recorded. Solution cells
  carry the ``hide-input`` tag, so the book shows them only when the reader asks.

A ``[hints] name`` cell becomes a markdown cell of collapsible hints taken from the
exercise registry (:mod:`minirlhf.course.exercises`), one ``<details>`` block per hint, so the
hints live in one place and the grader can quote them too.

``notebooks/`` is also where the learner works (``make lab``), so the generator never
overwrites a learner's edits: each learner notebook it writes records a fingerprint of its
cells (``metadata.minirlhf.blank``), and a notebook whose cells no longer match that
fingerprint, nor the blank about to be written, holds the learner's work. It is left as it
is, the line says so, and the exit status is 1 (the solutions are still written). With
``--force`` it is replaced, after a copy is kept in ``kept/`` (``paths.KEPT``) under a name
with the date and time: ``kept/01_kl_penalty.backup-20261203-164000.ipynb`` (copied in
chunks, so a notebook of any size; refused in one line when that disk has no room for it).

Run ``python -m minirlhf.course.nbgen`` (or ``make notebooks``) after editing a source.
After editing only its prose, ``python -m minirlhf.course.nbgen 05 --prose-only`` rewrites the
chapter's notebooks and keeps the recorded outputs, without executing it; it refuses when a
code cell changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

from .. import cli, paths
from ..paths import ROOT, write_atomic
from . import answers
from .frontend import BOOK_BUILD_ENV, RECORDING_ENV

SOURCES = ROOT / "chapters"
LEARNER_DIR = ROOT / "notebooks"
SOLUTION_DIR = ROOT / "solutions"

_HEADER = re.compile(r"^# %%(?P<rest>.*)$")
_KIND = re.compile(r"^\s*\[(?P<kind>\w+)\]\s*(?P<arg>[\w.]*)")
_TAGS = re.compile(r"tags\s*=\s*(\[[^\]]*\])")
_BEGIN, _END = "# BEGIN SOLUTION", "# END SOLUTION"
PLACEHOLDER = 'raise NotImplementedError("your code here")'
MAX_NOTEBOOK_BYTES = 100_000_000  # a learner notebook larger than this is not read, and not replaced
# The book's toggle over a solution cell says what it hides (myst-nb's cell-level setting).
SOLUTION_PROMPTS = {"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
# The metadata JupyterLab writes when it opens a notebook on ipykernel: with it already there, a
# freshly opened notebook shows no unsaved changes (Lab compares the kernel's own description).
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict:
    """Return the ``language_info`` ipykernel reports for the Python that runs this."""
    return {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": platform.python_version(),
    }


def parse(text: str, origin: str = "<source>") -> list[dict]:
    """Split a percent-format source into cells: dicts with kind, source, tags and arg."""
    cells: list[dict] = []
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _HEADER.match(line)
        if match:
            rest = match["rest"]
            kind_match = _KIND.match(rest)
            kind = kind_match["kind"] if kind_match else "code"
            if kind not in ("markdown", "hints", "code"):
                raise ValueError(f"{origin}:{number}: unknown cell kind [{kind}]")
            tags_match = _TAGS.search(rest)
            tags = json.loads(tags_match.group(1)) if tags_match else []
            current = {
                "kind": kind,
                "lines": [],
                "tags": tags,
                "arg": kind_match["arg"] if kind_match else "",
                "line": number,
            }
            cells.append(current)
        elif current is None:
            if line.strip() and not line.startswith("#"):
                raise ValueError(f"{origin}:{number}: code before the first '# %%' cell marker")
        else:
            current["lines"].append(line)
    for cell in cells:
        lines = cell.pop("lines")
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if cell["kind"] == "markdown":
            lines = [_unquote(text, origin, cell["line"]) for text in lines]
        cell["source"] = "\n".join(lines)
    return cells


def _unquote(line: str, origin: str, number: int) -> str:
    if line == "#":
        return ""
    if line.startswith("# "):
        return line[2:]
    raise ValueError(f"{origin}: markdown cell at line {number} has a line not starting with '# ': {line!r}")


def strip_solutions(source: str) -> str:
    """Replace each BEGIN/END SOLUTION block by a NotImplementedError at its indentation."""
    out, inside, indent = [], False, ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == _BEGIN:
            if inside:
                raise ValueError("nested BEGIN SOLUTION")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            out.append(indent + PLACEHOLDER)
        elif stripped == _END:
            if not inside:
                raise ValueError("END SOLUTION without BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def drop_markers(source: str) -> str:
    return "\n".join(text for text in source.splitlines() if text.strip() not in (_BEGIN, _END))


def hints_markdown(name: str) -> str:
    """Return the collapsible hints of exercise ``name`` as markdown with <details> blocks."""
    from .exercises import get

    hints = get(name).hints
    blocks = []
    for i, hint in enumerate(hints, 1):
        label = f"Hint {i} of {len(hints)}" + (" (nearly the answer)" if i == len(hints) else "")
        blocks.append(f'<details class="hint">\n<summary>{label}</summary>\n\n{_md_escape(hint)}\n\n</details>')
    return "\n\n".join(blocks)


def _md_escape(text: str) -> str:
    """Hints are markdown (code in backticks); a bare '<' would start an HTML tag."""
    return text.replace("<", "&lt;") if "`" not in text else text


def _answers_numbers(cells: list[dict], number: int) -> bool:
    """True when cell ``number`` prints the numbers of the worked answer just above it: a hidden
    code cell right after a markdown cell holding a worked answer's dropdown. In the learner's
    notebook such a cell starts with ``%%worked_answer``, which folds its output on "Run all"."""
    cell = cells[number]
    before = cells[number - 1] if number else None
    return (
        cell["kind"] == "code"
        and "hide-input" in cell["tags"]
        and before is not None
        and before["kind"] == "markdown"
        and 'class="answer"' in before["source"]
    )


def build(cells: list[dict], learner: bool) -> nbformat.NotebookNode:
    """Return the learner's notebook (``learner=True``) or the solution notebook, unexecuted."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = language_info()
    for number, cell in enumerate(cells):
        tags = list(cell["tags"])
        if cell["kind"] == "markdown":
            new = nbformat.v4.new_markdown_cell(cell["source"])
        elif cell["kind"] == "hints":
            new = nbformat.v4.new_markdown_cell(hints_markdown(cell["arg"]))
            tags.append("hints")
        else:
            has_solution = _BEGIN in cell["source"]
            if learner:
                source = strip_solutions(cell["source"])
                if _answers_numbers(cells, number):
                    source = f"%%{answers.MAGIC}\n{source}"
                tags = [t for t in tags if t != "hide-input"]
            else:
                source = drop_markers(cell["source"])
                if has_solution and "hide-input" not in tags:
                    tags.append("hide-input")
            new = nbformat.v4.new_code_cell(source)
            if has_solution and not learner:
                new.metadata["mystnb"] = dict(SOLUTION_PROMPTS)
        if tags:
            new.metadata["tags"] = tags
        if cell["kind"] == "hints" and not learner and nb.cells and "mystnb" in nb.cells[-1].metadata:
            # In the book the hints come before the solution's "Show the solution" toggle, so a
            # reader opening the dropdowns in order meets the nudges before the answer.
            nb.cells.insert(len(nb.cells) - 1, new)
            continue
        nb.cells.append(new)
    # Stable cell ids, so regenerating an unchanged source gives an unchanged file.
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"
    if learner:  # what the generator wrote, so that a later run can tell the learner's edits
        nb.metadata["minirlhf"] = {"blank": cells_digest(nb)}
    return nb


def cells_digest(nb) -> str:
    """Return a short digest of a notebook's cells: their kinds and sources, in order (not the
    outputs: running a notebook does not change it)."""
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(json.dumps([cell.get("cell_type"), cell.get("source")]).encode())
    return h.hexdigest()[:16]


def learner_work(path: Path, blank: nbformat.NotebookNode) -> str:
    """Return what of the learner's would be lost if ``blank`` replaced the notebook at
    ``path``, in words, or "" when nothing would (no notebook there, or its cells are those
    the generator wrote, by its fingerprint, or those of ``blank``)."""
    if paths.kind_of(path) != "a regular file":  # nothing there; anything else write_atomic refuses
        return ""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_NOTEBOOK_BYTES + 1)
        if len(raw) > MAX_NOTEBOOK_BYTES:
            return f"it is larger than any notebook the generator reads ({MAX_NOTEBOOK_BYTES / 1e6:,.0f} MB)"
        nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - half saved, or not a notebook: still someone's file
        return f"it is not a notebook the generator can read ({type(exc).__name__}), so it may be your work"
    recorded = nb.metadata.get("minirlhf", {}).get("blank") if isinstance(nb.metadata.get("minirlhf"), dict) else None
    if cells_digest(nb) in (recorded, cells_digest(blank)):
        return ""
    mine, new = nb.cells, blank.cells
    changed = [
        i + 1
        for i in range(max(len(mine), len(new)))
        if i >= len(mine) or i >= len(new) or mine[i].get("source") != new[i].get("source")
    ]
    shown = ", ".join(map(str, changed[:8])) + (", ..." if len(changed) > 8 else "")
    return f"{len(changed)} of its cells differ from the blank notebook (cell{'s' if len(changed) > 1 else ''} {shown})"


def _free_bytes(folder: Path) -> int | None:
    """Return the bytes free on the disk that holds ``folder`` (or its nearest existing
    parent, when it is not made yet); None when that cannot be told."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def keep_backup(path: Path) -> Path:
    """Copy the notebook at ``path`` into ``paths.KEPT`` under a new name with the date and
    time (``NAME.backup-YYYYMMDD-HHMMSS.ipynb``); return the copy's path. The copy is made in
    chunks (a notebook of any size, never whole in memory), and refused in one line, before
    anything is written, when the disk of ``paths.KEPT`` has no room for it."""
    source = paths.open_regular(path)  # never waits on a pipe put there meanwhile
    if source is None:
        raise FileNotFoundError(f"{path} went away before a copy of it could be kept")
    with source:
        size, free = os.fstat(source.fileno()).st_size, _free_bytes(paths.KEPT)
        if free is not None and size > free:
            raise OSError(
                f"cannot keep a copy of {path.name} ({size / 1e6:,.0f} MB) in {paths.KEPT}: only "
                f"{free / 1e6:,.0f} MB free there; move the notebook elsewhere yourself, then run again"
            )
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for k in range(100):
            target = paths.KEPT / f"{path.stem}.backup-{stamp}{'' if k == 0 else f'-{k}'}.ipynb"
            if not target.exists() and not target.is_symlink():
                return write_atomic(target, source)
    raise FileExistsError(f"no free name for a backup of {path.name} in {paths.KEPT}")


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 900) -> nbformat.NotebookNode:
    """Execute ``nb`` in a fresh kernel with ``cwd`` as working directory; raise on error."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    # The kernel records each figure's and slider's book form too (frontend.recording_book_forms).
    env = dict(os.environ, **{RECORDING_ENV: "1"})
    env.pop(BOOK_BUILD_ENV, None)
    client.execute(env=env)
    nb.metadata.pop("widgets", None)  # saved widget state would make the book load a widget manager
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    return nb


def sources(names=None) -> list[Path]:
    found = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    if names:
        found = [p for p in found if any(p.stem.startswith(n) or p.name == n for n in names)]
    return found


def dumps(nb) -> str:
    """Return the text of notebook ``nb`` as the generator writes it (the same bytes for the
    same notebook)."""
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def write(nb, path: Path) -> None:
    write_atomic(path, dumps(nb))


def _same_program(a: str, b: str) -> bool:
    """True when two code cells parse to the same syntax tree: they differ only in comments,
    line breaks or how a string literal is split, so they print the same outputs."""
    import ast

    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError:
        return False


def keep_outputs(solution: nbformat.NotebookNode, recorded_path: Path) -> nbformat.NotebookNode:
    """Return ``solution`` with the outputs of the notebook recorded at ``recorded_path``,
    cell for cell, when only markdown changed since it was executed: every code cell's source
    must be the same, in the same order, or differ only in comments, line breaks and the
    splitting of string literals (the same syntax tree). Raise ValueError naming the first code cell that
    differs (then the chapter must be executed again)."""
    recorded = nbformat.read(recorded_path, as_version=4)
    mine = [c for c in solution.cells if c.cell_type == "code"]
    theirs = [c for c in recorded.cells if c.cell_type == "code"]
    if len(mine) != len(theirs):
        raise ValueError(
            f"{recorded_path.name}: {len(mine)} code cells in the source, {len(theirs)} recorded; execute it again"
        )
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a.source != b.source and not _same_program(a.source, b.source):
            raise ValueError(f"{recorded_path.name}: code cell {i} changed since it was executed; execute it again")
        a.outputs, a.execution_count = b.outputs, b.execution_count
    return solution


def generate(source: Path, run: bool = True, prose_only: bool = False, force: bool = False) -> str:
    """Write the chapter's learner notebook and its solution (executed unless ``run`` is False;
    with ``prose_only``, with the recorded outputs). Return "" or, when the learner notebook
    holds the learner's edits and ``force`` is False, a line saying it was left as it is (the
    solution is written all the same). With ``force`` the edited notebook is replaced after a
    copy is kept (:func:`keep_backup`), and the line says where."""
    cells = parse(source.read_text(encoding="utf-8"), str(source.relative_to(ROOT)))
    LEARNER_DIR.mkdir(exist_ok=True)
    SOLUTION_DIR.mkdir(exist_ok=True)
    solution = build(cells, learner=False)
    if prose_only:  # checked before anything is written
        solution = keep_outputs(solution, SOLUTION_DIR / f"{source.stem}.ipynb")
        run = False
    learner, target, said = build(cells, learner=True), LEARNER_DIR / f"{source.stem}.ipynb", ""
    for path in (target, SOLUTION_DIR / f"{source.stem}.ipynb"):  # before the solution runs for minutes
        problem = paths.file_problem(path)
        if problem:
            raise paths.NotRegularFile(problem)
    work = learner_work(target, learner)
    if work and not force:
        said = (
            f"left {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target} as it is: {work}; "
            f"to replace it by the blank all the same, run `python -m minirlhf.course.nbgen "
            f"{source.stem[:2]} --force` (a copy of it is kept in {paths.KEPT.name}/ first)"
        )
    else:
        if work:
            said = f"replaced {target.name} ({work}); your version is kept in {keep_backup(target)}"
        write(learner, target)
    if run:
        start = time.perf_counter()
        print(f"executing solutions/{source.stem}.ipynb ...", flush=True)
        execute(solution, SOLUTION_DIR)
        print(f"  done in {time.perf_counter() - start:.1f} s", flush=True)
    write(solution, SOLUTION_DIR / f"{source.stem}.ipynb")
    return said


def main(argv=None) -> int:
    parser = cli.Parser(prog="python -m minirlhf.course.nbgen", description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter prefixes such as 01 (default: all)")
    parser.add_argument("--no-execute", action="store_true", help="write the solutions without running them")
    parser.add_argument(
        "--prose-only",
        action="store_true",
        help="after editing only markdown: keep the recorded outputs (refused when code changed)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a learner notebook that holds edits, after keeping a copy in kept/",
    )
    args = parser.parse_args(argv)
    found = sources(args.chapters)
    if not found:
        parser.error(f"no chapter source matches {args.chapters} in {SOURCES}")
    os.environ.pop(BOOK_BUILD_ENV, None)  # solutions record the live (JupyterLab) outputs
    left = 0
    for source in found:
        try:
            said = generate(source, run=not args.no_execute, prose_only=args.prose_only, force=args.force)
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if said:
            print(said, file=sys.stderr, flush=True)
            left += said.startswith("left")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
