"""How far to push, measured exactly: best-of-n and RL against a proxy RM (chapter 11).

Every quantity here comes from the policy's whole distribution over completions
(:mod:`minirlhf.exact`), on the first :data:`N_PROMPTS` eval prompts, at the sampling
temperature 0.7:

    gold   the expected verifier accuracy of a sampled answer (the truth: Gao et al.'s gold RM)
    proxy  the expected score of the reward model the policy is optimized against
    kl     the sequence-level KL(pi || pi_ref) of sampled answers, in nats, averaged over prompts

Best-of-n costs no training: :func:`best_of_n_curve` turns one enumeration into those three
numbers for every n. RL is chapter 5's PPO loop against the proxy (:func:`rl_run`), with the
three measured at a few iterations from inside the run. :func:`sampled_kl` draws answers as a
rollout does and sums chapter 1's k1 and k3 over their tokens, to set beside the exact KL.
Reading the curves (Gao et al.'s fitted forms, a curve's peak) is :mod:`minirlhf.studies.gao`'s
job: this module makes the runs, and a stored run is read back while its code is unchanged.

The proxies (:data:`PROXIES`) are reward models trained like chapter 4's on fewer or other
pairs (:func:`load_proxy`), stored in the models' folder as ``proxy-<name>.pt``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, replace
from functools import partial

import torch

from .. import dpo, exact, ppo, reward_model, store, task
from ..model import completion_logprobs, completion_mask, generate, make_generator

__all__ = [
    "N_PROMPTS",
    "MIN_PROB",
    "PROXIES",
    "eval_pairs",
    "proxy_data",
    "load_proxy",
    "make_proxies",
    "exact_point",
    "sampled_kl",
    "best_of_n_curve",
    "rl_run",
    "run_study",
    "study_code",
]

N_PROMPTS = 100  # the first 100 of the 400 eval prompts
MIN_PROB = 1e-5  # completions less likely than this are pruned; their mass bounds each number
TEMPERATURE = 0.7  # the book's sampling temperature (PPOConfig.temperature)

# name -> (distinct pairs, share of near-miss rejected answers, optimizer steps), each trained
# like chapter 4's RM (100 steps of 128) on a fixed set of the book's pairs. "near-miss" has
# half its rejected answers near-misses and 400 steps: chapter 4 found that with 100 steps such
# an RM has not yet learned even what the book's RM knows.
PROXIES = {
    "200": (200, 0.0, 100),
    "800": (800, 0.0, 100),
    "3200": (3_200, 0.0, 100),
    "12800": (12_800, 0.0, 100),
    "near-miss": (12_800, 0.5, 400),
}


def eval_pairs(n: int = N_PROMPTS) -> torch.Tensor:
    """Return the first ``n`` of the 400 eval pairs (n, 2)."""
    return task.eval_pairs()[:n]


def proxy_data(name: str):
    """Return the fixed preference set ``(prompts, chosen, rejected)`` proxy ``name`` trains on:
    the first N of the book's 12,800 pairs, in the order chapter 4's RM meets them."""
    if name not in PROXIES:
        raise ValueError(f"proxy must be one of {sorted(PROXIES)}, got {name!r}")
    n, share, _ = PROXIES[name]
    return tuple(x[:n] for x in dpo.preference_pairs(near_miss_share=share))


def _proxy_settings(name: str) -> tuple:
    if name not in PROXIES:
        raise ValueError(f"proxy must be one of {sorted(PROXIES)}, got {name!r}")
    n, share, steps = PROXIES[name]
    cfg = replace(reward_model.RMConfig(), steps=steps)
    settings = {
        "proxy": name,
        "pairs": n,
        "near_miss_share": share,
        "rm": asdict(cfg),
        # the code that trains a proxy, not this module's (a change to a run leaves them be)
        "code": store.code_fingerprint(reward_model, dpo),
    }
    return cfg, settings


def load_proxy(name: str, progress: bool = True):
    """Return (rm, metrics): proxy ``name`` of :data:`PROXIES`, trained on :func:`proxy_data`
    and stored as ``proxy-<name>.pt``; ``metrics`` is its held-out report (``rm_report``)."""
    cfg, settings = _proxy_settings(name)

    def train():
        model, log = reward_model.train_reward_model(cfg, progress=progress, data=proxy_data(name))
        return model, {**reward_model.rm_report(model), "final_loss": log["loss"][-1]}

    return store.load_or_train(f"proxy-{name}", settings, train, progress=progress)


def _make_proxy(name: str, progress: bool = False) -> str:
    load_proxy(name, progress)
    return name


def make_proxies(names, progress: bool = True, workers: int | None = None) -> None:
    """Train and store the proxies of ``names`` not stored yet, side by side
    (:func:`minirlhf.parallel.map_runs`)."""
    from ..parallel import map_runs

    missing = [
        n for n in names if store.load_model(store.models_dir() / f"proxy-{n}.pt", _proxy_settings(n)[1])[2] != "ok"
    ]
    # the longest first, so that the others fill the second core meanwhile
    missing.sort(key=lambda n: -PROXIES[n][2])
    map_runs(
        partial(_make_proxy, progress=progress),
        missing,
        workers,
        progress=progress,
        desc="proxy reward models",
        label=lambda n: f"proxy {n}",
    )


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean())


@torch.no_grad()
def sampled_kl(policy, reference, prompts: torch.Tensor, samples: int, seed: int) -> dict:
    """Return the KL estimates a run can make from sampled answers: ``samples`` answers of
    each prompt drawn from ``policy`` at 0.7, and for each the sum over its tokens (up to the
    first `;`) of k1 = log pi - log ref and of k3 = r - 1 - log r with r = ref / pi (chapter 1).

    ``{'k1', 'k3'}``: the mean over every answer, an estimate of the sequence KL averaged over
    the prompts; ``{'k1_sd', 'k3_sd'}``: the standard deviation of one answer's sum.
    """
    many = prompts.repeat_interleave(samples, 0)  # (P * samples, 6)
    answers = generate(policy, many, TEMPERATURE, generator=make_generator(seed))  # (n, 4)
    mask = completion_mask(answers).double()
    log_ratio = (
        completion_logprobs(policy, many, answers, TEMPERATURE)
        - completion_logprobs(reference, many, answers, TEMPERATURE)
    ).double()  # (n, 4)
    k1 = (log_ratio * mask).sum(1)
    k3 = ((torch.expm1(-log_ratio) + log_ratio) * mask).sum(1)
    return {"k1": _mean(k1), "k3": _mean(k3), "k1_sd": float(k1.std()), "k3_sd": float(k3.std())}


@torch.no_grad()
def exact_point(
    policy, reference, rm, pairs: torch.Tensor, min_prob: float = MIN_PROB, value_range=None, floor: float | None = None
) -> dict:
    """Return the exact numbers of ``policy`` on ``pairs``, each averaged over the prompts:
    ``kl``, ``gold``, ``proxy`` and, for each, ``<name>_lower`` and ``<name>_upper`` (bounds
    that hold whatever the pruned completions are), with ``pruned`` (the largest pruned mass of
    a prompt) and ``completions`` (how many were enumerated)."""
    prompts = task.encode_prompts(pairs)
    comps = exact.enumerate_completions(policy, prompts, TEMPERATURE, min_prob)
    values = {
        "kl": exact.exact_sequence_kl(comps, reference, floor),
        "gold": exact.expected_gold(comps, pairs),
        "proxy": exact.expected_proxy(comps, rm, value_range),
    }
    out = {"pruned": float(comps.pruned.max()), "completions": len(comps.logp)}
    for name, b in values.items():
        out.update({name: _mean(b.value), f"{name}_lower": _mean(b.lower), f"{name}_upper": _mean(b.upper)})
    # a KL is never negative; where policy and reference agree, rounding leaves 1e-14 of either sign
    out["kl"], out["kl_lower"] = max(out["kl"], 0.0), max(out["kl_lower"], 0.0)
    return out


def best_of_n_curve(policy, rm, pairs: torch.Tensor, ns, min_prob: float = 1e-8) -> dict:
    """Return best-of-n's exact ``kl`` (to ``policy``), ``gold``, ``proxy`` and ``escape`` for
    each n of ``ns``, each a list averaged over the prompts, and the analytic
    ``log n - (n - 1) / n`` as ``analytic``. ``escape`` bounds how far the pruned completions
    can move each number (see :func:`minirlhf.exact.best_of_n_stats`)."""
    comps = exact.enumerate_completions(policy, task.encode_prompts(pairs), TEMPERATURE, min_prob)
    table = exact.best_of_n_table(comps, exact.proxy_rewards(comps, rm), ns, exact.gold_rewards(comps, pairs))
    out = {k: v.mean(1).tolist() for k, v in table.items()}
    out["n"] = [int(n) for n in ns]
    out["analytic"] = exact.analytic_best_of_n_kl(ns).tolist()
    out["pruned"] = float(comps.pruned.max())
    return out


def rl_run(job: dict, policy=None, rm=None, progress: bool = False) -> dict:
    """Return one PPO run against a proxy with the exact numbers every ``job['every']`` iterations.

    ``job``: ``proxy`` (a name of :data:`PROXIES`, or "book" for chapter 4's RM), ``beta``,
    ``seed``, ``iterations``, ``at`` (the iterations measured, 0 the start), ``samples`` (answers
    a prompt for :func:`sampled_kl`).
    The start is chapter 3's partial-SFT policy, also the reference. Returns
    ``{'iteration': [...], <each key of exact_point and sampled_kl>: [...], 'log': {...}}``
    with the run's own log (greedy accuracy, its per-token KL, the sampled k1 it logged). The
    run evaluates on the eval prompts every ``gcd(at)`` iterations (5 for the chapter's
    ``at``), which includes every iteration of ``at``: the log's ``eval_iterations`` says which.
    """
    if policy is None:
        policy, _ = store.load_sft(progress=False)
    if rm is None:
        rm = store.load_rm(progress=False)[0] if job["proxy"] == "book" else load_proxy(job["proxy"], False)[0]
    pairs = eval_pairs()
    prompts = task.encode_prompts(pairs)
    value_range, floor = exact.score_range(rm), exact.token_logprob_floor(policy, TEMPERATURE)
    out: dict = {"iteration": []}

    def measure(iteration, model):
        point = exact_point(model, policy, rm, pairs, value_range=value_range, floor=floor)
        point.update(sampled_kl(model, policy, prompts, job["samples"], seed=1000 * job["seed"] + iteration))
        out["iteration"].append(iteration)
        for key, value in point.items():
            out.setdefault(key, []).append(value)

    def callback(iteration, log, model):
        if iteration in job["at"]:
            measure(iteration, model)

    if 0 in job["at"]:
        measure(0, policy)
    every = math.gcd(*job["at"]) or job["iterations"]  # evaluate where the study reads
    cfg = ppo.PPOConfig(iterations=job["iterations"], seed=job["seed"], eval_every=every)
    _, log = ppo.ppo_train(
        policy,
        policy,
        ppo.rm_reward(rm),
        job["beta"],
        cfg,
        rm=rm,
        progress=progress,
        callback=callback,
        desc=f"PPO, proxy {job['proxy']}, beta {job['beta']:g}",
    )
    keys = ("accuracy", "rm_score", "kl", "eval_iterations", "objective/kl", "val/completion_length")
    out["log"] = {k: log[k] for k in keys}
    return out


def _study_job(job: dict, progress: bool = False):
    if job["kind"] == "bon":
        policy, _ = store.load_sft(progress=False)
        rm = store.load_rm(progress=False)[0] if job["proxy"] == "book" else load_proxy(job["proxy"], False)[0]
        return best_of_n_curve(policy, rm, eval_pairs(), job["ns"])
    return rl_run(job, progress=progress)


def _label(job: dict) -> str:
    if job["kind"] == "bon":
        return f"best-of-n, proxy {job['proxy']}"
    return f"PPO, proxy {job['proxy']}, beta {job['beta']:g}, seed {job['seed']}"


def study_code() -> str:
    """Return the fingerprint of this study's code and every package module it imports."""
    return store.code_fingerprint(sys.modules[__name__])


def run_study(jobs, progress: bool = True, workers: int | None = None) -> list:
    """Return the result of each job, run side by side by ``workers`` worker processes
    (:func:`minirlhf.parallel.map_runs`): a job ``{'kind': 'bon', 'proxy', 'ns'}`` gives
    :func:`best_of_n_curve` of the partial-SFT policy, a job ``{'kind': 'rl', ...}``
    :func:`rl_run`. The proxies are made first (:func:`make_proxies`), once each."""
    from ..parallel import map_runs

    jobs = list(jobs)
    make_proxies(sorted({job["proxy"] for job in jobs} - {"book"}), progress, workers)
    return map_runs(
        partial(_study_job, progress=progress), jobs, workers, progress=progress, desc="chapter 11's runs", label=_label
    )
