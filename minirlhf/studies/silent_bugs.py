"""Silent bugs: runs that train without an error and are quietly wrong, and how they show.

Each :class:`Bug` is one function of the engine, copied here with one line changed, the way
such bugs are shipped: a KL term that carries no gradient, k1 used as a loss, a completion mask
that is missing or that treats the end mark as padding, a ratio taken against the reference,
sampling temperature left out of the log-probs, DPO's rejected log-ratio the wrong way round.
:func:`planted` swaps the copy in for the length of a run and puts the engine's function back
after, so a buggy run is the engine's own ``ppo_train`` (or ``train_dpo``) with that one
function replaced. :func:`one_line_diff` shows that the copy differs from the engine's
function by exactly that line; a test checks it for every bug.

Each bug names the metrics that its fix is judged on (its *tells*, for :func:`band_check`),
among those every run logs under TRL's names. :func:`paired_difference` is the chapter's test of
whether a metric tells a buggy run from the correct one: each seed's difference, buggy minus
correct, of the metric's mean over the run, and whether the 95% interval of those differences
excludes 0; :func:`separating` lists the dashboard's metrics that pass it, and
:func:`tell_table` prints them. In float64, over seeds 0-2, no metric separates kl-no-grad's
run from the correct one, and one or a few separate k1-loss's, ratio-to-reference's and
no-temperature's; chapter 10's table prints which. :func:`first_departure` times, among those
panels only, the point from which a panel stays apart from the correct run's by a per-point
paired test; :func:`what_it_writes` says what a DPO run learns to write, from the held-out
log-probs and the greedy answers' kinds that its stored log keeps (:data:`KEPT`).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..experiment import mean_ci95, run_arm
from ..ppo import PPOConfig, ppo_token_loss
from ..task import SEMI

__all__ = [
    "Bug",
    "BUGS",
    "planted",
    "one_line_diff",
    "run_bug",
    "tell_value",
    "paired_difference",
    "separating",
    "tell_table",
    "CHECKS",
    "run_checks",
    "check_mask",
    "check_logprobs",
    "check_ratio",
    "check_leash_gradient",
    "check_dpo_gradient",
    "DASHBOARD",
    "KEPT",
    "X_LABEL",
    "curve_x",
    "study",
    "plot_dashboard",
    "band_check",
    "point_differences",
    "first_departure",
    "what_it_writes",
]


# ----------------------------------------------------------------------------- the copies
# Each is the engine's function of the same name (the module is named in BUGS), copied
# whole, with one line changed. Docstrings and comments are left out of the comparison.


def k3_loss_term_no_grad(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    d = (ref_logp - new_logp.detach()).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()


def k3_loss_term_k1(
    new_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, kl_clamp: float = 10.0
) -> torch.Tensor:
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    return ((new_logp - ref_logp) * mask).sum() / mask.sum()


def completion_mask_missing(completions: torch.Tensor) -> torch.Tensor:
    is_end = (completions == SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end
    return torch.ones_like(ends_before).float()


def completion_mask_pad_is_end(completions: torch.Tensor) -> torch.Tensor:
    is_end = (completions == SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end
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
    from ..ppo import k3_loss_term

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
    """One planted bug: the engine function it replaces, the run it spoils, and its tells."""

    title: str  # a few words
    what: str  # one sentence: what the line does wrong
    module: str  # where the engine's function lives (and is looked up at run time)
    name: str  # the engine function's name
    copy: Callable  # the copy with one line changed
    arm: str  # the arm of minirlhf.experiment.REGISTRY it is planted in
    tells: tuple  # logged metrics the bug moves, on which band_check judges a fix of it


BUGS = {
    "kl-no-grad": Bug(
        "the KL term carries no gradient",
        "the policy's log-probs are detached inside GRPO's k3 "
        "term, as if it were computed under no_grad: the loss shows the leash, the gradient never feels it",
        "minirlhf.ppo",
        "k3_loss_term",
        k3_loss_term_no_grad,
        "grpo-verifier",
        ("kl", "objective/kl"),
    ),
    "k1-loss": Bug(
        "k1 as the loss term",
        "GRPO's leash is the mean of k1 = log pi - log ref over sampled tokens; "
        "over the policy's own samples its expected gradient is zero, so the leash pulls nowhere on "
        "average, and over an older policy's samples it pushes away from that policy",
        "minirlhf.ppo",
        "k3_loss_term",
        k3_loss_term_k1,
        "grpo-verifier",
        ("kl",),
    ),
    "no-mask": Bug(
        "the completion mask is missing",
        "every one of the 4 tokens is trained and counted, also those after the answer's end mark",
        "minirlhf.ppo",
        "completion_mask",
        completion_mask_missing,
        "verifier",
        ("val/completion_length", "objective/entropy"),
    ),
    "pad-is-end": Bug(
        "the end mark is taken for padding",
        "the mask is `token != pad` with pad equal to the end mark `;`: "
        "the end mark itself is never trained, and tokens after it are",
        "minirlhf.ppo",
        "completion_mask",
        completion_mask_pad_is_end,
        "verifier",
        ("val/completion_length", "objective/kl"),
    ),
    "ratio-to-reference": Bug(
        "the ratio is taken against the reference",
        "the clipped ratio compares the policy with the frozen "
        "reference instead of the policy that sampled the batch, so the clip stops every token that has "
        "moved 20% from the start",
        "minirlhf.ppo",
        "grpo_token_loss",
        grpo_token_loss_ratio_to_reference,
        "grpo-verifier",
        ("kl", "accuracy"),
    ),
    "no-temperature": Bug(
        "the log-probs leave out the temperature",
        "completions are sampled at temperature 0.7, but the "
        "ratio, the leash and the logged KL use log-probs at temperature 1",
        "minirlhf.ppo",
        "logprobs_from_logits",
        logprobs_from_logits_no_temperature,
        "verifier",
        ("objective/kl",),
    ),
    "dpo-rejected-flipped": Bug(
        "DPO's rejected log-ratio is the wrong way round",
        "ref - policy instead of policy - ref for the "
        "rejected answer: the loss now rewards raising the rejected answer too",
        "minirlhf.dpo",
        "dpo_loss",
        dpo_loss_rejected_flipped,
        "dpo",
        ("logps/rejected", "rewards/accuracies"),
    ),
}


@contextmanager
def planted(bug: Bug):
    """Within the ``with`` block, the engine looks up ``bug.copy`` in place of its own function."""
    module = importlib.import_module(bug.module)
    original = getattr(module, bug.name)
    setattr(module, bug.name, bug.copy)
    try:
        yield
    finally:
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
    """Return (the engine's line, the copy's line): the one line in which they differ.

    Raises ValueError when they differ in more or fewer lines than one."""
    engine = getattr(importlib.import_module(bug.module), bug.name)
    a, b = _code_lines(engine), _code_lines(bug.copy)
    diff = [d for d in difflib.ndiff(a, b) if d[:1] in "+-"]
    removed = [d[2:] for d in diff if d.startswith("-")]
    added = [d[2:] for d in diff if d.startswith("+")]
    if len(removed) != 1 or len(added) != 1:
        raise ValueError(f"{bug.name}: the copy differs in {len(removed)} line(s) removed and {len(added)} added")
    return removed[0].strip(), added[0].strip()


# ----------------------------------------------------------------------------- runs


def run_bug(
    bug: Bug | None, arm: str, policy, rm, seed: int, evalset=None, progress: bool = False, config=None
) -> dict:
    """Return the log of one run of ``arm`` from ``policy`` with ``bug`` planted (None: the correct
    run). ``config`` (default: the recipe) is a PPOConfig, or a DPOConfig for a DPO arm."""
    cfg = config or PPOConfig()
    if bug is None:
        return run_arm(arm, policy, rm, seed, None, cfg, evalset, progress=progress)[1]
    with planted(bug):
        return run_arm(arm, policy, rm, seed, None, cfg, evalset, progress=progress)[1]


def tell_value(log: dict, metric: str) -> float:
    """Return one number for ``metric`` of a run's log: its mean over the run (for the
    evaluation's curves, after the start, which is the same for every run)."""
    values = np.asarray(log[metric], dtype=float)
    if metric in ("accuracy", "rm_score", "kl"):
        values = values[1:]
    return float(values.mean())


def paired_difference(runs: dict, name: str, metric: str) -> dict:
    """Return the whole-run paired test of ``metric`` for bug ``name``: the correct and the buggy
    run's value (:func:`tell_value`; mean and 95% half-width over seeds), the paired difference,
    buggy minus correct seed by seed (mean and 95% half-width), and ``separates``, True when that
    interval excludes 0. ``runs`` is ``{"correct": {arm: {seed: log}}, bug_name: {seed: log}}``."""
    bug = BUGS[name]
    seeds = sorted(runs[name])
    good = [tell_value(runs["correct"][bug.arm][s], metric) for s in seeds]
    bad = [tell_value(runs[name][s], metric) for s in seeds]
    diff = mean_ci95([b - g for b, g in zip(bad, good)])
    return {
        "correct": mean_ci95(good),
        "buggy": mean_ci95(bad),
        "difference": diff,
        "separates": bool(abs(diff[0]) > diff[1]),
    }


def separating(runs: dict, name: str) -> tuple:
    """Return the metrics of bug ``name``'s dashboard (:data:`DASHBOARD`) that separate its run
    from the correct one by :func:`paired_difference`, in the dashboard's order."""
    return tuple(m for m in DASHBOARD[_trainer(BUGS[name].arm)] if paired_difference(runs, name, m)["separates"])


def tell_table(runs: dict, bugs=None, every: bool = False) -> dict:
    """Return per bug and metric :func:`paired_difference`: for the bug's tells, or with ``every``
    for every metric of its dashboard."""
    out = {}
    for name in bugs or [b for b in BUGS if b in runs]:
        metrics = DASHBOARD[_trainer(BUGS[name].arm)] if every else BUGS[name].tells
        out[name] = {metric: paired_difference(runs, name, metric) for metric in metrics}
    return out


# ----------------------------------------------------------------------------- checks before training
# Each reads the engine's functions through their modules at call time, so under planted(bug)
# it checks the buggy one. They need no training: a few forward and backward passes.


def _sample(policy, n: int = 64, seed: int = 0, temperature: float = 0.7):
    from .. import task
    from ..model import generate, make_generator

    g = make_generator(seed)
    pairs = task.sample_pairs(n, g)
    prompts = task.encode_prompts(pairs)
    return pairs, prompts, generate(policy, prompts, temperature, generator=g)


def _nudged(policy, scale: float = 0.3, seed: int = 1):
    # A copy of the policy moved a little away from it (its head's weights), standing in for the
    # policy after a few updates, so that policy and reference differ.
    import copy

    moved = copy.deepcopy(policy)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        moved.head.weight.add_(scale * torch.randn(moved.head.weight.shape, generator=g, dtype=moved.head.weight.dtype))
    return moved


def check_mask(policy, temperature: float = 0.7) -> tuple[bool, str]:
    """The completion mask keeps each answer up to and including its first `;`, judged from the
    text. Returns (passed, four answers with the masked tokens shown as `.`)."""
    from .. import ppo, task

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
    from .. import ppo
    from ..model import completion_logits

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
    from .. import ppo
    from ..model import completion_logits

    reference, moved = policy, _nudged(policy)
    _, prompts, completions = _sample(moved, temperature=temperature)
    mask = ppo.completion_mask(completions)
    with torch.no_grad():
        old = ppo.logprobs_from_logits(completion_logits(moved, prompts, completions), completions, temperature)
        ref = ppo.logprobs_from_logits(completion_logits(reference, prompts, completions), completions, temperature)
    adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2), dtype=old.dtype) * mask
    loss = ppo.grpo_token_loss(old, old, ref, adv, mask, 0.2, 0.0).item()
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
    from .. import ppo, task
    from ..model import completion_logits, exact_kl

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
        return ppo.k3_loss_term(new, ref, weight)

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
    from .. import dpo

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


# ----------------------------------------------------------------------------- the study

# The metrics a run's dashboard shows (TRL's names; "kl" and "accuracy" are the evaluation's),
# by the trainer of the arm.
DASHBOARD = {
    "ppo": (
        "accuracy",
        "kl",
        "objective/kl",
        "objective/entropy",
        "policy/clipfrac_avg",
        "policy/approxkl_avg",
        "val/completion_length",
        "objective/scores",
    ),
    "dpo": (
        "accuracy",
        "kl",
        "rewards/accuracies",
        "rewards/margins",
        "logps/chosen",
        "logps/rejected",
        "rewards/chosen",
        "rewards/rejected",
    ),
}


# What a run's stored log keeps besides its dashboard, by trainer: for DPO, the step of each
# evaluation (the x of its `accuracy` and `kl`), the share of each kind of greedy answer at each
# evaluation (``kinds``: right, near-miss, other wrong, malformed) and the held-out log-probs of
# the right answer and of two kinds of wrong one (minirlhf.dpo.HELDOUT_LOGPS), which say what a
# DPO run learns to write.
KEPT = {
    "ppo": (),
    "dpo": ("steps", "kinds", "heldout/logps_correct", "heldout/logps_random", "heldout/logps_near_miss"),
}

# The x axis of a dashboard, by trainer: what one point of a curve is.
X_LABEL = {"ppo": "iteration", "dpo": "DPO step"}

# The metrics of each trainer read by the evaluation (one point before training, then one after
# each iteration, or every few DPO steps); every other metric is logged on each training batch.
_EVALUATED = ("accuracy", "kl", "rm_score")


def _trainer(arm: str) -> str:
    from ..experiment import REGISTRY

    return REGISTRY[arm].trainer


def curve_x(log: dict, metric: str, trainer: str) -> np.ndarray:
    """Return the x of each point of ``metric``'s curve in ``log``, on one axis for the whole
    dashboard (:data:`X_LABEL`): for PPO and GRPO, the iteration (an evaluation's point 0 is
    before training, point i after iteration i; a batch metric's point i is iteration i + 1);
    for DPO, the step (an evaluation at the steps the log records, a batch metric at its own
    step, 1 to the last)."""
    if trainer not in X_LABEL:
        raise ValueError(f"trainer must be one of {', '.join(X_LABEL)}, got {trainer!r}")
    n = len(log[metric])
    if metric not in _EVALUATED:
        return np.arange(1, n + 1)
    if trainer == "dpo":
        if "steps" in log:
            return np.asarray(log["steps"][:n])
        from ..dpo import DPOConfig

        return np.arange(n) * DPOConfig().eval_every
    return np.arange(n)


def _dashboard_run(job, policy, rm, evalset, progress) -> dict:
    # One run of the study, in this process or a worker: (a bug's name, or an arm for its
    # correct run; the seed).
    who, seed = job
    bug = BUGS.get(who)
    arm = who if bug is None else bug.arm
    log = run_bug(bug, arm, policy, rm, seed, evalset, progress=progress)
    trainer = _trainer(arm)
    return {k: log[k] for k in (*DASHBOARD[trainer], *KEPT[trainer]) if k in log}


def study(
    seeds=(0, 1, 2), bugs=None, progress: bool = False, evalset=None, policy=None, rm=None, workers: int | None = None
) -> dict:
    """Return ``{"correct": {arm: {seed: log}}, bug: {seed: log}}``: every bug's run and the
    correct run of its arm, for each seed, from the partial-SFT policy (or ``policy``), keeping
    the :data:`DASHBOARD` metrics of each log. ``workers`` worker processes make the runs
    (None: one per core; :func:`minirlhf.parallel.map_runs`)."""
    from ..parallel import map_runs
    from ..store import load_rm, load_sft

    policy = policy if policy is not None else load_sft(progress=progress)[0]
    rm = rm if rm is not None else load_rm(progress=progress)[0]
    names = list(bugs or BUGS)
    arms = sorted({BUGS[name].arm for name in names})
    jobs = [(who, seed) for seed in seeds for who in [*arms, *names]]
    logs = map_runs(
        partial(_dashboard_run, policy=policy, rm=rm, evalset=evalset, progress=progress),
        jobs,
        workers,
        progress=progress,
        desc="silent bugs",
        label=lambda job: f"{job[0] if job[0] in BUGS else 'correct ' + job[0]} run, seed {job[1]}",
    )
    out = {"correct": {arm: {} for arm in arms}, **{name: {} for name in names}}
    for (who, seed), log in zip(jobs, logs):
        (out[who] if who in BUGS else out["correct"][who])[str(seed)] = log
    return out


def plot_dashboard(
    runs: dict, name: str, metrics=None, axes=None, label: str | None = None, narrow: bool = False, bold: bool = True
):
    """Draw a bug's run beside the correct one, one panel per metric (default: the arm's
    :data:`DASHBOARD`), mean over seeds with a 95% band; with ``bold``, its tells are titled
    in bold. Every panel has the same x axis, the iteration or the DPO step (:func:`curve_x`),
    named under the last panel of each column. ``label`` names the buggy run in the legend
    (default: the bug's name); ``narrow`` draws two panels a row instead of four. Return the
    axes."""
    import matplotlib.pyplot as plt

    from ..palette import GRAY, ORANGE

    bug = BUGS[name]
    metrics = list(metrics or DASHBOARD[_trainer(bug.arm)])
    if axes is None:
        cols = min(2 if narrow else 4, len(metrics))
        rows = (len(metrics) + cols - 1) // cols
        size = (3.6, 1.9 * rows) if narrow else (2.0 * cols, 2.3 * rows)
        _, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
    grid = np.asarray(axes, dtype=object)
    cols = grid.shape[1] if grid.ndim == 2 else 1  # a flat list of axes: one column
    axes = list(np.ravel(axes))
    trainer = _trainer(bug.arm)
    for i, (ax, metric) in enumerate(zip(axes, metrics)):
        for who, logs, color in (("correct", runs["correct"][bug.arm], GRAY), (label or name, runs[name], ORANGE)):
            curves = np.array([log[metric] for log in logs.values()], dtype=float)
            x = curve_x(next(iter(logs.values())), metric, trainer)
            mean = curves.mean(0)
            ax.plot(x, mean, color=color, lw=2, label=who)
            if len(curves) > 1:
                half = np.array([mean_ci95(curves[:, j])[1] for j in range(curves.shape[1])])
                ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, lw=0)
        ax.set_title(metric, fontsize=9, fontweight="bold" if bold and metric in bug.tells else "normal")
        if i + cols >= len(metrics):  # every panel on one x axis, named under each column's last
            ax.set_xlabel(X_LABEL[trainer], fontsize=8)
        ax.tick_params(labelsize=7 if narrow else 8)
        ax.grid(alpha=0.3)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    axes[0].legend(frameon=False, fontsize=8)
    return axes


def _kept_curve(log: dict, key: str) -> np.ndarray:
    # A kept curve of a DPO log by its key; "kinds/<kind>" reads the share of that kind.
    if key.startswith("kinds/"):
        return np.asarray(log["kinds"][key.split("/", 1)[1]], dtype=float)
    return np.asarray(log[key], dtype=float)


def what_it_writes(
    runs: dict,
    name: str,
    keys=(
        "heldout/logps_correct",
        "heldout/logps_random",
        "heldout/logps_near_miss",
        "kinds/correct",
        "kinds/near_miss",
    ),
) -> dict:
    """Return, for a DPO bug's run and the correct DPO run, what each learns to write: per key
    (a held-out log-prob of :data:`minirlhf.dpo.HELDOUT_LOGPS`, or ``kinds/<kind>``, the share
    of the greedy answers of that kind), its value at the start (the same for both runs: the
    starting policy), each run's change from the start to the last evaluation (mean and 95%
    half-width over seeds) and the paired difference of those changes, buggy minus correct
    seed by seed. The runs must have been kept with :data:`KEPT`'s keys (:func:`study`)."""
    bug = BUGS[name]
    if _trainer(bug.arm) != "dpo":
        raise ValueError(f"name must be a DPO bug, got {name!r} (the {bug.arm} arm)")
    seeds = sorted(runs[name])
    out = {}
    for key in keys:
        good = [_kept_curve(runs["correct"][bug.arm][s], key) for s in seeds]
        bad = [_kept_curve(runs[name][s], key) for s in seeds]
        out[key] = {
            "start": float(good[0][0]),
            "correct": mean_ci95([g[-1] - g[0] for g in good]),
            "buggy": mean_ci95([b[-1] - b[0] for b in bad]),
            "difference": mean_ci95([(b[-1] - b[0]) - (g[-1] - g[0]) for g, b in zip(good, bad)]),
        }
    return out


def _fixed_run(seed, bug, policy, rm, evalset, progress) -> dict:
    return run_bug(bug, bug.arm, policy, rm, seed, evalset, progress=progress)


def band_check(
    name: str,
    fn: Callable,
    runs: dict,
    progress: bool = False,
    policy=None,
    rm=None,
    evalset=None,
    workers: int | None = None,
) -> dict:
    """Run a learner's fix of bug ``name`` in the engine and say whether it lands in the band.

    ``fn`` replaces the engine's function as the bug's copy did, for each seed of the stored
    ``runs`` (:func:`study`'s layout), the seeds' runs made by ``workers`` worker processes
    (None: one per core; :func:`minirlhf.parallel.map_runs`). Returns per tell: the fixed
    runs' value (mean over seeds), the correct runs' band (mean ± 95% half-width) and
    ``inside``; and ``passed``, True when every tell is inside.
    """
    import dataclasses

    from ..parallel import map_runs
    from ..store import load_rm, load_sft

    bug = BUGS[name]
    fixed_bug = dataclasses.replace(bug, copy=fn)
    policy = policy if policy is not None else load_sft(progress=progress)[0]
    rm = rm if rm is not None else load_rm(progress=progress)[0]
    correct = runs["correct"][bug.arm]
    fixed = dict(
        zip(
            correct,
            map_runs(
                partial(_fixed_run, bug=fixed_bug, policy=policy, rm=rm, evalset=evalset, progress=progress),
                [int(seed) for seed in correct],
                workers,
                progress=progress,
                desc=f"your fix of {name}",
                label=lambda seed: f"{bug.arm} run, seed {seed}",
            ),
        )
    )
    out = {}
    for metric in bug.tells:
        band = mean_ci95([tell_value(correct[s], metric) for s in correct])
        value = float(np.mean([tell_value(fixed[s], metric) for s in correct]))
        out[metric] = {"fixed": value, "band": band, "inside": abs(value - band[0]) <= band[1]}
    out["passed"] = all(row["inside"] for row in out.values())
    return out


def point_differences(runs: dict, name: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (x, mean, half) of ``metric``'s curve, point by point: at each point the seeds'
    differences, buggy minus correct, seed by seed, their mean and the half-width of their 95%
    t-interval (NaN with one seed). ``x`` is the dashboard's axis (:func:`curve_x`)."""
    bug = BUGS[name]
    seeds = sorted(runs[name])
    good = np.array([runs["correct"][bug.arm][s][metric] for s in seeds], dtype=float)
    bad = np.array([runs[name][s][metric] for s in seeds], dtype=float)
    n = min(good.shape[1], bad.shape[1])
    rows = [mean_ci95(bad[:, i] - good[:, i]) for i in range(n)]
    x = curve_x(runs[name][seeds[0]], metric, _trainer(bug.arm))[:n]
    return x, np.array([m for m, _ in rows]), np.array([h for _, h in rows])


def first_departure(runs: dict, name: str, metric: str, k: int = 3) -> int | None:
    """Return the first x (an iteration, or a DPO step: :func:`curve_x`) from which ``metric``
    of bug ``name``'s run stays apart from the correct run's for ``k`` points in a row; None if
    it never does, or if the panel does not separate the runs over the whole run.

    The rule, and what it guards against:

    - Only a panel that separates the runs by the whole-run paired test
      (:func:`paired_difference`) is timed. For a panel that the bug does not move, the chance
      of a time at all is then that test's own 5% (per panel, as in the chapter's table), not
      5% at each of the curve's points.
    - A point is apart when the seeds' differences there, buggy minus correct seed by seed
      (:func:`point_differences`), have a 95% interval that excludes 0, on the side of the
      whole-run difference. Both runs' noise is in it, since each seed pairs a buggy and a
      correct run, and no band of the correct run alone is used: where every correct seed is
      exactly 0, a buggy seed that is 0 too gives a difference of 0, which keeps 0 inside the
      interval. Differences that are all equal and not 0 (every seed's first batch moved by
      the same amount) are apart; differences that are all 0 never are.
    - ``k`` points in a row, so that a one-point blip does not time the panel.

    The time found is a description of the curves, not a test of its own: the first point of
    the ``k`` may still be early or late by the noise of three seeds.
    """
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        raise ValueError(f"k must be a whole number >= 1, got {k!r}")
    whole = paired_difference(runs, name, metric)
    if not whole["separates"]:
        return None
    side = np.sign(whole["difference"][0])
    x, mean, half = point_differences(runs, name, metric)
    apart = np.isfinite(half) & (side * mean > half)
    for i in range(len(apart) - k + 1):
        if apart[i : i + k].all():
            return int(x[i])
    return None
