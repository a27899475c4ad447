"""The reward model: the same tiny network with a scalar head, trained on preference pairs.

Each training pair holds a prompt, the correct answer (chosen) and a random wrong number
(rejected), and the loss is Bradley-Terry's ``-log sigmoid(r_chosen - r_rejected)``. The
rejected numbers are *garbage*: drawn at random from 0..198, never within 10 of the truth
(see :func:`minirlhf.task.random_wrong_numbers`). To separate such pairs the model only has
to judge the size of the answer: ``190;`` cannot be the sum of ``23+45=``. Nothing in its data
asks it to tell ``68;`` from ``67;`` or ``78;``, and a short run (100 steps) learns size and
length first. It ranks what it was shown, which is not what is true.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from . import task
from .model import GPTConfig, TinyGPT, make_generator, reward_scores
from .progress import progress_bar

__all__ = [
    "RMConfig",
    "bradley_terry_loss",
    "preference_batch",
    "train_reward_model",
    "pair_margins",
    "margin_by_offset",
    "rm_report",
    "margins_report",
    "trained_rm_report",
    "HELDOUT_SEED",
]

HELDOUT_SEED = 7  # draws the wrong answers of the held-out pairs (on the eval prompts)


@dataclass
class RMConfig:
    """Settings of the reward model's training run.

    Defined in chapter 4.
    """

    steps: int = 100
    """Optimizer steps on fresh pairs. Short on purpose: see the module docstring."""
    batch_size: int = 128
    """Preference pairs per step; prompts come from the training pairs (eval pairs excluded)."""
    lr: float = 1e-3
    """AdamW learning rate, constant."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    seed: int = 0
    """Seeds the initial weights and the pairs."""
    dtype: str = "float64"
    """The network's dtype (:class:`~minirlhf.model.GPTConfig`): float64, as the policy's."""


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """Return the mean of -log sigmoid(r_chosen - r_rejected) over the pairs (a scalar tensor).

    Written with ``F.logsigmoid``, which stays finite for a margin of -100.

    Defined in chapter 4.
    """
    if r_chosen.shape != r_rejected.shape:
        raise ValueError(f"r_chosen {tuple(r_chosen.shape)} and r_rejected {tuple(r_rejected.shape)} differ in shape")
    return -F.logsigmoid(r_chosen - r_rejected).mean()


def preference_batch(pairs: torch.Tensor, generator: torch.Generator, kind: str = "random"):
    """Return (prompts (B, 6), chosen (B, 4), rejected (B, 4)): right answer vs a wrong one of ``kind``.

    Defined in chapter 4.
    """
    return (
        task.encode_prompts(pairs),
        task.correct_completions(pairs),
        task.wrong_answers(pairs, kind, generator),
    )


def train_reward_model(
    config: RMConfig | None = None,
    progress: bool = True,
    init: TinyGPT | None = None,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[TinyGPT, dict]:
    """Return (rm, log): a scalar-head TinyGPT trained with Bradley-Terry, and its loss per step.

    ``data`` None (the book's RM) draws fresh pairs at every step: ``steps x batch_size`` of
    them in all (12,800). A fixed set ``(prompts (N, 6), chosen (N, 4), rejected (N, 4))``
    instead gives each step ``batch_size`` rows of it drawn at random with replacement, so the
    same number of steps sees N distinct pairs, each about ``steps x batch_size / N`` times
    (chapter 11 trains proxies on fewer pairs this way; :func:`minirlhf.dpo.preference_pairs`
    gives the book's pairs as such a set).

    ``init`` None (the book's RM) starts every weight at random. A language model ``init`` (a
    policy, such as chapter 3's SFT policy) gives the RM its body: every weight but the head
    is copied from ``init`` (not changed), and only the scalar head starts at random, the same
    head as with ``init`` None for the same seed. That is how InstructGPT starts its RM, from
    a language model with its last layer replaced; chapter 9 compares the two starts.
    """
    cfg = config or RMConfig()
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise ValueError("config.steps and config.batch_size must be >= 1")
    gpt_cfg = GPTConfig(dtype=cfg.dtype)
    if init is not None:
        if not isinstance(init, TinyGPT) or init.scalar_head:
            raise ValueError(
                "init must be a TinyGPT language model (scalar_head=False), "
                f"got {type(init).__name__}"
                f"{' with a scalar head' if isinstance(init, TinyGPT) else ''}"
            )
        if init.cfg != gpt_cfg:
            raise ValueError(f"init has the shape {init.cfg}, the RM needs {gpt_cfg}")
    torch.manual_seed(cfg.seed)
    rm = TinyGPT(gpt_cfg, scalar_head=True)
    if init is not None:  # the body from init; the head keeps its random start
        body = {k: v for k, v in init.state_dict().items() if not k.startswith("head.")}
        missing, unexpected = rm.load_state_dict(body, strict=False)
        assert not unexpected and set(missing) == {"head.weight", "head.bias"}, (missing, unexpected)
    if data is not None:
        _check_data(data)
    g = make_generator(cfg.seed)
    pool = task.train_pairs()
    opt = torch.optim.AdamW(rm.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    log = {"loss": [], "accuracy": []}
    bar = progress_bar(total=cfg.steps, desc="reward model", enabled=progress)
    for _ in range(cfg.steps):
        if data is None:
            prompts, chosen, rejected = preference_batch(task.sample_pairs(cfg.batch_size, g, pool), g)
        else:
            rows = torch.randint(len(data[0]), (cfg.batch_size,), generator=g)
            prompts, chosen, rejected = (x[rows] for x in data)
        scores = reward_scores(rm, prompts.repeat(2, 1), torch.cat([chosen, rejected]))  # (2B,): one pass
        r_chosen, r_rejected = scores.chunk(2)  # (B,) each
        loss = bradley_terry_loss(r_chosen, r_rejected)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        log["loss"].append(loss.item())
        log["accuracy"].append((r_chosen > r_rejected).double().mean().item())
        bar.update(1)
    bar.close()
    rm.eval()
    return rm, log


def _check_data(data) -> None:
    shapes = {"prompts": task.PROMPT_LEN, "chosen": task.COMPLETION_LEN, "rejected": task.COMPLETION_LEN}
    if not (isinstance(data, tuple | list) and len(data) == 3):
        raise ValueError("data must be (prompts, chosen, rejected), three tensors of token ids")
    for (name, width), x in zip(shapes.items(), data):
        if not (isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape == (len(data[0]), width) and len(x)):
            raise ValueError(
                f"data's {name} must be a (N, {width}) tensor of token ids with N >= 1 rows as in prompts, "
                f"got {tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
            )


@torch.no_grad()
def pair_margins(rm: TinyGPT, kind: str, pairs: torch.Tensor | None = None, seed: int = HELDOUT_SEED) -> torch.Tensor:
    """Return r(correct) - r(wrong answer of ``kind``) for each held-out pair (N,).

    The default pairs are the 400 eval prompts, which the RM never trained on.

    Defined in chapter 4.
    """
    pairs = task.eval_pairs() if pairs is None else pairs
    prompts, chosen, rejected = preference_batch(pairs, make_generator(seed), kind)
    return reward_scores(rm, prompts, chosen) - reward_scores(rm, prompts, rejected)


@torch.no_grad()
def margin_by_offset(rm: TinyGPT, offsets, pairs: torch.Tensor | None = None) -> dict:
    """Return ``{offset: mean of r(truth) - r(truth + offset)}`` over the held-out prompts.

    Prompts whose truth + offset would be negative or longer than 3 digits are left out of
    that offset's mean. A margin near 0 means the RM cannot tell that answer from the truth.
    """
    pairs = task.eval_pairs() if pairs is None else pairs
    prompts, truth = task.encode_prompts(pairs), pairs.sum(1)
    r_truth = reward_scores(rm, prompts, task.encode_answers(truth.tolist()))  # (N,)
    out = {}
    for d in offsets:
        wrong = truth + int(d)
        ok = (wrong >= 0) & (wrong <= 999)
        if not ok.any():
            raise ValueError(f"offset {d} leaves no valid answer")
        r_wrong = reward_scores(rm, prompts[ok], task.encode_answers(wrong[ok].tolist()))
        out[int(d)] = (r_truth[ok] - r_wrong).double().mean().item()
    return out


def rm_report(rm: TinyGPT) -> dict:
    """Return the RM's held-out numbers: pair and near-miss accuracy, and margins by kind.

    ``{'pair_accuracy', 'near_miss_accuracy', 'margin': {kind: mean margin},
    'accuracy': {kind: fraction ranked right}}`` for the kinds of
    :data:`minirlhf.task.WRONG_KINDS`.

    Defined in chapter 4.
    """
    return margins_report({kind: pair_margins(rm, kind) for kind in task.WRONG_KINDS})


def trained_rm_report(seed: int, init: TinyGPT | None = None, config: RMConfig | None = None) -> dict:
    """Return :func:`rm_report` of an RM trained with ``config`` (None: :class:`RMConfig`'s
    defaults), its seed replaced by ``seed``, from ``init`` (see :func:`train_reward_model`).

    One item for :func:`minirlhf.parallel.map_runs`: chapter 9 trains the book's RM over five
    seeds from random weights and from the SFT policy, and measures each like this.
    """
    if not (isinstance(seed, int) and seed >= 0):
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    cfg = replace(config or RMConfig(), seed=seed)
    rm, _ = train_reward_model(cfg, progress=False, init=init)
    return rm_report(rm)


def margins_report(margins: dict) -> dict:
    """Return the layout of :func:`rm_report` from ``{kind: margins (N,)}``, one margin
    r(correct) - r(wrong answer of that kind) per held-out pair: the share ranked right and
    the mean margin per kind, and the pair and near-miss accuracy. Chapter 9 reads DPO's
    implicit reward with it too.
    """
    acc = {kind: (m > 0).double().mean().item() for kind, m in margins.items()}
    return {
        "pair_accuracy": acc["random"],
        "near_miss_accuracy": acc["near_miss"],
        "margin": {kind: m.double().mean().item() for kind, m in margins.items()},
        "accuracy": acc,
    }
