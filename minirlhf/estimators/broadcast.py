"""The original project's estimator (chapter 5, "Ours beside the original run"): the score
standardized over the batch, then copied to every token of its completion, with no baseline
per position and no leash inside (:func:`broadcast_advantages`); the leash goes in the loss."""

import torch

from . import Estimator, to_tokens
from .batch import standardized_scores

__all__ = ["broadcast_advantages", "ESTIMATOR"]


def broadcast_advantages(scores: torch.Tensor, clip: float = 3.0, eps: float = 1e-4) -> torch.Tensor:
    """Return one advantage per completion (B,): ``clip((s - mean) / (std + eps), -clip, clip)``
    over the batch (:func:`~minirlhf.estimators.batch.standardized_scores`), which the
    estimator copies to every kept token. The recipe of the project chapter 5 rebuilds, as its
    text states it: the batch mean is the baseline, and every token of a completion gets the
    same advantage. No TRL trainer computes it."""
    return standardized_scores(scores, clip, eps)


def _broadcast(fn, batch, rewards, reward_fn, beta, cfg) -> torch.Tensor:
    # fn(scores, clip, eps) gives one advantage per completion, copied to its kept tokens
    a = fn(rewards, cfg.adv_clip, cfg.adv_eps)  # (B,)
    return to_tokens(a, rewards, batch.mask, "broadcast advantages", f"estimator {cfg.advantages!r}")


ESTIMATOR = Estimator(
    "broadcast",
    broadcast_advantages,
    _broadcast,
    ("scores", "clip", "eps"),
    "the original project's: the batch-standardized score, copied to every token; the leash in the loss",
)
