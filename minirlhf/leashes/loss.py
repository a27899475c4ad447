"""The leash in the loss (GRPO, Shao et al. 2024; TRL's ``GRPOTrainer`` with ``beta > 0``): the
advantages come from the score alone and ``beta`` times the mean k3 of the current policy
against the reference is added to the clipped surrogate (:func:`grpo_token_loss`)."""

import torch

from . import Leash
from .reward import ppo_token_loss

__all__ = ["k3_loss_term", "grpo_token_loss", "LEASH"]


def k3_loss_term(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    """Return the mean over masked tokens of ``k3 = exp(d) - d - 1`` with
    ``d = clamp(ref_logp - new_logp, -kl_clamp, kl_clamp)``: GRPO's leash as a loss term (to
    be multiplied by beta), with its gradient through ``new_logp``. On-policy its expected
    gradient is that of the forward KL, ``KL(ref || policy)``, although GRPO's paper writes
    the penalty as the reverse ``KL(policy || ref)``; TRL 1.12's default
    ``use_bias_correction_kl=True`` multiplies k3 by the ratio, which gives the reverse KL's
    gradient.

    Defined in chapter 5 (the leash in the loss); part of chapter 8's :func:`grpo_token_loss`.
    """
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()


def grpo_token_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    kl_clamp: float = 10.0,
) -> torch.Tensor:
    """Return GRPO's loss (a scalar tensor to minimise): the clipped surrogate of
    :func:`ppo_token_loss` plus ``beta`` times the mean k3 of :func:`k3_loss_term`, both
    averaged over every token the mask keeps.

    new_logp, old_logp, ref_logp, advantages, mask: (B, T); each completion's group advantage
    is copied to its kept tokens. Shao et al. 2024 average each completion's tokens first and
    then the completions; this averages all kept tokens at once, as TRL's ``GRPOTrainer``
    does with its default ``loss_type="dapo"`` (``trl/trainer/grpo_trainer.py``).

    Defined in chapter 8 (exercise 8.2).
    """
    return ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon) + beta * k3_loss_term(
        new_logp, ref_logp, mask, kl_clamp
    )


def surrogate_plus_leash(fn, new_logp, batch, adv, beta, cfg):
    """The update's loss: ``fn`` (the signature of :func:`grpo_token_loss`), the surrogate plus
    beta times the leash, computed from the current policy."""
    return fn(new_logp, batch.old_logp, batch.ref_logp, adv, batch.mask, cfg.epsilon, beta, cfg.kl_clamp)


LEASH = Leash(
    "loss",
    __name__,
    "grpo_token_loss",
    surrogate_plus_leash,
    ("new_logp", "old_logp", "ref_logp", "advantages", "mask", "epsilon", "beta", "kl_clamp"),
    "GRPO: beta times k3 of the current policy added to the loss (TRL's GRPOTrainer)",
)
