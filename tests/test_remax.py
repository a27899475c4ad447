"""ReMax's estimator: the greedy completion's reward as each sample's baseline."""

import pytest
import torch

from minirlhf import arms as arm_table
from minirlhf import experiment, task
from minirlhf.estimators import get
from minirlhf.estimators.remax import remax_advantages
from minirlhf.model import GPTConfig, TinyGPT, generate, make_generator
from minirlhf.ppo import PPOConfig, rollout, score_and_advantages, verifier_reward


def test_remax_subtracts_the_greedy_reward_by_hand():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    greedy = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    assert remax_advantages(r, greedy).tolist() == [0.0, -1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="one shape"):
        remax_advantages(r, greedy[:3])
    with pytest.raises(ValueError, match="finite"):
        remax_advantages(r, torch.tensor([1.0, float("nan"), 0.0, 0.0], dtype=torch.float64))


def test_the_rollout_carries_the_greedy_answers_and_the_advantages_use_them():
    cfg = PPOConfig(batch_size=8, advantages="remax", kl_placement="loss")
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).double().eval()
    batch = rollout(policy, policy, task.train_pairs(), cfg, make_generator(0))
    assert torch.equal(batch.extras["greedy"], generate(policy, batch.prompts, greedy=True))
    plain = rollout(policy, policy, task.train_pairs(), PPOConfig(batch_size=8), make_generator(0))
    assert torch.equal(batch.completions, plain.completions)  # the greedy pass draws no random number
    rewards, adv = score_and_advantages(batch, verifier_reward, 0.06, cfg)
    want = rewards - verifier_reward(batch.pairs, batch.prompts, batch.extras["greedy"]).to(rewards.dtype)
    assert torch.equal(adv, want[:, None] * batch.mask)
    with pytest.raises(ValueError, match="puts no leash in the advantages"):
        PPOConfig(advantages="remax")
    assert get("remax").min_group == 1


def test_the_remax_arm_runs_by_name():
    from minirlhf.evaluation import EvalSet

    arm = arm_table.REGISTRY["remax-verifier"]
    assert (arm.reward, arm.trainer, arm.settings["advantages"]) == ("verifier", "ppo", "remax")
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    cfg = PPOConfig(iterations=2, batch_size=8)
    _, log = experiment.run_arm(
        "remax-verifier", policy, rm, 0, None, cfg, EvalSet(task.eval_pairs()[:40]), progress=False
    )
    assert len(log["accuracy"]) == 3 and log["beta0"] == arm.beta and "frac_reward_zero_std" not in log
