"""PPO's pieces with numbers worked by hand, and a smoke run of ppo_train."""

import math

import numpy as np
import pytest
import torch

from minirlhf import task
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.ppo import (
    EvalSet, PPOConfig, adaptive_kl_update, gae, normalized_advantages, ppo_token_loss, rm_reward,
    verifier_reward,
)
from minirlhf.ppo import ppo_train


t = torch.tensor


def loss(new, old, ref, adv, mask, eps=0.2, beta=0.0, clamp=10.0):
    return ppo_token_loss(t(new), t(old), t(ref), t(adv), t(mask), eps, beta, clamp).item()


# ----------------------------------------------------------------------------- the loss


def test_loss_at_ratio_one_is_minus_the_advantage():
    assert math.isclose(loss([[-1.0]], [[-1.0]], [[-1.0]], [2.0], [[1.0]]), -2.0)


def test_clipping_by_hand():
    up = math.log(1.5)  # ratio 1.5
    # A > 0: min(1.5 * 1, 1.2 * 1) = 1.2, the gain is capped
    assert math.isclose(loss([[up]], [[0.0]], [[0.0]], [1.0], [[1.0]]), -1.2, rel_tol=1e-6)
    # A < 0: min(1.5 * -1, 1.2 * -1) = -1.5, the loss is not capped
    assert math.isclose(loss([[up]], [[0.0]], [[0.0]], [-1.0], [[1.0]]), 1.5, rel_tol=1e-6)
    down = math.log(0.5)  # ratio 0.5, A > 0: min(0.5, 0.8) = 0.5
    assert math.isclose(loss([[down]], [[0.0]], [[0.0]], [1.0], [[1.0]]), -0.5, rel_tol=1e-6)


def test_mask_drops_tokens_after_the_end():
    # The second token is past the `;`: its huge ratio and log-ratio must not count.
    full = loss([[-1.0, 5.0]], [[-1.0, -9.0]], [[-1.0, -20.0]], [1.0], [[1.0, 0.0]], beta=0.5)
    assert math.isclose(full, -1.0)


def test_advantage_broadcast_over_tokens():
    # adv 1 on a 2-token completion, -1 on a 1-token one: mean over 3 tokens of (1, 1, -1)
    got = loss([[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]],
               [1.0, -1.0], [[1.0, 1.0], [1.0, 0.0]])
    assert math.isclose(got, -1 / 3, rel_tol=1e-6)


def test_kl_enters_the_advantage_once():
    # old - ref = 0.5, beta 0.2: A = 1 - 0.2 * 0.5 = 0.9 at ratio 1
    assert math.isclose(loss([[-1.0]], [[-1.0]], [[-1.5]], [1.0], [[1.0]], beta=0.2), -0.9, rel_tol=1e-6)


def test_log_ratio_to_reference_is_clamped():
    # old - ref = 50, clamped to 10: A = 1 - 0.1 * 10 = 0, so the loss is 0, not -(1 - 5) = 4
    assert math.isclose(loss([[-1.0]], [[-1.0]], [[-51.0]], [1.0], [[1.0]], beta=0.1, clamp=10.0), 0.0, abs_tol=1e-6)


def test_gradient_flows_only_through_new_logp():
    new = t([[-1.0, -2.0]], requires_grad=True)
    old = t([[-1.0, -2.0]], requires_grad=True)
    ref = t([[-1.2, -2.0]], requires_grad=True)
    ppo_token_loss(new, old.detach(), ref.detach(), t([1.0]), t([[1.0, 1.0]]), 0.2, 0.1, 10.0).backward()
    # d(-mean(ratio * A))/d new_t = -A_t / 2 with A = (1 - 0.1 * 0.2, 1 - 0)
    assert torch.allclose(new.grad, t([[-0.49, -0.5]]))


# ----------------------------------------------------------------------------- advantages


def test_normalized_advantages_by_hand():
    # rewards (1, 0, 0, 0): mean 0.25, std sqrt(0.25 * 0.75) = 0.4330
    adv = normalized_advantages(t([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(adv, t([1.7317, -0.5772, -0.5772, -0.5772]), atol=1e-4)


def test_advantages_are_clipped_at_three():
    # one 1 among 17 rewards: mean 1/17, std 4/17, so z is about 4 for the 1 (clipped to 3)
    # and -(1/17) / (4/17 + 1e-4) = -1 / 4.0017 = -0.249894 for the others
    adv = normalized_advantages(t([1.0] + [0.0] * 16))
    assert adv[0].item() == 3.0 and torch.allclose(adv[1:], t(-0.249894), atol=1e-6)


def test_equal_rewards_give_zero_advantage():
    assert torch.equal(normalized_advantages(t([0.7, 0.7, 0.7])), torch.zeros(3))
    with pytest.raises(ValueError, match="rewards"):
        normalized_advantages(t([[1.0]]))


# ----------------------------------------------------------------------------- controller, GAE


def test_adaptive_kl_by_hand():
    # KL twice the target: e = clip(1, -0.2, 0.2) = 0.2; beta * (1 + 0.2 * 64 / 640) = 0.102
    assert math.isclose(adaptive_kl_update(0.1, 0.2, 0.1, 64, 640), 0.102)
    # KL 10% under target: e = -0.1; 0.1 * (1 - 0.1 * 0.1) = 0.099
    assert math.isclose(adaptive_kl_update(0.1, 0.09, 0.1, 64, 640), 0.099)
    assert math.isclose(adaptive_kl_update(0.1, 0.1, 0.1, 64, 640), 0.1)
    with pytest.raises(ValueError, match="target"):
        adaptive_kl_update(0.1, 0.1, 0.0, 64, 640)


def test_gae_by_hand():
    r, v = [0.0, 0.0, 1.0], [0.5, 0.6, 0.8]
    assert np.allclose(gae(r, v, gamma=1.0, lam=1.0), [0.5, 0.4, 0.2])  # return - V
    assert np.allclose(gae(r, v, gamma=1.0, lam=0.0), [0.1, 0.2, 0.2])  # one-step TD errors
    # gamma 0.9, lam 0.5: deltas (0.04, 0.12, 0.2); A2 = 0.2, A1 = 0.12 + 0.45 * 0.2, A0 = 0.04 + 0.45 * A1
    assert np.allclose(gae(r, v, gamma=0.9, lam=0.5), [0.1345, 0.21, 0.2])
    assert gae([r, r], [v, v], 1.0, 1.0).shape == (2, 3)  # batches along leading axes
    with pytest.raises(ValueError, match="shape"):
        gae([0.0, 1.0], [0.5], 1.0, 1.0)


# ----------------------------------------------------------------------------- smoke run


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).eval()
    rm = TinyGPT(GPTConfig(), scalar_head=True).eval()
    return policy, rm, EvalSet(task.eval_pairs()[:32])


def test_ppo_train_smoke(tiny):
    policy, rm, evalset = tiny
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    cfg = PPOConfig(iterations=2, batch_size=16)
    trained, log = ppo_train(policy, policy, rm_reward(rm), 0.5, cfg, rm=rm, evalset=evalset, progress=False)
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in before.items())  # input untouched
    assert any(not torch.equal(v, trained.state_dict()[k]) for k, v in before.items())
    assert len(log["accuracy"]) == len(log["rm_score"]) == len(log["kl"]) == 3
    assert len(log["policy/clipfrac_avg"]) == len(log["objective/kl"]) == 2
    assert abs(log["kl"][0]) < 1e-6 and log["kl"][-1] > 1e-4  # starts on the reference, then moves
    assert all(abs(sum(log["kinds"][k][i] for k in task.KINDS) - 1) < 1e-9 for i in range(3))
    again = ppo_train(policy, policy, rm_reward(rm), 0.5, cfg, rm=rm, evalset=evalset, progress=False)[1]
    assert again["kl"] == log["kl"] and again["objective/scores"] == log["objective/scores"]


def test_ppo_train_uses_the_given_loss_and_controller(tiny):
    policy, rm, evalset = tiny
    calls = []

    def my_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon, beta, kl_clamp):
        calls.append(beta)
        return ppo_token_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon, beta, kl_clamp)

    cfg = PPOConfig(iterations=3, batch_size=8, kl_target=1e6, kl_horizon=80)
    _, log = ppo_train(policy, policy, verifier_reward, 0.1, cfg, loss_fn=my_loss, evalset=evalset, progress=False)
    assert len(calls) == 3 * cfg.updates_per_batch
    # the KL stays far below the huge target, so beta shrinks by 20% * 8 / 80 = 2% per iteration
    assert np.allclose(log["beta"], [0.1, 0.098, 0.09604]) and math.isnan(log["rm_score"][0])
    with pytest.raises(ValueError, match="beta"):
        ppo_train(policy, policy, verifier_reward, -1.0, cfg, evalset=evalset, progress=False)
