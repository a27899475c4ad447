"""Nothing a learner writes is lost: `make notebooks` never overwrites an edited notebook (and
keeps a copy when told to), the grader keeps its copies in kept/, never in the folder it
grades, never grades them, and never reads a notebook past its size cap."""

import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from minirlhf import paths
from minirlhf.course import grader, nbgen
from minirlhf.course.grader.notebook_file import _check_file, _read_notebook

CHAPTER_1 = next(p for p in nbgen.sources() if p.name.startswith("01_"))


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """The generator's and the grader's folders, in a temporary copy of the layout."""
    for name, attr in (("notebooks", "LEARNER_DIR"), ("solutions", "SOLUTION_DIR")):
        (tmp_path / name).mkdir()
        monkeypatch.setattr(nbgen, attr, tmp_path / name)
    monkeypatch.setattr(paths, "KEPT", tmp_path / "kept", raising=False)  # raising: the test runs on older code too
    return tmp_path


def solve(path: Path, extra: str = "") -> str:
    """Write chapter 1's solution into the learner's notebook at ``path``, as a learner would,
    plus a cell with ``extra``; return the notebook's new text."""
    solution = nbgen.build(nbgen.parse(CHAPTER_1.read_text(encoding="utf-8")), learner=False)
    answer = next(c.source for c in solution.cells if c.cell_type == "code" and "def kl_penalty(" in c.source)
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "def kl_penalty(" in c.source)
    cell.source = answer
    if extra:
        nb.cells.append(nbformat.v4.new_markdown_cell(extra))
    text = nbformat.writes(nb)
    path.write_text(text)
    return text


def learner_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ----------------------------------------------------------------------------- make notebooks


def test_the_generator_never_overwrites_an_edited_notebook(layout, capsys):
    assert nbgen.main(["01", "--no-execute"]) == 0
    target = layout / "notebooks" / f"{CHAPTER_1.stem}.ipynb"
    blank = target.read_text()
    assert nbgen.main(["01", "--no-execute"]) == 0 and target.read_text() == blank  # unedited: rewritten
    nb = nbformat.read(target, as_version=4)  # run in JupyterLab: outputs, same cells
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="ran")] if nb.cells[1].cell_type == "code" else []
    nbformat.write(nb, target)
    assert nbgen.main(["01", "--no-execute"]) == 0 and target.read_text() == blank
    edited = solve(target)
    capsys.readouterr()
    assert nbgen.main(["01", "--no-execute"]) == 1
    assert target.read_text() == edited  # D11: the learner's answer is still there
    err = capsys.readouterr().err
    assert "as it is: 1 of its cells differ from the blank notebook" in err and "--force" in err
    assert (layout / "solutions" / f"{CHAPTER_1.stem}.ipynb").exists()  # the solutions are still written
    assert not (layout / "kept").exists()


def test_force_replaces_an_edited_notebook_after_keeping_a_copy(layout, capsys):
    nbgen.main(["01", "--no-execute"])
    target = layout / "notebooks" / f"{CHAPTER_1.stem}.ipynb"
    blank = target.read_text()
    edited = solve(target)
    assert nbgen.main(["01", "--no-execute", "--force"]) == 0
    assert target.read_text() == blank
    kept = list((layout / "kept").iterdir())
    assert len(kept) == 1 and kept[0].read_text() == edited
    assert re.fullmatch(rf"{CHAPTER_1.stem}\.backup-\d{{8}}-\d{{6}}\.ipynb", kept[0].name)
    assert f"your version is kept in {kept[0]}" in capsys.readouterr().err
    solve(target)
    nbgen.main(["01", "--no-execute", "--force"])  # a second backup never replaces the first
    assert len(list((layout / "kept").iterdir())) == 2


def test_a_notebook_without_a_fingerprint_counts_as_blank_only_when_it_is(layout):
    nbgen.main(["01", "--no-execute"])
    target = layout / "notebooks" / f"{CHAPTER_1.stem}.ipynb"
    nb = nbformat.read(target, as_version=4)
    del nb.metadata["minirlhf"]  # as written by an older generator
    nbformat.write(nb, target)
    assert nbgen.main(["01", "--no-execute"]) == 0 and "minirlhf" in nbformat.read(target, as_version=4).metadata
    nbformat.write(nb, target)
    edited = solve(target)
    assert nbgen.main(["01", "--no-execute"]) == 1 and target.read_text() == edited
    target.write_text('{"cells": [')  # half saved: still the learner's file
    assert nbgen.main(["01", "--no-execute"]) == 1 and target.read_text() == '{"cells": ['


def test_a_notebook_too_large_to_read_is_left_as_it_is(layout, monkeypatch, capsys):
    nbgen.main(["01", "--no-execute"])
    target = layout / "notebooks" / f"{CHAPTER_1.stem}.ipynb"
    monkeypatch.setattr(nbgen, "MAX_NOTEBOOK_BYTES", 1_000_000, raising=False)
    os.truncate(target, 50_000_000)  # read only up to the cap, never replaced
    assert nbgen.main(["01", "--no-execute"]) == 1 and target.stat().st_size == 50_000_000
    assert "larger than any notebook the generator reads (1 MB)" in capsys.readouterr().err


def test_the_committed_learner_notebooks_carry_their_fingerprint():
    for source in nbgen.sources():
        nb = nbformat.read(nbgen.LEARNER_DIR / f"{source.stem}.ipynb", as_version=4)
        assert nb.metadata.get("minirlhf", {}).get("blank") == nbgen.cells_digest(nb), (
            f"notebooks/{source.stem}.ipynb: its fingerprint is not that of its cells; run "
            f"`python -m minirlhf.course.nbgen {source.stem[:2]} --prose-only` (keeps the solution's outputs)"
        )


# ----------------------------------------------------------------------------- the grader's copies


def test_the_grader_keeps_its_copies_out_of_the_folder_it_grades(layout):
    notebook = layout / "notebooks" / "01_kl_penalty.ipynb"
    notebook.write_text("saved later")
    problem = _check_file(notebook, b"the version graded")
    kept = Path(re.search(r"the version graded is kept in (\S+\.ipynb)$", problem)[1])
    assert kept.parent == layout / "kept" and kept.read_bytes() == b"the version graded"
    assert learner_files(layout / "notebooks") == ["01_kl_penalty.ipynb"]  # B8: nothing for the glob to match


@pytest.mark.parametrize(
    "name",
    [
        "01_kl_penalty.graded.ipynb",
        "01_kl_penalty.graded-2.ipynb",
        "01_kl_penalty.graded-20261203-164000.ipynb",
        "01_kl_penalty.backup-20261203-164000.ipynb",
    ],
)
def test_the_grader_never_grades_a_kept_copy(layout, name, capsys):
    copy = layout / "notebooks" / name
    copy.write_text(nbformat.writes(nbformat.v4.new_notebook()))
    grade = grader.grade_notebook(copy)  # no kernel is started for it
    assert grade.note.startswith("not graded: a copy kept") and not grade.error and grade.passed
    assert grader.exit_status([grade]) == 0
    assert grader.is_kept_copy(layout / "kept" / "01_anything.ipynb")
    assert not grader.is_kept_copy(layout / "notebooks" / "01_kl_penalty.ipynb")


def test_a_notebook_that_grows_past_the_cap_while_graded_is_kept_first(layout, monkeypatch):
    notebook = layout / "notebooks" / "01_kl_penalty.ipynb"
    raw = nbformat.writes(nbformat.v4.new_notebook()).encode()
    monkeypatch.setattr(grader.notebook_file, "MAX_NOTEBOOK_BYTES", 1_000_000)
    notebook.write_bytes(raw)
    os.truncate(notebook, 50_000_000)  # B7: the notebook's code made it huge (sparse)
    problem = _check_file(notebook, raw)
    assert problem.startswith("the notebook file grew larger than any notebook the grader reads (1 MB)")
    kept = Path(problem.rsplit(" ", 1)[1])
    assert kept.parent == layout / "kept" and kept.read_bytes() == raw
    nb, got, error = _read_notebook(notebook)  # and graded again, it is refused in one line
    assert nb is None and error == f"{notebook} is larger than any notebook the grader reads (1 MB)"


def test_the_reported_cell_limit_is_the_one_used(tmp_path):
    notebook = tmp_path / "01_kl_penalty.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import time\ntime.sleep(30)"),
        nbformat.v4.new_code_cell("def kl_penalty(logp_policy, logp_reference, beta):\n    return 0.0"),
    ]
    notebook.write_text(nbformat.writes(nb))
    grade = grader.grade_notebook(notebook, seed=1, cell_timeout=1e-300, budget=5)
    assert "ran longer than the 1 s limit per cell" in grade.cells[0].text, grade.cells  # D12, not "1e-300 s"


# ----------------------------------------------------------------------------- end to end


def test_a_learners_work_survives_generate_grade_save_and_grade_again(layout, monkeypatch, capsys):
    """A learner solves chapter 1, saves again while it is graded, regenerates the notebooks
    and grades again, in that order and the other: the work stays and the verdict is PASS."""
    notebooks = layout / "notebooks"
    assert nbgen.main(["01", "--no-execute"]) == 0  # the clone's blank notebook
    target = notebooks / f"{CHAPTER_1.stem}.ipynb"
    solve(target)
    assert nbgen.main(["01", "--no-execute"]) == 1  # make notebooks before grading: left as it is

    real, saved = grader.grading._grade_exercise, {}

    def save_meanwhile(*args, **kwargs):  # JupyterLab's autosave while the grader runs
        saved.setdefault("text", solve(target, extra="my notes, saved while graded"))
        return real(*args, **kwargs)

    monkeypatch.setattr(grader.grading, "_grade_exercise", save_meanwhile)
    make_check = sorted(str(p) for p in notebooks.glob("[0-9][0-9]_*.ipynb"))  # the Makefile's list
    assert grader.main([*make_check, "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "PASS  kl_penalty" in out and "the version graded is kept in" in out
    assert target.read_text() == saved["text"]  # the later save is the file, untouched
    assert learner_files(notebooks) == [target.name] and len(list((layout / "kept").iterdir())) == 1

    monkeypatch.setattr(grader.grading, "_grade_exercise", real)
    assert nbgen.main(["01", "--no-execute"]) == 1 and target.read_text() == saved["text"]
    make_check = sorted(str(p) for p in notebooks.glob("[0-9][0-9]_*.ipynb"))
    old_copy = notebooks / f"{CHAPTER_1.stem}.graded.ipynb"  # left by an older grader
    old_copy.write_text(json.dumps(nbformat.v4.new_notebook()))
    assert grader.main([*make_check, str(old_copy), "--seed", "4"]) == 0  # graded: only the learner's
    out = capsys.readouterr().out
    assert "Result: 1 of 1 exercises pass." in out and "not graded: a copy kept" in out
    assert target.read_text() == saved["text"]


def test_the_make_targets_list_the_learners_notebooks_only_and_lab_writes_nothing(tmp_path):
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    (tmp_path / "notebooks").mkdir()
    for name in (
        "01_kl_penalty.ipynb",
        "01_kl_penalty.graded.ipynb",
        "01_kl_penalty.graded-2.ipynb",
        "02_ppo_objective.backup-20261203-164000.ipynb",
        "02_ppo_objective.ipynb",
    ):
        (tmp_path / "notebooks" / name).write_text("{}")
    done = subprocess.run(
        [
            "make",
            "-s",
            "-n",
            "-C",
            str(tmp_path),
            "-f",
            str(paths.ROOT / "Makefile"),
            "STAMP=",
            "check",
            "nbval-notebooks",
            "lab",
            "notebooks",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    check, nbval, lab, generate = done.stdout.strip().splitlines()
    mine = "notebooks/01_kl_penalty.ipynb notebooks/02_ppo_objective.ipynb"
    assert check.endswith(f"-m minirlhf.course.grader {mine}")  # B8: the kept copies are not graded
    assert nbval.endswith(f"-p no:cacheprovider {mine}")
    assert lab.endswith("jupyter lab notebooks/")  # opens the learner's folder, writes nothing
    assert generate.rstrip().endswith("-m minirlhf.course.nbgen")  # never --force unless FORCE=1 is given


def test_the_generator_checks_both_targets_before_it_executes_anything(layout, monkeypatch, capsys):
    monkeypatch.setattr(nbgen, "execute", lambda *a, **k: pytest.fail("the solution was executed"))
    (layout / "solutions" / f"{CHAPTER_1.stem}.ipynb").mkdir()
    assert nbgen.main(["01"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {layout / 'solutions' / CHAPTER_1.stem}.ipynb is a folder, not a file that can be replaced"
    assert not (layout / "notebooks" / f"{CHAPTER_1.stem}.ipynb").exists()  # nothing written either
