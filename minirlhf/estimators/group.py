"""GRPO's estimator (Shao et al. 2024): each completion's reward against its group's mean, divided
by the group's std (:func:`group_advantages`)."""

import torch

from . import PER_GROUP, Estimator, copied_to_tokens
from ._groups import check_groups, same_groups

__all__ = ["group_advantages", "ESTIMATOR"]


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Return GRPO's advantages (B,): each reward against the other rewards of its group.

    rewards: (B,), the ``group_size`` (G) completions of each prompt side by side: rows 0 to
    G - 1 answer the first prompt, rows G to 2G - 1 the second, and so on.
    ``A_i = (r_i - mean_group) / (std_group + eps)`` (Shao et al. 2024, outcome supervision).
    A group whose rewards are all equal gets exactly 0 for each completion (never NaN): it
    carries no signal. The caller copies ``A_i`` to every completion token (0 on padding).

    ``std_group`` is the sample std (divide by G - 1), as TRL's ``GRPOTrainer`` computes it
    (``trl/trainer/grpo_trainer.py``, ``scale_rewards="group"``: ``nanstd`` of
    ``trl/trainer/utils.py`` applies Bessel's correction), with the same ``eps`` = 1e-4. The
    paper writes ``std`` without saying which; at G = 8 the sample std is sqrt(8 / 7), about
    1.07 times the population std, so the advantages are that much smaller. Chapter 5's
    :func:`standardized_scores` uses the population std of the batch.

    Defined in chapter 8 (exercise 8.1).
    """
    check_groups(rewards, group_size, eps)
    grouped = rewards.view(-1, group_size)  # (B / G, G): one row per prompt
    mean = grouped.mean(1, keepdim=True)
    std = grouped.std(1, keepdim=True)  # sample std, as TRL
    same = same_groups(rewards, group_size)  # all equal: no signal
    adv = torch.where(same, torch.zeros_like(grouped), (grouped - mean) / (std + eps))
    return adv.reshape(-1)


ESTIMATOR = Estimator(
    "group",
    group_advantages,
    copied_to_tokens,
    PER_GROUP,
    "GRPO: (r - the group's mean) / (the group's std + eps)",
    min_group=2,
    trl={"scale_rewards": "group"},
)
