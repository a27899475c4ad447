"""GRPO's estimator (Shao et al. 2024): each completion's reward against its group's mean, divided
by the group's std (:func:`minirlhf.ppo.group_advantages`)."""

from ..ppo import group_advantages
from . import Estimator, copied_to_tokens

ESTIMATOR = Estimator(
    "group",
    group_advantages,
    copied_to_tokens,
    "GRPO: (r - the group's mean) / (the group's std + eps)",
    min_group=2,
    trl={"scale_rewards": "group"},
)
