"""The experiment run by TRL's own trainers, next to ours, measured by the same code.

    python -m minirlhf.trl_run --arm grpo-verifier --seeds 1
    python -m minirlhf.trl_run --compare --seeds 5              # ours and TRL's, every arm
    accelerate launch --config_file configs/cpu_two_processes.yaml -m minirlhf.trl_run \\
        --arm grpo-verifier --iterations 3

Needs the optional extra (``pip install -e ".[trl]"``): TRL 1.12.0, the last release with
the PPO trainer. Each TRL arm starts from the book's partial-SFT policy and reward model,
converted exactly to Hugging Face models (:mod:`minirlhf.hf`); nothing is downloaded. After
every iteration the policy is converted back and measured by our
:func:`~minirlhf.ppo.evaluate` (accuracy, RM score and exact per-token KL to the start, on the
400 eval prompts), so ours and TRL's are judged by the same code.

============  ============================================  =================================
TRL arm       TRL trainer                                   our arm (:data:`~minirlhf.experiment.REGISTRY`)
============  ============================================  =================================
grpo-verifier ``GRPOTrainer``, the verifier as reward func  grpo-verifier (chapter 8)
grpo-rm       ``GRPOTrainer``, the converted RM             grpo-rm (chapter 8)
rloo-verifier ``RLOOTrainer``, the verifier                 rloo-verifier (chapter 8)
rm            ``trl.experimental.ppo.PPOTrainer``, the RM,  rm (chapter 5)
              a value model
============  ============================================  =================================

The settings come from our :class:`~minirlhf.ppo.PPOConfig` through one mapping,
:func:`trl_settings`, which the book prints. It turns off TRL 1.12.0's default ratio factor on
GRPO's k3 (``use_bias_correction_kl``), so that both sides differentiate the same leash. The
module can be imported without TRL (the mapping and the summaries need only the standard
library); running a trainer needs it.

**Float64.** TRL runs our models in their own dtype, float64: the policy, the reference (GRPO
and RLOO load it from a folder, where TRL's default would be float32), the value model and the
reward model, with no mixed precision; :func:`run_trl_arm` checks every weight and logs the
dtype. While TRL trains, torch's default dtype is float64 too, so the tensors TRL makes without
naming a dtype (GRPO's and RLOO's rewards before the group baseline, PPO's statistics) follow.
Two steps stay float32, because the libraries name float32 themselves (TRL 1.12.0,
transformers 5.23.0):

- *Sampling.* ``generate`` casts the next-token logits to float32 before the temperature and
  the softmax (``transformers/generation/utils.py``, line 3247). GRPO and RLOO only draw the
  tokens from those probabilities and recompute every log-prob with a float64 forward pass.
  TRL's PPO keeps them: its rollout log-probs are the float32 scores' log-softmax
  (``trl/experimental/ppo/ppo_trainer.py``, lines 110 and 703), so the old log-probs of its
  ratio and the k1 KL in its reward carry float32 rounding (about 1e-7).
- *Rewards.* GRPO and RLOO store a reward function's values as float32
  (``trl/trainer/grpo_trainer.py``, line 1690; ``trl/trainer/rloo_trainer.py``, line 1124):
  exact for the verifier's 0 and 1, the RM's score rounded to 7 digits.

Run with torch's AVX-512 kernels, its AVX2 ones and its portable ones, each arm gave the same
accuracies and KLs within 1e-15. PPO's float32 log-probs could still round
differently on another CPU: moving every one of them by one unit in the last place moves its
KL by about 1e-8, far below the printed digits (``tests/test_trl_run.py`` allows 1e-5 there).
"""

from __future__ import annotations

import gc
import math
import os
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from . import estimators, task
from .experiment import REGISTRY, arm_config, mean_ci95, run_arm
from .model import dtype_of, generate, make_generator, reward_scores
from .ppo import EvalSet, PPOConfig, evaluate

__all__ = [
    "TRL_VERSION",
    "TRLArm",
    "TRL_ARMS",
    "PPO_NAMES",
    "HOUSEKEEPING",
    "ppo_names_html",
    "trl_settings",
    "kl_coef_for",
    "run_trl_arm",
    "compare",
    "side_by_side",
    "format_side_by_side",
    "plot_side_by_side",
    "side_by_side_figure",
    "PROFILE_STAGES",
    "profile_stages",
    "format_profile",
    "main",
]

TRL_COLOR = "0.2"  # TRL's curves: dark gray, dashed, beside the arm's own color
TRL_VERSION = "1.12.0"  # pinned in pyproject.toml's extra "trl"
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


@dataclass(frozen=True)
class TRLArm:
    """One arm run by TRL: which trainer, which reward, and our arm it is set like."""

    trainer: str  # "grpo", "rloo" or "ppo"
    reward: str  # "verifier" or "rm"
    ours: str  # the arm of minirlhf.experiment.REGISTRY with the same budget and settings


TRL_ARMS = {
    "grpo-verifier": TRLArm("grpo", "verifier", "grpo-verifier"),
    "grpo-rm": TRLArm("grpo", "rm", "grpo-rm"),
    "rloo-verifier": TRLArm("rloo", "verifier", "rloo-verifier"),
    "rm": TRLArm("ppo", "rm", "rm"),
}


# ----------------------------------------------------------------------------- the mapping


# Our PPOConfig's settings and the fields of TRL's PPOConfig (trl/experimental/ppo/ppo_config.py,
# 1.12.0) that carry them, with what the page says of each: (ours, TRL's fields, note). The
# page "From toy to real" prints this table, and a test checks that trl_settings("rm") sets
# exactly the TRL fields named here (besides the run's housekeeping, HOUSEKEEPING).
PPO_NAMES = (
    ("iterations", ("total_episodes",), "num_total_batches = total_episodes / batch_size"),
    (
        "batch_size",
        ("per_device_train_batch_size", "gradient_accumulation_steps", "local_rollout_forward_batch_size"),
        "batch_size = per-device batch x accumulation x processes",
    ),
    ("temperature", ("temperature",), "default 0.7; TRL samples at temperature + 1e-7"),
    ("lr", ("learning_rate",), "default 3e-6"),
    ("anneal_lr", ("lr_scheduler_type", "warmup_steps"), "linear: one step per batch, as ours"),
    ("epsilon", ("cliprange",), "default 0.2"),
    ("updates_per_batch", ("num_ppo_epochs", "num_mini_batches"), "epochs x minibatches"),
    ("seed", ("seed", "data_seed"), ""),
    (
        "beta of ppo_train",
        ("kl_coef", "kl_estimator"),
        "default 0.05, in other units: kl_coef_for; k1 in the reward, as ours",
    ),
    (
        "the 4-token answer, read up to its end mark",
        ("response_length", "stop_token_id", "missing_eos_penalty"),
        "stop_token_id 12, our end mark: what follows it becomes pad, masked out",
    ),
    ("adv_clip, adv_eps", (), "none: raw scores, whitened advantages"),
    ("kl_clamp", (), "none"),
    ("max_grad_norm", (), "none in the PPO loop"),
    ("kl_target, kl_horizon", (), "none (TRL 0.11: target, horizon)"),
    ("kl_placement", (), "none: always the reward"),
)
# Settings of a TRL run that carry none of ours: no files, no network, no bars of its own,
# on the CPU without mixed precision (every model stays in its own float64), no optimizer decay
# (ours has none), no sample printouts.
HOUSEKEEPING = (
    "report_to",
    "save_strategy",
    "logging_steps",
    "disable_tqdm",
    "log_level",
    "use_cpu",
    "bf16",
    "fp16",
    "gradient_checkpointing",
    "ddp_find_unused_parameters",
    "weight_decay",
    "num_sample_generations",
)


def ppo_names_html() -> str:
    """Return :data:`PPO_NAMES` as an HTML table, for the book."""
    import html

    def code(text):
        return f"<code>{html.escape(text)}</code>"

    rows = []
    for ours, fields, note in PPO_NAMES:
        theirs = ", ".join(code(f) for f in fields) if fields else "none"
        note = html.escape(note)
        parts = [part.strip() for part in ours.split(",")]
        names = all(part.isidentifier() for part in parts)  # setting names, else a phrase
        ours_cell = ", ".join(code(part) for part in parts) if names else html.escape(ours)
        if note and fields:
            theirs += f"<br>{note}"
        elif note:
            theirs = note
        rows.append(f"<tr><td>{ours_cell}</td><td>{theirs}</td></tr>")
    head = "<tr><th>ours</th><th>TRL's PPO trainer</th></tr>"
    # long field names may break anywhere, so that the table fits a phone's width
    style = "<style>.trl-names code { overflow-wrap: anywhere; }</style>"
    return f'{style}<table class="table trl-names"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def kl_coef_for(beta: float, score_std: float) -> float:
    """Return TRL PPO's ``kl_coef`` for our ``beta``: ``beta * score_std``.

    Our beta weighs the KL against a score standardised in each batch; TRL's ``kl_coef``
    weighs it against the raw score. Multiplying by the raw scores' standard deviation (of a
    batch sampled from the starting policy) puts the two on the same scale; the clip at
    +-3 and TRL's whitening of the advantages make that approximate.
    """
    return float(beta) * float(score_std)


def trl_settings(
    arm: str,
    seed: int = 0,
    n_processes: int = 1,
    config: PPOConfig | None = None,
    beta: float | None = None,
    score_std: float | None = None,
) -> dict:
    """Return the keyword arguments of the TRL config (``GRPOConfig``, ``RLOOConfig`` or
    ``PPOConfig``) that run ``arm`` with the settings and budget of our arm.

    ``config`` (default: our recipe) and ``beta`` (default: our arm's) are ours; the arm's own
    settings are set over ``config`` as :func:`minirlhf.experiment.arm_config` does. The global
    batch stays ``config.batch_size`` on any number of processes. ``score_std`` (PPO only) is
    the raw RM scores' standard deviation, for :func:`kl_coef_for`. Every TRL name below was
    read in TRL 1.12.0's ``trl/trainer/grpo_config.py``, ``rloo_config.py`` and
    ``trl/experimental/ppo/ppo_config.py``.
    """
    spec = _check_trl_arm(arm)
    cfg = arm_config(spec.ours, config or PPOConfig(), seed)
    beta = REGISTRY[spec.ours].beta if beta is None else float(beta)
    if cfg.batch_size % n_processes or (cfg.batch_size // n_processes) % cfg.group_size:
        raise ValueError(
            f"n_processes ({n_processes}) must split the batch of {cfg.batch_size} into whole groups "
            f"of {cfg.group_size}"
        )
    common = {
        # no files, no network, no progress bars of its own; the CPU, and no mixed precision:
        # bf16 and fp16 off, so no autocast, and each model computes in its own dtype (float64)
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "disable_tqdm": True,
        "log_level": "error",
        "use_cpu": True,
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": False,
        "ddp_find_unused_parameters": False,
        "seed": seed,
        "data_seed": seed,
        # the optimizer: AdamW without weight decay is our Adam; linear decay to 0 is anneal_lr
        "learning_rate": cfg.lr,
        "weight_decay": 0.0,
        "lr_scheduler_type": "linear" if cfg.anneal_lr else "constant",
        "warmup_steps": 0,
        # one optimizer step takes the whole batch, split over the processes
        "per_device_train_batch_size": cfg.batch_size // n_processes,
        "gradient_accumulation_steps": 1,
        "temperature": cfg.temperature,
    }
    if spec.trainer in ("grpo", "rloo"):
        group = {
            "num_generations": cfg.group_size,
            "max_completion_length": task.COMPLETION_LEN,
            "top_p": 1.0,
            "top_k": 0,
            "beta": beta,
            "epsilon": cfg.epsilon,
            # each rollout batch serves updates_per_batch optimizer steps: max_steps counts steps
            "num_iterations": cfg.updates_per_batch,
            "max_steps": cfg.iterations * cfg.updates_per_batch,
            "max_grad_norm": cfg.max_grad_norm,
            "remove_unused_columns": False,
            # The trainer loads the policy and its reference from a folder (see _run), by default
            # in float32 (create_model_from_path in trl/trainer/utils.py, 1.12.0, line 1166);
            # "auto" takes the dtype config.json names: float64, the weights' own.
            "model_init_kwargs": {"dtype": "auto"},
        }
        if spec.trainer == "grpo":
            same = estimators.get(cfg.advantages).trl  # the GRPOConfig settings that compute our advantages
            if not same:
                raise ValueError(f"TRL's GRPOTrainer has no setting that computes the {cfg.advantages!r} advantages")
            # TRL 1.12.0 multiplies its k3 by the ratio new/old by default
            # (use_bias_correction_kl, trl/trainer/grpo_config.py, lines 357-363
            # and 965-973; grpo_trainer.py, lines 3193-3194), which turns the
            # leash's gradient into that of KL(pi || ref). Ours differentiates k3
            # as it is, and follows KL(ref || pi): off, to compare like for like.
            group.update(**same, loss_type="dapo", use_bias_correction_kl=False)
        else:
            group.update(normalize_advantages=False)
        return {**common, **group}
    if score_std is None:
        raise ValueError("score_std is needed for TRL's PPO: kl_coef = beta * score_std")
    return {
        **common,
        "total_episodes": cfg.batch_size * cfg.iterations,
        "num_mini_batches": 1,
        "local_rollout_forward_batch_size": cfg.batch_size // n_processes,
        "num_ppo_epochs": cfg.updates_per_batch,
        "response_length": task.COMPLETION_LEN,
        "stop_token_id": task.SEMI,
        "missing_eos_penalty": None,
        "kl_coef": kl_coef_for(beta, score_std),
        "kl_estimator": "k1",
        "cliprange": cfg.epsilon,
        "num_sample_generations": 0,
    }


def _check_trl_arm(arm: str) -> TRLArm:
    if arm not in TRL_ARMS:
        raise ValueError(f"arm must be one of {tuple(TRL_ARMS)}, got {arm!r}")
    return TRL_ARMS[arm]


# ----------------------------------------------------------------------------- running TRL


def _offline() -> None:
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)


def import_trl():
    _offline()
    try:
        import trl
    except ImportError:
        raise ImportError('minirlhf.trl_run needs the optional extra: pip install -e ".[trl]"') from None
    if trl.__version__ != TRL_VERSION:
        raise ImportError(
            f'minirlhf.trl_run was written for TRL {TRL_VERSION}, found {trl.__version__}: pip install -e ".[trl]"'
        )
    return trl


def _prompt_text(pairs) -> list[str]:
    return [task.format_prompt(a, b).rjust(task.PROMPT_LEN, ";") for a, b in pairs.tolist()]


def _completion_ids(completions: list[str]) -> torch.Tensor:
    # TRL hands reward functions the decoded text; ours are always 4 characters (no early end).
    return torch.tensor(
        [task.encode(c[: task.COMPLETION_LEN].ljust(task.COMPLETION_LEN, ";")) for c in completions], dtype=torch.long
    )


def _reward_funcs(spec: TRLArm, rm_hf):
    from . import hf

    def reward_funcs_call(prompts, completions, a, b):
        if spec.reward == "verifier":
            pairs = torch.tensor([a, b], dtype=torch.long).T
            return task.batch_verify(pairs, _completion_ids(completions)).tolist()
        # GRPOTrainer could take the RM itself, but it reads the score at the last of the 4
        # tokens (trl/trainer/grpo_trainer.py, _calculate_rewards); this reads it at the first
        # `;`, as ours does.
        ids = torch.tensor([task.encode(p) for p in prompts], dtype=torch.long)
        return hf.hf_reward_scores(rm_hf, ids, _completion_ids(completions)).tolist()

    def reward(prompts, completions, a, b, **_):
        return reward_funcs_call(prompts, completions, a, b)

    reward.__name__ = spec.reward  # TRL logs it as rewards/<name>/mean
    return reward


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
    """Converts TRL's policy back after every iteration and measures it with our evaluate,
    under the caller's default dtype (``default``), as our own runs are measured."""

    def __init__(self, reference, rm, evalset, temperature, every, default=torch.float32):
        self.reference, self.rm, self.evalset, self.t, self.every = reference, rm, evalset, temperature, every
        self.default = default
        self.log = {"accuracy": [], "rm_score": [], "kl": [], "kinds": {k: [] for k in task.KINDS}}
        self.cache = {}

    def measure(self, hf_policy) -> dict:
        from . import hf

        was_training = hf_policy.training
        with _default_dtype(self.default):
            ev = evaluate(hf.hf_to_policy(hf_policy), self.reference, self.rm, self.evalset, self.t, self.cache)
        hf_policy.train(was_training)
        for key in ("accuracy", "rm_score", "kl"):
            self.log[key].append(ev[key])
        for k in task.KINDS:
            self.log["kinds"][k].append(ev["kinds"][k])
        return ev


def _callback(evaluator: _Evaluator, get_policy, bar):
    from transformers import TrainerCallback

    class EvalEachIteration(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % evaluator.every == 0:
                ev = evaluator.measure(get_policy())
                bar.update(1)
                bar.set_postfix_str(f"acc {ev['accuracy']:.3f} kl {ev['kl']:.3f}")
            return control

    return EvalEachIteration()


# TRL's per-step logs kept in the results, under TRL's own names.
TRL_LOGGED = {
    "grpo": ("reward", "kl", "entropy", "clip_ratio/region_mean", "frac_reward_zero_std"),
    "rloo": ("reward", "kl", "entropy", "clip_ratio/region_mean", "frac_reward_zero_std"),
    "ppo": (
        "objective/scores",
        "objective/kl",
        "objective/entropy",
        "policy/clipfrac_avg",
        "policy/approxkl_avg",
        "loss/value_avg",
        "val/num_eos_tokens",
    ),
}


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
    """Train ``arm`` (a name of :data:`TRL_ARMS`) with TRL's trainer from ``policy`` (our
    TinyGPT, also the reference) and return its log, laid out like ours: ``accuracy``,
    ``rm_score``, ``kl``, ``kinds`` per iteration (index 0 before training), TRL's own
    per-step metrics of :data:`TRL_LOGGED` under ``trl_log``, ``settings`` (the TRL config's
    keyword arguments), ``seconds`` (the whole call: conversion, the trainer's set-up, training
    and our evaluation, as our runs are timed), ``train_seconds`` (``trainer.train()`` alone)
    and ``n_processes``.

    Under ``accelerate launch`` every process trains its share; each returns the same log.
    ``profile`` names a file for a cProfile of the whole run. ``freeze_gc=False`` leaves out
    the ``gc.freeze()`` below, to time TRL's PPO as shipped (the results are the same).
    """
    trl = import_trl()
    from transformers.utils import logging as hf_logging

    called = time.perf_counter()
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # it tells of every token id it aligns; errors still show
    hf_logging.disable_progress_bar()  # one bar, ours, per run
    try:
        return _run(trl, arm, policy, rm, seed, config, beta, evalset, progress, profile, freeze_gc, called)
    finally:  # as they were: the caller's choice
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _run(trl, arm, policy, rm, seed, config, beta, evalset, progress, profile, freeze_gc, called) -> dict:
    from datasets import Dataset
    from transformers import PrinterCallback, set_seed

    from . import hf
    from .progress import progress_bar

    spec = _check_trl_arm(arm)
    cfg = arm_config(spec.ours, config or PPOConfig(), seed)
    evalset = evalset or EvalSet()
    dtype = dtype_of(policy)
    if dtype_of(rm) != dtype:
        raise ValueError(f"policy and rm must share a dtype, got {dtype} and {dtype_of(rm)}")
    n_processes = int(os.environ.get("WORLD_SIZE", "1"))
    score_std = _score_std(policy, rm, cfg, seed) if spec.trainer == "ppo" else None
    kwargs = trl_settings(arm, seed, n_processes, config, beta, score_std)
    pool = task.train_pairs()
    rm_hf = hf.rm_to_hf(rm)
    tok = hf.tokenizer()
    evaluator = _Evaluator(
        policy,
        rm,
        evalset,
        cfg.temperature,
        1 if spec.trainer == "ppo" else cfg.updates_per_batch,
        torch.get_default_dtype(),
    )
    bar = progress_bar(total=cfg.iterations, desc=f"TRL {arm}, seed {seed}", enabled=progress)
    with tempfile.TemporaryDirectory(prefix="minirlhf-trl-") as tmp, warnings.catch_warnings():
        # TRL sets gradient_checkpointing, which transformers 5 renames; we turn it off.
        warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*", category=FutureWarning)
        set_seed(seed)  # TRL's PPO seeds torch only, and shuffles its minibatches with numpy
        if spec.trainer == "ppo":
            # The four models are ours, converted in the policy's dtype; TRL's PPO casts none.
            start = hf.policy_to_hf(policy)
            # TRL stops a batch's generation once every answer has its `;` and fills the
            # answers that ended sooner with the generation's pad: `;`, as ours continue.
            start.generation_config.pad_token_id = task.SEMI
            dataset = Dataset.from_dict({"input_ids": task.encode_prompts(pool).tolist()})
            value = hf.rm_to_hf(rm)  # a value model initialised from the RM, as TRL's example script
            from trl.experimental.ppo import PPOConfig as TRLPPOConfig
            from trl.experimental.ppo import PPOTrainer

            args = TRLPPOConfig(output_dir=tmp, **kwargs)
            trainer = PPOTrainer(
                args=args,
                processing_class=tok,
                model=start,
                ref_model=hf.policy_to_hf(policy),
                reward_model=rm_hf,
                value_model=value,
                train_dataset=dataset,
            )
            get_policy = lambda: trainer.accelerator.unwrap_model(trainer.model).policy  # noqa: E731
            models = {
                "policy": get_policy(),
                "reference": trainer.ref_model,
                "value model": trainer.value_model,
                "reward model": trainer.reward_model,
            }
        else:
            # GRPO and RLOO load their reference from the policy's folder (trl/trainer/utils.py,
            # create_model_from_path), so the start goes through one, offline, and the trainer
            # loads both from it with the settings' model_init_kwargs (in the folder's dtype).
            folder = Path(tmp) / "start"
            hf.policy_to_hf(policy).save_pretrained(folder)
            a, b = pool.T.tolist()
            dataset = Dataset.from_dict({"prompt": _prompt_text(pool), "a": a, "b": b})
            Config = trl.GRPOConfig if spec.trainer == "grpo" else trl.RLOOConfig
            Trainer = trl.GRPOTrainer if spec.trainer == "grpo" else trl.RLOOTrainer
            trainer = Trainer(
                model=str(folder),
                reward_funcs=_reward_funcs(spec, rm_hf),
                args=Config(output_dir=tmp, **kwargs),
                train_dataset=dataset,
                processing_class=tok,
            )
            get_policy = lambda: trainer.accelerator.unwrap_model(trainer.model)  # noqa: E731
            models = {"policy": get_policy(), "reference": trainer.ref_model, "reward model": rm_hf}
        _check_dtypes(models, dtype)
        trainer.remove_callback(PrinterCallback)
        evaluator.measure(get_policy())
        trainer.add_callback(_callback(evaluator, get_policy, bar))
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
        train_seconds = time.perf_counter() - began
    bar.close()
    if len(evaluator.log["accuracy"]) != cfg.iterations + 1:
        raise RuntimeError(f"TRL ran {len(evaluator.log['accuracy']) - 1} iterations, expected {cfg.iterations}")
    keys = TRL_LOGGED[spec.trainer]
    rows = [row for row in trainer.state.log_history if keys[0] in row]
    trl_log = {key: [float(row[key]) for row in rows if key in row] for key in keys}
    return {
        **evaluator.log,
        "trl_log": trl_log,
        "settings": dict(kwargs),
        "dtype": str(dtype).removeprefix("torch."),
        "seconds": time.perf_counter() - called,
        "train_seconds": train_seconds,
        "n_processes": n_processes,
    }


# ----------------------------------------------------------------------------- where the time goes

# (label, file the function is defined in (its path's end), function name), by trainer: one
# iteration's stages, measured by cProfile's cumulative time. Rows marked "of which" are inside
# the row above them; the others do not overlap.
PROFILE_STAGES = {
    "grpo": (
        ("rollout: sample, score, old and ref. log-probs", "grpo_trainer.py", "_generate_and_score_completions"),
        ("  of which sampling (generate)", "generation/utils.py", "generate"),
        ("  of which the reward function", "trl_run.py", "reward_funcs_call"),
        ("loss: forward pass with gradient", "grpo_trainer.py", "compute_loss"),
        ("backward pass", "torch/_tensor.py", "backward"),
        ("gradient clipping", "torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
        ("optimizer step", "torch/optim/optimizer.py", "wrapper"),
        ("our evaluation (not TRL's work)", "trl_run.py", "measure"),
    ),
    "ppo": (
        ("sampling (generate)", "generation/utils.py", "generate"),
        ("policy, reference and value forward", "ppo_trainer.py", "forward"),
        ("reward model and value reads", "experimental/utils.py", "get_reward"),
        ("backward pass", "torch/_tensor.py", "backward"),
        ("optimizer step", "torch/optim/optimizer.py", "wrapper"),
        ("garbage collection (gc.collect)", "~", "<built-in method gc.collect>"),
        ("our evaluation (not TRL's work)", "trl_run.py", "measure"),
    ),
}
PROFILE_STAGES["rloo"] = tuple(
    (label, f.replace("grpo_trainer.py", "rloo_trainer.py"), fn) for label, f, fn in PROFILE_STAGES["grpo"]
)


def profile_stages(stats_file, trainer: str, iterations: int) -> dict:
    """Return {stage: seconds per iteration} from a cProfile of ``trainer.train()``: the stages
    of :data:`PROFILE_STAGES`, ``"total"`` (``train`` itself) and ``"rest"`` (total minus the
    stages that do not overlap)."""
    import pstats

    stats = pstats.Stats(str(stats_file)).stats

    def cumulative(path_end, name):
        # the outermost of the functions of that name (nested calls are inside its time)
        return max(
            (v[3] for (f, _, fn), v in stats.items() if fn == name and f.replace("\\", "/").endswith(path_end)),
            default=0.0,
        )

    total = max(v[3] for (f, _, fn), v in stats.items() if fn == "train" and "trainer" in f)
    out = {label: cumulative(f, fn) / iterations for label, f, fn in PROFILE_STAGES[trainer]}
    out["total"] = total / iterations
    out["rest"] = out["total"] - sum(v for label, v in out.items() if not label.startswith(" ") and label != "total")
    return out


# ----------------------------------------------------------------------------- side by side


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
    (:func:`profile_stages` of an extra run of the first seed, after the timed ones). Our runs
    are :func:`minirlhf.experiment.run_arm` with the arm's registry settings; each side's
    ``seconds`` is the whole call, set-up and evaluation included.

    With ``keep_on_interrupt``, a KeyboardInterrupt (Ctrl-C, or a stop signal the caller turns
    into one) returns the seeds whose every run had finished (``settings["seeds"]`` lists them;
    no profile unless it had finished too) instead of raising, unless none had.
    """
    from .store import load_rm, load_sft

    seeds = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    for arm in arms:
        _check_trl_arm(arm)
    policy, _ = load_sft(progress=progress)
    rm, _ = load_rm(progress=progress)
    cfg = replace(PPOConfig(), iterations=iterations)
    evalset = EvalSet()
    out = {
        "settings": {
            "arms": list(arms),
            "seeds": seeds,
            "iterations": iterations,
            "ppo": asdict(cfg),
            "ours": {arm: TRL_ARMS[arm].ours for arm in arms},
        },
        "ours": {arm: {} for arm in arms},
        "trl": {arm: {} for arm in arms},
        "seconds": {"ours": {arm: {} for arm in arms}, "trl": {arm: {} for arm in arms}},
        "versions": _versions(),
    }
    finished = []
    try:
        for seed in seeds:
            for arm in arms:
                if ours:
                    began = time.perf_counter()
                    _, log = run_arm(TRL_ARMS[arm].ours, policy, rm, seed, None, cfg, evalset, progress=progress)
                    out["seconds"]["ours"][arm][str(seed)] = time.perf_counter() - began
                    out["ours"][arm][str(seed)] = {k: log[k] for k in ("accuracy", "rm_score", "kl", "kinds")}
                log = run_trl_arm(arm, policy, rm, seed, cfg, evalset=evalset, progress=progress)
                out["seconds"]["trl"][arm][str(seed)] = log["seconds"]
                out["trl"][arm][str(seed)] = log
            finished.append(seed)
        if profile:
            _profile(out, arms, policy, rm, seeds, cfg, evalset, progress, iterations)
    except KeyboardInterrupt:
        if not (keep_on_interrupt and finished):
            raise
        for table in (out["ours"], out["trl"], out["seconds"]["ours"], out["seconds"]["trl"]):
            for runs in table.values():
                for key in [key for key in runs if int(key) not in finished]:
                    del runs[key]
        out.pop("profile", None)
        out.pop("gc", None)
        out["settings"]["seeds"] = finished
    return out


def _profile(out, arms, policy, rm, seeds, cfg, evalset, progress, iterations) -> None:
    """The profile of :func:`compare`: one more run of the first seed of each arm, profiled."""
    out["profile"] = {}
    with tempfile.TemporaryDirectory(prefix="minirlhf-profile-") as tmp:
        for arm in arms:
            path = Path(tmp) / f"{arm}.prof"
            run_trl_arm(arm, policy, rm, seeds[0], cfg, evalset=evalset, progress=progress, profile=str(path))
            out["profile"][arm] = profile_stages(path, TRL_ARMS[arm].trainer, iterations)
            if TRL_ARMS[arm].trainer == "ppo":  # and TRL's PPO as shipped, without gc.freeze()
                shipped = run_trl_arm(
                    arm, policy, rm, seeds[0], cfg, evalset=evalset, progress=progress, freeze_gc=False
                )
                frozen = out["trl"][arm][str(seeds[0])]
                out["gc"] = {
                    "arm": arm,
                    "seed": seeds[0],
                    "train_seconds_frozen": frozen["train_seconds"],
                    "train_seconds_shipped": shipped["train_seconds"],
                    "collections": 2 * iterations,
                    "same_results": all(shipped[k] == frozen[k] for k in ("accuracy", "kl", "trl_log")),
                }


def format_profile(results: dict) -> str:
    """Return the profile of each arm's TRL run as text: milliseconds per iteration by stage,
    then what ``gc.freeze()`` saves TRL's PPO."""
    lines = []
    for arm, stages in results.get("profile", {}).items():
        lines.append(f"TRL {TRL_ARMS[arm].trainer.upper()} ({arm}), ms per iteration, under the profiler:")
        lines += [f"  {label:<50} {ms * 1000:7.1f}" for label, ms in stages.items()]
    if "gc" in results:
        g = results["gc"]
        per_call = (g["train_seconds_shipped"] - g["train_seconds_frozen"]) / g["collections"]
        lines.append(
            f"TRL PPO ({g['arm']}, seed {g['seed']}), training alone: {g['train_seconds_shipped']:.1f} s as shipped,"
        )
        lines.append(
            f"  {g['train_seconds_frozen']:.1f} s after gc.freeze() "
            f"(x{g['train_seconds_shipped'] / g['train_seconds_frozen']:.1f} faster); "
            f"{per_call:.2f} s saved per gc.collect()"
        )
        lines.append(f"  same results either way: {'yes' if g['same_results'] else 'NO'}")
    return "\n".join(lines)


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
                "gain": mean_ci95([logs[s]["accuracy"][-1] - logs[s]["accuracy"][0] for s in seeds]),
                "kl_end": mean_ci95([logs[s]["kl"][-1] for s in seeds]),
                "rm_score_end": mean_ci95([logs[s]["rm_score"][-1] for s in seeds]),
                "seconds": mean_ci95([results["seconds"][side][arm][s] for s in seeds]),
                "n_seeds": len(seeds),
            }
        if "ours" in row and "trl" in row:
            ours, theirs = results["ours"][arm], results["trl"][arm]
            common = [s for s in ours if s in theirs]
            gain = lambda log: log["accuracy"][-1] - log["accuracy"][0]  # noqa: E731
            row["gain_diff"] = mean_ci95([gain(ours[s]) - gain(theirs[s]) for s in common])
            row["kl_diff"] = mean_ci95([ours[s]["kl"][-1] - theirs[s]["kl"][-1] for s in common])
            row["time_ratio"] = row["trl"]["seconds"][0] / row["ours"]["seconds"][0]
        out[arm] = row
    return out


def _pm(pair, digits=3) -> str:
    mean, half = pair
    return f"{mean:+.{digits}f}" if math.isnan(half) else f"{mean:+.{digits}f} ± {half:.{digits}f}"


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


def plot_side_by_side(results: dict, key: str = "accuracy", axes=None):
    """Draw ours and TRL's ``key`` per iteration, one panel per arm (mean over seeds, band = 95%
    interval); return the axes."""
    import matplotlib.pyplot as plt

    arms = results["settings"]["arms"]
    if axes is None:
        _, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.0), sharey=True, squeeze=False)
        axes = axes[0]
    labels = {
        "accuracy": "accuracy (greedy, 400 prompts)",
        "kl": "KL to reference (nats/token)",
        "rm_score": "mean RM score",
    }
    for ax, arm in zip(axes, arms):
        for side, color, ls in (("ours", REGISTRY[TRL_ARMS[arm].ours].color, "-"), ("trl", TRL_COLOR, "--")):
            logs = results[side][arm]
            if not logs:
                continue
            runs = np.array([log[key] for log in logs.values()])
            x = np.arange(runs.shape[1])
            mean = runs.mean(0)
            name = "ours" if side == "ours" else f"TRL {TRL_ARMS[arm].trainer.upper()}"
            ax.plot(x, mean, color=color, ls=ls, lw=2, label=name)
            if len(runs) > 1:
                half = np.array([mean_ci95(runs[:, i])[1] for i in range(runs.shape[1])])
                ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, lw=0)
        ax.set_title(arm)
        ax.set_xlabel("iteration (64 completions)")
        ax.grid(alpha=0.3)
        ax.legend(frameon=False, fontsize=8)
    axes[0].set_ylabel(labels.get(key, key))
    return axes


FIGURE_TITLES = {
    "accuracy": "Accuracy: ours and TRL's, from the same start",
    "kl": "KL to the start: ours and TRL's, by the same code",
}


def side_by_side_figure(results: dict, key: str = "accuracy", narrow: bool = False):
    """Return a figure of ours and TRL's ``key`` (``"accuracy"`` or ``"kl"``), one panel per arm:
    two panels a row, or with ``narrow`` one (for a phone's width)."""
    import matplotlib.pyplot as plt

    arms = results["settings"]["arms"]
    cols = 1 if narrow else 2
    rows = (len(arms) + cols - 1) // cols
    size = (3.6, 2.3 * rows + 0.5) if narrow else (6.4, 2.7 * rows + 0.4)
    fig, axes = plt.subplots(rows, cols, figsize=size, sharey=True, squeeze=False)
    plot_side_by_side(results, key, axes=axes.ravel()[: len(arms)])
    for ax in axes.ravel()[len(arms) :]:
        ax.set_visible(False)
    label = axes[0, 0].get_ylabel()
    if narrow:  # a short label fits the panel's height
        label = {"accuracy": "accuracy", "kl": "KL (nats/token)"}.get(key, label)
    for ax in axes.ravel():
        ax.set_ylabel(label if ax in axes[:, 0] else "")
    for ax in axes[:-1].ravel():
        ax.set_xlabel("")
    title = FIGURE_TITLES.get(key, key)
    fig.suptitle(title.replace(": ", ":\n") if narrow else title, fontsize=10 if narrow else 12)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- command line


if __name__ == "__main__":  # the command line lives in minirlhf/commands/trl_run.py
    from .commands.trl_run import main

    sys.exit(main())
