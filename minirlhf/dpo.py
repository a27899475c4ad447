"""Direct Preference Optimization (Rafailov et al. 2023) on chapter 4's preference pairs.

DPO trains the policy on the pairs themselves: no reward model, no sampling. For a prompt
``x`` with a chosen completion ``y_c`` and a rejected one ``y_r``, with sequence log-probs
``pi(y | x)`` of the policy and ``ref(y | x)`` of the frozen reference,

    loss = -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))       mean over pairs

and ``beta * (log pi(y | x) - log ref(y | x))`` is the *implicit reward* of a completion: the
reward under which this policy would be the KL-regularised optimum. The loss is
Bradley-Terry's (chapter 4) on implicit rewards, so the implicit reward can be measured like
the RM: pair accuracy and near-miss accuracy on the held-out pairs (:func:`implicit_reward_report`).

The data are the RM's: chosen = the right answer, rejected = a random wrong number, on the
training prompts (never the eval prompts), drawn exactly as :func:`~minirlhf.reward_model.train_reward_model`
draws them (:func:`preference_pairs`). With ``near_miss_share`` > 0 part of each batch gets a
near-miss as its rejected answer instead, as chapter 4's optional retrain does.

Against TRL's ``DPOTrainer`` (``trl/trainer/dpo_trainer.py`` and ``dpo_config.py``, commit
f2cd577): the same loss (TRL's default ``loss_type=["sigmoid"]``, ``label_smoothing=0``),
averaged over the pairs; sequence log-probs are the *sum* over completion tokens (TRL masks
the prompt and padding and sums, ``per_token_logps.sum(dim=1)``), at temperature 1; the
reference is frozen and read without gradients (with ``precompute_ref_log_probs=True``
TRL computes its log-probs once for the whole data set, as :func:`train_dpo` does); the
implicit rewards are ``beta`` times the detached log-ratios, and the logged metrics carry
TRL's names (:data:`DPO_METRICS`). Differences: Adam instead of AdamW, a learning rate
fitted to this network (TRL's default is 1e-6), and an evaluation on the eval prompts every
``eval_every`` steps with the same measures as every PPO arm (:func:`minirlhf.evaluation.evaluate`).

Chapter 9 builds DPO and measures it against the other methods of the book.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from . import task
from .evaluation import EvalSet, evaluate
from .model import TinyGPT, completion_logprobs, completion_mask, make_generator, weights_digest
from .progress import progress_bar
from .reward_model import HELDOUT_SEED, RMConfig, margins_report, preference_batch

__all__ = [
    "DPOConfig",
    "dpo_loss",
    "implicit_rewards",
    "sequence_logps",
    "preference_pairs",
    "implicit_reward_margins",
    "implicit_reward_report",
    "steps",
    "train_dpo",
    "DPO_METRICS",
    "HELDOUT_LOGPS",
    "heldout_answers",
    "prepare_reference",
]


@dataclass
class DPOConfig:
    """Settings of one DPO run. Each setting's docstring names its counterpart in TRL's
    ``DPOConfig`` (``trl/trainer/dpo_config.py``, commit f2cd577), or says there is none.

    Defined in chapter 9.
    """

    steps: int = 200
    """Optimizer steps. With the defaults one pass over the RM's 12,800 pairs (one epoch);
    more steps go round the pairs again, reshuffled. TRL: ``max_steps`` (or
    ``num_train_epochs``, 3 by default)."""
    batch_size: int = 64
    """Preference pairs per step. TRL: ``per_device_train_batch_size`` times the gradient
    accumulation and the number of processes."""
    lr: float = 1e-4
    """Adam's initial learning rate. TRL: ``learning_rate`` (1e-6 by default, for large
    pretrained models; this 100K-parameter network needs far more)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run. TRL: ``lr_scheduler_type``
    ("linear" by default)."""
    beta: float = 0.1
    """Weight of the log-ratios in the loss: the smaller, the further the policy may move
    from the reference for the same loss. TRL: ``beta`` (0.1 by default, as here). The
    experiment's ``dpo`` arm sets its own (see :data:`minirlhf.arms.REGISTRY`)."""
    seed: int = 0
    """Seeds the order in which the pairs are visited; the pairs themselves are the RM's and
    do not depend on it. TRL: the trainer's ``seed`` (and ``data_seed``)."""
    near_miss_share: float = 0.0
    """Share of each of the RM's batches whose rejected answer is a near-miss instead of a
    random wrong number (chapter 4's optional retrain). 0 is the RM's own data. No TRL
    counterpart: a property of the data set."""
    eval_every: int = 8
    """Steps between two evaluations on the eval prompts; the start is evaluated too. With
    the defaults, 25 evaluations after the start, as PPO's 25 iterations. TRL: ``eval_steps``."""
    rm_config: RMConfig | None = None
    """The reward model's settings whose pairs DPO trains on (None: the book's RM,
    :class:`~minirlhf.reward_model.RMConfig`). No TRL counterpart."""
    loss_type: str = "sigmoid"
    """"sigmoid": DPO's loss (:func:`dpo_loss`). "sft": no preference at all, the control of
    chapter 9: the cross-entropy of the chosen completions' tokens, averaged over the batch's
    kept tokens (SFT on the chosen answers, with the same batches, optimizer and steps); the
    rejected answers and the reference only enter the logged implicit rewards. TRL:
    ``loss_type`` (``["sigmoid"]`` by default; its ``"sft"`` is the same cross-entropy)."""
    n_pairs: int | None = None
    """Train on the first ``n_pairs`` of those pairs only, going round them as often as the
    steps need (None: all of them). A small pair set shows over-training. TRL: the size of
    the training data set."""

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.n_pairs is not None and not (isinstance(self.n_pairs, int) and self.n_pairs >= self.batch_size):
            raise ValueError(
                f"n_pairs must be None or a whole number >= batch_size ({self.batch_size}), got {self.n_pairs!r}"
            )
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.near_miss_share <= 1.0:
            raise ValueError(f"near_miss_share must lie in [0, 1], got {self.near_miss_share}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")


LOSS_TYPES = ("sigmoid", "sft")  # see DPOConfig.loss_type

# The per-step metrics of the log, by TRL's names (trl/trainer/dpo_trainer.py, _compute_loss).
DPO_METRICS = {
    "loss": "the DPO loss of the batch",
    "rewards/chosen": "mean implicit reward beta * (log pi - log ref) of the chosen completions",
    "rewards/rejected": "mean implicit reward of the rejected completions",
    "rewards/accuracies": "share of the batch's pairs whose chosen reward beats the rejected one",
    "rewards/margins": "mean of chosen minus rejected implicit reward",
    "logps/chosen": "mean sequence log-prob of the chosen completions under the policy",
    "logps/rejected": "mean sequence log-prob of the rejected completions under the policy",
}


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Return DPO's loss, a 0-d tensor to minimise: the mean over pairs of
    ``-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))``.

    The four inputs are (B,) sequence log-probs (:func:`sequence_logps`). Written with
    ``F.logsigmoid``, which stays finite for any margin. TRL's ``loss_type="sigmoid"``.

    Defined in chapter 9.
    """
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
    chosen_logratios = policy_chosen_logps - ref_chosen_logps  # (B,)
    rejected_logratios = policy_rejected_logps - ref_rejected_logps  # (B,)
    return -F.logsigmoid(beta * (chosen_logratios - rejected_logratios)).mean()


def implicit_rewards(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """Return the implicit rewards ``beta * (log pi(y | x) - log ref(y | x))`` (B,), detached:
    the reward under which the policy would be the KL-regularised optimum, up to a term that
    depends on the prompt only. TRL logs their means as ``rewards/chosen`` and
    ``rewards/rejected``.
    """
    return beta * (policy_logps - ref_logps).detach()


def sequence_logps(model: TinyGPT, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """Return the log-prob of each whole completion under ``model`` (B,), at temperature 1:
    the sum of its token log-probs up to and including the first `;` (SFT's mask,
    :func:`~minirlhf.model.completion_mask`); the padding after it does not count.

    Defined in chapter 9.
    """
    logp = completion_logprobs(model, prompts, completions)  # (B, 4)
    return (logp * completion_mask(completions)).sum(1)  # (B,)


def preference_pairs(near_miss_share: float = 0.0, rm_config: RMConfig | None = None):
    """Return (prompts (N, 6), chosen (N, 4), rejected (N, 4)): the pairs the reward model of
    ``rm_config`` (default: the book's) trains on, ``steps x batch_size`` of them (12,800),
    drawn from the training prompts with the same generator in the same order as
    :func:`~minirlhf.reward_model.train_reward_model`. With ``near_miss_share`` > 0 the first
    share of each batch gets a near-miss as its rejected answer, drawn as chapter 4's
    ``train_rm_with_near_misses`` draws it.

    Defined in chapter 9.
    """
    cfg = rm_config or RMConfig()
    if not 0.0 <= near_miss_share <= 1.0:
        raise ValueError(f"near_miss_share must lie in [0, 1], got {near_miss_share}")
    g, pool = make_generator(cfg.seed), task.train_pairs()
    n_near = int(round(near_miss_share * cfg.batch_size))
    parts = []
    for _ in range(cfg.steps):
        batch = task.sample_pairs(cfg.batch_size, g, pool)  # (B, 2)
        prompts, chosen, rejected = preference_batch(batch, g)
        if n_near:
            rejected[:n_near] = task.wrong_answers(batch[:n_near], "near_miss", g)
        parts.append((prompts, chosen, rejected))
    return tuple(torch.cat(x) for x in zip(*parts))


@torch.no_grad()
def implicit_reward_margins(
    policy: TinyGPT,
    reference: TinyGPT,
    beta: float,
    kind: str,
    pairs: torch.Tensor | None = None,
    seed: int = HELDOUT_SEED,
) -> torch.Tensor:
    """Return the implicit reward's margin r(correct) - r(wrong answer of ``kind``) for each
    held-out pair (N,), with ``r = beta * (log pi - log ref)``: the same pairs as chapter 4's
    :func:`~minirlhf.reward_model.pair_margins` (default: the 400 eval prompts, ``seed`` 7).
    """
    pairs = task.eval_pairs() if pairs is None else pairs
    prompts, chosen, rejected = preference_batch(pairs, make_generator(seed), kind)

    def reward(completions):
        return beta * (sequence_logps(policy, prompts, completions) - sequence_logps(reference, prompts, completions))

    return reward(chosen) - reward(rejected)


def implicit_reward_report(policy: TinyGPT, reference: TinyGPT, beta: float) -> dict:
    """Return the implicit reward's held-out numbers in the layout of chapter 4's
    :func:`~minirlhf.reward_model.rm_report`: ``{'pair_accuracy', 'near_miss_accuracy',
    'margin': {kind: mean margin}, 'accuracy': {kind: fraction ranked right}}``.
    """
    return margins_report({kind: implicit_reward_margins(policy, reference, beta, kind) for kind in task.WRONG_KINDS})


# What the evaluations log besides :func:`minirlhf.evaluation.evaluate`'s measures: the policy's mean
# sequence log-prob of the right answer and of a wrong one of two kinds on the held-out pairs
# (the eval prompts), the same pairs at every evaluation, so that the curves carry no batch noise.
HELDOUT_LOGPS = {
    "heldout/logps_correct": "mean log-prob of the right answers to the eval prompts",
    "heldout/logps_random": "mean log-prob of a random wrong number (the pairs' kind of rejected answer)",
    "heldout/logps_near_miss": "mean log-prob of a near-miss",
}


def heldout_answers(seed: int = HELDOUT_SEED) -> tuple[torch.Tensor, dict]:
    """Return (prompts (400, 6), {key of :data:`HELDOUT_LOGPS`: completions (400, 4)}): the right
    answers to the eval prompts and one wrong answer of each kind, drawn as chapter 4's held-out
    pairs are."""
    pairs = task.eval_pairs()
    prompts, right, random_wrong = preference_batch(pairs, make_generator(seed), "random")
    near = preference_batch(pairs, make_generator(seed), "near_miss")[2]
    return prompts, {
        "heldout/logps_correct": right,
        "heldout/logps_random": random_wrong,
        "heldout/logps_near_miss": near,
    }


def _record_eval(log: dict, step: int, ev: dict, policy: TinyGPT, heldout) -> None:
    log["steps"].append(step)
    for key in ("accuracy", "rm_score", "kl"):
        log[key].append(ev[key])
    for k in task.KINDS:
        log["kinds"][k].append(ev["kinds"][k])
    prompts, answers = heldout
    with torch.no_grad():
        for key, completions in answers.items():
            log[key].append(sequence_logps(policy, prompts, completions).double().mean().item())


# The reference's sequence log-probs of every pair, kept for the next run on the same pairs
# with the same reference (a chapter runs many): {(weights digest, pairs key): (chosen, rejected)}.
_REFERENCE_LOGPS: dict = {}
_REFERENCE_LOGPS_KEPT = 4


@torch.no_grad()
def _reference_logps(reference: TinyGPT, prompts, chosen, rejected, pairs_key) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the reference's sequence log-probs (N,) of the chosen and the rejected answers,
    computed once in chunks of 1,024 pairs (which keep the memory of one pass small) and kept
    for the next run with the same reference weights and the same pairs: the same numbers,
    bit for bit, as computing them again."""
    key = (weights_digest(reference), pairs_key, len(prompts))
    if key not in _REFERENCE_LOGPS:
        n = len(prompts)
        found = tuple(
            torch.cat(
                [sequence_logps(reference, prompts[i : i + 1024], answers[i : i + 1024]) for i in range(0, n, 1024)]
            )
            for answers in (chosen, rejected)
        )
        while len(_REFERENCE_LOGPS) >= _REFERENCE_LOGPS_KEPT:
            _REFERENCE_LOGPS.pop(next(iter(_REFERENCE_LOGPS)))
        _REFERENCE_LOGPS[key] = found
    return _REFERENCE_LOGPS[key]


def _pairs(config: DPOConfig, data) -> tuple[tuple[torch.Tensor, ...], tuple]:
    """Return the pairs a run trains on, ``(prompts (N, 6), chosen (N, 4), rejected (N, 4))``,
    and the key that names them among the reference's kept log-probs: ``config``'s pairs
    (:func:`preference_pairs`), or ``data``, another set of that form, named by a digest of its
    tokens. Raises ValueError, on one line, for ``data`` of another form."""
    if data is None:
        cfg = config
        return preference_pairs(cfg.near_miss_share, cfg.rm_config), (cfg.near_miss_share, repr(cfg.rm_config))
    shapes = [tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__ for x in data]
    kinds = ", ".join(f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__ for x in data)
    ok = len(data) == 3 and all(isinstance(x, torch.Tensor) and not x.is_floating_point() for x in data)
    n = len(data[0]) if ok else 0
    if not (n >= 1 and shapes == [(n, task.PROMPT_LEN), (n, task.COMPLETION_LEN), (n, task.COMPLETION_LEN)]):
        raise ValueError(
            f"data must be (prompts (N, {task.PROMPT_LEN}), chosen (N, {task.COMPLETION_LEN}), rejected "
            f"(N, {task.COMPLETION_LEN})), integer token tensors with N >= 1, got {kinds}"
        )
    digest = hashlib.sha256(b"".join(x.to(torch.int64).contiguous().numpy().tobytes() for x in data))
    return tuple(data), ("pairs", digest.hexdigest()[:16])


def prepare_reference(reference: TinyGPT, config: DPOConfig | None = None, data=None) -> None:
    """Compute and keep the reference's log-probs of the pairs ``config`` trains on, or of
    ``data`` (as :func:`steps` takes it): what :func:`train_dpo` computes before its first step,
    so that runs started after this, in this process or in worker processes forked from it, read
    them instead of each computing them again: the same numbers, bit for bit."""
    (prompts, chosen, rejected), key = _pairs(config or DPOConfig(), data)
    _reference_logps(reference, prompts, chosen, rejected, key)


def steps(
    policy: TinyGPT,
    reference: TinyGPT,
    config: DPOConfig | None = None,
    loss_fn: Callable | None = None,
    data=None,
) -> Iterator[tuple[int, TinyGPT, dict | None]]:
    """Yield ``(step, model, metrics)``: ``(0, model, None)`` first, the start, then one after each
    of the ``config.steps`` optimizer steps of DPO from ``policy`` against the frozen ``reference``.

    This is DPO's step loop, the only one: :func:`train_dpo` drives it and evaluates the policy
    between steps; chapter 11's over-optimization study
    (:func:`minirlhf.studies.dpo_overopt.dpo_run`) drives it to measure the policy from inside a
    run. ``model`` is the policy being trained (a copy; ``policy`` is not changed), in eval mode
    while the driver holds it, to read and not to change; ``metrics`` holds the step's batch
    numbers by TRL's names (:data:`DPO_METRICS`), computed before that step's update.
    ``loss_fn`` replaces :func:`dpo_loss` (same signature; it returns the loss alone). ``data``
    ``(prompts (N, 6), chosen (N, 4), rejected (N, 4))`` replaces the config's pairs (chapter 11
    trains on pairs of the policy's own answers); None trains on :func:`preference_pairs`.

    Defined in chapter 9.
    """
    cfg = config or DPOConfig()
    if loss_fn is not None and cfg.loss_type != "sigmoid":
        raise ValueError(f"loss_fn replaces DPO's sigmoid loss: with loss_type {cfg.loss_type!r} it must be None")
    loss_fn = loss_fn or dpo_loss
    (prompts, chosen, rejected), key = _pairs(cfg, data)  # (N, 6), (N, 4) x 2
    model = copy.deepcopy(policy).eval().requires_grad_(True)
    reference.eval()
    ref_chosen, ref_rejected = _reference_logps(reference, prompts, chosen, rejected, key)  # (N,) each
    if cfg.n_pairs is not None:
        if cfg.n_pairs > len(prompts):
            raise ValueError(f"n_pairs must be at most the {len(prompts)} pairs there are, got {cfg.n_pairs}")
        keep = slice(0, cfg.n_pairs)
        prompts, chosen, rejected = prompts[keep], chosen[keep], rejected[keep]
        ref_chosen, ref_rejected = ref_chosen[keep], ref_rejected[keep]
    n = len(prompts)
    g = make_generator(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    yield 0, model, None

    order = torch.empty(0, dtype=torch.long)
    for step in range(1, cfg.steps + 1):
        model.train()
        # 1. the next batch of pairs; a new shuffled pass when the last one is used up
        if len(order) < cfg.batch_size:
            order = torch.cat([order, torch.randperm(n, generator=g)])
        idx, order = order[: cfg.batch_size], order[cfg.batch_size :]
        # 2. the policy's sequence log-probs of both sides, in one pass
        both = sequence_logps(model, prompts[idx].repeat(2, 1), torch.cat([chosen[idx], rejected[idx]]))
        pi_chosen, pi_rejected = both.chunk(2)  # (B,) each
        if cfg.loss_type == "sft":  # the mean over the chosen answers' kept tokens
            loss = -pi_chosen.sum() / completion_mask(chosen[idx]).sum()
        else:
            loss = loss_fn(pi_chosen, pi_rejected, ref_chosen[idx], ref_rejected[idx], cfg.beta)
        r_chosen = implicit_rewards(pi_chosen, ref_chosen[idx], cfg.beta)  # (B,) each
        r_rejected = implicit_rewards(pi_rejected, ref_rejected[idx], cfg.beta)
        # 3. one Adam step, the learning rate annealed linearly
        if cfg.anneal_lr:
            for group in opt.param_groups:
                group["lr"] = cfg.lr * (1.0 - (step - 1) / cfg.steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # 4. the batch's numbers by TRL's names
        metrics = {
            "loss": loss.item(),
            "rewards/chosen": r_chosen.mean().item(),
            "rewards/rejected": r_rejected.mean().item(),
            "rewards/accuracies": (r_chosen > r_rejected).double().mean().item(),
            "rewards/margins": (r_chosen - r_rejected).mean().item(),
            "logps/chosen": pi_chosen.detach().mean().item(),
            "logps/rejected": pi_rejected.detach().mean().item(),
        }
        yield step, model.eval(), metrics


def train_dpo(
    policy: TinyGPT,
    reference: TinyGPT,
    config: DPOConfig | None = None,
    rm: TinyGPT | None = None,
    evalset: EvalSet | None = None,
    progress: bool = True,
    loss_fn: Callable | None = None,
    desc: str = "DPO",
) -> tuple[TinyGPT, dict]:
    """Return (trained copy of ``policy``, log); the inputs are not changed.

    The steps are :func:`steps`' (the loop lives there), which this drives: it logs each step's
    metrics and evaluates the policy at the start and every ``config.eval_every`` steps.
    ``reference`` is frozen (read without gradients; its log-probs of every pair are computed
    once, before the first step, and kept for the next run with the same reference and pairs).
    ``loss_fn`` replaces :func:`dpo_loss` (same signature; it returns the loss alone), so a
    learner's function can drive the run. ``rm`` (optional) only logs the RM's
    score of the greedy answers, as in the PPO arms.

    The log holds, per evaluation (every ``config.eval_every`` steps, index 0 = before
    training), ``steps``, ``accuracy``, ``rm_score``, ``kl`` and ``kinds`` from
    :func:`minirlhf.evaluation.evaluate` (the KL at temperature 0.7, as for every PPO arm, so the
    numbers compare) and the held-out log-probs of :data:`HELDOUT_LOGPS`; per step the
    metrics of :data:`DPO_METRICS`; at the end
    ``implicit_reward`` (:func:`implicit_reward_report` on the held-out pairs); and
    ``config``, ``n_pairs``.

    Defined in chapter 9.
    """
    cfg = config or DPOConfig()
    run = steps(policy, reference, cfg, loss_fn)
    _, policy, _ = next(run)  # the start: the copy that trains, before its first step
    evalset = evalset or EvalSet()
    cache = {}  # the frozen models' eval outputs, as in ppo_train

    log = {"steps": [], "accuracy": [], "rm_score": [], "kl": [], "kinds": {k: [] for k in task.KINDS}}
    log.update({key: [] for key in HELDOUT_LOGPS})
    log.update({name: [] for name in DPO_METRICS})
    log["config"] = asdict(cfg)
    log["n_pairs"] = cfg.n_pairs or len(preference_pairs(cfg.near_miss_share, cfg.rm_config)[0])
    heldout = heldout_answers()
    _record_eval(log, 0, evaluate(policy, reference, rm, evalset, cache=cache), policy, heldout)

    bar = progress_bar(total=cfg.steps, desc=desc, enabled=progress)
    for step, policy, metrics in run:
        for name, value in metrics.items():
            log[name].append(value)
        # every eval_every steps (and at the end), the same evaluation as every PPO arm
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = evaluate(policy, reference, rm, evalset, cache=cache)
            _record_eval(log, step, ev, policy, heldout)
            bar.set_postfix_str(f"acc {ev['accuracy']:.3f} kl {ev['kl']:.3f}")
        bar.update(1)
    bar.close()
    log["implicit_reward"] = implicit_reward_report(policy, reference, cfg.beta)
    return policy, log
