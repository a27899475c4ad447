"""GRPO's estimator without the division by the group's std, one of the two changes of Liu et
al. 2025 ("Dr. GRPO") (:func:`minirlhf.ppo.group_centred_advantages`)."""

from ..ppo import group_centred_advantages
from . import Estimator, copied_to_tokens

ESTIMATOR = Estimator(
    "group-centred",
    group_centred_advantages,
    copied_to_tokens,
    "half of Dr. GRPO: r minus the group's mean, no division by its std",
    min_group=2,
    trl={"scale_rewards": "none"},
)
