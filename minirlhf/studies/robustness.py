"""Is chapter 5's result robust? Other partial-SFT starts, and the prompt's share of a reward (ch. 6).

The book's partial-SFT policy is one SFT run, stopped early. :func:`partial_start` makes
others the same way, one per SFT seed: train with that seed, measure the greedy accuracy
every few steps, and stop at the first measurement that reaches the target (a third of
the eval sums right). Each start is stored like the book's models (:mod:`minirlhf.store`),
so a chapter that has made it once reads it back.

:func:`prompt_share` splits the variance of a reward over a batch with several completions
per prompt into what depends only on the prompt and what depends on the answer (the reference
solution of exercise 6.1)::

    rewards (N,): group_size completions of each of N / group_size prompts, side by side
    share = 1 - mean over prompts of the within-prompt variance / the variance of all N
"""

from __future__ import annotations

import sys

import torch

from .. import sft, store
from ..model import TinyGPT

__all__ = ["first_reaching", "partial_start", "partial_starts", "gain", "prompt_share"]


def first_reaching(steps, accuracy, target: float) -> int:
    """Return the first step (> 0) of a learning curve whose accuracy is at least ``target``.

    Step 0, the untrained network, never counts. Raises ValueError when no step reaches it.
    """
    for step, acc in zip(steps, accuracy):
        if step > 0 and acc >= target:
            return int(step)
    raise ValueError(f"no step of the curve (up to {max(steps)}) reaches accuracy {target:g}")


def partial_start(
    seed: int, target: float = 1 / 3, every: int = 5, max_steps: int = 300, progress: bool = True
) -> tuple[TinyGPT, dict]:
    """Return (policy, metrics): a partial-SFT policy made with SFT seed ``seed`` and the
    book's other SFT settings, stopped at the first multiple of ``every`` steps whose greedy
    eval accuracy reaches ``target``; ``metrics`` holds ``steps`` and ``accuracy``.

    Stored in the models' folder as ``partial_sft-seed{seed}.pt`` and read back while the
    settings and the code are the same.
    """
    settings = {
        "seed": seed,
        "target": target,
        "every": every,
        "max_steps": max_steps,
        "code": store.code_fingerprint(sys.modules[__name__]),
    }

    def train():
        # Stopped at the first measurement that reaches the target: SFT is deterministic at a
        # constant learning rate, so this is the model that a run of that many steps makes.
        model, curve = sft.train_sft(
            sft.SFTConfig(seed=seed, steps=max_steps), eval_every=every, progress=progress, stop_at=target
        )
        steps = first_reaching(curve["steps"], curve["accuracy"], target)
        return model, {"steps": steps, "accuracy": sft.greedy_accuracy(model)}

    return store.load_or_train(f"partial_sft-seed{seed}", settings, train, progress=progress)


def partial_starts(
    seeds,
    target: float = 1 / 3,
    every: int = 5,
    max_steps: int = 300,
    progress: bool = True,
    workers: int | None = None,
) -> dict:
    """Return ``{seed: (policy, metrics)}``, :func:`partial_start` of each SFT seed in ``seeds``,
    the starts not stored yet trained by ``workers`` worker processes (None: one per core;
    :func:`minirlhf.parallel.map_runs`)."""
    from functools import partial

    from ..parallel import map_runs

    seeds = list(seeds)
    made = map_runs(
        partial(partial_start, target=target, every=every, max_steps=max_steps, progress=progress),
        seeds,
        workers,
        progress=progress,
        desc="partial-SFT starts",
        label=lambda s: f"SFT seed {s}",
    )
    return dict(zip(seeds, made))


def gain(log: dict) -> float:
    """Return a run's true accuracy at the end minus at the start."""
    return log["accuracy"][-1] - log["accuracy"][0]


def prompt_share(rewards, group_size: int) -> float:
    """Return the share of the variance of ``rewards`` that the prompt alone explains, a
    Python float: 1 - (mean within-prompt variance) / (variance over all N rewards).

    ``rewards`` (N,) holds ``group_size`` completions of each prompt, a prompt's completions
    side by side (as ``repeat_interleave`` lays them out). Both variances divide by their
    count (no Bessel correction), so that the total is the between-prompt variance plus the
    mean within-prompt variance. 1 when every completion of a prompt scores the same; 0 when
    every prompt has the same mean, and 0 when all rewards are equal (there is no variance,
    so none of it is the prompt's). Raises ValueError when ``rewards`` is not 1-D or is
    empty, when ``group_size`` is below 2, or when it does not divide N.
    """
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.ndim != 1 or len(r) == 0:
        raise ValueError(f"rewards must be a non-empty 1-D tensor (N,), got shape {tuple(r.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (completions per prompt), got {group_size}")
    if len(r) % group_size:
        raise ValueError(f"group_size {group_size} does not divide the {len(r)} rewards")
    if bool((r == r[0]).all()):  # exactly: a variance of equal floats can come out 1e-34
        return 0.0
    groups = r.view(-1, group_size)  # (P, group_size): one row per prompt
    within = groups.var(1, unbiased=False).mean()  # (P,) -> mean over prompts
    total = r.var(unbiased=False)
    return float(1 - within / total)
