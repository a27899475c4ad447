"""Supervised fine-tuning of the policy on correct sums, with the loss on completion tokens only.

We stop early on purpose. The SFT policy gets about a third of the eval sums right: good
enough that sampling finds correct answers to reinforce, bad enough that RL has room to help.
That is the *partial-SFT policy* every later chapter starts from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import task
from .model import GPTConfig, TinyGPT, completion_mask, generate, make_generator
from .progress import progress_bar

__all__ = ["SFTConfig", "masked_sft_loss", "sft_batch", "greedy_accuracy", "train_sft", "sft_learning_curve"]


@dataclass
class SFTConfig:
    """Settings of the supervised fine-tuning run (the partial-SFT policy).

    Defined in chapter 3.
    """

    steps: int = 140
    """Optimizer steps. Few on purpose: the policy must stay partial (accuracy about 1/3).
    Chapter 6's rule set it: with seed 1, the first multiple of 5 steps whose greedy accuracy
    reaches 1/3 (:func:`minirlhf.studies.robustness.partial_start`)."""
    batch_size: int = 128
    """Prompts per step, drawn with replacement from the training pairs (eval pairs excluded)."""
    lr: float = 3e-3
    """AdamW learning rate, constant."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    seed: int = 1
    """Seeds the initial weights and the batches."""
    dtype: str = "float64"
    """The network's dtype (:class:`~minirlhf.model.GPTConfig`), and so of every later run
    that starts from it: float64, so that the book prints the same digits on every CPU."""


def masked_sft_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean cross-entropy over the positions where ``mask`` is 1 (a scalar tensor).

    logits (B, T, V), targets (B, T) token ids, mask (B, T) of 0/1. Prompt positions have
    mask 0 and so give no gradient: the model is taught to answer, not to write prompts.

    Defined in chapter 3.
    """
    if logits.shape[:2] != targets.shape or targets.shape != mask.shape:
        raise ValueError(
            f"logits (B, T, V), targets and mask (B, T) must agree; got {tuple(logits.shape)}, "
            f"{tuple(targets.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.float()
    if mask.sum() == 0:
        raise ValueError("mask selects no position: there is nothing to learn from")
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(mask)  # (B, T)
    return (ce * mask).sum() / mask.sum()


def sft_batch(pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return (inputs, targets, mask), each (B, 9), for next-token training on correct sums.

    ``inputs`` is prompt + answer without its last token, ``targets`` the same shifted by
    one, and ``mask`` is 1 exactly where the target is an answer token up to its first `;`.

    Defined in chapter 3.
    """
    prompts = task.encode_prompts(pairs)  # (B, 6)
    answers = task.correct_completions(pairs)  # (B, 4)
    seq = torch.cat([prompts, answers], dim=1)  # (B, 10)
    inputs, targets = seq[:, :-1], seq[:, 1:]  # (B, 9) each
    mask = torch.zeros_like(targets, dtype=torch.float)
    mask[:, task.PROMPT_LEN - 1 :] = completion_mask(answers)  # targets 5..8 are the answer
    return inputs, targets, mask


@torch.no_grad()
def greedy_accuracy(model: TinyGPT, pairs: torch.Tensor | None = None) -> float:
    """Return the fraction of ``pairs`` (default: the 400 eval pairs) answered right, greedy.

    Defined in chapter 3.
    """
    pairs = task.eval_pairs() if pairs is None else pairs
    completions = generate(model, task.encode_prompts(pairs), greedy=True)
    return task.batch_verify(pairs, completions).double().mean().item()


def train_sft(
    config: SFTConfig | None = None,
    eval_every: int = 0,
    progress: bool = True,
    stop_at: float | None = None,
    keep=(),
) -> tuple[TinyGPT, dict]:
    """Return (policy, log): a TinyGPT trained by masked SFT, and its learning curve.

    ``log`` holds ``steps``, ``accuracy`` (greedy, eval set; every ``eval_every`` steps
    and at the end, when ``eval_every`` > 0; else only at the end) and ``loss`` per step.
    With ``stop_at``, training stops after the first evaluation (past step 0) whose accuracy
    reaches it; up to there the run is the one without it, step for step. ``keep`` (steps)
    adds ``log["kept"]``, ``{step: a copy of the model after that step}``: the weights a
    run of that many steps ends with, bit for bit, since nothing in a step depends on how
    many follow.

    Defined in chapter 3.
    """
    cfg = config or SFTConfig()
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise ValueError("config.steps and config.batch_size must be >= 1")
    torch.manual_seed(cfg.seed)  # initial weights
    model = TinyGPT(GPTConfig(dtype=cfg.dtype))
    g = make_generator(cfg.seed)  # batches
    pool = task.train_pairs()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    log = {"steps": [], "accuracy": [], "loss": []}
    if eval_every > 0:
        log["steps"].append(0)
        log["accuracy"].append(greedy_accuracy(model))
    bar = progress_bar(total=cfg.steps, desc="SFT", enabled=progress)
    for step in range(1, cfg.steps + 1):
        reached = False
        inputs, targets, mask = sft_batch(task.sample_pairs(cfg.batch_size, g, pool))
        loss = masked_sft_loss(model(inputs), targets, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log["loss"].append(loss.item())
        if step in keep:
            log.setdefault("kept", {})[step] = copy.deepcopy(model).eval()
        if (eval_every > 0 and step % eval_every == 0) or step == cfg.steps:
            model.eval()
            log["steps"].append(step)
            log["accuracy"].append(greedy_accuracy(model))
            model.train()
            reached = stop_at is not None and log["accuracy"][-1] >= stop_at
        bar.update(1)
        if reached:
            break
    bar.close()
    model.eval()
    return model, log


def sft_learning_curve(
    steps: int = 400, every: int = 10, config: SFTConfig | None = None, progress: bool = True, keep=()
) -> dict:
    """Return ``{'steps': [...], 'accuracy': [...], 'stop': int}``: greedy eval accuracy
    during an SFT run of ``steps`` steps with the book's settings, measured every ``every``.

    Training is deterministic, so the first ``config.steps`` steps of this run are exactly the
    run that made the partial-SFT policy; ``stop`` is that step count, where we stopped. With
    ``keep`` (steps), also ``'models'``: ``{step: the model after that step}``, the weights
    :func:`train_sft` makes with that many steps (see its ``keep``).

    Defined in chapter 3.
    """
    cfg = config or SFTConfig()
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    longer = SFTConfig(**{**cfg.__dict__, "steps": steps})
    _, log = train_sft(longer, eval_every=every, progress=progress, keep=keep)
    out = {"steps": log["steps"], "accuracy": log["accuracy"], "stop": cfg.steps}
    if keep:
        out["models"] = log.get("kept", {})
    return out
