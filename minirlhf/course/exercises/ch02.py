"""Chapter 2 exercise: the PPO-RLHF objective (KL-shaped reward, clipped surrogate)."""

import numpy as np

from ..cases import Case, Exercise, ExpectDict2
from ...objectives import ppo_rlhf_objective

KEYS = ("objective", "policy_loss", "kl_penalty")


def _out(j: float, pen: float) -> dict:
    return {"objective": j, "policy_loss": j, "kl_penalty": pen}


def _random_kwargs(rng: np.random.Generator) -> dict:
    n = int(rng.integers(1, 16))
    old = rng.uniform(-4, -0.1, n)
    return {
        "old_logp": old.tolist(),
        "new_logp": (old + rng.normal(0, 0.3, n)).tolist(),
        "ref_logp": (old + rng.normal(0, 0.3, n)).tolist(),
        "rewards": rng.normal(0, 1, n).tolist(),
        "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
        "beta": float(rng.choice([0.0, 0.05, 0.1, 0.5])),
    }


def _case(old, new, ref, r, eps, beta, expected, why):
    return Case({"old_logp": old, "new_logp": new, "ref_logp": ref, "rewards": r,
                 "epsilon": eps, "beta": beta}, expected, why)


PPO_RLHF_OBJECTIVE = Exercise(
    name="ppo_rlhf_objective",
    chapter=2,
    title="The PPO-RLHF objective",
    expect=ExpectDict2(KEYS),
    cases=(
        _case([-2.0], [-1.8], [-2.0], [1.0], 0.2, 0.1, _out(1.18, 0.02),
              "first example: ratio 1.221 is clipped to 1.2"),
        _case([-1.0], [-1.0], [-1.0], [1.0], 0.2, 0.1, _out(1.0, 0.0),
              "second example: ratio 1, no KL"),
        _case([-2.0], [-1.8], [-1.8], [-1.0], 0.2, 0.1, _out(-1.22, 0.0),
              "A < 0 and ratio above 1 + eps: the min keeps the unclipped, worse term"),
        _case([-1.0], [-1.5], [-1.5], [-2.0], 0.2, 0.5, _out(-1.6, 0.0),
              "A < 0 and ratio below 1 - eps: clipped from below"),
        _case([-1.0], [-1.5], [-1.5], [2.0], 0.2, 0.5, _out(1.21, 0.0),
              "A > 0 and ratio below 1 - eps: no clipping, the min keeps ratio * A"),
        _case([-1.0, -2.0], [-1.1, -1.9], [-3.0, -3.0], [0.5, -0.5], 0.2, 0.0, _out(-0.05, 0.0),
              "beta = 0: the KL plays no part, whatever ref_logp is"),
        _case([-1.0, -1.0, -1.0], [-0.5, -1.0, -1.5], [-1.0, -1.0, -1.0], [1.0, 1.0, -1.0], 0.2, 0.2,
              _out(0.45, 0.0), "mixed batch: one token clipped above, one unclipped, one clipped below"),
        _case([-1.0], [-1.0], [-3.0], [0.5], 0.1, 0.5, _out(-0.5, 1.0),
              "the KL term turns a positive reward into a negative advantage"),
        _case([-2, -2], [-2, -2], [-2, -3], [1, 0], 0.1, 1.0, _out(0.0, 0.5),
              "lists of ints; J = 0 while the penalty is 0.5: it is not subtracted twice"),
        _case([-1.0], [-0.5], [-0.5], [1.0], 0.5, 0.1, _out(1.5, 0.0),
              "a wide clip range: epsilon = 0.5 clips 1.649 to 1.5"),
    ),
    hints=(
        "Work per token with NumPy arrays: `ratio = np.exp(new - old)`, `kl = new - ref`, `adv = rewards - beta * kl`.",
        "The surrogate is the element-wise minimum of `ratio * adv` and `np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv`; "
        "`J` is its mean.",
        "Return `{'objective': round(float(J), 2), 'policy_loss': round(float(J), 2), "
        "'kl_penalty': round(float(beta * kl.mean()), 2)}`. Do not subtract the penalty from `J`: it is already inside `adv`.",
    ),
    reference=ppo_rlhf_objective,
    random_kwargs=_random_kwargs,
)

IN_THIS_CHAPTER = (PPO_RLHF_OBJECTIVE,)
