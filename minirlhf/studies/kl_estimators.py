"""Three sampled estimators of KL(policy || reference), and how good each one is.

Convention (the book's, and TRL's): tokens are sampled from the policy, and for each sampled
token we know two numbers, its log-prob under the policy and under the reference. With

    kl = logp_policy - logp_reference        (= -log r, where r = p_ref / p_policy)

the three per-sample estimators of KL(policy || reference) are

    k1 = kl                                   unbiased, often negative, high variance
    k2 = kl**2 / 2                            never negative, low variance, biased
    k3 = exp(-kl) - 1 + kl  (= (r - 1) - log r)   never negative, unbiased, low variance
                                                  near the reference (:func:`std_crossover`)

These are the k1, k2, k3 of Schulman's note "Approximating KL Divergence" (2020), where the
sampling distribution is called q and the other one p: KL[q, p] = E_{x~q}[log q(x)/p(x)].
Here q is the policy and p the reference. k3 is unbiased because E_q[r] = 1, so the added
(r - 1) has mean zero; it is a control variate that cancels most of k1's noise.

The study: q = N(0, 1), p = N(mu, 1), samples from q. Then log r = mu*x - mu**2/2 and the true
KL[q, p] = mu**2/2, so every bias and standard deviation has a closed form (see
:func:`closed_form`) to check the Monte Carlo numbers of :func:`monte_carlo` against, and both
can be set beside the published table of the note (:data:`PUBLISHED`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "k1",
    "k2",
    "k3",
    "ESTIMATORS",
    "gaussian_logps",
    "true_kl",
    "closed_form",
    "std_crossover",
    "monte_carlo",
    "paired_difference",
    "PUBLISHED",
    "study",
    "format_study",
]


def _kl(logp_policy, logp_reference) -> np.ndarray:
    logp_policy = np.asarray(logp_policy, dtype=float)
    logp_reference = np.asarray(logp_reference, dtype=float)
    if logp_policy.shape != logp_reference.shape:
        raise ValueError(
            f"logp_reference has shape {logp_reference.shape} but logp_policy has shape {logp_policy.shape}"
        )
    return logp_policy - logp_reference


def k1(logp_policy, logp_reference) -> np.ndarray:
    """Return the per-sample k1 estimate, logp_policy - logp_reference (can be negative)."""
    return _kl(logp_policy, logp_reference)


def k2(logp_policy, logp_reference) -> np.ndarray:
    """Return the per-sample k2 estimate, (logp_policy - logp_reference)**2 / 2."""
    return _kl(logp_policy, logp_reference) ** 2 / 2


def k3(logp_policy, logp_reference) -> np.ndarray:
    """Return the per-sample k3 estimate, exp(-kl) - 1 + kl (never negative)."""
    kl = _kl(logp_policy, logp_reference)
    return np.expm1(-kl) + kl  # expm1 keeps the precision when kl is tiny


ESTIMATORS = {"k1": k1, "k2": k2, "k3": k3}


def gaussian_logps(mu: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Return (log q(x), log p(x)) for n samples x ~ q = N(0, 1), with p = N(mu, 1)."""
    x = rng.standard_normal(n)
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    return -0.5 * x**2 - half_log_2pi, -0.5 * (x - mu) ** 2 - half_log_2pi


def true_kl(mu: float) -> float:
    """Return KL[N(0,1), N(mu,1)] = mu**2 / 2."""
    return mu * mu / 2


def closed_form(mu: float) -> dict:
    """Return {name: (bias / true KL, std / true KL)} for one sample, exactly.

    With kl = -log r = mu**2/2 - mu*x and x ~ N(0, 1):
    k1: mean mu**2/2, variance mu**2                      -> (0, 2/mu)
    k2: mean mu**2/2 + mu**4/8, variance (2 mu**4 + mu**6)/4 -> (mu**2/4, sqrt(2 + mu**2))
    k3: r = exp(log r) is log-normal with E[r] = 1, Var[r] = exp(mu**2) - 1, Cov(r, log r) = mu**2,
        so Var[(r - 1) - log r] = exp(mu**2) - 1 - mu**2  -> (0, sqrt(expm1(mu**2) - mu**2) / (mu**2/2))
    """
    if mu == 0:
        raise ValueError("mu must be non-zero: the true KL is 0 and the ratios are undefined")
    kl = true_kl(mu)
    return {
        "k1": (0.0, 2 / abs(mu)),
        "k2": (mu * mu / 4, math.sqrt(2 + mu * mu)),
        "k3": (0.0, math.sqrt(math.expm1(mu * mu) - mu * mu) / kl),
    }


def std_crossover() -> float:
    """Return the mu > 0 at which k3's standard deviation equals k1's; k3 is the noisier beyond.

    From :func:`closed_form`, Var[k3] = exp(mu**2) - 1 - mu**2 and Var[k1] = mu**2, so with
    x = mu**2 the crossover solves exp(x) = 1 + 2x. f(x) = exp(x) - 1 - 2x is 0 at x = 0, falls
    until x = log 2 and rises after, so it is negative from 0 to the root and positive beyond:
    bisection on [log 2, 2] finds the root.
    """
    lo, hi = math.log(2), 2.0  # f(x) = expm1(x) - 2x: f(lo) < 0 < f(hi)
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.expm1(mid) - 2 * mid < 0:
            lo = mid
        else:
            hi = mid
    return math.sqrt((lo + hi) / 2)


def monte_carlo(mu: float, n: int = 10_000_000, seed: int = 0, chunk: int = 1_000_000) -> dict:
    """Return {name: (bias / true KL, std / true KL, standard error of the bias ratio)} from n
    samples of q = N(0, 1), drawn in chunks to keep memory small."""
    if n % chunk:
        raise ValueError(f"n ({n}) must be a multiple of chunk ({chunk})")
    rng = np.random.default_rng(seed)
    means = {name: [] for name in ESTIMATORS}
    variances = {name: [] for name in ESTIMATORS}
    for _ in range(n // chunk):
        logq, logp = gaussian_logps(mu, chunk, rng)  # q is the sampler ("policy"), p the "reference"
        for name, estimator in ESTIMATORS.items():
            values = estimator(logq, logp)
            means[name].append(values.mean())
            variances[name].append(values.var())
    kl = true_kl(mu)
    out = {}
    for name in ESTIMATORS:
        m = np.asarray(means[name])
        mean = m.mean()
        std = math.sqrt(np.mean(variances[name]) + m.var())  # equal chunks: within + between
        out[name] = ((mean - kl) / kl, std / kl, std / kl / math.sqrt(n))
    return out


# The table of Schulman's note (2020), as printed there: (bias / true, stdev / true).
PUBLISHED = {
    0.1: {"k1": (0.0, 20.0), "k2": (0.002, 1.42), "k3": (0.0, 1.42)},
    1.0: {"k1": (0.0, 2.0), "k2": (0.25, 1.73), "k3": (0.0, 1.7)},
}


def study(mus=(0.1, 1.0), n: int = 10_000_000, seed: int = 0) -> list[dict]:
    """Return one row per (mu, estimator): true KL, Monte Carlo, closed-form and published ratios."""
    rows = []
    for mu in mus:
        mc, exact, paper = monte_carlo(mu, n, seed), closed_form(mu), PUBLISHED.get(mu, {})
        for name in ESTIMATORS:
            rows.append(
                {
                    "mu": mu,
                    "true_kl": true_kl(mu),
                    "estimator": name,
                    "mc_bias": mc[name][0],
                    "mc_bias_se": mc[name][2],
                    "exact_bias": exact[name][0],
                    "paper_bias": paper.get(name, (None, None))[0],
                    "mc_std": mc[name][1],
                    "exact_std": exact[name][1],
                    "paper_std": paper.get(name, (None, None))[1],
                }
            )
    return rows


def paired_difference(
    mu: float, a: str = "k2", b: str = "k3", n: int = 10_000_000, seed: int = 0, chunk: int = 1_000_000
) -> tuple[float, float]:
    """Return (mean of a - b, its standard error), both divided by the true KL, on the samples
    of :func:`monte_carlo`. With b unbiased, this is a low-noise estimate of a's bias ratio."""
    if n % chunk:
        raise ValueError(f"n ({n}) must be a multiple of chunk ({chunk})")
    rng = np.random.default_rng(seed)
    means, variances = [], []
    for _ in range(n // chunk):
        logq, logp = gaussian_logps(mu, chunk, rng)
        diff = ESTIMATORS[a](logq, logp) - ESTIMATORS[b](logq, logp)
        means.append(diff.mean())
        variances.append(diff.var())
    m = np.asarray(means)
    kl = true_kl(mu)
    std = math.sqrt(np.mean(variances) + m.var())
    return float(m.mean()) / kl, std / kl / math.sqrt(n)


def format_study(rows: list[dict]) -> str:
    """Return the study as a fixed-width text table: biases to 4 decimals, standard deviations
    to 3, the published values as printed in the note ("-" where it has none)."""

    def paper(x, width):
        return f"{'-':>{width}}" if x is None else f"{x:>{width}g}"

    lines = [
        f"{'':<14}{'bias / KL':^32}  {'std / KL':^22}".rstrip(),
        f"{'mu':<4}{'KL':<6}{'est':<4}{'MC':>16}{'exact':>9}{'paper':>7}  {'MC':>7}{'exact':>8}{'paper':>7}",
    ]
    lines.append("-" * len(lines[1]))
    for r in rows:
        mc_bias = f"{r['mc_bias']:+.4f}±{r['mc_bias_se']:.4f}"
        lines.append(
            f"{r['mu']:<4g}{r['true_kl']:<6.3f}{r['estimator']:<4}{mc_bias:>16}"
            f"{r['exact_bias']:>9.4f}{paper(r['paper_bias'], 7)}"
            f"  {r['mc_std']:>7.3f}{r['exact_std']:>8.3f}{paper(r['paper_std'], 7)}"
        )
    return "\n".join(lines)
