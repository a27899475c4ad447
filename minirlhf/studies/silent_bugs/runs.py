"""The study's runs: one run with a bug planted, every bug's runs, and a learner's fix run.

:func:`run_bug` is one run of an arm of :data:`minirlhf.arms.REGISTRY` through
:func:`minirlhf.experiment.run_arm`, with a bug planted (:func:`~.copies.planted`) or none.
:func:`study` makes every bug's run and the correct run of its arm for each seed, keeping each
log's dashboard (:data:`~.dashboard.DASHBOARD` and :data:`~.dashboard.KEPT`);
:func:`band_check` plants a learner's fix in place of the bug's copy and says whether its runs
land in the correct runs' band on the panels that separate the bug, and whether they are the
correct runs digit for digit. Both look :func:`run_bug` up in this module at each call.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable

import numpy as np

from ...experiment import run_arm
from ...parallel import map_runs
from ...ppo import PPOConfig
from ...stats import mean_ci95
from ...store import load_rm, load_sft
from .copies import BUGS, Bug, planted
from .dashboard import DASHBOARD, KEPT, _trainer
from .tells import separating, tell_value

__all__ = ["run_bug", "study", "band_check"]


def run_bug(
    bug: Bug | None, arm: str, policy, rm, seed: int, evalset=None, progress: bool = False, config=None
) -> dict:
    """Return the log of one run of ``arm`` from ``policy`` with ``bug`` planted (None: the correct
    run). ``config`` (default: the recipe) is a PPOConfig, or a DPOConfig for a DPO arm."""
    cfg = config or PPOConfig()
    if bug is None:
        return run_arm(arm, policy, rm, seed, None, cfg, evalset, progress=progress)[1]
    with planted(bug):
        return run_arm(arm, policy, rm, seed, None, cfg, evalset, progress=progress)[1]


def _dashboard_run(job, policy, rm, evalset, progress) -> dict:
    # One run of the study, in this process or a worker: (a bug's name, or an arm for its
    # correct run; the seed).
    who, seed = job
    bug = BUGS.get(who)
    arm = who if bug is None else bug.arm
    log = run_bug(bug, arm, policy, rm, seed, evalset, progress=progress)
    trainer = _trainer(arm)
    return {k: log[k] for k in (*DASHBOARD[trainer], *KEPT[trainer]) if k in log}


def study(
    seeds=(0, 1, 2), bugs=None, progress: bool = False, evalset=None, policy=None, rm=None, workers: int | None = None
) -> dict:
    """Return ``{"correct": {arm: {seed: log}}, bug: {seed: log}}``: every bug's run and the
    correct run of its arm, for each seed, from the partial-SFT policy (or ``policy``), keeping
    the :data:`DASHBOARD` metrics of each log. ``workers`` worker processes make the runs
    (None: one per core; :func:`minirlhf.parallel.map_runs`)."""
    policy = policy if policy is not None else load_sft(progress=progress)[0]
    rm = rm if rm is not None else load_rm(progress=progress)[0]
    names = list(bugs or BUGS)
    arms = sorted({BUGS[name].arm for name in names})
    jobs = [(who, seed) for seed in seeds for who in [*arms, *names]]
    logs = map_runs(
        partial(_dashboard_run, policy=policy, rm=rm, evalset=evalset, progress=progress),
        jobs,
        workers,
        progress=progress,
        desc="silent bugs",
        label=lambda job: f"{job[0] if job[0] in BUGS else 'correct ' + job[0]} run, seed {job[1]}",
    )
    out = {"correct": {arm: {} for arm in arms}, **{name: {} for name in names}}
    for (who, seed), log in zip(jobs, logs):
        (out[who] if who in BUGS else out["correct"][who])[str(seed)] = log
    return out


def _fixed_run(seed, bug, policy, rm, evalset, progress) -> dict:
    return run_bug(bug, bug.arm, policy, rm, seed, evalset, progress=progress)


def band_check(
    name: str,
    fn: Callable,
    runs: dict,
    progress: bool = False,
    policy=None,
    rm=None,
    evalset=None,
    workers: int | None = None,
) -> dict:
    """Run a learner's fix of bug ``name`` in the engine and say whether it lands in the band.

    ``fn`` replaces the engine's function as the bug's copy did, in each of the bug's modules,
    for each seed of the stored ``runs`` (:func:`study`'s layout), the seeds' runs made by
    ``workers`` worker processes (None: one per core; :func:`minirlhf.parallel.map_runs`).
    The panels it judges are those that separate the bug's stored runs from the correct ones
    (:func:`~.tells.separating`, measured on ``runs`` now), or every panel of the dashboard
    when none does. Returns ``{"panels": {metric: row}, "identical": ..., "passed": ...}``:
    per panel, the fixed runs' value (mean over seeds), the bug's own runs' value, the correct
    runs' band (mean ± 95% half-width) and whether each value is ``inside`` it
    (``bug_inside`` for the bug's); ``identical``, True when every seed's fixed run logged
    every panel exactly as the stored correct run did, number for number; ``passed``, True
    when every judged panel's fixed value is inside its band.
    """
    bug = BUGS[name]
    fixed_bug = dataclasses.replace(bug, copy=fn)
    policy = policy if policy is not None else load_sft(progress=progress)[0]
    rm = rm if rm is not None else load_rm(progress=progress)[0]
    correct = runs["correct"][bug.arm]
    fixed = dict(
        zip(
            correct,
            map_runs(
                partial(_fixed_run, bug=fixed_bug, policy=policy, rm=rm, evalset=evalset, progress=progress),
                [int(seed) for seed in correct],
                workers,
                progress=progress,
                desc=f"your fix of {name}",
                label=lambda seed: f"{bug.arm} run, seed {seed}",
            ),
        )
    )
    shown = DASHBOARD[_trainer(bug.arm)]
    panels = {}
    for metric in separating(runs, name) or shown:
        band = mean_ci95([tell_value(correct[s], metric) for s in correct])
        value = float(np.mean([tell_value(fixed[s], metric) for s in correct]))
        buggy = float(np.mean([tell_value(runs[name][s], metric) for s in correct]))
        panels[metric] = {
            "fixed": value,
            "buggy": buggy,
            "band": band,
            "inside": abs(value - band[0]) <= band[1],
            "bug_inside": abs(buggy - band[0]) <= band[1],
        }
    identical = all(
        np.array_equal(np.asarray(fixed[s][m], dtype=float), np.asarray(correct[s][m], dtype=float))
        for s in correct
        for m in shown
    )
    return {"panels": panels, "identical": identical, "passed": all(row["inside"] for row in panels.values())}
