"""Advantage estimators as one table: :func:`get` maps each name that ``PPOConfig.advantages``
accepts to an :class:`Estimator`, and everything that depends on the estimator reads it from
there: the config's checks, the rollout's extra data and the advantages.

Each module of this package defines one estimator, ``ESTIMATOR = Estimator(...)``, with its
function (the one ``ppo_train``'s ``advantage_fn`` replaces, which the chapters teach) and the
code only it uses; modules whose names start with ``_`` hold helpers that several estimators
share. The table is read from the modules found here when it is first needed
(:class:`minirlhf.registry.ModuleTable`), so adding an estimator is adding one module, and a
stored run is keyed on the code of the estimator it uses, not on the others
(``minirlhf.course.runs``). ``MAINTAINING.md`` gives the recipe.

The contract of an estimator's function: it takes the arguments its ``signature`` names, in
that order, and returns the advantages: one per completion (B,) for the estimators that
``copied_to_tokens`` or ``to_tokens`` copy to the tokens, or (B, T) for chapter 5's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .. import leashes
from ..registry import ModuleTable

__all__ = [
    "Estimator",
    "PER_GROUP",
    "get",
    "names",
    "module_of",
    "copied_to_tokens",
    "to_tokens",
    "no_extras",
]

PER_GROUP = ("rewards", "group_size", "eps")
"""The signature of a group estimator's function: one advantage per completion (B,) from the
rewards of its group alone (:func:`copied_to_tokens` calls it)."""


def no_extras(policy, prompts, cfg) -> dict:
    """The rollout data an estimator needs beyond :class:`minirlhf.ppo.Rollout`'s fields: none."""
    return {}


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator: a name, the function a learner may replace, how the advantages
    are made with it, and what it needs.

    ``apply(fn, batch, rewards, reward_fn, beta, cfg)`` returns the per-token advantages
    (B, T) of a :class:`~minirlhf.ppo.Rollout` ``batch`` whose completions scored ``rewards``
    (B,), calling ``fn`` (the estimator's own ``fn``, or the ``advantage_fn`` that replaces it)
    with the arguments ``signature`` names.
    """

    name: str
    fn: Callable  # the function ppo_train's advantage_fn replaces, with the same signature
    apply: Callable  # (fn, batch, rewards, reward_fn, beta, cfg) -> (B, T)
    signature: tuple  # fn's parameters, in order: what a replacing advantage_fn takes
    help: str  # one line: what the baseline is, and whose it is
    min_group: int = 1  # the smallest group_size it works with (2: a baseline from the group)
    leash_in_advantages: bool = False  # it can carry a leash that acts in the reward
    extras: Callable = no_extras  # (policy, prompts, cfg) -> {name: tensor}, sampled with the rollout
    trl: dict = field(default_factory=dict)  # GRPOConfig settings that make TRL compute the same; {} if none

    @property
    def per_group(self) -> bool:
        """True for a group estimator: one advantage per completion from its group's rewards."""
        return self.signature == PER_GROUP

    def check(self, cfg) -> None:
        """Raise ValueError when the settings ``cfg`` (a PPOConfig) cannot run this estimator."""
        if cfg.group_size < self.min_group:
            raise ValueError(
                f"advantages={self.name!r} needs group_size >= {self.min_group}: a group of "
                "one has only itself as a baseline, so every advantage would be 0"
            )
        if leashes.get(cfg.kl_placement).in_reward and not self.leash_in_advantages:
            in_loss = " or ".join(repr(name) for name in leashes.names() if not leashes.get(name).in_reward)
            raise ValueError(
                f"advantages={self.name!r} puts no leash in the advantages: use a leash in the loss, "
                f"kl_placement={in_loss} (GRPO's is 'loss', its k3 term), got kl_placement={cfg.kl_placement!r}"
            )


def to_tokens(a, rewards: torch.Tensor, mask: torch.Tensor, what: str, note: str = "") -> torch.Tensor:
    """Return one advantage per completion ``a`` (B,) copied to each of its kept tokens (B, T),
    0 on the tokens past its end; a ValueError naming ``what`` (and ``note``) when ``a`` is not (B,)."""
    if getattr(a, "shape", None) != rewards.shape:
        got = tuple(getattr(a, "shape", ()))
        raise ValueError(f"{what} must be (B,) = {tuple(rewards.shape)}, got {got}" + (f" ({note})" if note else ""))
    return a[:, None] * mask  # (B, T)


def copied_to_tokens(fn, batch, rewards, reward_fn, beta, cfg) -> torch.Tensor:
    """The advantages of a group estimator: ``fn(rewards, group_size, eps)`` (:data:`PER_GROUP`)
    gives one per completion (B,), copied to each of its kept tokens (0 on the tokens past its end)."""
    a = fn(rewards, cfg.group_size, cfg.adv_eps)  # (B,)
    return to_tokens(a, rewards, batch.mask, "group advantages", f"estimator {cfg.advantages!r}")


def _order(estimator: Estimator) -> tuple:
    # chapter 5's first, then the others by the smallest group they need
    return estimator.min_group, estimator.name != "batch", estimator.name


_TABLE = ModuleTable(__name__, "ESTIMATOR", Estimator, "advantages", order=_order)
names, get, module_of = _TABLE.names, _TABLE.get, _TABLE.module_of
