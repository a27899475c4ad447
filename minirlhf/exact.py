"""Exact quantities by enumeration: the whole distribution over completions, and best-of-n.

A completion is at most 4 tokens of a 13-token vocabulary and ends at its first `;`, so the
policy's distribution over completions of one prompt has at most 1 + 12 + 12^2 + 12^3 + 12^4 =
22,621 outcomes (`;` alone, one to three other tokens and `;`, or four without one), and the
book's SFT policy puts all but 1e-4 of its mass on about a hundred. Expanding every prefix until
`;` or the length limit gives that distribution itself, and from it, with no sampling noise, the
quantities a run only estimates:

    KL(pi || ref) = sum_y pi(y) (log pi(y) - log ref(y))       the sequence-level KL
    gold          = sum_y pi(y) verifier(y)                      the expected verifier accuracy
    proxy         = sum_y pi(y) rm(y)                            the expected reward-model score

The distribution is that of sampling at a temperature (the book's 0.7, ``PPOConfig.temperature``):
token log-probs are ``log_softmax(logits / temperature)``, as ``logprobs_from_logits`` computes
them, and the reference is read at the same temperature. A prefix whose probability falls below
``min_prob`` is not expanded; its mass is kept per prompt as ``pruned``, and every expectation
comes with bounds that hold whatever the pruned completions are (:class:`Bounded`).

Best-of-n, exactly: draw n completions from pi and keep the one the proxy ranks highest. Its law
is P_n(y) = F(y)^n - F(y^-)^n with F the proxy's distribution function under pi, so the KL of
best-of-n to pi, its gold and its proxy follow for every n at no training cost
(:func:`best_of_n`, :func:`best_of_n_stats`), to compare with the analytic
log n - (n - 1) / n (Stiennon et al. 2020), an upper bound for a discrete distribution
(Beirami et al. 2024). So does its win rate against pi, P(proxy(Y) > proxy(Z)) + P(proxy(Y) = proxy(Z)) / 2
for Y the best of n and Z a draw from pi (:func:`best_of_n_win_rate`), to compare with n / (n + 1),
its value for a continuous proxy and an upper bound for a discrete one.

The KL-regularized optimum, the tilt of pi by a reward, is computed from the same enumeration
by :mod:`minirlhf.tilted`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .model import TinyGPT, completion_logits, completion_mask, logprobs_from_logits, reward_scores
from .task import COMPLETION_LEN, PROMPT_LEN, SEMI, VOCAB, batch_verify

__all__ = [
    "Completions",
    "Bounded",
    "enumerate_completions",
    "canonical_completions",
    "sequence_logprobs",
    "token_logprob_floor",
    "score_range",
    "exact_sequence_kl",
    "gold_rewards",
    "proxy_rewards",
    "expectation",
    "expected_gold",
    "expected_proxy",
    "best_of_n",
    "best_of_n_stats",
    "best_of_n_table",
    "analytic_best_of_n_kl",
    "best_of_n_win_rate",
    "analytic_best_of_n_win_rate",
]

EPS = torch.finfo(torch.float64).eps


# ----------------------------------------------------------------------------- enumeration


@dataclass
class Completions:
    """Every completion of each prompt that the enumeration kept, with its probability under the policy.

    Rows are grouped by prompt (``prompt_index`` is sorted). ``tokens`` are padded after the
    first `;` with `;`, as :func:`canonical_completions` pads, so one completion is one row.
    """

    prompts: torch.Tensor  # (P, 6): the prompts, as token ids
    tokens: torch.Tensor  # (N, 4): each completion, `;` after its first `;`
    prompt_index: torch.Tensor  # (N,): the row of ``prompts`` each completion answers
    logp: torch.Tensor  # (N,) float64: log pi(y | x) at ``temperature``, over the tokens up to the first `;`
    pruned: torch.Tensor  # (P,) float64: the probability of the completions not enumerated
    temperature: float
    min_prob: float

    @property
    def probs(self) -> torch.Tensor:
        """Return pi(y | x) of each completion (N,), float64."""
        return self.logp.exp()

    def per_prompt(self, values: torch.Tensor) -> torch.Tensor:
        """Return the sum of ``values`` (N,) over each prompt's completions (P,), float64."""
        out = torch.zeros(len(self.prompts), dtype=torch.float64)
        return out.index_add_(0, self.prompt_index, values.double())

    def counts(self) -> torch.Tensor:
        """Return the number of completions kept for each prompt (P,)."""
        return torch.bincount(self.prompt_index, minlength=len(self.prompts))

    def spans(self) -> list[slice]:
        """Return, for each prompt, the slice of rows that holds its completions."""
        ends = torch.cumsum(self.counts(), 0).tolist()
        return [slice(end - n, end) for end, n in zip(ends, self.counts().tolist())]


def _check_prompts(prompts: torch.Tensor) -> None:
    if prompts.dim() != 2 or prompts.shape[1] != PROMPT_LEN:
        raise ValueError(f"prompts must have shape (P, {PROMPT_LEN}), got {tuple(prompts.shape)}")


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def canonical_completions(completions: torch.Tensor) -> torch.Tensor:
    """Return ``completions`` (B, 4) with every token after the first `;` replaced by `;`.

    Two completions that agree up to their first `;` are the same answer (every consumer reads
    them through :func:`~minirlhf.model.completion_mask`); this gives them the same tokens, so
    sampled completions can be matched with enumerated ones.
    """
    return torch.where(completion_mask(completions) > 0, completions, torch.full_like(completions, SEMI))


def _next_logits(model, prompts: torch.Tensor, tokens, cache, batch_size: int, keep: bool):
    """Return the next-token logits (R, 13) of each live prefix and, if ``keep``, each row's
    key-value cache extended by one position (per block, (keys, values); else None). At the first
    level ``cache`` is None and the prompts (R, 6) are read whole; later only ``tokens`` (R, 1),
    each prefix's newest, with the cache it took from its parent: one position a prefix."""
    logits, kept = [], []
    for i in range(0, len(prompts), batch_size):
        if cache is None:
            rows = [{} for _ in model.blocks]
            logits.append(model(prompts[i : i + batch_size], rows, last=1)[:, 0])
        else:
            rows = [{"k": k[i : i + batch_size], "v": v[i : i + batch_size]} for k, v in cache]
            logits.append(model(tokens[i : i + batch_size], rows)[:, 0])
        kept.append(rows)
    joined = (
        [tuple(torch.cat([c[b][n] for c in kept]) for n in "kv") for b in range(len(model.blocks))] if keep else None
    )
    return torch.cat(logits), joined


@torch.no_grad()
def enumerate_completions(
    policy: TinyGPT,
    prompts: torch.Tensor,
    temperature: float = 0.7,
    min_prob: float = 1e-6,
    batch_size: int = 1024,
) -> Completions:
    """Return every completion of each prompt with its probability under ``policy`` at ``temperature``.

    Prefixes are expanded level by level, those of every prompt in one batch per level (cut
    into forward passes of ``batch_size`` rows), each prefix keeping the keys and values of its
    positions (the cache generation keeps), so that a level reads one new token a prefix and
    a child starts from its parent's cache: a child ending in `;` is complete, and at
    length 4 every child is. A prefix or completion whose probability is below ``min_prob`` is
    dropped and its probability added to its prompt's ``pruned``, so that per prompt
    ``sum(probs) + pruned == 1`` up to float rounding. A child of probability exactly 0 (a
    logit of -inf) is dropped without counting: it has no mass. ``min_prob=0`` keeps every
    completion of positive probability: 22,621 per prompt.
    """
    _check_prompts(prompts)
    _check_temperature(temperature)
    if not 0 <= min_prob < 1:
        raise ValueError(f"min_prob must be in [0, 1), got {min_prob}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    vocab = torch.arange(len(VOCAB))
    owner = torch.arange(len(prompts))  # (R,): the prompt of each live prefix
    prefixes = torch.empty(len(prompts), 0, dtype=torch.long)  # (R, t)
    logp = torch.zeros(len(prompts), dtype=torch.float64)  # (R,)
    pruned = torch.zeros(len(prompts), dtype=torch.float64)  # (P,)
    found = []  # (tokens, owner, logp) of the completions finished at each level
    cache = None  # each live prefix's keys and values, (R, heads, 6 + t, head size) per block
    for t in range(COMPLETION_LEN):
        if not len(owner):
            break  # every prefix is complete or pruned
        last = t == COMPLETION_LEN - 1
        logits, cache = _next_logits(policy, prompts[owner], prefixes[:, -1:], cache, batch_size, keep=not last)
        child_logp = logp[:, None] + F.log_softmax(logits.double() / temperature, dim=-1)  # (R, 13)
        child_p = child_logp.exp()  # (R, 13)
        keep = (child_p >= min_prob) & (child_logp > -math.inf)  # (R, 13)
        pruned.index_add_(0, owner, torch.where(keep, 0.0, child_p).sum(1))
        done = keep & ((vocab == SEMI) | (t == COMPLETION_LEN - 1))[None, :]  # (R, 13)
        row, tok = done.nonzero(as_tuple=True)
        found.append((torch.cat([prefixes[row], tok[:, None]], dim=1), owner[row], child_logp[row, tok]))
        row, tok = (keep & ~done).nonzero(as_tuple=True)  # the live prefixes of the next level
        prefixes, owner, logp = torch.cat([prefixes[row], tok[:, None]], dim=1), owner[row], child_logp[row, tok]
        if not last:  # a child starts from its parent's keys and values
            cache = [(k[row], v[row]) for k, v in cache]
    tokens = torch.cat([F.pad(tok, (0, COMPLETION_LEN - tok.shape[1]), value=SEMI) for tok, _, _ in found])
    index = torch.cat([own for _, own, _ in found])
    order = torch.argsort(index, stable=True)  # group the rows by prompt
    return Completions(
        prompts=prompts,
        tokens=tokens[order],
        prompt_index=index[order],
        logp=torch.cat([lp for _, _, lp in found])[order],
        pruned=pruned,
        temperature=temperature,
        min_prob=min_prob,
    )


@torch.no_grad()
def sequence_logprobs(
    model: TinyGPT, prompts: torch.Tensor, completions: torch.Tensor, temperature: float = 0.7, batch_size: int = 1024
) -> torch.Tensor:
    """Return log p(completion | prompt) under ``model`` at ``temperature`` (B,), float64.

    The sum of the token log-probs up to and including the first `;`
    (:func:`~minirlhf.model.completion_mask`), each ``log_softmax(logits / temperature)``: DPO's
    ``sequence_logps`` at a temperature, in batches of ``batch_size`` rows.
    """
    _check_prompts(prompts)
    _check_temperature(temperature)
    out = []
    for i in range(0, len(prompts), batch_size):
        p, c = prompts[i : i + batch_size], completions[i : i + batch_size]
        lp = logprobs_from_logits(completion_logits(model, p, c).double(), c, temperature)  # (b, 4)
        out.append(torch.where(completion_mask(c) > 0, lp, 0.0).sum(1))  # the tail may be -inf: never 0 * inf
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


# ----------------------------------------------------------------------------- bounds from the weights


def _final_layer(model: TinyGPT, n_out: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the final LayerNorm's scale and shift (C,) and the head's weight (n_out, C) and bias, float64."""
    ln, head = getattr(model, "ln_f", None), getattr(model, "head", None)
    if not isinstance(ln, torch.nn.LayerNorm) or not isinstance(head, torch.nn.Linear) or head.out_features != n_out:
        raise ValueError(f"model must be a TinyGPT with {n_out} output(s): for another model, pass the bound yourself")
    return ln.weight.double(), ln.bias.double(), head.weight.double(), head.bias.double()


def _spread(a: torch.Tensor) -> torch.Tensor:
    """Return a bound on a . z over every LayerNorm output z, for rows a (..., C): |a - mean(a)| sqrt(C).

    A LayerNorm's normalised vector z has mean 0 and norm at most sqrt(C) (its variance is
    divided by var + eps, never less than var), so a . z = (a - mean(a)) . z (Cauchy-Schwarz).
    """
    return (a - a.mean(-1, keepdim=True)).norm(dim=-1) * math.sqrt(a.shape[-1])


@torch.no_grad()
def token_logprob_floor(model: TinyGPT, temperature: float = 0.7) -> float:
    """Return a number below log p(token | context) at ``temperature`` for every token and every context.

    It is read from the weights of the final LayerNorm and the head alone: a logit gap
    l_k - l_j = (W_k - W_j) . (gamma * z + beta) + b_k - b_j is at most
    ``_spread((W_k - W_j) * gamma) + (W_k - W_j) . beta + b_k - b_j`` whatever came before, and
    log p_j = -log sum_k exp((l_k - l_j) / temperature). Loose, but it holds for completions
    never enumerated, which is what bounding the pruned part of a KL needs.
    """
    _check_temperature(temperature)
    gamma, beta, W, b = _final_layer(model, len(VOCAB))
    dW = W[None, :, :] - W[:, None, :]  # (13, 13, C): row j, column k holds W_k - W_j
    gap = _spread(dW * gamma) + dW @ beta + (b[None, :] - b[:, None])  # (13, 13): the largest l_k - l_j
    return -torch.logsumexp(gap / temperature, dim=1).max().item()


@torch.no_grad()
def score_range(rm: TinyGPT) -> tuple[float, float]:
    """Return (low, high): bounds on ``rm``'s score of any prompt and completion, from its last layer.

    The score is w . (gamma * z + beta) + b with z a LayerNorm's output (see :func:`_spread`).
    """
    gamma, beta, W, b = _final_layer(rm, 1)
    mid, half = (W[0] @ beta + b[0]).item(), _spread(W[0] * gamma).item()
    return mid - half, mid + half


# ----------------------------------------------------------------------------- KL and expectations


@dataclass
class Bounded:
    """A per-prompt quantity (P,): the enumerated completions' part, and bounds on the whole.

    ``value`` sums over the completions kept; ``lower <= true <= upper`` whatever the pruned
    completions are (both equal ``value`` where nothing was pruned).
    """

    value: torch.Tensor  # (P,) float64
    lower: torch.Tensor  # (P,) float64
    upper: torch.Tensor  # (P,) float64


def _times_mass(mass: torch.Tensor, x: torch.Tensor | float) -> torch.Tensor:
    """Return mass * x, 0 where the mass is 0 (so an unbounded x times no mass adds nothing)."""
    return torch.where(mass > 0, mass * x, 0.0)


@torch.no_grad()
def exact_sequence_kl(
    comps: Completions,
    reference: TinyGPT,
    floor: float | None = None,
    batch_size: int = 1024,
    ref_logp: torch.Tensor | None = None,
) -> Bounded:
    """Return the sequence-level KL(pi || ref) per prompt (P,), in nats, with bounds for the pruned mass.

    ``value`` = sum over the kept y of pi(y) (log pi(y) - log ref(y)), ref at the temperature of
    ``comps``. The pruned completions add sum pi(y) log(pi(y) / ref(y)) over a set of pi-mass m
    (``comps.pruned``) and ref-mass m_ref = 1 - (ref's mass on the kept ones), known exactly.

    * lower: by the log-sum inequality that part is at least m log(m / m_ref) (m_ref is raised by
      a rounding allowance, which only lowers the bound). No assumption on the models.
    * upper: a pruned y has pi(y) < min_prob and at most 4 tokens, each with log ref >= ``floor``,
      so its log-ratio is below log(min_prob) - 4 floor: the part is at most
      m (log(min_prob) - 4 floor). The mass alone bounds nothing: ref(y) may be as small as it
      likes. ``floor`` is a lower bound on ref's token log-probs wherever pi puts mass; None
      reads one from the reference's last layer (:func:`token_logprob_floor`, a TinyGPT only).

    ``ref_logp`` (N,), when given, is log ref(y) of each completion, already computed (a run that
    meets the same completions at every evaluation keeps them); None computes it.
    """
    if floor is None:
        floor = token_logprob_floor(reference, comps.temperature)
    if ref_logp is None:
        prompts = comps.prompts[comps.prompt_index]  # (N, 6)
        ref_logp = sequence_logprobs(reference, prompts, comps.tokens, comps.temperature, batch_size)  # (N,)
    elif ref_logp.shape != comps.logp.shape:
        raise ValueError(f"ref_logp must have shape {tuple(comps.logp.shape)}, one per completion")
    p = comps.probs  # (N,)
    value = comps.per_prompt(_times_mass(p, comps.logp - ref_logp))  # (P,)
    m = comps.pruned  # (P,)
    m_ref = (1 - comps.per_prompt(ref_logp.exp())).clamp(min=0) + (comps.counts() + 2) * EPS  # (P,)
    lower = value + _times_mass(m, torch.log(m / m_ref))
    upper = value + _times_mass(m, math.log(comps.min_prob) - COMPLETION_LEN * floor if comps.min_prob > 0 else 0.0)
    return Bounded(value, lower, upper)


def gold_rewards(comps: Completions, pairs: torch.Tensor) -> torch.Tensor:
    """Return the verifier's reward (N,) of each completion, float64; ``pairs`` (P, 2) are the prompts' sums."""
    if pairs.shape != (len(comps.prompts), 2):
        raise ValueError(f"pairs must have shape ({len(comps.prompts)}, 2), one per prompt, got {tuple(pairs.shape)}")
    return batch_verify(pairs[comps.prompt_index], comps.tokens).double()


@torch.no_grad()
def proxy_rewards(comps: Completions, rm: TinyGPT, batch_size: int = 1024) -> torch.Tensor:
    """Return the reward model's score (N,) of each completion, float64."""
    prompts = comps.prompts[comps.prompt_index]  # (N, 6)
    scores = [
        reward_scores(rm, prompts[i : i + batch_size], comps.tokens[i : i + batch_size])
        for i in range(0, len(prompts), batch_size)
    ]
    return torch.cat(scores).double() if scores else torch.zeros(0, dtype=torch.float64)


def expectation(comps: Completions, values: torch.Tensor, value_range: tuple[float, float]) -> Bounded:
    """Return E_pi[value] per prompt (P,): the kept completions' part, bounded by ``value_range``
    (low, high) for each pruned completion's value."""
    if values.shape != comps.logp.shape:
        raise ValueError(
            f"values must have shape {tuple(comps.logp.shape)}, one per completion, got {tuple(values.shape)}"
        )
    low, high = value_range
    if not low <= high:
        raise ValueError(f"value_range must be (low, high) with low <= high, got {value_range}")
    value = comps.per_prompt(comps.probs * values)  # (P,)
    return Bounded(value, value + _times_mass(comps.pruned, low), value + _times_mass(comps.pruned, high))


def expected_gold(comps: Completions, pairs: torch.Tensor) -> Bounded:
    """Return the exact expected verifier reward (the accuracy of a sampled answer) per prompt (P,)."""
    return expectation(comps, gold_rewards(comps, pairs), (0.0, 1.0))


def expected_proxy(comps: Completions, rm: TinyGPT, value_range: tuple[float, float] | None = None) -> Bounded:
    """Return the exact expected reward-model score per prompt (P,); ``value_range`` bounds any
    score (None: read from the RM's last layer, :func:`score_range`)."""
    return expectation(comps, proxy_rewards(comps, rm), value_range or score_range(rm))


# ----------------------------------------------------------------------------- best-of-n


def _check_distribution(probs: torch.Tensor, proxy: torch.Tensor, pruned: float) -> None:
    if probs.dim() != 1 or proxy.shape != probs.shape:
        raise ValueError(
            f"probs and proxy must be 1-D of one length, got {tuple(probs.shape)} and {tuple(proxy.shape)}"
        )
    if not torch.isfinite(proxy).all():
        raise ValueError("proxy must be finite")
    if (probs < 0).any() or not 0 <= pruned < 1:
        raise ValueError(f"probs must be >= 0 and pruned in [0, 1), got pruned={pruned}")
    tol = 1e-9 if probs.dtype == torch.float64 else 1e-6
    if abs(probs.double().sum().item() + pruned - 1) > tol:
        raise ValueError(f"probs and pruned must sum to 1 (within {tol}), got {probs.double().sum().item() + pruned!r}")


def _as_ns(n) -> torch.Tensor:
    ns = torch.as_tensor(n, dtype=torch.float64).reshape(-1)  # (M,)
    if len(ns) == 0 or (ns < 1).any() or (ns != ns.round()).any():
        raise ValueError(f"n must be integers >= 1, got {n}")
    return ns


def _blocks(probs: torch.Tensor, proxy: torch.Tensor, pruned: float):
    """Group the completions by proxy value, lowest first.

    Return (block of each completion (K,), proxy of each block (nb,), its mass (nb,), and
    log F at the nb + 1 boundaries (nb + 1,)): log P(proxy below block b) at index b.
    The pruned mass sits below every block. Each log F is taken as log(F) below 1/2 and as
    log1p(-mass above) from 1/2, where each is accurate; the top boundary is exactly 0.
    """
    values, block = torch.unique(proxy.double(), sorted=True, return_inverse=True)  # (nb,), (K,)
    mass = torch.zeros(len(values), dtype=torch.float64).index_add_(0, block, probs.double())  # (nb,)
    return block, values, mass, _log_cdf(mass, pruned, 0.0)


def _log_cdf(mass: torch.Tensor, below: float, above: float) -> torch.Tensor:
    """Return log F at the nb + 1 boundaries of blocks of ``mass`` (nb,), lowest first, with
    ``below`` more mass ranked under every block and ``above`` over every block."""
    zero = torch.zeros(1, dtype=torch.float64)
    low = below + torch.cat([zero, torch.cumsum(mass, 0)])  # (nb + 1,): F at each boundary
    high = above + torch.cat([torch.flip(torch.cumsum(torch.flip(mass, [0]), 0), [0]), zero])  # 1 - F
    return torch.where(low < 0.5, torch.log(low), torch.log1p(-high))  # (nb + 1,)


def _log_block_probs(log_f: torch.Tensor, mass: torch.Tensor, ns: torch.Tensor) -> torch.Tensor:
    """Return log P_n(block) = log(F_hi^n - F_lo^n) (M, nb), computed as
    n log F_hi + log(1 - exp(n (log F_lo - log F_hi))) so that no power underflows before the difference."""
    lo, hi = log_f[:-1], log_f[1:]  # (nb,)
    log_p = ns[:, None] * hi + torch.log(-torch.expm1(ns[:, None] * (lo - hi)))  # (M, nb)
    return torch.where(mass > 0, log_p, -math.inf)  # a block of no mass is never drawn (and lo - hi is nan)


def best_of_n(probs: torch.Tensor, proxy: torch.Tensor, n, pruned: float = 0.0) -> torch.Tensor:
    """Return P_n(y), the law of the best of n draws from ``probs`` ranked by ``proxy``: (K,), or (M, K) for n (M,).

    Tie rule: of the n draws, the winner is the one of highest proxy; among draws of equal
    (exactly equal) proxy it is chosen uniformly at random. The proxy's maximum falls in the
    block of completions of value v with probability F(v)^n - F(v^-)^n, and the draws in that
    block are independent draws from pi restricted to it, so a uniform choice among them is
    too: P_n(y) = (F(v)^n - F(v^-)^n) pi(y) / pi(block). With distinct proxies this is
    F(y)^n - F(y^-)^n. Breaking ties by a fixed order instead would give another law.

    Pruned mass: ``pruned`` is one more outcome ranked below every completion (it wins only
    when all n draws fall in it, with probability pruned^n, so ``P_n.sum() == 1 - pruned^n``).
    The true best-of-n law differs from this one only when a draw falls in the pruned set: by
    at most 1 - (1 - pruned)^n <= n pruned in total variation (the ``escape`` of :func:`best_of_n_stats`).
    """
    _check_distribution(probs, proxy, pruned)
    ns = _as_ns(n)
    block, _, mass, log_f = _blocks(probs, proxy, pruned)
    log_pb = _log_block_probs(log_f, mass, ns)  # (M, nb)
    safe_mass = torch.where(mass > 0, mass, 1.0)  # a block of no mass gets nothing: pi(y) = 0
    out = (log_pb - torch.log(safe_mass))[:, block].exp() * probs.double()  # (M, K)
    return out if torch.as_tensor(n).dim() else out[0]


def analytic_best_of_n_kl(n) -> torch.Tensor:
    """Return log n - (n - 1) / n: KL(best-of-n || pi) for a continuous proxy (Stiennon et al. 2020),
    an upper bound for a discrete one (Beirami et al. 2024)."""
    ns = _as_ns(n)
    return torch.log(ns) - (ns - 1) / ns


def best_of_n_stats(
    probs: torch.Tensor,
    proxy: torch.Tensor,
    n,
    gold: torch.Tensor | None = None,
    pruned: float = 0.0,
    chunk: int = 256,
) -> dict:
    """Return best-of-n's exact KL to pi, expected proxy and gold, for each n (M,) of one prompt.

    ``{'kl': KL(P_n || pi) in nats, 'kl_lower', 'kl_upper', 'proxy': sum_y P_n(y) proxy(y),
    'gold': sum_y P_n(y) gold(y) (only with ``gold``), 'escape': 1 - (1 - pruned)^n}``, float64
    tensors (M,). Ties and the pruned mass as in :func:`best_of_n`: within a block of equal proxy
    P_n is proportional to pi, so the KL is that of the blocks, sum_b P_n(b) log(P_n(b) / pi(b)),
    plus the pruned outcome's pruned^n (n - 1) log(pruned): exact for pi with its pruned
    completions merged into that one outcome. The pruned outcome adds nothing to proxy and gold;
    for values in [low, high] the true best-of-n's differ from these by at most ``escape`` x
    max(high - low, |low|, |high|) (``escape`` for gold), since the two laws pick the same
    completion unless a draw is pruned.

    The true KL, with the pruned completions scored anything and ranked anywhere (ties with
    kept ones included), lies in [``kl_lower``, ``kl_upper``]. Write W(y) = P_n(y) / pi(y), so
    that KL = sum_y pi(y) W log W. A kept block of mass m with kept mass L below it has
    W = ((L + s + m + d)^n - (L + s)^n) / (m + d) for the pruned mass s ranked below it and d
    tied with it (s + d <= pruned): a secant slope of x^n, which grows as its interval moves up
    or widens, so W lies between its value for s = d = 0 (every pruned completion above) and
    for s = pruned (all below, as computed here). W log W is convex, least (-1/e) at W = 1/e:
    each block contributes between the least and the most of m W log W over that range. A pruned
    completion has W <= n, and together they take P_n mass at most ``escape``: they add between
    -pruned / e and ``escape`` x log n. Without pruned mass the three are equal.
    ``n`` runs in chunks of ``chunk`` values: memory stays at ``chunk`` x (distinct proxies) floats.
    """
    _check_distribution(probs, proxy, pruned)
    if gold is not None and gold.shape != probs.shape:
        raise ValueError(f"gold must have shape {tuple(probs.shape)}, one per completion, got {tuple(gold.shape)}")
    ns = _as_ns(n)
    block, values, mass, log_f = _blocks(probs, proxy, pruned)
    log_f_top = _log_cdf(mass, 0.0, pruned)  # every pruned completion ranked above the kept ones
    safe_mass = torch.where(mass > 0, mass, 1.0)
    gold_b = None if gold is None else torch.zeros_like(mass).index_add_(0, block, probs.double() * gold) / safe_mass
    out = {"kl": [], "kl_lower": [], "kl_upper": [], "proxy": [], "gold": []}
    for i in range(0, len(ns), chunk):
        log_pb = _log_block_probs(log_f, mass, ns[i : i + chunk])  # (m, nb)
        pb = log_pb.exp()
        log_w = log_pb - torch.log(safe_mass)  # log W of each block, every pruned completion below
        out["kl"].append(torch.where(pb > 0, pb * log_w, 0.0).sum(1))
        out["proxy"].append(pb @ values)
        if gold_b is not None:
            out["gold"].append(pb @ gold_b)
        if pruned > 0:  # each block's W log W over W's range (see above)
            log_w_top = _log_block_probs(log_f_top, mass, ns[i : i + chunk]) - torch.log(safe_mass)  # all above
            ends = _w_log_w(log_w), _w_log_w(log_w_top)
            least = torch.where((log_w_top <= -1) & (log_w >= -1), -1 / math.e, torch.minimum(*ends))
            out["kl_lower"].append((mass * least).sum(1))
            out["kl_upper"].append((mass * torch.maximum(*ends)).sum(1))
    stats = {k: torch.cat(v) for k, v in out.items() if v}
    escape = -torch.expm1(ns * math.log1p(-pruned))
    if pruned > 0:
        stats["kl"] = stats["kl"] + torch.exp(ns * math.log(pruned)) * (ns - 1) * math.log(pruned)
        stats["kl_lower"] = (stats["kl_lower"] - pruned / math.e).clamp(min=0.0)
        stats["kl_upper"] = stats["kl_upper"] + escape * torch.log(ns)
    else:
        stats["kl_lower"], stats["kl_upper"] = stats["kl"].clone(), stats["kl"].clone()
    stats["escape"] = escape
    return stats


def _w_log_w(log_w: torch.Tensor) -> torch.Tensor:
    """Return W log W from log W (-inf: W = 0, where W log W is 0)."""
    return torch.where(log_w > -math.inf, log_w.exp() * log_w, 0.0)


def best_of_n_table(comps: Completions, proxy: torch.Tensor, n, gold: torch.Tensor | None = None) -> dict:
    """Return :func:`best_of_n_stats` for every prompt of ``comps``: each entry (M, P), with
    ``proxy`` and ``gold`` (N,) the rewards of the completions (:func:`proxy_rewards`, :func:`gold_rewards`)."""
    rows = []
    for i, span in enumerate(comps.spans()):
        g = None if gold is None else gold[span]
        rows.append(best_of_n_stats(comps.probs[span], proxy[span], n, g, comps.pruned[i].item()))
    return {k: torch.stack([r[k] for r in rows], dim=1) for k in rows[0]}


def _win_and_tie(probs: torch.Tensor, proxy: torch.Tensor, ns: torch.Tensor, pruned: float):
    """Return P(proxy(Y) > proxy(Z)) and P(proxy(Y) = proxy(Z)) (M,) for Y the best of n and Z a draw from pi,
    the pruned mass one outcome below every completion: Y beats Z when Z falls below Y's block (F at its
    lower boundary, the pruned mass included) and ties when Z falls in it; a pruned Y ties a pruned Z."""
    _, _, mass, log_f = _blocks(probs, proxy, pruned)
    pb = _log_block_probs(log_f, mass, ns).exp()  # (M, nb): P(Y in block b)
    win, tie = pb @ log_f[:-1].exp(), pb @ mass
    if pruned > 0:
        tie = tie + torch.exp((ns + 1) * math.log(pruned))
    return win, tie


def best_of_n_win_rate(probs: torch.Tensor, proxy: torch.Tensor, n, pruned: float = 0.0) -> dict:
    """Return the exact win rate of best-of-n against pi for one prompt, for each n: entries (M,) for n (M,),
    0-dim for a single n.

    Y is the best of n draws from pi ranked by ``proxy`` (:func:`best_of_n`), Z an independent draw from
    pi, and ``{'win_rate': P(proxy(Y) > proxy(Z)) + P(proxy(Y) = proxy(Z)) / 2, 'strict': P(proxy(Y) >
    proxy(Z)), 'tie': P(proxy(Y) = proxy(Z)), 'lower', 'upper', 'escape'}``, float64. The win rate of
    best-of-n against the reference is the quantity of Beirami et al. 2024, section 5 ("Win Rate of the
    Best-of-n Policy"), whose abstract states that it is upper bounded by n / (n + 1)
    (:func:`analytic_best_of_n_win_rate`). Here ties (equal proxies) count half: then n = 1 gives exactly
    1/2, a continuous proxy gives n / (n + 1), and every discrete law gives at most that, since per block
    of equal proxy, with F rising from a to b, n / (n + 1) puts int_a^b u d(u^n) where the win rate puts
    (b^n - a^n) (a + b) / 2, and the difference int_a^b (u - (a + b) / 2) n u^(n-1) du is >= 0 because
    n u^(n-1) rises. ``strict`` and ``tie`` are returned too, so that another convention can be formed
    (``strict`` alone counts ties as losses); with distinct proxies a tie is Y = Z.
    With m_b the mass of block b, F_b^- the mass below it and F_b = F_b^- + m_b:

        strict = sum_b (F_b^n - (F_b^-)^n) F_b^-        tie = sum_b (F_b^n - (F_b^-)^n) m_b

    Pruned mass: ``win_rate``, ``strict`` and ``tie`` treat it as :func:`best_of_n` does, one outcome
    ranked below every completion (as if the pruned completions shared one proxy below all kept ones, a
    law they could have); a pruned Y ties a pruned Z (probability pruned^(n+1)). Whatever the pruned
    completions' proxies, the true win rate lies in [``lower``, ``upper``]: all n + 1 draws miss the
    pruned set with probability (1 - pruned)^(n+1), and then the outcome is that of the kept law, so
    ``lower`` = (1 - pruned)^(n+1) x (the kept law's win rate) and ``upper`` = min(``lower`` + ``escape``,
    n / (n + 1)), with ``escape`` = 1 - (1 - pruned)^(n+1). Without pruned mass all three are equal.
    """
    _check_distribution(probs, proxy, pruned)
    ns = _as_ns(n)
    strict, tie = _win_and_tie(probs, proxy, ns, pruned)
    win_rate = strict + tie / 2
    log_kept = (ns + 1) * math.log1p(-pruned)  # (M,): log P(no draw of the n + 1 is pruned)
    if pruned > 0:
        kept_strict, kept_tie = _win_and_tie(probs.double() / (1 - pruned), proxy, ns, 0.0)
        lower = torch.exp(log_kept) * (kept_strict + kept_tie / 2)
        upper = torch.minimum(lower - torch.expm1(log_kept), ns / (ns + 1))
    else:
        lower, upper = win_rate, win_rate
    out = {"win_rate": win_rate, "strict": strict, "tie": tie, "lower": lower, "upper": upper}
    out["escape"] = -torch.expm1(log_kept)
    return out if torch.as_tensor(n).dim() else {k: v[0] for k, v in out.items()}


def analytic_best_of_n_win_rate(n) -> torch.Tensor:
    """Return n / (n + 1) (M,): the win rate of best-of-n against pi for a continuous proxy (Z, one of n + 1
    exchangeable draws, is the largest with probability 1 / (n + 1)), an upper bound for a discrete one
    with ties counted half (Beirami et al. 2024, section 5; :func:`best_of_n_win_rate`)."""
    ns = _as_ns(n)
    return ns / (ns + 1)
