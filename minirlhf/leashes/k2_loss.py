"""The leash in the loss as k2 instead of k3: ``beta`` times the mean of
``k2 = (log pi - log ref)^2 / 2`` over the kept tokens, added to the clipped surrogate.

Why k2 and not k3 (chapter 1 compares their values): what a loss term does is its gradient.
Differentiated through the policy's log-probs on the policy's own samples, k2's gradient is
``E[(log pi - log ref) grad log pi]``, which is the gradient of the reverse KL(pi || ref), the
KL the objective names; k3's is that of the forward KL(ref || pi) (see
:func:`minirlhf.leashes.loss.k3_loss_term`). No arm of the book uses it yet: it is the example
of adding a leash (``MAINTAINING.md``), run from the command line by the arm
``grpo-k2-verifier``.
"""

import torch

from . import Leash
from .loss import surrogate_plus_leash
from .reward import ppo_token_loss

__all__ = ["k2_loss_term", "k2_token_loss", "LEASH"]


def k2_loss_term(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    """Return the mean over masked tokens of ``k2 = d^2 / 2`` with
    ``d = clamp(new_logp - ref_logp, -kl_clamp, kl_clamp)``, with its gradient through
    ``new_logp`` (to be multiplied by beta)."""
    d = (new_logp - ref_logp).clamp(-kl_clamp, kl_clamp)
    return (0.5 * d**2 * mask).sum() / mask.sum()


def k2_token_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    kl_clamp: float = 10.0,
) -> torch.Tensor:
    """Return the clipped surrogate of :func:`~minirlhf.leashes.reward.ppo_token_loss` plus
    ``beta`` times :func:`k2_loss_term`, both averaged over every token the mask keeps: the
    signature of GRPO's ``grpo_token_loss``, with k2 in place of k3."""
    return ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon) + beta * k2_loss_term(
        new_logp, ref_logp, mask, kl_clamp
    )


LEASH = Leash(
    "k2-loss",
    __name__,
    "k2_token_loss",
    surrogate_plus_leash,
    ("new_logp", "old_logp", "ref_logp", "advantages", "mask", "epsilon", "beta", "kl_clamp"),
    "beta times k2 of the current policy added to the loss: the reverse KL's gradient on-policy",
)
