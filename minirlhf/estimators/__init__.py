"""Advantage estimators as one table: :data:`ESTIMATORS` maps each name that
``PPOConfig.advantages`` accepts to an :class:`Estimator`, and everything that depends on the
estimator reads it from there: the config's checks, the rollout's extra data and the advantages.

Each module of this package defines one estimator, ``ESTIMATOR = Estimator(...)``, beside the
code only it uses; the table is read from the modules found here when it is first needed, so
adding an estimator is adding one module. A stored run is keyed on the code of the estimator
it uses, not on the others (``minirlhf.course.runs``).

The functions that chapters teach (:func:`minirlhf.ppo.kl_shaped_advantages`,
:func:`minirlhf.ppo.group_advantages`, ...) stay in :mod:`minirlhf.ppo`; an estimator names
one of them as its ``fn``, the function that ``ppo_train``'s ``advantage_fn`` replaces, with
the same signature.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

import torch

__all__ = ["Estimator", "ESTIMATORS", "get", "names", "module_of", "copied_to_tokens", "to_tokens", "no_extras"]


def no_extras(policy, prompts, cfg) -> dict:
    """The rollout data an estimator needs beyond :class:`minirlhf.ppo.Rollout`'s fields: none."""
    return {}


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator: a name, the function a learner may replace, how the advantages
    are made with it, and what it needs.

    ``advantages(fn, batch, rewards, reward_fn, beta, cfg)`` returns the per-token advantages
    (B, T) of a :class:`~minirlhf.ppo.Rollout` ``batch`` whose completions scored ``rewards``
    (B,), calling ``fn`` (the estimator's own ``fn``, or the ``advantage_fn`` that replaces it).
    """

    name: str
    fn: Callable  # the function ppo_train's advantage_fn replaces, with the same signature
    advantages: Callable  # (fn, batch, rewards, reward_fn, beta, cfg) -> (B, T)
    help: str  # one line: what the baseline is, and whose it is
    min_group: int = 1  # the smallest group_size it works with (2: a baseline from the group)
    leash_in_advantages: bool = False  # it can carry the KL leash itself (kl_placement="reward")
    extras: Callable = no_extras  # (policy, prompts, cfg) -> {name: tensor}, sampled with the rollout
    trl: dict = field(default_factory=dict)  # GRPOConfig settings that make TRL compute the same; {} if none

    def check(self, cfg) -> None:
        """Raise ValueError when the settings ``cfg`` (a PPOConfig) cannot run this estimator."""
        if cfg.group_size < self.min_group:
            raise ValueError(
                f"advantages={self.name!r} needs group_size >= {self.min_group}: a group of "
                "one has only itself as a baseline, so every advantage would be 0"
            )
        if cfg.kl_placement == "reward" and not self.leash_in_advantages:
            raise ValueError(
                f"advantages={self.name!r} puts no leash in the advantages: use "
                f"kl_placement='loss' (GRPO's k3 loss term), got kl_placement={cfg.kl_placement!r}"
            )


def to_tokens(a, rewards: torch.Tensor, mask: torch.Tensor, what: str, note: str = "") -> torch.Tensor:
    """Return one advantage per completion ``a`` (B,) copied to each of its kept tokens (B, T),
    0 on the tokens past its end; a ValueError naming ``what`` (and ``note``) when ``a`` is not (B,)."""
    if getattr(a, "shape", None) != rewards.shape:
        got = tuple(getattr(a, "shape", ()))
        raise ValueError(f"{what} must be (B,) = {tuple(rewards.shape)}, got {got}" + (f" ({note})" if note else ""))
    return a[:, None] * mask  # (B, T)


def copied_to_tokens(fn, batch, rewards, reward_fn, beta, cfg) -> torch.Tensor:
    """The advantages of a group estimator: ``fn(rewards, group_size, eps)`` gives one per
    completion (B,), copied to each of its kept tokens (0 on the tokens past its end)."""
    a = fn(rewards, cfg.group_size, cfg.adv_eps)  # (B,)
    return to_tokens(a, rewards, batch.mask, "group advantages", f"estimator {cfg.advantages!r}")


_TABLE: dict[str, Estimator] = {}
_MODULES: dict[str, ModuleType] = {}


def _load() -> dict[str, Estimator]:
    if not _TABLE:
        found, modules = {}, {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            estimator = getattr(module, "ESTIMATOR", None)
            if not isinstance(estimator, Estimator):
                raise TypeError(f"{module.__name__} must define ESTIMATOR = Estimator(...)")
            if estimator.name in found:
                raise ValueError(f"two modules define the estimator {estimator.name!r}")
            found[estimator.name], modules[estimator.name] = estimator, module
        order = sorted(found, key=lambda name: (found[name].min_group, name != "batch", name))
        _TABLE.update((name, found[name]) for name in order)  # chapter 5's first
        _MODULES.update(modules)
    return _TABLE


def names() -> tuple[str, ...]:
    """Return the estimators' names, chapter 5's ``"batch"`` first."""
    return tuple(_load())


def get(name: str) -> Estimator:
    """Return the estimator called ``name``; a ValueError naming the choices for any other."""
    table = _load()
    if name not in table:
        raise ValueError(f"advantages must be one of {tuple(table)}, got {name!r}")
    return table[name]


def module_of(name: str) -> ModuleType:
    """Return the module that defines the estimator ``name``."""
    get(name)
    return _MODULES[name]


def __getattr__(attr: str):
    if attr == "ESTIMATORS":  # read from the modules on first use: they import minirlhf.ppo
        return dict(_load())
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
