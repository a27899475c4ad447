"""PPO for RLHF on the arithmetic task: one function, ``ppo_train``, for every arm of the book.

Defined in chapter 5 (``ppo_train``, ``ppo_token_loss``) and chapter 6 (``adaptive_kl_update``, ``gae``).

The arms differ in one argument, ``reward_fn``: the reward model's score, or the verifier.
One iteration does what every RLHF trainer does, at toy scale:

1. rollout: sample a completion for each of 64 training prompts at temperature 0.7;
2. score: one reward per completion, at its end (no reward on the other tokens);
3. advantages: baseline = batch mean; ``adv = clip((r - mean) / (std + 1e-4), -3, 3)``,
   the same number for every token of the completion (4 tokens at most: no critic needed);
4. the leash: per token, ``kl_t = clamp(logp_old_t - logp_ref_t, -c, c)``, computed once at
   rollout time from the policy that sampled, and subtracted from the advantage:
   ``A_t = adv - beta * kl_t``. The KL lives in the reward, as in chapters 1 and 2, and
   nowhere else: the loss has no second KL term, so the leash is never counted twice;
5. two gradient steps on the clipped surrogate over completion tokens only;
6. evaluation on the 400 fixed eval prompts (greedy): true accuracy, the reward model's
   score, the per-token KL to the reference, and where the answers went.

All log-probs (ratio and KL) are those of the distribution we sample from, the policy at
temperature 0.7, as TRL does (it divides the logits by the temperature).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch

from . import task
from .model import (
    TinyGPT, completion_logits, completion_mask, entropy_from_logits, exact_kl, generate,
    logprobs_from_logits, make_generator, reward_scores,
)
from .progress import progress_bar

__all__ = [
    "PPOConfig", "ppo_token_loss", "normalized_advantages", "adaptive_kl_update", "gae",
    "rm_reward", "verifier_reward", "evaluate", "EvalSet", "ppo_train", "TRAIN_METRICS",
]


@dataclass
class PPOConfig:
    """Settings of one PPO run. The defaults are the book's chapter 5 recipe.

    Each setting's docstring names its counterpart in TRL's PPO trainer
    (``trl/experimental/ppo/ppo_config.py``, TRL 1.9), or says there is none, so that a
    reader can later read TRL's configuration with this one as a glossary. The KL
    coefficient is ``ppo_train``'s ``beta`` argument, TRL's ``kl_coef``.

    Defined in chapter 5.
    """

    iterations: int = 25
    """Rollout-and-update rounds. TRL: ``num_total_batches``, derived from ``total_episodes``."""
    batch_size: int = 64
    """Prompts per rollout, drawn from the training pairs (never the eval pairs). TRL:
    ``batch_size``, derived from ``per_device_train_batch_size`` and the gradient accumulation."""
    temperature: float = 0.7
    """Sampling temperature; log-probs for the ratio and the KL use the same temperature.
    TRL: ``temperature`` (also 0.7)."""
    lr: float = 2e-4
    """Adam's initial learning rate. Five times larger and the noisy gradients of 64 samples
    undo more than they teach: accuracy falls after the first updates. TRL: ``learning_rate``."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run (as cleanrl's PPO does). TRL: the
    trainer's ``lr_scheduler_type``."""
    epsilon: float = 0.2
    """PPO clip range: the ratio is clipped to [1 - epsilon, 1 + epsilon]. TRL: ``cliprange``."""
    updates_per_batch: int = 2
    """Gradient steps on each rollout batch (full batch each), then resample. TRL:
    ``num_ppo_epochs``, each epoch split into ``num_mini_batches`` minibatches."""
    adv_clip: float = 3.0
    """Standardized advantages are clipped to [-adv_clip, adv_clip]. No TRL counterpart:
    TRL whitens the advantages and does not clip them."""
    adv_eps: float = 1e-4
    """Added to the batch std before dividing: a batch with equal rewards gives advantage 0.
    No TRL counterpart (its whitening adds 1e-8 to the variance)."""
    kl_clamp: float = 10.0
    """Per-token log-ratio to the reference is clamped to [-kl_clamp, kl_clamp]. No TRL
    counterpart."""
    max_grad_norm: float = 0.5
    """Gradient-norm clipping before each Adam step. TRL: the trainer's ``max_grad_norm``."""
    kl_target: float | None = None
    """Per-token KL target for the adaptive controller; None keeps beta fixed. No
    counterpart in TRL's PPO trainer, whose ``kl_coef`` is fixed."""
    kl_horizon: int = 10_000
    """Horizon of the adaptive controller, in samples (Ziegler et al. 2019). No TRL counterpart."""
    seed: int = 0
    """Seeds the prompts and the sampling of this run (the starting policy is given). TRL:
    the trainer's ``seed``."""


# ----------------------------------------------------------------------------- the pieces


def normalized_advantages(rewards: torch.Tensor, clip: float = 3.0, eps: float = 1e-4) -> torch.Tensor:
    """Return ``clip((r - mean) / (std + eps), -clip, clip)`` for a batch of rewards (B,).

    ``std`` is the population std (divide by B). With every reward equal, all advantages are 0.

    Defined in chapter 5.
    """
    if rewards.dim() != 1 or rewards.numel() < 1:
        raise ValueError(f"rewards must be a non-empty 1-D tensor, got shape {tuple(rewards.shape)}")
    if clip <= 0 or eps <= 0:
        raise ValueError(f"clip and eps must be > 0, got clip={clip}, eps={eps}")
    z = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + eps)
    return z.clamp(-clip, clip)


def ppo_token_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.1,
    kl_clamp: float = 10.0,
) -> torch.Tensor:
    """Return the PPO-RLHF loss (a scalar tensor to minimise): minus the mean over masked
    tokens of ``min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)``.

    new_logp, old_logp, ref_logp, mask: (B, T); advantages: (B,), one per completion.
    ``ratio = exp(new_logp - old_logp)``; ``kl = clamp(old_logp - ref_logp, -kl_clamp, kl_clamp)``
    is the leash, fixed at rollout time; ``A = advantages - beta * kl`` per token.

    Defined in chapter 5.
    """
    ratio = torch.exp(new_logp - old_logp)  # (B, T)
    kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)  # (B, T), a constant: no gradient
    A = advantages.unsqueeze(1) - beta * kl  # (B, T): KL-shaped advantage per token
    surrogate = torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)  # (B, T)
    return -(surrogate * mask).sum() / mask.sum()


def adaptive_kl_update(beta: float, kl: float, target: float, n_steps: int, horizon: int) -> float:
    """Return the next beta of Ziegler et al.'s controller.

    ``e = clip(kl / target - 1, -0.2, 0.2)``; ``beta * (1 + e * n_steps / horizon)``: beta
    grows when the KL runs above target and shrinks below it, by at most 20% per horizon.

    Defined in chapter 6.
    """
    if target <= 0 or horizon <= 0 or n_steps < 0 or beta < 0:
        raise ValueError(
            f"need target > 0, horizon > 0, n_steps >= 0, beta >= 0; got target={target}, "
            f"horizon={horizon}, n_steps={n_steps}, beta={beta}"
        )
    e = float(np.clip(kl / target - 1.0, -0.2, 0.2))
    return float(beta * (1.0 + e * n_steps / horizon))


def gae(rewards, values, gamma: float = 1.0, lam: float = 0.95) -> np.ndarray:
    """Return generalized advantage estimates, one per token, shape of ``rewards`` (..., T).

    ``values[..., t]`` estimates the return from token t; the episode ends after the last
    token (its next value is 0). ``delta_t = r_t + gamma * V_{t+1} - V_t`` and
    ``A_t = delta_t + gamma * lam * A_{t+1}``. With lam = 1 this is the return minus V_t;
    with lam = 0 it is the one-step TD error.

    Defined in chapter 6.
    """
    rewards = np.asarray(rewards, dtype=float)
    values = np.asarray(values, dtype=float)
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {rewards.shape} and values {values.shape} must have the same shape")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma={gamma}, lam={lam}")
    T = rewards.shape[-1]
    adv = np.zeros_like(rewards)
    next_value = np.zeros(rewards.shape[:-1])
    next_adv = np.zeros(rewards.shape[:-1])
    for t in reversed(range(T)):  # walk back from the end of the completion
        delta = rewards[..., t] + gamma * next_value - values[..., t]
        next_adv = delta + gamma * lam * next_adv
        adv[..., t] = next_adv
        next_value = values[..., t]
    return adv


# ----------------------------------------------------------------------------- rewards


def verifier_reward(pairs: torch.Tensor, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return 1.0 for each completion that states the right sum, else 0.0 (B,).

    Defined in chapter 5.
    """
    return task.batch_verify(pairs, completions)


def rm_reward(rm: TinyGPT) -> Callable:
    """Return a reward function (pairs, prompts, completions) -> (B,) scores of ``rm``.

    Defined in chapter 5.
    """

    @torch.no_grad()
    def reward(pairs, prompts, completions):
        return reward_scores(rm, prompts, completions)

    return reward


# ----------------------------------------------------------------------------- evaluation


class EvalSet:
    """The 400 fixed eval prompts, encoded once, with the reference's answers cached lazily.

    Defined in chapter 5.
    """

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
def evaluate(policy: TinyGPT, reference: TinyGPT, rm: TinyGPT | None, evalset: EvalSet | None = None,
             temperature: float = 0.7, cache: dict | None = None) -> dict:
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
    kl = (exact_kl(logits, ref_logits, temperature) * mask).sum() / mask.sum()
    correct = task.batch_verify(evalset.pairs, completions)
    kinds = task.batch_kinds(evalset.pairs, completions)
    n = len(kinds)
    return {
        "accuracy": correct.double().mean().item(),
        "rm_score": scores.double().mean().item() if scores is not None else float("nan"),
        "kl": kl.item(),
        "kinds": {k: sum(x == k for x in kinds) / n for k in task.KINDS},
    }


# ----------------------------------------------------------------------------- training

TRAIN_METRICS = {
    "objective/scores": "mean reward of the batch, before normalisation",
    "objective/kl": "mean per-token log-ratio to the reference on sampled tokens (k1), at rollout",
    "objective/entropy": "mean per-token entropy of the sampling distribution (nats)",
    "policy/clipfrac_avg": "fraction of completion tokens whose ratio was clipped, over the updates",
    "policy/approxkl_avg": "approximate KL to the rollout policy, mean((ratio - 1) - log ratio), over the updates",
    "loss/policy_avg": "PPO loss, averaged over the updates",
    "val/completion_length": "mean number of completion tokens up to and including the first `;`",
    "beta": "KL coefficient used this iteration (changes only with the adaptive controller)",
}


def ppo_train(
    policy: TinyGPT,
    reference: TinyGPT,
    reward_fn: Callable,
    beta: float,
    config: PPOConfig | None = None,
    rm: TinyGPT | None = None,
    loss_fn: Callable | None = None,
    evalset: EvalSet | None = None,
    progress: bool = True,
    callback: Callable | None = None,
    desc: str = "PPO",
) -> tuple[TinyGPT, dict]:
    """Return (trained copy of ``policy``, log). ``policy`` and ``reference`` are not changed.

    ``reward_fn(pairs, prompts, completions) -> (B,)`` scores completions: :func:`rm_reward`
    or :func:`verifier_reward`. ``rm`` (optional) is only used to log the RM's score of the
    greedy answers. ``loss_fn`` replaces :func:`ppo_token_loss` (same signature), so a
    learner's own loss can drive the run. ``callback(iteration, log)`` runs after each
    iteration. ``desc`` labels the progress bar.

    The log holds per-iteration eval lists with the start at index 0 (length iterations + 1):
    ``accuracy``, ``rm_score``, ``kl``, ``kinds`` (dict of lists); the training-batch
    metrics of :data:`TRAIN_METRICS` (length iterations); and ``config``, ``beta0``.

    Defined in chapter 5.
    """
    cfg = config or PPOConfig()
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if cfg.iterations < 0 or cfg.batch_size < 2 or cfg.updates_per_batch < 1:
        raise ValueError("config needs iterations >= 0, batch_size >= 2, updates_per_batch >= 1")
    loss_fn = loss_fn or ppo_token_loss
    evalset = evalset or EvalSet()
    policy = copy.deepcopy(policy).train().requires_grad_(True)
    reference.eval()  # read under no_grad only: it never changes
    g = make_generator(cfg.seed)
    pool = task.train_pairs()
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    T = cfg.temperature

    log = {"accuracy": [], "rm_score": [], "kl": [], "kinds": {k: [] for k in task.KINDS}}
    log.update({name: [] for name in TRAIN_METRICS})
    log["config"] = asdict(cfg)
    log["beta0"] = float(beta)

    cache = {}

    def record_eval():
        ev = evaluate(policy, reference, rm, evalset, T, cache)
        for key in ("accuracy", "rm_score", "kl"):
            log[key].append(ev[key])
        for k in task.KINDS:
            log["kinds"][k].append(ev["kinds"][k])

    record_eval()
    bar = progress_bar(total=cfg.iterations, desc=desc, enabled=progress)
    for it in range(cfg.iterations):
        # 1. rollout: one sampled completion per prompt
        pairs = task.sample_pairs(cfg.batch_size, g, pool)  # (B, 2)
        prompts = task.encode_prompts(pairs)  # (B, 6)
        completions = generate(policy, prompts, T, generator=g)  # (B, 4)
        mask = completion_mask(completions)  # (B, 4)
        with torch.no_grad():
            # Recomputed the way the update will compute them, so the first ratio is exactly 1.
            old_logits = completion_logits(policy, prompts, completions)  # (B, 4, 13)
            old_logp = logprobs_from_logits(old_logits, completions, T)  # (B, 4)
            ref_logp = logprobs_from_logits(completion_logits(reference, prompts, completions), completions, T)
            entropy = entropy_from_logits(old_logits, T)  # (B, 4)

        # 2. score: one reward per completion, at its end
        rewards = reward_fn(pairs, prompts, completions).float()  # (B,)

        # 3. advantages: batch-mean baseline, standardized, clipped; broadcast in the loss
        adv = normalized_advantages(rewards, cfg.adv_clip, cfg.adv_eps)  # (B,)

        # 4.-5. updates on this batch; the KL leash enters the loss through A_t
        for group in opt.param_groups:
            group["lr"] = cfg.lr * (1.0 - it / cfg.iterations if cfg.anneal_lr else 1.0)
        clipfracs, approxkls, losses = [], [], []
        for _ in range(cfg.updates_per_batch):
            new_logp = logprobs_from_logits(completion_logits(policy, prompts, completions), completions, T)
            loss = loss_fn(new_logp, old_logp, ref_logp, adv, mask, cfg.epsilon, beta, cfg.kl_clamp)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            opt.step()
            with torch.no_grad():
                log_ratio = new_logp - old_logp
                ratio = log_ratio.exp()
                clipped = ((ratio - 1).abs() > cfg.epsilon).float()
                clipfracs.append(((clipped * mask).sum() / mask.sum()).item())
                approxkls.append(((((ratio - 1) - log_ratio) * mask).sum() / mask.sum()).item())
                losses.append(loss.item())

        # 6. log the batch, then evaluate on the fixed eval prompts
        n_tok = mask.sum()
        kl_batch = (((old_logp - ref_logp) * mask).sum() / n_tok).item()
        log["objective/scores"].append(rewards.double().mean().item())
        log["objective/kl"].append(kl_batch)
        log["objective/entropy"].append(((entropy * mask).sum() / n_tok).item())
        log["policy/clipfrac_avg"].append(float(np.mean(clipfracs)))
        log["policy/approxkl_avg"].append(float(np.mean(approxkls)))
        log["loss/policy_avg"].append(float(np.mean(losses)))
        log["val/completion_length"].append(mask.sum(1).double().mean().item())
        log["beta"].append(float(beta))
        policy.eval()
        record_eval()
        policy.train()

        # 7. the adaptive leash, when asked: move beta toward the KL target
        if cfg.kl_target is not None:
            beta = adaptive_kl_update(beta, kl_batch, cfg.kl_target, cfg.batch_size, cfg.kl_horizon)

        bar.update(1)
        bar.set_postfix_str(f"acc {log['accuracy'][-1]:.3f} kl {log['kl'][-1]:.3f}")
        if callback is not None:
            callback(it + 1, log)
    bar.close()
    policy.eval()
    return policy, log
