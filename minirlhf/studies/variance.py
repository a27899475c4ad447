"""How noisy is one token's credit? The batch-mean baseline against a per-state value.

A toy completion of ``T`` tokens stands in for a language model's answer. Each token is
"good" (1) with probability ``p`` and "bad" (0) otherwise, independently, and the reward,
paid once at the end as in RLHF, is the number of good tokens: every token matters, and
equally. Token t's policy is a coin with logit theta_t, so the score function is
``d log pi(a_t) / d theta_t = a_t - p`` and the exact policy gradient is ``p (1 - p)`` for
every token. One completion's estimate of it is ``g_t = (a_t - p) * A_t``, with one of three
advantages:

- ``batch mean``: ``A_t = R - mean(R over the batch)``, the same for every token (chapter 5);
- ``value, lam = 1``: ``A_t = R - V(s_t)``, the return minus the exact value of the state
  before token t, ``V(s_t) = (good tokens so far) + p * (tokens left)``;
- ``value + GAE``: :func:`minirlhf.ppo.gae` with the same values, ``gamma = 1``.

The number reported is the noise-to-signal ratio ``Var(g_t) / E[g_t]^2``, with the variance
averaged over the token positions: how many completions must be averaged before the noise of a token's
gradient is no larger than the gradient itself. :func:`closed_form` derives it exactly;
:func:`measure` samples it.
"""

from __future__ import annotations

import numpy as np

from ..ppo import gae

__all__ = ["METHODS", "closed_form", "measure", "study"]

METHODS = ("batch mean", "value, lam = 1", "value + GAE")


def _check(T: int, p: float, lam: float, batch_size: int) -> None:
    if int(T) != T or T < 1:
        raise ValueError(f"T must be a positive integer, got {T}")
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must lie in [0, 1], got {lam}")
    if int(batch_size) != batch_size or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2, got {batch_size}")


def closed_form(T: int, p: float = 0.3, lam: float = 0.95, batch_size: int = 64) -> dict:
    """Return ``{method: Var(g_t) / E[g_t]^2 averaged over the T positions}``, exactly.

    With ``x = a - p``, ``v = E[x^2] = p (1 - p)`` and ``kappa = Var(x^2) / v^2`` (the token's
    own sampling noise, which no baseline removes), the other tokens add: all ``T - 1`` of
    them plus the batch mean's own noise ``T / (B - 1)`` for the batch baseline; only the
    ``T - 1 - t`` later ones for the value with lam = 1; and the later ones weighted by
    ``lam^(2k)`` with GAE.
    """
    _check(T, p, lam, batch_size)
    v = p * (1 - p)
    kappa = (p * (1 - p) ** 4 + (1 - p) * p**4) / v**2 - 1.0
    later = np.arange(T)[::-1]  # tokens after position t: T-1, ..., 0
    weights = lam ** (2 * np.arange(1, T))  # lam^2, lam^4, ...
    gae_terms = np.array([weights[:k].sum() for k in later])
    return {
        "batch mean": kappa + (T - 1) + T / (batch_size - 1),
        "value, lam = 1": kappa + later.mean(),
        "value + GAE": kappa + gae_terms.mean(),
    }


def measure(
    T: int, p: float = 0.3, lam: float = 0.95, batch_size: int = 64, n_batches: int = 64, seed: int = 0
) -> dict:
    """Return ``{method: Var(g_t) / E[g_t]^2 averaged over positions}``, from
    ``n_batches * batch_size`` sampled completions of ``T`` tokens."""
    _check(T, p, lam, batch_size)
    rng = np.random.default_rng(seed)
    a = (rng.random((n_batches, batch_size, T)) < p).astype(float)  # (N, B, T) 1 = good token
    R = a.sum(-1)  # (N, B): the reward, paid at the end
    rewards = np.zeros_like(a)
    rewards[..., -1] = R  # (N, B, T): 0 on every token but the last
    good_before = np.cumsum(a, -1) - a  # (N, B, T): good tokens before position t
    values = good_before + p * (T - np.arange(T))  # (N, B, T): exact V(s_t) = E[R | s_t]
    advantages = {
        "batch mean": np.broadcast_to((R - R.mean(1, keepdims=True))[..., None], a.shape),
        "value, lam = 1": gae(rewards, values, 1.0, 1.0),
        "value + GAE": gae(rewards, values, 1.0, lam),
    }
    score = a - p  # (N, B, T): d log pi(a_t) / d theta_t
    out = {}
    for name, adv in advantages.items():
        g = (score * adv).reshape(-1, T)  # (N * B, T): one gradient estimate per completion and token
        # Every position has the same expected gradient: pool the samples for the signal, so that
        # its noise does not sit in a denominator position by position.
        out[name] = float(g.var(0).mean() / g.mean() ** 2)
    return out


def study(
    lengths=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    p: float = 0.3,
    lam: float = 0.95,
    batch_size: int = 64,
    n_batches: int = 64,
    seed: int = 0,
) -> dict:
    """Return ``{'T': lengths, 'measured': {method: [...]}, 'exact': {method: [...]}}``."""
    measured = {m: [] for m in METHODS}
    exact = {m: [] for m in METHODS}
    for i, T in enumerate(lengths):
        got = measure(T, p, lam, batch_size, n_batches, seed + i)
        want = closed_form(T, p, lam, batch_size)
        for m in METHODS:
            measured[m].append(got[m])
            exact[m].append(want[m])
    return {
        "T": list(lengths),
        "measured": measured,
        "exact": exact,
        "settings": {"p": p, "lam": lam, "batch_size": batch_size, "n_batches": n_batches, "seed": seed},
    }
