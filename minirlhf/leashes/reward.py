"""The leash in the reward (InstructGPT; TRL's PPO trainer; chapter 5's recipe): ``-beta * kl_t``
is a per-token reward that reaches the advantages through the returns
(:func:`minirlhf.estimators.batch.kl_shaped_advantages`), so the loss is the clipped surrogate
alone and the leash is never counted twice."""

import torch

from . import Leash

__all__ = ["ppo_token_loss", "LEASH"]


def ppo_token_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
) -> torch.Tensor:
    """Return the clipped-surrogate loss (a scalar tensor to minimise): minus the mean over
    masked tokens of ``min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)``.

    new_logp, old_logp, advantages, mask: (B, T); ``ratio = exp(new_logp - old_logp)``.
    The leash is already inside the advantages (:func:`kl_shaped_advantages`).

    Defined in chapter 5.
    """
    ratio = torch.exp(new_logp - old_logp)  # (B, T)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
    return -(surrogate * mask).sum() / mask.sum()


def surrogate(fn, new_logp, batch, adv, beta, cfg):
    """The update's loss: ``fn`` (the signature of :func:`ppo_token_loss`) on the batch; the
    leash is inside the advantages already."""
    return fn(new_logp, batch.old_logp, adv, batch.mask, cfg.epsilon)


LEASH = Leash(
    "reward",
    __name__,
    "ppo_token_loss",
    surrogate,
    ("new_logp", "old_logp", "advantages", "mask", "epsilon"),
    "chapter 5: -beta * kl_t as a per-token reward, inside the advantages (InstructGPT, TRL's PPO)",
    in_reward=True,
)
