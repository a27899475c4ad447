"""The grader (``python -m minirlhf.course.grader``) on deliberately broken and hostile notebooks,
one per kind of failure, and on the book's own learner and solution notebooks.

Kernels are slow to start, so every fixture notebook is graded once, by a module fixture,
and the tests read its verdict. The fixtures are percent-format sources in
``tests/grader_fixtures/`` (the same format as ``chapters/``), turned into notebooks here.
Each declares in its header comment what the grader must say about it:

    # verdict: fail               the exercise's verdict (pass, fail, slow, todo), or "exit N"
    # says: <text>                words the report must contain (as many lines as needed)
    # grade with: --budget 1      options for the grader
    # run: cli                    graded by the command line in a process of its own (for
                                  fixtures that attack the grader's process)
"""

import collections
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from minirlhf import paths
from minirlhf.course import grader as check
from minirlhf.course import nbgen
from minirlhf.course.cases import Case, Exercise
from minirlhf.course.exercises import get
from minirlhf.course.expect import ExpectArray
from minirlhf.course.grader.grading import _after_last_exercise, _where_in_lab
from minirlhf.course.grader.kernel import (
    _BLOCKED,
    _block_reference,
    _call_record,
    _ReferenceNotAvailable,
    _unblock_references,
)
from minirlhf.course.grader.notebook_file import _check_file
from minirlhf.course.grader.records import _RECORD_CAP, _judge_record, _read_records
from minirlhf.course.grader.runner import SLICE, WARM_UP, WARM_UP_TIMEOUT, _call_in_kernel, _Runner
from minirlhf.course.plain import RETURN_CAP, to_plain
from minirlhf.course.sandbox import Call
from minirlhf.paths import ROOT

FIXTURES = Path(__file__).parent / "grader_fixtures"
SOURCES = sorted(FIXTURES.glob("*.py"))
TIME_LIMIT = 0.5  # seconds per call: small, so the looping fixtures cost little
GRACE = 1.0  # seconds a kernel gets to answer an interrupt
WORKERS = 2  # fixtures graded at once (each in its own kernel)
VERDICTS = {"pass", "fail", "slow", "todo"}
OPTIONS = {"--budget": "budget", "--cell-timeout": "cell_timeout", "--time-limit": "time_limit"}

Graded = collections.namedtuple("Graded", "result text seconds status err leftovers")


def header(source: Path) -> dict:
    """Return a fixture's declared verdict, the words its report must hold, and its options."""
    head = {"verdict": "", "says": [], "grade with": [], "run": ""}
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            break
        match = re.match(r"# (verdict|says|grade with|run): (.*)$", line)
        if match:
            key, value = match[1], match[2].strip()
            if key == "says":
                head["says"].append(value)
            elif key == "grade with":
                head["grade with"] += value.split()
            else:
                head[key] = value
    return head


def make_notebook(source: Path, folder: Path, name: str | None = None) -> Path:
    """Write the notebook of a percent-format fixture into ``folder``; return its path."""
    cells = nbgen.parse(source.read_text(encoding="utf-8"), source.name)
    path = folder / (name or f"{source.stem}.ipynb")
    nbformat.write(nbgen.build(cells, learner=False), str(path))
    return path


def grade(path: Path, **kwargs) -> check.NotebookGrade:
    return check.grade_notebook(path, seed=1, **{"time_limit": TIME_LIMIT, "grace": GRACE, **kwargs})


def book_notebooks(folder: str) -> list[str]:
    found = sorted(
        str(p.relative_to(ROOT)) for pattern in ("01_*.ipynb", "02_*.ipynb") for p in (ROOT / folder).glob(pattern)
    )
    assert len(found) == 2, found
    return found


def cli(*args, env=None, **kwargs) -> subprocess.Popen:
    """Start the grader's command line in a session of its own (a fixture that signals its
    process group can never reach the tests)."""
    env = {k: v for k, v in (env or os.environ).items() if k != "NO_COLOR"}
    return subprocess.Popen(
        [sys.executable, "-m", "minirlhf.course.grader", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


@pytest.fixture(scope="module")
def book_runs(tmp_path_factory) -> dict:
    """The grader CLI on the solution notebooks and on copies of the learner's, started in the
    background at once (they run while the fixtures are graded): name -> Popen."""
    copies = tmp_path_factory.mktemp("learner")
    learner = [str(shutil.copy(ROOT / p, copies)) for p in book_notebooks("notebooks")]
    runs = {name: cli(*paths) for name, paths in (("solutions", book_notebooks("solutions")), ("notebooks", learner))}
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
    """Every fixture graded once: name -> Graded(grade or None, report, seconds, exit status,
    standard error, files left in the temporary and runtime folders)."""
    folder = tmp_path_factory.mktemp("fixtures")
    saved = {k: os.environ.get(k) for k in ("GRADER_FIXTURE_FOLDER", "GRADER_FIXTURE_MARKER")}
    os.environ.update(GRADER_FIXTURE_FOLDER=str(folder), GRADER_FIXTURE_MARKER=str(folder / "unpickled"))
    try:
        in_process, runs = [], {}
        for source in SOURCES:
            head, path = header(source), make_notebook(source, folder)
            if head["run"] != "cli":
                in_process.append((source.stem, path, head))
                continue
            scratch = {name: tmp_path_factory.mktemp(f"{source.stem}-{name}") for name in ("tmp", "runtime")}
            env = dict(os.environ, TMPDIR=str(scratch["tmp"]), JUPYTER_RUNTIME_DIR=str(scratch["runtime"]))
            runs[source.stem] = (
                cli(str(path), "--seed", "1", "--time-limit", str(TIME_LIMIT), *head["grade with"], env=env),
                scratch,
                time.perf_counter(),
            )

        def one(item):
            stem, path, head = item
            options = dict(zip(head["grade with"][::2], head["grade with"][1::2]))
            start = time.perf_counter()
            result = grade(path, **{OPTIONS[k]: float(v) for k, v in options.items()})
            return stem, Graded(
                result, check.render(result), time.perf_counter() - start, check.exit_status([result]), "", []
            )

        with ThreadPoolExecutor(WORKERS) as pool:
            out = dict(pool.map(one, in_process))
        for stem, (run, scratch, start) in runs.items():
            stdout, stderr = run.communicate(timeout=300)
            left = sorted(str(p.relative_to(d)) for d in scratch.values() for p in d.rglob("*"))
            out[stem] = Graded(None, stdout + stderr, time.perf_counter() - start, run.returncode, stderr, left)
        return out
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def only_exercise(graded, name) -> tuple[check.ExerciseGrade, str]:
    """Return the grade of the exercise the fixture writes (the one its check cell names; a
    chapter may have other exercises, which the fixture leaves undone)."""
    result, text = graded[name].result, graded[name].text
    assert not result.error, result.error
    checked = re.findall(r'check\("(\w+)"', (FIXTURES / f"{name}.py").read_text(encoding="utf-8"))
    mine = [e for e in result.exercises if e.exercise.name in checked] or list(result.exercises)
    (exercise,) = mine
    return exercise, text


def first_failure(exercise: check.ExerciseGrade):
    return next(r for r in exercise.results if not r.passed)


# --------------------------------------------------------------------------- every fixture's verdict


def test_every_fixture_declares_its_verdict_and_what_the_report_says():
    assert len(SOURCES) >= 25
    for source in SOURCES:
        head = header(source)
        assert head["verdict"] in VERDICTS or re.fullmatch(r"exit \d+", head["verdict"]), source.name
        assert head["says"], f"{source.name} declares no words its report must hold"
        assert head["run"] in ("", "cli"), source.name
        assert all(k in OPTIONS for k in head["grade with"][::2]), source.name


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_each_fixture_gets_its_verdict(graded, source):
    head, got = header(source), graded[source.stem]
    if head["verdict"].startswith("exit "):
        assert got.status == int(head["verdict"].split()[1]), got.text
    else:
        exercise, _ = only_exercise(graded, source.stem)
        assert exercise.state == head["verdict"], got.text
        assert got.status == (0 if head["verdict"] == "pass" else 1)
    for words in head["says"]:
        assert words in got.text, f"{words!r} not in:\n{got.text}"
    assert "\x1b[" not in got.text  # plain text unless color is asked for


# --------------------------------------------------------------------------- failure kinds


def test_syntax_error_names_the_cell_and_line(graded):
    exercise, text = only_exercise(graded, "01_syntax_error")
    cell = graded["01_syntax_error"].result.cells[0]
    assert (cell.number, cell.line) == (2, 3) and cell.text.startswith("SyntaxError")
    assert "code cell 2, line 3: SyntaxError" in text
    assert "| return round(float(beta * kl.mean(), 2)" in text
    assert "kl_penalty  not defined, because code cell 2 failed (above)" in text
    assert exercise.state == "fail"


def test_a_cell_that_raises_is_reported_and_the_run_goes_on(graded):
    exercise, text = only_exercise(graded, "01_cell_raises")
    assert "code cell 2, line 2: raised ZeroDivisionError: division by zero" in text
    assert "| average = sum(tokens) / len(tokens)" in text
    assert exercise.passed  # the exercise below the failing cell is still graded


def test_the_analyses_after_the_last_exercise_are_not_run(graded):
    result, text, seconds = graded["01_analysis_after_exercise"][:3]
    assert result.not_run == [4, 5] and not result.cells  # neither the sleep nor the raise ran
    assert result.first_not_run == (4, "time.sleep(60)")
    assert (
        "the last 2 code cells, from cell 4 of the notebook, text cells counted, which starts "
        "`time.sleep(60)`, are not run: they come after the last exercise, and no grade depends "
        "on them"
    ) in text
    assert only_exercise(graded, "01_analysis_after_exercise")[0].passed
    assert seconds < 45  # the minute-long cell did not run


@pytest.mark.parametrize(
    "first, after",
    [
        ("import numpy as np\ncheck('kl_penalty', f)", [1]),  # its check cell
        ("def kl_penalty(a, b, beta):\n    return 0.0", [1]),  # its definition
        ("x = 1", []),  # nothing marks the exercise's cells: every cell runs
    ],
)
def test_which_cells_an_exercise_needs(first, after):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(first), nbformat.v4.new_code_cell("y = 2")])
    assert _after_last_exercise(nb, [get("kl_penalty")]) == after


def test_the_note_on_cells_not_run_names_them_as_jupyterlab_shows_them():
    """JupyterLab numbers no cells: the note counts the text cells too and quotes the first line."""
    new_code, new_text = nbformat.v4.new_code_cell, nbformat.v4.new_markdown_cell
    nb = nbformat.v4.new_notebook(
        cells=[
            new_text("# Chapter"),
            new_code("import numpy as np"),
            new_text("Write it."),
            new_code("def kl_penalty(a, b, beta):\n    return 0.0"),
            new_text("The analyses."),
            new_code("\n# the long run\nrun_everything()"),
            new_code("draw()"),
            new_code("   "),
        ]
    )
    after = _after_last_exercise(nb, [get("kl_penalty")])
    assert after == [5, 6]  # the empty cell is no cell to run
    assert _where_in_lab(nb, after[0]) == (6, "# the long run")
    with pytest.raises(ValueError, match="index must name one of the notebook's 8 cells, got 8"):
        _where_in_lab(nb, 8)
    grade = check.NotebookGrade(Path("03_x.ipynb"), seed=1, not_run=[3, 4], first_not_run=(6, "# the long run"))
    assert (
        "note  the last 2 code cells, from cell 6 of the notebook, text cells counted, which "
        "starts `# the long run`, are not run: they come"
    ) in check.render(grade)
    one = check.NotebookGrade(Path("03_x.ipynb"), seed=1, not_run=[4], first_not_run=(7, "draw()"))
    assert (
        "note  the last code cell (cell 7 of the notebook, text cells counted, which "
        "starts `draw()`) is not run: it comes after the last exercise, and no grade depends on it "
        "(run the notebook to see it)"
    ) in check.render(one)


def test_a_loop_that_never_ends_costs_one_time_limit(graded):
    exercise, text = only_exercise(graded, "01_loops_forever")
    assert f"took longer than {TIME_LIMIT:g} s: is there a loop that never ends?" in text
    assert f"{len(exercise.results) - 1} inputs not run after that" in text
    assert graded["01_loops_forever"].seconds < 15  # one time limit, not one per input


def test_a_loop_that_swallows_every_interrupt_gets_the_kernel_restarted(graded):
    result, text, seconds = graded["01_ignores_interrupt"][:3]
    assert result.restarts == 1 and "ignored the interrupt" in text and "kernel was restarted" in text
    assert seconds < 30


def test_a_function_that_ends_the_kernel(graded):
    result, text, _ = graded["01_kernel_dies"][:3]
    assert result.restarts == 1 and "stopped the kernel" in text
    exercise, _ = only_exercise(graded, "01_kernel_dies")
    assert exercise.n_passed >= 10 and first_failure(exercise).kind == "error" and exercise.state == "fail"


def test_printing_a_lot_passes_with_a_note(graded):
    exercise, text = only_exercise(graded, "01_prints_a_lot")
    assert exercise.passed
    assert re.search(r"note: it printed [\d,]+ characters over 111 calls", text)  # 11 cases, 100 randomized
    assert graded["01_prints_a_lot"].seconds < 30


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
    randomized = exercise.results[exercise.n_cases :]
    assert sum(r.passed for r in visible) == 8 and len(randomized) == 100
    assert 0 < sum(r.passed for r in randomized) < 100  # wrong exactly when the mean is negative
    assert "first failure: second example: the mean is negative, keep the sign" in text
    assert "expected  -1.5" in text and "returned  1.5" in text
    assert "hint 2 of 3: `kl = logp_policy - logp_reference`" in text


# --------------------------------------------------------------------------- hostile code


def test_nothing_from_the_kernel_is_unpickled(graded):
    exercise, text = only_exercise(graded, "01_pickle_trap")
    assert exercise.n_passed == 0
    assert not (graded["01_pickle_trap"].result.path.parent / "unpickled").exists()  # __reduce__ never ran
    assert "returned  <Parcel>" in text and "hint 1 of 3" in text


@pytest.mark.parametrize("name", ["01_wraps_reference", "01_partial_of_reference"])
def test_the_reference_is_not_reachable_while_grading(graded, name):
    exercise, _ = only_exercise(graded, name)
    assert exercise.n_passed == 0 and all("the package's own solution" in r.message for r in exercise.results)


def test_correct_but_slow_is_never_wrong(graded):
    exercise, text = only_exercise(graded, "01_slow_but_right")
    assert exercise.state == "slow" and exercise.stopped == "budget" and exercise.budget == 1
    ran = [r for r in exercise.results if not r.out_of_time]
    assert 2 <= len(ran) <= 5 and all(r.passed for r in ran)
    assert 0.25 < exercise.seconds_per_call < 0.6 and re.search(r"; a call takes 0\.\d+ s\n", text)
    assert f"right on all {len(ran)} inputs that ran" in text and f"{111 - len(ran)} of 111 inputs left" in text
    assert "hint" not in text and "first failure" not in text and "FAIL" not in text


def test_a_result_too_big_is_refused_in_the_kernel(graded):
    exercise, _ = only_exercise(graded, "01_returns_huge")
    assert exercise.n_passed == 0 and graded["01_returns_huge"].seconds < 30
    record = _call_record(0, Call("ok", np.zeros(1_000_000, dtype=np.float32)))
    assert len(json.dumps(record)) < 1000  # the record, not 4 MB of numbers


def test_a_float_subclass_gets_the_verdict_of_the_check_cell(graded):
    from minirlhf.course.cases import run_cases

    exercise, _ = only_exercise(graded, "01_float_subclass")
    namespace = {}
    code = nbgen.parse((FIXTURES / "01_float_subclass.py").read_text(), "fixture")[1]["source"]
    exec(code, namespace)
    in_check_cell = run_cases(namespace["kl_penalty"], get("kl_penalty")).results[0]
    assert in_check_cell.message == exercise.results[0].message
    assert in_check_cell.message.startswith("returned a Agreeable, which cannot be graded (a subclass of float")


def test_the_notebook_file_is_out_of_reach_or_its_change_reported(graded):
    result, text = graded["01_clobbers_notebook"][:2]
    path = result.path
    kept = Path(re.search(r"the version graded is kept in (\S+\.ipynb)", text)[1])
    assert kept.parent == paths.KEPT != path.parent and kept.name.startswith("01_clobbers_notebook.graded-")
    assert path.read_text() == "{}" and kept.exists()  # overwritten by an absolute path: reported, kept
    assert nbformat.reads(kept.read_text(), as_version=4).cells  # the version graded, whole
    assert f"the version graded is kept in {kept}" in text
    assert "code cell 2, line 1: raised FileNotFoundError" in text  # the relative path reached nothing


def test_a_function_that_signals_the_grader_leaves_nothing_behind(graded):
    got = graded["01_kills_grader"]
    assert got.status == 143 and got.leftovers == []  # no temporary files, no kernel connection file
    assert "the notebook's kernel was shut down and the temporary files removed" in got.err.lower()
    assert "Traceback" not in got.err


def test_a_cell_time_out_leaves_no_stray_tracebacks(graded):
    got = graded["01_cell_runs_too_long"]
    assert got.status == 0 and "PASS  kl_penalty" in got.text
    assert "Task exception was never retrieved" not in got.err and "Traceback" not in got.err
    assert len(got.err.strip().splitlines()) == 1  # only "grading ... ..."


def test_input_and_keyboard_interrupt_are_named(graded):
    exercise, text = only_exercise(graded, "01_calls_input")
    assert exercise.state == "fail" and "not implemented" not in text
    exercise, text = only_exercise(graded, "01_raises_keyboard_interrupt")
    assert first_failure(exercise).kind == "error" and "loop that never ends" not in text
    assert graded["01_raises_keyboard_interrupt"].result.restarts == 0


def test_the_kernel_runs_in_a_session_of_its_own_in_an_empty_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    runner = _Runner(nbformat.v4.new_notebook(), work, 60, GRACE, tmp_path)
    try:
        code = (
            f"os = __import__('os')\nassert os.getsid(0) != {os.getsid(0)}, 'the same session'\n"
            f"assert os.getcwd() == {str(work)!r} and os.listdir() == [], os.getcwd()\n"
            f"assert os.environ['TMPDIR'] == {str(tmp_path)!r}"
        )
        assert runner.run_code(code, 60) == "ok" and runner.error_of(runner.scratch) == ""
    finally:
        runner.shutdown()


def test_blocking_the_reference_reaches_every_alias_and_is_undone():
    import functools

    import minirlhf
    from minirlhf import objectives

    alias = functools.partial(minirlhf.kl_penalty)
    try:
        _block_reference(["minirlhf.objectives", "kl_penalty"])
        for fn in (objectives.kl_penalty, minirlhf.kl_penalty, alias):
            with pytest.raises(_ReferenceNotAvailable):
                fn([-1.0], [-2.0], 0.5)
    finally:
        _unblock_references()
    assert alias([-1.0], [-2.0], 0.5) == 0.5 and _BLOCKED == {}
    _block_reference(["minirlhf.no_such_module", "f"])  # nothing to block: no error
    assert _BLOCKED == {}


# --------------------------------------------------------------------------- what comes back from the kernel


def record_line(**changes) -> str:
    record = {"index": 0, "kind": "ok", "message": "", "n_printed": 0, "seconds": 0.01, "value": 0.05}
    return json.dumps({**record, **changes}) + "\n"


@pytest.mark.parametrize(
    "line, words",
    [
        ("not json\n", "arrived malformed from the kernel (not JSON)"),
        ("[1, 2]\n", "(not a record)"),
        (record_line(index=3), "(a field out of place)"),
        (record_line(kind="passed"), "(a field out of place)"),
        (record_line(extra=1), "(unexpected fields)"),
        (record_line(seconds=-1), "(a field out of place)"),
        ('{"index": 0, "kind": "ok", "message": "", "n_printed": 0, "seconds": NaN, "value": 1}\n', "(not JSON)"),
        (record_line(value={"pickle": "gASV"}), "returned a value, which cannot be graded (its data arrived malformed"),
        (record_line(value=[1e400]), "(not JSON)"),  # json writes Infinity, which is not JSON
        (
            record_line(value={"tensor": "float32", "shape": [3], "data": [1.0], "requires_grad": False}),
            "the data do not fill the shape",
        ),
        (record_line(value=to_plain(object())), "returned a object, which cannot be graded"),
        ("x" * (_RECORD_CAP + 10) + "\n", "(far too long)"),
    ],
)
def test_what_arrives_from_the_kernel_is_checked(tmp_path, line, words):
    path = tmp_path / "out.jsonl"
    path.write_text(line + '{"done": true, "reason": "all"}\n')
    (record, done) = _read_records(path, 5)
    assert done == {"done": True, "reason": "all"}
    result = _judge_record(record, get("kl_penalty").cases[0], get("kl_penalty"))
    assert not result.passed and words in result.message, result.message


def test_a_record_cut_short_is_left_out_and_a_right_one_passes(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text(record_line() + record_line(index=1)[:20])
    (record,) = _read_records(path, 5)
    assert _judge_record(record, get("kl_penalty").cases[0], get("kl_penalty")).passed


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seed", "-1"], "argument --seed: must be a whole number >= 0, got -1"),
        (["--seed", "1.5"], "argument --seed: expected a whole number"),
        (["--time-limit", "-1"], "argument --time-limit: must be a number of seconds above 0"),
        (["--time-limit", "0"], "argument --time-limit: must be a number of seconds above 0"),
        (["--time-limit", "nan"], "argument --time-limit: must be a number of seconds above 0"),
        (["--time-limit", "inf"], "argument --time-limit: must be a number of seconds above 0"),
        (["--time-limit", "1e9"], "at most 3600"),
        (["--cell-timeout", "0"], "argument --cell-timeout: must be a number of seconds above 0"),
        (["--cell-timeout", "-5"], "argument --cell-timeout: must be a number of seconds above 0"),
        (["--cell-timeout", "nan"], "argument --cell-timeout: must be a number of seconds above 0"),
        (["--budget", "0"], "argument --budget: must be a number of seconds above 0"),
        (["--budget", "soon"], "argument --budget: expected a number of seconds"),
    ],
)
def test_bad_options_get_one_line_and_exit_2_before_anything_runs(argv, words, capsys, tmp_path):
    missing = str(tmp_path / "01_kl_penalty.ipynb")  # never looked at: the options come first
    with pytest.raises(SystemExit) as exit_info:
        check.main([missing, *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert "grading" not in err


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(seed=-1),
        dict(time_limit=0),
        dict(time_limit=float("nan")),
        dict(cell_timeout=-5),
        dict(budget=float("inf")),
        dict(seed=True),
    ],
)
def test_grade_notebook_checks_its_options_too(kwargs, tmp_path):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        check.grade_notebook(tmp_path / "01_x.ipynb", **kwargs)


def test_the_budget_and_the_limits_are_documented():
    text = subprocess.run(
        [sys.executable, "-m", "minirlhf.course.grader", "--help"], capture_output=True, text=True, cwd=ROOT
    ).stdout
    flat = " ".join(text.split())
    assert "--budget" in flat and f"(default {check.BUDGET:g})" in flat and "SLOW" in flat
    assert f"at most {RETURN_CAP:,} numbers" in flat and "--time-limit" in flat
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for words in (
        "--budget",
        f"{check.BUDGET:g} s",
        f"{RETURN_CAP:,} numbers",
        "10 s per call",
        "SLOW",
        "--cell-timeout",
        "unpickled in the grader",
        "143",
    ):
        assert words in readme, words


# --------------------------------------------------------------------------- paths and files


def test_missing_or_renamed_notebook_path(tmp_path, capsys):
    assert check.main([str(tmp_path / "01_kl_penalty.ipynb")]) == 2
    assert f"ERROR no notebook at {tmp_path / '01_kl_penalty.ipynb'}" in capsys.readouterr().out
    make_notebook(FIXTURES / "01_partly_wrong.py", tmp_path, "01_kl_penalty.ipynb")
    assert check.main([str(tmp_path / "01_kl_penality.ipynb")]) == 2
    assert f"did you mean {tmp_path / '01_kl_penalty.ipynb'}?" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, words",
    [
        ("{ not json", "is not a notebook: it is not valid JSON"),
        ("[]", "is not a notebook: it holds a list, and a notebook is a JSON object with a list of cells"),
        ('"cells"', "it holds a string"),
        ("", "is empty (0 cells, 0 bytes of JSON): not a notebook yet"),
        (b"\xff\xfe\x00", "is not a notebook: it is not text"),
        ('{"cells": 3}', "is not a notebook Jupyter can read"),
        (
            json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
            "has no code cells, so there is nothing to grade",
        ),
    ],
)
def test_a_file_that_is_not_a_notebook_says_so_in_words(tmp_path, content, words):
    bad = tmp_path / "01_kl_penalty.ipynb"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = check.grade_notebook(bad)
    assert words in result.error and check.exit_status([result]) == 2, result.error
    assert "object has no attribute" not in result.error


def test_a_folder_or_a_pipe_named_like_a_notebook(tmp_path):
    folder = tmp_path / "01_kl_penalty.ipynb"
    folder.mkdir()
    result = check.grade_notebook(folder)
    assert result.error == f"{folder} is a folder, not a notebook file"
    fifo = tmp_path / "01_pipe.ipynb"
    os.mkfifo(fifo)
    start = time.perf_counter()
    assert "is not a regular file" in check.grade_notebook(fifo).error and time.perf_counter() - start < 5
    near = check.grade_notebook(tmp_path / "01_kl_penalti.ipynb").error  # a folder is never suggested
    assert near.startswith("no notebook at") and "did you mean" not in near, near


def test_a_deleted_notebook_is_written_back_and_a_changed_one_kept(tmp_path):
    path = tmp_path / "01_x.ipynb"
    assert _check_file(path, b"original").startswith("the notebook file was deleted while it was graded")
    assert path.read_bytes() == b"original"
    assert _check_file(path, b"original") == ""
    path.write_bytes(b"changed")
    message = _check_file(path, b"original")
    kept = Path(message.rsplit(" ", 1)[1])
    assert message.endswith(f"the version graded is kept in {kept}") and kept.read_bytes() == b"original"
    assert kept.parent == paths.KEPT and kept.name.startswith("01_x.graded-")  # never beside the notebook
    assert path.read_bytes() == b"changed"  # a change is never undone: it may be the learner's edit
    again = Path(_check_file(path, b"original").rsplit(" ", 1)[1])
    assert again != kept and again.parent == paths.KEPT and kept.read_bytes() == b"original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01_x.ipynb"]


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
    run = subprocess.run(
        [sys.executable, "-m", "minirlhf.course.grader", str(path), "--seed", "3", "--color", "always"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
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
    name="softmax_rows",
    chapter=99,
    title="Softmax over the last axis",
    expect=ExpectArray(atol=1e-6, container="torch"),
    cases=(Case({"logits": torch.zeros(1, 2)}, torch.full((1, 2), 0.5), "two equal logits"),),
    hints=("exp", "divide by the row sum", "`e / e.sum(dim=-1, keepdim=True)`"),
    reference=softmax_rows,
    random_kwargs=lambda rng: {"logits": torch.from_numpy(rng.normal(size=(2, 3)))},
    n_random=20,
)


def test_exercises_with_tensor_inputs_are_graded_in_the_learners_kernel(tmp_path):
    path = tmp_path / "torch_exercises.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import torch\n\n"
            "def softmax_rows(logits):\n    e = logits.detach().requires_grad_(True).exp()  # a result with a grad_fn\n"
            "    return e / e.sum(dim=-1, keepdim=True)\n\n"
            "def softmax_in_place(logits):\n    logits.exp_()\n    return logits / logits.sum(dim=-1, keepdim=True)"
        )
    ]
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


@pytest.mark.parametrize(
    "message, starts",
    [
        ("Kernel died before replying to kernel_info", 2),  # lost a race for a port: start again
        ("something else went wrong", 1),  # any other failure is reported at once
    ],
)
def test_a_kernel_that_dies_at_start_is_started_again(monkeypatch, tmp_path, message, starts):
    from nbclient import NotebookClient

    real, calls = NotebookClient.start_new_kernel_client, []

    def fails_once(self):
        calls.append(1)
        if len(calls) == 1:
            self._cleanup_kernel()  # what nbclient does when the client cannot connect
            raise RuntimeError(message)
        return real(self)

    monkeypatch.setattr(NotebookClient, "start_new_kernel_client", fails_once)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    if starts == 1:
        with pytest.raises(RuntimeError, match=message):
            _Runner(nb, tmp_path, cell_timeout=30)
        assert len(calls) == 1
        return
    runner = _Runner(nb, tmp_path, cell_timeout=30)
    try:
        assert len(calls) == 2 and runner.execute(0, 30) == "ok"
    finally:
        runner.shutdown()


class _FakeRunner:
    """Records what the grader asks a kernel to run; answers with the given statuses."""

    def __init__(self, statuses, cell_timeout=3.0, error=""):
        self.cell_timeout, self.grace, self.scratch = cell_timeout, 3.0, 0
        self.statuses, self.error, self.ran, self.restarts = list(statuses), error, [], 0

    def run_code(self, code, timeout):
        self.ran.append((code, timeout))
        return self.statuses.pop(0)

    def error_of(self, index):
        return self.error

    def restart(self):
        self.restarts += 1

    def recover(self):
        return True


def test_the_grader_loads_in_the_kernel_before_the_first_timed_call(tmp_path):
    # Under load, importing the grader (and torch) in a fresh kernel can take longer than a
    # call's time limit plus the grace: it is done first, under a limit of its own.
    results = tmp_path / "out.jsonl"
    results.write_text(json.dumps({"done": True, "reason": "all"}) + "\n")
    spec = {"results": str(results), "time_limit": 0.5}
    runner = _FakeRunner(["ok", "ok"])
    records, stuck, ending = _call_in_kernel(runner, spec, 1)
    assert (stuck, ending) == ("", "") and records[-1]["done"]
    (first, first_limit), (second, second_limit) = runner.ran
    assert first == WARM_UP and first_limit == WARM_UP_TIMEOUT
    assert "_kernel_step" in second and second_limit == SLICE + 0.5 + runner.grace
    # a warm-up that fails is said plainly; one that kills the kernel restarts it
    _, stuck, ending = _call_in_kernel(_FakeRunner(["timeout"]), spec, 1)
    assert ending == "error" and "could not load in the kernel" in stuck and "120 s" in stuck
    dead = _FakeRunner(["dead"])
    assert _call_in_kernel(dead, spec, 1)[2] == "dead" and dead.restarts == 1


# --------------------------------------------------------------------------- honest verdicts (issue 28)


def test_a_message_cannot_draw_lines_of_the_report(graded):
    text = graded["01_forges_a_pass"].text
    assert "\x1b" not in text and "\r" not in text
    assert not [line for line in text.splitlines() if line.lstrip().startswith(("PASS", "Result"))]


def test_a_loss_without_a_gradient_fails_in_the_grader_as_in_the_check_cell(graded):
    loss, _ = only_exercise(graded, "02_loss_without_gradient")
    assert loss.n_passed == 0 and {r.mistake for r in loss.results} == {"no-grad"}


def test_a_reloaded_reference_is_not_available(graded):
    exercise, _ = only_exercise(graded, "01_reloads_reference")
    assert exercise.n_passed == 0 and all(r.kind == "error" for r in exercise.results)
