"""Stored results of the chapters' longer runs, reused while the code and settings are the same.

A chapter that shows a minute of PPO runs should not repeat them on every execution, and must
never show results that other code or other settings made. :func:`load_or_run` keys a stored
file on the run's settings, on a fingerprint of the engine code that makes the runs, and on
the starting point of a few runs the chapter has just made itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from functools import partial
from pathlib import Path

from .. import experiment
from ..parallel import map_runs
from ..paths import OUTPUTS, write_atomic
from ..store import code_fingerprint
from ..studies.robustness import gain

__all__ = ["same_curves", "load_or_run", "stored_experiment", "stored_arms", "stored_starts",
           "weights_digest", "stored_runs", "stored_bug_runs"]


def same_curves(a: dict, b: dict, upto: int | None = None) -> bool:
    """Return True when two run logs hold the same eval curves (the first ``upto`` points, or
    all), to the last digit."""
    return all(list(a[k])[:upto] == list(b[k])[:upto] for k in ("accuracy", "rm_score", "kl"))


def load_or_run(path: Path, settings: dict, starts: dict, run) -> dict:
    """Return the results stored at ``path`` if the current engine code made them with
    ``settings`` from the same starting point as the runs in ``starts`` (``{(arm, seed_key):
    log}``, may be empty); otherwise call ``run()``, store what it returns with the settings,
    and return that, exactly as a later load will return it.
    """
    path = Path(path)
    settings = json.loads(json.dumps({**settings, "code": code_fingerprint(experiment)}, default=str))
    try:
        stored = json.loads(path.read_text())
        if stored["settings"] == settings and all(
                same_curves(stored["arms"][arm][key], log, upto=1) for (arm, key), log in starts.items()):
            return stored
    except (OSError, ValueError, KeyError):
        pass
    stored = {**run(), "settings": settings}
    write_atomic(path, json.dumps(stored, indent=1))
    return json.loads(path.read_text())


def stored_experiment(seeds, cfg, beta: dict, starts: dict, progress: bool = False,
                      workers: int | None = None) -> dict:
    """Return chapter 5's experiment: both arms for every seed in ``seeds``, with the PPO
    settings ``cfg`` and ``beta`` (``{arm: beta}``), laid out as ``python -m
    minirlhf.experiment`` writes ``outputs/results.json``.

    Read from that file through :func:`load_or_run` (``starts`` as there: the seed-0 runs a
    chapter has just made); otherwise run with :func:`minirlhf.experiment.run_experiment`
    and written with the three figures. Chapters 5 and 6 both call it, so they read one file
    with one set of settings and never show different runs. Here and in the other functions
    of this module, ``workers`` worker processes make the runs (None: one per core; the same
    results for any number, :func:`minirlhf.parallel.map_runs`).
    """

    def run():
        done = experiment.run_experiment(seeds, cfg.iterations, beta["rm"], beta["verifier"], cfg,
                                         progress=progress, workers=workers)
        experiment.write_outputs(done, OUTPUTS)
        return json.loads((OUTPUTS / "results.json").read_text())

    settings = {"seeds": list(seeds), "iterations": cfg.iterations, "beta": beta, "ppo": asdict(cfg)}
    return load_or_run(OUTPUTS / "results.json", settings, starts, run)


def stored_arms(path, seeds, arms, cfg, starts: dict | None = None, progress: bool = False,
                workers: int | None = None) -> dict:
    """Return the experiment of ``arms`` (names of :data:`minirlhf.experiment.REGISTRY`, each
    at its default beta) over ``seeds``, laid out as ``results.json``: the PPO and GRPO arms
    with the settings ``cfg``, the DPO arms with :class:`~minirlhf.dpo.DPOConfig`'s defaults.

    Stored at ``path`` and read back through :func:`load_or_run` (``starts`` as there).
    Chapter 8 keeps its GRPO arms in ``grpo.json`` this way, and chapter 9 reads them from the
    same file with the same settings, and keeps its DPO arms in ``dpo.json``.
    """
    arms = tuple(arms)
    settings = {"seeds": list(seeds), "beta": {arm: experiment.DEFAULT_BETA[arm] for arm in arms},
                "ppo": asdict(cfg)}
    if any(experiment.REGISTRY[arm].trainer == "dpo" for arm in arms):
        settings["dpo"] = asdict(experiment.DPOConfig())

    def run():
        return experiment.run_experiment(list(seeds), cfg.iterations, config=cfg, arms=arms, progress=progress,
                                         workers=workers)

    return load_or_run(Path(path), settings, starts or {}, run)


def stored_bug_runs(path, seeds=(0, 1, 2), progress: bool = False, workers: int | None = None) -> dict:
    """Return :func:`minirlhf.studies.silent_bugs.study` over ``seeds`` under ``"runs"``:
    every planted bug's run and the correct run of its arm.

    Stored at ``path`` and read back through :func:`load_or_run`; the key also holds a digest
    of the study's own source, so that a changed bug is run again.
    """
    import inspect

    from ..dpo import DPOConfig
    from ..ppo import PPOConfig
    from ..studies import silent_bugs

    source = hashlib.sha256(inspect.getsource(silent_bugs).encode()).hexdigest()[:16]
    settings = {"seeds": [int(s) for s in seeds], "bugs": list(silent_bugs.BUGS), "ppo": asdict(PPOConfig()),
                "dpo": asdict(DPOConfig()), "study": source}
    return load_or_run(Path(path), settings, {},
                       lambda: {"runs": silent_bugs.study(tuple(seeds), progress=progress, workers=workers)})


def _gain_from(job, policies, rm, cfg, progress):
    # One run of stored_starts, in this process or a worker: (SFT seed, arm, beta, PPO seed).
    start, arm, beta, seed = job
    return gain(experiment.run_arm(arm, policies[start], rm, seed, beta, cfg, progress=progress)[1])


def stored_starts(path, starts: dict, rm, beta: dict, cfg, ppo_seeds, progress: bool = False,
                  workers: int | None = None) -> dict:
    """Return ``{sft_seed: {'steps', 'start', arm: [gain per PPO seed]}}`` (keys as text):
    every arm of ``beta`` ({arm: beta}) run from every start of ``starts`` ({sft_seed:
    (policy, metrics)}, as :func:`minirlhf.studies.robustness.partial_start` returns them)
    with each of ``ppo_seeds``.

    Each start is its own run's reference. The gains are stored at ``path`` and read back
    while the engine code, the settings and the starts' step counts are the same
    (:func:`load_or_run`). Chapter 6 runs chapter 5's two arms this way
    (``sft_starts.json``) and chapter 8 its GRPO arm (``grpo_starts.json``).
    """

    def run():
        keys = [(seed, arm, s) for seed in starts for arm in beta for s in ppo_seeds]
        policies = {seed: policy for seed, (policy, _) in starts.items()}
        gains = dict(zip(keys, map_runs(
            partial(_gain_from, policies=policies, rm=rm, cfg=cfg, progress=progress),
            [(seed, arm, beta[arm], s) for seed, arm, s in keys], workers, progress=progress,
            desc="runs from the starts", label=lambda job: f"SFT seed {job[0]}, {job[1]} arm, PPO seed {job[3]}")))
        out = {}
        for seed, (_, m) in starts.items():
            row = {"steps": m["steps"], "start": m["accuracy"]}
            for arm in beta:
                row[arm] = [gains[seed, arm, s] for s in ppo_seeds]
            out[str(seed)] = row
        return {"arms": out}

    settings = {"sft_seeds": list(starts), "ppo_seeds": list(ppo_seeds), "beta": beta,
                "ppo": asdict(cfg), "steps": {str(s): m["steps"] for s, (_, m) in starts.items()}}
    return load_or_run(Path(path), settings, {}, run)["arms"]


def weights_digest(model) -> str:
    """Return a short digest of ``model``'s weights (names, shapes and every bit of the
    values): two models share it only if they compute the same function."""
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _planned_run(job, policy, rm, evalset, keep, answers, progress):
    # One run of stored_runs, in this process or a worker: the kept log (and the answers).
    from ..model import generate
    from ..ppo import PPOConfig

    arm, beta, settings, seed = job
    trained, log = experiment.run_arm(arm, policy, rm, seed, beta, PPOConfig(**settings), evalset,
                                      progress=progress)
    kept = {key: log[key] for key in (log if keep is None else keep)}
    if answers:
        kept["answers"] = generate(trained, evalset.prompts, greedy=True).tolist()
    return kept


def stored_runs(path, plan: dict, policy, rm, keep=None, answers: bool = False,
                progress: bool = False, workers: int | None = None) -> dict:
    """Return ``{(name, seed): log}``, one PPO run for each entry ``(name, seed): (arm, beta,
    settings)`` of ``plan``: :func:`minirlhf.experiment.run_arm` of ``arm`` from ``policy``
    (the start and the frozen reference), scored by ``rm``, with ``PPOConfig(**settings)``.

    Each log keeps the keys in ``keep`` (all if None); with ``answers`` it also holds
    ``'answers'``, the trained policy's greedy completions of the 400 eval prompts (token
    ids, 400 lists of 4), for a chapter that reads those and not the policy itself. Stored at
    ``path`` as ``{"arms": {name: {seed: log}}}`` (keys as text) through :func:`load_or_run`:
    read back while the engine code, the plan, ``keep``, ``answers`` and the weights of
    ``policy`` and ``rm`` are the same. Chapter 7 keeps its runs this way.
    """
    from ..ppo import EvalSet, PPOConfig

    def run():
        logs = map_runs(partial(_planned_run, policy=policy, rm=rm, evalset=EvalSet(), keep=keep,
                                answers=answers, progress=progress),
                        [(arm, beta, settings, seed) for (_, seed), (arm, beta, settings) in plan.items()],
                        workers, progress=progress, desc="runs",
                        label=lambda job: f"{job[0]} arm, beta {job[1]:g}, seed {job[3]}")
        arms = {}
        for (name, seed), kept in zip(plan, logs):
            arms.setdefault(str(name), {})[str(seed)] = kept
        return {"arms": arms}

    settings = {"plan": [[name, seed, arm, beta, asdict(PPOConfig(**changes))]
                         for (name, seed), (arm, beta, changes) in plan.items()],
                "keep": None if keep is None else list(keep), "answers": answers,
                "policy": weights_digest(policy), "rm": weights_digest(rm)}
    stored = load_or_run(Path(path), settings, {}, run)["arms"]
    return {(name, seed): stored[str(name)][str(seed)] for name, seed in plan}
