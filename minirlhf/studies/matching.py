"""Match an arm's beta to a distance from the reference: the short sweep behind the betas of
:mod:`minirlhf.arms` (ch. 8).

Two arms are compared fairly only at the same distance from the reference, and the same beta
does not give the same distance: a beta that weighs a loss term is not one that weighs a
per-token reward, and two baselines at one beta end at different KLs. So a new arm's beta is
matched, not borrowed: run it at a few betas, on seeds the comparison will not use, and keep
the one whose KL to the reference at the end is closest to the target's, the KL of another arm
on the same seeds (or a number). Chapter 8 matches ReMax's beta to GRPO's this way::

    runs = sweep("remax-verifier", [0.03, 0.06, 0.12], [5, 6, 7], policy, rm, PPOConfig(),
                 against="grpo-verifier")
    match = match_beta(runs["arms"], "remax-verifier", [0.03, 0.06, 0.12], "grpo-verifier")
    match.beta, match.final_kl  # the pick; {beta: (mean, half-width)} over the seeds

:func:`sweep` makes the runs (through :func:`minirlhf.experiment.run_arms`, side by side) in
the layout :func:`minirlhf.course.runs.load_or_run` stores, so a chapter keeps them;
:func:`match_beta` reads them and picks.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .. import experiment
from ..arms import REGISTRY
from ..stats import mean_ci95

__all__ = ["KEPT", "swept_name", "sweep", "final_kl", "Match", "match_beta"]

KEPT = ("accuracy", "kl")  # what the sweep keeps of each run's log: the curves per evaluation


def swept_name(arm: str, beta: float) -> str:
    """Return the name the sweep's runs of ``arm`` at ``beta`` are kept under, e.g. 'remax-verifier 0.06'."""
    return f"{arm} {beta:g}"


def _is_kl_like(x) -> bool:
    # a finite real number >= 0 (a beta, or a KL), not a bool
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _check_betas(betas) -> list[float]:
    betas = list(betas)
    if not betas:
        raise ValueError("betas must hold at least one beta")
    bad = [b for b in betas if not _is_kl_like(b)]
    if bad:
        raise ValueError(f"betas must be finite numbers >= 0, got {bad[0]!r}")
    if len({swept_name("", b) for b in betas}) != len(betas):
        raise ValueError(f"betas must not repeat a beta (as printed with :g), got {betas}")
    return betas


def _check_seeds(seeds) -> list[int]:
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0 for s in seeds):
        raise ValueError(f"seeds must be whole numbers >= 0, got {seeds}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must not repeat a seed, got {seeds}")
    return seeds


def _check_arm(arm, what: str) -> str:
    if arm not in REGISTRY:
        raise ValueError(f"{what} must name an arm of minirlhf.arms.REGISTRY, got {arm!r}")
    return arm


def sweep(
    arm: str,
    betas,
    seeds,
    policy,
    rm,
    config,
    *,
    against: str | None = None,
    evalset=None,
    progress: bool = False,
    workers: int | None = None,
) -> dict:
    """Run ``arm`` at each of ``betas`` for each of ``seeds``, and the arm ``against`` (None:
    none) at its own beta for the same seeds; return ``{"arms": {name: {seed: log}}}``, the
    layout :func:`minirlhf.course.runs.load_or_run` stores.

    ``against`` is kept under its own name, ``arm`` at each beta under :func:`swept_name`;
    seeds are strings (as JSON keeps them), and each log keeps only :data:`KEPT`. Every run
    starts from ``policy`` with ``config`` and ``rm``, as :func:`minirlhf.experiment.run_arms`
    makes them (``evalset``, ``progress`` and ``workers`` as there): the runs of ``against``
    first, then ``arm``'s, beta by beta. Raises ValueError before any run when an arm is not
    registered, or ``betas`` or ``seeds`` is empty, repeats itself or holds a bad value.
    """
    _check_arm(arm, "arm")
    if against is not None:
        _check_arm(against, "against")
    betas, seeds = _check_betas(betas), _check_seeds(seeds)
    jobs = [(against, s, None) for s in seeds] if against is not None else []
    jobs += [(arm, s, b) for b in betas for s in seeds]
    logs = experiment.run_arms(jobs, policy, rm, config, evalset=evalset, progress=progress, workers=workers)
    arms: dict = {}
    for (name, s, b), log in zip(jobs, logs):
        key = name if b is None else swept_name(name, b)
        arms.setdefault(key, {})[str(s)] = {k: log[k] for k in KEPT}
    return {"arms": arms}


def final_kl(runs: dict) -> tuple[float, float]:
    """Return (mean, half-width of the 95% interval) over the seeds of the KL to the reference
    at the end of each run of ``runs`` ({seed: log}); half-width NaN for one seed."""
    ends = []
    for seed, log in runs.items():
        kl = log.get("kl") if isinstance(log, dict) else None
        if not kl:
            raise ValueError(f"the run of seed {seed} has no KL curve to read its end from")
        ends.append(kl[-1])
    return mean_ci95(ends)


@dataclass(frozen=True)
class Match:
    """What :func:`match_beta` found: the arm, the target KL, the final KL at each beta, and
    the beta whose KL is closest to the target."""

    arm: str
    target: float  # the KL to the reference at the end that the arm is matched to (nats per token)
    final_kl: dict  # {beta: (mean, half-width of the 95% interval) over the seeds}, in the sweep's order
    beta: float  # the beta whose mean final KL is closest to the target (the first of a tie)

    def gap(self, beta: float) -> float:
        """Return the mean final KL at ``beta`` minus the target."""
        return self.final_kl[beta][0] - self.target


def match_beta(runs: dict, arm: str, betas, target) -> Match:
    """Return the :class:`Match` of ``arm`` to ``target`` from the sweep's ``runs``
    (``{name: {seed: log}}``, the ``"arms"`` of what :func:`sweep` returns).

    ``target`` is a KL (a number >= 0, nats per token) or the name of an arm of ``runs`` (the
    ``against`` of the sweep), whose mean final KL is the target. Each beta's final KL is the
    mean over the seeds of the KL at the end of each run (:func:`final_kl`), and the pick is
    the beta whose mean is closest to the target, the first in ``betas`` of a tie. Raises
    ValueError when a beta's runs are missing, or are of other seeds than the target's, or
    ``target`` is neither a KL nor an arm of ``runs``.
    """
    betas = _check_betas(betas)
    missing = [swept_name(arm, b) for b in betas if swept_name(arm, b) not in runs]
    if missing:
        raise ValueError(f"runs has no runs of {missing[0]!r}: sweep {arm!r} at every beta of betas first")
    seeds = set(runs[swept_name(arm, betas[0])])
    if isinstance(target, str):
        if target not in runs:
            raise ValueError(f"target {target!r} is not an arm of runs: pass a KL or the sweep's against arm")
        if set(runs[target]) != seeds:
            raise ValueError(f"target {target!r} was run on seeds {sorted(runs[target])}, the sweep on {sorted(seeds)}")
        target_kl = final_kl(runs[target])[0]
    elif _is_kl_like(target):
        target_kl = float(target)
    else:
        raise ValueError(f"target must be a KL (a finite number >= 0) or an arm's name, got {target!r}")
    for b in betas:
        if set(runs[swept_name(arm, b)]) != seeds:
            raise ValueError(f"the runs at beta {b:g} are of other seeds than those at beta {betas[0]:g}")
    kls = {b: final_kl(runs[swept_name(arm, b)]) for b in betas}
    picked = min(betas, key=lambda b: abs(kls[b][0] - target_kl))
    return Match(arm, target_kl, kls, picked)
