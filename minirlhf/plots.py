"""The experiment's figures: each arm's curve over the iterations, the mean over seeds with a
band for its 95% interval (:func:`band`), in the arm's own color and line style
(:mod:`minirlhf.arms`); and the TRL bridge's, ours beside TRL's (:func:`side_by_side_figure`)."""

from __future__ import annotations

import numpy as np

from .arms import LABELS, REGISTRY
from .stats import mean_ci95

__all__ = ["FIGURES", "band", "plot_curves", "TRL_COLOR", "plot_side_by_side", "side_by_side_figure"]

TRL_COLOR = "0.2"  # TRL's curves: dark gray, dashed, beside the arm's own color


def band(ax, runs, color, label, *, x=None, ls="-", floor=None):
    """Draw the mean of ``runs`` as a line and its 95% interval across seeds as a band; return
    the band (what ``ax.fill_between`` returns), or None for a single run, which has no interval.

    ``runs`` is a list of per-seed curves, all of one length (seeds, points); the line is the
    mean over the seeds at each point, the band its Student's t 95% interval
    (:func:`minirlhf.stats.mean_ci95`), both in ``color``, the line ``ls`` and labelled
    ``label`` for the legend. ``x`` gives the points' positions (default 0, 1, 2, ...);
    ``floor``, when given, cuts the band's lower edge there (0 for a quantity that cannot be
    negative, such as a share or a KL).
    """
    runs = np.asarray(runs, dtype=float)
    x = np.arange(runs.shape[1]) if x is None else x
    mean = runs.mean(0)
    ax.plot(x, mean, color=color, ls=ls, lw=2, label=label)
    if len(runs) < 2:
        return None
    half = np.array([mean_ci95(runs[:, i])[1] for i in range(runs.shape[1])])
    lower = mean - half if floor is None else np.maximum(mean - half, floor)
    return ax.fill_between(x, lower, mean + half, color=color, alpha=0.2, lw=0)


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
        runs = [log[key] for log in results["arms"][arm].values()]  # (seeds, iterations + 1)
        color, ls = (REGISTRY[arm].color, REGISTRY[arm].linestyle) if arm in REGISTRY else (None, "-")
        band(ax, runs, color, f"{LABELS.get(arm, arm)} (beta {results['settings']['beta'][arm]:g})", ls=ls)
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


# ----------------------------------------------------------------------------- the TRL bridge's

SIDE_BY_SIDE_TITLES = {
    "accuracy": "Accuracy: ours and TRL's, from the same start",
    "kl": "KL to the start: ours and TRL's, by the same code",
}


def plot_side_by_side(results: dict, key: str = "accuracy", axes=None):
    """Draw ours and TRL's ``key`` per iteration, one panel per arm (mean over seeds, band = 95%
    interval), from the results of :func:`minirlhf.trl.compare.compare`; return the axes."""
    import matplotlib.pyplot as plt

    from .trl.settings import TRL_ARMS  # here: the bridge's comparison imports the experiment, which imports this

    arms = results["settings"]["arms"]
    if axes is None:
        _, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.0), sharey=True, squeeze=False)
        axes = axes[0]
    labels = {
        "accuracy": "accuracy (greedy, 400 prompts)",
        "kl": "KL to reference (nats/token)",
        "rm_score": "mean RM score",
    }
    for ax, arm in zip(axes, arms):
        trl_name = f"TRL {TRL_ARMS[arm].trainer.upper()}"
        for side, color, ls, name in (
            ("ours", REGISTRY[TRL_ARMS[arm].ours].color, "-", "ours"),
            ("trl", TRL_COLOR, "--", trl_name),
        ):
            logs = results[side][arm]
            if logs:
                band(ax, [log[key] for log in logs.values()], color, name, ls=ls)
        ax.set_title(arm)
        ax.set_xlabel("iteration (64 completions)")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel(labels.get(key, key))
    return axes


def side_by_side_figure(results: dict, key: str = "accuracy", narrow: bool = False):
    """Return a figure of ours and TRL's ``key`` (``"accuracy"`` or ``"kl"``), one panel per arm:
    two panels a row, or with ``narrow`` one (for a phone's width)."""
    import matplotlib.pyplot as plt

    arms = results["settings"]["arms"]
    cols = 1 if narrow else 2
    rows = (len(arms) + cols - 1) // cols
    size = (3.6, 2.3 * rows + 0.5) if narrow else (6.4, 2.7 * rows + 0.4)
    fig, axes = plt.subplots(rows, cols, figsize=size, sharey=True, squeeze=False)
    plot_side_by_side(results, key, axes=axes.ravel()[: len(arms)])
    for ax in axes.ravel()[len(arms) :]:
        ax.set_visible(False)
    label = axes[0, 0].get_ylabel()
    if narrow:  # a short label fits the panel's height
        label = {"accuracy": "accuracy", "kl": "KL (nats/token)"}.get(key, label)
    for ax in axes.ravel():
        ax.set_ylabel(label if ax in axes[:, 0] else "")
    for ax in axes[:-1].ravel():
        ax.set_xlabel("")
    title = SIDE_BY_SIDE_TITLES.get(key, key)
    fig.suptitle(title.replace(": ", ":\n") if narrow else title, fontsize=10 if narrow else 12)
    fig.tight_layout()
    return fig
