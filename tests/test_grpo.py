"""GRPO's pieces in the engine: group advantages by hand, group rollouts, the settings that
make a GRPO run, and what its loss holds."""

import copy
import math

import pytest
import torch

from minirlhf import task
from minirlhf.estimators.group import group_advantages
from minirlhf.leashes.loss import k3_loss_term
from minirlhf.leashes.reward import ppo_token_loss
from minirlhf.model import GPTConfig, TinyGPT, make_generator
from minirlhf.ppo import (
    GROUP_METRICS,
    TRAIN_METRICS,
    PPOConfig,
    batch_metrics,
    ppo_train,
    ppo_update,
    rm_reward,
    rollout,
    score_and_advantages,
    verifier_reward,
)

t = torch.tensor
GRPO = dict(advantages="group", kl_placement="loss")


# ----------------------------------------------------------------------------- group_advantages


def test_group_advantages_by_hand():
    # group 1: (1, 0, 0, 0): mean 0.25, sample std sqrt(0.75 / 3) = 0.5;
    #   (0.75 / 0.5001, -0.25 / 0.5001, ...) = (1.49970, -0.49990, ...)
    # group 2: (2, 4, 4, 2): mean 3, sample std sqrt(4 / 3) = 1.154701; +-1 / 1.154801 = +-0.865950
    adv = group_advantages(t([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 4.0, 2.0]), 4)
    expected = t([1.4997, -0.49990, -0.49990, -0.49990, -0.865950, 0.865950, 0.865950, -0.865950])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_group_advantages_use_the_sample_std_as_trl():
    # a pair (0, 1): mean 0.5, sample std 0.7071 (the population std would be 0.5, giving +-1)
    adv = group_advantages(t([0.0, 1.0]), 2, eps=1e-12)
    assert torch.allclose(adv, t([-1 / math.sqrt(2), 1 / math.sqrt(2)]), atol=1e-6)


def test_equal_rewards_in_a_group_give_exact_zeros_never_nan():
    # 0.1 eight times: its float mean need not be exactly 0.1, yet every advantage is exactly 0
    adv = group_advantages(t([0.1] * 8 + [1.0] * 7 + [0.0]), 8)
    assert torch.equal(adv[:8], torch.zeros(8)) and torch.isfinite(adv).all()
    assert adv[8:15].gt(0).all() and adv[15] < 0
    assert torch.equal(group_advantages(torch.zeros(6), 3), torch.zeros(6))


def test_each_group_is_its_own_baseline():
    # adding a constant to one group changes nothing; scaling it changes nothing (up to eps)
    r = t([0.0, 1.0, 1.0, 3.0, 5.0, 9.0])
    moved = r.clone()
    moved[3:] = moved[3:] * 10 + 100
    assert torch.allclose(group_advantages(r, 3), group_advantages(moved, 3), atol=1e-3)


@pytest.mark.parametrize(
    "rewards, group_size, match",
    [
        (t([1.0, 0.0, 1.0]), 2, "group_size"),  # 2 does not divide 3
        (t([1.0, 0.0]), 1, "group_size"),  # a group of one has no baseline
        (t([1.0, 0.0]), 2.0, "group_size"),
        (t([[1.0, 0.0]]), 2, "1-D"),
        (t([1.0, float("nan")]), 2, "finite"),
    ],
)
def test_group_advantages_refuse_what_they_cannot_compute(rewards, group_size, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, group_size)
    with pytest.raises(ValueError, match="eps"):
        group_advantages(t([1.0, 0.0]), 2, eps=0.0)


# ----------------------------------------------------------------------------- settings


def test_the_settings_of_a_grpo_run_are_checked_by_name():
    assert PPOConfig(group_size=8, **GRPO).batch_size == 64
    with pytest.raises(ValueError, match="batch_size .* group_size"):
        PPOConfig(group_size=6)
    with pytest.raises(ValueError, match="group_size"):
        PPOConfig(group_size=0)
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(**GRPO)  # group advantages with groups of one
    with pytest.raises(ValueError, match="use a leash in the loss, kl_placement=.*'loss'"):
        PPOConfig(group_size=8, advantages="group")  # the leash would be nowhere
    with pytest.raises(ValueError, match="advantages"):
        PPOConfig(advantages="critic")
    PPOConfig(group_size=8)  # chapter 5's batch estimator on grouped samples is allowed


# ----------------------------------------------------------------------------- rollouts


def test_a_group_rollout_lays_each_prompt_out_g_times_side_by_side(tiny):
    policy, _, _ = tiny
    cfg = PPOConfig(batch_size=12, group_size=4)
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    assert batch.completions.shape == (12, 4) and batch.prompts.shape == (12, 6)  # the count is kept
    groups = batch.pairs.view(3, 4, 2)
    assert (groups == groups[:, :1]).all()  # rows 4k..4k+3 ask the same sum
    assert len({tuple(p) for p in groups[:, 0].tolist()}) == 3  # three prompts drawn (distinct here)
    first = task.sample_pairs(3, make_generator(0), task.train_pairs())
    assert torch.equal(groups[:, 0], first)  # batch_size / G prompts drawn, then repeated
    assert not (batch.completions.view(3, 4, 4) == batch.completions.view(3, 4, 4)[:, :1]).all()


def test_group_size_one_draws_the_same_batch_as_chapter_5(tiny):
    policy, _, _ = tiny
    a = rollout(policy, policy, task.train_pairs(), PPOConfig(batch_size=8), make_generator(3))
    b = rollout(policy, policy, task.train_pairs(), PPOConfig(batch_size=8, group_size=1), make_generator(3))
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("pairs", "completions", "old_logp"))


# ----------------------------------------------------------------------------- advantages and loss


def test_group_advantages_reach_every_kept_token_and_no_leash(tiny):
    policy, _, _ = tiny
    torch.manual_seed(1)
    reference = TinyGPT(GPTConfig()).eval()  # not the policy: every kl_t is non-zero
    cfg = PPOConfig(batch_size=16, group_size=4, **GRPO)
    batch = rollout(policy, reference, task.train_pairs(), cfg, make_generator(0))
    scores = t([float(i % 3) for i in range(16)], dtype=torch.float64)  # the policy's dtype
    for beta in (0.0, 5.0):  # beta never reaches the advantages
        rewards, adv = score_and_advantages(batch, lambda *a: scores, beta, cfg)
        per_row = group_advantages(scores, 4)
        assert torch.equal(adv, per_row[:, None] * batch.mask)  # the same on each kept token, 0 after
    seen = []
    score_and_advantages(
        batch,
        lambda *a: scores,
        0.3,
        cfg,
        advantage_fn=lambda r, g, eps: seen.append((g, eps)) or group_advantages(r, g, eps),
    )
    assert seen == [(4, cfg.adv_eps)]  # a learner's group_advantages drives the run
    with pytest.raises(ValueError, match="group advantages must be"):
        score_and_advantages(batch, lambda *a: scores, 0.3, cfg, advantage_fn=lambda r, g, eps: r[:4])


def test_the_grpo_loss_is_the_clipped_surrogate_plus_beta_k3(tiny):
    # lr 0: Adam does not move the policy, so the recorded loss is the loss at the rollout policy
    policy, _, _ = tiny
    torch.manual_seed(1)
    reference = TinyGPT(GPTConfig()).eval()
    cfg = PPOConfig(batch_size=16, group_size=4, updates_per_batch=1, lr=0.0, **GRPO)
    batch = rollout(policy, reference, task.train_pairs(), cfg, make_generator(0))
    _, adv = score_and_advantages(batch, verifier_reward, 0.0, cfg)
    surrogate = ppo_token_loss(batch.old_logp, batch.old_logp, adv, batch.mask).item()
    k3 = k3_loss_term(batch.old_logp, batch.ref_logp, batch.mask).item()
    assert k3 > 0.01
    for beta in (0.0, 0.7):
        trained = copy.deepcopy(policy).train()
        stats = ppo_update(trained, torch.optim.Adam(trained.parameters(), lr=0.0), batch, adv, beta, cfg)
        assert math.isclose(stats["loss/policy_avg"], surrogate + beta * k3, rel_tol=1e-5, abs_tol=1e-7)


def test_a_short_grpo_run(tiny):
    policy, rm, evalset = tiny
    cfg = PPOConfig(iterations=2, batch_size=16, group_size=4, **GRPO)
    trained, log = ppo_train(policy, policy, rm_reward(rm), 0.1, cfg, rm=rm, evalset=evalset, progress=False)
    assert len(log["accuracy"]) == 3 and len(log["frac_reward_zero_std"]) == 2
    assert all(0.0 <= x <= 1.0 for x in log["frac_reward_zero_std"])
    assert log["config"]["group_size"] == 4 and log["config"]["advantages"] == "group"
    assert any(not torch.equal(v, trained.state_dict()[k]) for k, v in policy.state_dict().items())
    # On the reference, beta makes no difference to the first step (k3 and its gradient are 0 there).
    one = dict(iterations=1, batch_size=16, group_size=4, updates_per_batch=1, **GRPO)
    a = ppo_train(policy, policy, rm_reward(rm), 0.0, PPOConfig(**one), evalset=evalset, progress=False)[0]
    b = ppo_train(policy, policy, rm_reward(rm), 2.0, PPOConfig(**one), evalset=evalset, progress=False)[0]
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    # and chapter 5's runs log no group metric
    _, plain = ppo_train(
        policy, policy, rm_reward(rm), 0.1, PPOConfig(iterations=1, batch_size=8), evalset=evalset, progress=False
    )
    assert "frac_reward_zero_std" not in plain


def test_the_share_of_groups_with_equal_rewards_by_hand(tiny):
    policy, _, _ = tiny
    cfg = PPOConfig(batch_size=8, group_size=4)
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    stats = {"policy/clipfrac_avg": 0.0, "policy/approxkl_avg": 0.0, "loss/policy_avg": 0.0}
    # group 1 all right (equal), group 2 mixed: one group of two has zero std
    metrics = batch_metrics(batch, t([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), stats, 0.1, 4)
    assert metrics["frac_reward_zero_std"] == 0.5
    assert list(metrics) == [*TRAIN_METRICS, *GROUP_METRICS]
    assert list(batch_metrics(batch, torch.ones(8), stats, 0.1)) == list(TRAIN_METRICS)


# ----------------------------------------------------------------------------- chapter 8's variants


def test_the_variants_differ_from_grpo_in_the_scale_only():
    from minirlhf.estimators.group_centred import group_centred_advantages
    from minirlhf.estimators.rloo import rloo_advantages

    r = t([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3, 2.0, 4.0, 4.0, 2.0])
    centred = group_centred_advantages(r, 4)
    # group 1: mean 0.5, so +-0.5; groups 2 and 3 carry no signal; group 4: mean 3, so +-1
    assert torch.allclose(centred, t([0.5, -0.5, -0.5, 0.5] + [0.0] * 8 + [-1.0, 1.0, 1.0, -1.0]))
    # the leave-one-out baseline is G / (G - 1) times the centred advantage, exactly zero alike
    assert torch.allclose(rloo_advantages(r, 4), centred * 4 / 3)
    assert torch.equal(rloo_advantages(r, 4)[4:12], torch.zeros(8))
    # by hand: r_0 = 1 against the other three (0, 1, 0) of its group, mean 1/3
    assert abs(rloo_advantages(r, 4)[0].item() - (1 - 1 / 3)) < 1e-6
    # GRPO divides by the group's sample std (+ eps): the centred advantage over it
    std = r.view(-1, 4).std(1).repeat_interleave(4)
    keep = std > 0
    assert torch.allclose(group_advantages(r, 4)[keep], centred[keep] / (std[keep] + 1e-4), atol=1e-6)
    for fn in (group_centred_advantages, rloo_advantages):
        with pytest.raises(ValueError, match="group_size"):
            fn(t([1.0, 0.0, 1.0]), 2)


@pytest.mark.parametrize("name", ["group-centred", "rloo"])
def test_a_variant_drives_the_run_through_its_setting(name):
    from minirlhf.estimators.group_centred import group_centred_advantages
    from minirlhf.estimators.rloo import rloo_advantages

    cfg = PPOConfig(batch_size=8, group_size=4, advantages=name, kl_placement="loss")
    scores = t([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64)  # the policy's dtype
    g = make_generator(0)
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).eval()
    batch = rollout(policy, policy, task.train_pairs(), cfg, g)
    rewards, adv = score_and_advantages(batch, lambda *a: scores, 0.3, cfg)
    fn = {"group-centred": group_centred_advantages, "rloo": rloo_advantages}[name]
    assert torch.equal(adv, fn(scores, 4)[:, None] * batch.mask)
    with pytest.raises(ValueError, match="kl_placement"):
        PPOConfig(batch_size=8, group_size=4, advantages=name)
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(advantages=name, kl_placement="loss")


def test_grpo_token_loss_is_the_surrogate_plus_beta_k3():
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=g) * 3
    new = old + 0.3 * torch.randn(3, 4, generator=g)
    ref = old + 0.5 * torch.randn(3, 4, generator=g)
    adv = torch.randn(3, 1, generator=g).expand(3, 4).clone()
    mask = t([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    from minirlhf.leashes.loss import grpo_token_loss

    got = grpo_token_loss(new, old, ref, adv, mask, 0.2, 0.04)
    want = ppo_token_loss(new, old, adv, mask, 0.2) + 0.04 * k3_loss_term(new, ref, mask)
    assert torch.equal(got, want)
    assert torch.equal(grpo_token_loss(new, old, ref, adv, mask, 0.2, 0.0), ppo_token_loss(new, old, adv, mask, 0.2))
