"""The KL-regularized optimum, exactly, from one enumeration (:mod:`minirlhf.exact`).

The policy that maximizes E[r] - beta KL(pi_beta || pi) is pi tilted by the reward,
pi_beta(y) = pi(y) exp(r(y) / beta) / Z, with KL(pi_beta || pi) = E_beta[r] / beta - log Z
(Korbak et al. 2022; Rafailov et al. 2023, eq. 4). Over one enumeration it is a sum for every
beta at once (:func:`tilted_stats`, per prompt; :func:`tilted_table`, every prompt); tilting with
the verifier gives the least KL at which any policy reaches a given gold (the gold ceiling).
"""

from __future__ import annotations

import math

import torch

from .exact import Completions, _check_distribution

__all__ = ["tilted_stats", "tilted_table"]


def _check_betas(beta) -> torch.Tensor:
    betas = torch.as_tensor(beta, dtype=torch.float64).reshape(-1)  # (M,)
    if len(betas) == 0 or not bool(torch.isfinite(betas).all() and (betas > 0).all()):
        raise ValueError(f"beta must be finite and > 0, got {beta}")
    return betas


def tilted_stats(
    probs: torch.Tensor,
    reward: torch.Tensor,
    beta,
    gold: torch.Tensor | None = None,
    pruned: float = 0.0,
    reward_range: tuple[float, float] | None = None,
) -> dict:
    """Return the KL-regularized optimum's exact KL to pi, expected reward and gold, for each beta (M,) of one prompt.

    pi_beta(y) = pi(y) exp(reward(y) / beta) / Z over the completions kept (``probs``, (K,)), with
    ``{'kl': KL(pi_beta || pi), 'reward': E_beta[reward], 'gold': E_beta[gold] (only with
    ``gold``, values in [0, 1]), 'kl_lower', 'kl_upper', 'reward_lower', 'reward_upper',
    'gold_lower', 'gold_upper', 'tilted_pruned'}``, float64 tensors (M,).

    The values treat the pruned completions as one outcome of mass ``pruned`` that scores the
    range's low end and is never right (as :func:`best_of_n` ranks it below every completion): a
    law the pruned completions could have, so the values lie within the bounds. The bounds hold
    whatever the pruned completions are, given that each reward lies in
    ``reward_range`` (needed when ``pruned`` > 0): their share of the tilted law is at most
    ``tilted_pruned`` = m e^(high/beta) / (Z_kept + m e^(high/beta)), so E_beta[reward] and the gold
    lie between the mixtures of the kept part with that share at the range's ends, and
    log Z between log(Z_kept + m e^(low/beta)) and log(Z_kept + m e^(high/beta)); the KL bounds
    follow from KL = E_beta[reward] / beta - log Z.
    """
    _check_distribution(probs, reward, pruned)
    if gold is not None and gold.shape != probs.shape:
        raise ValueError(f"gold must have shape {tuple(probs.shape)}, one per completion, got {tuple(gold.shape)}")
    if pruned > 0 and reward_range is None:
        raise ValueError("reward_range (low, high) is needed to bound the pruned completions' part")
    betas = _check_betas(beta)
    p, r = probs.double(), reward.double()
    keep = p > 0
    p, r = p[keep], r[keep]
    log_w = torch.log(p)[None, :] + r[None, :] / betas[:, None]  # (M, K)
    log_zk = torch.logsumexp(log_w, dim=1)  # (M,): log Z over the kept, Z = E_pi[exp(r / beta)]
    t = torch.exp(log_w - log_zk[:, None])  # (M, K): the tilted law of the kept completions
    reward_k = t @ r  # (M,)
    gold_k = None if gold is None else t @ gold.double()[keep]
    if pruned <= 0:
        # KL(t || pi) = sum t (log t - log p) = E_t[r] / beta - log Z
        kl = (reward_k / betas - log_zk).clamp(min=0.0)
        out = {"kl": kl, "reward": reward_k, "kl_lower": kl, "kl_upper": kl}
        out.update(reward_lower=reward_k, reward_upper=reward_k, tilted_pruned=torch.zeros_like(betas))
        if gold_k is not None:
            out.update(gold=gold_k, gold_lower=gold_k, gold_upper=gold_k)
        return out
    low, high = reward_range
    if not low <= high:
        raise ValueError(f"reward_range must be (low, high) with low <= high, got {reward_range}")
    log_m = math.log(pruned)
    # the values: the pruned mass as one outcome scoring `low`, never right
    log_z = torch.logaddexp(log_zk, log_m + low / betas)
    share = torch.exp(log_m + low / betas - log_z)  # (M,): its part of the tilted law
    reward_v = (1 - share) * reward_k + share * low
    out = {"kl": (reward_v / betas - log_z).clamp(min=0.0), "reward": reward_v}
    if gold_k is not None:
        out["gold"] = (1 - share) * gold_k
    # the bounds: the pruned part of Z lies between m e^(low/beta) and m e^(high/beta), and so does
    # its share of the tilted law between q_lo = `share` and q_hi
    log_z_high = torch.logaddexp(log_zk, log_m + high / betas)
    q_hi = torch.exp(log_m + high / betas - log_z_high)  # (M,)
    # the mixture (1 - q) E_kept + q v is linear in the share q: its extremes lie at q_lo or q_hi
    reward_lower = torch.minimum(reward_v, (1 - q_hi) * reward_k + q_hi * low)
    reward_upper = torch.maximum((1 - share) * reward_k + share * high, (1 - q_hi) * reward_k + q_hi * high)
    out.update(reward_lower=reward_lower, reward_upper=reward_upper, tilted_pruned=q_hi)
    out["kl_lower"] = (reward_lower / betas - log_z_high).clamp(min=0.0)
    out["kl_upper"] = reward_upper / betas - log_z
    if gold_k is not None:
        out["gold_lower"] = (1 - q_hi) * gold_k
        out["gold_upper"] = gold_k + q_hi * (1 - gold_k)
    return out


def tilted_table(
    comps: Completions,
    reward: torch.Tensor,
    beta,
    gold: torch.Tensor | None = None,
    reward_range: tuple[float, float] | None = None,
) -> dict:
    """Return :func:`tilted_stats` for every prompt of ``comps``: each entry (M, P), with
    ``reward`` and ``gold`` (N,) per completion (:func:`proxy_rewards` or :func:`gold_rewards`)."""
    rows = []
    for i, span in enumerate(comps.spans()):
        g = None if gold is None else gold[span]
        rows.append(tilted_stats(comps.probs[span], reward[span], beta, g, comps.pruned[i].item(), reward_range))
    return {k: torch.stack([r[k] for r in rows], dim=1) for k in rows[0]}
