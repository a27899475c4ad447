"""Wrong functions that passed the exercises' checks (learner reviews of 2026-12-06, adversarial
retest N1, N20, N23): each fails its visible check now, with a message that names its mistake,
and gets the same verdict from a grader record; and the messages that named another mistake
name the right one."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minirlhf.course.cases import Case, Exercise, Raises, judge, raised, run_cases
from minirlhf.course.exercises import get
from minirlhf.course.exercises._inputs import whole_numbers
from minirlhf.course.expect import ExpectArray, ExpectFloat
from minirlhf.course.grader.kernel import _call_record
from minirlhf.course.grader.records import _judge_record, _parse_record
from minirlhf.course.sandbox import Call, call_safely
from minirlhf.task import SEMI


def _failures(fn, name):
    report = run_cases(fn, get(name))
    assert not report.passed, f"{fn.__name__} passes the check of {name}"
    return [r for r in report.results if not r.passed]


def _said(fn, name, *words):
    """Assert that ``fn`` fails the check of ``name`` and that one failure's message says every word."""
    failed = _failures(fn, name)
    text = [" ".join(r.message.split()) for r in failed]
    assert any(all(w in t for w in words) for t in text), text
    return failed


def _graded(fn, name) -> list:
    """The verdicts a grader gives ``fn`` on the exercise's cases: each call recorded as the
    kernel records it, sent as JSON, read back and judged as the grader judges it."""
    ex = get(name)
    out = []
    for i, case in enumerate(ex.cases):
        call = call_safely(fn, case.kwargs, ex.time_limit, ex.expect.grad_wrt)
        record = _parse_record(json.dumps(_call_record(i, call)), i)
        out.append(_judge_record(record, case, ex))
    return out


# --------------------------------------------------------------------------- N1: fix_run_f's gradient


def _logprobs(logits, tokens, temperature):
    return F.log_softmax(logits / temperature, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def fix_run_f_detached(logits, tokens, temperature=1.0):
    return _logprobs(logits.detach(), tokens, temperature)


def fix_run_f_no_grad(logits, tokens, temperature=1.0):
    with torch.no_grad():
        return _logprobs(logits, tokens, temperature)


def fix_run_f_right(logits, tokens, temperature=1.0):
    return _logprobs(logits, tokens, temperature)


@pytest.mark.parametrize("fn", [fix_run_f_detached, fix_run_f_no_grad])
def test_log_probs_cut_off_from_the_logits_fail_in_the_check_and_the_grader(fn):
    failed = _said(fn, "fix_run_f", "no gradient", "the run differentiates these log-probs")
    assert len(failed) == len(get("fix_run_f").cases) and {r.mistake for r in failed} == {"no-grad"}
    graded = _graded(fn, "fix_run_f")
    assert not any(r.passed for r in graded) and {r.mistake for r in graded} == {"no-grad"}
    assert all(r.passed for r in _graded(fix_run_f_right, "fix_run_f"))


def test_the_grader_draws_log_probs_that_must_carry_a_gradient():
    rng = np.random.default_rng(0)
    for _ in range(20):
        kwargs = get("fix_run_f").random_kwargs(rng)
        assert kwargs["logits"].requires_grad and kwargs["logits"].dtype == torch.float64
    assert all(c.kwargs["logits"].requires_grad for c in get("fix_run_f").cases)


def test_an_in_place_change_of_logits_that_require_a_gradient_is_named_as_one():
    def in_place(logits, tokens, temperature=1.0):
        logits /= temperature
        return _logprobs(logits, tokens, 1.0)

    failed = _said(in_place, "fix_run_f", "changed an input in place", "work on a copy")
    assert failed[0].mistake == "mutated"


# The gradient of a tensor of results (not a loss) is compared through its sum, once the call
# records it: the judging half, on a small exercise of its own.
def _doubled() -> Exercise:
    return Exercise(
        name="doubled",
        chapter=99,
        title="twice the input",
        expect=ExpectArray(container="torch", what="the results", plural=True, grad_wrt=("x",)),
        cases=(Case({"x": torch.tensor([1.0, -2.0], dtype=torch.float64)}, torch.tensor([2.0, -4.0]), "twice"),),
        hints=("a", "b", "c"),
        reference=lambda x: 2 * x,
    )


def test_a_recorded_gradient_of_a_tensor_of_results_is_compared_through_its_sum():
    double = _doubled()
    case, value = double.cases[0], torch.tensor([2.0, -4.0], dtype=torch.float64)
    right = judge(Call("ok", value, grads={"x": torch.full((2,), 2.0)}), case, double.expect, double.reference)
    assert right.passed
    wrong = judge(Call("ok", value, grads={"x": torch.full((2,), 1.0)}), case, double.expect, double.reference)
    assert not wrong.passed and wrong.mistake == "grad"
    assert "the gradient of the sum of the results with respect to x is not" in wrong.message
    none = judge(Call("ok", value, grads={"x": None}), case, double.expect, double.reference)
    assert not none.passed and none.mistake == "no-grad" and none.message.startswith("the results have no gradient")
    # a call that recorded no gradient of a tensor result (as the sandbox records only a loss's)
    assert judge(Call("ok", value, grads=None), case, double.expect, double.reference).passed


def test_a_wrong_gradient_message_names_old_logp_only_where_there_is_one():
    def product_of_means(logp, rewards, baseline):  # right value on one case, wrong gradient
        return -(rewards - baseline).mean() * logp.mean()

    report = run_cases(product_of_means, get("reinforce_loss"))
    texts = [r.message for r in report.results if r.mistake == "grad"]
    assert texts and not any("old_logp" in t for t in texts)


# --------------------------------------------------------------------------- chapter 2


def objective_min_of_means(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    old, new, ref, r = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
    ratio, adv = np.exp(new - old), r - beta * (new - ref)
    J = min(np.mean(ratio * adv), np.mean(np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv))
    penalty = beta * (new - ref).mean()
    return {"objective": round(float(J), 2), "policy_loss": round(float(J), 2), "kl_penalty": round(float(penalty), 2)}


def objective_int_truncated(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    old, new, ref = np.array(old_logp), np.array(new_logp), np.array(ref_logp)
    kl = new - ref
    adv = np.array(rewards).copy()
    adv[:] = adv - beta * kl  # an int array keeps ints
    ratio = np.exp(new - old)
    J = np.mean(np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv))
    return {
        "objective": round(float(J), 2),
        "policy_loss": round(float(J), 2),
        "kl_penalty": round(float(beta * kl.mean()), 2),
    }


def test_the_min_of_the_means_fails_the_objective_by_name():
    failed = _said(objective_min_of_means, "ppo_rlhf_objective", "smaller of the two terms' means")
    assert failed[0].mistake == "min-clip"


def test_int_inputs_cut_to_whole_numbers_fail_the_objective_by_name():
    failed = _said(objective_int_truncated, "ppo_rlhf_objective", "cuts the advantages to whole numbers")
    assert failed[0].mistake == "int-truncated"
    case = failed[0].case
    assert all(type(v) is int for v in case.kwargs["rewards"]) and failed[0].case.expected["objective"] == 0.45


def test_the_graders_random_inputs_hold_ints_that_catch_a_truncation():
    from minirlhf.course.grader.grading import _random_cases

    ex = get("ppo_rlhf_objective")
    cases = _random_cases(ex, 7)
    ints = [c for c in cases if all(np.asarray(c.kwargs[k]).dtype.kind == "i" for k in ("old_logp", "rewards"))]
    assert len(ints) >= 10 and any(type(c.kwargs["rewards"]) is list for c in ints)
    assert not run_cases(objective_int_truncated, ex, ints).passed
    assert run_cases(ex.reference, ex, cases).passed
    kl = get("kl_penalty")
    drawn = [kl.random_kwargs(np.random.default_rng(k)) for k in range(100)]
    assert any(np.asarray(kw["logp_policy"]).dtype.kind == "i" for kw in drawn)
    rng = np.random.default_rng(1)
    assert {type(whole_numbers(rng, [1.4, -2.6])).__name__ for _ in range(20)} == {"list", "ndarray"}
    assert [int(v) for v in whole_numbers(rng, [1.4, -2.6])] == [1, -3]


def test_whitened_weights_are_not_called_a_sum():
    def whitened(logp, rewards, baseline):
        weight = rewards - baseline
        return -(weight / weight.std(unbiased=False) * logp).mean()

    failed = _failures(whitened, "reinforce_loss")
    assert all("std" in r.message for r in failed if "sum over the samples" in r.message)
    assert any(r.mistake == "whitened" for r in failed)


# --------------------------------------------------------------------------- chapter 5


def token_loss_min_of_means(new_logp, old_logp, advantages, mask, epsilon=0.2):
    ratio, n = torch.exp(new_logp - old_logp), mask.sum()
    unclipped = (ratio * advantages * mask).sum() / n
    clipped = (torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * advantages * mask).sum() / n
    return -torch.min(unclipped, clipped)


def token_loss_sum(new_logp, old_logp, advantages, mask, epsilon=0.2):
    ratio = torch.exp(new_logp - old_logp)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
    return -(surrogate * mask).sum()


def advantages_clamped_above_only(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
    B, T = mask.shape
    kl = torch.clamp(old_logp - ref_logp, max=kl_clamp)
    rewards = (-beta * kl * mask).clone()
    rewards[torch.arange(B), mask.sum(1).long() - 1] += scores
    returns = rewards.flip(1).cumsum(1).flip(1) * mask
    return (returns - returns.sum(0) / mask.sum(0).clamp(min=1)) * mask


def advantages_in_a_float32_buffer(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
    B, T = mask.shape
    rewards = torch.zeros(B, T)  # float32, whatever the inputs are
    rewards[:] = -beta * (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp) * mask
    rewards[torch.arange(B), mask.sum(1).long() - 1] += scores
    returns = rewards.flip(1).cumsum(1).flip(1) * mask
    return (returns - returns.sum(0) / mask.sum(0).clamp(min=1)) * mask


def test_the_min_of_the_means_fails_the_token_loss_by_name():
    failed = _said(token_loss_min_of_means, "ppo_token_loss", "smaller of the two terms' means")
    assert failed[0].mistake == "min-clip"


def test_a_sum_of_the_token_terms_is_called_a_sum():
    failed = _failures(token_loss_sum, "ppo_token_loss")
    assert not any(r.mistake == "transposed" for r in failed)
    assert failed[0].mistake == "value" and "sum over the kept tokens" in failed[0].message
    assert failed[1].mistake == "sum"


def test_a_clamp_from_above_only_fails_the_advantages_by_name():
    failed = _said(advantages_clamped_above_only, "kl_shaped_advantages", "clamps the KL from above only")
    assert failed[0].mistake == "no-clamp" and "-29.5" in failed[0].case.why


def test_a_float32_buffer_fails_the_advantages_at_an_rm_offset():
    failed = _failures(advantages_in_a_float32_buffer, "kl_shaped_advantages")
    assert len(failed) == 1 and "1e8" in failed[0].case.why and "float32" in failed[0].case.why
    assert failed[0].case.kwargs["scores"].dtype == torch.float64


def test_the_rows_of_chapter_5s_cases_are_counted_from_0_as_the_problem_lines_count_them():
    ex = get("kl_shaped_advantages")
    padded = next(c for c in ex.cases if "is padding with kl = 5" in c.why)
    assert "[0, 1]" in padded.why and "row 1" not in padded.why
    assert padded.kwargs["mask"][0, 1] == 0 and padded.kwargs["ref_logp"][0, 1] == -6.0
    assert not any("row 1" in c.why for c in ex.cases)  # every row named is counted from 0
    shorter = next(c for c in ex.cases if "ends after 2 tokens" in c.why)
    assert "row 0" in shorter.why and shorter.kwargs["mask"][0].sum() == 2


# --------------------------------------------------------------------------- chapter 7


def gae_no_gamma_in_the_td_error(rewards, values, gamma, lam):
    r, v = np.asarray(rewards, dtype=float), np.asarray(values, dtype=float)
    adv, next_value, running = np.zeros_like(r), 0.0, 0.0
    for t in reversed(range(r.shape[-1])):
        running = r[..., t] + next_value - v[..., t] + gamma * lam * running
        adv[..., t], next_value = running, v[..., t]
    return adv


def test_gamma_left_out_of_the_td_error_fails_gae_by_name():
    failed = _said(gae_no_gamma_in_the_td_error, "gae", "leaves gamma out of the TD error")
    assert all(r.case.kwargs["gamma"] < 1 and np.any(np.asarray(r.case.kwargs["values"]) != 0) for r in failed)


def test_a_rounded_beta_is_called_rounded_not_additive():
    def rounded(beta, kl, target, n_steps, horizon):
        e = float(np.clip(kl / target - 1, -0.2, 0.2))
        return round(beta * (1 + e * n_steps / horizon), 2)

    failed = _failures(rounded, "adaptive_kl_update")
    assert not any(r.mistake == "additive" for r in failed)  # 0.51 is also the additive slip's answer
    assert all("rounded to 2 decimals" in r.message for r in failed if "adds to beta" in r.message)
    assert any(r.mistake == "rounded" and "not rounded" in r.message for r in failed)
    assert run_cases(rounded, get("adaptive_kl_update")).hint()[0] == 1  # "Nothing is rounded."


def test_a_numpy_scalar_beta_is_told_to_convert_not_to_round():
    def numpy_scalar(beta, kl, target, n_steps, horizon):
        return beta * (1 + np.clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon)

    failed = _failures(numpy_scalar, "adaptive_kl_update")
    assert failed[0].mistake == "numpy-scalar" and "float(x)" in failed[0].message
    assert not any("round" in r.message for r in failed)
    # where the contract rounds, the advice still says where the rounding goes
    assert "round(float(x), 2)" in run_cases(lambda **kw: np.float64(0.05), get("kl_penalty")).results[0].message


def test_a_float32_beta_is_called_float32():
    def single(beta, kl, target, n_steps, horizon):
        e = torch.clamp(torch.tensor(kl / target - 1), -0.2, 0.2)
        return float(torch.tensor(beta) * (1 + e * n_steps / horizon))

    failed = _said(single, "adaptive_kl_update", "float32")
    assert {r.mistake for r in failed} == {"float32"}
    assert ExpectFloat(atol=1e-9).diagnose(0.1 + 1e-7, 0.1)[0] == "value"  # not a float32 number


# --------------------------------------------------------------------------- chapter 8: an RM's offset


def group_advantages_by_squares(rewards, group_size, eps=1e-4):
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError(f"group_size {group_size} must divide {len(rewards)}")
    r = rewards.view(-1, group_size)
    mean = r.mean(1, keepdim=True)
    variance = ((r**2).mean(1, keepdim=True) - mean**2) * group_size / (group_size - 1)
    adv = (r - mean) / (variance.clamp(min=0).sqrt() + eps)
    return torch.where((r == r[:, :1]).all(1, keepdim=True), torch.zeros_like(adv), adv).reshape(-1)


def test_a_variance_by_squares_fails_group_advantages_at_an_rm_offset():
    failed = _failures(group_advantages_by_squares, "group_advantages")
    assert len(failed) == 1 and "1e8" in failed[0].case.why and "mean(r**2) - mean**2" in failed[0].case.why


def test_group_advantages_in_float32_are_named_float32_at_an_rm_offset():
    def single(rewards, group_size, eps=1e-4):
        return get("group_advantages").reference(rewards.float(), group_size, eps)

    failed = _said(single, "group_advantages", "float32 where the answer is float64")
    assert failed[0].mistake == "float32"


# --------------------------------------------------------------------------- chapter 10's fixes


def _ends_before(completions):
    is_end = (completions == SEMI).long()
    return torch.cumsum(is_end, dim=1) - is_end


@pytest.mark.parametrize("cast, name", [(lambda m: m, "bool"), (lambda m: m.long(), "int64")])
def test_a_mask_of_bools_or_ints_fails_fix_run_a(cast, name):
    def fix_run_a(completions):
        return cast(_ends_before(completions) == 0)

    failed = _said(fix_run_a, "fix_run_a", f"a {name} tensor" if name == "bool" else f"an {name} tensor", "float")
    assert {r.mistake for r in failed} == {"dtype"}
    assert not any(r.passed for r in _graded(fix_run_a, "fix_run_a"))

    def doubles(completions):  # a float tensor, as the contract asks: float64 is one
        return (_ends_before(completions) == 0).double()

    assert run_cases(doubles, get("fix_run_a")).passed


def test_log_probs_in_float32_fail_fix_run_f():
    def fix_run_f(logits, tokens, temperature=1.0):
        return _logprobs(logits.float(), tokens, temperature)

    failed = _said(fix_run_f, "fix_run_f", "float32", "float64")
    assert {r.mistake for r in failed} == {"float32"}
    assert not any(r.passed for r in _graded(fix_run_f, "fix_run_f"))


# --------------------------------------------------------------------------- N20: Raises


def test_a_learners_subclass_of_the_error_is_accepted_and_a_disguise_is_not():
    want = Raises(ValueError, "group_size")
    assert want.accepts("ValueError") and want.accepts("UnicodeDecodeError")
    assert want.accepts("__main__.GroupSizeError(ValueError)")
    assert want.accepts("__main__.E(UnicodeError)")  # its nearest built-in base is a ValueError
    assert not want.accepts("__main__.E(TypeError)") and not want.accepts("__main__.E(Exception)")
    assert not want.accepts("builtins.ValueError") and not want.accepts("__main__.ValueError")
    message = "raised __main__.GroupSizeError(ValueError): group_size 1 is too small (in f, line 2: raise E())"
    assert raised(message) == ("__main__.GroupSizeError(ValueError)", "group_size 1 is too small")
    case = Case({}, want, "a group of one")
    own = judge(Call("error", message=message, named=True), case, ExpectFloat())
    assert own.passed
    disguised = judge(Call("error", message="raised builtins.ValueError: group_size", named=True), case, ExpectFloat())
    assert not disguised.passed and disguised.mistake == "wrong-error"


# --------------------------------------------------------------------------- N23: band_report


def test_band_report_reports_an_exit_in_the_learners_fix_and_lets_an_interrupt_stop(monkeypatch):
    from minirlhf.course.exercises import ch10
    from minirlhf.model import completion_mask
    from minirlhf.studies import silent_bugs as sb

    for stop in (SystemExit(3), KeyboardInterrupt()):
        calls = []

        def fix_run_a(completions, stop=stop):
            calls.append(1)
            if len(calls) > 20:  # after the check's cases, in the run
                raise stop
            return completion_mask(completions)

        def band_check(name, fn, runs, progress=False):
            for _ in range(100):
                fn(torch.tensor([[1, 2, SEMI, SEMI]]))
            raise AssertionError("not reached")

        monkeypatch.setattr(sb, "band_check", band_check)
        if isinstance(stop, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                ch10.band_report("A", fix_run_a, runs={"correct": {"verifier": {"0": {}}}})
        else:
            text = ch10.band_report("A", fix_run_a, runs={"correct": {"verifier": {"0": {}}}})
            assert text.startswith("fix_run_a passes its check, but called exit() during run A")
            assert len(text.splitlines()) == 1


def test_band_report_reports_any_other_base_exception_in_one_line(monkeypatch):
    from minirlhf.course.exercises import ch10
    from minirlhf.model import completion_mask
    from minirlhf.studies import silent_bugs as sb

    class Odd(BaseException):
        def __str__(self):
            raise RuntimeError("no words")

    def band_check(name, fn, runs, progress=False):
        raise Odd()

    monkeypatch.setattr(sb, "band_check", band_check)
    text = ch10.band_report("A", completion_mask, runs={})
    assert text.startswith("fix_run_a passes its check, but raised during run A:") and "<unprintable" in text
