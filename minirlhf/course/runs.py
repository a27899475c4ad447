"""Stored results of the chapters' longer runs, reused while the code and settings are the same.

A chapter that shows a minute of PPO runs should not repeat them on every execution, and must
never show results that other code or other settings made. :func:`load_or_run` keys a stored
file on the run's settings, on a fingerprint of the engine code that makes the runs, and on
the starting point of a few runs the chapter has just made itself.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .. import experiment
from ..paths import OUTPUTS, write_atomic
from ..store import code_fingerprint

__all__ = ["same_curves", "load_or_run", "stored_experiment"]


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


def stored_experiment(seeds, cfg, beta: dict, starts: dict, progress: bool = False) -> dict:
    """Return chapter 5's experiment: both arms for every seed in ``seeds``, with the PPO
    settings ``cfg`` and ``beta`` (``{arm: beta}``), laid out as ``python -m
    minirlhf.experiment`` writes ``outputs/results.json``.

    Read from that file through :func:`load_or_run` (``starts`` as there: the seed-0 runs a
    chapter has just made); otherwise run with :func:`minirlhf.experiment.run_experiment`
    and written with the three figures. Chapters 5 and 6 both call it, so they read one file
    with one set of settings and never show different runs.
    """

    def run():
        done = experiment.run_experiment(seeds, cfg.iterations, beta["rm"], beta["verifier"], cfg,
                                         progress=progress)
        experiment.write_outputs(done, OUTPUTS)
        return json.loads((OUTPUTS / "results.json").read_text())

    settings = {"seeds": list(seeds), "iterations": cfg.iterations, "beta": beta, "ppo": asdict(cfg)}
    return load_or_run(OUTPUTS / "results.json", settings, starts, run)
