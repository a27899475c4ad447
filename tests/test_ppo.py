"""PPO's pieces with numbers worked by hand, and a smoke run of ppo_train."""

import copy
import hashlib
import math

import numpy as np
import pytest
import torch

from minirlhf import task
from minirlhf.estimators.batch import kl_shaped_advantages, standardized_scores
from minirlhf.evaluation import EvalSet
from minirlhf.leashes.loss import grpo_token_loss, k3_loss_term
from minirlhf.leashes.reward import ppo_token_loss
from minirlhf.model import GPTConfig, TinyGPT, make_generator
from minirlhf.ppo import (
    TRAIN_METRICS,
    PPOConfig,
    adaptive_kl_update,
    batch_metrics,
    gae,
    ppo_train,
    ppo_update,
    rm_reward,
    rollout,
    score_and_advantages,
    verifier_reward,
)

t = torch.tensor


def loss(new, old, adv, mask, eps=0.2):
    return ppo_token_loss(t(new), t(old), t(adv), t(mask), eps).item()


def advantages(scores, old, ref, mask, beta, clamp=10.0):
    return kl_shaped_advantages(t(scores), t(old), t(ref), t(mask), beta, clamp)


# ----------------------------------------------------------------------------- the loss


def test_loss_at_ratio_one_is_minus_the_advantage():
    assert math.isclose(loss([[-1.0]], [[-1.0]], [[2.0]], [[1.0]]), -2.0)


def test_clipping_by_hand():
    up = math.log(1.5)  # ratio 1.5
    # A > 0: min(1.5 * 1, 1.2 * 1) = 1.2, the gain is capped
    assert math.isclose(loss([[up]], [[0.0]], [[1.0]], [[1.0]]), -1.2, rel_tol=1e-6)
    # A < 0: min(1.5 * -1, 1.2 * -1) = -1.5, the loss is not capped
    assert math.isclose(loss([[up]], [[0.0]], [[-1.0]], [[1.0]]), 1.5, rel_tol=1e-6)
    down = math.log(0.5)  # ratio 0.5, A > 0: min(0.5, 0.8) = 0.5
    assert math.isclose(loss([[down]], [[0.0]], [[1.0]], [[1.0]]), -0.5, rel_tol=1e-6)


def test_mask_drops_tokens_after_the_end():
    # The second token is past the `;`: its huge ratio must not count.
    assert math.isclose(loss([[-1.0, 5.0]], [[-1.0, -9.0]], [[1.0, 1.0]], [[1.0, 0.0]]), -1.0)


def test_gradient_flows_only_through_new_logp():
    new = t([[-1.0, -2.0]], requires_grad=True)
    old = t([[-1.0, -2.0]], requires_grad=True)
    ppo_token_loss(new, old.detach(), t([[0.98, 1.0]]), t([[1.0, 1.0]]), 0.2).backward()
    # d(-mean(ratio * A))/d new_t = -A_t / 2 at ratio 1
    assert torch.allclose(new.grad, t([[-0.49, -0.5]]))


# ----------------------------------------------------------------------------- the leash in the reward


def test_the_leash_as_a_per_token_reward_with_returns_to_go_by_hand():
    # Row 1: kl = (0.1, 0.2, 0.3), beta 0.5, score 1 -> rewards (-0.05, -0.1, 1 - 0.15)
    # and returns-to-go (0.70, 0.75, 0.85). Row 2: no divergence, score 0 -> returns 0.
    # Baseline per position: (0.35, 0.375, 0.425), so the advantages are +-those.
    adv = advantages([1.0, 0.0], [[-0.9, -0.8, -0.7], [-1.0, -1.0, -1.0]], [[-1.0] * 3] * 2, [[1.0] * 3] * 2, 0.5)
    assert torch.allclose(adv, t([[0.35, 0.375, 0.425], [-0.35, -0.375, -0.425]]), atol=1e-6)
    # The first token pays for its followers: its return falls by beta * (0.1 + 0.2 + 0.3).
    alone = advantages([1.0, 0.0], [[-1.0] * 3] * 2, [[-1.0] * 3] * 2, [[1.0] * 3] * 2, 0.5)
    assert math.isclose((alone - adv)[0, 0].item(), 0.5 * 0.6 / 2, rel_tol=1e-5)


def test_the_score_goes_on_the_last_kept_token_and_padding_pays_nothing():
    # Row 1 ends after one token; its padding token has kl 5 (ref -6) and must not count.
    adv = advantages(
        [1.0, -1.0], [[-1.0, -1.0], [-1.0, -1.0]], [[-1.0, -6.0], [-1.0, -1.0]], [[1.0, 0.0], [1.0, 1.0]], 1.0
    )
    assert torch.allclose(adv, t([[1.0, 0.0], [-1.0, 0.0]]))


def test_the_baseline_of_a_position_averages_the_rows_that_reach_it():
    adv = advantages([3.0, 1.0, 2.0], [[-1.0] * 2] * 3, [[-1.0] * 2] * 3, [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], 0.0)
    assert torch.allclose(adv, t([[1.0, 0.0], [-1.0, -0.5], [0.0, 0.5]]))


def test_log_ratio_to_reference_is_clamped():
    # old - ref = 50, clamped to 10: reward -0.1 * 10 = -1 against 0 in the other row
    adv = advantages([0.0, 0.0], [[-1.0], [-1.0]], [[-51.0], [-1.0]], [[1.0], [1.0]], 0.1)
    assert torch.allclose(adv, t([[-0.5], [0.5]]))


def test_shapes_are_checked_with_names():
    with pytest.raises(ValueError, match="scores"):
        advantages([1.0], [[-1.0]] * 2, [[-1.0]] * 2, [[1.0]] * 2, 0.1)
    with pytest.raises(ValueError, match="ref_logp"):
        advantages([1.0, 0.0], [[-1.0]] * 2, [[-1.0, -1.0]] * 2, [[1.0]] * 2, 0.1)


def test_the_k3_loss_term_by_hand():
    # k3 at d = ref - new = log 2: 2 - log 2 - 1 = 0.3069; at d = 0: 0; mean over the 2 kept tokens
    new = t([[-1.0, -1.0, 5.0]], requires_grad=True)
    term = k3_loss_term(new, t([[-1.0 + math.log(2.0), -1.0, -9.0]]), t([[1.0, 1.0, 0.0]]))
    assert math.isclose(term.item(), (1 - math.log(2.0)) / 2, rel_tol=1e-5)
    term.backward()  # d k3 / d new = -(e^d - 1) = -1 at d = log 2, halved by the mean
    assert torch.allclose(new.grad, t([[-0.5, 0.0, 0.0]]), atol=1e-6)


def test_standardized_scores_by_hand():
    # scores (1, 0, 0, 0): mean 0.25, std sqrt(0.25 * 0.75) = 0.4330
    z = standardized_scores(t([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(z, t([1.7317, -0.5772, -0.5772, -0.5772]), atol=1e-4)


def test_scores_are_clipped_at_three():
    # one 1 among 17 scores: mean 1/17, std 4/17, so z is about 4 for the 1 (clipped to 3)
    # and -(1/17) / (4/17 + 1e-4) = -1 / 4.0017 = -0.249894 for the others
    z = standardized_scores(t([1.0] + [0.0] * 16))
    assert z[0].item() == 3.0 and torch.allclose(z[1:], t(-0.249894), atol=1e-6)


def test_equal_scores_give_zero():
    assert torch.equal(standardized_scores(t([0.7, 0.7, 0.7])), torch.zeros(3))
    with pytest.raises(ValueError, match="scores"):
        standardized_scores(t([[1.0]]))


# ----------------------------------------------------------------------------- controller, GAE


def test_adaptive_kl_by_hand():
    # KL twice the target: e = clip(1, -0.2, 0.2) = 0.2; beta * (1 + 0.2 * 64 / 640) = 0.102
    assert math.isclose(adaptive_kl_update(0.1, 0.2, 0.1, 64, 640), 0.102)
    # KL 10% under target: e = -0.1; 0.1 * (1 - 0.1 * 0.1) = 0.099
    assert math.isclose(adaptive_kl_update(0.1, 0.09, 0.1, 64, 640), 0.099)
    assert math.isclose(adaptive_kl_update(0.1, 0.1, 0.1, 64, 640), 0.1)
    with pytest.raises(ValueError, match="target"):
        adaptive_kl_update(0.1, 0.1, 0.0, 64, 640)


def test_adaptive_kl_refuses_a_step_that_could_turn_beta_negative():
    # at e = -0.2 the factor is 1 - 0.2 * n_steps / horizon: 0.02 just below 5 horizons
    assert math.isclose(adaptive_kl_update(1.0, 0.0, 1.0, 4900, 1000), 0.02)
    with pytest.raises(ValueError, match="below 5"):
        adaptive_kl_update(1.0, 0.0, 1.0, 5000, 1000)


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

    def my_loss(new_logp, old_logp, advantages, mask, epsilon):
        calls.append(epsilon)
        return ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon)

    cfg = PPOConfig(iterations=3, batch_size=8, kl_target=1e6, kl_horizon=80)
    _, log = ppo_train(policy, policy, verifier_reward, 0.1, cfg, loss_fn=my_loss, evalset=evalset, progress=False)
    assert len(calls) == 3 * cfg.updates_per_batch
    # the KL stays far below the huge target, so beta shrinks by 20% * 8 / 80 = 2% per iteration
    assert np.allclose(log["beta"], [0.1, 0.098, 0.09604]) and math.isnan(log["rm_score"][0])
    with pytest.raises(ValueError, match="beta"):
        ppo_train(policy, policy, verifier_reward, -1.0, cfg, evalset=evalset, progress=False)


def test_the_leash_is_in_the_reward_or_in_the_loss_never_both(tiny):
    policy, rm, evalset = tiny
    seen = {}

    def spy_advantages(scores, old_logp, ref_logp, mask, beta, kl_clamp):
        seen.setdefault("advantage beta", []).append(beta)
        return kl_shaped_advantages(scores, old_logp, ref_logp, mask, beta, kl_clamp)

    def spy_loss(new_logp, old_logp, advantages, mask, epsilon):
        seen.setdefault("advantages", []).append(advantages.clone())
        return ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon)

    cfg = PPOConfig(iterations=2, batch_size=8)
    _, by_reward = ppo_train(
        policy,
        policy,
        rm_reward(rm),
        0.5,
        cfg,
        loss_fn=spy_loss,
        advantage_fn=spy_advantages,
        evalset=evalset,
        progress=False,
    )
    assert seen.pop("advantage beta") == [0.5, 0.5]
    seen.clear()

    def spy_grpo_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon, beta, kl_clamp):
        # with the leash in the loss, the loss function gets the reference and beta too
        seen.setdefault("loss beta", []).append(beta)
        return grpo_token_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon, beta, kl_clamp)

    loss_cfg = PPOConfig(iterations=2, batch_size=8, kl_placement="loss")
    _, by_loss = ppo_train(
        policy,
        policy,
        rm_reward(rm),
        0.5,
        loss_cfg,
        loss_fn=spy_grpo_loss,
        advantage_fn=spy_advantages,
        evalset=evalset,
        progress=False,
    )
    assert seen.pop("advantage beta") == [0.0, 0.0]  # the score alone: no KL in the advantages
    assert seen.pop("loss beta") == [0.5] * 4  # two iterations of two updates, beta in the loss
    assert by_loss["objective/kl"][1] != by_reward["objective/kl"][1]
    # The first gradient step starts on the reference: every kl_t, k3_t and k3's gradient is 0,
    # so the two placements make exactly the same first step.
    one = dict(iterations=1, batch_size=8, updates_per_batch=1)
    a = ppo_train(policy, policy, rm_reward(rm), 0.5, PPOConfig(**one), evalset=evalset, progress=False)[0]
    b = ppo_train(
        policy, policy, rm_reward(rm), 0.5, PPOConfig(**one, kl_placement="loss"), evalset=evalset, progress=False
    )[0]
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    with pytest.raises(ValueError, match="kl_placement"):
        PPOConfig(kl_placement="both")


def test_logged_clip_fraction_and_approx_kl_follow_trl(tiny):
    # TRL: clipfrac = mean(pg_losses2 > pg_losses), approxkl = 0.5 * mean(logratio ** 2)
    policy, rm, evalset = tiny
    cfg = PPOConfig(iterations=1, batch_size=16, updates_per_batch=3, lr=3e-2, anneal_lr=False)
    _, log = ppo_train(policy, policy, rm_reward(rm), 0.0, cfg, evalset=evalset, progress=False)
    assert 0.0 < log["policy/clipfrac_avg"][0] < 1.0  # the first update has ratio 1: nothing binds
    assert log["policy/approxkl_avg"][0] > 0.0


# ----------------------------------------------------------------------------- the stages


# ppo_train as it stood before its body was split into stage functions: one flat loop, written
# here from the pieces, as a reference computed in the same process (no float recorded on one
# machine). The stages must reproduce it exactly, or chapters 5 and 6 would tell another story.
def _single_loop(policy, reference, reward_fn, beta, cfg, rm, evalset):
    from minirlhf.estimators.group import group_advantages
    from minirlhf.estimators.group_centred import group_centred_advantages
    from minirlhf.estimators.rloo import rloo_advantages
    from minirlhf.evaluation import evaluate
    from minirlhf.model import completion_logits, completion_mask, entropy_from_logits, generate, logprobs_from_logits

    by_name = {"group": group_advantages, "group-centred": group_centred_advantages, "rloo": rloo_advantages}

    policy = copy.deepcopy(policy).train().requires_grad_(True)
    g, pool, temp = make_generator(cfg.seed), task.train_pairs(), cfg.temperature
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    log = {
        "accuracy": [],
        "rm_score": [],
        "kl": [],
        "kinds": {k: [] for k in task.KINDS},
        "eval_iterations": [0],
        **{name: [] for name in TRAIN_METRICS},
        "beta0": float(beta),
    }
    cache = {}

    def record(ev):
        for key in ("accuracy", "rm_score", "kl"):
            log[key].append(ev[key])
        for k in task.KINDS:
            log["kinds"][k].append(ev["kinds"][k])

    record(evaluate(policy, reference, rm, evalset, temp, cache))
    for it in range(cfg.iterations):
        with torch.no_grad():
            pairs = task.sample_pairs(cfg.batch_size // cfg.group_size, g, pool).repeat_interleave(
                cfg.group_size, dim=0
            )
            prompts = task.encode_prompts(pairs)
            completions = generate(policy, prompts, temp, generator=g)
            mask = completion_mask(completions)
            logits = completion_logits(policy, prompts, completions)
            old_logp = logprobs_from_logits(logits, completions, temp)
            ref_logp = logprobs_from_logits(completion_logits(reference, prompts, completions), completions, temp)
            entropy = entropy_from_logits(logits, temp)
            rewards = reward_fn(pairs, prompts, completions).to(old_logp.dtype)
            if cfg.advantages != "batch":
                adv = by_name[cfg.advantages](rewards, cfg.group_size, cfg.adv_eps)[:, None] * mask
            else:
                z = standardized_scores(rewards, cfg.adv_clip, cfg.adv_eps)
                adv = kl_shaped_advantages(
                    z, old_logp, ref_logp, mask, beta if cfg.kl_placement == "reward" else 0.0, cfg.kl_clamp
                )
        for group in opt.param_groups:
            group["lr"] = cfg.lr * (1.0 - it / cfg.iterations if cfg.anneal_lr else 1.0)
        stats = {"clipfrac": [], "approxkl": [], "loss": []}
        for _ in range(cfg.updates_per_batch):
            new_logp = logprobs_from_logits(completion_logits(policy, prompts, completions), completions, temp)
            if cfg.kl_placement == "loss":
                loss_ = grpo_token_loss(new_logp, old_logp, ref_logp, adv, mask, cfg.epsilon, beta, cfg.kl_clamp)
            else:
                loss_ = ppo_token_loss(new_logp, old_logp, adv, mask, cfg.epsilon)
            opt.zero_grad(set_to_none=True)
            loss_.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            opt.step()
            with torch.no_grad():
                log_ratio = new_logp - old_logp
                ratio = log_ratio.exp()
                binds = (-adv * ratio.clamp(1 - cfg.epsilon, 1 + cfg.epsilon) > -adv * ratio).float()
                stats["clipfrac"].append(((binds * mask).sum() / mask.sum()).item())
                stats["approxkl"].append(((0.5 * log_ratio**2 * mask).sum() / mask.sum()).item())
                stats["loss"].append(loss_.item())
        n_tok = mask.sum()
        metrics = {
            "objective/scores": rewards.double().mean().item(),
            "objective/kl": (((old_logp - ref_logp) * mask).sum() / n_tok).item(),
            "objective/entropy": ((entropy * mask).sum() / n_tok).item(),
            "policy/clipfrac_avg": float(np.mean(stats["clipfrac"])),
            "policy/approxkl_avg": float(np.mean(stats["approxkl"])),
            "loss/policy_avg": float(np.mean(stats["loss"])),
            "val/completion_length": mask.sum(1).double().mean().item(),
            "beta": float(beta),
        }
        for name, value in metrics.items():
            log[name].append(value)
        policy.eval()
        if (it + 1) % cfg.eval_every == 0 or it + 1 == cfg.iterations:
            record(evaluate(policy, reference, rm, evalset, temp, cache))
            log["eval_iterations"].append(it + 1)
        policy.train()
        if cfg.kl_target is not None:
            beta = adaptive_kl_update(beta, metrics["objective/kl"], cfg.kl_target, cfg.batch_size, cfg.kl_horizon)
    return policy.eval(), log


def _digest(model):
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.numpy().tobytes())
    return h.hexdigest()[:16]


def test_the_stage_functions_reproduce_the_single_loop_exactly():
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).eval()
    rm = TinyGPT(GPTConfig(), scalar_head=True).eval()
    torch.manual_seed(1)
    reference = TinyGPT(GPTConfig()).eval()  # not the policy: every KL term is non-zero
    evalset = EvalSet(task.eval_pairs()[:32])
    cases = {
        "rm_reward": (rm_reward(rm), 0.5, PPOConfig(iterations=2, batch_size=16)),
        "verifier_loss": (verifier_reward, 0.3, PPOConfig(iterations=2, batch_size=16, kl_placement="loss", seed=3)),
        "adaptive": (
            verifier_reward,
            0.1,
            PPOConfig(iterations=2, batch_size=8, kl_target=0.01, kl_horizon=80, anneal_lr=False),
        ),
        "evaluated_at_the_ends": (rm_reward(rm), 0.5, PPOConfig(iterations=3, batch_size=16, eval_every=3)),
        "evaluated_every_second": (rm_reward(rm), 0.5, PPOConfig(iterations=3, batch_size=16, eval_every=2)),
    }
    for name, (reward_fn, beta, cfg) in cases.items():
        trained, log = ppo_train(policy, reference, reward_fn, beta, cfg, rm=rm, evalset=evalset, progress=False)
        log.pop("config")
        want_policy, want = _single_loop(policy, reference, reward_fn, beta, cfg, rm, evalset)
        assert log == want, name  # exact floats, not approximately
        assert _digest(trained) == _digest(want_policy), name
    # evaluating fewer times changes no weight and no training number: the runs end the same
    every, ends = (
        ppo_train(
            policy,
            reference,
            rm_reward(rm),
            0.5,
            PPOConfig(iterations=3, batch_size=16, eval_every=k),
            rm=rm,
            evalset=evalset,
            progress=False,
        )
        for k in (1, 3)
    )
    assert _digest(every[0]) == _digest(ends[0])
    assert ends[1]["eval_iterations"] == [0, 3] and every[1]["eval_iterations"] == [0, 1, 2, 3]
    assert all(every[1][k] == ends[1][k] for k in TRAIN_METRICS)
    assert all(every[1][k][-1] == pytest.approx(ends[1][k][-1], abs=1e-12) for k in ("accuracy", "rm_score", "kl"))


def test_the_stages_one_by_one_on_a_small_batch(tiny):
    policy, rm, evalset = tiny
    cfg = PPOConfig(batch_size=6)
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    assert batch.completions.shape == batch.mask.shape == batch.old_logp.shape == (6, 4)
    assert batch.prompts.shape == (6, 6) and batch.pairs.shape == (6, 2)
    assert torch.equal(batch.old_logp, batch.ref_logp)  # the policy is its own reference here
    assert (batch.entropy > 0).all()
    rewards, adv = score_and_advantages(batch, rm_reward(rm), 0.5, cfg)
    assert rewards.shape == (6,) and adv.shape == (6, 4)
    assert (adv[batch.mask == 0] == 0).all()
    seen = []
    rewards_loss, adv_loss = score_and_advantages(
        batch,
        rm_reward(rm),
        0.5,
        PPOConfig(batch_size=6, kl_placement="loss"),
        advantage_fn=lambda *a: seen.append(a[4]) or kl_shaped_advantages(*a),
    )
    assert seen == [0.0] and torch.equal(adv_loss, adv)  # no KL yet: the same advantages
    trained = copy.deepcopy(policy).train()
    opt = torch.optim.Adam(trained.parameters(), lr=cfg.lr)
    stats = ppo_update(trained, opt, batch, adv, 0.5, cfg)
    assert set(stats) == {"policy/clipfrac_avg", "policy/approxkl_avg", "loss/policy_avg"}
    metrics = batch_metrics(batch, rewards, stats, 0.5)
    assert list(metrics) == list(TRAIN_METRICS)  # every metric, in the documented order
    assert metrics["objective/kl"] == 0.0 and metrics["beta"] == 0.5
