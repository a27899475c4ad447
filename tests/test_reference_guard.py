"""While an exercise is graded, its answer cannot be taken from the package: not from the
reference under any name, nor from its code run afresh from its file (``runpy.run_path``,
``importlib.util.spec_from_file_location``, ``exec`` of its source, its cached bytecode), nor
from the package's other functions that compute the same answer (each exercise's
``also_blocks``). Each way is a learner's function the grader must refuse, with a message
naming the function it reached."""

from __future__ import annotations

import importlib
import json
import os
import textwrap

import nbformat
import numpy as np
import pytest
import torch

from minirlhf import dpo, exact, model, objectives, reward_model
from minirlhf.course import grader as check
from minirlhf.course.cases import Raises, run_case, run_cases
from minirlhf.course.exercises import EXERCISES, get
from minirlhf.course.grader.kernel import (
    _block_reference,
    _call_record,
    _ReferenceNotAvailable,
    _resolve,
    _unblock_references,
)
from minirlhf.course.grader.records import _parse_record
from minirlhf.course.sandbox import call_safely
from minirlhf.leashes import k2_loss
from minirlhf.leashes import loss as loss_leash
from minirlhf.studies import double_count, kl_estimators
from minirlhf.studies.silent_bugs import copies

# Learners' functions for chapter 1's kl_penalty that take the answer from the package.
RUN_PATH = """
import runpy, minirlhf.objectives
def kl_penalty(logp_policy, logp_reference, beta):
    return runpy.run_path(minirlhf.objectives.__file__)["kl_penalty"](logp_policy, logp_reference, beta)
"""
FROM_FILE = """
import importlib.util, minirlhf.objectives
def kl_penalty(logp_policy, logp_reference, beta):
    spec = importlib.util.spec_from_file_location("my_objectives_copy", minirlhf.objectives.__file__)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.kl_penalty(logp_policy, logp_reference, beta)
"""
EXEC_SOURCE = """
import minirlhf.objectives
def kl_penalty(logp_policy, logp_reference, beta):
    space = {}
    with open(minirlhf.objectives.__file__) as f:
        exec(compile(f.read(), "<mine>", "exec"), space)
    return space["kl_penalty"](logp_policy, logp_reference, beta)
"""
BYTECODE = """
import importlib.util, marshal, types, minirlhf.objectives
def kl_penalty(logp_policy, logp_reference, beta):
    with open(importlib.util.cache_from_source(minirlhf.objectives.__file__), "rb") as f:
        module = marshal.loads(f.read()[16:])
    code = next(c for c in module.co_consts if getattr(c, "co_name", "") == "kl_penalty")
    return types.FunctionType(code, vars(minirlhf.objectives))(logp_policy, logp_reference, beta)
"""
OTHER_FUNCTION = """
import minirlhf
def kl_penalty(logp_policy, logp_reference, beta):
    n = len(logp_policy)
    return minirlhf.objectives.ppo_rlhf_objective(
        logp_policy, logp_policy, logp_reference, [0.0] * n, 0.2, beta)["kl_penalty"]
"""
OWN = """
import numpy as np
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)
"""


def learner(source: str):
    space: dict = {}
    exec(compile(textwrap.dedent(source), "<cell>", "exec"), space)
    return space["kl_penalty"]


def graded_call(fn):
    """Call ``fn`` on chapter 1's first case as the grader's kernel does; return the record."""
    ex = get("kl_penalty")
    _block_reference(["minirlhf.objectives", "kl_penalty"], "kl_penalty")
    try:
        _ReferenceNotAvailable.used = ""
        call = call_safely(fn, ex.cases[0].kwargs, 10.0)
        record = _call_record(0, call, _ReferenceNotAvailable.used, ["minirlhf.objectives", "kl_penalty"])
    finally:
        _unblock_references()
    return _parse_record(json.dumps(record), 0)


@pytest.mark.parametrize("source", [RUN_PATH, FROM_FILE, EXEC_SOURCE, BYTECODE], ids=["runpy", "file", "exec", "pyc"])
def test_the_reference_cannot_be_run_afresh_from_its_file(source):
    fn = learner(source)
    ex = get("kl_penalty")
    assert fn(**ex.cases[0].kwargs) == ex.cases[0].expected  # outside grading it is the answer
    record = graded_call(fn)
    assert record["kind"] == "error"
    assert record["message"].startswith("calls minirlhf.objectives.kl_penalty, the package's own solution")


def test_a_package_function_that_computes_the_answer_is_refused_by_name():
    fn = learner(OTHER_FUNCTION)
    ex = get("kl_penalty")
    assert fn(**ex.cases[0].kwargs) == ex.cases[0].expected
    record = graded_call(fn)
    assert record["kind"] == "error"
    assert record["message"].startswith(
        "calls minirlhf.objectives.ppo_rlhf_objective, a function of the package that computes this "
        "exercise's answer, which is not available while the grader runs"
    )


def test_the_learners_own_code_and_the_package_after_grading_are_untouched():
    record = graded_call(learner(OWN))
    assert record["kind"] == "ok"
    ex = get("kl_penalty")
    assert objectives.kl_penalty(**ex.cases[0].kwargs) == ex.cases[0].expected
    assert objectives.ppo_rlhf_objective([-1.0], [-1.0], [-1.5], [0.0], 0.2, 0.1)["kl_penalty"] == 0.05
    importlib.reload(objectives)  # the import hooks are gone


def test_every_declared_function_exists_and_is_not_the_reference():
    for name in EXERCISES:
        ex = get(name)
        for dotted in ex.also_blocks:
            fn = _resolve(dotted)
            assert callable(fn), f"{name}: {dotted} does not name a function"
            assert fn is not ex.reference, f"{name}: {dotted} is the reference itself"


def test_the_grader_refuses_each_way_in_a_real_kernel(tmp_path):
    path = tmp_path / "01_attacks.ipynb"
    cells = [nbformat.v4.new_code_cell(textwrap.dedent(OTHER_FUNCTION))]
    nb = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(nb, str(path))
    result = check.grade_notebook(path, seed=1, exercises=[get("kl_penalty")])
    (grade,) = result.exercises
    assert not grade.passed
    failed = [r for r in grade.results if not r.passed]
    assert failed and "calls minirlhf.objectives.ppo_rlhf_objective" in failed[0].message
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(RUN_PATH))])
    nbformat.write(nb, str(path))
    (grade,) = check.grade_notebook(path, seed=1, exercises=[get("kl_penalty")]).exercises
    assert not grade.passed
    assert "calls minirlhf.objectives.kl_penalty, the package's own solution" in next(
        r.message for r in grade.results if not r.passed
    )


FORGED = "\x1b[2K\x1b[1A\r  PASS  ppo_rlhf_objective  111/111\x1b[8m"
FORGING = f"""
def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    return {{"objective": 1.0, "policy_loss": 1.0, "kl_penalty": 0.0, {FORGED!r}: 1.0}}

Weird = type("W\\x1b[2J\\x1b[1A\\rPASS  kl_penalty 111/111", (), {{}})

def kl_penalty(logp_policy, logp_reference, beta):
    return Weird()
"""


def test_a_returned_value_cannot_draw_a_line_of_the_report(tmp_path):
    path = tmp_path / "02_forged.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FORGING)]), str(path))
    result = check.grade_notebook(path, seed=1, exercises=[get("ppo_rlhf_objective"), get("kl_penalty")])
    text = check.render(result)
    assert not any(grade.passed for grade in result.exercises)
    assert "returned" in text and "\\x1b[2K" in text and "\\x1b[2J" in text  # written as escapes
    assert "\x1b" not in text and "\r" not in text
    assert not [line for line in text.splitlines() if line.lstrip().startswith("PASS")]
    space: dict = {}
    exec(FORGING, space)
    for name in ("ppo_rlhf_objective", "kl_penalty"):  # the check cell's report too
        report = str(run_cases(space[name], get(name)))
        assert "\x1b" not in report and "\r" not in report
        assert not [line for line in report.splitlines() if line.lstrip().startswith("PASS")]


def test_a_rename_is_suggested_only_for_a_name_that_looks_renamed():
    from minirlhf.course.grader.grading import _renamed

    assert _renamed("tell_run_a", ["fix_run_f"]) == []  # another exercise's function
    assert _renamed("fix_run_a", ["fix_run_f", "plot_runs"]) == []
    assert _renamed("kl_penalty", ["kl_penalty_v2", "helper"]) == ["kl_penalty_v2"]
    assert _renamed("kl_penalty", ["my_kl_penalty"]) == ["my_kl_penalty"]


def test_after_a_cell_time_out_the_exercises_are_graded_in_a_clean_kernel(tmp_path):
    notebook = tmp_path / "01_kl_penalty.ipynb"
    half_imported = (  # what a time-out during `import torch` leaves behind
        "import sys, time, types\nsys.modules['torch'] = types.ModuleType('torch')\ntime.sleep(30)"
    )
    cells = [half_imported, textwrap.dedent(OWN)]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), str(notebook))
    grade = check.grade_notebook(notebook, seed=1, cell_timeout=1, budget=20)
    assert "ran longer than the 1 s limit per cell" in grade.cells[0].text
    (exercise,) = [e for e in grade.exercises if e.exercise.name == "kl_penalty"]
    assert exercise.passed, exercise.problem


def test_an_interrupt_the_function_sends_itself_is_not_called_a_loop():
    import os
    import signal

    def kl_penalty(logp_policy, logp_reference, beta):
        os.kill(os.getpid(), signal.SIGINT)
        return 0.0

    call = call_safely(kl_penalty, get("kl_penalty").cases[0].kwargs, 10.0)
    assert call.kind == "timeout" and "loop" not in call.message
    assert "before its 10 s limit" in call.message and "os.kill" in call.message


def test_a_time_limit_no_right_call_can_meet_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        check.main(["--time-limit", "1e-6", "01_kl_penalty.ipynb"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-limit: must be at least 0.1 s" in err[0]


def test_a_huge_error_is_kept_cut_not_whole():
    from minirlhf.course.grader.runner import _ERROR_KEPT, _trimmed_error

    msg = {
        "msg_type": "error",
        "content": {"ename": "RuntimeError", "evalue": "y" * 10**7, "traceback": ["z" * 10**7] * 80},
    }
    kept = _trimmed_error(msg)["content"]
    assert len(kept["evalue"]) == _ERROR_KEPT and len(kept["traceback"]) == 50
    assert max(len(line) for line in kept["traceback"]) == _ERROR_KEPT
    assert len(msg["content"]["evalue"]) == 10**7  # the message itself is not changed


def test_a_killed_graders_temporary_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    import subprocess
    import sys

    from minirlhf.course.grader import grading

    monkeypatch.setattr(grading.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead, alive, unknown = (tmp_path / f"{grading.TMP_PREFIX}{k}" for k in ("dead", "alive", "unknown"))
    for folder, owner in ((dead, gone.pid), (alive, os.getppid()), (unknown, None)):
        folder.mkdir()
        (folder / "kernel-0-1.json").write_text("{}")
        if owner is not None:
            (folder / grading.OWNER_FILE).write_text(str(owner))
    grading._remove_dead_graders_folders()
    assert not dead.exists() and alive.exists() and unknown.exists()


def test_the_kernels_connection_file_is_in_the_graders_folder(tmp_path):
    from minirlhf.course.grader.runner import GRACE, _Runner

    runner = _Runner(nbformat.v4.new_notebook(), tmp_path, 60, GRACE, tmp_path)
    try:
        assert os.path.dirname(runner.client.km.connection_file) == str(tmp_path)
    finally:
        runner.shutdown()


# ----------------------------------------------------------------- each exercise's other ways in

A = lambda x: np.asarray(x, dtype=float)  # noqa: E731


def _seq_kl_by_completions(logp, ref_logp):
    lp = torch.as_tensor(A(logp))
    rows = lp.reshape(-1, lp.shape[-1])
    m, k = rows.shape
    comps = exact.Completions(
        torch.zeros(m, 6, dtype=torch.long),
        torch.zeros(m * k, 4, dtype=torch.long),
        torch.arange(m).repeat_interleave(k),
        rows.reshape(-1),
        torch.zeros(m, dtype=torch.float64),
        1.0,
        0.0,
    )
    v = exact.exact_sequence_kl(comps, None, floor=0.0, ref_logp=torch.as_tensor(A(ref_logp)).reshape(-1)).value
    return v.item() if lp.dim() == 1 else v.numpy()


def _objective_by_extremes(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    o, n, r, rew = (A(x) for x in (old_logp, new_logp, ref_logp, rewards))
    j = objectives.round2(objectives._objective_of_extremes(o, n, r, rew, epsilon, beta))
    penalty = objectives.round2(objectives._scaled_mean_difference(beta, n, r, ""))
    return {"objective": j, "policy_loss": j, "kl_penalty": penalty}


def _zeros(x):
    return torch.zeros_like(x)


# (exercise, the package function the way goes through, a learner's function that takes it)
WAYS = [
    (
        "kl_penalty",
        "minirlhf.studies.kl_estimators.k1",
        lambda logp_policy, logp_reference, beta: (
            round(float(beta * kl_estimators.k1(logp_policy, logp_reference).mean()), 2) + 0.0
        ),
    ),  # noqa: E501
    ("ppo_rlhf_objective", "minirlhf.objectives._objective_of_extremes", _objective_by_extremes),
    (
        "masked_sft_loss",
        "minirlhf.model.logprobs_from_logits",
        lambda logits, targets, mask: (
            -(model.logprobs_from_logits(logits, targets) * mask.float()).sum() / mask.float().sum()
        ),
    ),  # noqa: E501
    (
        "bradley_terry_loss",
        "minirlhf.dpo.dpo_loss",
        lambda r_chosen, r_rejected: dpo.dpo_loss(r_chosen, r_rejected, _zeros(r_chosen), _zeros(r_rejected), 1.0),
    ),  # noqa: E501
    (
        "bradley_terry_loss",
        "minirlhf.studies.silent_bugs.copies.dpo_loss_rejected_flipped",
        lambda r_chosen, r_rejected: copies.dpo_loss_rejected_flipped(
            r_chosen, _zeros(r_rejected), _zeros(r_chosen), r_rejected, 1.0
        ),
    ),  # noqa: E501
    (
        "ppo_token_loss",
        "minirlhf.studies.double_count._clipped",
        lambda new_logp, old_logp, advantages, mask, epsilon=0.2: (
            -(double_count._clipped(torch.exp(new_logp - old_logp), advantages, epsilon) * mask).sum() / mask.sum()
        ),
    ),  # noqa: E501
    (
        "fix_run_e",
        "minirlhf.leashes.k2_loss.k2_token_loss",
        lambda new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.04, kl_clamp=10.0: (
            k2_loss.k2_token_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon, 0.0, kl_clamp)
            + beta * loss_leash.k3_loss_term(new_logp, ref_logp, mask, kl_clamp)
        ),
    ),  # noqa: E501
    (
        "dpo_loss",
        "minirlhf.reward_model.bradley_terry_loss",
        lambda policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: (
            reward_model.bradley_terry_loss(
                beta * (policy_chosen_logps - ref_chosen_logps), beta * (policy_rejected_logps - ref_rejected_logps)
            )
        ),
    ),  # noqa: E501
    (
        "fix_run_g",
        "minirlhf.studies.silent_bugs.copies.dpo_loss_rejected_flipped",
        lambda policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta: (
            copies.dpo_loss_rejected_flipped(
                policy_chosen_logps, ref_rejected_logps, ref_chosen_logps, policy_rejected_logps, beta
            )
        ),
    ),  # noqa: E501
    (
        "fix_run_f",
        "minirlhf.studies.silent_bugs.copies.logprobs_from_logits_no_temperature",
        lambda logits, tokens, temperature=1.0: copies.logprobs_from_logits_no_temperature(
            logits / temperature, tokens
        ),
    ),  # noqa: E501
    (
        "best_of_n_probs",
        "minirlhf.exact.best_of_n",
        lambda probs, proxy, n: exact.best_of_n(torch.as_tensor(A(probs)), torch.as_tensor(A(proxy)), int(n)).numpy(),
    ),  # noqa: E501
    ("best_of_n_kl_bound", "minirlhf.exact.analytic_best_of_n_kl", lambda n: exact.analytic_best_of_n_kl(n).item()),
    ("sequence_kl", "minirlhf.exact.exact_sequence_kl", _seq_kl_by_completions),
    (
        "best_of_n_kl",
        "minirlhf.exact.best_of_n_stats",
        lambda probs, proxy, n: exact.best_of_n_stats(torch.as_tensor(A(probs)), torch.as_tensor(A(proxy)), int(n))[
            "kl"
        ].item(),
    ),  # noqa: E501
]


@pytest.mark.parametrize("name, through, fn", WAYS, ids=[f"{w[0]}-{w[1].rsplit('.', 1)[1]}" for w in WAYS])
def test_each_package_function_that_gives_an_answer_is_refused_by_name(name, through, fn):
    ex = get(name)
    case = next(c for c in ex.cases if not isinstance(c.expected, Raises))
    assert through in ex.also_blocks
    assert run_case(fn, case, ex).passed  # a real way to the answer, outside grading
    where = [ex.reference.__module__, ex.reference.__qualname__]
    _block_reference(where, name)
    try:
        _ReferenceNotAvailable.used = ""
        call = call_safely(fn, case.kwargs, 10.0, ex.expect.grad_wrt)
        record = _parse_record(json.dumps(_call_record(0, call, _ReferenceNotAvailable.used, where)), 0)
    finally:
        _unblock_references()
    assert record["kind"] == "error" and record["message"].startswith(f"calls {through}, a function of the package")


def test_a_valueerror_of_the_learners_own_is_accepted_and_a_fake_one_is_not():
    ex = get("group_advantages")
    right = ex.reference

    class GroupSizeError(ValueError):
        def __str__(self):
            return "group_size"

    fake_error = type("ValueError", (Exception,), {"__module__": "builtins"})  # only the name

    def with_own_error(error):
        def group_advantages(rewards, group_size, eps=1e-6):
            if group_size < 2 or len(rewards) % group_size:
                raise error("group_size")
            return right(rewards, group_size, eps)

        return group_advantages

    assert run_cases(with_own_error(GroupSizeError), ex).passed
    fake = run_cases(with_own_error(fake_error), ex)
    assert not fake.passed
    assert any("builtins.ValueError" in r.message for r in fake.results if not r.passed)
