"""How far to push, measured exactly: best-of-n, the KL-regularized optimum and RL against a proxy RM (chapter 11).

Every quantity here comes from the policy's whole distribution over completions
(:mod:`minirlhf.exact`), on the first :data:`N_PROMPTS` eval prompts, at the sampling
temperature 0.7, with one pruning threshold, :data:`MIN_PROB`:

    gold   the expected verifier accuracy of a sampled answer (the truth: Gao et al.'s gold RM)
    proxy  the expected score of the reward model the policy is optimized against
    kl     the sequence-level KL(pi || pi_ref) of sampled answers, in nats

Three kinds of policy are measured. Best-of-n and the tilted optimum pi_ref exp(r / beta) / Z cost
no training: :func:`exact_curves` turns one enumeration into both, for every n and beta, and into
the gold ceiling (the tilt by the verifier: the least KL at which any policy reaches a gold).
RL is a run of :func:`rl_run`, an optimizer of :data:`OPTIMIZERS` against the proxy or the
verifier, measured exactly at the iterations a job names, from inside the run; each run keeps
the scores of the completions it has met (:class:`Scores`), since most recur from one
evaluation to the next. :func:`sampled_kl` draws answers as a rollout does and sums chapter 1's
k1 and k3 over their tokens, to set beside the exact KL. Reading the curves (Gao et al.'s
fitted forms, a curve's peak) is :mod:`minirlhf.studies.gao`'s job: this module makes the runs,
and a stored run is read back while its code is unchanged.

Every exact number is kept per prompt as well as averaged, so that a reader can bootstrap over
prompts. The proxies (:data:`PROXIES`) are reward models trained like chapter 4's on fewer or
other pairs (:func:`load_proxy`), stored in the models' folder as ``proxy-<name>.pt``.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, replace
from functools import partial

import torch

from .. import dpo, exact, ppo, reward_model, store, task, tilted
from ..model import completion_logprobs, completion_mask, generate, make_generator, reward_scores
from . import kl_exact

__all__ = [
    "N_PROMPTS",
    "MIN_PROB",
    "PROXIES",
    "eval_pairs",
    "proxy_data",
    "load_proxy",
    "make_proxies",
    "OPTIMIZERS",
    "Scores",
    "exact_point",
    "sampled_kl",
    "exact_curves",
    "tilt_check",
    "rl_run",
    "run_study",
    "study_code",
]

N_PROMPTS = 100  # the first 100 of the 400 eval prompts: each RL evaluation enumerates its policy afresh
MIN_PROB = 1e-8  # completions less likely than this are pruned; their mass bounds each number
TEMPERATURE = 0.7  # the book's sampling temperature (PPOConfig.temperature)

# The settings under which RL climbs the proxy: a batch of 256 completions, a constant learning
# rate of 5e-5 (chapter 5 decays 2e-4 to 0 over its run), and a baseline per prompt. name ->
# (PPOConfig settings, reward). Rewards: "proxy", the RM's score; "proxy-prompt-baseline", the RM's
# score minus its score of the reference's greedy answer to the same prompt (chapter 6's control);
# "verifier", the truth. "ppo-chapter-5" is chapter 5's recipe itself, unleashed.
_CLIMB = {"batch_size": 256, "lr": 5e-5, "anneal_lr": False}
_RLOO = {**_CLIMB, "advantages": "rloo", "group_size": 8, "kl_placement": "loss"}
OPTIMIZERS = {
    "rloo": (_RLOO, "proxy"),
    "ppo-prompt-baseline": (_CLIMB, "proxy-prompt-baseline"),
    "rloo-verifier": (_RLOO, "verifier"),
    "ppo-chapter-5": ({}, "proxy"),
}

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


def _spec(item) -> tuple:
    """Return ``(stem, RMConfig, settings, load)`` of a proxy to make: a name of :data:`PROXIES`,
    or a (kind, pairs, seed) triple of :mod:`minirlhf.studies.onpolicy_proxies`; ``load`` takes
    ``progress`` and trains the proxy if it is not stored."""
    if isinstance(item, str):
        cfg, settings = _proxy_settings(item)
        return f"proxy-{item}", cfg, settings, partial(load_proxy, item)
    from . import onpolicy_proxies

    return (*onpolicy_proxies.proxy_settings(*item), partial(onpolicy_proxies.load, *item))


def _make_proxy(item, progress: bool = False):
    _spec(item)[3](progress=progress)
    return item


def _stored(item) -> bool:
    stem, _, settings, _ = _spec(item)
    return store.load_model(store.models_dir() / f"{stem}.pt", settings)[2] == "ok"


def _pairs_seen(item) -> int:
    cfg = _spec(item)[1]
    return cfg.steps * cfg.batch_size


def make_proxies(names, made=(), progress: bool = True, workers: int | None = None) -> None:
    """Train and store, side by side (:func:`minirlhf.parallel.map_runs`), the proxies not
    stored yet among ``names`` (of :data:`PROXIES`) and ``made`` ((kind, pairs, seed) triples of
    :mod:`minirlhf.studies.onpolicy_proxies`)."""
    from ..parallel import map_runs

    missing = [item for item in [*names, *made] if not _stored(item)]
    # the longest first (pairs seen in training), so that the others fill the second core meanwhile
    missing.sort(key=lambda item: -_pairs_seen(item))
    map_runs(
        partial(_make_proxy, progress=progress),
        missing,
        workers,
        progress=progress,
        desc="proxy reward models",
        label=lambda item: f"proxy {item}" if isinstance(item, str) else "{} proxy {} (seed {})".format(*item),
    )


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean())


class Scores:
    """The proxy's score, the reference's log-probability and the verifier's reward of every
    completion of every prompt met so far: none changes while a policy trains, so a run computes
    each once.

    ``scores(comps, pairs)`` returns ``(proxy, ref_logp, gold)``, each (N,) float64, for the
    completions of ``comps`` (an enumeration of the prompts this object was made for, whose sums
    are ``pairs``), computing only the completions not met before, in one batch.
    """

    _BASE = torch.tensor([13**3, 13**2, 13, 1])  # a completion's 4 tokens as one number

    def __init__(self, reference, rm):
        self.reference, self.rm, self.table = reference, rm, {}

    def __call__(self, comps, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keys = (comps.prompt_index * 13**4 + comps.tokens @ self._BASE).tolist()
        new = [i for i, k in enumerate(keys) if k not in self.table]
        if new:
            rows = torch.tensor(new)
            prompts, tokens = comps.prompts[comps.prompt_index[rows]], comps.tokens[rows]
            sub = exact.Completions(
                prompts,
                tokens,
                torch.arange(len(rows)),
                comps.logp[rows],
                torch.zeros(len(rows), dtype=torch.float64),
                comps.temperature,
                comps.min_prob,
            )
            proxy = exact.proxy_rewards(sub, self.rm).tolist()
            ref = exact.sequence_logprobs(self.reference, prompts, tokens, comps.temperature).tolist()
            gold = exact.gold_rewards(sub, pairs[comps.prompt_index[rows]]).tolist()
            self.table.update((keys[i], row) for i, *row in zip(new, proxy, ref, gold))
        table = torch.tensor([self.table[k] for k in keys], dtype=torch.float64).reshape(-1, 3)
        return table[:, 0], table[:, 1], table[:, 2]


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
    policy,
    reference,
    rm,
    pairs: torch.Tensor,
    min_prob: float = MIN_PROB,
    value_range=None,
    floor: float | None = None,
    scores: Scores | None = None,
) -> dict:
    """Return the exact numbers of ``policy`` on ``pairs``, each averaged over the prompts:
    ``kl``, ``gold``, ``proxy`` and, for each, ``<name>_lower`` and ``<name>_upper`` (bounds
    that hold whatever the pruned completions are), with ``pruned`` (the largest pruned mass of
    a prompt), ``completions`` (how many were enumerated) and ``per_prompt`` (``kl``, ``gold``
    and ``proxy`` of each prompt, lists). ``scores``: a run's :class:`Scores`, None to score
    every completion afresh."""
    prompts = task.encode_prompts(pairs)
    comps = exact.enumerate_completions(policy, prompts, TEMPERATURE, min_prob)
    if scores is not None:
        proxy, ref_logp, gold = scores(comps, pairs)
    else:
        proxy, ref_logp, gold = exact.proxy_rewards(comps, rm), None, exact.gold_rewards(comps, pairs)
    values = {
        "kl": exact.exact_sequence_kl(comps, reference, floor, ref_logp=ref_logp),
        "gold": exact.expectation(comps, gold, (0.0, 1.0)),
        "proxy": exact.expectation(comps, proxy, value_range or exact.score_range(rm)),
    }
    out = {"pruned": float(comps.pruned.max()), "completions": len(comps.logp)}
    for name, b in values.items():
        out.update({name: _mean(b.value), f"{name}_lower": _mean(b.lower), f"{name}_upper": _mean(b.upper)})
    # a KL is never negative; where policy and reference agree, rounding leaves 1e-14 of either sign
    out["kl"], out["kl_lower"] = max(out["kl"], 0.0), max(out["kl_lower"], 0.0)
    out["per_prompt"] = {name: b.value.tolist() for name, b in values.items()}
    out["per_prompt"]["kl"] = values["kl"].value.clamp(min=0.0).tolist()
    return out


def exact_curves(policy, rm, pairs: torch.Tensor, ns, betas, min_prob: float = MIN_PROB) -> dict:
    """Return, from one enumeration of ``policy`` on ``pairs``, the policies that need no training:

    ``{'bon': best-of-n for each n of ns, 'tilt': the tilted optimum pi exp(rm / beta) / Z for
    each beta of betas, 'ceiling': pi tilted by the verifier for each beta, 'pruned': the
    largest pruned mass of a prompt}``. Each curve holds ``kl``, ``gold``, ``proxy`` (lists
    over its n or beta, averaged over the prompts; the ceiling has no proxy) and ``per_prompt``
    (the same, each (M, P) as nested lists); best-of-n adds ``escape`` and ``analytic``
    (log n - (n - 1) / n), the tilts their bounds (``kl_lower`` ... ``gold_upper``, and the
    tilt's ``proxy_lower``, ``proxy_upper``, averaged) and ``tilted_pruned`` (the largest share
    of the tilted law the pruned completions can take, over the prompts).
    """
    comps = exact.enumerate_completions(policy, task.encode_prompts(pairs), TEMPERATURE, min_prob)
    proxy, gold = exact.proxy_rewards(comps, rm), exact.gold_rewards(comps, pairs)
    value_range = exact.score_range(rm)
    bon = exact.best_of_n_table(comps, proxy, ns, gold)
    out = {"pruned": float(comps.pruned.max()), "n": [int(n) for n in ns], "beta": [float(b) for b in betas]}
    out["bon"] = {k: v.mean(1).tolist() for k, v in bon.items()}
    out["bon"]["analytic"] = exact.analytic_best_of_n_kl(ns).tolist()
    out["bon"]["per_prompt"] = {k: bon[k].tolist() for k in ("kl", "gold", "proxy")}
    for name, reward, rng in (("tilt", proxy, value_range), ("ceiling", gold, (0.0, 1.0))):
        table = tilted.tilted_table(comps, reward, betas, gold, rng)
        if name == "tilt":
            table.update(
                proxy=table.pop("reward"), proxy_lower=table.pop("reward_lower"), proxy_upper=table.pop("reward_upper")
            )
        else:  # its reward is the gold itself
            for key in ("reward", "reward_lower", "reward_upper"):
                del table[key]
        curve = {k: v.mean(1).tolist() for k, v in table.items() if k != "tilted_pruned"}
        curve["tilted_pruned"] = table["tilted_pruned"].max(1).values.tolist()
        keys = ("kl", "gold", "proxy") if name == "tilt" else ("kl", "gold")
        curve["per_prompt"] = {k: table[k].tolist() for k in keys}
        out[name] = curve
    return out


def tilt_check(policy, rm, pairs: torch.Tensor, betas, min_prob: float = MIN_PROB) -> dict:
    """Return how far the tilted optimum's numbers on ``pairs`` move when no completion is pruned.

    Every one of the 22,621 completions of each prompt is enumerated and scored, and the tilt by
    ``rm`` computed for each beta of ``betas`` as :func:`exact_curves` computes it, beside the
    same from an enumeration pruned at ``min_prob``. Returns ``{'kl', 'gold', 'proxy'}``: for
    each, the largest absolute difference of the mean over the prompts, one per beta (lists),
    and ``prompts``, how many were checked. The bounds of :func:`minirlhf.tilted.tilted_stats`
    hold whatever the pruned completions score within the RM's range; this says what they do
    score, on these prompts.
    """
    prompts = task.encode_prompts(pairs)
    means = []
    for threshold in (0.0, min_prob):
        comps = exact.enumerate_completions(policy, prompts, TEMPERATURE, threshold)
        table = tilted.tilted_table(
            comps, exact.proxy_rewards(comps, rm), betas, exact.gold_rewards(comps, pairs), exact.score_range(rm)
        )
        means.append({"kl": table["kl"], "gold": table["gold"], "proxy": table["reward"]})
    out = {k: (means[0][k].mean(1) - means[1][k].mean(1)).abs().tolist() for k in ("kl", "gold", "proxy")}
    out["prompts"] = len(pairs)
    return out


def _reward_fn(kind: str, reference, rm):
    if kind == "verifier":
        return ppo.verifier_reward
    if kind == "proxy":
        return ppo.rm_reward(rm)

    @torch.no_grad()
    def proxy_minus_prompt_baseline(pairs, prompts, completions):
        greedy = generate(reference, prompts, greedy=True)  # (B, 4): the reference's own answer
        return reward_scores(rm, prompts, completions) - reward_scores(rm, prompts, greedy)

    return proxy_minus_prompt_baseline


def rl_run(job: dict, policy=None, rm=None, progress: bool = False) -> dict:
    """Return one RL run against a proxy with the exact numbers at the iterations ``job['at']``.

    ``job``: ``optimizer`` (a name of :data:`OPTIMIZERS`), ``proxy`` (a name of :data:`PROXIES`,
    or "book" for chapter 4's RM: the reward, unless the optimizer's reward is the verifier, and
    the proxy measured; or instead ``data``, ``pairs`` and ``rm_seed``, a proxy of
    :mod:`minirlhf.studies.onpolicy_proxies`), ``seed``, ``iterations``, ``at`` (the iterations measured, 0 the start),
    ``samples`` (answers a prompt for :func:`sampled_kl`). The leash is off (beta 0): the run
    travels the KL axis by training. The start is chapter 3's partial-SFT policy, also the
    reference. Returns ``{'iteration': [...], <each key of exact_point and sampled_kl>: [...],
    'greedy_kl': [...], 'log': {...}}``: at each iteration measured, also the exact per-token KL
    of the greedy answers to the same prompts, as chapter 5's ``evaluate`` computes it
    (:func:`minirlhf.studies.kl_exact.greedy_token_kl`); ``log`` is the run's own log (the sampled
    k1 it logged at every iteration; its ``evaluate`` on the 400 eval prompts at the start and the
    end only, ``eval_iterations``).
    """
    if job.get("optimizer") not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {job.get('optimizer')!r}")
    settings, reward = OPTIMIZERS[job["optimizer"]]
    if policy is None:
        policy, _ = store.load_sft(progress=False)
    if rm is None:
        rm = _job_rm(job)[0]
    pairs = eval_pairs()
    prompts = task.encode_prompts(pairs)
    value_range, floor = exact.score_range(rm), exact.token_logprob_floor(policy, TEMPERATURE)
    scores = Scores(policy, rm)
    out: dict = {"iteration": []}

    def measure(iteration, model):
        point = exact_point(model, policy, rm, pairs, value_range=value_range, floor=floor, scores=scores)
        point.update(sampled_kl(model, policy, prompts, job["samples"], seed=1000 * job["seed"] + iteration))
        point["greedy_kl"] = kl_exact.greedy_token_kl(model, policy, prompts, TEMPERATURE)["kl"]
        out["iteration"].append(iteration)
        for key, value in point.items():
            out.setdefault(key, []).append(value)

    def callback(iteration, log, model):
        if iteration in job["at"]:
            measure(iteration, model)

    if 0 in job["at"]:
        measure(0, policy)
    # the run's own evaluation at its start and end only: the study measures from the callback
    cfg = ppo.PPOConfig(iterations=job["iterations"], seed=job["seed"], eval_every=job["iterations"], **settings)
    _, log = ppo.ppo_train(
        policy,
        policy,
        _reward_fn(reward, policy, rm),
        0.0,
        cfg,
        rm=rm,
        progress=progress,
        callback=callback,
        desc=f"{job['optimizer']}, {_proxy_name(job)}, seed {job['seed']}",
    )
    keys = ("accuracy", "rm_score", "kl", "eval_iterations", "objective/kl", "val/completion_length")
    out["log"] = {k: log[k] for k in keys}
    return out


def _made_key(job: dict) -> tuple:
    # the (kind, pairs, seed) of a job's proxy of onpolicy_proxies: an RL job's own seed is the
    # run's, and its proxy's is rm_seed; a DPO run on the on-policy pairs measures the proxy of
    # its own seed
    return job["data"], job["pairs"], job["rm_seed"] if job["kind"] == "rl" else job.get("seed", 0)


def _proxy_name(job: dict) -> str:
    if "data" in job:
        kind, pairs, seed = _made_key(job)
        return f"{kind} proxy {pairs} (seed {seed})"
    return f"proxy {job['proxy']}"


def _job_rm(job: dict) -> tuple:
    """Return ``(rm, report)`` for a job: chapter 4's RM (``proxy`` "book"), a proxy of
    :data:`PROXIES`, or, with ``data`` and ``pairs`` (and ``seed`` or, for an RL job,
    ``rm_seed``), a proxy of :mod:`minirlhf.studies.onpolicy_proxies`, with its held-out
    accuracies as ``report`` (None for the others)."""
    if "data" in job:
        from . import onpolicy_proxies

        return onpolicy_proxies.job_proxy(*_made_key(job))
    if job["proxy"] == "book":
        return store.load_rm(progress=False)[0], None
    return load_proxy(job["proxy"], False)[0], None


def _dpo_job(job: dict) -> dict:
    # a study job of kind "dpo" as dpo_overopt takes it: its own keys only
    return {k: v for k, v in job.items() if k != "kind"}


def _study_job(job: dict, progress: bool = False):
    if job["kind"] in ("exact", "check"):
        policy, _ = store.load_sft(progress=False)
        rm, report = _job_rm(job)
        if job["kind"] == "check":
            return tilt_check(policy, rm, eval_pairs()[: job["prompts"]], job["betas"])
        out = exact_curves(policy, rm, eval_pairs(), job["ns"], job["betas"])
        return out if report is None else {**out, "rm": report}
    if job["kind"] == "dpo":
        from . import dpo_overopt

        return dpo_overopt.dpo_run(_dpo_job(job), progress=progress)
    return rl_run(job, progress=progress)


def _label(job: dict) -> str:
    if job["kind"] == "exact":
        return f"best-of-n and the optimum, {_proxy_name(job)}"
    if job["kind"] == "check":
        return f"the optimum with nothing pruned, {job['prompts']} prompts"
    if job["kind"] == "dpo":
        from . import dpo_overopt

        return dpo_overopt._label(_dpo_job(job))
    return f"{job['optimizer']}, {_proxy_name(job)}, seed {job['seed']}"


def _cost(job: dict) -> float:
    # a rough length, to hand the workers the longest runs first: a DPO run, then RL, then the
    # on-policy proxies (trained inside their job), then the curves that need no training
    if job["kind"] == "dpo":
        return 3.0 * job["steps"] / 600
    if job["kind"] == "rl":
        return job["iterations"] / 32
    if job.get("data") == "on-policy":
        return 1.0
    return 0.1


def study_code() -> str:
    """Return the fingerprint of this study's code and every package module it imports."""
    return store.code_fingerprint(sys.modules[__name__])


def run_study(jobs, progress: bool = True, workers: int | None = None) -> list:
    """Return the result of each job, run side by side by ``workers`` worker processes
    (:func:`minirlhf.parallel.map_runs`), the longest first. A job ``{'kind': 'exact', 'proxy',
    'ns', 'betas'}`` gives :func:`exact_curves` of the partial-SFT policy against that proxy
    ("book", chapter 4's RM, or a name of :data:`PROXIES`); with ``data``, ``pairs`` and
    ``seed`` instead of ``proxy``, against a proxy of
    :mod:`minirlhf.studies.onpolicy_proxies` (trained in the job if it is not stored), with
    its held-out accuracies as ``rm``. ``{'kind': 'check', 'proxy', 'prompts', 'betas'}`` gives
    :func:`tilt_check` on the first ``prompts`` eval prompts, ``{'kind': 'rl', ...}``
    :func:`rl_run` and ``{'kind': 'dpo', ...}`` :func:`minirlhf.studies.dpo_overopt.dpo_run`.
    An RL job may name, instead of ``proxy``, a proxy of that module by ``data``, ``pairs`` and
    ``rm_seed``; a DPO job with ``data`` "on-policy" and ``pairs`` trains on that module's pairs
    and measures its proxy of the same pairs and seed. The proxies of :data:`PROXIES` and those
    the RL and DPO jobs need are made first
    (:func:`make_proxies`), once each, and what
    every worker would draw again (the DPO reference's log-probs, the on-policy pairs) is drawn
    here, before the workers start."""
    from ..parallel import map_runs

    jobs = list(jobs)
    names = sorted({job["proxy"] for job in jobs if "proxy" in job} - {"book"})
    if any("data" in job for job in jobs):
        from . import onpolicy_proxies

        onpolicy_proxies.prepare(jobs)
    # the proxies an RL run or an on-policy DPO run needs are made first, beside chapter 11's
    # own, so that no run waits
    needs = [job for job in jobs if job["kind"] in ("rl", "dpo") and job.get("data", "book") != "book"]
    made = sorted({_made_key(job) for job in needs})
    make_proxies(names, made, progress, workers)
    if any(job["kind"] == "dpo" for job in jobs):
        from . import dpo_overopt

        dpo_jobs = [_dpo_job(job) for job in jobs if job["kind"] == "dpo"]
        for job in dpo_jobs:
            dpo_overopt.dpo_config(job)  # a bad job fails here, before any run
        sft = store.load_sft(progress=False)[0]
        prepared = set()
        for job in dpo_jobs:  # each set of pairs once
            pairs = (job.get("data", "book"), job.get("pairs"))
            if pairs not in prepared:
                prepared.add(pairs)
                dpo.prepare_reference(sft, dpo_overopt.dpo_config(job), dpo_overopt.job_pairs(job)[0])
    order = sorted(range(len(jobs)), key=lambda i: -_cost(jobs[i]))  # stable: ties keep their order
    done = map_runs(
        partial(_study_job, progress=progress),
        [jobs[i] for i in order],
        workers,
        progress=progress,
        desc="chapter 11's runs",
        label=_label,
    )
    results = [None] * len(jobs)
    for i, result in zip(order, done):
        results[i] = result
    return results
