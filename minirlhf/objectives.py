"""The two objectives of chapters 1 and 2, in NumPy, with the exercise contracts.

Both return Python floats rounded to 2 decimals with the built-in ``round`` (halves go to
the even neighbour, and the rounding acts on the binary value: ``round(0.125, 2) == 0.12``).
Both validate their input and raise ``ValueError`` naming the argument that is wrong.
"""

from __future__ import annotations

import numpy as np

__all__ = ["kl_penalty", "ppo_rlhf_objective", "as_logps", "round2"]


def as_logps(values, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D float array of finite numbers, or raise naming ``name``.

    Defined in chapter 1.
    """
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a sequence of numbers ({err})") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: need at least one token")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds a non-finite value (NaN or inf)")
    return arr


def _check_same_length(**arrays: np.ndarray) -> None:
    names = list(arrays)
    first = names[0]
    for name in names[1:]:
        if arrays[name].shape != arrays[first].shape:
            raise ValueError(
                f"{name} has {arrays[name].size} values but {first} has {arrays[first].size}"
            )


def round2(x) -> float:
    """Return ``x`` as a Python float rounded to 2 decimals, with -0.0 written as 0.0.

    Defined in chapter 1.
    """
    return round(float(x), 2) + 0.0


def _check_beta(beta) -> float:
    beta = float(beta)
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be a finite number >= 0, got {beta}")
    return beta


def kl_penalty(logp_policy, logp_reference, beta) -> float:
    """Return beta * mean over tokens of (logp_policy - logp_reference), rounded to 2 decimals.

    The per-token term is the k1 estimator of KL(policy || reference) on sampled tokens. It
    keeps its sign: a single token, or a mean over a few, can be negative.

    Defined in chapter 1.
    """
    logp_policy = as_logps(logp_policy, "logp_policy")
    logp_reference = as_logps(logp_reference, "logp_reference")
    _check_same_length(logp_policy=logp_policy, logp_reference=logp_reference)
    beta = _check_beta(beta)
    kl = logp_policy - logp_reference  # k1, per token
    return round2(beta * kl.mean())


def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta) -> dict:
    """Return the KL-shaped clipped surrogate J and its parts, as floats rounded to 2 decimals.

    ``{'objective': J, 'policy_loss': J, 'kl_penalty': beta * mean(kl)}``: the KL sits inside
    the advantage, so the clipped term is the whole objective and ``kl_penalty`` is only
    reported for monitoring (subtracting it again would count the leash twice).

    Defined in chapter 2.
    """
    old_logp = as_logps(old_logp, "old_logp")
    new_logp = as_logps(new_logp, "new_logp")
    ref_logp = as_logps(ref_logp, "ref_logp")
    rewards = as_logps(rewards, "rewards")
    _check_same_length(old_logp=old_logp, new_logp=new_logp, ref_logp=ref_logp, rewards=rewards)
    epsilon = float(epsilon)
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie strictly between 0 and 1, got {epsilon}")
    beta = _check_beta(beta)

    ratio = np.exp(new_logp - old_logp)
    kl = new_logp - ref_logp
    adv = rewards - beta * kl  # the shaped reward, used as the advantage
    surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv)
    objective = float(surrogate.mean())
    return {
        "objective": round2(objective),
        "policy_loss": round2(objective),
        "kl_penalty": round2(beta * kl.mean()),
    }
