"""The mini-RLHF experiment of chapter 5 (and GRPO's and DPO's arms), over several seeds, with its table and figures.

    python -m minirlhf.commands.experiment --seeds 5 --iterations 25 --beta-rm 0.5 --beta-verifier 0.08
    python -m minirlhf.commands.experiment --arms rm verifier grpo-verifier grpo-rm --seeds 5
    python -m minirlhf.commands.experiment --arms rm verifier dpo --seeds 5 --beta-dpo 0.1

loads (or trains) the partial-SFT policy and the reward model, runs ``ppo_train`` for each
PPO or GRPO arm (default: chapter 5's two) and :func:`minirlhf.dpo.train_dpo` for a DPO arm,
every seed from the same starting policy, prints the results table beside the original run's
values, and writes ``ppo_accuracy.png``, ``ppo_rm_score.png``, ``ppo_kl.png`` and
``results.json`` to ``--out`` (default: the project's ``outputs/``). The arms come from one
registry, :data:`minirlhf.arms.REGISTRY`, and each is run by its trainer, read from
:data:`minirlhf.trainers.TRAINERS`. The runs are made side by side by worker processes, one per core
(``--workers`` sets how many), with the same results as one after another.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from . import parallel, paths, task, trainers
from .arms import ARMS, DEFAULT_ARMS, DEFAULT_BETA, REGISTRY, Arm
from .dpo import DPO_METRICS, HELDOUT_LOGPS, DPOConfig
from .evaluation import EvalSet
from .model import make_generator, reward_scores
from .plots import FIGURES, plot_curves
from .ppo import PPOConfig
from .reward_model import HELDOUT_SEED
from .stats import mean_ci95, pm
from .store import load_rm, load_sft

__all__ = [
    "ORIGINAL",
    "arm_config",
    "run_arm",
    "run_arms",
    "run_experiment",
    "summarize",
    "format_table",
    "plot_curves",
    "write_outputs",
]


# The original run: the numbers of the project this book rebuilds (one seed, its own
# partial-SFT policy and reward model), printed beside ours. Called "original", never
# "reference", which in this book is the frozen policy the KL is measured to.
ORIGINAL = {
    "sft_accuracy": 0.360,
    "rm_pair_accuracy": 0.884,
    "rm_near_miss_accuracy": 0.527,
    "rm": {"start": 0.360, "end": 0.298, "rm_score": 2.2, "kl": "0.02-0.04"},
    "verifier": {"start": 0.360, "end": 0.583, "rm_score": 2.2, "kl": "about 0.1"},
}


def _check_arm(arm: str) -> "Arm":
    if arm not in REGISTRY:
        raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
    return REGISTRY[arm]


def arm_config(arm: str, config, seed: int | None = None):
    """Return ``config`` with the settings of ``arm`` (see :data:`REGISTRY`) set over it, and
    ``seed`` if given. Chapter 5's arms change nothing. A DPO arm's config is a
    :class:`~minirlhf.dpo.DPOConfig`: ``config`` when it is one, else DPO's defaults.
    """
    spec = _check_arm(arm)
    trainer = trainers.get(spec.trainer)
    extra = {} if seed is None else {"seed": seed}
    if not isinstance(config, trainer.config):
        if not trainer.own_defaults:
            raise ValueError(
                f"the arm {arm} is trained by {trainer.name.upper()}: config must be a "
                f"{trainer.config.__name__}, got {type(config).__name__}"
            )
        config = trainer.config()
    return replace(config, **spec.settings, **extra)


def run_arm(
    arm: str,
    policy,
    rm,
    seed: int,
    beta: float | None,
    config: PPOConfig,
    evalset=None,
    loss_fn=None,
    progress: bool = True,
    advantage_fn=None,
):
    """Return (trained policy, log) of one run of ``arm``, any name of :data:`REGISTRY`.

    ``policy`` is both the start and the frozen reference; ``config.seed`` is replaced by
    ``seed`` and the arm's own settings are set over ``config`` (:func:`arm_config`); ``beta``
    None takes the arm's default; ``rm`` scores the arms rewarded by the reward model and is
    logged for all. A DPO arm runs :func:`minirlhf.dpo.train_dpo` with ``beta`` as
    ``DPOConfig.beta`` and ``loss_fn`` in place of :func:`minirlhf.dpo.dpo_loss`; it has no
    advantages, so ``advantage_fn`` must be None.
    """
    spec = _check_arm(arm)
    beta = spec.beta if beta is None else beta
    run = trainers.get(spec.trainer).run
    cfg = arm_config(arm, config, seed)
    return run(spec, policy, rm, beta, cfg, evalset, loss_fn, advantage_fn, progress, f"{arm} arm, seed {seed}")


def _log_of(job, policy, rm, config, evalset, progress, loss_fn, advantage_fn) -> dict:
    # One run of run_arms, in this process or a worker.
    arm, seed, beta = job
    return run_arm(
        arm, policy, rm, seed, beta, config, evalset, loss_fn=loss_fn, progress=progress, advantage_fn=advantage_fn
    )[1]


def run_arms(
    jobs,
    policy,
    rm,
    config,
    evalset=None,
    progress: bool = True,
    workers: int | None = None,
    loss_fn=None,
    advantage_fn=None,
) -> list[dict]:
    """Return the log of :func:`run_arm` for each ``(arm, seed, beta)`` of ``jobs`` (beta None:
    the arm's default), every run from ``policy`` with ``config`` and the same ``rm``,
    ``evalset``, ``loss_fn`` and ``advantage_fn``; the runs made by ``workers`` worker
    processes (None: one per core; 1: here, one after another), with the same logs for any
    number (:func:`minirlhf.parallel.map_runs`).
    """
    jobs = list(jobs)
    trainers.prepare([(_check_arm(job[0]), arm_config(job[0], config)) for job in jobs], policy)
    return parallel.map_runs(
        partial(
            _log_of,
            policy=policy,
            rm=rm,
            config=config,
            evalset=evalset,
            progress=progress,
            loss_fn=loss_fn,
            advantage_fn=advantage_fn,
        ),
        jobs,
        workers,
        progress=progress,
        desc="runs",
        label=lambda job: f"{job[0]} arm, seed {job[1]}" + ("" if job[2] is None else f", beta {job[2]:g}"),
    )


def _check_arms(arms) -> tuple[str, ...]:
    arms = tuple(arms)
    if not arms:
        raise ValueError("arms must name at least one arm")
    for arm in arms:
        _check_arm(arm)
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms must not repeat an arm, got {arms}")
    return arms


# The per-iteration lists results.json keeps of each run; "frac_reward_zero_std" only for arms
# that sample groups (ppo.GROUP_METRICS); for DPO arms the step of each evaluation ("steps"),
# the per-step metrics of dpo.DPO_METRICS, the held-out log-probs of dpo.HELDOUT_LOGPS per
# evaluation and the held-out report "implicit_reward".
LOGGED = (
    "accuracy",
    "eval_iterations",
    "rm_score",
    "kl",
    "kinds",
    "objective/scores",
    "objective/kl",
    "objective/entropy",
    "policy/clipfrac_avg",
    "policy/approxkl_avg",
    "val/completion_length",
    "frac_reward_zero_std",
    "steps",
    *DPO_METRICS,
    *HELDOUT_LOGPS,
    "implicit_reward",
)


def _config_of(arm: str, cfg: PPOConfig, dpo_cfg: DPOConfig):
    # The config an arm of the experiment starts from: its trainer's, of the two given.
    return next(c for c in (cfg, dpo_cfg) if isinstance(c, trainers.get(REGISTRY[arm].trainer).config))


def _run_one(job, policy, rm, beta, cfg, dpo_cfg, evalset, progress):
    # One run of the experiment, in this process or a worker: its kept log and its wall time.
    seed, arm = job
    began = time.perf_counter()
    _, log = run_arm(arm, policy, rm, seed, beta[arm], _config_of(arm, cfg, dpo_cfg), evalset, progress=progress)
    return {key: log[key] for key in LOGGED if key in log}, time.perf_counter() - began


def run_experiment(
    seeds=5,
    iterations: int = 25,
    beta_rm: float = DEFAULT_BETA["rm"],
    beta_verifier: float = DEFAULT_BETA["verifier"],
    config: PPOConfig | None = None,
    progress: bool = True,
    arms=DEFAULT_ARMS,
    betas: dict | None = None,
    dpo_config: DPOConfig | None = None,
    workers: int | None = None,
    keep_on_interrupt: bool = False,
) -> dict:
    """Return the experiment's results: every arm and seed's per-iteration log, and the settings.

    ``seeds`` is a count (seeds 0..n-1) or a list of seeds. ``arms`` names arms of
    :data:`REGISTRY` (default chapter 5's two); each takes its default beta, except
    ``beta_rm`` and ``beta_verifier`` for chapter 5's arms and ``betas`` ({arm: beta}) for
    any. ``iterations`` and ``config`` set the PPO arms; ``dpo_config`` the DPO arms (default
    :class:`~minirlhf.dpo.DPOConfig`, whose ``steps`` and ``eval_every`` fix the number of
    evaluations). See :func:`write_outputs` for the layout, which is also the layout of
    ``results.json``.

    The runs (seeds x arms) are made by ``workers`` worker processes (None: one per core; 1:
    here, one after another), with the same results whatever their number
    (:func:`minirlhf.parallel.map_runs`). With ``keep_on_interrupt``, Ctrl-C returns the
    results of the seeds whose every run had finished (``settings["seeds"]`` lists them)
    instead of raising, unless none had.
    """
    seeds = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    arms = _check_arms(arms)
    beta = {arm: DEFAULT_BETA[arm] for arm in arms}
    beta.update({arm: b for arm, b in (("rm", beta_rm), ("verifier", beta_verifier)) if arm in arms})
    for arm, b in (betas or {}).items():
        if arm not in arms:
            raise ValueError(f"betas names {arm!r}, which is not among the arms {arms}")
        beta[arm] = b
    for name, b in (("beta_rm", beta_rm), ("beta_verifier", beta_verifier), *beta.items()):
        if not (b >= 0 and math.isfinite(b)):
            raise ValueError(f"{name} must be a finite number >= 0, got {b}")
    for arm in arms:
        trainer = trainers.get(REGISTRY[arm].trainer)
        if trainer.beta_zero and not beta[arm] > 0:
            raise ValueError(f"the beta of the {trainer.name.upper()} arm {arm} must be > 0, got {beta[arm]}")
    dpo_cfg = dpo_config or DPOConfig()
    start = time.perf_counter()
    policy, sft_metrics = load_sft(progress=progress)
    rm, rm_metrics = load_rm(progress=progress)
    cfg = replace(config or PPOConfig(), iterations=iterations)
    for arm in arms:  # an arm's settings that do not fit the config fail now, not later
        arm_config(arm, _config_of(arm, cfg, dpo_cfg))
    evalset = EvalSet()
    rm_landmarks = _rm_landmarks(rm, evalset)
    jobs = [(seed, arm) for seed in seeds for arm in arms]  # seed by seed: seeds finish in turn
    done = {}

    def keep(i, result):
        done[jobs[i]] = result

    trainers.prepare([(REGISTRY[arm], arm_config(arm, _config_of(arm, cfg, dpo_cfg))) for arm in arms], policy)
    try:
        parallel.map_runs(
            partial(
                _run_one, policy=policy, rm=rm, beta=beta, cfg=cfg, dpo_cfg=dpo_cfg, evalset=evalset, progress=progress
            ),
            jobs,
            workers,
            progress=progress,
            desc="experiment runs",
            label=lambda job: f"{job[1]} arm, seed {job[0]}",
            on_result=keep,
        )
    except KeyboardInterrupt:
        seeds = [seed for seed in seeds if all((seed, arm) in done for arm in arms)]
        if not (keep_on_interrupt and seeds):
            raise
    runs = {arm: {str(seed): done[seed, arm][0] for seed in seeds} for arm in arms}
    seconds = {arm: {str(seed): done[seed, arm][1] for seed in seeds} for arm in arms}
    settings = {"seeds": seeds, "iterations": iterations, "beta": beta, "ppo": asdict(cfg)}
    changed = {arm: REGISTRY[arm].settings for arm in arms if REGISTRY[arm].settings}
    if changed:  # only when an arm sets its own settings: chapter 5's layout is unchanged
        settings["arm_settings"] = changed
    if any(isinstance(_config_of(arm, cfg, dpo_cfg), DPOConfig) for arm in arms):  # likewise, with a DPO arm
        settings["dpo"] = asdict(dpo_cfg)
    return {
        "settings": settings,
        "sft_accuracy": sft_metrics["accuracy"],
        "rm_pair_accuracy": rm_metrics["pair_accuracy"],
        "rm_near_miss_accuracy": rm_metrics["near_miss_accuracy"],
        "rm_landmarks": rm_landmarks,
        "arms": runs,
        "run_seconds": seconds,
        "wall_seconds": time.perf_counter() - start,
    }


@torch.no_grad()
def _rm_landmarks(rm, evalset) -> dict:
    # The RM's mean score of the right answers and of garbage on the eval prompts: the scale
    # against which the arms' RM scores should be read.
    right = task.correct_completions(evalset.pairs)
    garbage = task.wrong_answers(evalset.pairs, "random", make_generator(HELDOUT_SEED))
    return {
        "right answers": reward_scores(rm, evalset.prompts, right).double().mean().item(),
        "garbage answers": reward_scores(rm, evalset.prompts, garbage).double().mean().item(),
    }


def summarize(results: dict) -> dict:
    """Return per arm: start, end (mean and 95% half-width over seeds), end RM score and KL;
    for arms that sample groups also ``zero_std_mean``, the share of groups with equal rewards
    averaged over the iterations (and its interval over seeds); for DPO arms also
    ``implicit_pair_accuracy`` and ``implicit_near_miss_accuracy``, the implicit reward's
    held-out accuracies at the end (and their intervals).

    Defined in chapter 5.
    """
    out = {}
    for arm, runs in results["arms"].items():
        logs = list(runs.values())
        row = {}
        for key, idx, name in (
            ("accuracy", 0, "start"),
            ("accuracy", -1, "end"),
            ("rm_score", 0, "rm_score_start"),
            ("rm_score", -1, "rm_score_end"),
            ("kl", -1, "kl_end"),
        ):
            row[name], row[name + "_ci"] = mean_ci95([log[key][idx] for log in logs])
        gains = [log["accuracy"][-1] - log["accuracy"][0] for log in logs]
        row["gain"], row["gain_ci"] = mean_ci95(gains)
        row["kl_mean"], row["kl_mean_ci"] = mean_ci95([float(np.mean(log["kl"][1:])) for log in logs])
        if all("frac_reward_zero_std" in log for log in logs):
            row["zero_std_mean"], row["zero_std_mean_ci"] = mean_ci95(
                [float(np.mean(log["frac_reward_zero_std"])) for log in logs]
            )
        if all("implicit_reward" in log for log in logs):
            for key in ("pair_accuracy", "near_miss_accuracy"):
                row[f"implicit_{key}"], row[f"implicit_{key}_ci"] = mean_ci95(
                    [log["implicit_reward"][key] for log in logs]
                )
        row["n_seeds"] = len(logs)
        out[arm] = row
    return out


def format_table(results: dict) -> str:
    """Return the results table (ours, mean ± 95% half-width over seeds, beside the original run's end)."""
    s = summarize(results)
    arms = list(results["arms"])
    w = max(9, *(len(arm) for arm in arms))  # 9, as always, for chapter 5's arms
    lines = [
        f"{'arm':<{w}} {'start':>7} {'end (ours)':>16} {'gain (ours)':>16} {'end (orig)':>11} "
        f"{'RM score end':>16} {'KL/token end':>16}",
    ]
    for arm in arms:
        r = s[arm]
        orig = f"{ORIGINAL[arm]['end']:.3f}" if arm in ORIGINAL else "-"
        lines.append(
            f"{arm:<{w}} {r['start']:>7.3f} {pm(r['end'], r['end_ci']):>16} {pm(r['gain'], r['gain_ci']):>16} "
            f"{orig:>11} {pm(r['rm_score_end'], r['rm_score_end_ci'], 2):>16} "
            f"{pm(r['kl_end'], r['kl_end_ci']):>16}"
        )
    n = s[arms[0]]["n_seeds"]
    lines.append(
        f"(mean ± 95% interval over {n} seed{'s' if n > 1 else ''}; original run: one seed, "
        f"start {ORIGINAL['rm']['start']:.3f})"
    )
    for arm in arms:
        if "zero_std_mean" in s[arm]:
            lines.append(
                f"{arm}: share of groups with equal rewards (advantage 0), mean over the "
                f"iterations: {pm(s[arm]['zero_std_mean'], s[arm]['zero_std_mean_ci'])}"
            )
        if "implicit_pair_accuracy" in s[arm]:
            lines.append(
                f"{arm}: implicit reward on the held-out pairs, pair accuracy "
                f"{pm(s[arm]['implicit_pair_accuracy'], s[arm]['implicit_pair_accuracy_ci'])}, "
                f"near-miss accuracy "
                f"{pm(s[arm]['implicit_near_miss_accuracy'], s[arm]['implicit_near_miss_accuracy_ci'])} "
                f"(the RM's: {results['rm_pair_accuracy']:.3f}, {results['rm_near_miss_accuracy']:.3f})"
            )
    return "\n".join(lines)


def write_outputs(results: dict, out: Path) -> list[Path]:
    """Write results.json and the three figures to ``out``; return the paths written.

    results.json: ``settings`` (with ``arm_settings`` when an arm changes the recipe's
    settings), ``sft_accuracy``, ``rm_pair_accuracy``,
    ``rm_near_miss_accuracy``, ``rm_landmarks`` (the RM's mean score of right answers and
    of garbage on the eval prompts), ``arms[arm][seed]`` with per-iteration lists ``accuracy``,
    ``rm_score``, ``kl`` (index 0 = before training) and the batch metrics (with
    ``frac_reward_zero_std`` for arms that sample groups), ``summary``, ``run_seconds[arm][seed]``
    (each run's wall time) and ``wall_seconds``.
    """
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (key, ylabel, title) in FIGURES.items():
        landmarks = results.get("rm_landmarks") if key == "rm_score" else None
        ax = plot_curves(results, key, ylabel, title, landmarks=landmarks)
        ax.figure.tight_layout()
        paths.save_figure(ax.figure, out / name, dpi=120)  # atomic: a stop mid-write leaves no half PNG
        plt.close(ax.figure)
        written.append(out / name)
    payload = {**results, "summary": summarize(results), "original": ORIGINAL}
    paths.write_atomic(out / "results.json", json.dumps(payload, indent=1))
    written.append(out / "results.json")
    return written
