"""Ours and TRL's, side by side: :func:`compare` runs both sides of each arm seed for seed in one
process, and :func:`side_by_side` and :func:`format_side_by_side` make the page's table of their
gains, KLs and wall times (the figures are :func:`minirlhf.plots.side_by_side_figure`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace

import torch

from .. import cli
from ..evaluation import EvalSet
from ..experiment import run_arm
from ..ppo import PPOConfig
from ..stats import mean_ci95, pm
from .profile import profile_runs
from .run import run_trl_arm
from .settings import TRL_ARMS, check_arm

__all__ = ["compare", "side_by_side", "format_side_by_side"]


def compare(
    arms=tuple(TRL_ARMS),
    seeds=3,
    iterations: int = 25,
    progress: bool = True,
    ours: bool = True,
    profile: bool = False,
    keep_on_interrupt: bool = False,
) -> dict:
    """Return TRL's runs of ``arms`` for ``seeds`` (a count or a list), and with ``ours`` our
    runs of the same arms, seed for seed, in this one process.

    ``{"settings", "ours": {arm: {seed: log}}, "trl": {arm: {seed: log}}, "seconds": {"ours"|"trl":
    {arm: {seed: s}}}, "versions"}``, and with ``profile`` also ``"profile": {arm: stages}``
    (:func:`~minirlhf.trl.profile.profile_runs`: an extra run of the first seed, after the timed
    ones). Our runs are :func:`minirlhf.experiment.run_arm` with the arm's registry settings;
    each side's ``seconds`` is the whole call, set-up and evaluation included.

    With ``keep_on_interrupt``, a KeyboardInterrupt (Ctrl-C, or a stop signal the caller turns
    into one) returns the seeds whose every run had finished (``settings["seeds"]`` lists them;
    no profile unless it had finished too) instead of raising, unless none had. Under
    :func:`minirlhf.cli.stops_as_interrupt` a stop is also checked before every run, at every
    step of TRL's and at the end of each seed (:func:`minirlhf.cli.raise_if_stopped`): one whose
    exception Python dropped in a finaliser stops the runs all the same, and its seed is not kept.
    """
    from ..store import load_rm, load_sft

    seeds = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    for arm in arms:
        check_arm(arm)
    policy, _ = load_sft(progress=progress)
    rm, _ = load_rm(progress=progress)
    cfg = replace(PPOConfig(), iterations=iterations)
    evalset = EvalSet()
    out = _empty(arms, seeds, cfg)
    finished = []
    try:
        for seed in seeds:
            for arm in arms:
                cli.raise_if_stopped()  # a stop whose exception Python dropped in a finaliser
                if ours:
                    began = time.perf_counter()
                    _, log = run_arm(TRL_ARMS[arm].ours, policy, rm, seed, None, cfg, evalset, progress=progress)
                    out["seconds"]["ours"][arm][str(seed)] = time.perf_counter() - began
                    out["ours"][arm][str(seed)] = {k: log[k] for k in ("accuracy", "rm_score", "kl", "kinds")}
                log = run_trl_arm(arm, policy, rm, seed, cfg, evalset=evalset, progress=progress)
                out["seconds"]["trl"][arm][str(seed)] = log["seconds"]
                out["trl"][arm][str(seed)] = log
            cli.raise_if_stopped()  # a seed a stop reached is not kept, as when its exception is not dropped
            finished.append(seed)
        if profile:
            timed = {arm: out["trl"][arm][str(seeds[0])] for arm in arms}
            out.update(profile_runs(arms, policy, rm, seeds[0], cfg, evalset, progress, timed))
            cli.raise_if_stopped()
    except KeyboardInterrupt:
        if not (keep_on_interrupt and finished):
            raise
        _keep_only(out, finished)
    return out


def _empty(arms, seeds: list, cfg: PPOConfig) -> dict:
    """The results of :func:`compare` before any run."""
    return {
        "settings": {
            "arms": list(arms),
            "seeds": seeds,
            "iterations": cfg.iterations,
            "ppo": asdict(cfg),
            "ours": {arm: TRL_ARMS[arm].ours for arm in arms},
        },
        "ours": {arm: {} for arm in arms},
        "trl": {arm: {} for arm in arms},
        "seconds": {"ours": {arm: {} for arm in arms}, "trl": {arm: {} for arm in arms}},
        "versions": _versions(),
    }


def _keep_only(out: dict, finished: list) -> None:
    """Drop from ``out`` every run of a seed not in ``finished``, and the profile."""
    for table in (out["ours"], out["trl"], out["seconds"]["ours"], out["seconds"]["trl"]):
        for runs in table.values():
            for key in [key for key in runs if int(key) not in finished]:
                del runs[key]
    out.pop("profile", None)
    out.pop("gc", None)
    out["settings"]["seeds"] = finished


def _versions() -> dict:
    import accelerate
    import transformers
    import trl

    return {
        "torch": torch.__version__.split("+")[0],
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
    }


def side_by_side(results: dict) -> dict:
    """Return per arm and side (``"ours"``, ``"trl"``): gain in accuracy, KL at the end and wall
    time per run (mean and 95% half-width over seeds), plus the paired differences of gain and
    KL (ours minus TRL's, seed by seed) and the ratio of mean wall times (TRL / ours)."""
    out = {}
    for arm in results["settings"]["arms"]:
        row = {}
        for side in ("ours", "trl"):
            logs = results[side][arm]
            if not logs:
                continue
            seeds = list(logs)
            row[side] = {
                "gain": mean_ci95([_gain(logs[s]) for s in seeds]),
                "kl_end": mean_ci95([logs[s]["kl"][-1] for s in seeds]),
                "rm_score_end": mean_ci95([logs[s]["rm_score"][-1] for s in seeds]),
                "seconds": mean_ci95([results["seconds"][side][arm][s] for s in seeds]),
                "n_seeds": len(seeds),
            }
        if "ours" in row and "trl" in row:
            ours, theirs = results["ours"][arm], results["trl"][arm]
            common = [s for s in ours if s in theirs]
            row["gain_diff"] = mean_ci95([_gain(ours[s]) - _gain(theirs[s]) for s in common])
            row["kl_diff"] = mean_ci95([ours[s]["kl"][-1] - theirs[s]["kl"][-1] for s in common])
            row["time_ratio"] = row["trl"]["seconds"][0] / row["ours"]["seconds"][0]
        out[arm] = row
    return out


def _gain(log: dict) -> float:
    return log["accuracy"][-1] - log["accuracy"][0]


def _pm(pair) -> str:
    return pm(*pair, sign="+")


def format_side_by_side(results: dict) -> str:
    """Return the side-by-side table as text (mean ± 95% interval over seeds), 77 characters wide."""
    s = side_by_side(results)
    lines = [f"{'arm':<14} {'trainer':<8} {'gain in accuracy':>17} {'KL at the end':>15} {'s/run':>6}"]
    for arm, row in s.items():
        trainer = TRL_ARMS[arm].trainer.upper()
        for side, name in (("ours", "ours"), ("trl", f"TRL {trainer}")):
            if side in row:
                r = row[side]
                lines.append(
                    f"{arm:<14} {name:<8} {_pm(r['gain']):>17} {_pm(r['kl_end'])[1:]:>15} {r['seconds'][0]:>6.1f}"
                )
        if "time_ratio" in row:
            lines.append(
                f"  ours - TRL: gain {_pm(row['gain_diff'])}, KL {_pm(row['kl_diff'])}, time x{row['time_ratio']:.1f}"
            )
    n = len(results["settings"]["seeds"])
    lines.append(f"(mean ± 95% interval over {n} seed{'s' if n > 1 else ''}; gain and KL on the")
    lines.append(" 400 eval prompts, by our evaluate; s/run: seconds a run, set-up included)")
    return "\n".join(lines)
