"""The TRL arms and the one mapping of our settings to TRL's: :func:`trl_settings`, which the
book prints, and :data:`PPO_NAMES`, our PPO settings beside the fields of TRL's PPO config that
carry them, which the page "From toy to real" prints as a table.

Needs neither TRL nor transformers: the mapping is checked, and printed, without them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..arms import REGISTRY
from ..experiment import arm_config
from ..ppo import PPOConfig
from .trainers import TRL_TRAINERS

__all__ = [
    "TRL_VERSION",
    "TRLArm",
    "TRL_ARMS",
    "check_arm",
    "PPO_NAMES",
    "HOUSEKEEPING",
    "ppo_names_html",
    "trl_settings",
]

TRL_VERSION = "1.12.0"  # pinned in pyproject.toml's extra "trl"


@dataclass(frozen=True)
class TRLArm:
    """One arm run by TRL: which trainer, which reward, and our arm it is set like."""

    trainer: str  # a key of minirlhf.trl.trainers.TRL_TRAINERS
    reward: str  # "verifier" or "rm"
    ours: str  # the arm of minirlhf.arms.REGISTRY with the same budget and settings


TRL_ARMS = {
    "grpo-verifier": TRLArm("grpo", "verifier", "grpo-verifier"),
    "grpo-rm": TRLArm("grpo", "rm", "grpo-rm"),
    "rloo-verifier": TRLArm("rloo", "verifier", "rloo-verifier"),
    "rm": TRLArm("ppo", "rm", "rm"),
}


def check_arm(arm: str) -> TRLArm:
    """Return the TRL arm called ``arm``; a ValueError naming the choices for any other."""
    if arm not in TRL_ARMS:
        raise ValueError(f"arm must be one of {tuple(TRL_ARMS)}, got {arm!r}")
    return TRL_ARMS[arm]


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
    the raw RM scores' standard deviation, for :func:`~minirlhf.trl.trainers.kl_coef_for`. Every
    TRL name here and in :mod:`minirlhf.trl.trainers` was read in TRL 1.12.0's
    ``trl/trainer/grpo_config.py``, ``rloo_config.py`` and ``trl/experimental/ppo/ppo_config.py``.
    """
    spec = check_arm(arm)
    trainer = TRL_TRAINERS[spec.trainer]
    cfg = arm_config(spec.ours, config or PPOConfig(), seed)
    beta = REGISTRY[spec.ours].beta if beta is None else float(beta)
    if cfg.batch_size % n_processes or (cfg.batch_size // n_processes) % cfg.group_size:
        raise ValueError(
            f"n_processes ({n_processes}) must split the batch of {cfg.batch_size} into whole groups "
            f"of {cfg.group_size}"
        )
    if trainer.needs_score_std and score_std is None:
        raise ValueError("score_std is needed for TRL's PPO: kl_coef = beta * score_std")
    return {**_shared(cfg, seed, n_processes), **trainer.settings(cfg, beta, n_processes, score_std)}


def _shared(cfg: PPOConfig, seed: int, n_processes: int) -> dict:
    """The fields every TRL config takes alike: the housekeeping, the seed, the optimizer and the batch."""
    return {
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
