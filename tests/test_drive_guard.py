"""The drive guard (minirlhf.course.drive.guard) against a learner's loss whose value is finite
but whose gradient is not: the run is stopped in that loss's backward pass, in one line that
names the function and the call, before the weights move and a later rollout dies in the engine."""

import pytest
import torch

from minirlhf import dpo, ppo
from minirlhf.course.drive import YourFunctionStopped, guard, run_batch
from minirlhf.leashes import reward as reward_leash


def nan_gradient(x: torch.Tensor) -> torch.Tensor:
    """0, with a NaN gradient: torch.where over a log(0) branch it never takes."""
    zero = x * 0
    return torch.where(zero > 1e9, torch.log(zero), torch.zeros_like(zero)).sum()


def test_a_finite_loss_with_a_nan_gradient_stops_the_run_naming_the_function(tiny):
    policy, rm, evalset = tiny
    calls = []

    def ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon=0.2):
        calls.append(1)
        loss = reward_leash.ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon)
        return loss + nan_gradient(new_logp) if len(calls) == 4 else loss  # the 2nd update of the 2nd batch

    cfg = ppo.PPOConfig(seed=0, iterations=3, batch_size=16)
    with pytest.raises(YourFunctionStopped) as stopped:  # not a RuntimeError from generate's sampler
        ppo.ppo_train(
            policy, policy, ppo.verifier_reward, 0.08, cfg, loss_fn=guard("ppo_token_loss", ppo_token_loss),
            evalset=evalset, progress=False,
        )  # fmt: skip
    message = str(stopped.value)
    assert message.startswith(
        "your ppo_token_loss returned a finite loss whose gradient is NaN or an infinity on call 4 of the run "
        "(a batch of 16), so the run is stopped"
    )
    assert "\n" not in message and len(calls) == 4  # stopped in call 4's backward pass


def _watched_logp(name: str) -> dict:
    kwargs = run_batch(name)
    for key, value in kwargs.items():
        if key.startswith(("new_", "policy_")):
            kwargs[key] = value.clone().requires_grad_()
    return kwargs


def test_every_differentiable_input_is_watched_and_the_call_is_the_one_differentiated():
    def dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
        loss = dpo.dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
        return loss + nan_gradient(policy_rejected_logps) if poisoned else loss

    guarded = guard("dpo_loss", dpo_loss)
    kwargs = _watched_logp("dpo_loss")  # the same inputs for every call: each call adds its hooks
    poisoned = False
    first = guarded(**kwargs)
    poisoned = True
    second = guarded(**kwargs)
    assert torch.isfinite(second)
    with pytest.raises(YourFunctionStopped, match=r"your dpo_loss returned a finite loss whose gradient .* on call 2 "):
        second.backward()
    first.backward()  # a finite gradient passes, whichever hooks the inputs hold
    assert torch.isfinite(kwargs["policy_rejected_logps"].grad).all()


def test_a_finite_gradient_passes_unchanged():
    kwargs = _watched_logp("ppo_token_loss")
    want = torch.autograd.grad(reward_leash.ppo_token_loss(**kwargs), kwargs["new_logp"])[0]
    got = torch.autograd.grad(guard("ppo_token_loss", reward_leash.ppo_token_loss)(**kwargs), kwargs["new_logp"])[0]
    assert torch.equal(got, want)
