"""Chapter 5's exercise: the cases are worked by hand, each usual slip fails one of them, the
comparator names the slip, and a loss written to the contract drives ``ppo_train``."""

import math

import numpy as np
import pytest
import torch

from minirlhf import ppo
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get
from minirlhf.model import GPTConfig, TinyGPT

EX = get("ppo_token_loss")


def test_the_reference_reproduces_every_case_worked_by_hand():
    assert len(EX.cases) >= 6
    for i, case in enumerate(EX.cases, 1):
        got = ppo.ppo_token_loss(**case.kwargs)
        assert got.shape == ()
        assert abs(float(got) - case.expected) < 1e-5, f"case {i}: {case.why}"
        assert EX.expect.problem(got, case.expected) is None


def test_a_few_cases_by_their_numbers():
    # The values written out, so that a change to a case's tensors cannot silently move them.
    expected = [c.expected for c in EX.cases]
    assert expected[:5] == [-0.25, -2.0, -1.2, 0.8, 0.5]
    assert expected[5] == pytest.approx(0.5 * math.exp(0.1))
    assert expected[8] == pytest.approx(-(2 - math.exp(0.5)) / 3)


def _variant(slip):
    """Return a loss with the same contract as the reference but one deliberate slip."""

    def loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.1, kl_clamp=10.0):
        ratio = torch.exp(new_logp - old_logp)
        base = new_logp if slip == "kl from new" else old_logp
        kl = base - ref_logp
        if slip != "no clamp":
            kl = kl.clamp(-kl_clamp, kl_clamp)
        adv = advantages[None, :] if slip == "wrong axis" else advantages[:, None]
        A = adv - beta * kl
        if slip == "kl twice":
            A = A - beta * kl
        surrogate = torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
        if slip == "max":
            surrogate = torch.maximum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)
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


SLIPS = ["kl from new", "no clamp", "wrong axis", "kl twice", "max", "no mask", "mean over all tokens",
         "mean of row means", "sign", "item", "per token"]


def test_the_variant_without_a_slip_passes():
    assert run_cases(_variant(None), EX).passed


@pytest.mark.parametrize("slip", SLIPS)
def test_every_usual_slip_fails_a_case(slip):
    report = run_cases(_variant(slip), EX)
    assert not report.passed, f"no case catches the slip {slip!r}"


@pytest.mark.parametrize("slip, words", [("sign", "wrong sign"), ("item", "torch tensor"),
                                         ("per token", "averaged")])
def test_the_comparator_names_the_slip(slip, words):
    report = run_cases(_variant(slip), EX)
    assert words in report.first_failure.message


def test_not_written_yet_reads_as_todo():
    def ppo_token_loss(**kwargs):
        raise NotImplementedError("your code here")

    report = run_cases(ppo_token_loss, EX)
    assert report.state == "todo"


def test_random_inputs_are_tensors_the_reference_accepts():
    rng = np.random.default_rng(5)
    clamped = 0
    for _ in range(200):
        kw = EX.random_kwargs(rng)
        B, T = kw["old_logp"].shape
        for name in ("new_logp", "ref_logp", "mask"):
            assert isinstance(kw[name], torch.Tensor) and kw[name].shape == (B, T)
        assert kw["advantages"].shape == (B,)
        assert kw["mask"].sum() >= 1
        assert torch.isfinite(ppo.ppo_token_loss(**kw))
        clamped += bool(((kw["old_logp"] - kw["ref_logp"]).abs() > kw["kl_clamp"]).any())
    assert clamped > 20, "the random inputs should often exercise the clamp"


def test_hints_go_from_a_nudge_to_nearly_the_answer():
    assert len(EX.hints) >= 3
    assert "mask.sum()" in EX.hints[-1] and "torch.minimum" in EX.hints[-1]


def test_a_loss_written_to_the_contract_drives_ppo_train():
    """ppo_train with loss_fn = a separately written loss gives the same run as the reference."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = TinyGPT(GPTConfig())
    cfg = ppo.PPOConfig(iterations=2, batch_size=16, seed=3)
    evalset = ppo.EvalSet(ppo.task.eval_pairs()[:32])

    def first_digit_reward(pairs, prompts, completions):  # an untrained policy never adds right
        return completions[:, 0].float()

    _, ours = ppo.ppo_train(policy, policy, first_digit_reward, 0.1, cfg, loss_fn=_variant(None),
                            evalset=evalset, progress=False)
    _, theirs = ppo.ppo_train(policy, policy, first_digit_reward, 0.1, cfg, evalset=evalset, progress=False)
    for key in ("kl", "policy/clipfrac_avg", "loss/policy_avg"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-6)
    assert ours["loss/policy_avg"][0] != 0.0
