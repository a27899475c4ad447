"""Where the reward model is blind: its held-out pair accuracy by kind of wrong answer (ch. 3, 4).

A near-miss is any wrong answer within 10 of the truth (:data:`minirlhf.task.NEAR_MISS_WINDOW`).
Compared with the truth place by place (ones, tens, hundreds, a missing digit counting as 0),
it differs in one of three ways::

    truth 68    ones digit only     60..67, 69     (the tens and hundreds kept)
                tens digit only     58, 78         (the ones digit kept)
                several digits      59, 70..77     (102 -> 98 too, which also changes the length)

:func:`blind_spot_table` scores every near-miss of every held-out sum against the truth, one
row per way, beside the kinds of wrong answer that are far off: garbage (the training
negatives) and a digit dropped or added. A row's pairs share prompts, and pairs that share a
prompt share the score of its correct answer, so the 95% interval of an accuracy comes from
resampling prompts, not pairs (:func:`prompt_bootstrap`).
"""

from __future__ import annotations

import numpy as np
import torch

from .. import task
from ..model import reward_scores
from ..reward_model import pair_margins

__all__ = [
    "NEAR_MISS_CLASSES",
    "ROWS",
    "LABELS",
    "digits_changed",
    "near_miss_class",
    "every_near_miss",
    "composition",
    "prompt_bootstrap",
    "blind_spot_table",
    "format_table",
]

NEAR_MISS_CLASSES = ("ones_digit", "tens_digit", "several_digits")
FAR_KINDS = ("random", "wrong_length")  # one pair per prompt, drawn by reward_model.pair_margins
ROWS = ("random", "wrong_length", "tens_digit", "several_digits", "ones_digit", "near_miss")
LABELS = {
    "random": "garbage (as in training)",
    "wrong_length": "digit dropped or added",
    "tens_digit": "near-miss, tens digit only",
    "several_digits": "near-miss, several digits",
    "ones_digit": "near-miss, ones digit only",
    "near_miss": "every near-miss",
}
PLACES = (1, 10, 100)


def digits_changed(truth: int, answer: int) -> tuple[int, ...]:
    """Return the place values (1, 10, 100) at which ``answer``'s digit differs from ``truth``'s."""
    if not (0 <= truth <= 999 and 0 <= answer <= 999):
        raise ValueError(f"truth and answer must lie in 0..999, got {truth} and {answer}")
    return tuple(p for p in PLACES if (truth // p) % 10 != (answer // p) % 10)


def near_miss_class(truth: int, answer: int) -> str:
    """Return 'ones_digit', 'tens_digit' or 'several_digits': where a near-miss differs from the truth."""
    if not task.is_near_miss(truth, answer):
        raise ValueError(f"{answer} is not a near-miss of {truth}")
    changed = digits_changed(truth, answer)
    return {(1,): "ones_digit", (10,): "tens_digit"}.get(changed, "several_digits")


def every_near_miss(pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Return (prompt index (M,), answer (M,), class of each): every near-miss of every pair's sum."""
    index, answers, classes = [], [], []
    for i, truth in enumerate(pairs.sum(1).tolist()):
        for n in task.near_misses(truth):
            index.append(i)
            answers.append(n)
            classes.append(near_miss_class(truth, n))
    return torch.tensor(index), torch.tensor(answers), classes


def composition(truths) -> dict[str, int]:
    """Return ``{class: count}`` over every near-miss of every truth (for 68: 9, 2 and 9)."""
    counts = dict.fromkeys(NEAR_MISS_CLASSES, 0)
    for t in truths:
        for n in task.near_misses(int(t)):
            counts[near_miss_class(int(t), n)] += 1
    return counts


def prompt_bootstrap(right, prompt, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Return the (low, high) percentile interval of the fraction ``right``, resampling prompts.

    ``right`` (M,) says whether each pair was ranked right and ``prompt`` (M,) which prompt it
    belongs to; each resample draws as many prompts as there are, with replacement, and keeps
    all of a drawn prompt's pairs.
    """
    right, prompt = np.asarray(right, dtype=float), np.asarray(prompt)
    if right.shape != prompt.shape or right.ndim != 1 or len(right) == 0:
        raise ValueError("right and prompt must be non-empty 1-D arrays of the same length")
    _, group = np.unique(prompt, return_inverse=True)
    hits = np.bincount(group, weights=right)  # (P,): pairs ranked right, per prompt
    sizes = np.bincount(group).astype(float)  # (P,): pairs, per prompt
    draw = np.random.default_rng(seed).integers(len(sizes), size=(n_boot, len(sizes)))
    fractions = hits[draw].sum(1) / sizes[draw].sum(1)  # (n_boot,)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(fractions, [tail, 100 - tail])
    return float(low), float(high)


@torch.no_grad()
def blind_spot_table(rm, pairs: torch.Tensor | None = None, n_boot: int = 2000, seed: int = 0) -> dict:
    """Return ``{row: {...}}`` for the rows of :data:`ROWS`: the RM's held-out pairs by kind of wrong answer.

    Each row holds ``margins`` (r(correct) - r(wrong) per pair), ``prompt`` (the prompt of
    each pair), ``pairs``, ``prompts``, ``accuracy`` (fraction with margin > 0), ``low`` and
    ``high`` (its 95% interval, prompts resampled) and ``margin`` (the mean margin). The far-off
    kinds have one pair per prompt, drawn as in :func:`minirlhf.reward_model.rm_report`; the
    near-miss rows hold every near-miss of every prompt.
    """
    pairs = task.eval_pairs() if pairs is None else pairs
    prompts = task.encode_prompts(pairs)  # (N, 6)
    r_truth = reward_scores(rm, prompts, task.correct_completions(pairs))  # (N,)
    index, answers, classes = every_near_miss(pairs)
    r_wrong = reward_scores(rm, prompts[index], task.encode_answers(answers.tolist()))  # (M,)
    near = (r_truth[index] - r_wrong).numpy()  # (M,)
    classes = np.array(classes)
    found = {kind: (pair_margins(rm, kind, pairs).numpy(), np.arange(len(pairs))) for kind in FAR_KINDS}
    for c in NEAR_MISS_CLASSES:
        found[c] = (near[classes == c], index.numpy()[classes == c])
    found["near_miss"] = (near, index.numpy())
    table = {}
    for row in ROWS:
        margins, prompt = found[row]
        low, high = prompt_bootstrap(margins > 0, prompt, n_boot, seed)
        table[row] = {
            "margins": margins,
            "prompt": prompt,
            "pairs": len(margins),
            "prompts": len(np.unique(prompt)),
            "accuracy": float((margins > 0).mean()),
            "low": low,
            "high": high,
            "margin": float(margins.mean()),
        }
    return table


def format_table(table: dict) -> str:
    """Return the table as text: pairs, accuracy with its 95% interval, and mean margin per row."""
    lines = [f"{'rejected answer':<28}{'pairs':>6}  {'ranked right [95% interval]':>28}  {'mean margin':>11}"]
    for row, t in table.items():
        interval = f"{t['accuracy']:.3f} [{t['low']:.3f}, {t['high']:.3f}]"
        lines.append(
            f"{LABELS.get(row, row):<28}{t['pairs']:>6}  {interval:>28}  {round(t['margin'], 2) + 0.0:>+11.2f}"
        )
    return "\n".join(lines)
