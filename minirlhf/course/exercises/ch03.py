"""Chapter 3 exercise: the SFT loss, masked to the completion tokens."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...sft import masked_sft_loss
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectScalarTensor
from ._inputs import batch_size

STAY_IN_LOG_SPACE = (
    "a probability underflowed to 0 before its log was taken; stay in log space "
    "(log_softmax, logsigmoid) instead of log(softmax(...))"
)


def _t(values, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


LOG3 = math.log(3.0)


def _random_kwargs(rng: np.random.Generator) -> dict:
    B, T, V = batch_size(rng, 4), int(rng.integers(1, 10)), int(rng.integers(2, 14))
    mask = (rng.random((B, T)) < 0.6).astype(np.int64)
    mask[int(rng.integers(B)), int(rng.integers(T))] = 1  # at least one position counts
    return {
        "logits": torch.from_numpy(rng.normal(0, 2.0, (B, T, V)).astype(np.float32)),
        "targets": torch.from_numpy(rng.integers(0, V, (B, T))),
        "mask": torch.from_numpy(mask if rng.random() < 0.3 else mask.astype(np.float32)),
    }


def _slip(kind: str):
    """Return masked_sft_loss with one usual slip (see ``SLIPS``)."""
    known_slip(kind, ("no-mask", "mean-over-all", "row-means"))

    def loss(logits, targets, mask):
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
        mask = mask.float()
        if kind == "no-mask":
            return ce.mean()
        if kind == "mean-over-all":
            return (ce * mask).mean()
        return ((ce * mask).sum(1) / mask.sum(1)).mean()  # "row-means"

    return loss


SLIPS = (
    Slip("no-mask", _slip("no-mask"), "that is the mean over every position, the prompt's too: multiply by the mask"),
    Slip(
        "mean-over-all",
        _slip("mean-over-all"),
        "that is .mean() of the masked losses, which divides by B * T: divide by mask.sum()",
    ),
    Slip(
        "row-means",
        _slip("row-means"),
        "that is the mean of the rows' means: average over all counted positions at once",
    ),
)


MASKED_SFT_LOSS = Exercise(
    name="masked_sft_loss",
    chapter=3,
    title="The masked SFT loss",
    expect=ExpectScalarTensor(atol=1e-4, per="position", why_inf=STAY_IN_LOG_SPACE, slips=SLIPS, grad_wrt=("logits",)),
    cases=(
        Case(
            {"logits": torch.zeros(1, 3, 13), "targets": _t([[0, 5, 12]], torch.long), "mask": torch.ones(1, 3)},
            math.log(13),
            "uniform logits over 13 tokens: every position costs log 13",
        ),
        Case(
            {"logits": _t([[[0.0, math.log(3.0)]]]), "targets": _t([[1]], torch.long), "mask": _t([[1.0]])},
            math.log(4 / 3),
            "one position, p(target) = 3/4: the loss is log(4/3)",
        ),
        Case(
            {
                "logits": _t([[[0, 0, 0], [2, 0, 0], [0, 0, 5]]]),
                "targets": _t([[2, 0, 0]], torch.long),
                "mask": _t([[0.0, 1.0, 0.0]]),
            },
            math.log(1 + 2 * math.exp(-2)),
            "only the middle position counts: log(1 + 2 e^-2)",
        ),
        Case(
            {
                "logits": _t([[[0, 0, 8], [0, 0, 8], [0, 0, 0], [0, 0, 0]]]),
                "targets": _t([[0, 0, 1, 2]], torch.long),
                "mask": _t([[0.0, 0.0, 1.0, 1.0]]),
            },
            LOG3,
            "two badly predicted prompt positions (mask 0) must not count: log 3 from the answer only",
        ),
        Case(
            {
                "logits": _t([[[0, 0], [0, 0], [0, 0]], [[0, math.log(3.0)], [5, 0], [0, 5]]]),
                "targets": _t([[0, 1, 0], [0, 1, 0]], torch.long),
                "mask": _t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
            },
            1.25 * math.log(2),
            "rows with 3 and 1 counted positions: (3 log 2 + log 4) / 4, a mean over "
            "positions, not a mean of row means",
        ),
        Case(
            {"logits": _t([[[1000, 0, 0], [0, 0, 0]]]), "targets": _t([[1, 0]], torch.long), "mask": torch.ones(1, 2)},
            (1000 + LOG3) / 2,
            "a logit of 1000: (1000 + log 3) / 2, finite only in log space",
        ),
        Case(
            {
                "logits": torch.zeros(2, 9, 13),
                "targets": _t([[12, 12, 2, 3, 4, 5, 6, 7, 8]] * 2, torch.long),
                "mask": _t([[0, 0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1, 1, 0, 0]], torch.long),
            },
            math.log(13),
            "a batch shaped like the book's (2, 9, 13) with an integer mask: log 13",
        ),
    ),
    hints=(
        "Get one cross-entropy per position first. `F.cross_entropy` takes logits (N, V) and targets (N,), so "
        'flatten the batch and time axes with `.flatten(0, 1)` and pass `reduction="none"` to keep all N losses.',
        "Reshape the losses back to (B, T) and multiply by `mask.float()`, which zeroes every prompt position. "
        "Then do not call `.mean()`: it divides by B * T and so still counts the positions you zeroed. Divide by "
        "the number of ones in the mask.",
        '`ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)`, '
        "then `mask = mask.float()` and `return (ce * mask).sum() / mask.sum()`.",
    ),
    reference=masked_sft_loss,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.model.logprobs_from_logits",
        "minirlhf.studies.silent_bugs.copies.logprobs_from_logits_no_temperature",
        "minirlhf.leashes.reward.ppo_token_loss",
    ),
    random_kwargs=_random_kwargs,
    # cross-entropy in log space, per position (1), the mask and the division (2), the tensor (3)
    hint_for={
        "no-grad": 3,
        "grad": 3,
        "inf": 1,
        "nan": 2,
        "no-mask": 2,
        "mean-over-all": 2,
        "row-means": 2,
        "not-averaged": 2,
        "not-a-tensor": 3,
    },
)

IN_THIS_CHAPTER = (MASKED_SFT_LOSS,)
