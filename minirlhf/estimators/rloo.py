"""RLOO's estimator (Kool et al. 2019; Ahmadian et al. 2024): each reward against the mean of the
other rewards of its group (:func:`minirlhf.ppo.rloo_advantages`)."""

from ..ppo import rloo_advantages
from . import Estimator, copied_to_tokens

ESTIMATOR = Estimator(
    "rloo",
    rloo_advantages,
    copied_to_tokens,
    "RLOO: r minus the mean of the other G - 1 rewards of the group",
    min_group=2,
)
