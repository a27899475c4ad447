"""Means with 95% intervals over seeds, and the text the chapters print them in.

Every comparison in the book is a mean over seeds with a Student's t interval, and a
difference of two arms is taken seed by seed (:func:`paired_gap`), so that its interval is
that of the differences. A claim is printed with its verdict (:func:`print_claims`), "holds" or
"DOES NOT HOLD", never hidden.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["T95", "mean_ci95", "pm", "paired_gap", "print_gaps", "verdict", "print_claims"]

# Two-sided 95% critical values of Student's t, by degrees of freedom (1..30).
T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,  # 1..10
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,  # 11..20
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,  # 21..30
)  # fmt: skip


def mean_ci95(values) -> tuple[float, float]:
    """Return (mean, half-width of the 95% t-interval) of ``values``; half-width NaN for one value.

    Defined in chapter 5.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("values is empty")
    if x.size == 1:
        return float(x[0]), float("nan")
    t = T95[x.size - 2] if x.size - 1 <= len(T95) else 1.960
    return float(x.mean()), float(t * x.std(ddof=1) / math.sqrt(x.size))


def pm(mean: float, half: float, digits: int = 3, sign: str = "") -> str:
    """Return ``'mean ± half'`` with ``digits`` decimals (``sign="+"`` always prints the
    mean's sign); the mean alone when ``half`` is NaN (one seed)."""
    text = f"{mean:{sign}.{digits}f}"
    return text if math.isnan(half) else f"{text} ± {half:.{digits}f}"


def paired_gap(a, b) -> tuple[float, float]:
    """Return (mean, half-width of the 95% interval) of ``a - b`` taken seed by seed: ``a``
    and ``b`` hold one value per seed, in the same order of seeds."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must hold one value per seed each, got shapes {a.shape} and {b.shape}")
    return mean_ci95(a - b)


def print_gaps(title: str, rows, width: int = 36, mean_width: int = 8) -> None:
    """Print ``title`` over one line per ``(text, (mean, half))`` of ``rows``: the text, the
    mean and its 95% interval."""
    print(f"{title:<{width}}{'mean':>{mean_width}}   95% interval")
    for text, (m, h) in rows:
        print(f"{text:<{width}}{m:>+{mean_width}.3f}   [{m - h:+.3f}, {m + h:+.3f}]")


def verdict(holds: bool) -> str:
    """Return ``'holds'`` or ``'DOES NOT HOLD'``."""
    return "holds" if holds else "DOES NOT HOLD"


def print_claims(claims, width: int = 56) -> None:
    """Print one line per claim, its verdict first: ``(text, holds)``, or ``(text, value,
    holds)`` to print the value measured after the text (padded to ``width``)."""
    for claim in claims:
        text, *value, holds = claim
        tail = f"{text:<{width}}{value[0]:+.3f}" if value else text
        print(f"{verdict(holds):<15}{tail}")
