"""The original project's recipe as an estimator and two arms: the batch-standardized score
copied to every token, the leash in the loss (chapter 5, "The recipe or the start?")."""

import pytest
import torch

from minirlhf import arms as arm_table
from minirlhf import experiment, task
from minirlhf.estimators import get
from minirlhf.estimators.batch import kl_shaped_advantages, standardized_scores
from minirlhf.estimators.broadcast import broadcast_advantages
from minirlhf.model import GPTConfig, TinyGPT, make_generator
from minirlhf.ppo import PPOConfig, rollout, score_and_advantages, verifier_reward


def test_broadcast_is_the_standardized_score_by_hand():
    s = torch.tensor([1.0, 2.0, 3.0, 10.0], dtype=torch.float64)
    z = (s - s.mean()) / (s.std(unbiased=False) + 1e-4)
    assert torch.equal(broadcast_advantages(s), z.clamp(-3, 3))
    assert broadcast_advantages(s, clip=1.0).max().item() == 1.0  # the clip is read, not fixed
    assert torch.equal(broadcast_advantages(torch.ones(3, dtype=torch.float64)), torch.zeros(3, dtype=torch.float64))


def test_every_kept_token_gets_its_completions_score_and_no_baseline_per_position():
    cfg = PPOConfig(batch_size=8, advantages="broadcast", kl_placement="loss")
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).double().eval()
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    rewards, adv = score_and_advantages(batch, verifier_reward, 0.08, cfg)
    z = standardized_scores(rewards, cfg.adv_clip, cfg.adv_eps)
    assert torch.equal(adv, z[:, None] * batch.mask)
    # chapter 5's estimator with the leash in the loss instead: the same scores, but each
    # position against its own batch mean, which differs wherever completions end early
    ours = kl_shaped_advantages(z, batch.old_logp, batch.ref_logp, batch.mask, 0.0, cfg.kl_clamp)
    assert ours.shape == adv.shape
    with pytest.raises(ValueError, match="puts no leash in the advantages"):
        PPOConfig(advantages="broadcast")  # the leash must be in the loss
    assert get("broadcast").min_group == 1


@pytest.mark.parametrize("name, reward, beta", [("original-rm", "rm", 0.5), ("original-verifier", "verifier", 0.08)])
def test_the_original_recipe_arms_run_by_name(name, reward, beta):
    from minirlhf.evaluation import EvalSet

    arm = arm_table.REGISTRY[name]
    assert (arm.reward, arm.beta, arm.trainer) == (reward, beta, "ppo")
    assert arm.settings == {"advantages": "broadcast", "kl_placement": "loss"}
    assert beta == arm_table.REGISTRY[reward].beta  # chapter 5's betas
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    _, log = experiment.run_arm(
        name,
        policy,
        rm,
        0,
        None,
        PPOConfig(iterations=2, batch_size=8),
        EvalSet(task.eval_pairs()[:40]),
        progress=False,
    )
    assert len(log["accuracy"]) == 3 and log["beta0"] == beta
