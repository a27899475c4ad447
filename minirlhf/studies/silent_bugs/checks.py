"""Checks before training: a few forward and backward passes that catch every planted bug.

Each check reads the engine's functions through their modules at call time, so under
:func:`~minirlhf.studies.silent_bugs.copies.planted` it checks the buggy one, and none needs a
training run. :data:`CHECKS` holds them by name and :func:`run_checks` runs them all, on the
engine or with one bug planted.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from ... import dpo, ppo, task
from ...leashes import loss as leash_loss
from ...model import completion_logits, exact_kl, generate, make_generator
from .copies import Bug, planted

__all__ = [
    "CHECKS",
    "run_checks",
    "check_mask",
    "check_logprobs",
    "check_ratio",
    "check_leash_gradient",
    "check_dpo_gradient",
]


def _sample(policy, n: int = 64, seed: int = 0, temperature: float = 0.7):
    g = make_generator(seed)
    pairs = task.sample_pairs(n, g)
    prompts = task.encode_prompts(pairs)
    return pairs, prompts, generate(policy, prompts, temperature, generator=g)


def _nudged(policy, scale: float = 0.3, seed: int = 1):
    # A copy of the policy moved a little away from it (its head's weights), standing in for the
    # policy after a few updates, so that policy and reference differ.
    moved = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        moved.head.weight.add_(scale * torch.randn(moved.head.weight.shape, generator=g, dtype=moved.head.weight.dtype))
    return moved


def check_mask(policy, temperature: float = 0.7) -> tuple[bool, str]:
    """The completion mask keeps each answer up to and including its first `;`, judged from the
    text. Returns (passed, four answers with the masked tokens shown as `.`)."""
    _, _, completions = _sample(policy, temperature=temperature)
    mask = ppo.completion_mask(completions)
    shown, ok = [], True
    for row, keep in zip(completions.tolist(), mask.tolist()):
        text = task.decode(row)
        end = text.find(";")
        want = [1.0] * (len(text) if end < 0 else end + 1) + [0.0] * (len(text) - (len(text) if end < 0 else end + 1))
        ok &= keep == want
        if len(shown) < 4:
            shown.append("".join(ch if k else "." for ch, k in zip(text, keep)))
    return ok, "  ".join(f"{task.decode(r)} -> {s}" for r, s in zip(completions[:4].tolist(), shown))


def check_logprobs(policy, temperature: float = 0.7) -> tuple[bool, str]:
    """The log-probs the loss uses are those of the distribution the tokens were sampled from
    (softmax of the logits over the temperature)."""
    _, prompts, completions = _sample(policy, temperature=temperature)
    with torch.no_grad():
        logits = completion_logits(policy, prompts, completions)
        used = ppo.logprobs_from_logits(logits, completions, temperature)
        sampler = torch.log_softmax(logits / temperature, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    gap = (used - sampler).abs().max().item()
    return gap < 1e-5, f"largest gap to the sampler's log-probs: {gap:.3g} nats"


def check_ratio(policy, temperature: float = 0.7) -> tuple[bool, str]:
    """On the first update of a batch, before any step, the ratio is exactly 1, even when the
    policy has moved from the reference: the clipped loss equals minus the mean advantage."""
    reference, moved = policy, _nudged(policy)
    _, prompts, completions = _sample(moved, temperature=temperature)
    mask = ppo.completion_mask(completions)
    with torch.no_grad():
        old = ppo.logprobs_from_logits(completion_logits(moved, prompts, completions), completions, temperature)
        ref = ppo.logprobs_from_logits(completion_logits(reference, prompts, completions), completions, temperature)
    adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2), dtype=old.dtype) * mask
    loss = leash_loss.grpo_token_loss(old, old, ref, adv, mask, 0.2, 0.0).item()
    want = -((adv * mask).sum() / mask.sum()).item()
    return abs(loss - want) < 1e-6, f"loss {loss:+.4f}, minus the mean advantage {want:+.4f}"


def check_leash_gradient(policy, temperature: float = 0.7) -> tuple[bool, str]:
    """The leash term's expected gradient is the gradient of the exact KL: cosine above 0.99,
    and a size within a factor 2.

    No sampling noise: every one of the 13 first tokens of each of 64 prompts is given to the
    leash term, weighted by its probability under the policy (as the mask's weight), so the
    term is its own expectation. A k3 loss term, differentiated through the policy's log-probs
    only, then has the gradient of KL(reference || policy) exactly, which is the KL compared
    (summed over the vocabulary at the first answer position). The policy is first moved a
    little from the reference."""
    reference, moved = policy, _nudged(policy)
    _, prompts, _ = _sample(moved, temperature=temperature)
    V = len(task.VOCAB)
    prompts = prompts.repeat_interleave(V, dim=0)  # (64 * 13, 6): each prompt with every first token
    completions = torch.full((len(prompts), task.COMPLETION_LEN), task.SEMI)
    completions[:, 0] = torch.arange(V).repeat(len(prompts) // V)
    with torch.no_grad():
        ref_logits = completion_logits(reference, prompts, completions)
        ref = torch.log_softmax(ref_logits / temperature, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        probs = torch.softmax(completion_logits(moved, prompts, completions)[:, 0] / temperature, -1)
    weight = torch.zeros(completions.shape, dtype=probs.dtype)
    weight[:, 0] = probs.gather(-1, completions[:, :1]).squeeze(-1)  # pi(first token)

    def grad(loss_of):
        moved.zero_grad(set_to_none=True)
        loss = loss_of()
        if not loss.requires_grad:  # the term reaches no weight: no gradient at all
            return torch.zeros(moved.head.weight.numel(), dtype=moved.head.weight.dtype)
        loss.backward()
        return moved.head.weight.grad.flatten().clone()

    def leash():
        new = ppo.logprobs_from_logits(completion_logits(moved, prompts, completions), completions, temperature)
        return leash_loss.k3_loss_term(new, ref, weight)

    def exact():
        logits = completion_logits(moved, prompts[::V], completions[::V])[:, 0]
        return exact_kl(ref_logits[::V, 0], logits, temperature).mean()

    a, b = grad(leash), grad(exact)
    if a.norm() == 0:
        return False, "the leash term has no gradient"
    cosine = (a @ b / (a.norm() * b.norm())).item()
    size = (a.norm() / b.norm()).item()
    return (
        cosine > 0.99 and 0.5 < size < 2.0,
        f"cosine with the exact KL's gradient {cosine:+.3f}, size {size:.3g} times its size",
    )


def check_dpo_gradient() -> tuple[bool, str]:
    """At the start (policy = reference), DPO's loss is log 2, and its gradient raises the
    chosen answer's log-prob and lowers the rejected one's."""
    logps = torch.tensor([-3.0, -5.0], requires_grad=True)  # chosen, rejected
    loss = dpo.dpo_loss(logps[:1], logps[1:], logps[:1].detach(), logps[1:].detach(), 1.0)
    loss.backward()
    down_chosen, down_rejected = logps.grad.tolist()  # a step goes against the gradient
    ok = abs(loss.item() - float(np.log(2))) < 1e-6 and down_chosen < 0 < down_rejected
    return (
        ok,
        f"loss {loss.item():.4f} (log 2 = 0.6931); d loss / d chosen {down_chosen:+.3f}, "
        f"d loss / d rejected {down_rejected:+.3f}",
    )


CHECKS = {
    "mask": check_mask,
    "log-probs": check_logprobs,
    "ratio": check_ratio,
    "leash gradient": check_leash_gradient,
    "DPO gradient": lambda policy: check_dpo_gradient(),
}
"""The checks before training, by name: each takes the starting policy, returns (passed, what it saw)."""


def run_checks(policy, bug: Bug | None = None) -> dict:
    """Return {check: (passed, what it saw)} for the engine, or with ``bug`` planted."""
    if bug is None:
        return {name: check(policy) for name, check in CHECKS.items()}
    with planted(bug):
        return {name: check(policy) for name, check in CHECKS.items()}
