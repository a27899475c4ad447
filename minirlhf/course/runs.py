"""Stored results of the chapters' longer runs, reused while the code and settings are the same.

A chapter that shows a minute of PPO runs should not repeat them on every execution, and must
never show results that other code or other settings made. :func:`load_or_run` keys a stored
file on what the runs depend on, and on nothing else: the run's settings; the definition of
each arm it runs, resolved (its reward, trainer, beta and settings, read from
:mod:`minirlhf.arms` but not the file itself, so a new arm reruns nothing); the code that
trains, as a fingerprint of what it does (:func:`runs_code`: comments and docstrings, the
figures, the statistics and the command lines left out), with the module of each advantage
estimator and of each leash the runs use and of no other; and the starting point of a few runs
the chapter has just made itself.

A stored file is trusted only as far as it can be checked. It is opened only when it is a
regular file (a folder, a named pipe or a device at its path is never read), and read only up
to :data:`MAX_STORED_BYTES`; it must hold JSON in the layout the chapter reads, nested no
deeper than :data:`MAX_STORED_DEPTH`, with numbers where numbers belong; and it must carry
the digest of its own contents that this module writes with it, so numbers edited after the
run (with or without the digest) make it stale. Anything else is run again, and one line
names the file and says why (a missing file, or one made by other code or settings, is the
normal case and is run again without a word).
When the file cannot be written, the results are used all the same and the line says they
were not kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path

from .. import arms as arm_registry
from .. import estimators, experiment, leashes, trainers
from ..model import weights_digest
from ..parallel import map_runs
from ..paths import OUTPUTS, file_problem, kind_of, making, open_regular, write_atomic
from ..store import code_fingerprint
from ..studies.robustness import gain

__all__ = [
    "MAX_STORED_BYTES",
    "MAX_STORED_DEPTH",
    "NOT_THE_RUNS_CODE",
    "runs_code",
    "arm_key",
    "same_curves",
    "load_or_run",
    "stored_experiment",
    "stored_arms",
    "stored_starts",
    "weights_digest",
    "stored_runs",
    "stored_bug_runs",
    "NotStored",
]


def same_curves(a: dict, b: dict, upto: int | None = None) -> bool:
    """Return True when two run logs hold the same eval curves (the first ``upto`` points, or
    all), to the last digit."""
    return all(list(a[k])[:upto] == list(b[k])[:upto] for k in ("accuracy", "rm_score", "kl"))


# Modules that change no number a run makes: the arms' table (each arm used enters the key as
# its resolved definition instead), the figures, colors, statistics, progress bars and command
# lines, and where and how files are written (paths: the write guard, the locks). Leaving them
# out of the fingerprint is what lets a new arm, a figure's fix, a new command option or a
# safer write keep every stored run.
NOT_THE_RUNS_CODE = (
    "minirlhf.paths",
    "minirlhf.arms",
    "minirlhf.plots",
    "minirlhf.palette",
    "minirlhf.stats",
    "minirlhf.progress",
    "minirlhf.cli",
    "minirlhf.commands",
)


# The tables whose entries are keyed by their own code: a setting of a PPOConfig names an entry,
# and a stored run depends on the module of each entry its settings name, not on the others.
_TABLES = {"advantages": estimators, "kl_placement": leashes}


def _named(value, key: str, found: set) -> set:
    # every entry a PPOConfig in the settings names under ``key`` (a dict with that key)
    if isinstance(value, dict):
        if isinstance(value.get(key), str):
            found.add(value[key])
        for item in value.values():
            _named(item, key, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _named(item, key, found)
    return found


def runs_code(settings: dict) -> str:
    """Return the fingerprint of the code that makes runs with ``settings``: the experiment's
    runner and every module it imports, as :func:`minirlhf.store.code_fingerprint` reads them
    (docstrings and comments left out), but not :data:`NOT_THE_RUNS_CODE`; and the module of
    each advantage estimator and each leash the settings name (with the package modules it
    imports), not of the others."""
    h = hashlib.sha256(code_fingerprint(experiment, skip=NOT_THE_RUNS_CODE).encode())
    for key, table in _TABLES.items():
        for name in sorted(_named(settings, key, set())):
            module = table.module_of(name)
            h.update(f"{key} {name} {code_fingerprint(module, skip=NOT_THE_RUNS_CODE)}".encode())
    return h.hexdigest()[:16]


def arm_key(name: str) -> dict:
    """Return what a run of the arm ``name`` depends on in its definition: reward, trainer,
    beta and the settings over the recipe (not its label, help or style)."""
    arm = arm_registry.REGISTRY[name]
    return {"reward": arm.reward, "trainer": arm.trainer, "beta": arm.beta, "settings": arm.settings}


MAX_STORED_BYTES = 200_000_000  # a stored file larger than this is not read (the book's largest is a few MB)
# A stored file nested deeper than this is not used (the book's nest 7 deep): deeper JSON can
# exhaust Python's recursion in json.dumps or ==, whatever depth json.loads accepted.
MAX_STORED_DEPTH = 64
_CURVES = ("accuracy", "rm_score", "kl")


def _digest(stored: dict) -> str:
    """Return the fingerprint of a stored file's contents (everything but the fingerprint)."""
    body = {k: v for k, v in stored.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _deeper_than(value, limit: int) -> bool:
    """Return True when ``value`` (lists and dicts of JSON) nests more than ``limit`` deep;
    looked at with a stack of its own, so that no depth can exhaust the recursion."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        inside = item.values() if isinstance(item, dict) else item
        stack.extend((x, depth + 1) for x in inside if isinstance(x, (dict, list)))
    return False


def _layout_problem(stored) -> str:
    """Return why ``stored`` is not in the layout of a stored file, or ""."""
    if not isinstance(stored, dict):
        return f"it holds a JSON {type(stored).__name__}, not an object"
    if _deeper_than(stored, MAX_STORED_DEPTH):
        return f"it nests deeper than any stored run ({MAX_STORED_DEPTH} levels)"
    if not isinstance(stored.get("settings"), dict):
        return "it has no settings"
    if "arms" in stored:
        if not isinstance(stored["arms"], dict) or not all(isinstance(v, dict) for v in stored["arms"].values()):
            return "its arms are not a table of runs"
        for name, runs in stored["arms"].items():
            for seed, log in runs.items():
                for key in _CURVES:
                    if (
                        isinstance(log, dict)
                        and key in log
                        and not (isinstance(log[key], list) and all(_is_number(x) for x in log[key]))
                    ):
                        return f"the {key} of run {name}, {seed} is not a list of numbers"
    if "digest" not in stored:  # every file this module writes has one
        return "it has no fingerprint of its numbers (written by other code, or edited after the run?)"
    if stored["digest"] != _digest(stored):
        return "its numbers do not match the fingerprint stored with them (edited after the run?)"
    return ""


def _read_stored(path: Path) -> tuple[dict | None, str]:
    """Return (what is stored at ``path``, "") or (None, why it cannot be used; "" when missing)."""
    try:
        file = open_regular(path)
    except OSError:  # a folder, a named pipe, a device, ...: never read
        return None, f"it is {kind_of(path)}, not a stored file"
    if file is None:
        return None, ""
    with file:
        data = file.read(MAX_STORED_BYTES + 1)
    if len(data) > MAX_STORED_BYTES:
        return None, f"it is larger than any stored run ({MAX_STORED_BYTES / 1e6:,.0f} MB), so it was not read"
    try:
        stored = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"it is not readable JSON (cut short?): {type(exc).__name__}"
    problem = _layout_problem(stored)
    return (None, problem) if problem else (stored, "")


class NotStored(LookupError):
    """The results a caller asked for are not stored (or were made by other code or settings),
    and it asked not to make them; its message is one line naming the file."""


def load_or_run(
    path: Path, settings: dict, starts: dict, run, check=None, *, arms, progress: bool = False, make: bool = True
) -> dict:
    """Return the results stored at ``path`` if the current engine code made them with
    ``settings`` and the arms ``arms`` (names of :data:`minirlhf.arms.REGISTRY`, as they are
    defined now; () for runs that use none) from the same starting point as the runs in
    ``starts`` (``{(arm, seed_key): log}``, may be empty); otherwise call ``run()``, store
    what it returns with the settings, and return that, exactly as a later load will return it.

    ``check(stored)``, when given, raises (KeyError, TypeError, ValueError, ...) when the stored
    results lack what the caller reads. A stored file that cannot be trusted (see the module's
    docstring) is run again, with one line that names it and says why; when ``path`` cannot
    take a file, that is said before the run, and the results are returned without being kept.
    While another process makes the same file, this one waits for it and reads it
    (:func:`minirlhf.paths.making`; with ``progress``, a line says so). With ``make`` False
    nothing is run: results that cannot be returned raise :class:`NotStored`, naming the file.
    """
    path = Path(path)
    unknown = [arm for arm in arms if arm not in arm_registry.REGISTRY]
    if unknown or isinstance(arms, str):
        raise ValueError(f"arms must name registered arms, got {arms!r}")
    used = {arm: arm_key(arm) for arm in sorted(set(arms))}
    settings = json.loads(json.dumps({**settings, "arm_definitions": used}, default=str))
    settings["code"] = runs_code(settings)
    stored, why = _usable(path, settings, starts, check)
    if stored is not None:
        return stored
    if not make:
        raise NotStored(f"{path.name} holds no runs of the current code and settings" + (f": {why}" if why else ""))
    # Another process (a chapter run beside this one) may be making the same file: wait for it,
    # then read what it wrote, rather than make the same runs twice.
    with making(path, on_wait=lambda: progress and print(f"stored runs: waiting for {path}", flush=True)):
        stored, why = _usable(path, settings, starts, check)
        if stored is not None:
            return stored
        return _run_and_store(path, settings, run, why)


def _usable(path: Path, settings: dict, starts: dict, check) -> tuple[dict | None, str]:
    """Return (the stored results at ``path``, "") when :func:`load_or_run` may return them,
    else (None, why not; "" for a missing file or one made by other code or settings)."""
    stored, why = _read_stored(path)
    if stored is not None:
        try:
            if stored["settings"] == settings and all(
                same_curves(stored["arms"][arm][key], log, upto=1) for (arm, key), log in starts.items()
            ):
                if check is not None:
                    check(stored)
                stored.pop("digest", None)
                return stored, ""
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            why = f"it lacks what the chapter reads ({type(exc).__name__}: {str(exc)[:80]})"
    return None, why


def _run_and_store(path: Path, settings: dict, run, why: str) -> dict:
    # load_or_run's second half: run, store with the settings and a digest, return as read back.
    if why:
        print(f"stored runs: {path} cannot be used: {why}; running again", flush=True)
    problem = file_problem(path)
    if problem:
        print(f"stored runs: {problem}, so the results of this run will not be kept", flush=True)
    stored = json.loads(json.dumps({**run(), "settings": settings}))
    stored["digest"] = _digest(stored)
    try:
        write_atomic(path, json.dumps(stored, indent=1))
    except OSError as exc:
        if not problem:
            print(
                f"stored runs: could not write {path} ({exc.strerror or exc}); the results are used now "
                "and run again next time",
                flush=True,
            )
    stored.pop("digest")
    return stored


def stored_experiment(seeds, cfg, beta: dict, starts: dict, progress: bool = False, workers: int | None = None) -> dict:
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
        done = experiment.run_experiment(
            seeds, cfg.iterations, beta["rm"], beta["verifier"], cfg, progress=progress, workers=workers
        )
        try:
            experiment.write_outputs(done, OUTPUTS)
        except OSError:  # load_or_run has said why; the results are not lost for it
            return {**done, "summary": experiment.summarize(done), "original": experiment.ORIGINAL}
        return json.loads((OUTPUTS / "results.json").read_text())

    settings = {"seeds": list(seeds), "iterations": cfg.iterations, "beta": beta, "ppo": asdict(cfg)}
    return load_or_run(
        OUTPUTS / "results.json", settings, starts, run, _every_run(beta, seeds), arms=tuple(beta), progress=progress
    )


def _every_run(arms, seeds):
    """Return a check for :func:`load_or_run`: every arm of ``arms`` has a log for every seed."""

    def check(found):
        for arm in arms:
            for seed in seeds:
                if not isinstance(found["arms"][arm][str(seed)], dict):
                    raise TypeError(f"run {arm}, seed {seed} is not a log")

    return check


def stored_arms(
    path, seeds, arms, cfg, starts: dict | None = None, progress: bool = False, workers: int | None = None
) -> dict:
    """Return the experiment of ``arms`` (names of :data:`minirlhf.arms.REGISTRY`, each
    at its default beta) over ``seeds``, laid out as ``results.json``: the PPO and GRPO arms
    with the settings ``cfg``, the DPO arms with :class:`~minirlhf.dpo.DPOConfig`'s defaults.

    Stored at ``path`` and read back through :func:`load_or_run` (``starts`` as there).
    Chapter 8 keeps its GRPO arms in ``grpo.json`` this way, and chapter 9 reads them from the
    same file with the same settings, and keeps its DPO arms in ``dpo.json``.
    """
    arms = tuple(arms)
    settings = {"seeds": list(seeds), "beta": {arm: arm_registry.DEFAULT_BETA[arm] for arm in arms}, "ppo": asdict(cfg)}
    for trainer in {trainers.get(arm_registry.REGISTRY[arm].trainer) for arm in arms}:
        if trainer.own_defaults:  # its runs take its config's defaults, not cfg: they are settings too
            settings[trainer.name] = asdict(trainer.config())

    def run():
        return experiment.run_experiment(
            list(seeds), cfg.iterations, config=cfg, arms=arms, progress=progress, workers=workers
        )

    return load_or_run(Path(path), settings, starts or {}, run, _every_run(arms, seeds), arms=arms, progress=progress)


# The modules of minirlhf.studies.silent_bugs that only read runs once they are made (the tests
# of the tells, the checks before training) or re-export names: a change to them makes no run
# again. Every other module of the package (the copies, the study, the dashboard's kept keys)
# is in the stored runs' key.
_READ_ONLY = ("__init__", "tells", "checks")


def stored_bug_runs(
    path, seeds=(0, 1, 2), progress: bool = False, workers: int | None = None, make: bool = True
) -> dict:
    """Return :func:`minirlhf.studies.silent_bugs.study` over ``seeds`` under ``"runs"``:
    every planted bug's run and the correct run of its arm. With ``make`` False they are read
    and never made: :class:`NotStored` when they are not there.

    Stored at ``path`` and read back through :func:`load_or_run`; the key also holds a digest
    of the study's own source, every module of its package that makes or keeps runs (not
    :data:`_READ_ONLY`'s), so that a changed bug is run again.
    """
    import hashlib
    import pkgutil

    from ..dpo import DPOConfig
    from ..ppo import PPOConfig
    from ..store import code_digest
    from ..studies import silent_bugs

    folder = Path(silent_bugs.__file__).parent
    files = [m for m in sorted(m.name for m in pkgutil.iter_modules(silent_bugs.__path__)) if m not in _READ_ONLY]
    digests = " ".join(code_digest((folder / f"{name}.py").read_text()) for name in files)
    source = hashlib.sha256(digests.encode()).hexdigest()[:16]
    settings = {
        "seeds": [int(s) for s in seeds],
        "bugs": list(silent_bugs.BUGS),
        "ppo": asdict(PPOConfig()),
        "dpo": asdict(DPOConfig()),
        "study": source,
    }
    return load_or_run(
        Path(path),
        settings,
        {},
        lambda: {"runs": silent_bugs.study(tuple(seeds), progress=progress, workers=workers)},
        lambda found: found["runs"].items(),
        arms={bug.arm for bug in silent_bugs.BUGS.values()},
        progress=progress,
        make=make,
    )


def _gain_from(job, policies, rm, cfg, progress):
    # One run of stored_starts, in this process or a worker: (SFT seed, arm, beta, PPO seed).
    start, arm, beta, seed = job
    return gain(experiment.run_arm(arm, policies[start], rm, seed, beta, cfg, progress=progress)[1])


def stored_starts(
    path, starts: dict, rm, beta: dict, cfg, ppo_seeds, progress: bool = False, workers: int | None = None
) -> dict:
    """Return ``{sft_seed: {'steps', 'start', arm: [gain per PPO seed]}}`` (keys as text):
    every arm of ``beta`` ({arm: beta}) run from every start of ``starts`` ({sft_seed:
    (policy, metrics)}, as :func:`minirlhf.studies.robustness.partial_start` returns them)
    with each of ``ppo_seeds``.

    Each start is its own run's reference. Only the gain is read, so each run evaluates its
    start and its end only (``eval_every`` = ``cfg.iterations``: the same gain, without the
    evaluations nothing reads). The gains are stored at ``path`` and read back
    while the engine code, the settings and the starts' step counts are the same
    (:func:`load_or_run`). Chapter 6 runs chapter 5's two arms this way
    (``sft_starts.json``) and chapter 8 its GRPO arm (``grpo_starts.json``).
    """

    cfg = replace(cfg, eval_every=max(cfg.iterations, 1))  # the gain reads the start and the end

    def run():
        keys = [(seed, arm, s) for seed in starts for arm in beta for s in ppo_seeds]
        policies = {seed: policy for seed, (policy, _) in starts.items()}
        gains = dict(
            zip(
                keys,
                map_runs(
                    partial(_gain_from, policies=policies, rm=rm, cfg=cfg, progress=progress),
                    [(seed, arm, beta[arm], s) for seed, arm, s in keys],
                    workers,
                    progress=progress,
                    desc="runs from the starts",
                    label=lambda job: f"SFT seed {job[0]}, {job[1]} arm, PPO seed {job[3]}",
                ),
            )
        )
        out = {}
        for seed, (_, m) in starts.items():
            row = {"steps": m["steps"], "start": m["accuracy"]}
            for arm in beta:
                row[arm] = [gains[seed, arm, s] for s in ppo_seeds]
            out[str(seed)] = row
        return {"arms": out}

    settings = {
        "sft_seeds": list(starts),
        "ppo_seeds": list(ppo_seeds),
        "beta": beta,
        "ppo": asdict(cfg),
        "steps": {str(s): m["steps"] for s, (_, m) in starts.items()},
    }

    def check(found):
        for seed in starts:
            row = found["arms"][str(seed)]
            if not all(isinstance(row[arm], list) and all(map(_is_number, row[arm])) for arm in beta):
                raise TypeError(f"the gains from start {seed} are not lists of numbers")

    return load_or_run(Path(path), settings, {}, run, check, arms=tuple(beta), progress=progress)["arms"]


def _planned_run(job, policy, rm, evalset, keep, answers, progress):
    # One run of stored_runs, in this process or a worker: the kept log (and the answers).
    from ..model import generate
    from ..ppo import PPOConfig

    arm, beta, settings, seed = job
    trained, log = experiment.run_arm(arm, policy, rm, seed, beta, PPOConfig(**settings), evalset, progress=progress)
    kept = {key: log[key] for key in (log if keep is None else keep)}
    if answers:
        kept["answers"] = generate(trained, evalset.prompts, greedy=True).tolist()
    return kept


def stored_runs(
    path, plan: dict, policy, rm, keep=None, answers: bool = False, progress: bool = False, workers: int | None = None
) -> dict:
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
    from ..evaluation import EvalSet
    from ..ppo import PPOConfig

    def run():
        logs = map_runs(
            partial(
                _planned_run, policy=policy, rm=rm, evalset=EvalSet(), keep=keep, answers=answers, progress=progress
            ),
            [(arm, beta, settings, seed) for (_, seed), (arm, beta, settings) in plan.items()],
            workers,
            progress=progress,
            desc="runs",
            label=lambda job: f"{job[0]} arm, beta {job[1]:g}, seed {job[3]}",
        )
        arms = {}
        for (name, seed), kept in zip(plan, logs):
            arms.setdefault(str(name), {})[str(seed)] = kept
        return {"arms": arms}

    settings = {
        "plan": [
            [name, seed, arm, beta, asdict(PPOConfig(**changes))] for (name, seed), (arm, beta, changes) in plan.items()
        ],
        "keep": None if keep is None else list(keep),
        "answers": answers,
        "policy": weights_digest(policy),
        "rm": weights_digest(rm),
    }

    def check(found):
        for name, seed in plan:
            if not isinstance(found["arms"][str(name)][str(seed)], dict):
                raise TypeError(f"run {name}, {seed} is not a log")

    stored = load_or_run(
        Path(path), settings, {}, run, check, arms={arm for arm, _, _ in plan.values()}, progress=progress
    )["arms"]
    return {(name, seed): stored[str(name)][str(seed)] for name, seed in plan}
