"""Chapter 8's small studies of GRPO: what a group does to one completion's advantage, how
often a group has nothing to teach, and how the loss weighs the tokens of short and long
completions.

The group estimators themselves live in the engine, one module each in
:mod:`minirlhf.estimators` (``group_advantages``, ``group_centred_advantages``,
``rloo_advantages``); this module only measures them.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import estimators

__all__ = ["verifier_group", "all_equal_chance", "token_weights"]


def verifier_group(group_size: int, n_right: int, estimator: str = "group") -> tuple[float, float]:
    """Return (advantage of a right answer, advantage of a wrong one) in a group of
    ``group_size`` verifier rewards of which ``n_right`` are 1 and the rest 0, under the
    group estimator ``estimator`` (an estimator of :mod:`minirlhf.estimators` that
    gives each completion one advantage from its group's rewards: ``per_group``). A side
    with no member (``n_right`` 0 or ``group_size``) gets NaN.
    """
    grouped = tuple(name for name in estimators.names() if estimators.get(name).per_group)
    if estimator not in grouped:
        raise ValueError(f"estimator must be one of {grouped}, got {estimator!r}")
    if not 0 <= n_right <= group_size:
        raise ValueError(f"n_right must be between 0 and group_size ({group_size}), got {n_right}")
    rewards = torch.tensor([1.0] * n_right + [0.0] * (group_size - n_right), dtype=torch.float64)
    adv = estimators.get(estimator).fn(rewards, group_size).tolist()
    right = adv[0] if n_right > 0 else float("nan")
    wrong = adv[-1] if n_right < group_size else float("nan")
    return right, wrong


def all_equal_chance(p_right, group_size: int) -> np.ndarray:
    """Return the chance that ``group_size`` independent answers, each right with chance
    ``p_right`` (a number or an array, one per prompt), are all right or all wrong:
    ``p ** G + (1 - p) ** G``. Such a group's advantages are all 0."""
    p = np.asarray(p_right, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("p_right must lie in [0, 1]")
    return p**group_size + (1 - p) ** group_size


def token_weights(mask: torch.Tensor) -> dict:
    """Return the weight each kept token gets in the loss, per completion length, under the
    two normalizations: ``"token"`` divides by all kept tokens of the batch (this book, DAPO's
    token-level loss, TRL's default ``loss_type="dapo"``), ``"completion"`` by the
    completion's own length and then by the number of completions (Shao et al. 2024's
    equation, TRL's ``loss_type="grpo"``). Dr. GRPO's constant normalizer (Liu et al. 2025;
    TRL's ``loss_type="dr_grpo"``, the batch size times ``max_completion_length``) gives every
    token a weight that no completion's length changes; it is not computed here.

    Returns ``{length: {"count": completions of that length, "token": weight,
    "completion": weight}}``, lengths in increasing order.
    """
    if mask.dim() != 2 or mask.shape[0] < 1:
        raise ValueError(f"mask must be (B, T) with B >= 1, got shape {tuple(mask.shape)}")
    lengths = mask.sum(1).long()
    if bool((lengths < 1).any()):
        raise ValueError("every completion must keep at least one token")
    B, n_tokens = mask.shape[0], float(mask.sum())
    out = {}
    for n in sorted(set(lengths.tolist())):
        out[n] = {"count": int((lengths == n).sum()), "token": 1.0 / n_tokens, "completion": 1.0 / (B * n)}
    return out
