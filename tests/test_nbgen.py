"""The learner's notebooks and the solutions come from one source per chapter, and stay so."""

import json

import nbformat
import pytest

from minirlhf.course import nbgen
from minirlhf.course.exercises import EXERCISES

SOURCES = nbgen.sources()


def _cells(nb):
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", [])), c.metadata.get("mystnb"))
            for c in nb.cells]


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


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_learner_notebook_hides_every_solution(source):
    text = source.read_text(encoding="utf-8")
    learner = json.dumps(nbformat.read(nbgen.LEARNER_DIR / f"{source.stem}.ipynb", as_version=4).cells)
    inside = False
    for line in text.splitlines():
        if line.strip() == "# BEGIN SOLUTION":
            inside = True
        elif line.strip() == "# END SOLUTION":
            inside = False
        elif inside and len(line.strip()) > 25:
            assert json.dumps(line.strip())[1:-1] not in learner, f"solution line leaks: {line.strip()!r}"


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
        for i, case in enumerate(ex.cases, 1):
            got = ex.reference(**case.kwargs)
            problem = ex.expect.problem(got, case.expected)
            assert problem is None, f"{name} case {i} ({case.why}): {problem}"


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
    assert learner.cells[1].source == 'def f(x):\n    """Doc."""\n    ' + nbgen.PLACEHOLDER
    assert "y = x + 1" in solution.cells[1].source and "BEGIN" not in solution.cells[1].source
    assert "hide-input" in solution.cells[1].metadata["tags"]
    assert "hide-input" not in learner.cells[1].metadata["tags"]
    assert solution.cells[1].metadata["mystnb"]["code_prompt_show"] == "Show the solution"
    assert "mystnb" not in learner.cells[1].metadata
    assert learner.cells[2].source.count("<details") == len(EXERCISES["kl_penalty"].hints)


@pytest.mark.parametrize("bad, message", [
    ("# %% [markdown]\nnot quoted\n", "not starting with '# '"),
    ("# %% [table]\n", "unknown cell kind"),
    ("x = 1\n# %%\n", "before the first"),
])
def test_parse_rejects_malformed_sources(bad, message):
    with pytest.raises(ValueError, match=message):
        nbgen.parse(bad)


@pytest.mark.parametrize("bad, message", [
    ("    # BEGIN SOLUTION\n    x = 1\n", "without END"),
    ("    # END SOLUTION\n", "without BEGIN"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "nested"),
])
def test_strip_rejects_unbalanced_markers(bad, message):
    with pytest.raises(ValueError, match=message):
        nbgen.strip_solutions(bad)
