"""The trainers, as data: each name an arm's ``trainer`` may take maps to its config class, the
function that runs an arm with it, the rewards it learns from and what its beta means.

Everything that differs by trainer reads it from :data:`TRAINERS` (the arms' checks, the
experiment, its command line, the stored runs), so no other module compares a trainer's name.
``ppo`` is :func:`minirlhf.ppo.ppo_train` (GRPO, RLOO and ReMax are PPO arms with other
settings); ``dpo`` is :func:`minirlhf.dpo.train_dpo`, which samples nothing and learns from
chapter 4's preference pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from .dpo import DPOConfig, prepare_reference, train_dpo
from .ppo import PPOConfig, ppo_train, rm_reward, verifier_reward

__all__ = ["Trainer", "TRAINERS", "get", "prepare"]


@dataclass(frozen=True)
class Trainer:
    """One trainer: its config, how an arm runs with it, and what its arms may set.

    ``run(arm, policy, rm, beta, config, evalset, loss_fn, advantage_fn, progress, desc)``
    returns (trained policy, log) of one run of the :class:`~minirlhf.arms.Arm` ``arm``, from
    ``policy`` (the start and the frozen reference), with ``config`` already the arm's.
    """

    name: str
    config: type  # the config class; an arm's settings are fields of it
    run: Callable
    rewards: tuple  # the rewards (keys of minirlhf.arms.REWARDS) its arms may learn from
    beta: str  # what an arm's beta is for this trainer, for help texts
    beta_zero: str = ""  # why beta must be > 0 ("" when 0 is allowed)
    own_defaults: bool = False  # given another trainer's config, an arm takes this one's defaults
    # prepare(policy, config): work that every run from ``policy`` with ``config`` shares, done
    # once in the calling process before runs go to worker processes, which inherit it (None:
    # nothing to share)
    prepare: Callable | None = None


def _run_ppo(arm, policy, rm, beta, config, evalset, loss_fn, advantage_fn, progress, desc):
    reward_fn = rm_reward(rm) if arm.reward == "rm" else verifier_reward
    return ppo_train(
        policy,
        policy,
        reward_fn,
        beta,
        config,
        rm=rm,
        loss_fn=loss_fn,
        advantage_fn=advantage_fn,
        evalset=evalset,
        progress=progress,
        desc=desc,
    )


def _run_dpo(arm, policy, rm, beta, config, evalset, loss_fn, advantage_fn, progress, desc):
    if advantage_fn is not None:
        raise ValueError(f"the arm {arm.name} is trained by DPO, which has no advantages: advantage_fn must be None")
    cfg = replace(config, beta=beta)
    return train_dpo(policy, policy, cfg, rm=rm, evalset=evalset, progress=progress, loss_fn=loss_fn, desc=desc)


TRAINERS = {
    "ppo": Trainer("ppo", PPOConfig, _run_ppo, ("rm", "verifier"), "KL coefficient"),
    "dpo": Trainer(
        "dpo",
        DPOConfig,
        _run_dpo,
        ("pairs",),
        "beta in the loss",
        beta_zero="at 0 its loss is log 2 whatever the policy, so nothing is learned",
        own_defaults=True,
        prepare=prepare_reference,  # the reference's log-probs of the pairs
    ),
}
"""The trainers, by the name an arm's ``trainer`` gives."""


def get(name: str) -> Trainer:
    """Return the trainer called ``name``; a ValueError naming the choices for any other."""
    if name not in TRAINERS:
        raise ValueError(f"trainer must be one of {tuple(TRAINERS)}, got {name!r}")
    return TRAINERS[name]


def prepare(jobs, policy) -> None:
    """Do, once in this process, the work shared by the runs ``jobs`` (pairs of an arm, a
    :class:`~minirlhf.arms.Arm`, and its config) from ``policy``, before they are handed to
    worker processes: each trainer's :attr:`Trainer.prepare` for each distinct config."""
    done = set()
    for arm, config in jobs:
        trainer = get(arm.trainer)
        key = (trainer.name, repr(config))
        if trainer.prepare is not None and key not in done:
            done.add(key)
            trainer.prepare(policy, config)
