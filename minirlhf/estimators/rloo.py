"""RLOO's estimator (Kool et al. 2019; Ahmadian et al. 2024): each completion's reward against
the mean of the other rewards of its group (:func:`rloo_advantages`)."""

import torch

from . import PER_GROUP, Estimator, copied_to_tokens
from ._groups import check_groups, same_groups

__all__ = ["rloo_advantages", "ESTIMATOR"]


def rloo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Return ``r_i - mean of the other G - 1 rewards of the group`` (B,): the leave-one-out
    baseline of RLOO (Kool et al. 2019; Ahmadian et al. 2024), which does not use the
    completion's own reward in its baseline. It equals ``G / (G - 1)`` times
    :func:`group_centred_advantages`. ``eps`` is unused. TRL's ``RLOOTrainer`` computes the
    same baseline (``trl/trainer/rloo_trainer.py``) but differs elsewhere: a ratio per
    completion, the KL in the reward.
    """
    check_groups(rewards, group_size, eps)
    grouped = rewards.view(-1, group_size)  # (B / G, G)
    others = (grouped.sum(1, keepdim=True) - grouped) / (group_size - 1)
    same = same_groups(rewards, group_size)
    adv = torch.where(same, torch.zeros_like(grouped), grouped - others)
    return adv.reshape(-1)


ESTIMATOR = Estimator(
    "rloo",
    rloo_advantages,
    copied_to_tokens,
    PER_GROUP,
    "RLOO: r minus the mean of the other G - 1 rewards of the group",
    min_group=2,
)
