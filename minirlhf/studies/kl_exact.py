"""A run's KL estimates, measured exactly: the law of one sampled answer's k1, k2 and k3 sums (chapter 11).

A run never sees the sequence KL(pi || ref); it estimates it from answers it samples at 0.7.
For one sampled answer y of a prompt, with r_t = ref(y_t | x, y_<t) / pi(y_t | x, y_<t) at each
of its tokens up to and including the first `;` (:func:`~minirlhf.model.completion_mask`), the
sums :func:`minirlhf.studies.overoptimization.sampled_kl` makes are

    k1(y) = sum_t -log r_t                  (log pi - log ref of the answer)
    k2(y) = sum_t (log r_t)^2 / 2
    k3(y) = sum_t r_t - 1 - log r_t

Over the enumerated answers (:mod:`minirlhf.exact`) the law of each sum is known exactly, and
with it everything about a run's estimate but its draw:

* the mean (:func:`answer_moments`): E[k1(y)] is the sequence KL by definition, and so is
  E[k3(y)]. At one prefix the next token v ~ pi has E[r] = sum_v pi(v) ref(v) / pi(v) = 1 over the
  whole 13-token softmax, so E[k3_t | prefix] = KL_t(prefix); the sequence KL is the expected sum
  over positions of KL_t given the prefix (the chain rule), and so the expected k3 sum. Both need
  every token to have positive probability under both models, as a TinyGPT's finite logits give.
  k2 is biased;
* the variance of one answer's sum, hence of a batch mean, and the chance that a batch reads
  below the truth (:func:`batch_below_truth`), by drawing batches from the exact law: a skewed
  law reads low more often than half the time, however unbiased;
* where k3 is the less noisy (:func:`estimator_variances`, along :func:`blend`): near the
  reference every r_t is near 1 and k3 ~ (r - 1)^2 / 2 is of second order where k1 ~ 1 - r is of
  first; far from it a token the policy avoids and the reference likes has a large r, and k3's
  variance can exceed k1's (Schulman's note claims the lower variance near the reference only);
* the length of an answer (:func:`length_split`): E[L] under pi and the per-token KL of sampled
  answers, KL / E[L], beside the per-token KL of the greedy answers that chapter 5's ``evaluate``
  prints (:func:`greedy_token_kl`).

Every number is per prompt first (P,), as in :mod:`minirlhf.exact`, with the pruned mass and
bounds that hold whatever the pruned answers are.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import exact
from ..model import TinyGPT, completion_logits, completion_mask, exact_kl, generate, logprobs_from_logits
from ..task import COMPLETION_LEN

__all__ = [
    "ESTIMATORS",
    "Moments",
    "AnswerLaw",
    "answer_terms",
    "answer_moments",
    "batch_below_truth",
    "blend",
    "estimator_variances",
    "greedy_token_kl",
    "length_split",
    "measure",
]

ESTIMATORS = ("k1", "k2", "k3")
TEMPERATURE = 0.7  # the book's sampling temperature (PPOConfig.temperature)
MIN_PROB = 1e-8  # chapter 11's pruning threshold
DESIGNS = ("stratified", "rollout")
CHUNK = 1_000  # batches drawn at once by :func:`batch_below_truth`: memory, not the draws, depends on it
Z95 = 1.959963984540054  # the normal distribution's 97.5% point


# ----------------------------------------------------------------------------- the sums of each answer


@torch.no_grad()
def answer_terms(
    comps: exact.Completions, policy: TinyGPT, reference: TinyGPT, batch_size: int = 1024
) -> dict[str, torch.Tensor]:
    """Return the k1, k2 and k3 sums and the length of every enumerated answer: ``{'k1', 'k2', 'k3',
    'length'}``, each (N,) float64.

    Token log-probs are read at ``comps.temperature`` from one forward pass of each model per
    batch of ``batch_size`` answers, the same batches for both, so that a model against itself
    gives sums of exactly 0. ``length`` counts the tokens :func:`~minirlhf.model.completion_mask`
    keeps: up to and including the first `;`, all 4 without one. ``policy`` must be the model that
    ``comps`` enumerates: its log-probs of each answer are checked against ``comps.logp``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prompts = comps.prompts[comps.prompt_index]  # (N, 6)
    out = {name: [] for name in (*ESTIMATORS, "length", "logp")}
    for i in range(0, len(prompts), batch_size):
        p, c = prompts[i : i + batch_size], comps.tokens[i : i + batch_size]
        lp_pi, lp_ref = (
            logprobs_from_logits(completion_logits(m, p, c).double(), c, comps.temperature) for m in (policy, reference)
        )  # (b, 4) each
        kept = completion_mask(c) > 0  # (b, 4)
        log_ratio = lp_pi - lp_ref  # (b, 4): -log r_t, anything past the first `;` (maybe nan) is not kept
        out["k1"].append(torch.where(kept, log_ratio, 0.0).sum(1))
        out["k2"].append(torch.where(kept, log_ratio**2 / 2, 0.0).sum(1))
        out["k3"].append(torch.where(kept, torch.expm1(-log_ratio) + log_ratio, 0.0).sum(1))
        out["length"].append(kept.double().sum(1))
        out["logp"].append(torch.where(kept, lp_pi, 0.0).sum(1))
    terms = {k: torch.cat(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in out.items()}
    gap = (terms.pop("logp") - comps.logp).abs().max().item() if len(prompts) else 0.0
    if not gap <= 1e-9:
        raise ValueError(f"policy must be the model comps enumerates: its log-probs of the answers differ by {gap:.3g}")
    return terms


# ----------------------------------------------------------------------------- mean and variance, exactly


@dataclass
class Moments:
    """One estimator's sum over an answer: its value on every enumerated answer, and per prompt
    the mean and variance of its law under pi.

    ``value`` of ``mean`` and ``var`` is that of the law in which the pruned answers are one
    outcome whose sum is 0: the kept part of the mean, as in :mod:`minirlhf.exact`, and the law
    :func:`batch_below_truth` draws from. ``lower`` and ``upper`` hold whatever the pruned
    answers are (:func:`answer_moments`); ``value`` may lie outside them, where the bounds show
    that the pruned answers' sums cannot all be 0.
    """

    values: torch.Tensor  # (N,) float64: the sum of each enumerated answer
    mean: exact.Bounded  # (P,): E_pi[sum]
    var: exact.Bounded  # (P,): Var_pi[sum]


@dataclass
class AnswerLaw:
    """The exact law of one sampled answer's KL sums, for each prompt of ``comps``."""

    comps: exact.Completions
    k1: Moments
    k2: Moments
    k3: Moments
    # (P,): the sequence KL(pi || ref), :func:`~minirlhf.exact.exact_sequence_kl`; ``k1.mean`` is the same
    # number from the token log-probs (to rounding), exactly 0 for a model against itself
    kl: exact.Bounded
    length: torch.Tensor  # (N,) float64: the tokens of each answer, `;` included

    def estimator(self, name: str) -> Moments:
        """Return the :class:`Moments` of ``name``, one of :data:`ESTIMATORS`."""
        if name not in ESTIMATORS:
            raise ValueError(f"name must be one of {ESTIMATORS}, got {name!r}")
        return getattr(self, name)


def _times_mass(mass: torch.Tensor, x) -> torch.Tensor:
    """Return mass * x, 0 where the mass is 0 (an unbounded x times no mass adds nothing)."""
    return torch.where(mass > 0, mass * x, 0.0)


def _g(x: float) -> float:
    """Return k3 at log r = x, e^x - 1 - x; inf where e^x overflows."""
    return math.expm1(x) - x if x < 700 else math.inf


def _pruned_ranges(floors: tuple[float, float], min_prob: float) -> dict[str, tuple[float, float]]:
    """Return, for each estimator, (a, b) with a <= sum <= b on any pruned answer.

    A pruned answer has pi(y) < ``min_prob`` and at most 4 tokens, each with log pi >= fp and
    log ref >= fr (``floors`` = (fp, fr)), so log r_t lies in [fr, -fp] and log pi(y) - log ref(y)
    in [4 fp, log(min_prob) - 4 fr].
    """
    fp, fr = floors
    n = COMPLETION_LEN
    return {
        "k1": (n * fp, math.log(min_prob) - n * fr),
        "k2": (0.0, n * max(fp * fp, fr * fr) / 2),
        "k3": (0.0, n * max(_g(fr), _g(-fp))),
    }


def _var_bounds(d2, s1, m, a: float, b: float, t_lo, t_hi) -> tuple[torch.Tensor, torch.Tensor]:
    """Return bounds (P,) on the variance of a law whose kept part has mass 1 - m, sum s1 = sum p S
    and centred square d2 = sum p (S - s1)^2, its pruned part mass m, values in [a, b] and first
    moment t1 = sum_pruned p S in [t_lo, t_hi].

    The variance is d2 + sum_pruned p (S - s1)^2 - t1^2. Lower: sum_pruned p (S - s1)^2 >=
    (t1 - m s1)^2 / m (Cauchy-Schwarz), a convex quadratic in t1, least at t1 = m s1 / (1 - m)
    (the pruned part's mean equal to the kept part's) or at the nearer end. Upper: (S - a)(S - b)
    <= 0 gives sum_pruned p S^2 <= (a + b) t1 - m a b, a concave quadratic in t1, largest at
    t1 = (a + b) / 2 - s1 or at the nearer end.
    """
    safe_m = torch.where(m > 0, m, 1.0)
    t = torch.minimum(torch.maximum(m * s1 / (1 - m).clamp(min=1e-300), t_lo), t_hi)
    q = t - m * s1
    lower = (d2 + q * q / safe_m - t * t).clamp(min=0.0)
    if math.isfinite(b):
        t = torch.minimum(torch.maximum((a + b) / 2 - s1, t_lo), t_hi)
        upper = d2 + m * s1 * s1 - m * a * b + t * (a + b - 2 * s1) - t * t
    else:
        upper = torch.full_like(d2, math.inf)
    return torch.where(m > 0, lower, d2), torch.where(m > 0, upper, d2)


@torch.no_grad()
def answer_moments(
    comps: exact.Completions,
    policy: TinyGPT,
    reference: TinyGPT,
    floors: tuple[float, float] | None = None,
    batch_size: int = 1024,
) -> AnswerLaw:
    """Return the exact mean and variance under pi of one answer's k1, k2 and k3 sums, per prompt.

    The kept answers give, per prompt, s1 = sum_y pi(y) S(y) and the centred
    d2 = sum_y pi(y) (S(y) - s1)^2; ``mean.value`` is s1 and ``var.value`` is d2 + m s1^2 (the
    pruned mass m as one outcome of sum 0). With nothing pruned both are exact, and the means of
    k1 and of k3 equal the sequence KL (``kl``) to rounding.

    What the pruned mass can do: an answer of probability below ``min_prob`` has at most 4 tokens,
    each of log-prob at least fp under pi and fr under ref (``floors`` = (fp, fr); None reads both
    from the models' last layers, :func:`~minirlhf.exact.token_logprob_floor`, TinyGPTs only, and
    only when something was pruned), which bounds each of its sums (k1 by
    4 fp <= S <= log(min_prob) - 4 fr, k2 and k3 through log r_t in [fr, -fp]). The means of k1
    and k3 are the sequence KL and take its bounds; k3's sum is never negative, so its kept part
    is a lower bound of both. The variances take the bounds of :func:`_var_bounds`. The upper
    bound of k3's variance is finite but useless when fp is far below 0 (a pruned token's r may
    be as large as e^-fp): the pruned answers can, in principle, carry most of k3's variance,
    which is k3's heavy tail itself; to see what they do carry, enumerate with a smaller
    ``min_prob`` and compare.
    """
    if floors is not None and not (len(floors) == 2 and all(f <= 0 for f in floors)):
        raise ValueError(f"floors must be (policy floor, reference floor), each <= 0, got {floors}")
    terms = answer_terms(comps, policy, reference, batch_size)
    m = comps.pruned  # (P,)
    pruned = bool((m > 0).any())
    if pruned and floors is None:
        floors = (
            exact.token_logprob_floor(policy, comps.temperature),
            exact.token_logprob_floor(reference, comps.temperature),
        )
    # the floor only enters a bound through the pruned mass: with none, any number does
    kl = exact.exact_sequence_kl(comps, reference, floors[1] if pruned else 0.0, batch_size)
    ranges = _pruned_ranges(floors, comps.min_prob) if pruned else {k: (0.0, 0.0) for k in ESTIMATORS}
    p = comps.probs  # (N,)
    moments = {}
    for name in ESTIMATORS:
        s = terms[name]  # (N,)
        s1 = comps.per_prompt(_times_mass(p, s))  # (P,)
        d2 = comps.per_prompt(_times_mass(p, (s - s1[comps.prompt_index]) ** 2))  # (P,)
        a, b = ranges[name]
        mean_lo, mean_hi = s1 + _times_mass(m, a), s1 + _times_mass(m, b)
        if name in ("k1", "k3"):  # both are the sequence KL; k3's pruned part is >= 0
            mean_lo = torch.maximum(torch.maximum(mean_lo, kl.lower), comps.per_prompt(_times_mass(p, terms["k3"])))
            mean_hi = torch.minimum(mean_hi, kl.upper)
        t_lo, t_hi = mean_lo - s1, mean_hi - s1  # (P,): the pruned part's share of the mean
        t_hi = torch.maximum(t_hi, t_lo)  # the two bounds may cross by rounding
        var_lo, var_hi = _var_bounds(d2, s1, m, a, b, t_lo, t_hi)
        var = d2 + m * s1 * s1
        moments[name] = Moments(
            values=s,
            mean=exact.Bounded(s1, torch.where(m > 0, mean_lo, s1), torch.where(m > 0, mean_hi, s1)),
            var=exact.Bounded(var, var_lo, var_hi),
        )
    return AnswerLaw(comps=comps, kl=kl, length=terms["length"], **moments)


# ----------------------------------------------------------------------------- a batch's mean


def _check_batch(law: AnswerLaw, batch: int, design: str) -> None:
    n_prompts = len(law.comps.prompts)
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
    if not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if design == "stratified" and batch % n_prompts:
        raise ValueError(
            f"batch must be a multiple of the {n_prompts} prompts for the stratified design, got {batch}"
            " (the rollout design draws the prompts)"
        )


def _exact_batch(law: AnswerLaw, name: str, batch: int, design: str) -> tuple[float, float]:
    """Return the exact mean and variance of a batch's mean of ``name``'s sum (the pruned mass at 0)."""
    est = law.estimator(name)
    mu, var = est.mean.value, est.var.value  # (P,)
    if design == "stratified":  # batch / P answers of each prompt: sum_i var_i (batch / P) / batch^2
        return float(mu.mean()), float(var.sum() / (len(mu) * batch))
    # one prompt drawn uniformly per answer: the variance of one answer is within plus between prompts
    return float(mu.mean()), float((var.mean() + ((mu - mu.mean()) ** 2).mean()) / batch)


def batch_below_truth(
    law: AnswerLaw,
    batch: int,
    reps: int = 20_000,
    seed: int = 0,
    design: str = "stratified",
    estimators=("k1", "k3"),
) -> dict:
    """Return the chance that the mean of ``estimators``' sums over a batch of ``batch`` answers
    reads below the true KL (averaged over the prompts), by ``reps`` batches drawn from the exact law.

    ``design``: "stratified", batch / P answers of each of the P prompts, as
    :func:`~minirlhf.studies.overoptimization.sampled_kl` draws them (``batch`` a multiple of P);
    "rollout", each answer's prompt drawn uniformly with replacement from the P, as a rollout
    draws its prompts from a pool (any ``batch``).

    Returns ``{'truth', 'truth_lower', 'truth_upper', 'escape', 'batch', 'design', 'reps', <name>:
    {...}}``. ``truth`` is the mean over the prompts of k1's exact mean, the sequence KL (its kept
    part, moved into its bounds where the pruned mass requires it), and the other two are its
    bounds. For each estimator: ``below``, the fraction of batches whose mean is below
    ``truth``; ``half_width``, 1.96 sqrt(below (1 - below) / reps), the Monte Carlo half-width
    at 95%; ``below_lower`` and ``below_upper``, the fractions below ``truth_lower`` and
    ``truth_upper``; ``mean``, ``var`` and ``sd`` of the batch mean, exactly; ``sim_mean`` and
    ``sim_sd`` over the batches drawn.

    The draws come from NumPy's generator seeded with ``seed``: answer indices by inverse
    transform of uniforms (the same on every machine), the pruned mass of each prompt as one
    outcome of sum 0. That law differs from the true one only when a draw is pruned, with
    probability at most ``escape`` (1 - prod over the draws of (1 - m)); so the true chance of
    reading below the true KL lies within [below_lower - escape, below_upper + escape], up to
    the Monte Carlo error.
    """
    _check_batch(law, batch, design)
    if not (isinstance(reps, int) and reps >= 1):
        raise ValueError(f"reps must be an int >= 1, got {reps!r}")
    for name in estimators:
        law.estimator(name)
    comps, n_prompts = law.comps, len(law.comps.prompts)
    m = comps.pruned.numpy()  # (P,)
    cdfs, values = [], []  # per prompt: the cumulative probabilities (K + 1,), the sums (E, K + 1)
    for i, span in enumerate(comps.spans()):
        probs = np.append(comps.probs[span].numpy(), m[i])
        cdf = np.cumsum(probs)
        cdf /= cdf[-1]
        cdf[-1] = 1.0  # a uniform in [0, 1) always lands on an outcome
        cdfs.append(cdf)
        values.append(np.stack([np.append(law.estimator(k).values[span].numpy(), 0.0) for k in estimators]))
    rng = np.random.default_rng(seed)
    means = np.empty((len(estimators), reps))  # (E, reps)
    for start in range(0, reps, CHUNK):
        n = min(CHUNK, reps - start)
        if design == "stratified":
            total = np.zeros((len(estimators), n))
            for cdf, vals in zip(cdfs, values):
                idx = np.searchsorted(cdf, rng.random((n, batch // n_prompts)), side="right")  # (n, batch / P)
                total += vals[:, idx].sum(axis=2)
        else:
            who = rng.integers(n_prompts, size=(n, batch))  # (n, batch): each answer's prompt
            u = rng.random((n, batch))
            drawn = np.empty((len(estimators), n, batch))
            for i, (cdf, vals) in enumerate(zip(cdfs, values)):
                here = who == i
                drawn[:, here] = vals[:, np.searchsorted(cdf, u[here], side="right")]
            total = drawn.sum(axis=2)
        means[:, start : start + n] = total / batch
    truth = law.k1.mean
    out = {
        "truth": float(torch.minimum(torch.maximum(truth.value, truth.lower), truth.upper).mean()),
        "truth_lower": float(truth.lower.mean()),
        "truth_upper": float(truth.upper.mean()),
        "batch": batch,
        "design": design,
        "reps": reps,
    }
    draws = np.full(n_prompts, batch // n_prompts) if design == "stratified" else None
    if draws is not None:
        out["escape"] = float(-np.expm1(np.sum(draws * np.log1p(-m))))
    else:
        out["escape"] = float(-np.expm1(batch * np.log1p(-m.mean())))
    for k, name in enumerate(estimators):
        below = float(np.mean(means[k] < out["truth"]))
        mean, var = _exact_batch(law, name, batch, design)
        out[name] = {
            "below": below,
            "half_width": Z95 * math.sqrt(below * (1 - below) / reps),
            "below_lower": float(np.mean(means[k] < out["truth_lower"])),
            "below_upper": float(np.mean(means[k] < out["truth_upper"])),
            "mean": mean,
            "var": var,
            "sd": math.sqrt(var),
            "sim_mean": float(means[k].mean()),
            "sim_sd": float(means[k].std(ddof=1)) if reps > 1 else 0.0,
        }
    return out


# ----------------------------------------------------------------------------- near and far from the reference


@torch.no_grad()
def blend(reference: TinyGPT, policy: TinyGPT, alpha: float) -> TinyGPT:
    """Return a copy of ``reference`` whose weights are (1 - alpha) ref + alpha policy: 0 is the
    reference, 1 the policy, and values beyond 1 go further along the same line. A path of
    policies from the reference outwards, for :func:`estimator_variances`."""
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    ref_state, pol_state = reference.state_dict(), policy.state_dict()
    if ref_state.keys() != pol_state.keys() or any(ref_state[k].shape != pol_state[k].shape for k in ref_state):
        raise ValueError("policy must have the reference's architecture (the same weights' names and shapes)")
    out = copy.deepcopy(reference).eval()
    out.load_state_dict({k: torch.lerp(ref_state[k], pol_state[k], alpha) for k in ref_state})
    return out


def estimator_variances(
    policies,
    reference: TinyGPT,
    prompts: torch.Tensor,
    temperature: float = TEMPERATURE,
    min_prob: float = MIN_PROB,
    floors: tuple[float, float] | None = None,
) -> dict:
    """Return, for each policy of ``policies``, the variance of one answer's k1 and k3 sums.

    ``{'kl', 'k1_var', 'k3_var', 'k3_var_upper', 'pruned'}``, lists with one entry per policy:
    the sequence KL and each variance averaged over the prompts (the noise within a prompt, which
    a batch averages), k3's upper bound (:func:`answer_moments`) and the largest pruned mass.
    Near the reference k3's variance is the smaller; far from it it can be the larger.
    """
    out = {k: [] for k in ("kl", "k1_var", "k3_var", "k3_var_upper", "pruned")}
    for policy in policies:
        comps = exact.enumerate_completions(policy, prompts, temperature, min_prob)
        law = answer_moments(comps, policy, reference, floors)
        out["kl"].append(float(law.k1.mean.value.mean()))
        out["k1_var"].append(float(law.k1.var.value.mean()))
        out["k3_var"].append(float(law.k3.var.value.mean()))
        out["k3_var_upper"].append(float(law.k3.var.upper.mean()))
        out["pruned"].append(float(comps.pruned.max()))
    return out


# ----------------------------------------------------------------------------- per token and per answer


@torch.no_grad()
def greedy_token_kl(
    policy: TinyGPT, reference: TinyGPT, prompts: torch.Tensor, temperature: float = TEMPERATURE
) -> dict:
    """Return the exact per-token KL of the greedy answers, as chapter 5's ``evaluate`` computes it.

    ``{'kl', 'length'}``: KL(pi || ref) at ``temperature`` summed over the vocabulary at each
    position of the greedy answer to each prompt, up to and including its first `;`, pooled
    (the sum over every prompt's positions over their number); and the greedy answers' mean length.
    """
    completions, logits = generate(policy, prompts, greedy=True, return_logits=True)  # (P, 4), (P, 4, 13)
    mask = completion_mask(completions)  # (P, 4)
    ref_logits = completion_logits(reference, prompts, completions)  # (P, 4, 13)
    kl = (exact_kl(logits, ref_logits, temperature).clamp(min=0) * mask).sum() / mask.sum()
    return {"kl": kl.item(), "length": mask.double().sum(1).mean().item()}


def length_split(law: AnswerLaw, greedy_kl: float | None = None) -> dict:
    """Return the expected answer length under pi and the per-token KL of sampled answers.

    ``length``: E_pi[L] per prompt (:class:`~minirlhf.exact.Bounded`, (P,)), L counting the tokens
    up to and including the first `;` as :func:`~minirlhf.model.completion_mask` does (a pruned
    answer has 1 to 4). Averaged over the prompts: ``kl`` (k1's exact mean, the sequence KL) and
    ``mean_length``, each with ``_lower`` and ``_upper``, and ``per_token_kl`` = kl / mean_length,
    the expected KL per token of a sampled answer (the expected sum over its positions of KL_t
    over its expected number of positions, pooled as ``evaluate`` pools the greedy answers'
    tokens), with its bounds.

    With ``greedy_kl`` (:func:`greedy_token_kl` on the same prompts), the ratio the earlier
    chapters' number has to the sequence KL, ``greedy_over_kl``, splits into two factors:
    ``one_over_length`` = 1 / mean_length, the division by length, and ``greedy_over_sampled``
    = greedy_kl x mean_length / kl, the greedy answers' per-token KL against the sampled
    answers'. Their product is ``greedy_over_kl``; the ratios are NaN where the KL is 0.
    """
    comps = law.comps
    value = comps.per_prompt(comps.probs * law.length)  # (P,)
    length = exact.Bounded(value, value + comps.pruned, value + COMPLETION_LEN * comps.pruned)
    out = {"length": length}
    for key, b in (("kl", law.k1.mean), ("mean_length", length)):
        out.update(
            {key: float(b.value.mean()), f"{key}_lower": float(b.lower.mean()), f"{key}_upper": float(b.upper.mean())}
        )
    out["per_token_kl"] = out["kl"] / out["mean_length"]
    out["per_token_kl_lower"] = max(out["kl_lower"], 0.0) / out["mean_length_upper"]
    out["per_token_kl_upper"] = out["kl_upper"] / out["mean_length_lower"]
    if greedy_kl is not None:
        per_kl = 1 / out["kl"] if out["kl"] > 0 else math.nan  # a policy against itself has no ratio
        out["greedy_kl"] = greedy_kl
        out["greedy_over_kl"] = greedy_kl * per_kl
        out["one_over_length"] = 1 / out["mean_length"]
        out["greedy_over_sampled"] = greedy_kl * out["mean_length"] * per_kl
    return out


# ----------------------------------------------------------------------------- everything for one policy


def measure(
    policy: TinyGPT,
    reference: TinyGPT,
    prompts: torch.Tensor,
    batches=(64, 400),
    reps: int = 20_000,
    seed: int = 0,
    temperature: float = TEMPERATURE,
    min_prob: float = MIN_PROB,
) -> dict:
    """Return the numbers of this module for one policy, averaged over ``prompts``, as floats.

    ``kl`` (with ``kl_lower``, ``kl_upper``), ``pruned`` (the largest pruned mass), for k1, k2
    and k3 ``<k>_mean``, ``<k>_sd`` (of one answer's sum, its prompt drawn uniformly: what
    ``sampled_kl``'s ``k1_sd`` estimates) and ``<k>_sd_within`` (the root of the mean variance
    within a prompt), ``batches`` (a :func:`batch_below_truth` per batch size, stratified when it
    is a multiple of the prompts, rollout otherwise) and ``length`` (:func:`length_split`, with
    :func:`greedy_token_kl` on the same prompts).
    """
    comps = exact.enumerate_completions(policy, prompts, temperature, min_prob)
    law = answer_moments(comps, policy, reference)
    kl = law.k1.mean  # the sequence KL, exactly 0 for a model against itself
    out = {"kl": float(kl.value.mean()), "kl_lower": float(kl.lower.mean()), "kl_upper": float(kl.upper.mean())}
    out.update(pruned=float(comps.pruned.max()), answers=len(comps.logp))
    for name in ESTIMATORS:
        mu, var = law.estimator(name).mean.value, law.estimator(name).var.value
        out[f"{name}_mean"] = float(mu.mean())
        out[f"{name}_sd"] = math.sqrt(float(var.mean() + ((mu - mu.mean()) ** 2).mean()))
        out[f"{name}_sd_within"] = math.sqrt(float(var.mean()))
    out["batches"] = {
        b: batch_below_truth(law, b, reps, seed, "stratified" if b % len(prompts) == 0 else "rollout") for b in batches
    }
    split = length_split(law, greedy_token_kl(policy, reference, prompts, temperature)["kl"])
    split.pop("length")
    out["length"] = split
    return out
