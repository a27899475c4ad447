"""Half of Dr. GRPO (Liu et al. 2025): each completion's reward against its group's mean, not
divided by the group's std (:func:`group_centred_advantages`)."""

import torch

from . import PER_GROUP, Estimator, copied_to_tokens
from ._groups import check_groups, same_groups

__all__ = ["group_centred_advantages", "ESTIMATOR"]


def group_centred_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Return ``r_i - mean_group`` (B,): :func:`group_advantages` without dividing by the
    group's std, so that a group of nearly equal rewards is not scaled up. That is one of the
    two changes of Liu et al. 2025 ("Dr. GRPO"); the other replaces each completion's
    division by its own length with a constant (TRL's ``loss_type="dr_grpo"``), where this
    book's loss keeps DAPO's batch token mean. ``eps`` is unused (the signature of the other
    group estimators). A group of equal rewards gets exactly 0. TRL: ``GRPOTrainer`` with
    ``scale_rewards="none"`` (``trl/trainer/grpo_trainer.py``).
    """
    check_groups(rewards, group_size, eps)
    grouped = rewards.view(-1, group_size)  # (B / G, G)
    same = same_groups(rewards, group_size)
    adv = torch.where(same, torch.zeros_like(grouped), grouped - grouped.mean(1, keepdim=True))
    return adv.reshape(-1)


ESTIMATOR = Estimator(
    "group-centred",
    group_centred_advantages,
    copied_to_tokens,
    PER_GROUP,
    "half of Dr. GRPO: r minus the group's mean, no division by its std",
    min_group=2,
    trl={"scale_rewards": "none"},
)
