"""The mini-RLHF experiment of chapter 5 (and GRPO's and DPO's arms), over several seeds, with its table and figures.

    python -m minirlhf.experiment --seeds 5 --iterations 25 --beta-rm 0.5 --beta-verifier 0.08
    python -m minirlhf.experiment --arms rm verifier grpo-verifier grpo-rm --seeds 5
    python -m minirlhf.experiment --arms rm verifier dpo --seeds 5 --beta-dpo 0.1

loads (or trains) the partial-SFT policy and the reward model, runs ``ppo_train`` for each
PPO or GRPO arm (default: chapter 5's two) and :func:`minirlhf.dpo.train_dpo` for a DPO arm,
every seed from the same starting policy, prints the results table beside the original run's
values, and writes ``ppo_accuracy.png``, ``ppo_rm_score.png``, ``ppo_kl.png`` and
``results.json`` to ``--out`` (default: the project's ``outputs/``). The arms come from one
registry, :data:`minirlhf.arms.REGISTRY`. The runs are made side by side by worker processes, one per core
(``--workers`` sets how many), with the same results as one after another.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch

from . import parallel, paths, task
from .model import make_generator, reward_scores
from .dpo import DPO_METRICS, HELDOUT_LOGPS, DPOConfig, train_dpo
from .arms import ARMS, DEFAULT_ARMS, DEFAULT_BETA, GRPO_SETTINGS, LABELS, REGISTRY, Arm
from .ppo import EvalSet, PPOConfig, ppo_train, rm_reward, verifier_reward
from .reward_model import HELDOUT_SEED
from .plots import FIGURES, plot_curves
from .stats import mean_ci95, pm
from .store import load_rm, load_sft

__all__ = [
    "Arm", "REGISTRY", "ARMS", "DEFAULT_ARMS", "GRPO_SETTINGS", "DEFAULT_BETA", "ORIGINAL", "mean_ci95", "run_arm",
    "run_arms", "run_experiment", "summarize",
    "format_table", "plot_curves", "write_outputs", "main",
]



# The original run: the numbers of the project this book rebuilds (one seed, its own
# partial-SFT policy and reward model), printed beside ours. Called "original", never
# "reference", which in this book is the frozen policy the KL is measured to.
ORIGINAL = {
    "sft_accuracy": 0.360, "rm_pair_accuracy": 0.884, "rm_near_miss_accuracy": 0.527,
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

    Defined in chapter 5.
    """
    spec = _check_arm(arm)
    extra = {} if seed is None else {"seed": seed}
    if spec.trainer == "dpo" and not isinstance(config, DPOConfig):
        config = DPOConfig()
    if spec.trainer == "ppo" and not isinstance(config, PPOConfig):
        raise ValueError(f"the arm {arm} is trained by PPO: config must be a PPOConfig, got {type(config).__name__}")
    return replace(config, **spec.settings, **extra)


def run_arm(arm: str, policy, rm, seed: int, beta: float | None, config: PPOConfig, evalset=None,
            loss_fn=None, progress: bool = True, advantage_fn=None):
    """Return (trained policy, log) of one run of ``arm``, any name of :data:`REGISTRY`.

    ``policy`` is both the start and the frozen reference; ``config.seed`` is replaced by
    ``seed`` and the arm's own settings are set over ``config`` (:func:`arm_config`); ``beta``
    None takes the arm's default; ``rm`` scores the arms rewarded by the reward model and is
    logged for all. A DPO arm runs :func:`minirlhf.dpo.train_dpo` with ``beta`` as
    ``DPOConfig.beta`` and ``loss_fn`` in place of :func:`minirlhf.dpo.dpo_loss`; it has no
    advantages, so ``advantage_fn`` must be None.

    Defined in chapter 5.
    """
    spec = _check_arm(arm)
    beta = spec.beta if beta is None else beta
    if spec.trainer == "dpo":
        if advantage_fn is not None:
            raise ValueError(f"the arm {arm} is trained by DPO, which has no advantages: advantage_fn must be None")
        cfg = replace(arm_config(arm, config, seed), beta=beta)
        return train_dpo(policy, policy, cfg, rm=rm, evalset=evalset, progress=progress, loss_fn=loss_fn,
                         desc=f"{arm} arm, seed {seed}")
    reward_fn = rm_reward(rm) if spec.reward == "rm" else verifier_reward
    return ppo_train(policy, policy, reward_fn, beta, arm_config(arm, config, seed), rm=rm,
                     loss_fn=loss_fn, advantage_fn=advantage_fn, evalset=evalset, progress=progress,
                     desc=f"{arm} arm, seed {seed}")


def _log_of(job, policy, rm, config, evalset, progress, loss_fn, advantage_fn) -> dict:
    # One run of run_arms, in this process or a worker.
    arm, seed, beta = job
    return run_arm(arm, policy, rm, seed, beta, config, evalset, loss_fn=loss_fn, progress=progress,
                   advantage_fn=advantage_fn)[1]


def run_arms(jobs, policy, rm, config, evalset=None, progress: bool = True, workers: int | None = None,
             loss_fn=None, advantage_fn=None) -> list[dict]:
    """Return the log of :func:`run_arm` for each ``(arm, seed, beta)`` of ``jobs`` (beta None:
    the arm's default), every run from ``policy`` with ``config`` and the same ``rm``,
    ``evalset``, ``loss_fn`` and ``advantage_fn``; the runs made by ``workers`` worker
    processes (None: one per core; 1: here, one after another), with the same logs for any
    number (:func:`minirlhf.parallel.map_runs`).

    Defined in chapter 5.
    """
    return parallel.map_runs(partial(_log_of, policy=policy, rm=rm, config=config, evalset=evalset,
                                     progress=progress, loss_fn=loss_fn, advantage_fn=advantage_fn),
                             jobs, workers, progress=progress, desc="runs",
                             label=lambda job: f"{job[0]} arm, seed {job[1]}"
                                               + ("" if job[2] is None else f", beta {job[2]:g}"))


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
LOGGED = ("accuracy", "rm_score", "kl", "kinds", "objective/scores", "objective/kl",
          "objective/entropy", "policy/clipfrac_avg", "policy/approxkl_avg", "val/completion_length",
          "frac_reward_zero_std", "steps", *DPO_METRICS, *HELDOUT_LOGPS, "implicit_reward")


def _run_one(job, policy, rm, beta, cfg, dpo_cfg, evalset, progress):
    # One run of the experiment, in this process or a worker: its kept log and its wall time.
    seed, arm = job
    began = time.perf_counter()
    arm_cfg = dpo_cfg if REGISTRY[arm].trainer == "dpo" else cfg
    _, log = run_arm(arm, policy, rm, seed, beta[arm], arm_cfg, evalset, progress=progress)
    return {key: log[key] for key in LOGGED if key in log}, time.perf_counter() - began


def run_experiment(seeds=5, iterations: int = 25, beta_rm: float = DEFAULT_BETA["rm"],
                   beta_verifier: float = DEFAULT_BETA["verifier"], config: PPOConfig | None = None,
                   progress: bool = True, arms=DEFAULT_ARMS, betas: dict | None = None,
                   dpo_config: DPOConfig | None = None, workers: int | None = None,
                   keep_on_interrupt: bool = False) -> dict:
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

    Defined in chapter 5.
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
        if REGISTRY[arm].trainer == "dpo" and not beta[arm] > 0:
            raise ValueError(f"the beta of the DPO arm {arm} must be > 0, got {beta[arm]}")
    dpo_cfg = dpo_config or DPOConfig()
    start = time.perf_counter()
    policy, sft_metrics = load_sft(progress=progress)
    rm, rm_metrics = load_rm(progress=progress)
    cfg = replace(config or PPOConfig(), iterations=iterations)
    for arm in arms:  # an arm's settings that do not fit the config fail now, not later
        arm_config(arm, dpo_cfg if REGISTRY[arm].trainer == "dpo" else cfg)
    evalset = EvalSet()
    rm_landmarks = _rm_landmarks(rm, evalset)
    jobs = [(seed, arm) for seed in seeds for arm in arms]  # seed by seed: seeds finish in turn
    done = {}

    def keep(i, result):
        done[jobs[i]] = result

    try:
        parallel.map_runs(partial(_run_one, policy=policy, rm=rm, beta=beta, cfg=cfg, dpo_cfg=dpo_cfg,
                                  evalset=evalset, progress=progress),
                          jobs, workers, progress=progress, desc="experiment runs",
                          label=lambda job: f"{job[1]} arm, seed {job[0]}", on_result=keep)
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
    if any(REGISTRY[arm].trainer == "dpo" for arm in arms):  # likewise, only with a DPO arm
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
        for key, idx, name in (("accuracy", 0, "start"), ("accuracy", -1, "end"),
                               ("rm_score", 0, "rm_score_start"), ("rm_score", -1, "rm_score_end"),
                               ("kl", -1, "kl_end")):
            row[name], row[name + "_ci"] = mean_ci95([log[key][idx] for log in logs])
        gains = [log["accuracy"][-1] - log["accuracy"][0] for log in logs]
        row["gain"], row["gain_ci"] = mean_ci95(gains)
        row["kl_mean"], row["kl_mean_ci"] = mean_ci95([float(np.mean(log["kl"][1:])) for log in logs])
        if all("frac_reward_zero_std" in log for log in logs):
            row["zero_std_mean"], row["zero_std_mean_ci"] = mean_ci95(
                [float(np.mean(log["frac_reward_zero_std"])) for log in logs])
        if all("implicit_reward" in log for log in logs):
            for key in ("pair_accuracy", "near_miss_accuracy"):
                row[f"implicit_{key}"], row[f"implicit_{key}_ci"] = mean_ci95(
                    [log["implicit_reward"][key] for log in logs])
        row["n_seeds"] = len(logs)
        out[arm] = row
    return out


def format_table(results: dict) -> str:
    """Return the results table (ours, mean ± 95% half-width over seeds, beside the original run's end).

    Defined in chapter 5.
    """
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
    lines.append(f"(mean ± 95% interval over {n} seed{'s' if n > 1 else ''}; original run: one seed, "
                 f"start {ORIGINAL['rm']['start']:.3f})")
    for arm in arms:
        if "zero_std_mean" in s[arm]:
            lines.append(f"{arm}: share of groups with equal rewards (advantage 0), mean over the "
                         f"iterations: {pm(s[arm]['zero_std_mean'], s[arm]['zero_std_mean_ci'])}")
        if "implicit_pair_accuracy" in s[arm]:
            lines.append(f"{arm}: implicit reward on the held-out pairs, pair accuracy "
                         f"{pm(s[arm]['implicit_pair_accuracy'], s[arm]['implicit_pair_accuracy_ci'])}, "
                         f"near-miss accuracy "
                         f"{pm(s[arm]['implicit_near_miss_accuracy'], s[arm]['implicit_near_miss_accuracy_ci'])} "
                         f"(the RM's: {results['rm_pair_accuracy']:.3f}, {results['rm_near_miss_accuracy']:.3f})")
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

    Defined in chapter 5.
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


MAX_SEEDS = 1000  # --seeds above this is refused: at a few seconds a seed, that is hours already
MAX_ITERATIONS = 1000  # --iterations above this is refused: 40 times the book's 25, minutes per run already
SECONDS_PER_ARM_ITERATION = 0.17  # a rough cost on a laptop CPU in float64, for the estimate made before the first seed
SECONDS_PER_DPO_RUN = 18.0  # a DPO arm's run with its default settings (200 steps), likewise rough
# The files write_outputs makes, so the command can check their places before it runs.
OUTPUT_FILES = (*FIGURES, "results.json")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, ending in where to look."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seed_count(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SEEDS}, got {value} (each seed runs every arm)")
    return value


def _iteration_count(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_ITERATIONS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_ITERATIONS}, got {value} (the book runs 25)")
    return value


def _beta(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a folder, e.g. --out outputs/run1")
    return Path(text)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _merge(parts: list[dict]) -> dict:
    """Return the results of several one-seed runs of :func:`run_experiment` as one run's."""
    merged = copy.deepcopy(parts[0])
    for part in parts[1:]:
        for arm, runs in part["arms"].items():
            merged["arms"][arm].update(runs)
            merged["run_seconds"][arm].update(part["run_seconds"][arm])
        merged["settings"]["seeds"] += part["settings"]["seeds"]
        merged["wall_seconds"] += part["wall_seconds"]
    return merged


# SIGTERM and SIGHUP stop the command as Ctrl-C does: the finished seeds are written.
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_stopped_by: list = []  # the stop signal that arrived, if one did


def _on_stop_signal(signum, frame):
    for sig in _STOP_SIGNALS:  # one is enough: the finished seeds are written undisturbed
        signal.signal(sig, signal.SIG_IGN)
    _stopped_by.append(signum)
    raise KeyboardInterrupt


def _stop_name() -> str:
    """How the run was stopped, in words: "interrupted" (Ctrl-C) or "stopped by SIGTERM"."""
    return f"stopped by {signal.Signals(_stopped_by[0]).name}" if _stopped_by else "interrupted"


def _stop_status() -> int:
    return 128 + (_stopped_by[0] if _stopped_by else signal.SIGINT)


def _run_seeds(seeds: int, iterations: int, arms: tuple, betas: dict, workers: int = 1) -> tuple[list[dict], bool]:
    """Run the experiment, saying, for a long run, the time it will take. With one worker, one
    seed at a time ("seed k of N"); with more, all the runs at once, a line or a bar per run
    that finishes. Return (the results of the seeds that finished, whether Ctrl-C, SIGTERM or
    SIGHUP stopped it)."""
    parts: list[dict] = []
    n_dpo = sum(REGISTRY[arm].trainer == "dpo" for arm in arms)  # a DPO run's length ignores --iterations
    guess = seeds * ((len(arms) - n_dpo) * iterations * SECONDS_PER_ARM_ITERATION + n_dpo * SECONDS_PER_DPO_RUN)
    workers = parallel.resolve_workers(workers, seeds * len(arms))
    if workers > 1:
        guess /= workers
        if guess > 60:
            print(f"{seeds} seeds x {len(arms)} arms x {iterations} iterations on {workers} worker processes: "
                  f"about {_duration(guess)} (a rough estimate); Ctrl-C stops and keeps the finished seeds",
                  flush=True)
        try:
            results = run_experiment(seeds, iterations, arms=arms, betas=betas, workers=workers,
                                     keep_on_interrupt=True)
        except KeyboardInterrupt:
            results = None
        interrupted = results is None or len(results["settings"]["seeds"]) < seeds
        if interrupted and sys.stderr.isatty():
            print(file=sys.stderr)  # off the progress bar's line
        return ([results] if results else []), interrupted
    if guess > 60:
        print(f"{seeds} seeds x {len(arms)} arms x {iterations} iterations: about {_duration(guess)} "
              "(a rough estimate, measured after the first seed); Ctrl-C stops and keeps the finished seeds",
              flush=True)
    try:
        for k in range(seeds):
            if seeds > 1:
                print(f"seed {k + 1} of {seeds}", flush=True)
            began = time.perf_counter()
            parts.append(run_experiment([k], iterations, arms=arms, betas=betas, workers=1))
            took, left = time.perf_counter() - began, seeds - k - 1
            if k == 0 and left and took * seeds > 60:
                print(f"seed 1 took {took:.1f} s: about {_duration(took * left)} to go for the other {left}",
                      flush=True)
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            print(file=sys.stderr)  # off the progress bar's line
        return parts, True
    return parts, False


def _keep_somewhere(results: dict) -> Path:
    """Write ``results`` (with its summary) to a new file in the system's temporary folder."""
    fd, name = tempfile.mkstemp(prefix="minirlhf-results-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({**results, "summary": summarize(results), "original": ORIGINAL}, f, indent=1)
    return Path(name)


def main(argv=None) -> int:
    """Run the experiment from the command line; return the exit status.

    The output folder and the model folder are checked before anything runs, and the output
    folder is held for this run (:func:`minirlhf.paths.output_lock`: a second run into it is
    refused); Ctrl-C, SIGTERM and SIGHUP keep the seeds that finished and say which were not
    kept; a write that fails at the end keeps the results in a file of the system's temporary
    folder and says where.

    Defined in chapter 5.
    """
    w = max(len(name) for name in ARMS)
    arm_list = "\n".join(f"  {name:<{w}}  {arm.help}" for name, arm in REGISTRY.items())
    parser = _Parser(prog="python -m minirlhf.experiment", description=__doc__.split("\n\n")[0],
                     epilog=f"arms (--arms):\n{arm_list}", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(DEFAULT_ARMS), metavar="ARM",
                        help=f"the arms to run, in this order (default: {' '.join(DEFAULT_ARMS)}; "
                             "listed below)")
    parser.add_argument("--seeds", type=_seed_count, default=5,
                        help=f"number of seeds, 0..n-1 (default 5, at most {MAX_SEEDS})")
    parser.add_argument("--iterations", type=_iteration_count, default=25,
                        help=f"PPO iterations per run (default 25, at most {MAX_ITERATIONS}; a DPO arm runs its "
                             "own 200 steps)")
    for arm in ARMS:
        what = "beta in the loss" if REGISTRY[arm].trainer == "dpo" else "KL coefficient"
        parser.add_argument(f"--beta-{arm}", type=_beta, default=None,
                            help=f"{what} of the {LABELS[arm]} (default {DEFAULT_BETA[arm]:g})")
    parser.add_argument("--out", type=_folder, default=None, help="output folder (default: the project's outputs/)")
    parser.add_argument("--workers", type=_positive_int, default=None,
                        help=f"worker processes that make the runs side by side (default: one per core, "
                             f"{parallel.default_workers()} here; 1: one run after another in this process); "
                             "the results are the same for any number")
    args = parser.parse_args(argv)
    arms = tuple(args.arms)
    if len(set(arms)) != len(arms):
        parser.error(f"argument --arms: names an arm twice: {' '.join(arms)}")
    betas = {}
    for arm in ARMS:
        value = getattr(args, f"beta_{arm.replace('-', '_')}")
        if value is not None and arm not in arms:
            parser.error(f"argument --beta-{arm}: the arm {arm} is not among --arms ({' '.join(arms)})")
        if value == 0 and REGISTRY[arm].trainer == "dpo":
            parser.error(f"argument --beta-{arm}: must be > 0 for DPO (at 0 its loss is log 2 "
                         "whatever the policy, so nothing is learned), got 0")
        if value is not None:
            betas[arm] = value
    out = args.out if args.out is not None else paths.OUTPUTS
    where = "--out" if args.out is not None else "the output folder (MINIRLHF_OUTPUTS, or outputs/)"
    problem = paths.folder_problem(out, OUTPUT_FILES)
    if problem:
        parser.error(f"{where}: {problem}")
    from .store import models_dir

    problem = paths.folder_problem(models_dir())
    if problem:
        parser.error(f"the models' folder (MINIRLHF_OUTPUTS/models): {problem}")
    import matplotlib

    matplotlib.use("Agg")  # files only; set here, not in write_outputs, which notebooks call too
    torch.set_num_threads(1)  # an entry point's choice: runs are bit-identical at a fixed count
    _stopped_by.clear()
    previous = {sig: signal.signal(sig, _on_stop_signal) for sig in _STOP_SIGNALS}
    try:
        with paths.output_lock(out, "python -m minirlhf.experiment"):
            return _run_and_write(args, arms, betas, out)
    except paths.FolderInUse as exc:
        parser.error(f"{where}: {exc}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_and_write(args, arms: tuple, betas: dict, out: Path) -> int:
    """The runs and the writes of :func:`main`, once its checks have passed and it holds ``out``."""
    parts, interrupted = _run_seeds(args.seeds, args.iterations, arms, betas, args.workers)
    # From here on the finished seeds are written whole: a stop signal now is ignored.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *_STOP_SIGNALS)}
    try:
        return _write(args, parts, interrupted, out)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _write(args, parts: list[dict], interrupted: bool, out: Path) -> int:
    """Print the table of the finished seeds, write them to ``out`` and say what was kept."""
    if not parts:
        print(f"{_stop_name()} before the first seed finished: nothing written", file=sys.stderr)
        return _stop_status()
    results = _merge(parts)
    print(f"SFT policy accuracy {results['sft_accuracy']:.3f} (original run {ORIGINAL['sft_accuracy']:.3f}); "
          f"RM pair accuracy {results['rm_pair_accuracy']:.3f} ({ORIGINAL['rm_pair_accuracy']:.3f}), "
          f"near-miss accuracy {results['rm_near_miss_accuracy']:.3f} ({ORIGINAL['rm_near_miss_accuracy']:.3f})")
    print(format_table(results))
    try:
        written = write_outputs(results, out)
    except OSError as exc:
        kept = _keep_somewhere(results)
        print(f"could not write to {out} ({exc.strerror or exc}); the results are kept in {kept}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"wall time {results['wall_seconds']:.1f} s")
    if interrupted:
        kept = results["settings"]["seeds"]
        n = len(kept)
        lost = [seed for seed in range(args.seeds) if seed not in kept]
        if kept == list(range(n)):
            rest = f"seed {n} is" if n == args.seeds - 1 else f"seeds {n} to {args.seeds - 1} are"
            print(f"{_stop_name()} during seed {n + 1} of {args.seeds}: wrote the {n} finished "
                  f"seed{'s' if n > 1 else ''}; {rest} not kept", file=sys.stderr)
        else:  # runs in parallel finish out of turn
            print(f"{_stop_name()} with {len(lost)} of {args.seeds} seeds unfinished: wrote the {n} finished "
                  f"seed{'s' if n > 1 else ''} ({', '.join(map(str, kept))}); not kept: "
                  f"{', '.join(map(str, lost))}", file=sys.stderr)
        return _stop_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
