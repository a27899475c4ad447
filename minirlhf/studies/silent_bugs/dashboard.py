"""A run's dashboard: the metrics it shows by trainer, their x axis, and the figure.

:data:`DASHBOARD` names the panels of a run (TRL's names; ``kl`` and ``accuracy`` are the
evaluation's), :data:`KEPT` what a stored run keeps besides them and :data:`X_LABEL` what one
point of a curve is, each keyed by the trainer of the run's arm, so that nothing here compares
a trainer's name. :func:`curve_x` puts every panel on one axis, and :func:`plot_dashboard`
draws a bug's run beside the correct one.
"""

from __future__ import annotations

import numpy as np

from ...arms import REGISTRY
from ...dpo import DPOConfig
from ...stats import mean_ci95
from .copies import BUGS

__all__ = ["DASHBOARD", "KEPT", "X_LABEL", "curve_x", "plot_dashboard"]

# The metrics a run's dashboard shows (TRL's names; "kl" and "accuracy" are the evaluation's),
# by the trainer of the arm.
DASHBOARD = {
    "ppo": (
        "accuracy",
        "kl",
        "objective/kl",
        "objective/entropy",
        "policy/clipfrac_avg",
        "policy/approxkl_avg",
        "val/completion_length",
        "objective/scores",
    ),
    "dpo": (
        "accuracy",
        "kl",
        "rewards/accuracies",
        "rewards/margins",
        "logps/chosen",
        "logps/rejected",
        "rewards/chosen",
        "rewards/rejected",
    ),
}


# What a run's stored log keeps besides its dashboard, by trainer: for DPO, the step of each
# evaluation (the x of its `accuracy` and `kl`), the share of each kind of greedy answer at each
# evaluation (``kinds``: right, near-miss, other wrong, malformed) and the held-out log-probs of
# the right answer and of two kinds of wrong one (minirlhf.dpo.HELDOUT_LOGPS), which say what a
# DPO run learns to write.
KEPT = {
    "ppo": (),
    "dpo": ("steps", "kinds", "heldout/logps_correct", "heldout/logps_random", "heldout/logps_near_miss"),
}

# The x axis of a dashboard, by trainer: what one point of a curve is.
X_LABEL = {"ppo": "iteration", "dpo": "DPO step"}

# How far apart on that axis a trainer's evaluations are, for a log that does not keep their
# steps: PPO evaluates after each iteration, DPO every eval_every steps.
_EVAL_EVERY = {"ppo": 1, "dpo": DPOConfig().eval_every}

# The metrics of each trainer read by the evaluation (one point before training, then one after
# each iteration, or every few DPO steps); every other metric is logged on each training batch.
_EVALUATED = ("accuracy", "kl", "rm_score")


def _trainer(arm: str) -> str:
    # The trainer of an arm: the key of its dashboard in the tables above.
    return REGISTRY[arm].trainer


def curve_x(log: dict, metric: str, trainer: str) -> np.ndarray:
    """Return the x of each point of ``metric``'s curve in ``log``, on one axis for the whole
    dashboard (:data:`X_LABEL`): for PPO and GRPO, the iteration (an evaluation's point 0 is
    before training, point i after iteration i; a batch metric's point i is iteration i + 1);
    for DPO, the step (an evaluation at the steps the log records, a batch metric at its own
    step, 1 to the last)."""
    if trainer not in X_LABEL:
        raise ValueError(f"trainer must be one of {', '.join(X_LABEL)}, got {trainer!r}")
    n = len(log[metric])
    if metric not in _EVALUATED:
        return np.arange(1, n + 1)
    if "steps" in KEPT[trainer] and "steps" in log:
        return np.asarray(log["steps"][:n])
    return np.arange(n) * _EVAL_EVERY[trainer]


def plot_dashboard(
    runs: dict, name: str, metrics=None, axes=None, label: str | None = None, narrow: bool = False, bold: bool = True
):
    """Draw a bug's run beside the correct one, one panel per metric (default: the arm's
    :data:`DASHBOARD`), mean over seeds with a 95% band; with ``bold``, the panels that
    separate the two runs (:func:`~.tells.separating`) are titled in bold. Every panel has
    the same x axis, the iteration or the DPO step (:func:`curve_x`), named under the last
    panel of each column. ``label`` names the buggy run in the legend
    (default: the bug's name); ``narrow`` draws two panels a row instead of four. Return the
    axes."""
    import matplotlib.pyplot as plt

    from ...palette import GRAY, ORANGE
    from .tells import separating  # tells reads this module's tables

    bug = BUGS[name]
    metrics = list(metrics or DASHBOARD[_trainer(bug.arm)])
    tells = separating(runs, name) if bold else ()
    if axes is None:
        cols = min(2 if narrow else 4, len(metrics))
        rows = (len(metrics) + cols - 1) // cols
        size = (3.6, 1.9 * rows) if narrow else (2.0 * cols, 2.3 * rows)
        _, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    grid = np.asarray(axes, dtype=object)
    cols = grid.shape[1] if grid.ndim == 2 else 1  # a flat list of axes: one column
    axes = list(np.ravel(axes))
    trainer = _trainer(bug.arm)
    for i, (ax, metric) in enumerate(zip(axes, metrics)):
        for who, logs, color in (("correct", runs["correct"][bug.arm], GRAY), (label or name, runs[name], ORANGE)):
            curves = np.array([log[metric] for log in logs.values()], dtype=float)
            x = curve_x(next(iter(logs.values())), metric, trainer)
            mean = curves.mean(0)
            ax.plot(x, mean, color=color, lw=2, label=who)
            if len(curves) > 1:
                half = np.array([mean_ci95(curves[:, j])[1] for j in range(curves.shape[1])])
                ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, lw=0)
        ax.set_title(metric, fontsize=9, fontweight="bold" if metric in tells else "normal")
        if i + cols >= len(metrics):  # every panel on one x axis, named under each column's last
            ax.set_xlabel(X_LABEL[trainer], fontsize=8)
        ax.tick_params(labelsize=7 if narrow else 8)
        ax.grid(alpha=0.3)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    axes[0].legend(frameon=False, fontsize=8)
    return axes
