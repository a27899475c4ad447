"""The measurement every run of the book shares: the greedy answers to the 400 fixed eval prompts,
their accuracy, the reward model's score and the exact per-token KL to the reference.

:func:`evaluate` is what ``ppo_train`` calls after each iteration, ``train_dpo`` every
``eval_every`` steps and the TRL bridge after TRL's trainers, so that every arm of the book is
judged by the same numbers. :class:`EvalSet` holds the prompts, encoded once.
"""

from __future__ import annotations

import torch

from . import task
from .model import TinyGPT, completion_logits, completion_mask, exact_kl, generate, reward_scores

__all__ = ["EvalSet", "evaluate"]


class EvalSet:
    """The 400 fixed eval prompts, encoded once, with the reference's answers cached lazily."""

    def __init__(self, pairs: torch.Tensor | None = None):
        self.pairs = task.eval_pairs() if pairs is None else pairs  # (N, 2)
        self.prompts = task.encode_prompts(self.pairs)  # (N, 6)


def _frozen_outputs(reference, rm, prompts, completions, cache: dict | None):
    # The reference and the RM never change during a run, and from one iteration to the next
    # only a few greedy answers do: recompute their outputs for the changed rows only.
    if cache is None or "completions" not in cache:
        ref_logits = completion_logits(reference, prompts, completions)
        scores = reward_scores(rm, prompts, completions) if rm is not None else None
    else:
        ref_logits, scores = cache["ref_logits"].clone(), cache["scores"]
        changed = (completions != cache["completions"]).any(1)  # (N,)
        if changed.any():
            ref_logits[changed] = completion_logits(reference, prompts[changed], completions[changed])
            if scores is not None:
                scores = scores.clone()
                scores[changed] = reward_scores(rm, prompts[changed], completions[changed])
    if cache is not None:
        cache.update(completions=completions, ref_logits=ref_logits, scores=scores)
    return ref_logits, scores


@torch.no_grad()
def evaluate(
    policy: TinyGPT,
    reference: TinyGPT,
    rm: TinyGPT | None,
    evalset: EvalSet | None = None,
    temperature: float = 0.7,
    cache: dict | None = None,
) -> dict:
    """Return the greedy answers' numbers on the eval set (default: the 400 eval prompts).

    ``{'accuracy', 'rm_score' (NaN without rm), 'kl', 'kinds': {kind: fraction}}``. ``kl`` is
    the exact KL(policy || reference) at ``temperature``, summed over the vocabulary at each
    completion position of the greedy answer, averaged over those tokens: per token, and
    deterministic (no sampling noise). ``cache`` (a dict kept across calls with the same
    reference and rm) saves recomputing their outputs for answers that did not change.

    Defined in chapter 5.
    """
    evalset = evalset or EvalSet()
    completions, logits = generate(policy, evalset.prompts, greedy=True, return_logits=True)  # (N, 4), (N, 4, 13)
    mask = completion_mask(completions)  # (N, 4)
    ref_logits, scores = _frozen_outputs(reference, rm, evalset.prompts, completions, cache)
    # The exact KL is never negative; where policy and reference agree (the start of every run)
    # rounding leaves about 1e-18 of either sign, and the sign depends on the CPU's kernels.
    kl = (exact_kl(logits, ref_logits, temperature).clamp(min=0) * mask).sum() / mask.sum()
    correct = task.batch_verify(evalset.pairs, completions)
    kinds = task.batch_kinds(evalset.pairs, completions)
    n = len(kinds)
    return {
        "accuracy": correct.double().mean().item(),
        "rm_score": scores.double().mean().item() if scores is not None else float("nan"),
        "kl": kl.item(),
        "kinds": {k: sum(x == k for x in kinds) / n for k in task.KINDS},
    }
