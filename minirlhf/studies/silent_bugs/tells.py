"""The tells: which logged metrics tell a buggy run from the correct one, and from when.

No bug carries a list of its tells: they are measured on the stored runs, each time they are
read. :func:`paired_difference` is the chapter's test of whether a metric tells a buggy run
from the correct one: each seed's difference, buggy minus correct, of the metric's mean over
the run, and whether the 95% interval of those differences excludes 0, with the margin by
which its near edge clears 0; :func:`separating` lists the dashboard's metrics that pass it,
and :func:`tell_table` gives the test for them (or for every panel). Chapter 10's answer keys
and its fixes' band checks are both read from :func:`separating`, so that a change of the
runs changes them too. :func:`first_departure` times, among those panels only, the point from
which a panel stays apart from the correct run's by a per-point paired test;
:func:`what_it_writes` says what a DPO run learns to write, from the held-out log-probs and the
greedy answers' kinds that its stored log keeps (:data:`~.dashboard.KEPT`).

Every function here reads runs laid out as :func:`~minirlhf.studies.silent_bugs.study` returns
them: ``{"correct": {arm: {seed: log}}, bug_name: {seed: log}}``.
"""

from __future__ import annotations

import numpy as np

from ...stats import mean_ci95
from .copies import BUGS
from .dashboard import DASHBOARD, KEPT, _trainer, curve_x

# A mean difference smaller than this is float64 rounding of numbers of order 1, not a
# departure: at the start (point 0) a policy's KL to itself comes out near 1e-17, not exactly 0,
# and a bug that changes which tokens are summed changes that residue the same way on every seed.
ROUNDING = 1e-12

__all__ = [
    "ROUNDING",
    "tell_value",
    "paired_difference",
    "separating",
    "tell_table",
    "point_differences",
    "first_departure",
    "what_it_writes",
]


def tell_value(log: dict, metric: str) -> float:
    """Return one number for ``metric`` of a run's log: its mean over the run (for the
    evaluation's curves, after the start, which is the same for every run)."""
    values = np.asarray(log[metric], dtype=float)
    if metric in ("accuracy", "rm_score", "kl"):
        values = values[1:]
    return float(values.mean())


def paired_difference(runs: dict, name: str, metric: str) -> dict:
    """Return the whole-run paired test of ``metric`` for bug ``name``: the correct and the buggy
    run's value (:func:`tell_value`; mean and 95% half-width over seeds), the paired difference,
    buggy minus correct seed by seed (mean and 95% half-width), ``separates``, True when that
    interval excludes 0, and ``margin``, how far its near edge is from 0 in half-widths
    (``|mean| / half - 1``: above 0 when it separates; infinite when every seed's difference is
    the same number, not 0; NaN when all are 0, or with one seed). ``runs`` is ``{"correct": {arm: {seed: log}},
    bug_name: {seed: log}}``."""
    bug = BUGS[name]
    seeds = sorted(runs[name])
    good = [tell_value(runs["correct"][bug.arm][s], metric) for s in seeds]
    bad = [tell_value(runs[name][s], metric) for s in seeds]
    diff = mean_ci95([b - g for b, g in zip(bad, good)])
    mean, half = diff
    if half > 0:
        margin = abs(mean) / half - 1.0
    elif half == 0:  # every seed's difference the same: apart by any margin, or not at all
        margin = float("inf") if mean != 0 else float("nan")
    else:  # one seed: no interval
        margin = float("nan")
    return {
        "correct": mean_ci95(good),
        "buggy": mean_ci95(bad),
        "difference": diff,
        "separates": bool(abs(mean) > half),
        "margin": margin,
    }


def separating(runs: dict, name: str) -> tuple:
    """Return the metrics of bug ``name``'s dashboard (:data:`DASHBOARD`) that separate its run
    from the correct one by :func:`paired_difference`, in the dashboard's order."""
    return tuple(m for m in DASHBOARD[_trainer(BUGS[name].arm)] if paired_difference(runs, name, m)["separates"])


def tell_table(runs: dict, bugs=None, every: bool = False) -> dict:
    """Return per bug and metric :func:`paired_difference`: for the panels that separate the
    bug's run (:func:`separating`), or with ``every`` for every panel of its dashboard, in the
    dashboard's order."""
    out = {}
    for name in bugs or [b for b in BUGS if b in runs]:
        rows = {metric: paired_difference(runs, name, metric) for metric in DASHBOARD[_trainer(BUGS[name].arm)]}
        out[name] = rows if every else {m: row for m, row in rows.items() if row["separates"]}
    return out


def point_differences(runs: dict, name: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (x, mean, half) of ``metric``'s curve, point by point: at each point the seeds'
    differences, buggy minus correct, seed by seed, their mean and the half-width of their 95%
    t-interval (NaN with one seed). ``x`` is the dashboard's axis (:func:`curve_x`)."""
    bug = BUGS[name]
    seeds = sorted(runs[name])
    good = np.array([runs["correct"][bug.arm][s][metric] for s in seeds], dtype=float)
    bad = np.array([runs[name][s][metric] for s in seeds], dtype=float)
    n = min(good.shape[1], bad.shape[1])
    rows = [mean_ci95(bad[:, i] - good[:, i]) for i in range(n)]
    x = curve_x(runs[name][seeds[0]], metric, _trainer(bug.arm))[:n]
    return x, np.array([m for m, _ in rows]), np.array([h for _, h in rows])


def first_departure(runs: dict, name: str, metric: str, k: int = 3) -> int | None:
    """Return the first x (an iteration, or a DPO step: :func:`curve_x`) from which ``metric``
    of bug ``name``'s run stays apart from the correct run's for ``k`` points in a row; None if
    it never does, or if the panel does not separate the runs over the whole run.

    The rule, and what it guards against:

    - Only a panel that separates the runs by the whole-run paired test
      (:func:`paired_difference`) is timed. For a panel that the bug does not move, the chance
      of a time at all is then that test's own 5% (per panel, as in the chapter's table), not
      5% at each of the curve's points.
    - A point is apart when the seeds' differences there, buggy minus correct seed by seed
      (:func:`point_differences`), have a 95% interval that excludes 0, on the side of the
      whole-run difference. Both runs' noise is in it, since each seed pairs a buggy and a
      correct run, and no band of the correct run alone is used: where every correct seed is
      exactly 0, a buggy seed that is 0 too gives a difference of 0, which keeps 0 inside the
      interval. Differences that are all equal and not 0 (every seed's first batch moved by
      the same amount) are apart; differences that are all 0, or whose mean is below
      :data:`ROUNDING`, never are.
    - ``k`` points in a row, so that a one-point blip does not time the panel.

    The time found is a description of the curves, not a test of its own: the first point of
    the ``k`` may still be early or late by the noise of three seeds.
    """
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    whole = paired_difference(runs, name, metric)
    if not whole["separates"]:
        return None
    side = np.sign(whole["difference"][0])
    x, mean, half = point_differences(runs, name, metric)
    apart = np.isfinite(half) & (side * mean > half) & (np.abs(mean) > ROUNDING)
    for i in range(len(apart) - k + 1):
        if apart[i : i + k].all():
            return int(x[i])
    return None


def _kept_curve(log: dict, key: str) -> np.ndarray:
    # A kept curve of a DPO log by its key; "kinds/<kind>" reads the share of that kind.
    if key.startswith("kinds/"):
        return np.asarray(log["kinds"][key.split("/", 1)[1]], dtype=float)
    return np.asarray(log[key], dtype=float)


def what_it_writes(
    runs: dict,
    name: str,
    keys=(
        "heldout/logps_correct",
        "heldout/logps_random",
        "heldout/logps_near_miss",
        "kinds/correct",
        "kinds/near_miss",
    ),
) -> dict:
    """Return, for a DPO bug's run and the correct DPO run, what each learns to write: per key
    (a held-out log-prob of :data:`minirlhf.dpo.HELDOUT_LOGPS`, or ``kinds/<kind>``, the share
    of the greedy answers of that kind), its value at the start (the same for both runs: the
    starting policy), each run's change from the start to the last evaluation (mean and 95%
    half-width over seeds) and the paired difference of those changes, buggy minus correct
    seed by seed. The runs must have been kept with :data:`KEPT`'s keys (:func:`study`); a bug
    of an arm whose runs keep none of them is refused."""
    bug = BUGS[name]
    if not KEPT[_trainer(bug.arm)]:
        raise ValueError(
            f"name must be a DPO bug, whose runs keep what the policy writes; got {name!r} (the {bug.arm} arm)"
        )
    seeds = sorted(runs[name])
    out = {}
    for key in keys:
        good = [_kept_curve(runs["correct"][bug.arm][s], key) for s in seeds]
        bad = [_kept_curve(runs[name][s], key) for s in seeds]
        out[key] = {
            "start": float(good[0][0]),
            "correct": mean_ci95([g[-1] - g[0] for g in good]),
            "buggy": mean_ci95([b[-1] - b[0] for b in bad]),
            "difference": mean_ci95([(b[-1] - b[0]) - (g[-1] - g[0]) for g, b in zip(good, bad)]),
        }
    return out
