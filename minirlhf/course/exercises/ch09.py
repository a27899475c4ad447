"""Chapter 9 exercise: DPO's loss, Bradley-Terry's on the implicit rewards."""

import numpy as np
import torch
import torch.nn.functional as F

from ...dpo import dpo_loss
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectScalarTensor
from ._inputs import as_tensor, batch_size
from .ch03 import STAY_IN_LOG_SPACE
from .ch04 import _softplus

NAMES = ("policy_chosen_logps", "policy_rejected_logps", "ref_chosen_logps", "ref_rejected_logps")


def _case(pc, pr, rc, rr, expected, why, beta=0.1) -> Case:
    values = dict(zip(NAMES, (as_tensor(x) for x in (pc, pr, rc, rr))))
    return Case({**values, "beta": beta}, expected, why)


def _random_kwargs(rng: np.random.Generator) -> dict:
    """B pairs of sequence log-probs: the reference's, and the policy's a little or far from them."""
    B = batch_size(rng, 16)
    ref = rng.uniform(-14.0, -0.5, (2, B))  # sums of 2 to 4 token log-probs
    drift = 40.0 if rng.random() < 0.2 else float(rng.choice([0.3, 2.0]))  # now and then a runaway policy
    policy = np.minimum(ref + rng.normal(0.0, drift, (2, B)), -1e-3)  # a log-prob is below 0
    return {
        **dict(zip(NAMES, (as_tensor(x) for x in (*policy, *ref)))),
        "beta": float(rng.choice([0.1, 0.5, 1.25, 3.0])),
    }


def _slip(kind: str):
    """Return dpo_loss with one usual slip (see ``SLIPS``)."""
    known_slip(
        kind,
        (
            "no-reference",
            "crossed-reference",
            "one-term-flipped",
            "swapped",
            "no-beta",
            "beta-outside",
            "unstable",
            "sigmoid",
            "sum",
        ),
    )

    def loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1):
        pc, pr, rc, rr = policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        chosen, rejected = pc - rc, pr - rr  # the log-ratios
        if kind == "no-reference":
            chosen, rejected = pc, pr
        if kind == "crossed-reference":
            chosen, rejected = pc - rr, pr - rc
        if kind == "one-term-flipped":  # the rejected term's log-ratio upside down
            rejected = rr - pr
        margin = beta * (chosen - rejected)
        if kind == "swapped":
            margin = -margin
        if kind == "no-beta":
            margin = chosen - rejected
        if kind == "beta-outside":
            return -beta * F.logsigmoid(chosen - rejected).mean()
        if kind == "unstable":
            return -torch.log(torch.sigmoid(margin)).mean()
        if kind == "sigmoid":
            return -torch.sigmoid(margin).mean()
        terms = -F.logsigmoid(margin)
        return terms.sum() if kind == "sum" else terms.mean()

    return loss


SLIPS = (
    Slip(
        "margin-sign",
        _slip("swapped"),
        "that is the loss with chosen and rejected swapped: the margin is the chosen log-ratio minus "
        "the rejected one, so that the loss falls as the chosen answer gains",
    ),
    Slip(
        "one-term",
        _slip("one-term-flipped"),
        "that turns one log-ratio upside down, ref_rejected_logps - policy_rejected_logps: both "
        "log-ratios are policy minus reference",
    ),
    Slip(
        "reference",
        _slip("no-reference"),
        "that leaves the reference out: each side's log-ratio is policy minus reference, which is what "
        "keeps the policy near the reference",
    ),
    Slip(
        "reference",
        _slip("crossed-reference"),
        "that subtracts the reference's log-prob of the other answer: the chosen answer's log-ratio uses "
        "ref_chosen_logps, the rejected one's ref_rejected_logps",
    ),
    Slip("beta", _slip("no-beta"), "that leaves beta out: the margin is beta times the difference of the log-ratios"),
    Slip(
        "beta",
        _slip("beta-outside"),
        "that multiplies the loss by beta: beta goes inside, on the margin, where it sets how far the policy may move",
    ),
    Slip(
        "sigmoid",
        _slip("sigmoid"),
        "that is minus the sigmoid: the loss is minus the log of the sigmoid (Bradley-Terry's)",
    ),
    Slip("sum", _slip("sum"), "that is a sum over the pairs: take the mean"),
    Slip("inf", _slip("unstable"), "that is log(sigmoid(...)): " + STAY_IN_LOG_SPACE),
)

LOG2 = float(np.log(2.0))

DPO_LOSS = Exercise(
    name="dpo_loss",
    chapter=9,
    title="DPO's loss: Bradley-Terry on the implicit rewards",
    expect=ExpectScalarTensor(
        atol=1e-4,
        per="pair",
        why_inf=STAY_IN_LOG_SPACE,
        sign_hint="the loss is minus the log of the sigmoid, because the optimizer minimises it",
        slips=SLIPS,
        grad_wrt=("policy_chosen_logps", "policy_rejected_logps"),
    ),
    cases=(
        _case(
            [-3.0, -5.0],
            [-4.0, -2.0],
            [-3.0, -5.0],
            [-4.0, -2.0],
            LOG2,
            "the policy is the reference: every log-ratio 0, margin 0, so log 2 = 0.6931 (the "
            "first step of every DPO run)",
        ),
        _case(
            [-1.0],
            [-3.0],
            [-2.0],
            [-2.0],
            _softplus(-1.0),
            "log-ratios +1 (chosen) and -1 (rejected), margin 0.5 * (1 - (-1)) = 1: log(1 + e^-1) = 0.3133",
            beta=0.5,
        ),
        _case(
            [-1.0],
            [-3.0],
            [-2.0],
            [-2.0],
            _softplus(-2.0),
            "the same pair at beta 1: margin 2, log(1 + e^-2) = 0.1269; beta scales the margin, not the "
            "loss (0.5 * 0.3133 would be beta outside)",
            beta=1.0,
        ),
        _case(
            [-1.0],
            [-2.0],
            [-0.5],
            [-3.0],
            _softplus(1.5),
            "the policy prefers the chosen answer (-1 > -2), but less than the reference did: log-ratios "
            "-0.5 and +1, margin -1.5, so log(1 + e^1.5) = 1.7014 (without the reference 0.3133)",
            beta=1.0,
        ),
        _case(
            [-2.0],
            [-1.0],
            [-2.5],
            [-3.0],
            _softplus(1.5),
            "log-ratios +0.5 and +2: the rejected answer gained more, margin -1.5, loss 1.7014; "
            "crossing the references gives 1 - 1.5 = -0.5 and 0.9741",
            beta=1.0,
        ),
        _case(
            [-2.0, -1.0],
            [-2.0, -3.0],
            [-2.0, -2.0],
            [-2.0, -2.0],
            (LOG2 + _softplus(-2.0)) / 2,
            "two pairs, margins 0 and 1 * (1 - (-1)) = 2: the mean of 0.6931 and 0.1269 is 0.4100 (their sum 0.8200)",
            beta=1.0,
        ),
        _case(
            [-201.0],
            [-1.0],
            [-1.0],
            [-1.0],
            200.0,
            "a runaway policy: the chosen answer's log-ratio is -200, margin -200, loss 200; "
            "sigmoid(-200) is exactly 0 in float32, so log(sigmoid(...)) gives infinity",
            beta=1.0,
        ),
        _case(
            [-0.5, -7.0, -2.0],
            [-9.0, -1.0, -2.5],
            [-2.0, -6.0, -2.0],
            [-6.0, -2.0, -2.0],
            (_softplus(-0.45) + _softplus(0.2) + _softplus(-0.05)) / 3,
            "three pairs at the default beta 0.1: margins 0.1 * (1.5 + 3) = 0.45, 0.1 * (-1 - 1) = -0.2 "
            "and 0.1 * (0 + 0.5) = 0.05, so log(1 + e^-m) = 0.4932, 0.7981 and 0.6685, mean 0.6533",
        ),
    ),
    hints=(
        "Each answer's implicit reward is beta times its log-ratio against the reference: "
        "`beta * (policy_chosen_logps - ref_chosen_logps)` for the chosen answer, likewise for the rejected "
        "one with its own reference log-prob.",
        "The loss is chapter 4's Bradley-Terry loss on the implicit rewards: the margin is the chosen "
        "answer's implicit reward minus the rejected one's, and the loss is minus the log of its sigmoid, "
        "averaged over the pairs.",
        "In float32 `torch.sigmoid(-200.0)` is exactly 0 and its log is -inf: take the log of the sigmoid in "
        "one step with `torch.nn.functional.logsigmoid`.",
        "`margin = beta * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - "
        "ref_rejected_logps))`; the loss is `-torch.nn.functional.logsigmoid(margin)` averaged with "
        "`.mean()`.",
    ),
    reference=dpo_loss,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.reward_model.bradley_terry_loss",
        "minirlhf.studies.silent_bugs.copies.dpo_loss_rejected_flipped",
    ),
    random_kwargs=_random_kwargs,
    # the log-ratios (1), the margin and Bradley-Terry (2), log space (3), the line (4)
    hint_for={
        "reference": 1,
        "one-term": 1,
        "margin-sign": 2,
        "beta": 2,
        "sigmoid": 2,
        "sum": 2,
        "not-averaged": 2,
        "sign": 2,
        "inf": 3,
        "nan": 3,
        "not-a-tensor": 4,
        "no-grad": 4,
        "grad": 4,
    },
)

IN_THIS_CHAPTER = (DPO_LOSS,)
