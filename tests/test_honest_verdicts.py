"""A check never passes a wrong function, and never gives the answer away on a first slip.

Every declared slip of every exercise fails the *visible* check, with its own words; a loss is
judged by its gradient as well as its value; the wrong functions the reviews found fail; the
grader's guards hold for the easy bypasses; a message from the learner's code cannot draw lines
of a report; the last hint waits for a second failure of the same kind; a drive cell refuses a
function that cannot drive its run; a worked answer's numbers stay folded on "Run all".
"""

import importlib
import inspect
import json
import types

import numpy as np
import pytest
import torch

import minirlhf.estimators.batch as batch_estimator
import minirlhf.leashes.reward as reward_leash
from minirlhf import objectives
from minirlhf.course import nbgen
from minirlhf.course.answers import MAGIC, Folded
from minirlhf.course.cases import MISTAKES, NO_GRADIENT, Raises, run_cases
from minirlhf.course.drive import YourFunctionStopped, guard, preflight, run_batch
from minirlhf.course.exercises import EXERCISES, check, get
from minirlhf.course.exercises._inputs import RUN_BATCH
from minirlhf.course.expect import ExpectArray
from minirlhf.course.grader.kernel import (
    _block_reference,
    _call_record,
    _NoFreshCopy,
    _ReferenceNotAvailable,
    _unblock_references,
)
from minirlhf.course.grader.records import _judge_record, _parse_record
from minirlhf.course.grader.runner import _error_text
from minirlhf.course.sandbox import call_safely
from minirlhf.safe_text import printable

# The exercises that return a loss (one number); chapter 10's log-probs, a tensor whose sum's
# gradient is judged, have tests of their own below.
LOSSES = sorted(n for n in EXERCISES if EXERCISES[n].expect.grad_wrt and type(EXERCISES[n].expect) is not ExpectArray)


# --------------------------------------------------------------------------- declared slips


def _slip_rows():
    return [(name, i) for name in sorted(EXERCISES) for i in range(len(EXERCISES[name].expect.slips))]


@pytest.mark.parametrize("name, i", _slip_rows(), ids=lambda x: str(x))
def test_every_declared_slip_fails_the_visible_check_in_its_own_words(name, i):
    ex = EXERCISES[name]
    slip = ex.expect.slips[i]
    report = run_cases(slip.fn, ex)
    assert not report.passed, f"{name}: the slip {slip.kind!r} passes the visible check"
    failed = [r for r in report.results if not r.passed]
    said = any(slip.says in r.message for r in failed)
    # a slip whose mistake the comparator itself names (NaN, an infinity) is told in the
    # comparator's words, which say what it is
    named_by_comparator = slip.kind in MISTAKES and any(r.mistake == slip.kind for r in failed)
    assert said or named_by_comparator, f"{name}: the slip {slip.kind!r} fails, but no message names it"


def test_the_losses_are_the_exercises_that_return_a_loss():
    assert set(LOSSES) >= {
        "reinforce_loss",
        "masked_sft_loss",
        "bradley_terry_loss",
        "ppo_token_loss",
        "grpo_token_loss",
        "dpo_loss",
        "fix_run_c",
        "fix_run_e",
        "fix_run_g",
    }


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_reference_passes_every_case_gradient_included(name):
    assert run_cases(EXERCISES[name].reference, EXERCISES[name]).passed


@pytest.mark.parametrize("name", LOSSES)
def test_a_loss_without_a_gradient_fails_every_case_with_the_plain_message(name):
    ex = EXERCISES[name]

    def under_no_grad(**kwargs):
        with torch.no_grad():
            return ex.reference(**kwargs).requires_grad_()

    def rebuilt_from_item(**kwargs):
        return torch.tensor(ex.reference(**kwargs).item(), requires_grad=True)

    for wrong in (under_no_grad, rebuilt_from_item):
        report = run_cases(wrong, ex)
        assert report.n_passed == 0, f"{name}: {wrong.__name__} passes a case"
        assert all(r.mistake == "no-grad" and r.message.startswith(NO_GRADIENT) for r in report.results)
        assert NO_GRADIENT in " ".join(str(report).split())


@pytest.mark.parametrize("name", LOSSES)
def test_a_loss_with_the_right_value_and_a_wrong_gradient_fails(name):
    ex = EXERCISES[name]
    wrt = ex.expect.grad_wrt

    def half_the_gradient(**kwargs):
        # the same value, half the gradient with respect to every input
        loss = ex.reference(**kwargs)
        return 0.5 * loss + 0.5 * loss.detach()

    report = run_cases(half_the_gradient, ex)
    assert not report.passed and any(r.mistake == "grad" for r in report.results), wrt
    assert "the value is right, but the gradient with respect to" in " ".join(str(report).split())


def test_log_probs_with_the_right_values_and_a_wrong_gradient_fail():
    ex = get("fix_run_f")
    assert ex.expect.grad_wrt == ("logits",)

    def half_the_gradient(logits, tokens, temperature=1.0):
        logp = ex.reference(logits, tokens, temperature)
        return 0.5 * logp + 0.5 * logp.detach()

    def detached(logits, tokens, temperature=1.0):
        return ex.reference(logits.detach(), tokens, temperature)

    report = run_cases(half_the_gradient, ex)
    assert not report.passed and any(r.mistake == "grad" for r in report.results)
    report = run_cases(detached, ex)
    assert report.n_passed == 0 and "the run differentiates these log-probs" in " ".join(str(report).split())


def test_a_grpo_loss_whose_k3_term_is_detached_fails_by_name():
    def k3_detached(new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.04, kl_clamp=10.0):
        ratio = torch.exp(new_logp - old_logp)
        surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
        d = (ref_logp - new_logp.detach()).clamp(-kl_clamp, kl_clamp)
        k3 = torch.exp(d) - d - 1
        return (-(surrogate * mask).sum() + beta * (k3 * mask).sum()) / mask.sum()

    report = run_cases(k3_detached, get("grpo_token_loss"))
    assert not report.passed and report.mistake == "k3-detached"
    assert "new_logp.detach()" in " ".join(str(report).split())


# --------------------------------------------------------------------------- the reviews' wrong functions


def test_numpys_rounding_fails_kl_penalty_on_the_contracts_rule():
    def kl_np_round(logp_policy, logp_reference, beta):
        kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
        return float(np.round(beta * kl.mean(), 2))

    report = run_cases(kl_np_round, get("kl_penalty"))
    assert report.n_passed == len(report.results) - 1 and report.mistake == "np-round"
    assert round(0.405, 2) == 0.41 and float(np.round(0.405, 2)) == 0.4  # the rule the contract names


def test_gae_on_int_rewards_with_an_int_output_fails():
    def gae_int(rewards, values, gamma, lam):
        adv = np.zeros_like(np.asarray(rewards))
        values = np.asarray(values, dtype=float)
        rewards = np.asarray(rewards, dtype=float)
        running, next_value = 0.0, 0.0
        for t in reversed(range(rewards.shape[-1])):
            running = rewards[..., t] + gamma * next_value - values[..., t] + gamma * lam * running
            adv[..., t], next_value = running, values[..., t]
        return adv

    report = run_cases(gae_int, get("gae"))
    assert not report.passed and report.results[-1].mistake == "int-output"


def test_a_baseline_of_0_over_0_fails_kl_shaped_advantages_in_the_check_cell():
    def nan_baseline(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
        kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)
        rewards = -beta * kl * mask
        rewards[torch.arange(len(scores)), mask.sum(1).long() - 1] += scores
        returns = rewards.flip(1).cumsum(1).flip(1) * mask
        return (returns - returns.sum(0) / mask.sum(0)) * mask

    report = run_cases(nan_baseline, get("kl_shaped_advantages"))
    assert not report.passed and report.results[-1].mistake == "nan"


def test_prompt_share_that_tests_a_float32_variance_for_zero_fails():
    def by_variance(rewards, group_size):
        total = rewards.var(unbiased=False)
        if total == 0:
            return 0.0
        return float(1 - rewards.view(-1, group_size).var(1, unbiased=False).mean() / total)

    report = run_cases(by_variance, get("prompt_share"))
    assert not report.passed and report.mistake == "all-equal"


@pytest.mark.parametrize("module", [f"ch{n:02d}" for n in (*range(1, 10), 11)])  # chapter 10 has no slip factory
def test_no_slip_factory_can_make_the_reference(module):
    mod = importlib.import_module(f"minirlhf.course.exercises.{module}")
    factories = [
        f
        for n, f in vars(mod).items()
        if n.endswith("slip") and inspect.isfunction(f) and list(inspect.signature(f).parameters) == ["kind"]
    ]
    assert factories, f"{module} has no slip factory"
    for factory in factories:
        with pytest.raises(ValueError, match="no slip called"):
            factory("none")


@pytest.mark.parametrize(
    "name",
    [
        "kl_shaped_advantages",
        "ppo_token_loss",
        "group_advantages",
        "grpo_token_loss",
        "dpo_loss",
        "masked_sft_loss",
        "bradley_terry_loss",
    ],
)
def test_some_randomized_inputs_come_at_the_runs_batch_size(name):
    rng = np.random.default_rng(0)
    sizes = set()
    for _ in range(200):
        kwargs = get(name).random_kwargs(rng)
        sizes.add(next(v.shape[0] for v in kwargs.values() if getattr(v, "shape", None)))
    assert RUN_BATCH in sizes and min(sizes) < 8


# --------------------------------------------------------------------------- raises, messages


def _group_advantages_raising(message, error=ValueError):
    def advantages(rewards, group_size, eps=1e-4):
        if group_size < 2 or len(rewards) % group_size:
            raise error(message)
        return get("group_advantages").reference(rewards, group_size, eps)

    return advantages


def test_a_raises_case_is_judged_on_the_whole_message_in_the_check_cell_and_the_grader():
    ex = get("group_advantages")
    right = _group_advantages_raising("a long preamble " * 50 + "then: group_size does not fit")
    assert run_cases(right, ex).passed
    case = next(c for c in ex.cases if isinstance(c.expected, Raises))
    call = call_safely(right, case.kwargs, 10.0, mentions=case.expected.mentions)
    record = _parse_record(json.dumps(_call_record(0, call)), 0)
    assert len(record["message"]) <= 600 and _judge_record(record, case, ex).passed
    wrong = call_safely(
        _group_advantages_raising("a long preamble " * 50 + "then: bad size"),
        case.kwargs,
        10.0,
        mentions=case.expected.mentions,
    )
    record = _parse_record(json.dumps(_call_record(0, wrong)), 0)
    assert _judge_record(record, case, ex).mistake == "error-message"


def test_a_class_of_the_notebooks_named_value_error_is_not_pythons():
    ValueError = type("ValueError", (Exception,), {"__module__": "__main__"})  # noqa: N806
    report = run_cases(_group_advantages_raising("group_size is wrong", ValueError), get("group_advantages"))
    raising = [r for r in report.results if isinstance(r.case.expected, Raises)]
    assert raising and all(r.mistake == "wrong-error" and "__main__.ValueError" in r.message for r in raising)


def test_an_exception_whose_str_raises_or_hangs_is_unprintable_and_the_check_does_not_raise():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("str failed")

    class Hangs(Exception):
        def __str__(self):
            while True:
                pass

    for error in (Broken, Hangs):

        def kl(logp_policy, logp_reference, beta):
            raise error()

        call = call_safely(kl, get("kl_penalty").cases[0].kwargs, 5.0)
        assert call.kind == "error" and f"<unprintable {error.__module__}.{error.__name__}>" in call.message
    report = check("kl_penalty", kl, show=False)
    assert report.state == "fail"


def test_control_characters_of_a_message_are_escaped_in_both_reports():
    forged = "\x1b[2K\x1b[1A\n  PASS  kl_penalty  111/111\r\nResult: 1 of 1 exercises pass.\u202e"

    def kl(logp_policy, logp_reference, beta):
        raise ValueError(forged)

    text = str(run_cases(kl, get("kl_penalty")))
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert not [line for line in text.splitlines() if line.lstrip().startswith(("PASS", "Result"))]
    record = {
        "index": 0,
        "kind": "error",
        "message": f"raised ValueError: {forged}",
        "n_printed": 0,
        "seconds": 0.1,
        "value": None,
    }
    assert "\n" not in _parse_record(json.dumps(record), 0)["message"]
    assert printable("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"
    assert _error_text({"ename": "ValueError", "evalue": forged, "traceback": []})[0].count("\n") == 0


def test_the_gradient_crosses_from_the_kernel_as_plain_data():
    ex = get("reinforce_loss")
    case = ex.cases[0]

    def leaf(logp, rewards, baseline):
        return torch.tensor(ex.reference(logp, rewards, baseline).item(), requires_grad=True)

    for fn, passed in ((ex.reference, True), (leaf, False)):
        call = call_safely(fn, case.kwargs, 10.0, ex.expect.grad_wrt)
        line = json.dumps(_call_record(0, call))
        record = _parse_record(line, 0)
        assert _judge_record(record, case, ex).passed is passed


# --------------------------------------------------------------------------- the reference's guards


def test_the_reference_is_blocked_in_every_copy_and_its_module_cannot_load_again():
    original = objectives.kl_penalty
    copy = types.FunctionType(original.__code__, original.__globals__, "copy")
    tell = get("tell_run_a").reference
    try:
        _block_reference(["minirlhf.objectives", "kl_penalty"], "kl_penalty")
        for fn in (original, copy):
            with pytest.raises(_ReferenceNotAvailable):
                fn([-1.0], [-1.5], 0.1)
        with pytest.raises(_ReferenceNotAvailable):
            importlib.reload(objectives)
        _block_reference(None, "tell_run_a")  # reached from the registry
        with pytest.raises(_ReferenceNotAvailable):
            tell()
    finally:
        _unblock_references()
    assert original([-1.0], [-1.5], 0.1) == 0.05 and copy([-1.0], [-1.5], 0.1) == 0.05
    assert tell()[0] and not any(isinstance(h, _NoFreshCopy) for h in __import__("sys").meta_path)


# --------------------------------------------------------------------------- hints one at a time


def test_the_nearly_the_answer_hint_waits_for_the_same_failure_twice():
    from minirlhf.course import exercises

    exercises._FAILED.pop("kl_penalty", None)

    def numpy_scalar(logp_policy, logp_reference, beta):
        return np.float64(round(beta * (np.mean(logp_policy) - np.mean(logp_reference)), 2))

    first = check("kl_penalty", numpy_scalar, show=False)
    assert first.mistake == "numpy-scalar" and first.hint()[0] == 3
    text = " ".join(str(first).split())
    assert "Hint 3 of 3:" not in text and "Hint 3 of 3 (nearly the answer) shows here" in text
    second = check("kl_penalty", numpy_scalar, show=False)
    assert "Hint 3 of 3: `penalty = beta * kl.mean()`" in " ".join(str(second).split())
    assert "Hint 3 of 3" in second._repr_html_()
    exercises._FAILED.pop("kl_penalty", None)


# --------------------------------------------------------------------------- drive cells


def test_a_drive_cell_refuses_a_function_that_cannot_drive_the_run():
    assert preflight("ppo_token_loss", reward_leash.ppo_token_loss) == ""

    def leaf(**kwargs):
        return torch.tensor(reward_leash.ppo_token_loss(**kwargs).item(), requires_grad=True)

    def nan_when_large(**kwargs):
        adv = batch_estimator.kl_shaped_advantages(**kwargs)
        return adv * float("nan") if len(adv) > 32 else adv

    assert preflight("ppo_token_loss", leaf).startswith(
        "Your ppo_token_loss is refused before the run: on a batch of 64, the runs' size, your loss has no gradient"
    )
    assert "NaN" in preflight("kl_shaped_advantages", nan_when_large)
    assert tuple(run_batch("grpo_token_loss")["new_logp"].shape) == (64, 4)


def test_a_guarded_function_stops_the_run_with_a_line_naming_it():
    calls = []

    def nan_on_third(**kwargs):
        calls.append(1)
        loss = reward_leash.ppo_token_loss(**kwargs)
        return loss * float("nan") if len(calls) == 3 else loss

    guarded = guard("ppo_token_loss", nan_on_third)
    kwargs = run_batch("ppo_token_loss")
    kwargs["new_logp"] = kwargs["new_logp"].clone().requires_grad_()
    guarded(**kwargs), guarded(**kwargs)
    with pytest.raises(
        YourFunctionStopped,
        match=r"your ppo_token_loss returned NaN or an infinity on call 3 "
        r"of the run \(a batch of 64\)",
    ):
        guarded(**kwargs)


# --------------------------------------------------------------------------- worked answers


def test_a_worked_answers_numbers_are_folded_in_the_learners_notebook():
    cells = nbgen.parse(nbgen.sources(["01"])[0].read_text(encoding="utf-8"))
    learner, solution = nbgen.build(cells, learner=True), nbgen.build(cells, learner=False)
    folded = [c for c in learner.cells if c.cell_type == "code" and c.source.startswith(f"%%{MAGIC}\n")]
    assert len(folded) == 6  # chapter 1's end-of-chapter questions
    assert not any(c.source.startswith("%%") for c in solution.cells if c.cell_type == "code")


def test_the_fold_shows_html_behind_a_dropdown_and_plain_text_in_full():
    bundle = Folded("KL 0.0123\n", [])._repr_mimebundle_()
    assert bundle["text/html"].startswith('<details class="mr-answer"><summary>') and "KL 0.0123" in bundle["text/html"]
    assert bundle["text/plain"] == "KL 0.0123"


def test_the_magic_folds_what_the_cell_prints_while_someone_watches(monkeypatch):
    from IPython.testing.globalipapp import start_ipython

    from minirlhf.course import answers

    shell = start_ipython()
    answers.register()
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(objs))
    for watching in (True, False):
        monkeypatch.setattr(answers, "someone_watching", lambda: watching)
        shown.clear()
        result = shell.run_cell(f"%%{MAGIC}\nprint('KL 0.0123')\nanswer_x = 41 + 1\n")
        assert result.success and shell.user_ns["answer_x"] == 42
        folded = [o for o in shown if isinstance(o, Folded)]
        assert (len(folded) == 1 and folded[0].stdout == "KL 0.0123\n") if watching else not folded
    assert not shell.run_cell(f"%%{MAGIC}\nraise ValueError('inside')\n").success  # a machine sees the error
