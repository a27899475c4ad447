"""The places of the KL leash as one table: :func:`get` maps each name that
``PPOConfig.kl_placement`` accepts to a :class:`Leash`, and everything that depends on where the
leash acts reads it from there: the config's checks, the estimator's share of the leash and the
loss the update minimises.

Each module of this package defines one leash, ``LEASH = Leash(...)``, with its loss function
(the function that ``ppo_train``'s ``loss_fn`` replaces) beside it; modules whose names start
with ``_`` hold shared helpers. The table is read from the modules found here when it is first
needed (:class:`minirlhf.registry.ModuleTable`), so adding a leash is adding one module, and a
stored run is keyed on the code of the leash it uses, not on the others
(``minirlhf.course.runs``). ``MAINTAINING.md`` gives the recipe.

The contract of a leash's loss: it takes the keyword-free arguments its ``signature`` names,
each a (B, T) tensor or a number from the config, and returns a scalar tensor to minimise.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from ..registry import ModuleTable

__all__ = ["Leash", "get", "names", "module_of"]


@dataclass(frozen=True)
class Leash:
    """Where the KL leash acts, and so which loss the update minimises.

    ``fn`` is the loss that ``ppo_train``'s ``loss_fn`` replaces, called with the arguments
    ``signature`` names; ``apply(fn, new_logp, batch, adv, beta, cfg)`` is how the update
    calls it on a :class:`~minirlhf.ppo.Rollout` ``batch``. ``in_reward``: the leash is a
    per-token reward, carried by the advantages (only an estimator that can carry it runs
    with it); otherwise it is a term of the loss and the advantages come from the score alone.
    """

    name: str
    module: str  # the module that holds the loss (the leash's own)
    fn_name: str  # the loss's name there, looked up at each call (chapter 10 plants copies)
    apply: Callable  # (fn, new_logp, batch, adv, beta, cfg) -> scalar loss
    signature: tuple  # the loss's parameters, in order: what a replacing loss_fn takes
    help: str  # one line: what the leash is, and whose it is
    in_reward: bool = False

    @property
    def fn(self) -> Callable:
        """The loss, looked up in its module now (so a planted copy is the one called)."""
        return getattr(importlib.import_module(self.module), self.fn_name)


_TABLE = ModuleTable(__name__, "LEASH", Leash, "kl_placement", order=lambda leash: (not leash.in_reward, leash.name))
names, get, module_of = _TABLE.names, _TABLE.get, _TABLE.module_of
