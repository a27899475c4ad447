"""The planted bugs: engine functions copied with one line changed, and how a run gets one.

Each copy is the engine's function of the same name, copied whole with one line changed, the
way such bugs are shipped: a KL term that carries no gradient, k1 used as a loss, a completion
mask that is missing or that treats the end mark as padding, a ratio taken against the
reference, sampling temperature left out of the log-probs, DPO's rejected log-ratio the wrong
way round. :data:`BUGS` names each one (a :class:`Bug`): the modules the engine looks its
function up in and the arm it spoils. The leash and clip bugs are planted in chapter 8's GRPO
arm rewarded by the reward model, whose leash binds (with beta 0 its KL is several times that of
its beta); the mask and temperature bugs in chapter 5's verifier arm, DPO's in chapter 9's.

:func:`planted` swaps the copy in, in every one of those modules, for the length of a run and
puts the engine's function back after, so a buggy run is the engine's own ``ppo_train`` (or
``train_dpo``) with that one function replaced. :func:`one_line_diff` shows that the copy
differs from the engine's function by exactly that line; a test checks it for every bug.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ...task import SEMI

__all__ = [
    "k3_loss_term_no_grad",
    "k3_loss_term_k1",
    "completion_mask_missing",
    "completion_mask_pad_is_end",
    "grpo_token_loss_ratio_to_reference",
    "logprobs_from_logits_no_temperature",
    "dpo_loss_rejected_flipped",
    "Bug",
    "BUGS",
    "planted",
    "one_line_diff",
]


# ----------------------------------------------------------------------------- the copies
# Each is the engine's function of the same name (its modules are named in BUGS), copied
# whole, with one line changed. Docstrings, comments and local imports are left out of the
# comparison; so an unused name that the changed line no longer reads is kept, as in the engine.


def k3_loss_term_no_grad(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    d = (ref_logp - new_logp.detach()).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()


def k3_loss_term_k1(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)  # noqa: F841
    return ((new_logp - ref_logp) * mask).sum() / mask.sum()


def completion_mask_missing(completions: torch.Tensor) -> torch.Tensor:
    is_end = (completions == SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end
    return torch.ones_like(ends_before).float()


def completion_mask_pad_is_end(completions: torch.Tensor) -> torch.Tensor:
    is_end = (completions == SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end  # noqa: F841
    return (completions != SEMI).float()


def grpo_token_loss_ratio_to_reference(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    kl_clamp: float = 10.0,
) -> torch.Tensor:
    # the two terms as the engine's function reaches them: by their names in its module, now
    from ...leashes.loss import k3_loss_term, ppo_token_loss

    return ppo_token_loss(new_logp, ref_logp, advantages, mask, epsilon) + beta * k3_loss_term(
        new_logp, ref_logp, mask, kl_clamp
    )


def logprobs_from_logits_no_temperature(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def dpo_loss_rejected_flipped(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    named = {
        "policy_chosen_logps": policy_chosen_logps,
        "policy_rejected_logps": policy_rejected_logps,
        "ref_chosen_logps": ref_chosen_logps,
        "ref_rejected_logps": ref_rejected_logps,
    }
    for name, x in named.items():
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.numel() < 1:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a non-empty 1-D tensor (B,) of sequence log-probs, got {shape}")
        if x.shape != policy_chosen_logps.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)}, policy_chosen_logps "
                f"{tuple(policy_chosen_logps.shape)}: one number per pair in each"
            )
    if not (isinstance(beta, (int, float)) and beta > 0):
        raise ValueError(f"beta must be a number > 0, got {beta!r}")
    chosen_logratios = policy_chosen_logps - ref_chosen_logps
    rejected_logratios = ref_rejected_logps - policy_rejected_logps
    return -F.logsigmoid(beta * (chosen_logratios - rejected_logratios)).mean()


# ----------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Bug:
    """One planted bug: the engine function it replaces and the run it spoils. Which panels
    tell its run from the correct one is not a property of the bug: it is measured on the runs
    (:func:`~minirlhf.studies.silent_bugs.separating`).

    ``modules`` are every module whose code looks the function up by its name at run time (a
    single name is taken as one module); the first is the one that shows it. The completion
    mask, say, is looked up by the update in :mod:`minirlhf.ppo` and by the measurement after
    each iteration in :mod:`minirlhf.evaluation`, and a missing mask spoils both.
    """

    title: str  # a few words
    what: str  # one sentence: what the line does wrong
    modules: tuple  # where the engine's function is looked up at run time; the first shows it
    name: str  # the engine function's name
    copy: Callable  # the copy with one line changed
    arm: str  # the arm of minirlhf.arms.REGISTRY it is planted in

    def __post_init__(self):
        modules = (self.modules,) if isinstance(self.modules, str) else tuple(self.modules)
        if not modules or not all(isinstance(m, str) and m for m in modules):
            raise ValueError(f"modules must name one module or more, got {self.modules!r}")
        object.__setattr__(self, "modules", modules)

    @property
    def module(self) -> str:
        """The module that shows the engine's function: the first of :attr:`modules`."""
        return self.modules[0]


_MASK_MODULES = ("minirlhf.ppo", "minirlhf.evaluation")  # the update's mask and the measurement's

BUGS = {
    "kl-no-grad": Bug(
        "the KL term carries no gradient",
        "the policy's log-probs are detached inside GRPO's k3 "
        "term, as if it were computed under no_grad: the loss shows the leash, the gradient never feels it",
        ("minirlhf.leashes.loss",),
        "k3_loss_term",
        k3_loss_term_no_grad,
        "grpo-rm",
    ),
    "k1-loss": Bug(
        "k1 as the loss term",
        "GRPO's leash is the mean of k1 = log pi - log ref over sampled tokens; "
        "over the policy's own samples its expected gradient is zero, so the leash pulls nowhere on "
        "average, and over an older policy's samples it pushes away from that policy",
        ("minirlhf.leashes.loss",),
        "k3_loss_term",
        k3_loss_term_k1,
        "grpo-rm",
    ),
    "no-mask": Bug(
        "the completion mask is missing",
        "every one of the 4 tokens is trained and counted, also those after the answer's end mark",
        _MASK_MODULES,
        "completion_mask",
        completion_mask_missing,
        "verifier",
    ),
    "pad-is-end": Bug(
        "the end mark is taken for padding",
        "the mask is `token != pad` with pad equal to the end mark `;`: "
        "the end mark itself is never trained, and tokens after it are",
        _MASK_MODULES,
        "completion_mask",
        completion_mask_pad_is_end,
        "verifier",
    ),
    "ratio-to-reference": Bug(
        "the ratio is taken against the reference",
        "the clipped ratio compares the policy with the frozen "
        "reference instead of the policy that sampled the batch, so the clip stops every token that has "
        "moved 20% from the start",
        ("minirlhf.leashes.loss",),
        "grpo_token_loss",
        grpo_token_loss_ratio_to_reference,
        "grpo-rm",
    ),
    "no-temperature": Bug(
        "the log-probs leave out the temperature",
        "completions are sampled at temperature 0.7, but the "
        "ratio, the leash and the logged KL use log-probs at temperature 1",
        ("minirlhf.ppo",),
        "logprobs_from_logits",
        logprobs_from_logits_no_temperature,
        "verifier",
    ),
    "dpo-rejected-flipped": Bug(
        "DPO's rejected log-ratio is the wrong way round",
        "ref - policy instead of policy - ref for the "
        "rejected answer: the loss now rewards raising the rejected answer too",
        ("minirlhf.dpo",),
        "dpo_loss",
        dpo_loss_rejected_flipped,
        "dpo",
    ),
}


@contextmanager
def planted(bug: Bug):
    """Within the ``with`` block, the engine looks up ``bug.copy`` in place of its own function,
    in each of ``bug.modules``; after it, each module has its own function back."""
    modules = [importlib.import_module(name) for name in bug.modules]
    originals = [getattr(module, bug.name) for module in modules]
    try:
        for module in modules:
            setattr(module, bug.name, bug.copy)
        yield
    finally:
        for module, original in zip(modules, originals):
            setattr(module, bug.name, original)


def _code_lines(fn) -> list[str]:
    # The function's code without its name, docstring and comments, one statement a line.
    tree = ast.parse(inspect.getsource(fn).strip())
    func = tree.body[0]
    func.name = "f"
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        func.body = body[1:]
    # a local import in the copy (to reach a name the engine's module has) is not a change
    func.body = [n for n in func.body if not isinstance(n, ast.ImportFrom)]
    return ast.unparse(func).splitlines()


def one_line_diff(bug: Bug) -> tuple[str, str]:
    """Return (the engine's line, the copy's line): the one line in which they differ, the
    engine's function read from the first of ``bug.modules``.

    Raises ValueError when they differ in more or fewer lines than one."""
    engine = getattr(importlib.import_module(bug.module), bug.name)
    a, b = _code_lines(engine), _code_lines(bug.copy)
    diff = [d for d in difflib.ndiff(a, b) if d[:1] in "+-"]
    removed = [d[2:] for d in diff if d.startswith("-")]
    added = [d[2:] for d in diff if d.startswith("+")]
    if len(removed) != 1 or len(added) != 1:
        raise ValueError(f"{bug.name}: the copy differs in {len(removed)} line(s) removed and {len(added)} added")
    return removed[0].strip(), added[0].strip()
