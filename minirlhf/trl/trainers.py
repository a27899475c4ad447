"""TRL's trainers as data: each name a TRL arm's ``trainer`` may take maps to a
:class:`TRLTrainer`, with the settings of its config that only it has, the function that builds
it from our models, how its steps count and what of its log is kept.

Everything that differs by trainer reads it from :data:`TRL_TRAINERS` (the mapping, the run, the
profile), so no module of the bridge compares a trainer's name, as :mod:`minirlhf.trainers` does
for ours. GRPO and RLOO sample groups of completions, score them with a reward function and load
the policy and its reference from a folder; TRL's PPO takes our four models as they are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .. import estimators, task

__all__ = ["TRLTrainer", "Start", "TRL_TRAINERS", "kl_coef_for"]


@dataclass(frozen=True)
class TRLTrainer:
    """One of TRL's trainers, as the bridge drives it.

    ``settings(cfg, beta, n_processes, score_std)`` returns the fields of its config that the
    trainers do not share (``cfg`` is our PPOConfig with the arm's settings); ``build(self, arm,
    start, kwargs, folder)`` returns ``(trainer, get_policy, models)``: the trainer, a function
    that returns its policy as it trains, and ``{name: module}`` of every model it holds.
    """

    config: str  # TRL's config class, by its dotted path (TRL is imported only to run)
    trainer: str  # TRL's trainer class, likewise
    settings: Callable
    build: Callable
    logged: tuple  # its per-step logs kept in the results, under TRL's names; the first is in every row kept
    needs_score_std: bool = False  # its kl_coef weighs the raw score: kl_coef_for needs the scores' spread
    step_per_batch: bool = False  # its global step counts rollout batches, else optimizer steps
    gc_per_batch: int = 0  # the gc.collect() calls it makes a batch: the profile times it without gc.freeze() too

    def classes(self) -> tuple[type, type]:
        """Return TRL's (config class, trainer class); TRL must be installed."""
        return _load(self.config), _load(self.trainer)


@dataclass(frozen=True)
class Start:
    """What every trainer is built from: our policy (the start and the reference) and reward
    model, the reward model converted, the tokenizer and the training pairs."""

    policy: object
    rm: object
    rm_hf: object
    tokenizer: object
    pool: torch.Tensor


def _load(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# ----------------------------------------------------------------------------- each one's settings


def kl_coef_for(beta: float, score_std: float) -> float:
    """Return TRL PPO's ``kl_coef`` for our ``beta``: ``beta * score_std``.

    Our beta weighs the KL against a score standardised in each batch; TRL's ``kl_coef``
    weighs it against the raw score. Multiplying by the raw scores' standard deviation (of a
    batch sampled from the starting policy) puts the two on the same scale; the clip at
    +-3 and TRL's whitening of the advantages make that approximate.
    """
    return float(beta) * float(score_std)


def _group_settings(cfg, beta: float) -> dict:
    # What GRPOConfig and RLOOConfig share (trl/trainer/grpo_config.py and rloo_config.py, 1.12.0).
    return {
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
        # The trainer loads the policy and its reference from a folder (see _group_trainer), by
        # default in float32 (create_model_from_path in trl/trainer/utils.py, 1.12.0, line 1166);
        # "auto" takes the dtype config.json names: float64, the weights' own.
        "model_init_kwargs": {"dtype": "auto"},
    }


def _grpo_settings(cfg, beta, n_processes, score_std) -> dict:
    same = estimators.get(cfg.advantages).trl  # the GRPOConfig settings that compute our advantages
    if not same:
        raise ValueError(f"TRL's GRPOTrainer has no setting that computes the {cfg.advantages!r} advantages")
    # TRL 1.12.0 multiplies its k3 by the ratio new/old by default
    # (use_bias_correction_kl, trl/trainer/grpo_config.py, lines 357-363
    # and 965-973; grpo_trainer.py, lines 3193-3194), which turns the
    # leash's gradient into that of KL(pi || ref). Ours differentiates k3
    # as it is, and follows KL(ref || pi): off, to compare like for like.
    return {**_group_settings(cfg, beta), **same, "loss_type": "dapo", "use_bias_correction_kl": False}


def _rloo_settings(cfg, beta, n_processes, score_std) -> dict:
    return {**_group_settings(cfg, beta), "normalize_advantages": False}


def _ppo_settings(cfg, beta, n_processes, score_std) -> dict:
    # trl/experimental/ppo/ppo_config.py, 1.12.0
    return {
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


# ----------------------------------------------------------------------------- how each is built


def _prompt_text(pairs) -> list[str]:
    return [task.format_prompt(a, b).rjust(task.PROMPT_LEN, ";") for a, b in pairs.tolist()]


def _completion_ids(completions: list[str]) -> torch.Tensor:
    # TRL hands reward functions the decoded text; ours are always 4 characters (no early end).
    return torch.tensor(
        [task.encode(c[: task.COMPLETION_LEN].ljust(task.COMPLETION_LEN, ";")) for c in completions], dtype=torch.long
    )


def _reward_funcs(arm, rm_hf):
    from .. import hf

    def reward_funcs_call(prompts, completions, a, b):
        if arm.reward == "verifier":
            pairs = torch.tensor([a, b], dtype=torch.long).T
            return task.batch_verify(pairs, _completion_ids(completions)).tolist()
        # GRPOTrainer could take the RM itself, but it reads the score at the last of the 4
        # tokens (trl/trainer/grpo_trainer.py, _calculate_rewards); this reads it at the first
        # `;`, as ours does.
        ids = torch.tensor([task.encode(p) for p in prompts], dtype=torch.long)
        return hf.hf_reward_scores(rm_hf, ids, _completion_ids(completions)).tolist()

    def reward(prompts, completions, a, b, **_):
        return reward_funcs_call(prompts, completions, a, b)

    reward.__name__ = arm.reward  # TRL logs it as rewards/<name>/mean
    return reward


def _group_trainer(spec: TRLTrainer, arm, start: Start, kwargs: dict, folder: str):
    """GRPO and RLOO: they load their reference from the policy's folder (trl/trainer/utils.py,
    create_model_from_path), so the start goes through one, offline, and the trainer loads both
    from it with the settings' model_init_kwargs (in the folder's dtype)."""
    from datasets import Dataset

    from .. import hf

    saved = Path(folder) / "start"
    hf.policy_to_hf(start.policy).save_pretrained(saved)
    a, b = start.pool.T.tolist()
    dataset = Dataset.from_dict({"prompt": _prompt_text(start.pool), "a": a, "b": b})
    Config, Trainer = spec.classes()
    trainer = Trainer(
        model=str(saved),
        reward_funcs=_reward_funcs(arm, start.rm_hf),
        args=Config(output_dir=folder, **kwargs),
        train_dataset=dataset,
        processing_class=start.tokenizer,
    )
    get_policy = lambda: trainer.accelerator.unwrap_model(trainer.model)  # noqa: E731
    models = {"policy": get_policy(), "reference": trainer.ref_model, "reward model": start.rm_hf}
    return trainer, get_policy, models


def _ppo_trainer(spec: TRLTrainer, arm, start: Start, kwargs: dict, folder: str):
    """TRL's PPO: the four models are ours, converted in the policy's dtype; it casts none."""
    from datasets import Dataset

    from .. import hf

    policy = hf.policy_to_hf(start.policy)
    # TRL stops a batch's generation once every answer has its `;` and fills the
    # answers that ended sooner with the generation's pad: `;`, as ours continue.
    policy.generation_config.pad_token_id = task.SEMI
    dataset = Dataset.from_dict({"input_ids": task.encode_prompts(start.pool).tolist()})
    value = hf.rm_to_hf(start.rm)  # a value model initialised from the RM, as TRL's example script
    Config, Trainer = spec.classes()
    trainer = Trainer(
        args=Config(output_dir=folder, **kwargs),
        processing_class=start.tokenizer,
        model=policy,
        ref_model=hf.policy_to_hf(start.policy),
        reward_model=start.rm_hf,
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
    return trainer, get_policy, models


# ----------------------------------------------------------------------------- the table

_GROUP_LOGGED = ("reward", "kl", "entropy", "clip_ratio/region_mean", "frac_reward_zero_std")

TRL_TRAINERS = {
    "grpo": TRLTrainer("trl.GRPOConfig", "trl.GRPOTrainer", _grpo_settings, _group_trainer, _GROUP_LOGGED),
    "rloo": TRLTrainer("trl.RLOOConfig", "trl.RLOOTrainer", _rloo_settings, _group_trainer, _GROUP_LOGGED),
    "ppo": TRLTrainer(
        "trl.experimental.ppo.PPOConfig",
        "trl.experimental.ppo.PPOTrainer",
        _ppo_settings,
        _ppo_trainer,
        (
            "objective/scores",
            "objective/kl",
            "objective/entropy",
            "policy/clipfrac_avg",
            "policy/approxkl_avg",
            "loss/value_avg",
            "val/num_eos_tokens",
        ),
        needs_score_std=True,
        step_per_batch=True,
        gc_per_batch=2,  # trl/experimental/ppo/ppo_trainer.py, train
    ),
}
"""TRL's trainers, by the name a TRL arm's ``trainer`` gives."""
