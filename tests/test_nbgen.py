"""The learner's notebooks and the solutions come from one source per chapter, and stay so."""

import json

import nbformat
import pytest

from minirlhf.course import nbgen
from minirlhf.course.cases import run_case
from minirlhf.course.exercises import EXERCISES

SOURCES = nbgen.sources()


def _cells(nb):
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", [])), c.metadata.get("mystnb")) for c in nb.cells]


def _committed(folder, source):
    path = folder / f"{source.stem}.ipynb"
    assert path.exists(), f"{path.name} is missing from {folder.name}/: run `make notebooks`"
    return nbformat.read(path, as_version=4)


def test_there_are_chapter_sources():
    assert SOURCES, "no chapters/NN_*.py sources found"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_learner_notebook_matches_its_source(source):
    cells = nbgen.parse(source.read_text(encoding="utf-8"))
    expected = _cells(nbgen.build(cells, learner=True))
    got = _committed(nbgen.LEARNER_DIR, source)
    assert _cells(got) == expected, f"notebooks/{source.stem}.ipynb drifted from its source: run `make notebooks`"
    assert all(not c.get("outputs") for c in got.cells if c.cell_type == "code"), "learner notebook holds outputs"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_solution_notebook_matches_its_source(source):
    cells = nbgen.parse(source.read_text(encoding="utf-8"))
    expected = _cells(nbgen.build(cells, learner=False))
    got = _committed(nbgen.SOLUTION_DIR, source)
    assert _cells(got) == expected, f"solutions/{source.stem}.ipynb drifted from its source: run `make notebooks`"
    code = [c for c in got.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), f"solutions/{source.stem}.ipynb is not fully executed"
    assert "widgets" not in got.metadata, "saved widget state would make the book fetch a widget manager"


def _solution_lines(source: str) -> tuple[list[str], set[str]]:
    """Return (the stripped lines inside BEGIN/END SOLUTION blocks, the stripped lines outside)."""
    inside, hidden, shown = False, [], set()
    for line in source.splitlines():
        if line.strip() == "# BEGIN SOLUTION":
            inside = True
        elif line.strip() == "# END SOLUTION":
            inside = False
        elif line.strip():
            (hidden.append if inside else shown.add)(line.strip())
    return hidden, shown


def _leaks(source_cells, learner_cells) -> list[str]:
    """Every solution line, however short, that the learner's copy of its cell still holds (a
    line that the cell also shows outside its solution, like a bare `return`, is not a leak),
    and every line longer than 25 characters found anywhere in the learner's notebook."""
    solved = [c["source"] for c in source_cells if c["kind"] == "code" and "# BEGIN SOLUTION" in c["source"]]
    blanked = [c.source for c in learner_cells if c.cell_type == "code" and nbgen.PLACEHOLDER in c.source]
    assert len(solved) == len(blanked), "the learner's notebook has another number of exercise cells"
    everything = json.dumps([c.source for c in learner_cells])
    leaks = []
    for source, learner in zip(solved, blanked):
        hidden, shown = _solution_lines(source)
        kept = {line.strip() for line in learner.splitlines()}
        leaks += [line for line in hidden if line in kept and line not in shown]
        leaks += [line for line in hidden if len(line) > 25 and json.dumps(line)[1:-1] in everything]
    return leaks


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_learner_notebook_hides_every_solution(source):
    cells = nbgen.parse(source.read_text(encoding="utf-8"), source.name)
    learner = nbformat.read(nbgen.LEARNER_DIR / f"{source.stem}.ipynb", as_version=4).cells
    assert _leaks(cells, learner) == [], "solution lines leak into the learner's notebook"


def test_the_hiding_check_catches_a_short_line():
    cells = nbgen.parse(SMALL)
    learner = nbgen.build(cells, learner=True).cells
    assert _leaks(cells, learner) == []
    learner[1].source = learner[1].source.replace(nbgen.PLACEHOLDER, nbgen.PLACEHOLDER + "\n    return y")
    assert _leaks(cells, learner) == ["return y"]  # 8 characters: the old check skipped it


def test_every_exercise_has_hints_and_a_check_cell_in_its_chapter():
    texts = {p.stem: p.read_text(encoding="utf-8") for p in SOURCES}
    for name, ex in EXERCISES.items():
        chapter = [t for stem, t in texts.items() if stem.startswith(f"{ex.chapter:02d}_")]
        assert chapter, f"exercise {name} belongs to chapter {ex.chapter}, which has no source"
        assert f"# %% [hints] {name}" in chapter[0], f"chapter {ex.chapter} shows no hints for {name}"
        assert f'check("{name}"' in chapter[0], f"chapter {ex.chapter} has no check cell for {name}"
        assert len(ex.hints) >= 3, f"{name} needs at least three hints"


def test_every_case_is_reproduced_by_the_reference():
    for name, ex in EXERCISES.items():
        for i, case in enumerate(ex.cases, 1):  # a case may expect a raise: judged as the checker does
            result = run_case(ex.reference, case, ex)
            assert result.passed, f"{name} case {i} ({case.why}): {result.message}"


# ---- the parser and the solution stripper on small, hand-made sources

SMALL = '''# %% [markdown]
# # Title
#
# Text.

# %% tags=["solution"]
def f(x):
    """Doc."""
    # BEGIN SOLUTION
    y = x + 1
    return y
    # END SOLUTION

# %% [hints] kl_penalty

# %%
print(1)
'''


def test_parse_small_source():
    cells = nbgen.parse(SMALL)
    assert [c["kind"] for c in cells] == ["markdown", "code", "hints", "code"]
    assert cells[0]["source"] == "# Title\n\nText."
    assert cells[1]["tags"] == ["solution"]
    assert cells[2]["arg"] == "kl_penalty"


def test_strip_and_keep_solutions():
    cells = nbgen.parse(SMALL)
    learner = nbgen.build(cells, learner=True)
    solution = nbgen.build(cells, learner=False)
    # The learner's notebook: exercise cell, then its hints; the book: hints, then the solution.
    assert learner.cells[1].source == 'def f(x):\n    """Doc."""\n    ' + nbgen.PLACEHOLDER
    assert "y = x + 1" in solution.cells[2].source and "BEGIN" not in solution.cells[2].source
    assert "hide-input" in solution.cells[2].metadata["tags"]
    assert "hide-input" not in learner.cells[1].metadata["tags"]
    assert solution.cells[2].metadata["mystnb"]["code_prompt_show"] == "Show the solution"
    assert "mystnb" not in learner.cells[1].metadata
    assert learner.cells[2].source.count("<details") == len(EXERCISES["kl_penalty"].hints)
    assert solution.cells[1].source == learner.cells[2].source


@pytest.mark.parametrize(
    "bad, message",
    [
        ("# %% [markdown]\nnot quoted\n", "not starting with '# '"),
        ("# %% [table]\n", "unknown cell kind"),
        ("x = 1\n# %%\n", "before the first"),
    ],
)
def test_parse_rejects_malformed_sources(bad, message):
    with pytest.raises(ValueError, match=message):
        nbgen.parse(bad)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("    # BEGIN SOLUTION\n    x = 1\n", "without END"),
        ("    # END SOLUTION\n", "without BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "nested"),
    ],
)
def test_strip_rejects_unbalanced_markers(bad, message):
    with pytest.raises(ValueError, match=message):
        nbgen.strip_solutions(bad)


def test_notebooks_carry_the_metadata_jupyterlab_would_write():
    """Opened in JupyterLab, a generated notebook shows no unsaved changes: its kernelspec and
    language_info are those ipykernel reports (checked by hand in Lab: no dirty marker)."""
    from jupyter_client.kernelspec import KernelSpecManager

    from minirlhf.course import nbgen

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert nbgen.KERNELSPEC["display_name"] == spec.display_name
    for folder in ("notebooks", "solutions"):
        for path in sorted((nbgen.ROOT / folder).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            assert nb.metadata["kernelspec"] == nbgen.KERNELSPEC, path.name
            assert nb.metadata["language_info"] == nbgen.language_info(), path.name


def test_in_the_solutions_the_hints_come_before_the_solution():
    """A reader of the book opening the dropdowns in order meets the hints first; in the
    learner's notebook they stay under the exercise cell they help with."""
    for path in sorted(nbgen.SOURCES.glob("*.py")):
        cells = nbgen.parse(path.read_text(encoding="utf-8"), path.name)
        for learner in (False, True):
            nb = nbgen.build(cells, learner=learner)
            for i, cell in enumerate(nb.cells):
                if "hints" not in cell.metadata.get("tags", []):
                    continue
                neighbour = nb.cells[i - 1] if learner else nb.cells[i + 1]
                assert neighbour.cell_type == "code" and "def " in neighbour.source, (path.name, i)
                if not learner:
                    assert neighbour.metadata.get("mystnb") == nbgen.SOLUTION_PROMPTS


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_recorded_figure_and_slider_carries_the_books_form(source):
    """The book shows the solutions' outputs in their book form (explorer.book_notebook): each
    figure and slider recorded in solutions/ must carry one, or the page would show a bare
    image, or a widget with no kernel behind it."""
    from minirlhf.course.explorer import BOOK_KEY

    nb = _committed(nbgen.SOLUTION_DIR, source)
    bare = [
        i
        for i, cell in enumerate(nb.cells)
        for out in cell.get("outputs", [])
        if ({"image/png", "application/vnd.jupyter.widget-view+json"} & set(out.get("data", {})))
        and BOOK_KEY not in out.get("metadata", {})
    ]
    assert not bare, f"cells {bare} of {source.stem} have a figure without the book's form: run `make notebooks`"


def test_the_generator_records_the_books_forms(tmp_path):
    """nbgen's kernel records the book's forms (frontend.RECORDING_ENV); a learner's does not."""
    from minirlhf.course.explorer import BOOK_KEY

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                "from minirlhf.course.explorer import show_figure\n"
                "fig, ax = plt.subplots(figsize=(3, 2)); ax.plot([0, 1])\n"
                "show_figure(fig, alt='a line')"
            )
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out = nbgen.execute(nb, tmp_path).cells[0].outputs[-1]
    assert out["data"]["text/plain"] == "a line" and BOOK_KEY in out["metadata"]


# ---- `--force` keeps a copy of a notebook of any size (N14)


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """The generator's folders and kept/, in a temporary copy of the layout, with chapter 1's
    blank notebook written there and its path returned."""
    from minirlhf import paths

    for name, attr in (("notebooks", "LEARNER_DIR"), ("solutions", "SOLUTION_DIR")):
        (tmp_path / name).mkdir()
        monkeypatch.setattr(nbgen, attr, tmp_path / name)
    monkeypatch.setattr(paths, "KEPT", tmp_path / "kept")
    assert nbgen.main(["01", "--no-execute"]) == 0
    (target,) = (tmp_path / "notebooks").iterdir()
    return target


def _never_whole(monkeypatch, target):
    """Reading ``target`` whole fails, as it does for a notebook larger than memory."""
    from pathlib import Path

    real = Path.read_bytes

    def read_bytes(self):
        if self == target:
            raise MemoryError("a notebook larger than memory")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)


def test_force_copies_the_notebook_in_chunks_never_whole(layout, monkeypatch, capsys):
    blank = layout.read_bytes()
    work = b"MY WORK " + bytes(range(256)) * 12_000  # about 3 MB: not a notebook, so someone's work
    layout.write_bytes(work)
    _never_whole(monkeypatch, layout)
    assert nbgen.main(["01", "--no-execute", "--force"]) == 0
    (kept,) = (layout.parent.parent / "kept").iterdir()
    with open(kept, "rb") as copy, open(layout, "rb") as now:
        assert copy.read() == work and now.read() == blank
    assert f"your version is kept in {kept}" in capsys.readouterr().err


def test_force_refuses_in_one_line_when_the_copy_has_no_room(layout, monkeypatch, capsys):
    """The reproduction: a sparse 1 TB file, with --force as the "left as it is" line says."""
    import collections
    import os

    for size in (2**40, 2**31):  # 1 TB where the file system allows it
        try:
            os.truncate(layout, size)
            break
        except OSError:
            continue
    _never_whole(monkeypatch, layout)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr("shutil.disk_usage", lambda folder: usage(2 * 10**9, 10**9, 10**9))
    assert nbgen.main(["01", "--no-execute"]) == 1
    assert "larger than any notebook the generator reads" in capsys.readouterr().err
    assert nbgen.main(["01", "--no-execute", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    kept = layout.parent.parent / "kept"
    assert err == (
        f"error: cannot keep a copy of {layout.name} ({size / 1e6:,.0f} MB) in {kept}: only 1,000 MB free "
        "there; move the notebook elsewhere yourself, then run again"
    )
    assert layout.stat().st_size == size and not (kept.exists() and list(kept.iterdir()))
