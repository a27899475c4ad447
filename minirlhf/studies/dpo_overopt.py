"""DPO's over-optimization curve, measured exactly (Rafailov et al. 2024, "Scaling laws for reward
model overoptimization in direct alignment algorithms").

Chapter 11 measures how far RL against a proxy reward model can push before the truth (the gold)
falls. DPO trains no reward model, yet Rafailov et al. report the same pattern for it and its
kin: past some KL to the reference the true quality falls as training goes on, often before one
epoch over the data is complete. :func:`dpo_run` makes one DPO run of chapter 9 from the partial-SFT
policy (also the reference) on chapter 4's 12,800 pairs (:func:`minirlhf.dpo.preference_pairs`,
the pairs chapter 9's ``dpo`` arm trains on) and measures it exactly, with chapter 11's
:func:`~minirlhf.studies.overoptimization.exact_point`, at the steps a job names:

    kl     the sequence-level KL(pi || pi_ref) of answers sampled at 0.7, in nats
    gold   the expected verifier accuracy of an answer sampled at 0.7
    proxy  the expected score of chapter 4's reward model, which learnt from the same pairs

each averaged over the first 100 eval prompts, with bounds and per-prompt values. A job with
``data`` "on-policy" and ``pairs`` trains instead on that many pairs of the SFT policy's own
answers (:func:`minirlhf.studies.onpolicy_proxies.onpolicy_data`, the pairs its proxies learn
from) and measures, as its proxy, the on-policy proxy of the same pairs and seed
(:func:`job_pairs`).

:func:`dpo_run` drives chapter 9's step loop itself, :func:`minirlhf.dpo.steps` (the one
:func:`~minirlhf.dpo.train_dpo` drives), and measures the policy between its steps: a run takes
``train_dpo``'s steps with the same settings and ends with its weights, to the last bit (the
tests check it). Two settings differ from chapter 9's run. The run goes on for several epochs
(passes over the pairs), reshuffled each time, to see where the gold peaks and whether it falls
before the first epoch ends. And the learning rate is constant by default (``anneal_lr`` False,
at chapter 9's initial 1e-4), as in the original DPO code after its warm-up: then the first k
steps of a long run are the whole of a run of k steps, and each point of the curve is a run of
its own length. ``anneal_lr`` True decays it linearly to 0 over the whole run, as chapter 9 does
over its one epoch.

:func:`study_jobs` lists a study's runs, which chapter 11's study makes side by side with its
other runs (:func:`minirlhf.studies.overoptimization.run_study`); :func:`peaks` reads each run's
peak.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import asdict

import numpy as np

from .. import dpo, exact, store
from ..progress import progress_bar
from . import gao
from . import overoptimization as overopt

__all__ = [
    "BETAS",
    "SEEDS",
    "EPOCHS",
    "steps_per_epoch",
    "measured_steps",
    "dpo_config",
    "dpo_run",
    "study_jobs",
    "peaks",
    "study_code",
]

BETAS = (0.1, 0.5, 1.25, 5.0)  # around chapter 9's 1.25; 0.1 is the paper's and TRL's default
SEEDS = (0, 1, 2)
EPOCHS = 3  # passes over the pairs each run makes

_JOB_KEYS = {"beta", "seed", "steps", "at", "anneal_lr", "data", "pairs"}
_LOGGED = ("loss", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected")


def steps_per_epoch(config: dpo.DPOConfig | None = None, pairs: int | None = None) -> int:
    """Return how many steps of ``config`` (default: chapter 9's) make one pass over its pairs
    (200), or over ``pairs`` pairs when given."""
    cfg = config or dpo.DPOConfig()
    n = pairs if pairs is not None else len(dpo.preference_pairs(cfg.near_miss_share, cfg.rm_config)[0])
    return math.ceil(n / cfg.batch_size)


def job_pairs(job: dict):
    """Return ``(data, proxy)`` for a job: the pairs it trains on, as :func:`minirlhf.dpo.steps`
    takes them (None: chapter 4's, the config's own), and a function that returns the reward
    model measured as its proxy, the one that learnt from the same pairs (chapter 4's RM, or
    the on-policy proxy of the job's size and seed, :mod:`minirlhf.studies.onpolicy_proxies`)."""
    if job.get("data", "book") == "book":
        return None, lambda: store.load_rm(progress=False)[0]
    from . import onpolicy_proxies

    size, seed = job["pairs"], job.get("seed", 0)
    return onpolicy_proxies.onpolicy_data(size), lambda: onpolicy_proxies.job_proxy("on-policy", size, seed)[0]


def measured_steps(steps: int, per_epoch: int) -> list[int]:
    """Return the steps a run of ``steps`` steps is measured at by default: the start (0), every
    power of 2, every quarter of an epoch of ``per_epoch`` steps and the last step, in order."""
    quarters = {round(k * per_epoch / 4) for k in range(1, 4 * steps // per_epoch + 1)}
    powers = {2**k for k in range(steps.bit_length())}
    return sorted(s for s in {0, steps} | powers | quarters if s <= steps)


def _check_job(job: dict) -> None:
    unknown = sorted(set(job) - _JOB_KEYS)
    if unknown:
        raise ValueError(f"job has unknown keys {unknown}: it takes {sorted(_JOB_KEYS)}")
    beta, steps, seed = job.get("beta"), job.get("steps"), job.get("seed", 0)
    if not (isinstance(beta, numbers.Real) and not isinstance(beta, bool) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    if not (isinstance(steps, numbers.Integral) and not isinstance(steps, bool) and steps >= 1):
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 0):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    if job.get("data", "book") not in ("book", "on-policy"):
        raise ValueError(f"data must be 'book' or 'on-policy', got {job.get('data')!r}")
    if job.get("data", "book") == "on-policy":
        from . import onpolicy_proxies

        if job.get("pairs") not in onpolicy_proxies.SIZES:
            sizes = onpolicy_proxies.SIZES
            raise ValueError(f"pairs must be one of {sizes} for on-policy data, got {job.get('pairs')!r}")
        if seed not in onpolicy_proxies.SEEDS:  # the proxy measured is the on-policy proxy of this seed
            raise ValueError(f"seed must be one of {onpolicy_proxies.SEEDS} for on-policy data, got {seed!r}")
    elif "pairs" in job:
        raise ValueError("pairs names a size of the on-policy pairs: give it with data 'on-policy' only")
    at = job.get("at")
    if at is not None:
        ok = all(isinstance(s, numbers.Integral) and not isinstance(s, bool) and 0 <= s <= steps for s in at)
        if not (ok and len(at) >= 1):
            raise ValueError(f"at must list whole numbers of steps from 0 to steps ({steps}), got {at!r}")


def dpo_config(job: dict) -> dpo.DPOConfig:
    """Return the :class:`~minirlhf.dpo.DPOConfig` of ``job``: chapter 9's settings with the job's
    ``beta``, ``seed`` (default 0), ``steps`` and ``anneal_lr`` (default False: a constant learning
    rate). Raises ValueError, on one line, for a job it cannot run."""
    _check_job(job)
    return dpo.DPOConfig(
        steps=int(job["steps"]),
        beta=float(job["beta"]),
        seed=int(job.get("seed", 0)),
        anneal_lr=bool(job.get("anneal_lr", False)),
        eval_every=int(job["steps"]),
    )


def dpo_run(job: dict, policy=None, rm=None, progress: bool = False) -> dict:
    """Return one DPO run with the exact numbers at the steps ``job['at']``, measured between the
    steps of :func:`minirlhf.dpo.steps`, which this drives.

    ``job``: ``beta`` (DPO's), ``seed`` (the order of the pairs; default 0), ``steps``, ``at``
    (the steps measured, 0 the start; default :func:`measured_steps`), ``anneal_lr`` (default
    False), and for the on-policy pairs ``data`` "on-policy" and ``pairs`` (a size of
    :mod:`~minirlhf.studies.onpolicy_proxies`). The start is ``policy`` (default: chapter 3's
    partial-SFT policy), also the reference; ``rm`` (default: the RM that learnt from the same
    pairs, :func:`job_pairs`) is the proxy measured. Returns ``{'step': [...],
    'epoch': [...], <each key of exact_point>: [...], 'log': {...}, 'config', 'steps_per_epoch',
    'n_pairs'}``: per measurement its step, the passes over the pairs made by then (steps x batch
    size / pairs) and :func:`~minirlhf.studies.overoptimization.exact_point`'s numbers on
    :func:`~minirlhf.studies.overoptimization.eval_pairs`; ``log`` holds, per step, the batch's
    DPO loss, its implicit-reward accuracy and margin and the policy's mean log-prob of the chosen
    and of the rejected answers.
    """
    cfg = dpo_config(job)
    if policy is None:
        policy, _ = store.load_sft(progress=False)
    data, proxy = job_pairs(job)
    if rm is None:
        rm = proxy()
    n = len(data[0]) if data is not None else len(dpo.preference_pairs(cfg.near_miss_share, cfg.rm_config)[0])
    per_epoch = math.ceil(n / cfg.batch_size)
    at = set(job["at"]) if job.get("at") is not None else set(measured_steps(cfg.steps, per_epoch))
    pairs = overopt.eval_pairs()
    value_range, floor = exact.score_range(rm), exact.token_logprob_floor(policy, overopt.TEMPERATURE)
    scores = overopt.Scores(policy, rm)
    out: dict = {"step": [], "epoch": []}

    def measure(step, model):
        point = overopt.exact_point(model, policy, rm, pairs, value_range=value_range, floor=floor, scores=scores)
        out["step"].append(step)
        out["epoch"].append(step * cfg.batch_size / n)
        for key, value in point.items():
            out.setdefault(key, []).append(value)

    run = dpo.steps(policy, policy, cfg, data=data)
    _, start, _ = next(run)  # the start, before the first step
    if 0 in at:
        measure(0, start)
    log: dict = {name: [] for name in _LOGGED}
    bar = progress_bar(total=cfg.steps, desc=_label(job), enabled=progress)
    for step, model, metrics in run:
        for name in _LOGGED:
            log[name].append(metrics[name])
        if step in at:
            measure(step, model)
            bar.set_postfix_str(f"gold {out['gold'][-1]:.3f} kl {out['kl'][-1]:.3f}")
        bar.update(1)
    bar.close()
    out.update(log=log, config=asdict(cfg), steps_per_epoch=per_epoch, n_pairs=n)
    return out


def study_jobs(
    betas=BETAS, seeds=SEEDS, epochs: int = EPOCHS, anneal_lr: bool = False, data: str = "book", sizes=None
) -> list[dict]:
    """Return a job of :func:`dpo_run` for each beta and seed, ``epochs`` passes over the pairs
    each, measured at the default steps: on chapter 4's pairs (``data`` "book"), or on the
    on-policy pairs (``data`` "on-policy") of each size of ``sizes`` (default: every size of
    :mod:`minirlhf.studies.onpolicy_proxies`)."""
    if data not in ("book", "on-policy"):
        raise ValueError(f"data must be 'book' or 'on-policy', got {data!r}")
    if data == "book":
        steps = epochs * steps_per_epoch()
        return [{"beta": b, "seed": s, "steps": steps, "anneal_lr": anneal_lr} for b in betas for s in seeds]
    from . import onpolicy_proxies

    return [
        {"beta": b, "seed": s, "steps": epochs * steps_per_epoch(pairs=n), "anneal_lr": anneal_lr, "data": data}
        | {"pairs": n}
        for n in (sizes or onpolicy_proxies.SIZES)
        for b in betas
        for s in seeds
    ]


def _label(job: dict) -> str:
    pairs = f", on-policy {job['pairs']:,}" if job.get("data") == "on-policy" else ""
    return f"DPO beta {job['beta']:g}{pairs}, seed {job.get('seed', 0)}"


def peaks(run: dict) -> dict:
    """Return where the gold of ``run`` (a result of :func:`dpo_run` measured at step 0) peaks and
    what follows.

    ``{'gain'`` (peak gold minus the start's), ``'sqrt_kl'``, ``'kl'``, ``'step'``, ``'epoch'``
    (of the peak), ``'end_gain'`` (last gold minus the start's), ``'end_below_start'``,
    ``'epoch1_step'`` (where the gold peaks among the steps of the first epoch, its end
    included), ``'epoch1_drop'`` (that peak minus the gold at the end of the first epoch; None if
    the run was not measured there), ``'falls_in_epoch1'`` (the first epoch's peak lies before
    its end and the gold at its end is lower)``}``.
    """
    if not run["step"] or run["step"][0] != 0:
        raise ValueError("the run must be measured at step 0, its start")
    kl, gold, steps = np.asarray(run["kl"]), np.asarray(run["gold"]), run["step"]
    top = gao.peak(kl, gold)
    per_epoch = run["steps_per_epoch"]
    first = [i for i, s in enumerate(steps) if s <= per_epoch]
    i1 = first[int(np.argmax(gold[first]))]
    end1 = steps.index(per_epoch) if per_epoch in steps else None
    drop = float(gold[i1] - gold[end1]) if end1 is not None else None
    return {
        "gain": top["gain"],
        "sqrt_kl": top["sqrt_kl"],
        "kl": top["kl"],
        "step": steps[top["index"]],
        "epoch": run["epoch"][top["index"]],
        "end_gain": float(gold[-1] - gold[0]),
        "end_below_start": bool(gold[-1] < gold[0]),
        "epoch1_step": steps[i1],
        "epoch1_drop": drop,
        "falls_in_epoch1": bool(drop is not None and steps[i1] < per_epoch and drop > 0),
    }


def study_code() -> str:
    """Return the fingerprint of this study's code and every package module it imports."""
    return store.code_fingerprint(sys.modules[__name__])
