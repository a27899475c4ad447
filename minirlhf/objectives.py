"""The two objectives of chapters 1 and 2, in NumPy, with the exercise contracts.

Both return Python floats rounded to 2 decimals with the built-in ``round`` (halves go to
the even neighbour, and the rounding acts on the binary value: ``round(0.125, 2) == 0.12``).
Both validate their input and raise ``ValueError`` naming the argument that is wrong: ``None``,
text, booleans, complex numbers, a list where one number belongs, a tensor that requires
grad. Finite but extreme inputs (``1e308``, a log-ratio of 1000) give a finite answer or a
``ValueError`` that says which quantity leaves the range of a float; never NaN or inf.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["kl_penalty", "ppo_rlhf_objective", "as_logps", "round2"]


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "requires_grad")


def _as_number(value, name: str) -> float:
    """Return ``value`` as a Python float if it is one real number, or raise naming ``name``."""
    if _is_tensor(value) or isinstance(value, np.ndarray):
        if getattr(value, "requires_grad", False):
            raise ValueError(f"{name} is a tensor that requires grad: pass a plain number")
        if value.ndim != 0:
            raise ValueError(
                f"{name} must be a single number, got a {type(value).__name__} of shape {tuple(value.shape)}"
            )
        value = value.item()
    if isinstance(value, (complex, np.complexfloating)):
        raise ValueError(f"{name} is a complex number ({value}); it must be real")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        what = "None" if value is None else f"a {type(value).__name__}"
        raise ValueError(f"{name} must be a single number, got {what}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large for a float") from None


def as_logps(values, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D float array of finite numbers, or raise naming ``name``."""
    if values is None:
        raise ValueError(f"{name} is None: expected a sequence of numbers (a list, an array or a tensor)")
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} is text ({values!r}), not a sequence of numbers")
    if _is_tensor(values) and values.requires_grad:
        raise ValueError(f"{name} is a tensor that requires grad: pass {name}.detach()")
    try:
        raw = np.asarray(values)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be a sequence of numbers ({err})") from None
    if raw.dtype.kind == "O":  # mixed or unusual elements: each must be a real number
        for item in raw.flat:
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Real):
                raise ValueError(f"{name} holds {'None' if item is None else 'a ' + type(item).__name__}, not a number")
    elif raw.dtype.kind == "c":
        raise ValueError(f"{name} holds complex numbers; log-probabilities are real")
    elif raw.dtype.kind not in "iuf":
        what = {"b": "booleans", "U": "text", "S": "text"}.get(raw.dtype.kind, f"values of type {raw.dtype}")
        raise ValueError(f"{name} holds {what}, not numbers")
    try:
        arr = raw.astype(float)
    except (TypeError, ValueError, OverflowError) as err:
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
            raise ValueError(f"{name} has {arrays[name].size} values but {first} has {arrays[first].size}")


def round2(x) -> float:
    """Return ``x`` as a Python float rounded to 2 decimals, with -0.0 written as 0.0."""
    return round(float(x), 2) + 0.0


def _check_beta(beta) -> float:
    beta = _as_number(beta, "beta")
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be a finite number >= 0, got {beta}")
    return beta


_FLOAT_RANGE = "is beyond the range of a float (about 1.8e308)"


def _scaled_mean_difference(beta: float, a: np.ndarray, b: np.ndarray, what: str) -> float:
    """Return beta * mean(a - b) for inputs so large that the plain formula overflows: the
    means are taken first (each term divided by n, so no sum overflows). Raise ValueError
    naming ``what`` when the answer itself is beyond the range of a float."""
    if beta == 0:
        return 0.0  # 0 times a finite mean, however large
    with np.errstate(over="ignore", invalid="ignore"):
        mean_a, mean_b = np.sum(a / a.size), np.sum(b / b.size)
        value = float(beta * (mean_a - mean_b))
        if not math.isfinite(value):  # the difference overflows, but beta < 1 may bring it back
            value = float(beta * mean_a - beta * mean_b)
    if not math.isfinite(value):
        raise ValueError(
            f"beta * mean({what}) {_FLOAT_RANGE}: log-probabilities lie between about -100 and 0, and these do not"
        )
    return value


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
    with np.errstate(over="ignore", invalid="ignore"):
        kl = logp_policy - logp_reference  # k1, per token
        penalty = beta * kl.mean()
    if not np.isfinite(penalty):  # only for inputs near the largest float
        penalty = _scaled_mean_difference(beta, logp_policy, logp_reference, "logp_policy - logp_reference")
    return round2(penalty)


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
    epsilon = _as_number(epsilon, "epsilon")
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie strictly between 0 and 1, got {epsilon}")
    beta = _check_beta(beta)

    with np.errstate(over="ignore", invalid="ignore"):
        ratio = np.exp(new_logp - old_logp)
        kl = new_logp - ref_logp
        adv = rewards - beta * kl  # the shaped reward, used as the advantage
        surrogate = np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv)
        objective = float(surrogate.mean())
        penalty = beta * kl.mean()
    if not np.isfinite(objective):  # only for extreme inputs: a huge ratio or huge values
        objective = _objective_of_extremes(old_logp, new_logp, ref_logp, rewards, epsilon, beta)
    if not np.isfinite(penalty):
        penalty = _scaled_mean_difference(beta, new_logp, ref_logp, "new_logp - ref_logp")
    return {
        "objective": round2(objective),
        "policy_loss": round2(objective),
        "kl_penalty": round2(penalty),
    }


def _objective_of_extremes(old_logp, new_logp, ref_logp, rewards, epsilon, beta) -> float:
    """The clipped objective when the plain formula gives NaN or inf, token by token.

    With A > 0 the clipped term is A * min(ratio, 1 + epsilon), finite however large the
    ratio; with A = 0 it is 0 (not inf * 0); with A < 0 it is A * max(ratio, 1 - epsilon),
    which has no finite value once the ratio overflows. Raise ValueError naming the cause
    when the answer is beyond the range of a float.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        log_ratio = new_logp - old_logp
        ratio = np.exp(log_ratio)
        adv = rewards - beta * (new_logp - ref_logp) if beta else rewards.copy()
        bad = np.flatnonzero(~np.isfinite(adv))
        if bad.size:
            raise ValueError(
                f"the shaped advantage rewards - beta * (new_logp - ref_logp) at token {bad[0]} {_FLOAT_RANGE}"
            )
        term = np.where(adv > 0, adv * np.minimum(ratio, 1 + epsilon), adv * np.maximum(ratio, 1 - epsilon))
        term[adv == 0] = 0.0
        bad = np.flatnonzero(~np.isfinite(term))
        if bad.size:
            i = bad[0]
            raise ValueError(
                f"new_logp - old_logp = {log_ratio[i]:.4g} at token {i}: the ratio exp({log_ratio[i]:.4g}) "
                f"times the advantage {adv[i]:.4g} {_FLOAT_RANGE}"
            )
        objective = float(np.sum(term / term.size))
    if not math.isfinite(objective):
        raise ValueError(f"the mean of the clipped terms {_FLOAT_RANGE}")
    return objective
