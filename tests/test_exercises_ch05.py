"""Chapter 5's exercises: the cases are worked by hand, each usual slip fails one of them, the
comparator names the slip, and functions written to the contracts drive ``ppo_train``."""

import math

import numpy as np
import pytest
import torch

import minirlhf.estimators.batch as batch_estimator
import minirlhf.evaluation as evaluation
import minirlhf.leashes.reward as reward_leash
from minirlhf import ppo
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get
from minirlhf.course.report import next_hint
from minirlhf.model import GPTConfig, TinyGPT

ADV = get("kl_shaped_advantages")
LOSS = get("ppo_token_loss")


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_the_reference_reproduces_every_case_worked_by_hand(ex):
    assert len(ex.cases) >= 8
    for i, case in enumerate(ex.cases, 1):
        got = ex.reference(**case.kwargs)
        assert ex.expect.problem(got, case.expected) is None, f"case {i}: {case.why}"


def test_a_few_cases_by_their_numbers():
    # The values written out, so that a change to a case's tensors cannot silently move them.
    assert [c.expected for c in LOSS.cases][:4] == [-0.25, -2.0, -1.2, 0.8]
    assert LOSS.cases[5].expected == pytest.approx(-(2 - math.exp(0.5)) / 3)
    assert torch.allclose(ADV.cases[1].expected, torch.tensor([[0.35, 0.375, 0.425], [-0.35, -0.375, -0.425]]))


# ----------------------------------------------------------------------------- 5.1 advantages


def _adv_variant(slip):
    """Return kl_shaped_advantages with one deliberate slip."""

    def advantages(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
        B, T = mask.shape
        kl = (ref_logp - old_logp) if slip == "kl sign" else (old_logp - ref_logp)
        if slip != "no clamp":
            kl = kl.clamp(-kl_clamp, kl_clamp)
        rewards = -beta * kl * (1.0 if slip == "padding pays" else mask)
        last = mask.sum(1).long() - 1
        rewards = rewards.clone()
        rewards[torch.arange(B), last] += scores
        if slip == "myopic":  # the score on every token, each token paying only its own KL
            returns = (scores[:, None] - beta * kl) * mask
        else:
            returns = rewards.flip(1).cumsum(1).flip(1) * mask
        if slip == "no baseline":
            baseline = torch.zeros(T)
        elif slip == "baseline over all rows":
            baseline = returns.mean(0)
        elif slip == "baseline per row":
            return (returns - (returns.sum(1) / mask.sum(1))[:, None]) * mask
        else:
            baseline = returns.sum(0) / mask.sum(0).clamp(min=1)
        out = (returns - baseline) * mask
        if slip == "one per completion":
            return out[:, 0]
        return out

    return advantages


ADV_SLIPS = [
    "kl sign",
    "no clamp",
    "padding pays",
    "myopic",
    "no baseline",
    "baseline over all rows",
    "baseline per row",
    "one per completion",
]


def test_the_advantages_without_a_slip_pass():
    assert run_cases(_adv_variant(None), ADV).passed


@pytest.mark.parametrize("slip", ADV_SLIPS)
def test_every_usual_advantage_slip_fails_a_case(slip):
    assert not run_cases(_adv_variant(slip), ADV).passed, f"no case catches the slip {slip!r}"


def test_the_advantage_comparator_names_a_per_completion_result():
    report = run_cases(_adv_variant("one per completion"), ADV)
    assert "one number per completion" in report.first_failure.message


def test_random_advantage_inputs_are_prefix_masks_the_reference_accepts():
    rng = np.random.default_rng(5)
    clamped = 0
    for _ in range(200):
        kw = ADV.random_kwargs(rng)
        B, T = kw["old_logp"].shape
        assert kw["scores"].shape == (B,) and kw["ref_logp"].shape == kw["mask"].shape == (B, T)
        lengths = kw["mask"].sum(1)
        assert (lengths >= 1).all() and torch.equal(kw["mask"], (torch.arange(T) < lengths[:, None]).float())
        assert torch.isfinite(batch_estimator.kl_shaped_advantages(**kw)).all()
        clamped += bool(((kw["old_logp"] - kw["ref_logp"]).abs() > kw["kl_clamp"]).any())
    assert clamped > 20, "the random inputs should often exercise the clamp"


# ----------------------------------------------------------------------------- 5.2 the loss


def _variant(slip):
    """Return a loss with the same contract as the reference but one deliberate slip."""

    def loss(new_logp, old_logp, advantages, mask, epsilon=0.2):
        ratio = torch.exp(new_logp - old_logp)
        A = advantages.T if slip == "transposed" else advantages
        surrogate = torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
        if slip == "max":
            surrogate = torch.maximum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
        if slip == "clip only":
            surrogate = ratio.clamp(1 - epsilon, 1 + epsilon) * A
        if slip == "no mask":
            return -surrogate.mean()
        if slip == "mean over all tokens":
            return -(surrogate * mask).mean()
        if slip == "mean of row means":
            return -((surrogate * mask).sum(1) / mask.sum(1)).mean()
        out = -(surrogate * mask).sum() / mask.sum()
        if slip == "sign":
            return -out
        if slip == "item":
            return out.item()
        if slip == "per token":
            return -(surrogate * mask)
        return out

    return loss


SLIPS = [
    "transposed",
    "max",
    "clip only",
    "no mask",
    "mean over all tokens",
    "mean of row means",
    "sign",
    "item",
    "per token",
]


def test_the_variant_without_a_slip_passes():
    assert run_cases(_variant(None), LOSS).passed


@pytest.mark.parametrize("slip", SLIPS)
def test_every_usual_slip_fails_a_case(slip):
    assert not run_cases(_variant(slip), LOSS).passed, f"no case catches the slip {slip!r}"


@pytest.mark.parametrize("slip, words", [("sign", "wrong sign"), ("item", "torch tensor"), ("per token", "averaged")])
def test_the_comparator_names_the_slip(slip, words):
    assert words in run_cases(_variant(slip), LOSS).first_failure.message


def test_not_written_yet_reads_as_todo():
    def ppo_token_loss(**kwargs):
        raise NotImplementedError("your code here")

    assert run_cases(ppo_token_loss, LOSS).state == "todo"


def test_random_loss_inputs_are_tensors_the_reference_accepts():
    rng = np.random.default_rng(5)
    for _ in range(200):
        kw = LOSS.random_kwargs(rng)
        B, T = kw["old_logp"].shape
        for name in ("new_logp", "advantages", "mask"):
            assert isinstance(kw[name], torch.Tensor) and kw[name].shape == (B, T)
        assert kw["mask"].sum() >= 1
        assert torch.isfinite(reward_leash.ppo_token_loss(**kw))


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_hints_go_from_a_nudge_to_nearly_the_answer(ex):
    assert len(ex.hints) >= 3
    assert "mask" in ex.hints[-1]


def test_functions_written_to_the_contracts_drive_ppo_train():
    """ppo_train with separately written advantages and loss gives the same run as the reference."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = TinyGPT(GPTConfig())
    cfg = ppo.PPOConfig(iterations=2, batch_size=16, seed=3)
    evalset = evaluation.EvalSet(ppo.task.eval_pairs()[:32])

    def first_digit_reward(pairs, prompts, completions):  # an untrained policy never adds right
        return completions[:, 0].float()

    _, ours = ppo.ppo_train(
        policy,
        policy,
        first_digit_reward,
        0.1,
        cfg,
        loss_fn=_variant(None),
        advantage_fn=_adv_variant(None),
        evalset=evalset,
        progress=False,
    )
    _, theirs = ppo.ppo_train(policy, policy, first_digit_reward, 0.1, cfg, evalset=evalset, progress=False)
    for key in ("kl", "policy/clipfrac_avg", "loss/policy_avg"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-6)
    assert ours["loss/policy_avg"][0] != 0.0
    _, myopic = ppo.ppo_train(
        policy,
        policy,
        first_digit_reward,
        0.1,
        cfg,
        advantage_fn=_adv_variant("myopic"),
        evalset=evalset,
        progress=False,
    )
    assert myopic["loss/policy_avg"] != theirs["loss/policy_avg"]  # the advantages really drive the run


# The hint each slip gets: the one about its own mistake. Advantages: 1 the per-token reward,
# 2 the score on a copy, 3 the return-to-go, 4 the baseline. Loss: 1 the ratio and the
# advantages as they stand, 2 the min and the clip, 3 the masked mean, 4 the minus and the tensor.
ADV_HINTS = [
    ("kl sign", "kl-sign", 1),
    ("no clamp", "no-clamp", 1),
    ("padding pays", "padding-pays", 1),
    ("myopic", "myopic", 3),
    ("no baseline", "no-baseline", 4),
    ("baseline over all rows", "baseline-all-rows", 4),
    ("baseline per row", "baseline-per-row", 4),
    ("one per completion", "per-completion", 1),
]
LOSS_HINTS = [
    ("transposed", "transposed", 1),
    ("max", "min-clip", 2),
    ("clip only", "min-clip", 2),
    ("no mask", "no-mask", 3),
    ("mean over all tokens", "mean-over-all", 3),
    ("mean of row means", "row-means", 3),
    ("sign", "sign", 4),
    ("item", "not-a-tensor", 4),
    ("per token", "not-averaged", 3),
]


@pytest.mark.parametrize(
    "ex, variant, slip, mistake, number",
    [(ADV, _adv_variant, *row) for row in ADV_HINTS] + [(LOSS, _variant, *row) for row in LOSS_HINTS],
    ids=[f"adv-{r[0]}" for r in ADV_HINTS] + [f"loss-{r[0]}" for r in LOSS_HINTS],
)
def test_every_slip_gets_the_hint_for_its_mistake(ex, variant, slip, mistake, number):
    report = run_cases(variant(slip), ex)
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, ex.hints[number - 1])


def test_the_tables_cover_every_slip():
    assert sorted(ADV_SLIPS) == sorted(r[0] for r in ADV_HINTS) and sorted(SLIPS) == sorted(r[0] for r in LOSS_HINTS)


def test_a_mutated_input_gets_the_hint_about_the_copy():
    def in_place(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
        out = _adv_variant(None)(scores, old_logp, ref_logp, mask, beta, kl_clamp)
        scores.zero_()  # the right answer, but an input changed in place
        return out

    report = run_cases(in_place, ADV)
    assert report.first_failure.mistake == "mutated" and report.hint()[0] == 2


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases(ex):
    def scaled(**kwargs):
        return 1.37 * ex.reference(**kwargs)

    report = run_cases(scaled, ex)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    assert report.hint() == next_hint(ex.hints, report.n_passed, len(ex.cases))
