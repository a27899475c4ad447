"""PPO for RLHF on the arithmetic task: one function, ``ppo_train``, for every arm of the book.

Defined in chapter 5 (``ppo_train`` and its stages) and chapter 7 (``adaptive_kl_update``,
``gae``). The pieces that vary live in two tables, one module per entry: the advantage
estimators (:mod:`minirlhf.estimators`: chapter 5's ``kl_shaped_advantages`` in ``batch``,
chapter 8's ``group_advantages`` in ``group``, ...) and the places of the leash
(:mod:`minirlhf.leashes`: chapter 5's ``ppo_token_loss`` in ``reward``, chapter 8's
``grpo_token_loss`` and ``k3_loss_term`` in ``loss``). The measurement after each iteration is
:func:`minirlhf.evaluation.evaluate`.

Chapter 5's arms differ in one argument, ``reward_fn``: the reward model's score, or the
verifier. GRPO (Shao et al. 2024) differs from them in three settings of :class:`PPOConfig`
and nothing else: ``group_size`` (G completions of each prompt), ``advantages="group"``
(``group_advantages``) and ``kl_placement="loss"`` (``grpo_token_loss``: the clipped
surrogate plus ``beta`` times ``k3_loss_term``).
One iteration of chapter 5's recipe does what every RLHF trainer does, at toy scale:

1. rollout: sample a completion for each of 64 training prompts at temperature 0.7 (with
   ``group_size`` G > 1: G completions of each of 64 / G prompts, side by side);
2. score: one number per completion, standardized over the batch,
   ``z = clip((s - mean) / (std + 1e-4), -3, 3)`` (a per-batch stand-in for the reward
   normalization of Ziegler et al. 2019);
3. the leash, in the reward (InstructGPT; TRL's PPO trainer): per token,
   ``kl_t = clamp(logp_old_t - logp_ref_t, -c, c)``, computed once at rollout time from the
   policy that sampled; the per-token reward is ``-beta * kl_t``, plus ``z`` at the last
   token of the completion;
4. advantages: the return-to-go ``G_t`` (the sum of the rewards from token t to the end, no
   discount), minus a baseline per position: the batch mean of ``G_t`` over the completions
   that reach position t. There is no critic: this is clipped policy gradient with a batch
   baseline, closer to REINFORCE with a baseline, RLOO and GRPO than to InstructGPT's PPO.
   A token pays for its own divergence and for the divergence of the tokens it leads to;
5. two gradient steps on the clipped surrogate over completion tokens only. The loss has no
   KL term, so the leash is never counted twice. (``kl_placement="loss"`` moves the leash
   out of the reward into a ``beta * mean_t k3_t`` loss term instead, GRPO's placement);
6. evaluation on the 400 fixed eval prompts (greedy): true accuracy, the reward model's
   score, the per-token KL to the reference, and where the answers went.

All log-probs (ratio and KL) are those of the distribution we sample from, the policy at
temperature 0.7, as TRL does (it divides the logits by the temperature).

GRPO here against TRL's ``GRPOTrainer`` (``trl/trainer/grpo_trainer.py`` and
``grpo_config.py``, commit f2cd577): the group advantages and the logged
``frac_reward_zero_std`` follow it (``group_advantages``). Its ``per_token_kl`` is the same
k3 with the same sign, added as ``beta * per_token_kl`` to each token's loss, with
``use_bias_correction_kl`` off, the default at that commit. Release 1.12.0 turns that flag on by
default (``grpo_config.py``, lines 357-363 and 965-973): k3 is then multiplied by the ratio
new/old (``grpo_trainer.py``, lines 3193-3194), the correction of the DeepSeek-V3.2 report, and
its gradient becomes that of the reverse KL, KL(pi || ref). k3 differentiated as it is, here
and in TRL with the flag off, follows the gradient of the forward KL, KL(ref || pi);
``minirlhf.trl`` sets the flag off to compare like for like. The loss here is averaged over
every kept token of the batch, as TRL's default ``loss_type="dapo"`` (and ``"bnpo"``) on one
process, not per completion first as in the paper's equation (TRL's ``"grpo"``). Differences
kept from chapter 5's recipe: two gradient steps per batch (TRL's ``num_iterations`` defaults to
1), gradient-norm clipping at 0.5, a linearly annealed learning rate, and a clamp of the
log-ratio inside k3. TRL's default ``beta`` is 0.0 (no reference model at all); DeepSeekMath
used 0.04.

Each stage is a short public function that ``ppo_train`` calls in turn and chapter 5 shows:
:func:`rollout` (1), :func:`score_and_advantages` (2-4), :func:`ppo_update` (5),
:func:`batch_metrics` and :func:`evaluate` (6).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from . import estimators, leashes, task
from .estimators._groups import same_groups
from .evaluation import EvalSet, evaluate
from .model import (
    TinyGPT,
    completion_logits,
    completion_mask,
    entropy_from_logits,
    generate,
    logprobs_from_logits,
    make_generator,
    reward_scores,
)
from .progress import progress_bar

__all__ = [
    "PPOConfig",
    "check_token_shapes",
    "adaptive_kl_update",
    "gae",
    "rm_reward",
    "verifier_reward",
    "ppo_train",
    "check_replacements",
    "TRAIN_METRICS",
    "GROUP_METRICS",
    "Rollout",
    "rollout",
    "score_and_advantages",
    "ppo_update",
    "batch_metrics",
]


@dataclass
class PPOConfig:
    """Settings of one PPO run. The defaults are the book's chapter 5 recipe.

    Each setting's docstring names its counterpart in TRL's PPO trainer
    (``trl/experimental/ppo/ppo_config.py`` and ``ppo_trainer.py``, read at TRL's commit
    f2cd577 of July 2026; the trainer ships up to TRL 1.12.0), or says there is none, so that a
    reader can later read TRL's configuration with this one as a glossary. The KL
    coefficient is ``ppo_train``'s ``beta`` argument, TRL's ``kl_coef``.

    Defined in chapter 5.
    """

    iterations: int = 25
    """Rollout-and-update rounds. TRL: ``num_total_batches``, derived from ``total_episodes``."""
    batch_size: int = 64
    """Completions per rollout: ``batch_size // group_size`` prompts drawn from the training
    pairs (never the eval pairs), ``group_size`` completions of each (one, in chapter 5). TRL:
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
    """Standardized scores are clipped to [-adv_clip, adv_clip] (the batch estimator only).
    No TRL counterpart: TRL uses the raw score (and whitens the advantages afterwards,
    without a clip); its GRPO trainer does not clip either."""
    adv_eps: float = 1e-4
    """Added to the std of the scores (the batch's, or each group's) before dividing: equal
    scores give 0. No counterpart in TRL's PPO trainer (it does not standardize the score);
    ``GRPOTrainer`` adds the same 1e-4 to each group's std."""
    kl_clamp: float = 10.0
    """Per-token log-ratio to the reference is clamped to [-kl_clamp, kl_clamp]. No TRL
    counterpart."""
    max_grad_norm: float = 0.5
    """Gradient-norm clipping before each Adam step. No counterpart in TRL's PPO trainer: its
    own loop steps the optimizer without clipping, so the ``max_grad_norm`` it inherits from
    the training arguments is not applied there (``GRPOTrainer``, which runs the
    ``transformers`` training loop, does apply it)."""
    kl_target: float | None = None
    """Per-token KL target for the adaptive controller; None keeps beta fixed. No
    counterpart in TRL's PPO trainer, whose ``kl_coef`` is fixed."""
    kl_horizon: int = 10_000
    """Horizon of the adaptive controller, in samples (Ziegler et al. 2019). No TRL counterpart."""
    seed: int = 0
    """Seeds the prompts and the sampling of this run (the starting policy is given). TRL:
    the trainer's ``seed``."""
    kl_placement: str = "reward"
    """Where the leash acts, a name of the table :mod:`minirlhf.leashes` (one module each).
    ``"reward"``: ``-beta * kl_t`` is a per-token reward and reaches the advantages through
    the returns (InstructGPT; TRL's PPO trainer). ``"loss"``: the advantages come from the
    score alone and ``beta * mean_t k3_t``, computed from the current policy, is added to the
    loss (GRPO; TRL's ``GRPOTrainer`` with ``beta > 0``). Never both."""
    group_size: int = 1
    """Completions sampled per prompt, G, side by side in the batch; ``batch_size`` must be a
    multiple of it. 1 is chapter 5's recipe. TRL: ``GRPOConfig.num_generations`` (8 by
    default); TRL's PPO trainer samples one completion per prompt."""
    eval_every: int = 1
    """Iterations between two evaluations on the 400 eval prompts; the start and the last
    iteration are always evaluated, and the log's ``eval_iterations`` says which were. 1,
    every iteration, draws the book's curves; a study that reads only where its runs end sets
    it to ``iterations`` and is spared the other evaluations, a large share of a run's time,
    with the same numbers at the end (evaluating draws no random number and changes no
    weight). TRL: ``eval_steps``."""
    advantages: str = "batch"
    """The advantage estimator, a name of the table :mod:`minirlhf.estimators` (one module
    each), which says what each needs and its TRL counterpart. ``"batch"``: the score
    standardized over the batch with the leash inside (chapter 5); the group estimators of
    chapter 8 score each completion against its own group of ``group_size`` (they need
    ``group_size >= 2`` and the leash in the loss). No counterpart in TRL's PPO trainer."""

    def __post_init__(self):
        leashes.get(self.kl_placement)  # a ValueError naming the choices
        estimator = estimators.get(self.advantages)
        if not (isinstance(self.group_size, int) and self.group_size >= 1):
            raise ValueError(f"group_size must be a whole number >= 1, got {self.group_size!r}")
        if not (isinstance(self.eval_every, int) and self.eval_every >= 1):
            raise ValueError(f"eval_every must be a whole number >= 1, got {self.eval_every!r}")
        if self.batch_size % self.group_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of group_size "
                f"({self.group_size}): each prompt gets group_size completions"
            )
        estimator.check(self)


# ----------------------------------------------------------------------------- the pieces


def check_token_shapes(mask: torch.Tensor, scores: torch.Tensor | None = None, **tensors) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be (B, T), got shape {tuple(mask.shape)}")
    for name, x in tensors.items():
        if tuple(x.shape) != tuple(mask.shape):
            raise ValueError(f"{name} must have the mask's shape {tuple(mask.shape)}, got {tuple(x.shape)}")
    if scores is not None and tuple(scores.shape) != (mask.shape[0],):
        raise ValueError(f"scores must be (B,) = ({mask.shape[0]},), one per row of mask; got {tuple(scores.shape)}")


def adaptive_kl_update(beta: float, kl: float, target: float, n_steps: int, horizon: int) -> float:
    """Return the next beta of Ziegler et al.'s controller, in the form of their released
    code (``lm-human-preferences``) and of TRL's PPO trainer up to 0.11.

    ``e = clip(kl / target - 1, -0.2, 0.2)``; ``beta * (1 + e * n_steps / horizon)``: beta
    grows when the KL runs above target and shrinks below it, by at most 20% per horizon.
    The paper (section 2.2) writes ``beta * (1 + K_beta * e)`` with ``K_beta = 0.1`` and calls
    it a log-space proportional controller; ``log beta`` sums the errors (integral action).
    The factor stays positive only while ``n_steps / horizon < 5`` (at e = -0.2 it is
    ``1 - 0.2 * n_steps / horizon``), so a longer step is refused.

    Defined in chapter 7.
    """
    if target <= 0 or horizon <= 0 or n_steps < 0 or beta < 0:
        raise ValueError(
            f"need target > 0, horizon > 0, n_steps >= 0, beta >= 0; got target={target}, "
            f"horizon={horizon}, n_steps={n_steps}, beta={beta}"
        )
    if n_steps >= 5 * horizon:
        raise ValueError(
            f"n_steps / horizon must be below 5, got {n_steps} / {horizon}: beyond it a KL far "
            "below target would turn beta negative (1 - 0.2 * n_steps / horizon <= 0)"
        )
    e = float(np.clip(kl / target - 1.0, -0.2, 0.2))
    return float(beta * (1.0 + e * n_steps / horizon))


def gae(rewards, values, gamma: float = 1.0, lam: float = 0.95) -> np.ndarray:
    """Return generalized advantage estimates, one per token, shape of ``rewards`` (..., T).

    ``values[..., t]`` estimates the return from token t; the episode ends after the last
    token (its next value is 0). ``delta_t = r_t + gamma * V_{t+1} - V_t`` and
    ``A_t = delta_t + gamma * lam * A_{t+1}``. With lam = 1 this is the return minus V_t;
    with lam = 0 it is the one-step TD error.

    Defined in chapter 7.
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


# ----------------------------------------------------------------------------- training


def check_replacements(cfg: PPOConfig, advantage_fn=None, loss_fn=None) -> None:
    """Raise ValueError, in one line, when ``advantage_fn`` or ``loss_fn`` cannot be called the
    way the run calls the function it replaces: with the arguments of the ``signature`` that the
    estimator ``cfg.advantages`` or the leash ``cfg.kl_placement`` gives."""
    for what, fn, entry in (
        ("advantage_fn", advantage_fn, estimators.get(cfg.advantages)),
        ("loss_fn", loss_fn, leashes.get(cfg.kl_placement)),
    ):
        if fn is None:
            continue
        if not callable(fn):
            raise ValueError(f"{what} must be a function, got {type(fn).__name__}")
        try:
            inspect.signature(fn).bind(*entry.signature)
        except TypeError:
            raise ValueError(
                f"{what} must take ({', '.join(entry.signature)}), the arguments of {entry.fn.__name__}, "
                f"which it replaces for {type(entry).__name__.lower()} {entry.name!r}; "
                f"{getattr(fn, '__name__', 'it')} takes {inspect.signature(fn)}"
            ) from None
        except ValueError:
            pass  # a builtin or C function whose signature Python cannot read: let the run tell


TRAIN_METRICS = {
    "objective/scores": "mean reward of the batch, before normalisation",
    "objective/kl": "mean per-token log-ratio to the reference on sampled tokens (k1), at rollout",
    "objective/entropy": "mean per-token entropy of the sampling distribution (nats)",
    "policy/clipfrac_avg": "fraction of completion tokens where the clip binds (the clipped term is "
    "the smaller), over the updates",
    "policy/approxkl_avg": "approximate KL to the rollout policy, 0.5 * mean(log ratio ** 2) over completion "
    "tokens (TRL averages over every position), over the updates",
    "loss/policy_avg": "PPO loss, averaged over the updates",
    "val/completion_length": "mean number of completion tokens up to and including the first `;`",
    "beta": "KL coefficient used this iteration (changes only with the adaptive controller)",
}
# Logged only when a rollout samples groups (``group_size > 1``), so chapter 5's logs are as
# they were. TRL's name: trl/trainer/grpo_trainer.py logs "frac_reward_zero_std" (the share of
# completions whose group's reward std is 0, the same as the share of such groups).
GROUP_METRICS = {
    "frac_reward_zero_std": "share of groups whose rewards are all equal: their advantages are 0",
}


# ---------------------------------------------------- SHOWN VERBATIM IN CHAPTER 5
# Chapter 5 shows the source of each stage below as it is (Source(...) cells), so every line
# stays within 77 columns (minirlhf.course.source.PAGE_WIDTH; tests/test_source.py enforces
# it), and an edit here is followed by `make notebooks 05`, whose stored pages show the code.
# fmt: off


@dataclass
class Rollout:
    """One batch of sampled completions and what the update needs of it.

    Defined in chapter 5.
    """

    pairs: torch.Tensor  # (B, 2): the two numbers of each sum asked
    prompts: torch.Tensor  # (B, 6): the encoded prompts, like "23+45="
    completions: torch.Tensor  # (B, 4): sampled token ids
    mask: torch.Tensor  # (B, 4): 1 on tokens up to and including `;`
    old_logp: torch.Tensor  # (B, 4): log-probs under the sampling policy
    ref_logp: torch.Tensor  # (B, 4): log-probs under the frozen reference
    entropy: torch.Tensor  # (B, 4): entropy of the sampling distribution
    extras: dict = field(default_factory=dict)  # what the estimator
    # needs beyond these (minirlhf.estimators); chapter 5's needs nothing


@torch.no_grad()
def rollout(policy, reference, pool, cfg, g) -> Rollout:
    """Return a :class:`Rollout` of ``cfg.batch_size`` completions.

    ``cfg.batch_size // cfg.group_size`` prompts drawn from ``pool`` with
    generator ``g``, each repeated ``cfg.group_size`` times side by side
    (once in chapter 5; GRPO samples several); completions
    sampled at ``cfg.temperature``; ``extras`` as the estimator
    ``cfg.advantages`` asks (none for chapter 5's).

    Defined in chapter 5.
    """
    temp, G = cfg.temperature, cfg.group_size
    pairs = task.sample_pairs(cfg.batch_size // G, g, pool)  # (B / G, 2)
    pairs = pairs.repeat_interleave(G, dim=0)  # (B, 2): G rows a prompt
    prompts = task.encode_prompts(pairs)  # (B, 6)
    completions = generate(policy, prompts, temp, generator=g)  # (B, 4)
    mask = completion_mask(completions)  # (B, 4)
    # Recomputed the way the update computes them: the first ratio is 1.
    logits = completion_logits(policy, prompts, completions)  # (B, 4, 13)
    old_logp = logprobs_from_logits(logits, completions, temp)  # (B, 4)
    ref_logits = completion_logits(reference, prompts, completions)
    ref_logp = logprobs_from_logits(ref_logits, completions, temp)
    entropy = entropy_from_logits(logits, temp)  # (B, 4)
    extras = estimators.get(cfg.advantages).extras(policy, prompts, cfg)
    return Rollout(pairs, prompts, completions, mask,
                   old_logp, ref_logp, entropy, extras)


@torch.no_grad()
def score_and_advantages(batch, reward_fn, beta, cfg,
                         advantage_fn=None):
    """Return (rewards (B,), advantages (B, 4)) of a :class:`Rollout`.

    One score per completion from ``reward_fn``; then the estimator
    ``cfg.advantages`` (:mod:`minirlhf.estimators`) makes per-token
    advantages with its function, or with ``advantage_fn``, which
    replaces it (same signature). Chapter 5's, ``"batch"``,
    standardizes the scores over the batch and calls
    ``kl_shaped_advantages``, with beta = 0 when the leash is in the
    loss; GRPO's, ``"group"`` (chapter 8), calls ``group_advantages``
    and copies each completion's advantage to its kept tokens.

    Defined in chapter 5.
    """
    rewards = reward_fn(batch.pairs, batch.prompts, batch.completions)
    rewards = rewards.to(batch.old_logp.dtype)  # (B,), the policy's dtype
    estimator = estimators.get(cfg.advantages)
    adv = estimator.apply(advantage_fn or estimator.fn, batch,
                          rewards, reward_fn, beta, cfg)  # (B, 4)
    check_token_shapes(batch.mask, advantages=adv)
    return rewards, adv


def ppo_update(policy, opt, batch, adv, beta, cfg, loss_fn=None):
    """Take ``cfg.updates_per_batch`` gradient steps on one batch.

    Return the clip statistics, averaged over the steps (TRL's names):
    ``policy/clipfrac_avg``, ``policy/approxkl_avg``, ``loss/policy_avg``.
    Where the leash acts (``cfg.kl_placement``, :mod:`minirlhf.leashes`)
    decides the loss: the clipped surrogate, ``ppo_token_loss``, when it
    is in the reward; GRPO's ``grpo_token_loss``, which adds beta times
    k3, when it is in the loss. ``loss_fn`` replaces that function
    (same signature).

    Defined in chapter 5.
    """
    leash = leashes.get(cfg.kl_placement)
    loss_fn = loss_fn or leash.fn
    eps, mask, old_logp = cfg.epsilon, batch.mask, batch.old_logp
    stats = {"clipfrac": [], "approxkl": [], "loss": []}
    for _ in range(cfg.updates_per_batch):
        logits = completion_logits(policy, batch.prompts, batch.completions)
        new_logp = logprobs_from_logits(
            logits, batch.completions, cfg.temperature)  # (B, 4)
        loss = leash.apply(loss_fn, new_logp, batch, adv, beta, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(),
                                       cfg.max_grad_norm)
        opt.step()
        with torch.no_grad():  # as trl/experimental/ppo/ppo_trainer.py
            log_ratio = new_logp - old_logp  # (B, 4)
            ratio = log_ratio.exp()
            clipped = -adv * ratio.clamp(1 - eps, 1 + eps)
            binds = (clipped > -adv * ratio).float()  # (B, 4)
            n_tok = mask.sum()
            stats["clipfrac"].append(((binds * mask).sum() / n_tok).item())
            approxkl = (0.5 * log_ratio ** 2 * mask).sum() / n_tok
            stats["approxkl"].append(approxkl.item())
            stats["loss"].append(loss.item())
    return {"policy/clipfrac_avg": float(np.mean(stats["clipfrac"])),
            "policy/approxkl_avg": float(np.mean(stats["approxkl"])),
            "loss/policy_avg": float(np.mean(stats["loss"]))}


def batch_metrics(batch, rewards, stats, beta, group_size=1) -> dict:
    """Return this iteration's :data:`TRAIN_METRICS`, one float each.

    ``rewards`` (B,) as :func:`score_and_advantages` returned them;
    ``stats`` as :func:`ppo_update` returned them. With groups
    (``group_size > 1``), also :data:`GROUP_METRICS`.

    Defined in chapter 5.
    """
    mask = batch.mask
    n_tok = mask.sum()
    kl = ((batch.old_logp - batch.ref_logp) * mask).sum() / n_tok
    entropy = (batch.entropy * mask).sum() / n_tok
    metrics = {
        "objective/scores": rewards.double().mean().item(),
        "objective/kl": kl.item(),
        "objective/entropy": entropy.item(),
        **stats,
        "val/completion_length": mask.sum(1).double().mean().item(),
        "beta": float(beta),
    }
    if group_size > 1:  # groups whose rewards are all equal
        same = same_groups(rewards, group_size)  # (B / G, 1)
        metrics["frac_reward_zero_std"] = same.double().mean().item()
    return metrics


def _record_eval(log: dict, ev: dict) -> None:
    for key in ("accuracy", "rm_score", "kl"):
        log[key].append(ev[key])
    for k in task.KINDS:
        log["kinds"][k].append(ev["kinds"][k])


def ppo_train(
    policy: TinyGPT,
    reference: TinyGPT,
    reward_fn: Callable,
    beta: float,
    config: PPOConfig | None = None,
    rm: TinyGPT | None = None,
    loss_fn: Callable | None = None,
    advantage_fn: Callable | None = None,
    evalset: EvalSet | None = None,
    progress: bool = True,
    callback: Callable | None = None,
    desc: str = "PPO",
) -> tuple[TinyGPT, dict]:
    """Return (trained copy of ``policy``, log); the inputs are not changed.

    ``reward_fn(pairs, prompts, completions) -> (B,)`` scores completions:
    :func:`rm_reward` or :func:`verifier_reward`. ``rm`` (optional) only
    logs the RM's score of the greedy answers. ``advantage_fn`` replaces
    the function of the estimator ``config.advantages`` and ``loss_fn``
    the loss of the leash ``config.kl_placement``, each with the
    ``signature`` its table gives (``kl_shaped_advantages`` and
    ``ppo_token_loss`` in chapter 5; ``group_advantages`` and
    ``grpo_token_loss`` for GRPO), so a learner's own functions can
    drive the run.
    ``callback(iteration, log, policy)`` runs after each iteration (the
    policy in eval mode, to be read, not changed);
    ``desc`` labels the progress bar.

    One iteration calls the stages in turn: :func:`rollout`,
    :func:`score_and_advantages`, :func:`ppo_update`,
    :func:`batch_metrics`, then :func:`evaluate` (every
    ``config.eval_every`` iterations).

    The log holds per-evaluation lists with the start at index 0
    (length iterations + 1 with ``config.eval_every`` 1, the default):
    ``accuracy``, ``rm_score``, ``kl``, ``kinds`` (dict of lists), and
    ``eval_iterations``, the iteration of each evaluation; the
    training-batch metrics of :data:`TRAIN_METRICS`
    (length iterations), with :data:`GROUP_METRICS` when
    ``config.group_size > 1``; and ``config``, ``beta0``.

    Defined in chapter 5.
    """
    cfg = config or PPOConfig()
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if (cfg.iterations < 0 or cfg.batch_size < 2
            or cfg.updates_per_batch < 1):
        raise ValueError("config needs iterations >= 0, batch_size >= 2, "
                         "updates_per_batch >= 1")
    check_replacements(cfg, advantage_fn, loss_fn)
    evalset = evalset or EvalSet()
    policy = copy.deepcopy(policy).train().requires_grad_(True)
    reference.eval()  # read under no_grad only: it never changes
    g = make_generator(cfg.seed)
    pool = task.train_pairs()
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    temp, cache = cfg.temperature, {}  # cache: frozen models' eval outputs

    log = {"accuracy": [], "rm_score": [], "kl": [],
           "kinds": {k: [] for k in task.KINDS}, "eval_iterations": [0]}
    log.update({name: [] for name in TRAIN_METRICS})
    log["config"] = asdict(cfg)
    log["beta0"] = float(beta)
    ev = evaluate(policy, reference, rm, evalset, temp, cache)
    _record_eval(log, ev)

    bar = progress_bar(total=cfg.iterations, desc=desc, enabled=progress)
    for it in range(cfg.iterations):
        # 1. rollout: sampled completions (G a prompt), with their log-probs
        batch = rollout(policy, reference, pool, cfg, g)
        # 2.-4. score, leash and advantages, fixed for this batch
        rewards, adv = score_and_advantages(batch, reward_fn, beta, cfg,
                                            advantage_fn)
        # 5. updates on this batch, the learning rate annealed linearly
        decay = 1.0 - it / cfg.iterations if cfg.anneal_lr else 1.0
        for group in opt.param_groups:
            group["lr"] = cfg.lr * decay
        stats = ppo_update(policy, opt, batch, adv, beta, cfg, loss_fn)
        # 6. log the batch, then evaluate on the fixed eval prompts
        metrics = batch_metrics(batch, rewards, stats, beta,
                                cfg.group_size)
        for name, value in metrics.items():
            log.setdefault(name, []).append(value)
        policy.eval()
        if (it + 1) % cfg.eval_every == 0 or it + 1 == cfg.iterations:
            ev = evaluate(policy, reference, rm, evalset, temp, cache)
            _record_eval(log, ev)
            log["eval_iterations"].append(it + 1)
        if callback is not None:
            callback(it + 1, log, policy)
        policy.train()
        # 7. the adaptive leash, when asked: move beta toward the target
        if cfg.kl_target is not None:
            beta = adaptive_kl_update(beta, metrics["objective/kl"],
                                      cfg.kl_target, cfg.batch_size,
                                      cfg.kl_horizon)
        bar.update(1)
        bar.set_postfix_str(f"acc {ev['accuracy']:.3f} kl {ev['kl']:.3f}")
    bar.close()
    policy.eval()
    return policy, log
# fmt: on
