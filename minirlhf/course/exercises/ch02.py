"""Chapter 2 exercises: the REINFORCE loss with a baseline, and the PPO-RLHF objective
(KL-shaped reward, clipped surrogate)."""

import numpy as np
import torch

from ...objectives import ppo_rlhf_objective
from ...pg import reinforce_loss
from ..cases import NO_GRADIENT, Case, Exercise, Slip, known_slip
from ..expect import ExpectDict2, ExpectScalarTensor
from ._inputs import whole_numbers

# ----------------------------------------------------------------------------- 2.1 REINFORCE


class ExpectLoss(ExpectScalarTensor):
    """A 0-d tensor loss close to the expected number that still carries the gradient of
    ``logp`` (every case passes log-probs that require one): its gradient with respect to the
    log-probs (``logp``, or ``new_logp`` for the leash term of chapter 10) is compared with the
    reference's."""

    def __init__(self, *args, grad_wrt=("logp", "new_logp"), **kwargs):
        super().__init__(*args, grad_wrt=grad_wrt, **kwargs)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if hasattr(expected, "detach"):  # the reference's own loss, when it sets the answer
            expected = expected.detach()
        found = super().diagnose(got, expected)
        if found is None and not bool(getattr(got, "requires_grad", True)):
            return "no-grad", (
                f"{NO_GRADIENT} Keep the log-probs in the computation (no .detach() or "
                "torch.no_grad()), or training cannot move the policy"
            )
        return found


def _lp(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def _pg_case(logp, rewards, baseline, expected, why):
    return Case(
        {"logp": _lp(logp), "rewards": torch.tensor(rewards, dtype=torch.float32), "baseline": baseline}, expected, why
    )


def _pg_random_kwargs(rng: np.random.Generator) -> dict:
    n = int(rng.integers(1, 33))
    return {
        "logp": _lp(rng.uniform(-4.0, -0.05, n).tolist()),
        "rewards": torch.tensor(rng.normal(0.0, 1.0, n).tolist(), dtype=torch.float32),
        "baseline": float(rng.choice([0.0, 0.5, -0.3, round(float(rng.normal()), 2)])),
    }


def _pg_slip(kind: str):
    """Return reinforce_loss with one usual slip (see ``PG_SLIPS``)."""
    known_slip(kind, ("no-baseline", "baseline-added", "sum", "batch-baseline", "whitened", "whitened-population"))

    def loss(logp, rewards, baseline):
        weight = {
            "no-baseline": rewards,
            "baseline-added": rewards + baseline,
            "batch-baseline": rewards - rewards.mean(),
        }.get(kind, rewards - baseline)
        if kind.startswith("whitened"):  # scaled to unit std, as some trainers do
            if kind == "whitened" and weight.numel() < 2:
                raise ValueError("the sample std of one number is not defined")  # not this slip's input
            weight = weight / weight.std(unbiased=kind == "whitened")
        terms = weight * logp
        return -(terms.sum() if kind == "sum" else terms.mean())

    return loss


PG_SLIPS = (
    Slip(
        "no-baseline",
        _pg_slip("no-baseline"),
        "that is the loss without the baseline: weight each log-prob by rewards - baseline",
    ),
    Slip("baseline-added", _pg_slip("baseline-added"), "that is rewards + baseline: subtract the baseline"),
    Slip("sum", _pg_slip("sum"), "that is a sum over the samples: take the mean"),
    Slip(
        "batch-baseline",
        _pg_slip("batch-baseline"),
        "that subtracts the batch's mean reward: subtract the baseline the function is given",
    ),
    Slip(
        "whitened",
        _pg_slip("whitened"),
        "that divides the weights by their std: the weight is rewards - baseline as it is",
    ),
    Slip(
        "whitened",
        _pg_slip("whitened-population"),
        "that divides the weights by their std: the weight is rewards - baseline as it is",
    ),
)


REINFORCE_LOSS = Exercise(
    name="reinforce_loss",
    chapter=2,
    title="The REINFORCE loss with a baseline",
    expect=ExpectLoss(
        atol=1e-5,
        per="sample",
        sign_hint="the loss is minus the mean, because the optimizer minimises it",
        slips=PG_SLIPS,
    ),
    cases=(
        _pg_case([-1.0, -2.0], [1.0, 0.0], 0.0, 0.5, "the first example, no baseline: -(1 * -1 + 0 * -2) / 2 = 0.5"),
        _pg_case(
            [-1.0, -2.0],
            [1.0, 0.0],
            0.5,
            -0.25,
            "the second example: weights 1 - 0.5 and 0 - 0.5, -(0.5 * -1 + -0.5 * -2) / 2",
        ),
        _pg_case([-0.5], [2.0], 0.0, 1.0, "one sample: -(2 * -0.5) = 1"),
        _pg_case(
            [-1.0, -3.0, -0.2],
            [0.7, 0.7, 0.7],
            0.7,
            0.0,
            "every reward equals the baseline: all weights are 0, so the loss is 0",
        ),
        _pg_case(
            [-1.0, -1.0], [0.0, 1.0], -1.0, 1.5, "a negative baseline is subtracted too: weights 1 and 2, -(-1 - 2) / 2"
        ),
        _pg_case(
            [-0.1, -2.3, -0.7, -1.2],
            [1.0, 0.0, 1.0, 0.0],
            0.5,
            -0.3375,
            "four samples, weights +-0.5: -(-0.05 + 1.15 - 0.35 + 0.6) / 4, a mean, not a sum",
        ),
        _pg_case(
            [-2.0, -0.5], [-1.0, -3.0], -2.0, 0.75, "negative rewards, baseline -2: weights 1 and -1, -(-2 + 0.5) / 2"
        ),
        _pg_case(
            [-0.4, -1.6, -2.5],
            [1.0, 0.0, 0.5],
            0.5,
            -0.2,
            "the baseline is the batch's mean reward: the third weight is 0 and adds nothing, "
            "but the sample still counts in the mean, -(-0.2 + 0.8 + 0) / 3",
        ),
        _pg_case(
            [-1.0, -2.0, -3.0, -0.5, -1.5],
            [1.0, 1.0, 1.0, 1.0, 1.0],
            0.0,
            1.6,
            "every reward 1, no baseline: minus the mean log-prob, 8 / 5; every sampled action "
            "is pushed up, which a baseline of 1 would cancel",
        ),
    ),
    hints=(
        "Each sample's weight is its reward minus the baseline, `rewards - baseline`, shape (N,). "
        "The baseline is one number for the whole batch.",
        "Multiply the weights by the log-probs element by element and average over the N samples (a mean, not a sum).",
        "Put a minus in front, because the optimizer minimises: `-((rewards - baseline) * logp).mean()`. "
        "Return that tensor as it is (no `.item()`), so it carries the gradient.",
    ),
    reference=reinforce_loss,
    random_kwargs=_pg_random_kwargs,
    # the weights (1), the mean (2), the minus and the tensor with its gradient (3)
    hint_for={
        "no-baseline": 1,
        "baseline-added": 1,
        "batch-baseline": 1,
        "whitened": 1,
        "sum": 2,
        "not-averaged": 2,
        "sign": 3,
        "not-a-tensor": 3,
        "no-grad": 3,
        "grad": 3,
    },
)

# ----------------------------------------------------------------------------- 2.2 the objective

KEYS = ("objective", "policy_loss", "kl_penalty")


def _out(j: float, pen: float) -> dict:
    return {"objective": j, "policy_loss": j, "kl_penalty": pen}


def _random_kwargs(rng: np.random.Generator) -> dict:
    n = int(rng.integers(1, 16))
    old = rng.uniform(-4, -0.1, n)
    if rng.random() < 0.25:  # whole numbers, as ints, with a beta that makes the advantages fractions
        old = np.rint(old)
        return {
            "old_logp": whole_numbers(rng, old),
            "new_logp": whole_numbers(rng, old + rng.integers(-1, 2, n)),
            "ref_logp": whole_numbers(rng, old + rng.integers(-1, 2, n)),
            "rewards": whole_numbers(rng, rng.integers(-2, 3, n)),
            "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
            "beta": float(rng.choice([0.05, 0.1, 0.3, 0.5])),
        }
    return {
        "old_logp": old.tolist(),
        "new_logp": (old + rng.normal(0, 0.3, n)).tolist(),
        "ref_logp": (old + rng.normal(0, 0.3, n)).tolist(),
        "rewards": rng.normal(0, 1, n).tolist(),
        "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
        "beta": float(rng.choice([0.0, 0.05, 0.1, 0.5])),
    }


def _case(old, new, ref, r, eps, beta, expected, why):
    return Case(
        {"old_logp": old, "new_logp": new, "ref_logp": ref, "rewards": r, "epsilon": eps, "beta": beta}, expected, why
    )


def _objective_slip(kind: str):
    """Return ppo_rlhf_objective with one usual slip (see ``OBJECTIVE_SLIPS``)."""
    known_slip(
        kind,
        (
            "kl-twice",
            "kl-twice-objective",
            "no-clip",
            "clip-only",
            "max",
            "kl-sign",
            "no-kl",
            "ratio-inverted",
            "loss-negated",
            "np-round",
            "min-of-means",
            "int-truncated",
        ),
    )

    def objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
        old, new, ref, r = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
        ratio = np.exp(old - new) if kind == "ratio-inverted" else np.exp(new - old)
        kl = ref - new if kind == "kl-sign" else new - ref
        adv = r if kind == "no-kl" else r - beta * kl
        if kind == "int-truncated":  # written into an array of the rewards' own dtype
            adv = np.array(rewards).copy()
            adv[:] = r - beta * kl
        clipped = np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv
        surrogate = {"no-clip": ratio * adv, "clip-only": clipped, "max": np.maximum(ratio * adv, clipped)}.get(
            kind, np.minimum(ratio * adv, clipped)
        )
        if kind == "min-of-means":  # the smaller of the two means, one number, taken as J
            surrogate = np.array(min((ratio * adv).mean(), clipped.mean()))
        penalty = beta * (new - ref).mean()
        # "kl-twice" subtracts the penalty from J everywhere; "kl-twice-objective" only from the
        # "objective" entry, leaving "policy_loss" the plain surrogate
        j = surrogate.mean() - (penalty if kind in ("kl-twice", "kl-twice-objective") else 0.0)
        loss = {"loss-negated": -j, "kl-twice-objective": surrogate.mean()}.get(kind, j)

        def rnd(x) -> float:
            return float(np.round(x, 2)) if kind == "np-round" else round(float(x), 2)

        return {"objective": rnd(j), "policy_loss": rnd(loss), "kl_penalty": rnd(penalty)}

    return objective


OBJECTIVE_SLIPS = (
    Slip(
        "kl-twice",
        _objective_slip("kl-twice"),
        "that is J minus the KL penalty, but the penalty is already inside the advantage: do not subtract it again",
    ),
    Slip(
        "kl-twice",
        _objective_slip("kl-twice-objective"),
        "that is J minus the KL penalty, but the penalty is already inside the advantage: do not subtract it again",
    ),
    Slip(
        "min-clip",
        _objective_slip("min-of-means"),
        "that is the smaller of the two terms' means: take the minimum token by token, then the mean",
    ),
    Slip("min-clip", _objective_slip("no-clip"), "that is the mean of ratio * adv: the clipped term is missing"),
    Slip("min-clip", _objective_slip("clip-only"), "that is the clipped term alone: take the minimum of both terms"),
    Slip("min-clip", _objective_slip("max"), "that is the maximum of the two terms: take the minimum"),
    Slip("kl-sign", _objective_slip("kl-sign"), "that is kl = ref_logp - new_logp: subtract the other way"),
    Slip("no-kl", _objective_slip("no-kl"), "that is the advantage without the KL: adv = rewards - beta * kl"),
    Slip(
        "ratio-inverted", _objective_slip("ratio-inverted"), "that is the ratio upside down: exp(new_logp - old_logp)"
    ),
    Slip(
        "loss-negated",
        _objective_slip("loss-negated"),
        "in this contract policy_loss is the objective itself, not minus it",
    ),
    Slip(
        "int-truncated",
        _objective_slip("int-truncated"),
        "that cuts the advantages to whole numbers: an array made from int inputs (np.array, "
        "np.zeros_like) stays int, and a fraction written into it is cut off; convert the inputs "
        "with np.asarray(x, dtype=float) first",
    ),
    Slip(
        "np-round",
        _objective_slip("np-round"),
        "np.round gives that: it rounds 100 * x, and 100 * 0.405 is "
        "exactly the tie 40.5, sent to the even 40; the contract's rule "
        "is Python's round(x, 2), which gives 0.41",
    ),
)


PPO_RLHF_OBJECTIVE = Exercise(
    name="ppo_rlhf_objective",
    chapter=2,
    title="The PPO-RLHF objective",
    expect=ExpectDict2(KEYS, slips=OBJECTIVE_SLIPS),
    cases=(
        _case(
            [-2.0], [-1.8], [-2.0], [1.0], 0.2, 0.1, _out(1.18, 0.02), "first example: ratio 1.221 is clipped to 1.2"
        ),
        _case([-1.0], [-1.0], [-1.0], [1.0], 0.2, 0.1, _out(1.0, 0.0), "second example: ratio 1, no KL"),
        _case(
            [-2.0],
            [-1.8],
            [-1.8],
            [-1.0],
            0.2,
            0.1,
            _out(-1.22, 0.0),
            "A < 0 and ratio above 1 + eps: the min keeps the unclipped, worse term",
        ),
        _case(
            [-1.0],
            [-1.5],
            [-1.5],
            [-2.0],
            0.2,
            0.5,
            _out(-1.6, 0.0),
            "A < 0 and ratio below 1 - eps: clipped from below",
        ),
        _case(
            [-1.0],
            [-1.5],
            [-1.5],
            [2.0],
            0.2,
            0.5,
            _out(1.21, 0.0),
            "A > 0 and ratio below 1 - eps: no clipping, the min keeps ratio * A",
        ),
        _case(
            [-1.0, -2.0],
            [-1.1, -1.9],
            [-3.0, -3.0],
            [0.5, -0.5],
            0.2,
            0.0,
            _out(-0.05, 0.0),
            "beta = 0: the KL plays no part, whatever ref_logp is",
        ),
        _case(
            [-1.0, -1.0, -1.0],
            [-0.5, -1.0, -1.5],
            [-1.0, -1.0, -1.0],
            [1.0, 1.0, -1.0],
            0.2,
            0.2,
            _out(0.45, 0.0),
            "mixed batch: one token clipped above, one unclipped, one clipped below",
        ),
        _case(
            [-1.0],
            [-1.0],
            [-3.0],
            [0.5],
            0.1,
            0.5,
            _out(-0.5, 1.0),
            "the KL term turns a positive reward into a negative advantage",
        ),
        _case(
            [-2, -2],
            [-2, -2],
            [-2, -3],
            [1, 0],
            0.1,
            1.0,
            _out(0.0, 0.5),
            "lists of ints; J = 0 while the penalty is 0.5: it is not subtracted twice",
        ),
        _case(
            [-1.0],
            [-0.5],
            [-0.5],
            [1.0],
            0.5,
            0.1,
            _out(1.5, 0.0),
            "a wide clip range: epsilon = 0.5 clips 1.649 to 1.5",
        ),
        _case(
            [-1.0],
            [-1.0],
            [-1.0],
            [0.405],
            0.2,
            0.1,
            _out(0.41, 0.0),
            "J = 0.405, stored a little above 0.405: Python's round(x, 2) gives 0.41 (np.round gives 0.4)",
        ),
        _case(
            [-1.0, -1.0],
            [-0.5, -0.6],
            [-0.5, -0.6],
            [1.0, -1.0],
            0.2,
            0.1,
            _out(-0.15, 0.0),
            "ratios e^0.5 = 1.649 with A = 1 and e^0.4 = 1.492 with A = -1: the min keeps 1.2 * 1 and "
            "1.492 * -1, J = (1.2 - 1.492) / 2 = -0.15; the smaller of the two terms' means is 0",
        ),
        _case(
            [-1, -1],
            [-1, -2],
            [-2, -2],
            [1, 0],
            0.2,
            0.1,
            _out(0.45, 0.05),
            "lists of ints, kl = [1, 0]: adv = [1 - 0.1, 0] = [0.9, 0], ratios 1 and e^-1 (clipped "
            "to 0.8, times 0), J = 0.45; an int array would hold adv as [0, 0]",
        ),
    ),
    hints=(
        "Work per token with NumPy arrays: `ratio = np.exp(new - old)`, `kl = new - ref`, `adv = rewards - beta * kl`.",
        "The surrogate is the element-wise minimum of `ratio * adv` and "
        "`np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv`; `J` is its mean.",
        "Return `{'objective': round(float(J), 2), 'policy_loss': round(float(J), 2), "
        "'kl_penalty': round(float(beta * kl.mean()), 2)}`. Do not subtract the penalty from `J`: it is already "
        "inside `adv`.",
    ),
    reference=ppo_rlhf_objective,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.objectives._objective_of_extremes",
        "minirlhf.objectives._scaled_mean_difference",
        "minirlhf.studies.double_count._clipped",
        "minirlhf.leashes.reward.ppo_token_loss",
    ),
    random_kwargs=_random_kwargs,
    # the per-token ratio, KL and advantage (1), the min and the clip (2), the dict, its
    # rounded floats and the penalty kept out of J (3)
    hint_for={
        "ratio-inverted": 1,
        "kl-sign": 1,
        "no-kl": 1,
        "min-clip": 2,
        "kl-twice": 3,
        "loss-negated": 3,
        "sign": 3,
        "type": 3,
        "missing-key": 3,
        "extra-key": 3,
        "numpy-scalar": 3,
        "int": 3,
        "not-rounded": 3,
        "np-round": 3,
        "int-truncated": 1,
    },
)

IN_THIS_CHAPTER = (REINFORCE_LOSS, PPO_RLHF_OBJECTIVE)
