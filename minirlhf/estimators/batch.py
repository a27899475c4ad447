"""Chapter 5's estimator: the score standardized over the batch (:func:`standardized_scores`),
then the return-to-go with the leash in it, minus the batch mean of each position
(:func:`kl_shaped_advantages`)."""

import torch

from .. import leashes
from ..ppo import check_token_shapes
from . import Estimator

__all__ = ["standardized_scores", "kl_shaped_advantages", "leashed_advantages", "ESTIMATOR"]


def standardized_scores(scores: torch.Tensor, clip: float = 3.0, eps: float = 1e-4) -> torch.Tensor:
    """Return ``clip((s - mean) / (std + eps), -clip, clip)`` for a batch of scores (B,).

    ``std`` is the population std (divide by B). With every score equal, all are 0.

    Defined in chapter 5.
    """
    if scores.dim() != 1 or scores.numel() < 1:
        raise ValueError(f"scores must be a non-empty 1-D tensor, got shape {tuple(scores.shape)}")
    if clip <= 0 or eps <= 0:
        raise ValueError(f"clip and eps must be > 0, got clip={clip}, eps={eps}")
    z = (scores - scores.mean()) / (scores.std(unbiased=False) + eps)
    return z.clamp(-clip, clip)


def kl_shaped_advantages(
    scores: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    kl_clamp: float = 10.0,
) -> torch.Tensor:
    """Return the advantages (B, T) of the leash in the reward, with a batch baseline.

    scores: (B,), one (standardized) score per completion; old_logp, ref_logp, mask: (B, T),
    the mask 1 on each completion's tokens (a prefix of the row, at least one token).

    1. per-token reward ``r_t = -beta * kl_t`` on kept tokens, with
       ``kl_t = clamp(old_logp_t - ref_logp_t, -kl_clamp, kl_clamp)``, plus the score at the
       completion's last kept token;
    2. return-to-go ``G_t = r_t + r_{t+1} + ...`` (no discount);
    3. ``A_t = G_t - b_t``, where ``b_t`` is the mean of ``G_t`` over the rows that keep
       position t; 0 on the tokens the mask drops.

    Defined in chapter 5.
    """
    check_token_shapes(mask, scores, old_logp=old_logp, ref_logp=ref_logp)
    mask = mask.to(old_logp.dtype)
    kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)  # (B, T), fixed at rollout
    rewards = -beta * kl * mask  # (B, T): the leash, token by token
    last = (mask.sum(1).long() - 1).clamp(min=0)  # (B,): each completion's last token
    rewards = rewards + torch.nn.functional.one_hot(last, mask.shape[1]).to(rewards.dtype) * scores[:, None]
    returns = rewards.flip(1).cumsum(1).flip(1) * mask  # (B, T): G_t, the reward from t on
    kept = mask.sum(0)  # (T,): how many completions reach each position
    baseline = returns.sum(0) / kept.clamp(min=1)  # (T,)
    return (returns - baseline) * mask


# ---------------------------------------------------- SHOWN VERBATIM IN CHAPTER 5
# Chapter 5 shows this function as it is: lines within 77 columns, and `make notebooks 05`
# after an edit (see the same banner in minirlhf/ppo.py).
# fmt: off


def leashed_advantages(fn, batch, rewards, reward_fn, beta, cfg):
    """Return the advantages (B, T): the scores standardized over the
    batch, then ``fn`` (the signature of :func:`kl_shaped_advantages`)
    puts them and the leash into each token, with beta = 0 when the
    leash is in the loss instead.

    Defined in chapter 5.
    """
    z = standardized_scores(rewards, cfg.adv_clip, cfg.adv_eps)  # (B,)
    leash = beta if leashes.get(cfg.kl_placement).in_reward else 0.0
    return fn(z, batch.old_logp, batch.ref_logp, batch.mask, leash,
              cfg.kl_clamp)  # (B, T)

# fmt: on


ESTIMATOR = Estimator(
    "batch",
    kl_shaped_advantages,
    leashed_advantages,
    ("scores", "old_logp", "ref_logp", "mask", "beta", "kl_clamp"),
    "chapter 5: the standardized score against the batch mean of each position, the leash inside",
    leash_in_advantages=True,
)
