"""The grader (``python -m minirlhf.course.grader``) on deliberately broken notebooks, one per kind of
failure, and on the book's own learner and solution notebooks.

Kernels are slow to start, so every fixture notebook is graded once, by a module fixture,
and the tests read its verdict. The fixtures are percent-format sources in
``tests/grader_fixtures/`` (the same format as ``chapters/``), turned into notebooks here.
"""

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from minirlhf.course import grader as check, nbgen
from minirlhf.course.cases import Case, Exercise, ExpectArray
from minirlhf.paths import ROOT

FIXTURES = Path(__file__).parent / "grader_fixtures"
TIME_LIMIT = 0.5  # seconds per call: small, so the looping fixtures cost little
GRACE = 1.0  # seconds a kernel gets to answer an interrupt


def make_notebook(source: Path, folder: Path, name: str | None = None) -> Path:
    """Write the notebook of a percent-format fixture into ``folder``; return its path."""
    cells = nbgen.parse(source.read_text(encoding="utf-8"), source.name)
    path = folder / (name or f"{source.stem}.ipynb")
    nbformat.write(nbgen.build(cells, learner=False), str(path))
    return path


def grade(path: Path, **kwargs) -> check.NotebookGrade:
    return check.grade_notebook(path, seed=1, time_limit=TIME_LIMIT, grace=GRACE, **kwargs)


def book_notebooks(folder: str) -> list[str]:
    found = sorted(str(p.relative_to(ROOT)) for pattern in ("01_*.ipynb", "02_*.ipynb")
                   for p in (ROOT / folder).glob(pattern))
    assert len(found) == 2, found
    return found


@pytest.fixture(scope="module")
def book_runs(tmp_path_factory) -> dict:
    """The grader CLI on the solution notebooks and on copies of the learner's, started in the
    background at once (they run while the fixtures are graded): name -> Popen."""
    copies = tmp_path_factory.mktemp("learner")
    learner = [str(shutil.copy(ROOT / p, copies)) for p in book_notebooks("notebooks")]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    runs = {}
    for name, paths in (("solutions", book_notebooks("solutions")), ("notebooks", learner)):
        runs[name] = subprocess.Popen([sys.executable, "-m", "minirlhf.course.grader", *paths], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield runs
    for run in runs.values():
        if run.poll() is None:
            run.kill()
            run.communicate()


def finished(run: subprocess.Popen) -> tuple[int, str, str]:
    out, err = run.communicate(timeout=600)
    return run.returncode, out, err


@pytest.fixture(scope="module")
def graded(tmp_path_factory, book_runs) -> dict:
    """Every fixture graded once: name -> (grade, plain-text report, seconds)."""
    folder = tmp_path_factory.mktemp("fixtures")
    out = {}
    for source in sorted(FIXTURES.glob("*.py")):
        path = make_notebook(source, folder)
        start = time.perf_counter()
        result = grade(path)
        out[source.stem] = (result, check.render(result), time.perf_counter() - start)
    return out


def only_exercise(graded, name) -> tuple[check.ExerciseGrade, str]:
    result, text, _ = graded[name]
    assert not result.error, result.error
    (exercise,) = result.exercises
    return exercise, text


def first_failure(exercise: check.ExerciseGrade):
    return next(r for r in exercise.results if not r.passed)


# --------------------------------------------------------------------------- failure kinds


def test_syntax_error_names_the_cell_and_line(graded):
    exercise, text = only_exercise(graded, "01_syntax_error")
    cell = graded["01_syntax_error"][0].cells[0]
    assert (cell.number, cell.line) == (2, 3) and cell.text.startswith("SyntaxError")
    assert "code cell 2, line 3: SyntaxError" in text
    assert "| return round(float(beta * kl.mean(), 2)" in text
    assert "kl_penalty  not defined, because code cell 2 failed (above)" in text
    assert exercise.state == "fail"


def test_a_cell_that_raises_is_reported_and_the_run_goes_on(graded):
    exercise, text = only_exercise(graded, "01_cell_raises")
    assert "code cell 4, line 2: raised ZeroDivisionError: division by zero" in text
    assert "| average = sum(tokens) / len(tokens)" in text
    assert exercise.passed  # the exercise above the failing cell is still graded


def test_a_loop_that_never_ends_costs_one_time_limit(graded):
    exercise, text = only_exercise(graded, "01_loops_forever")
    assert f"took longer than {TIME_LIMIT:g} s: is there a loop that never ends?" in text
    assert f"{len(exercise.results) - 1} inputs not run after that" in text
    assert graded["01_loops_forever"][2] < 15  # one time limit, not one per input


def test_a_loop_that_swallows_every_interrupt_gets_the_kernel_restarted(graded):
    result, text, seconds = graded["01_ignores_interrupt"]
    assert result.restarts == 1 and "ignored the interrupt" in text and "kernel was restarted" in text
    assert seconds < 30


def test_a_function_that_ends_the_kernel(graded):
    result, text, _ = graded["01_kernel_dies"]
    assert result.restarts == 1 and "stopped the kernel" in text


def test_printing_a_lot_passes_with_a_note(graded):
    exercise, text = only_exercise(graded, "01_prints_a_lot")
    assert exercise.passed
    assert re.search(r"note: it printed [\d,]+ characters over 110 calls", text)
    assert graded["01_prints_a_lot"][2] < 30


def test_numpy_scalar(graded):
    exercise, text = only_exercise(graded, "01_numpy_scalar")
    assert exercise.n_passed == 0
    assert "the result is a NumPy scalar (numpy.float64); the contract asks for a Python float" in text


def test_list_instead_of_float(graded):
    _, text = only_exercise(graded, "01_returns_list")
    assert "returned  [0.05, 0.05]" in text and "the result is a list, expected a Python float" in text


def test_list_instead_of_dict(graded):
    _, text = only_exercise(graded, "02_returns_list")
    assert "the result is a list, expected a dict with keys ['objective', 'policy_loss', 'kl_penalty']" in text


def test_mutating_an_input(graded):
    exercise, text = only_exercise(graded, "01_mutates_input")
    assert first_failure(exercise).kind == "mutated"
    assert "changed its input 'logp_policy' in place: work on a copy" in text


def test_nan(graded):
    exercise, text = only_exercise(graded, "01_returns_nan")
    assert 0 < exercise.n_passed < len(exercise.results)
    assert "returned  nan" in text and "the result is NaN" in text


def test_renamed_function(graded):
    exercise, text = only_exercise(graded, "01_renamed_function")
    assert exercise.problem == "not found: did you rename it? (the notebook defines kl_penalty_v2)"
    assert "FAIL  kl_penalty  not found: did you rename it?" in text


def test_the_package_solution_imported_is_not_a_solution(graded):
    exercise, _ = only_exercise(graded, "01_imports_reference")
    assert not exercise.passed and "imported from the package, not your own function" in exercise.problem


def test_a_partly_wrong_function_shows_the_first_failing_input_and_the_next_hint(graded):
    exercise, text = only_exercise(graded, "01_partly_wrong")
    visible = exercise.results[: exercise.n_cases]
    randomized = exercise.results[exercise.n_cases:]
    assert sum(r.passed for r in visible) == 7 and len(randomized) == 100
    assert 0 < sum(r.passed for r in randomized) < 100  # wrong exactly when the mean is negative
    assert "first failure: second example: the mean is negative, keep the sign" in text
    assert "expected  -1.5" in text and "returned  1.5" in text
    assert "hint 2 of 3: `kl = logp_policy - logp_reference`" in text


@pytest.mark.parametrize("name, passes", [
    ("01_cell_raises", True), ("01_prints_a_lot", True), ("01_syntax_error", False),
    ("01_loops_forever", False), ("01_ignores_interrupt", False), ("01_kernel_dies", False),
    ("01_numpy_scalar", False), ("01_returns_list", False), ("02_returns_list", False),
    ("01_mutates_input", False), ("01_returns_nan", False), ("01_renamed_function", False),
    ("01_imports_reference", False), ("01_partly_wrong", False),
])
def test_verdict_of_each_fixture(graded, name, passes):
    result, text, _ = graded[name]
    assert result.passed is passes and check.exit_status([result]) == (0 if passes else 1)
    assert "\x1b[" not in text  # plain text unless color is asked for


def test_every_fixture_is_graded():
    assert {p.stem for p in FIXTURES.glob("*.py")} == {
        "01_cell_raises", "01_prints_a_lot", "01_syntax_error", "01_loops_forever", "01_ignores_interrupt",
        "01_kernel_dies", "01_numpy_scalar", "01_returns_list", "02_returns_list", "01_mutates_input",
        "01_returns_nan", "01_renamed_function", "01_imports_reference", "01_partly_wrong"}


# --------------------------------------------------------------------------- paths and files


def test_missing_or_renamed_notebook_path(tmp_path, capsys):
    assert check.main([str(tmp_path / "01_kl_penalty.ipynb")]) == 2
    assert f"ERROR no notebook at {tmp_path / '01_kl_penalty.ipynb'}" in capsys.readouterr().out
    make_notebook(FIXTURES / "01_partly_wrong.py", tmp_path, "01_kl_penalty.ipynb")
    assert check.main([str(tmp_path / "01_kl_penality.ipynb")]) == 2
    assert f"did you mean {tmp_path / '01_kl_penalty.ipynb'}?" in capsys.readouterr().out


def test_a_file_that_is_not_a_notebook(tmp_path):
    bad = tmp_path / "01_kl_penalty.ipynb"
    bad.write_text("{ not json", encoding="utf-8")
    result = check.grade_notebook(bad)
    assert "is not a notebook Jupyter can read" in result.error and check.exit_status([result]) == 2


def test_a_chapter_without_exercises_is_not_an_error(tmp_path):
    path = tmp_path / "99_epilogue.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), str(path))
    result = check.grade_notebook(path)
    assert result.note == "chapter 99 has no exercises to grade" and check.exit_status([result]) == 0
    other = tmp_path / "scratch.ipynb"
    shutil.copy(path, other)
    assert "no exercises to grade" in check.grade_notebook(other).error


def test_a_renamed_notebook_is_recognised_by_its_check_cells(tmp_path):
    path = make_notebook(FIXTURES / "01_partly_wrong.py", tmp_path, "my work.ipynb")
    result = grade(path)
    assert [e.exercise.name for e in result.exercises] == ["kl_penalty"]


def test_the_cli_leaves_the_notebook_untouched_and_colors_only_on_request(tmp_path):
    path = make_notebook(FIXTURES / "01_partly_wrong.py", tmp_path)
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    run = subprocess.run([sys.executable, "-m", "minirlhf.course.grader", str(path), "--seed", "3", "--color", "always"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 1, run.stdout + run.stderr
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written beside it
    assert "\x1b[1;31mFAIL\x1b[0m" in run.stdout and "seed 3" in run.stdout
    assert "Result: 0 of 1 exercises pass." in re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)


def test_color_follows_the_terminal_and_no_color(monkeypatch):
    class Stream:
        def __init__(self, tty):
            self.tty = tty

        def isatty(self):
            return self.tty

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert check.use_color(Stream(True)) and not check.use_color(Stream(False))
    assert check.use_color(Stream(False), "always") and not check.use_color(Stream(True), "never")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not check.use_color(Stream(True))


# --------------------------------------------------------------------------- torch exercises


def softmax_rows(logits):
    return torch.softmax(logits, dim=-1)


TORCH_EXERCISE = Exercise(
    name="softmax_rows", chapter=99, title="Softmax over the last axis", expect=ExpectArray(atol=1e-6, kind="torch"),
    cases=(Case({"logits": torch.zeros(1, 2)}, torch.full((1, 2), 0.5), "two equal logits"),),
    hints=("exp", "divide by the row sum", "`e / e.sum(dim=-1, keepdim=True)`"),
    reference=softmax_rows,
    random_kwargs=lambda rng: {"logits": torch.from_numpy(rng.normal(size=(2, 3)))},
    n_random=20,
)


def test_exercises_with_tensor_inputs_are_graded_in_the_learners_kernel(tmp_path):
    path = tmp_path / "torch_exercises.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import torch\n\n"
        "def softmax_rows(logits):\n    e = logits.detach().requires_grad_(True).exp()  # a result with a grad_fn\n"
        "    return e / e.sum(dim=-1, keepdim=True)\n\n"
        "def softmax_in_place(logits):\n    logits.exp_()\n    return logits / logits.sum(dim=-1, keepdim=True)")]
    nbformat.write(nb, str(path))
    in_place = dataclasses.replace(TORCH_EXERCISE, name="softmax_in_place")
    result = grade(path, exercises=[TORCH_EXERCISE, in_place])
    right, wrong = result.exercises
    assert right.passed and len(right.results) == 21
    assert right.results[0].returned.requires_grad  # crossed from the kernel without its graph
    assert "changed its input 'logits' in place" in first_failure(wrong).message


# --------------------------------------------------------------------------- the book's notebooks


def test_the_solution_notebooks_pass(book_runs):
    status, out, err = finished(book_runs["solutions"])
    assert status == 0, out + err
    assert "PASS  kl_penalty" in out and "PASS  ppo_rlhf_objective" in out
    assert "CELL" not in out and "\x1b[" not in out  # not a terminal: plain text
    assert re.search(r"Result: (\d+) of \1 exercises pass\.", out)


def test_the_blank_learner_notebooks_fail_with_not_implemented(book_runs):
    status, out, err = finished(book_runs["notebooks"])
    assert status == 1, out + err
    assert out.count("not implemented yet: write its body in the notebook") >= 2
    assert "Result: 0 of" in out
