"""Reading chapter 11's curves against one another: at equal KL, with intervals over prompts and runs.

Every exact number of :mod:`minirlhf.studies.overoptimization` is kept per prompt, and an RL
curve once per run (seed), so that a comparison can be bootstrapped over both: draw the prompts
with replacement (and the runs), average, read each curve where the other stands, and take the
middle 95% of the differences (:func:`bootstrap`). The same draw of prompts is used for every
curve of a comparison (paired), so that what all methods share (which prompts are easy) cancels.
Curves are read on the figure's axis, d = sqrt(KL), by linear interpolation (:func:`at_kl`).
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

__all__ = ["at_kl", "bootstrap", "rl_arrays", "curve_arrays"]


def at_kl(kl, values, where) -> np.ndarray:
    """Return ``values`` (M,) of a curve whose KLs are ``kl`` (M,) read at the KLs ``where``, by
    linear interpolation in sqrt(KL); outside the curve's range, NaN (never extrapolated)."""
    kl, values = np.asarray(kl, dtype=float), np.asarray(values, dtype=float)
    where = np.asarray(where, dtype=float)
    if kl.ndim != 1 or values.shape != kl.shape or len(kl) < 2:
        raise ValueError(f"kl and values must be 1-D of one length >= 2, got {kl.shape} and {values.shape}")
    order = np.argsort(kl, kind="stable")
    d, v = np.sqrt(np.clip(kl[order], 0.0, None)), values[order]
    dw = np.sqrt(np.clip(where, 0.0, None))
    out = np.interp(dw, d, v)
    return np.where((dw < d[0] - 1e-12) | (dw > d[-1] + 1e-12), np.nan, out)


def curve_arrays(curve: dict, keys=("kl", "gold", "proxy")) -> dict:
    """Return a stored curve's per-prompt numbers as arrays (M, P), one per key it has."""
    return {k: np.asarray(curve["per_prompt"][k], dtype=float) for k in keys if k in curve["per_prompt"]}


def rl_arrays(runs, keys=("kl", "gold", "proxy")) -> dict:
    """Return the per-prompt numbers of runs of one recipe (a list, one run per seed) as arrays
    (S, E, P): seed, evaluation, prompt. Every run must have been evaluated at the same
    iterations (``iteration``, or ``step`` for a DPO run)."""
    runs = list(runs)
    if not runs:
        raise ValueError("runs must hold at least one run")
    its = [tuple(r["iteration"] if "iteration" in r else r["step"]) for r in runs]
    if len(set(its)) != 1:
        raise ValueError(f"the runs were evaluated at different iterations: {sorted(set(its))}")
    return {k: np.array([[e[k] for e in r["per_prompt"]] for r in runs], dtype=float) for k in keys}


def bootstrap(
    stat: Callable, n_prompts: int, n_runs: int = 1, reps: int = 2000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (value, lower, upper): ``stat(prompts, runs)`` on the whole sample, and the 2.5% and
    97.5% points of ``stat`` over ``reps`` draws of the prompts (``n_prompts`` of them, with
    replacement) and of the runs (``n_runs``), each draw shared by every curve ``stat`` reads.

    ``stat`` takes two index arrays and returns a number or an array; NaNs (a curve read outside
    its range) are left out of the percentiles. The draws come from NumPy's generator seeded with
    ``seed``: the same numbers on every machine.
    """
    if n_prompts < 1 or n_runs < 1 or reps < 10:
        raise ValueError(f"need n_prompts >= 1, n_runs >= 1 and reps >= 10, got {n_prompts}, {n_runs}, {reps}")
    value = np.asarray(stat(np.arange(n_prompts), np.arange(n_runs)), dtype=float)
    rng = np.random.default_rng(seed)
    draws = np.array(
        [
            np.asarray(stat(rng.integers(0, n_prompts, n_prompts), rng.integers(0, n_runs, n_runs)), dtype=float)
            for _ in range(reps)
        ]
    )
    with warnings.catch_warnings():  # a column that is NaN in every draw stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        lower, upper = np.nanpercentile(draws, [2.5, 97.5], axis=0)
    return value, lower, upper
