"""One run of a TRL arm: our models converted, TRL's trainer built from them
(:data:`~minirlhf.trl.trainers.TRL_TRAINERS`), trained in float64 and measured by our
:func:`~minirlhf.evaluation.evaluate` after every iteration, as our runs are.

:func:`import_trl` is the one door to the library: offline, and only the pinned release.
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
import warnings
from contextlib import contextmanager

import torch

from .. import cli, task
from ..evaluation import EvalSet, evaluate
from ..experiment import arm_config
from ..model import dtype_of, generate, make_generator, reward_scores
from ..ppo import PPOConfig
from .settings import TRL_VERSION, check_arm, trl_settings
from .trainers import TRL_TRAINERS, Start

__all__ = ["OFFLINE", "import_trl", "run_trl_arm"]

# Nothing may reach the network: the models, tokenizer and data are made here.
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def import_trl():
    """Return the ``trl`` module, offline; an ImportError that says how to install it when it is
    missing or is not the release the bridge was written for."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    try:
        import trl
    except ImportError:
        raise ImportError('minirlhf.trl needs the optional extra: pip install -e ".[trl]"') from None
    if trl.__version__ != TRL_VERSION:
        raise ImportError(
            f'minirlhf.trl was written for TRL {TRL_VERSION}, found {trl.__version__}: pip install -e ".[trl]"'
        )
    return trl


@torch.no_grad()
def _score_std(policy, rm, cfg: PPOConfig, seed: int) -> float:
    # The raw RM scores' spread over one batch sampled from the start policy (our rollout's draw).
    g = make_generator(seed)
    pairs = task.sample_pairs(cfg.batch_size, g, task.train_pairs())
    prompts = task.encode_prompts(pairs)
    completions = generate(policy, prompts, cfg.temperature, generator=g)
    return reward_scores(rm, prompts, completions).double().std().item()


@contextmanager
def _default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _check_dtypes(models: dict, dtype: torch.dtype) -> None:
    """Raise unless every weight of every model (``{name: module}``) is in ``dtype``."""
    wrong = {
        name: sorted({str(p.dtype) for p in m.parameters()})
        for name, m in models.items()
        if any(p.dtype != dtype for p in m.parameters())
    }
    if wrong:
        raise RuntimeError(f"TRL's models must all be in {dtype}, as the policy; found {wrong}")


class _Evaluator:
    """Converts TRL's policy back after every iteration (or every ``config.eval_every``-th, and
    the last) and measures it with our evaluate, under the caller's default dtype
    (``default``), as our own runs are measured. The conversion makes a TinyGPT, whose
    initialization draws from torch's global generator, which TRL samples with: unlike ours,
    a TRL run evaluated on another schedule samples other tokens."""

    def __init__(self, reference, rm, evalset, cfg, every, default=torch.float32):
        self.reference, self.rm, self.evalset, self.t, self.every = reference, rm, evalset, cfg.temperature, every
        self.default = default
        self.log = {"accuracy": [], "rm_score": [], "kl": [], "kinds": {k: [] for k in task.KINDS}}
        self.log["eval_iterations"] = []
        self.cache, self.seen = {}, 0
        # which iterations are measured: every config.eval_every-th and the last, as ppo_train
        self.eval_every, self.iterations = cfg.eval_every, cfg.iterations

    def due(self, iteration: int) -> bool:
        """True when ``iteration`` (0 before training) is one ``ppo_train`` would evaluate."""
        return iteration % self.eval_every == 0 or iteration == self.iterations

    def measure(self, hf_policy) -> dict:
        from .. import hf

        was_training = hf_policy.training
        with _default_dtype(self.default):
            ev = evaluate(hf.hf_to_policy(hf_policy), self.reference, self.rm, self.evalset, self.t, self.cache)
        hf_policy.train(was_training)
        for key in ("accuracy", "rm_score", "kl"):
            self.log[key].append(ev[key])
        for k in task.KINDS:
            self.log["kinds"][k].append(ev["kinds"][k])
        return ev

    def measure_at(self, iteration: int, hf_policy) -> dict | None:
        """Measure ``hf_policy`` after ``iteration`` when it is due; return the numbers or None."""
        self.seen = iteration  # the iterations TRL has run so far
        if not self.due(iteration):
            return None
        self.log["eval_iterations"].append(iteration)
        return self.measure(hf_policy)


def _callback(evaluator: _Evaluator, get_policy, bar):
    from transformers import TrainerCallback

    class EvalEachIteration(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            cli.raise_if_stopped()  # a stop whose exception Python dropped in a finaliser
            if state.global_step % evaluator.every == 0:
                ev = evaluator.measure_at(state.global_step // evaluator.every, get_policy())
                bar.update(1)
                if ev is not None:
                    bar.set_postfix_str(f"acc {ev['accuracy']:.3f} kl {ev['kl']:.3f}")
            return control

    return EvalEachIteration()


def run_trl_arm(
    arm: str,
    policy,
    rm,
    seed: int,
    config: PPOConfig | None = None,
    beta: float | None = None,
    evalset: EvalSet | None = None,
    progress: bool = True,
    profile: str | None = None,
    freeze_gc: bool = True,
) -> dict:
    """Train ``arm`` (a name of :data:`~minirlhf.trl.settings.TRL_ARMS`) with TRL's trainer from
    ``policy`` (our TinyGPT, also the reference) and return its log, laid out like ours:
    ``accuracy``, ``rm_score``, ``kl``, ``kinds`` per iteration (index 0 before training), TRL's
    own per-step metrics (the trainer's ``logged``) under ``trl_log``, ``settings`` (the TRL
    config's keyword arguments), ``seconds`` (the whole call: conversion, the trainer's set-up,
    training and our evaluation, as our runs are timed), ``train_seconds``
    (``trainer.train()`` alone) and ``n_processes``.

    Under ``accelerate launch`` every process trains its share; each returns the same log.
    ``profile`` names a file for a cProfile of the whole run. ``freeze_gc=False`` leaves out
    the ``gc.freeze()`` of the run, to time TRL's PPO as shipped (the results are the same).

    Under :func:`minirlhf.cli.stops_as_interrupt`, a stop is checked before the run and after
    every step (:func:`minirlhf.cli.raise_if_stopped`): it stops the run even when its signal
    landed in a finaliser (``datasets``' ``Dataset.__del__``), where Python drops exceptions.
    """
    cli.raise_if_stopped()
    import_trl()
    from transformers.utils import logging as hf_logging

    called = time.perf_counter()
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # it tells of every token id it aligns; errors still show
    hf_logging.disable_progress_bar()  # one bar, ours, per run
    try:
        return _run(arm, policy, rm, seed, config, beta, evalset, progress, profile, freeze_gc, called)
    finally:  # as they were: the caller's choice
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _run(arm, policy, rm, seed, config, beta, evalset, progress, profile, freeze_gc, called) -> dict:
    from transformers import PrinterCallback, set_seed

    from .. import hf
    from ..progress import progress_bar

    spec = check_arm(arm)
    trainer_spec = TRL_TRAINERS[spec.trainer]
    cfg = arm_config(spec.ours, config or PPOConfig(), seed)
    evalset = evalset or EvalSet()
    dtype = dtype_of(policy)
    if dtype_of(rm) != dtype:
        raise ValueError(f"policy and rm must share a dtype, got {dtype} and {dtype_of(rm)}")
    n_processes = int(os.environ.get("WORLD_SIZE", "1"))
    score_std = _score_std(policy, rm, cfg, seed) if trainer_spec.needs_score_std else None
    kwargs = trl_settings(arm, seed, n_processes, config, beta, score_std)
    start = Start(policy, rm, hf.rm_to_hf(rm), hf.tokenizer(), task.train_pairs())
    every = 1 if trainer_spec.step_per_batch else cfg.updates_per_batch
    evaluator = _Evaluator(policy, rm, evalset, cfg, every, torch.get_default_dtype())
    bar = progress_bar(total=cfg.iterations, desc=f"TRL {arm}, seed {seed}", enabled=progress)
    with tempfile.TemporaryDirectory(prefix="minirlhf-trl-") as tmp, warnings.catch_warnings():
        # TRL sets gradient_checkpointing, which transformers 5 renames; we turn it off.
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
        set_seed(seed)  # TRL's PPO seeds torch only, and shuffles its minibatches with numpy
        trainer, get_policy, models = trainer_spec.build(trainer_spec, spec, start, kwargs, tmp)
        _check_dtypes(models, dtype)
        trainer.remove_callback(PrinterCallback)
        evaluator.measure_at(0, get_policy())
        trainer.add_callback(_callback(evaluator, get_policy, bar))
        train_seconds = _train(trainer, dtype, profile, freeze_gc)
    bar.close()
    if evaluator.seen != cfg.iterations:
        raise RuntimeError(f"TRL ran {evaluator.seen} iterations, expected {cfg.iterations}")
    return {
        **evaluator.log,
        "trl_log": _trl_log(trainer, trainer_spec.logged),
        "settings": dict(kwargs),
        "dtype": str(dtype).removeprefix("torch."),
        "seconds": time.perf_counter() - called,
        "train_seconds": train_seconds,
        "n_processes": n_processes,
    }


def _train(trainer, dtype: torch.dtype, profile: str | None, freeze_gc: bool) -> float:
    """Run ``trainer.train()`` (under cProfile into the file ``profile``, if named); return its seconds."""
    # Python's collector walks every object the imports made; TRL's PPO calls it twice a
    # batch (trl/experimental/ppo/ppo_trainer.py, train). Freezing what exists now leaves
    # it only the run's own objects: the same results, a third of the time.
    gc.collect()
    if freeze_gc:
        gc.freeze()
    began = time.perf_counter()
    try:
        # TRL makes some tensors without naming a dtype, in torch's default (float32): the
        # rewards of GRPO and RLOO before their group baselines, PPO's statistics. With the
        # default at the policy's dtype they are float64 too; our evaluation keeps the
        # caller's default (_Evaluator.measure).
        with _default_dtype(dtype):
            if profile:
                import cProfile

                cProfile.runctx("trainer.train()", globals(), {"trainer": trainer}, profile)
            else:
                trainer.train()
    finally:
        gc.unfreeze()
    return time.perf_counter() - began


def _trl_log(trainer, keys: tuple) -> dict:
    """TRL's per-step logs of ``keys``, from the rows of its log history that hold the first."""
    rows = [row for row in trainer.state.log_history if keys[0] in row]
    return {key: [float(row[key]) for row in rows if key in row] for key in keys}
