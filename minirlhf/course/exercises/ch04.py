"""Chapter 4 exercise: the Bradley-Terry loss of the reward model."""

import math

import numpy as np
import torch
import torch.nn.functional as F

from ...reward_model import bradley_terry_loss
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectScalarTensor
from ._inputs import batch_size
from .ch03 import STAY_IN_LOG_SPACE


def _softplus(x: float) -> float:
    """Return -log sigmoid(-x) = log(1 + e^x), worked without overflow."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _case(chosen, rejected, expected, why) -> Case:
    return Case(
        {
            "r_chosen": torch.tensor(chosen, dtype=torch.float32),
            "r_rejected": torch.tensor(rejected, dtype=torch.float32),
        },
        expected,
        why,
    )


def _random_kwargs(rng: np.random.Generator) -> dict:
    n = batch_size(rng, 32)
    scale = 60.0 if rng.random() < 0.2 else 3.0  # now and then margins far beyond float32's exp
    return {
        "r_chosen": torch.from_numpy(rng.normal(0, scale, n).astype(np.float32)),
        "r_rejected": torch.from_numpy(rng.normal(0, scale, n).astype(np.float32)),
    }


def _slip(kind: str):
    """Return bradley_terry_loss with one usual slip (see ``SLIPS``)."""
    known_slip(kind, ("two-sigmoids", "swapped", "abs-margin", "sum"))

    def loss(r_chosen, r_rejected):
        if kind == "two-sigmoids":
            return (-F.logsigmoid(r_chosen) - F.logsigmoid(-r_rejected)).mean()
        margin = {"swapped": r_rejected - r_chosen, "abs-margin": (r_chosen - r_rejected).abs()}.get(
            kind, r_chosen - r_rejected
        )
        terms = -F.logsigmoid(margin)
        return terms.sum() if kind == "sum" else terms.mean()

    return loss


SLIPS = (
    Slip(
        "margin-sign",
        _slip("swapped"),
        "that is the loss with chosen and rejected swapped: the margin is r_chosen - r_rejected",
    ),
    Slip("margin-sign", _slip("abs-margin"), "that is the loss of abs(margin): the sign of the margin matters"),
    Slip(
        "two-sigmoids", _slip("two-sigmoids"), "that scores each answer on its own: the loss depends on the margin only"
    ),
    Slip("sum", _slip("sum"), "that is a sum over the pairs: take the mean"),
)


BRADLEY_TERRY_LOSS = Exercise(
    name="bradley_terry_loss",
    chapter=4,
    title="The Bradley-Terry loss",
    expect=ExpectScalarTensor(
        atol=1e-4, per="pair", why_inf=STAY_IN_LOG_SPACE, slips=SLIPS, grad_wrt=("r_chosen", "r_rejected")
    ),
    cases=(
        _case([0.0], [0.0], math.log(2), "equal scores: the model is unsure, -log(1/2) = log 2"),
        _case([2.0], [0.0], _softplus(-2.0), "margin +2: log(1 + e^-2)"),
        _case([0.0], [2.0], _softplus(2.0), "margin -2, the wrong order: log(1 + e^2), much larger"),
        _case([105.0], [103.0], _softplus(-2.0), "only the margin counts: the same +2 margin, shifted by 103"),
        _case(
            [1.0, 2.0, 3.0],
            [0.0, 0.0, 0.0],
            (_softplus(-1.0) + _softplus(-2.0) + _softplus(-3.0)) / 3,
            "a batch of three pairs: the mean of their losses",
        ),
        _case(
            [2.0, 0.0],
            [0.0, 2.0],
            (_softplus(-2.0) + _softplus(2.0)) / 2,
            "one pair right, one wrong: the sign of the margin matters, no abs()",
        ),
        _case([-60.0], [40.0], 100.0, "margin -100: the loss is 100, and it must stay finite"),
        _case([30.0], [-30.0], _softplus(-60.0), "margin +60: a confident right order costs almost nothing"),
    ),
    hints=(
        "Everything depends on one number per pair, the margin `r_chosen - r_rejected`. The model's probability "
        "that the chosen answer wins is `torch.sigmoid(margin)`; the loss is minus its log, averaged over pairs.",
        "On paper `-torch.log(torch.sigmoid(margin)).mean()` is it, but in float32 the sigmoid of -100 rounds to "
        "exactly 0 and its log is -inf. `torch.nn.functional` has a function that computes the log of the "
        "sigmoid in one step, without forming the sigmoid.",
        "`return -torch.nn.functional.logsigmoid(r_chosen - r_rejected).mean()`",
    ),
    reference=bradley_terry_loss,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.dpo.dpo_loss",
        "minirlhf.studies.silent_bugs.copies.dpo_loss_rejected_flipped",
    ),
    random_kwargs=_random_kwargs,
    # the margin, its sigmoid and the mean (1), staying in log space (2), the tensor (3)
    hint_for={
        "margin-sign": 1,
        "two-sigmoids": 1,
        "sum": 1,
        "not-averaged": 1,
        "sign": 1,
        "inf": 2,
        "nan": 2,
        "not-a-tensor": 3,
        "no-grad": 3,
        "grad": 3,
    },
)

IN_THIS_CHAPTER = (BRADLEY_TERRY_LOSS,)
