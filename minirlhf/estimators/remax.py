"""ReMax's estimator (Li et al. 2023): each completion's reward against the reward of the greedy
completion of the same prompt, which the policy writes beside the sampled one at rollout."""

import torch

from ..model import generate
from . import Estimator, to_tokens


def remax_advantages(rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
    """Return ``r_i - r(greedy_i)`` (B,): each sampled completion's reward minus the reward of
    the greedy completion of its prompt, ReMax's baseline. It does not depend on the sampled
    completion, so the gradient stays unbiased; it costs one greedy generation per prompt and
    no value model. A sample that is the greedy answer gets exactly 0.
    """
    if rewards.dim() != 1 or rewards.shape != greedy_rewards.shape:
        raise ValueError(
            f"rewards and greedy_rewards must be 1-D and of one shape, got "
            f"{tuple(rewards.shape)} and {tuple(greedy_rewards.shape)}"
        )
    if not (torch.isfinite(rewards).all() and torch.isfinite(greedy_rewards).all()):
        raise ValueError("rewards must be finite numbers (no NaN or inf)")
    return rewards - greedy_rewards


def greedy_completions(policy, prompts, cfg) -> dict:
    """The rollout's extra data: the policy's greedy completion of each prompt (B, 4)."""
    return {"greedy": generate(policy, prompts, greedy=True)}


def against_greedy(fn, batch, rewards, reward_fn, beta, cfg) -> torch.Tensor:
    """Score the greedy completions with the run's reward, then ``fn`` (the signature of
    :func:`remax_advantages`) gives one advantage per completion, copied to its kept tokens."""
    greedy = reward_fn(batch.pairs, batch.prompts, batch.extras["greedy"]).to(rewards.dtype)  # (B,)
    return to_tokens(fn(rewards, greedy), rewards, batch.mask, "ReMax's advantages")


ESTIMATOR = Estimator(
    "remax",
    remax_advantages,
    against_greedy,
    ("rewards", "greedy_rewards"),
    "ReMax: r minus the reward of the greedy completion of the same prompt",
    extras=greedy_completions,
)
