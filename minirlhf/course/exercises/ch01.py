"""Chapter 1 exercise: the sampled KL penalty (k1 estimator)."""

import numpy as np

from ...objectives import kl_penalty
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectFloat2
from ._inputs import whole_numbers


def _random_kwargs(rng: np.random.Generator) -> dict:
    n = int(rng.integers(1, 20))
    policy = rng.uniform(-5, 0, n)
    if rng.random() < 0.2:  # whole numbers, as ints (a list or an int array), as the contract allows
        return {
            "logp_policy": whole_numbers(rng, policy),
            "logp_reference": whole_numbers(rng, policy + rng.normal(0, 1.5, n)),
            "beta": float(rng.choice([0.05, 0.1, 0.3, 0.5, 1.0])),
        }
    kwargs = {
        "logp_policy": policy.tolist() if rng.random() < 0.5 else policy,
        "logp_reference": (policy + rng.normal(0, 0.7, n)).tolist(),
        "beta": float(rng.choice([0.0, 0.05, 0.1, 0.5, 1.0, 2.0])),
    }
    return kwargs


def _slip(kind: str):
    """Return kl_penalty with one usual slip (see ``SLIPS``)."""
    known_slip(kind, ("kl-reversed", "abs", "abs-of-mean", "clip-at-0", "no-beta", "sum", "round-half-up", "np-round"))

    def penalty(logp_policy, logp_reference, beta):
        kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
        value = {
            "kl-reversed": beta * (-kl).mean(),
            "abs": beta * np.abs(kl).mean(),
            "abs-of-mean": beta * abs(kl.mean()),
            "clip-at-0": beta * np.maximum(kl, 0.0).mean(),
            "no-beta": kl.mean(),
            "sum": beta * kl.sum(),
            "round-half-up": np.floor(beta * kl.mean() * 100 + 0.5) / 100,
            "np-round": beta * kl.mean(),
        }[kind]
        if kind == "np-round":
            return float(np.round(value, 2))
        return round(float(value), 2)

    return penalty


SLIPS = (
    Slip("kl-reversed", _slip("kl-reversed"), "logp_reference - logp_policy gives that: subtract the other way"),
    Slip("abs", _slip("abs"), "abs() of the per-token KL gives that: a negative KL is information, keep it"),
    Slip("abs", _slip("abs-of-mean"), "abs() of the mean gives that: keep its sign"),
    Slip("clip-at-0", _slip("clip-at-0"), "clipping the KL at 0 gives that: keep the negative tokens"),
    Slip("no-beta", _slip("no-beta"), "the mean KL without beta gives that: multiply by beta"),
    Slip("sum", _slip("sum"), "a sum over the tokens gives that: take the mean"),
    Slip(
        "round-half-up",
        _slip("round-half-up"),
        "rounding a tie up gives that: Python's round() sends it to the even digit",
    ),
    Slip(
        "np-round",
        _slip("np-round"),
        "np.round gives that: it rounds 100 * x, and 100 * 0.405 is exactly the tie 40.5, sent to the "
        "even 40; the contract's rule is Python's round(x, 2), which rounds the float 0.405 itself "
        "(a little above 0.405) up to 0.41",
    ),
)


KL_PENALTY = Exercise(
    name="kl_penalty",
    chapter=1,
    title="The sampled KL penalty",
    expect=ExpectFloat2(slips=SLIPS),
    cases=(
        Case(
            {"logp_policy": [-1, -2], "logp_reference": [-1.5, -2.5], "beta": 0.1},
            0.05,
            "first example of the contract",
        ),
        Case(
            {"logp_policy": [-2, -3], "logp_reference": [-1, -1], "beta": 1.0},
            -1.5,
            "second example: the mean is negative, keep the sign",
        ),
        Case(
            {"logp_policy": [-0.7, -1.2, -3.0], "logp_reference": [-0.7, -1.2, -3.0], "beta": 0.5},
            0.0,
            "identical inputs give 0.0",
        ),
        Case({"logp_policy": [-0.5], "logp_reference": [-1.5], "beta": 0.2}, 0.2, "a single token"),
        Case(
            {"logp_policy": [-2.0], "logp_reference": [-0.5], "beta": 0.3},
            -0.45,
            "a single token the policy likes less than the reference: negative, never clipped",
        ),
        Case(
            {"logp_policy": [-1, -2], "logp_reference": [-3, -4], "beta": 0.0}, 0.0, "beta = 0 switches the leash off"
        ),
        Case(
            {"logp_policy": [-1.0, -3.0, -2.0], "logp_reference": [-2.0, -1.0, -2.0], "beta": 1.0},
            -0.33,
            "mixed signs: no abs(), no clipping, a plain mean",
        ),
        Case(
            {
                "logp_policy": [-0.2, -1.1, -0.4, -2.3, -0.9],
                "logp_reference": [-0.3, -1.0, -0.9, -2.0, -1.4],
                "beta": 0.1,
            },
            0.01,
            "five tokens, mean over all of them (no mask)",
        ),
        Case(
            {"logp_policy": np.array([-1.0, -1.0]), "logp_reference": np.array([-1.25, -1.75]), "beta": 2.0},
            1.0,
            "NumPy arrays as input",
        ),
        Case(
            {"logp_policy": [-0.5], "logp_reference": [-1.0], "beta": 0.25},
            0.12,
            "0.125 is a tie: Python's round() sends it to the even digit",
        ),
        Case(
            {"logp_policy": [-0.5], "logp_reference": [-0.905], "beta": 1.0},
            0.41,
            "0.405 is stored a little above 0.405, so Python's round(x, 2) gives 0.41 (np.round gives 0.4)",
        ),
    ),
    hints=(
        "Turn both inputs into arrays with `np.asarray(x, dtype=float)`; then the per-token `kl` is one subtraction.",
        "`kl = logp_policy - logp_reference`, token by token. Do not take `abs()` and do not clip at 0: "
        "a negative value is information.",
        "`penalty = beta * kl.mean()`, then `return round(float(penalty), 2)`: a Python float, not a NumPy scalar.",
    ),
    reference=kl_penalty,
    # Chapter 2's objective reports the same penalty: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.objectives.ppo_rlhf_objective",
        "minirlhf.objectives._scaled_mean_difference",
        "minirlhf.studies.kl_estimators.k1",
    ),
    random_kwargs=_random_kwargs,
    # The hint that helps with each mistake: the subtraction and its sign (2), beta, the mean,
    # the rounding and the Python float (3).
    hint_for={
        "sign": 2,
        "kl-reversed": 2,
        "abs": 2,
        "clip-at-0": 2,
        "no-beta": 3,
        "sum": 3,
        "round-half-up": 3,
        "np-round": 3,
        "not-rounded": 3,
        "numpy-scalar": 3,
        "int": 3,
        "type": 3,
    },
)

IN_THIS_CHAPTER = (KL_PENALTY,)
