"""The experiment's figures: each arm's curve over the iterations, the mean over seeds with a
band for its 95% interval, in the arm's own color and line style (:mod:`minirlhf.arms`)."""

from __future__ import annotations

import numpy as np

from .arms import LABELS, REGISTRY
from .stats import mean_ci95

__all__ = ["FIGURES", "plot_curves"]


def plot_curves(results: dict, key: str, ylabel: str, title: str, ax=None, landmarks: dict | None = None):
    """Draw ``key`` per iteration for every arm (mean over seeds, band = 95% interval); return the axes.

    ``landmarks`` ({label: value}) adds labelled dashed lines, e.g. the RM's score of right
    answers and of garbage, so a small move can be read against the whole scale.

    Defined in chapter 5.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.8))
    for i, (label, value) in enumerate((landmarks or {}).items()):
        ax.axhline(value, color="0.4", ls="--" if i == 0 else ":", lw=1.2, label=f"RM score of {label}")
    for arm in results["arms"]:
        runs = np.array([log[key] for log in results["arms"][arm].values()])  # (seeds, iterations + 1)
        x = np.arange(runs.shape[1])
        mean = runs.mean(0)
        color, ls = (REGISTRY[arm].color, REGISTRY[arm].linestyle) if arm in REGISTRY else (None, "-")
        ax.plot(
            x,
            mean,
            color=color,
            ls=ls,
            lw=2,
            label=f"{LABELS.get(arm, arm)} (beta {results['settings']['beta'][arm]:g})",
        )
        if len(runs) > 1:
            half = np.array([mean_ci95(runs[:, i])[1] for i in range(runs.shape[1])])
            ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, lw=0)
    own = results["settings"].get("arm_settings", {})
    grouped = any(own.get(arm, {}).get("group_size", 1) > 1 for arm in results["arms"])  # count completions
    batch = results["settings"]["ppo"]["batch_size"]
    xlabel = f"iteration ({batch} completions each)" if grouped else "PPO iteration (64 prompts each)"
    if "dpo" in results["settings"]:  # a DPO arm: say what one of its points is
        dpo = results["settings"]["dpo"]
        xlabel = (
            f"{'iteration' if grouped else 'PPO iteration'}, or DPO evaluation "
            f"(every {dpo['eval_every']} steps of {dpo['batch_size']} pairs)"
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    return ax


FIGURES = {
    "ppo_accuracy.png": ("accuracy", "true accuracy (greedy, 400 eval prompts)", "What the verifier says"),
    "ppo_rm_score.png": ("rm_score", "mean RM score of greedy answers", "What the reward model says"),
    "ppo_kl.png": ("kl", "KL to reference (nats per token)", "How far each arm moved"),
}
