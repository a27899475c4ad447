"""Reading chapter 11's curves, and the NumPy forms of its exercises.

:func:`fit_gao` fits Gao et al.'s forms for the gold gain over the start against the distance
d = sqrt(KL) (Gao et al. 2023, section 3): d (alpha - beta d) for best-of-n, d (alpha - beta log d)
for RL; :func:`peak` finds a curve's highest gold. :func:`best_of_n_probs`,
:func:`best_of_n_kl_bound`, :func:`sequence_kl` and :func:`best_of_n_kl` are the solutions of the
chapter's exercises in NumPy, one prompt at a time; :mod:`minirlhf.exact` computes the same in
torch, for every prompt.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fit_gao", "peak", "best_of_n_probs", "best_of_n_kl_bound", "sequence_kl", "best_of_n_kl"]


def fit_gao(kl, gain, form: str) -> dict:
    """Return Gao et al.'s fit of gold ``gain`` (over the start) against d = sqrt(``kl``):
    ``form`` "bon", gain = d (alpha - beta d); "rl", gain = d (alpha - beta log d). Least
    squares (both forms are linear in alpha and beta) over the points with KL > 1e-12;
    ``{'alpha', 'beta', 'rmse', 'r2', 'n'}``, and ``peak_d`` where the fitted curve peaks
    (None if it does not, within d > 0)."""
    if form not in ("bon", "rl"):
        raise ValueError(f"form must be 'bon' or 'rl', got {form!r}")
    kl = np.asarray(kl, dtype=float)
    d = np.sqrt(np.clip(kl, 0, None))
    y = np.asarray(gain, dtype=float)
    keep = kl > 1e-12  # a start: the KL of a policy to itself is 0, up to rounding
    d, y = d[keep], y[keep]
    if len(d) < 3:
        raise ValueError(f"need at least 3 points with KL > 0 to fit, got {len(d)}")
    shape = d if form == "bon" else np.log(d)
    design = np.stack([d, -d * shape], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ np.array([alpha, beta])
    ss = float(((y - y.mean()) ** 2).sum())
    out = {
        "alpha": float(alpha),
        "beta": float(beta),
        "n": int(len(d)),
        "rmse": float(np.sqrt(((y - fitted) ** 2).mean())),
        "r2": 1 - float(((y - fitted) ** 2).sum()) / ss if ss > 0 else float("nan"),
    }
    # bon: d (alpha - beta d) has its top at d = alpha / (2 beta), a peak at d > 0 only when both
    # are > 0; rl: d (alpha - beta log d) has its top where log d = alpha / beta - 1, for any
    # alpha, when beta > 0
    if form == "bon":
        out["peak_d"] = alpha / (2 * beta) if alpha > 0 and beta > 0 else None
    else:
        # with beta near 0 the top lies past any float: say so with inf, not an overflow
        out["peak_d"] = (math.exp(alpha / beta - 1) if alpha / beta - 1 < 709 else math.inf) if beta > 0 else None
    return out


def peak(kl, gold) -> dict:
    """Return the highest gold of a curve, its KL and sqrt(KL), and its gain over the first point."""
    gold = np.asarray(gold, dtype=float)
    i = int(np.argmax(gold))
    return {
        "index": i,
        "gold": float(gold[i]),
        "kl": float(kl[i]),
        "sqrt_kl": math.sqrt(max(kl[i], 0.0)),
        "gain": float(gold[i] - gold[0]),
    }


# ----------------------------------------------------------------------------- the chapter's exercises


def best_of_n_probs(probs, proxy, n) -> np.ndarray:
    """Return P_n (K,): the law of the best of ``n`` independent draws from ``probs`` (K,),
    ranked by ``proxy`` (K,), ties broken uniformly at random.

    The completions of one proxy value v form a block. The best of n lands in it when all n
    draws score at most v and not all score below v: with probability F(v)^n - F(v^-)^n, where
    F(v) is the mass of the completions with proxy <= v and F(v^-) of those with proxy < v.
    Within the block that probability is split in proportion to ``probs`` (a block of no mass
    gets 0). Each F is taken from the nearer end, the mass below below 1/2 and 1 minus the mass
    above from 1/2, as :func:`minirlhf.exact.best_of_n` does, so the two agree to rounding.

    Defined in chapter 11.
    """
    probs = np.asarray(probs, dtype=float)
    proxy = np.asarray(proxy, dtype=float)
    if probs.ndim != 1:
        raise ValueError(f"probs must be 1-D (K,), got shape {probs.shape}")
    if proxy.shape != probs.shape:
        raise ValueError(f"proxy must have the shape of probs {probs.shape}, got {proxy.shape}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if not np.isfinite(proxy).all():
        raise ValueError("proxy must be finite")
    if not (probs >= 0).all():
        raise ValueError("probs must be >= 0")
    if abs(probs.sum() - 1) > 1e-9:
        raise ValueError(f"probs must sum to 1 (within 1e-9), got {probs.sum()!r}")
    values, block = np.unique(proxy, return_inverse=True)  # blocks numbered from the lowest proxy
    block = block.reshape(-1)
    mass = np.bincount(block, weights=probs, minlength=len(values))  # (nb,)
    below = np.concatenate([[0.0], np.cumsum(mass)])  # F at the nb + 1 boundaries
    above = np.concatenate([np.cumsum(mass[::-1])[::-1], [0.0]])  # 1 - F there
    f = np.where(below < 0.5, below, 1.0 - above)
    block_probs = f[1:] ** n - f[:-1] ** n  # (nb,)
    share = np.divide(probs, mass[block], out=np.zeros_like(probs), where=mass[block] > 0)
    return block_probs[block] * share


def best_of_n_kl_bound(n) -> float:
    """Return log(n) - (n - 1) / n, in nats: KL(best-of-n || pi) for a score distribution without
    atoms (a continuous one), and an upper bound on it for any discrete one, ties or no ties (see
    :func:`best_of_n_kl`). 0 at n = 1; it grows like log n.

    Defined in chapter 11.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    n = int(n)
    return math.log(n) - (n - 1) / n


def sequence_kl(logp, ref_logp):
    """Return the exact KL(pi || pi_ref) over the completions of one prompt, in nats: the sum
    over the last axis of exp(logp) * (logp - ref_logp).

    ``logp`` and ``ref_logp`` are the log-probabilities of the same completions under the policy
    and the reference, (K,) for one distribution or (M, K) for M, one per row. A completion with
    ``logp`` -inf has probability 0 and adds 0, whatever ``ref_logp`` is there; one with ``logp``
    finite and ``ref_logp`` -inf makes the KL +inf. Returns a Python float for (K,) input, a
    NumPy array (M,) for (M, K).

    Defined in chapter 11.
    """
    logp = np.asarray(logp, dtype=float)
    ref_logp = np.asarray(ref_logp, dtype=float)
    if logp.ndim not in (1, 2):
        raise ValueError(f"logp must be 1-D (K,) or 2-D (M, K), got shape {logp.shape}")
    if ref_logp.shape != logp.shape:
        raise ValueError(f"ref_logp must have the shape of logp {logp.shape}, got {ref_logp.shape}")
    if np.isnan(logp).any() or (logp == np.inf).any():
        raise ValueError("logp must hold log-probabilities: no NaN or +inf")
    if np.isnan(ref_logp).any() or (ref_logp == np.inf).any():
        raise ValueError("ref_logp must hold log-probabilities: no NaN or +inf")
    kept = logp > -np.inf  # probability 0 adds 0
    terms = np.zeros_like(logp)
    with np.errstate(under="ignore", invalid="ignore"):
        terms[kept] = np.exp(logp[kept]) * (logp[kept] - ref_logp[kept])
    terms[kept & (ref_logp == -np.inf)] = np.inf  # even where exp(logp) underflows to 0
    kl = terms.sum(axis=-1)
    return float(kl) if logp.ndim == 1 else kl


def best_of_n_kl(probs, proxy, n) -> float:
    """Return the exact KL(P_n || pi) in nats, as a Python float, for one prompt: P_n the law of
    the best of ``n`` independent draws from ``probs`` (K,), ranked by ``proxy`` (K,), ties broken
    uniformly at random (:func:`best_of_n_probs`), and pi = ``probs``.

    Every answer of a discrete pi is an atom, with probability of its own, so P_n(y) =
    F(y)^n - F(y^-)^n lumps the continuous law's density n u^(n-1) over the ranks u from F(y^-)
    to F(y): the KL is that of a coarse-graining, at most log n - (n - 1) / n
    (:func:`best_of_n_kl_bound`), with equality only at n = 1. Tied answers form one atom, and
    within it P_n / pi is the same for every answer. An answer with P_n(y) = 0 adds 0.

    Defined in chapter 11.
    """
    law = best_of_n_probs(probs, proxy, n)  # checks the inputs
    probs = np.asarray(probs, dtype=float)
    kept = law > 0  # P_n(y) = 0 adds 0; P_n(y) > 0 only where probs > 0
    return float((law[kept] * np.log(law[kept] / probs[kept])).sum())
