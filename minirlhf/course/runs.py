"""Stored results of the chapters' longer runs, reused while the code and settings are the same.

A chapter that shows a minute of PPO runs should not repeat them on every execution, and must
never show results that other code or other settings made. :func:`load_or_run` keys a stored
file on the run's settings, on a fingerprint of the engine code that makes the runs, and on
the starting point of a few runs the chapter has just made itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import experiment
from ..paths import write_atomic
from ..store import code_fingerprint

__all__ = ["same_curves", "load_or_run"]


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
