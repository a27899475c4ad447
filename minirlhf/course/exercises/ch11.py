"""Chapter 11 exercises: best-of-n's law exactly, its analytic KL, the exact sequence KL, and the
exact KL of best-of-n, which the analytic one only bounds for a policy whose answers are atoms."""

import math

import numpy as np

from ...studies.gao import best_of_n_kl, best_of_n_kl_bound, best_of_n_probs, sequence_kl
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import Expect, ExpectArray, ExpectFloat

# ----------------------------------------------------------------------------- rounded answers


def _rounded_to(got, expected) -> int | None:
    """The fewest decimals d, from 1 to 8, such that every value of ``got`` has at most d decimals
    and lies within half a unit of the d-th decimal of ``expected``: ``got`` is ``expected``
    rounded to d decimals. None when no such d exists (or the shapes differ)."""
    got, expected = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
    if got.shape != expected.shape or not (np.isfinite(got).all() and np.isfinite(expected).all()):
        return None
    for d in range(1, 9):
        short = np.abs(got - np.round(got, d)) <= 1e-12
        near = np.abs(got - expected) <= 0.5 * 10.0**-d + 1e-12
        if short.all() and near.all():
            return d
    return None


def _said_rounded(bad, got, expected, looks: str, says: str):
    """``bad`` as the comparator found it, or, when it is a wrong value that is ``expected``
    rounded, the mistake "rounded" with ``looks`` ("it looks", "they look") and ``says``."""
    if bad is None or bad[0] != "value":
        return bad
    d = _rounded_to(got, expected)
    if d is None:
        return bad
    return "rounded", f"{bad[1]}; {looks} rounded to {d} decimal{'s' if d > 1 else ''}: {says}"


# ----------------------------------------------------------------------------- 11.1 best-of-n


def _bon_case(probs, proxy, n, expected, why, lists=False) -> Case:
    if not lists:  # the contract's example keeps its lists
        probs, proxy = np.array(probs, dtype=float), np.array(proxy, dtype=float)
    return Case({"probs": probs, "proxy": proxy, "n": n}, np.array(expected, dtype=float), why)


def _bon_random_kwargs(rng: np.random.Generator) -> dict:
    """One prompt's K completions: Dirichlet probabilities (now and then one of them 0), and
    proxy scores that are small integers (ties) or continuous (no ties)."""
    K = int(rng.integers(1, 9))
    probs = rng.dirichlet(np.full(K, float(rng.choice([0.3, 1.0, 3.0]))))
    i = int(rng.integers(K))
    if K > 1 and rng.random() < 0.2 and probs.sum() - probs[i] > 0:  # a completion never sampled
        probs[i] = 0.0
        probs = probs / probs.sum()
    if rng.random() < 0.5:  # a coarse score: many ties
        proxy = rng.integers(0, 3, K)
        proxy = proxy.astype(float) if rng.random() < 0.5 else proxy
    else:
        proxy = rng.normal(0.0, 1.0, K)
    as_lists = rng.random() < 0.3
    return {
        "probs": probs.tolist() if as_lists else probs,
        "proxy": proxy.tolist() if as_lists else proxy,
        "n": int(rng.choice([1, 2, 3, 5, 16, 100, 1000])),
    }


ROUNDED_PROBS = "the contract asks for the probabilities within 1e-9, so do not round them"


class ExpectBestOfN(ExpectArray):
    """P_n, a NumPy array within 1e-9 of the expected one; an answer that is the expected one
    rounded to a few decimals is named as rounded."""

    def __init__(self, slips=()):
        super().__init__(atol=1e-9, container="numpy", what="the probabilities", plural=True, slips=slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        return _said_rounded(super().diagnose(got, expected), got, expected, "they look", ROUNDED_PROBS)


def _bon_slip(kind: str):
    """Return best_of_n_probs with one usual slip (see ``BON_SLIPS``)."""
    known_slip(kind, ("no-minus", "worst-of-n", "ties-by-order", "at-least-once", "not-split", "rounded"))

    def best_of_n_probs_(probs, proxy, n):
        probs, proxy = np.asarray(probs, dtype=float), np.asarray(proxy, dtype=float)
        if kind == "at-least-once":
            return 1 - (1 - probs) ** n
        if kind == "ties-by-order":  # each completion a block of its own, tied ones in their order
            order = np.argsort(proxy, kind="stable")
            f = np.concatenate([[0.0], np.cumsum(probs[order])])
            out = np.zeros_like(probs)
            out[order] = f[1:] ** n - f[:-1] ** n
            return out
        if kind == "worst-of-n":
            proxy = -proxy
        values, block = np.unique(proxy, return_inverse=True)
        block = block.reshape(-1)
        mass = np.bincount(block, weights=probs, minlength=len(values))
        f = np.concatenate([[0.0], np.cumsum(mass)])
        block_probs = f[1:] ** n if kind == "no-minus" else f[1:] ** n - f[:-1] ** n
        if kind == "not-split":
            return block_probs[block]
        share = np.divide(probs, mass[block], out=np.zeros_like(probs), where=mass[block] > 0)
        if kind == "rounded":
            return np.round(block_probs[block] * share, 4)
        return block_probs[block] * share

    return best_of_n_probs_


BON_SLIPS = (
    Slip(
        "no-minus",
        _bon_slip("no-minus"),
        "that is F(v)^n, the chance that the best of n scores at most v: subtract F(v^-)^n, the chance "
        "that it scores below v",
    ),
    Slip("worst-of-n", _bon_slip("worst-of-n"), "that is the worst of n: the best of n is the draw of highest proxy"),
    Slip(
        "ties-by-order",
        _bon_slip("ties-by-order"),
        "that breaks ties by position: completions of equal proxy share their block's probability in "
        "proportion to probs",
    ),
    Slip(
        "at-least-once",
        _bon_slip("at-least-once"),
        "that is 1 - (1 - p)^n, the chance that a completion is drawn at all; it wins only when no draw scores higher",
    ),
    Slip(
        "not-split",
        _bon_slip("not-split"),
        "that gives each tied completion the whole block's probability: split it in proportion to probs",
    ),
    Slip("rounded", _bon_slip("rounded"), ROUNDED_PROBS),
)


BEST_OF_N_PROBS = Exercise(
    name="best_of_n_probs",
    chapter=11,
    title="Best-of-n, exactly",
    expect=ExpectBestOfN(slips=BON_SLIPS),
    cases=(
        _bon_case(
            [0.5, 0.3, 0.2], [1, 2, 3], 1, [0.5, 0.3, 0.2], "n = 1: one draw, nothing to choose, the policy itself"
        ),
        _bon_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            2,
            [0.25, 0.39, 0.36],
            "n = 2: F = 0.5, 0.8, 1 at each score, so P = 0.5^2, 0.8^2 - 0.5^2, 1 - 0.8^2",
        ),
        _bon_case(
            [0.2, 0.3, 0.5],
            [3, 2, 1],
            2,
            [0.36, 0.39, 0.25],
            "the same scores listed highest first: the ranking is by proxy, not by position",
        ),
        _bon_case(
            [0.5, 0.25, 0.25],
            [0, 1, 1],
            2,
            [0.25, 0.375, 0.375],
            "a tie: the block of score 1 wins with 1 - 0.5^2 = 0.75, split 0.25 : 0.25 between its two",
        ),
        _bon_case([0.5, 0.5], [0, 1], 3, [0.125, 0.875], "n = 3: the low one wins only if all three draws are low"),
        _bon_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            10,
            [0.0009765625, 0.1073741824 - 0.0009765625, 1 - 0.1073741824],
            "n = 10: 0.5^10 = 0.0009765625 and 0.8^10 = 0.1073741824, so P = 0.0009765625, 0.1063976199, "
            "0.8926258176: ten decimals, which an answer rounded to fewer loses",
        ),
        _bon_case(
            [0.5, 0.0, 0.5],
            [1, 3, 2],
            2,
            [0.25, 0.0, 0.75],
            "the highest score has probability 0: never drawn, it never wins; P = 0.25, 0, 1 - 0.25",
        ),
        _bon_case(
            [0.5, 0.0, 0.0, 0.5],
            [1, 3, 3, 2],
            2,
            [0.25, 0.0, 0.0, 0.75],
            "a tied block of no mass gets 0 (its share 0 / 0 is not computed)",
        ),
        _bon_case(
            [0.2, 0.3, 0.5], [1, 1, 1], 5, [0.2, 0.3, 0.5], "all proxies equal: the tie is broken at random, P = probs"
        ),
        _bon_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            1000,
            [0.0, 0.0, 1.0],
            "n = 1000: the top completion loses only if no draw finds it, 0.8^1000, about 1e-97",
        ),
        _bon_case(
            [0.1, 0.4, 0.2, 0.3],
            [2, 1, 2, 0],
            2,
            [0.17, 0.40, 0.34, 0.09],
            "blocks 0, 1, 2 of mass 0.3, 0.4, 0.3: P = 0.09, 0.49 - 0.09, 1 - 0.49, the last split 1 : 2",
        ),
        _bon_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            2,
            [0.25, 0.39, 0.36],
            "the contract's example as written, lists: the result is a NumPy array",
            lists=True,
        ),
    ),
    hints=(
        "Best-of-n keeps the draw of highest proxy, so what matters for a completion is the mass of the "
        "completions scored at most as high. Completions of equal proxy form a block: the best of n lands "
        "in the block of score v when all n draws score at most v, and not all of them score below v.",
        "Let F(v) be the mass of the completions with proxy <= v, and F(v^-) of those with proxy < v. "
        "The best of n lands in the block of score v with probability F(v)^n - F(v^-)^n. Ties are "
        "broken at random, so that probability is split among the block's completions in proportion to "
        "their probs.",
        "Convert both inputs with `np.asarray(x, dtype=float)`. `values, block = np.unique(proxy, "
        "return_inverse=True)` numbers the blocks from the lowest score; `mass = np.bincount(block, "
        "weights=probs)`; `F = np.concatenate([[0.0], np.cumsum(mass)])` holds F(v^-) in `F[:-1]` and F(v) "
        "in `F[1:]`. Completion i gets `F[1:] ** n - F[:-1] ** n` at `block[i]`, times "
        "`probs[i] / mass[block[i]]` (0 where that mass is 0). Return the array as computed: the "
        "contract asks for more decimals than rounding keeps.",
    ),
    reference=best_of_n_probs,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.exact.best_of_n",
        "minirlhf.exact.best_of_n_stats",
    ),
    random_kwargs=_bon_random_kwargs,
    # what wins a best-of-n (1), the block's probability and its split (2), the NumPy array and
    # the 0 / 0 of a block of no mass (3)
    hint_for={
        "worst-of-n": 1,
        "at-least-once": 1,
        "no-minus": 2,
        "ties-by-order": 2,
        "not-split": 2,
        "shape": 3,
        "type": 3,
        "nan": 3,
        "rounded": 3,
    },
)

# ----------------------------------------------------------------------------- 11.2 the analytic KL


def _bound_random_kwargs(rng: np.random.Generator) -> dict:
    if rng.random() < 0.3:
        return {"n": int(rng.integers(1, 11))}
    return {"n": max(1, int(round(10 ** rng.uniform(0, 6))))}


def _bound_slip(kind: str):
    """Return best_of_n_kl_bound with one usual slip (see ``BOUND_SLIPS``)."""
    known_slip(kind, ("log-only", "plus", "log2", "one-over-n"))

    def best_of_n_kl_bound_(n):
        if kind == "log-only":
            return math.log(n)
        if kind == "plus":
            return math.log(n) + (n - 1) / n
        if kind == "log2":
            return math.log2(n) - (n - 1) / n
        return math.log(n) - 1 / n

    return best_of_n_kl_bound_


BOUND_SLIPS = (
    Slip("log-only", _bound_slip("log-only"), "that is log n alone: subtract (n - 1) / n"),
    Slip("plus", _bound_slip("plus"), "that adds (n - 1) / n: subtract it"),
    Slip("log2", _bound_slip("log2"), "that is the log to base 2: the KL is in nats, take the natural log"),
    Slip("one-over-n", _bound_slip("one-over-n"), "that subtracts 1 / n: the term is (n - 1) / n"),
)


BEST_OF_N_KL_BOUND = Exercise(
    name="best_of_n_kl_bound",
    chapter=11,
    title="The analytic KL of best-of-n",
    expect=ExpectFloat(atol=1e-9, what="the KL", slips=BOUND_SLIPS),
    cases=(
        Case({"n": 1}, 0.0, "n = 1: best-of-1 is the policy itself, log 1 - 0 / 1 = 0"),
        Case({"n": 2}, math.log(2) - 0.5, "n = 2: log 2 - 1/2 = 0.693147 - 0.5 = 0.193147"),
        Case({"n": 4}, math.log(4) - 0.75, "n = 4: log 4 - 3/4 = 1.386294 - 0.75 = 0.636294"),
        Case({"n": 16}, math.log(16) - 0.9375, "n = 16: log 16 - 15/16 = 2.772589 - 0.9375 = 1.835089"),
        Case(
            {"n": 4096},
            math.log(4096) - 4095 / 4096,
            "n = 4096: log 4096 - 4095/4096 = 8.317766 - 0.999756 = 7.318010, about log n - 1",
        ),
    ),
    hints=(
        "One line: the natural log of n, minus the share (n - 1) / n. At n = 1 the result is 0: "
        "best-of-1 is the policy itself.",
        "`math.log` is the natural log (so is `np.log`); `math.log2` and `math.log10` take other bases, "
        "and the KL is in nats. The term subtracted is (n - 1) / n, which grows from 0 towards 1, "
        "not 1 / n.",
        "`return math.log(n) - (n - 1) / n`: a Python float.",
    ),
    reference=best_of_n_kl_bound,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=("minirlhf.exact.analytic_best_of_n_kl",),
    random_kwargs=_bound_random_kwargs,
    # the formula (1), the base of the log and the term subtracted (2), the Python float (3)
    hint_for={
        "log-only": 1,
        "plus": 1,
        "sign": 1,
        "log2": 2,
        "one-over-n": 2,
        "numpy-scalar": 3,
        "type": 3,
        "int": 3,
    },
)

# ----------------------------------------------------------------------------- 11.3 the sequence KL

NAN_AT_ZERO = (
    "a term where logp is -inf has probability 0 and adds 0, but NumPy computes "
    "exp(-inf) * (-inf - ref_logp) as 0 * (-inf) = NaN: leave such terms out"
)


class ExpectSequenceKL(Expect):
    """The KL of one distribution, a Python float for (K,) input, or of M distributions, a NumPy
    array (M,) for (M, K) input. A NaN is named for the term of probability 0 that makes it, and
    an expected +inf (a completion the reference cannot produce) asks for +inf."""

    what = "the KL"

    def __init__(self, atol: float = 1e-9, slips=()):
        self._one = ExpectFloat(atol=atol, what="the KL")
        self._rows = ExpectArray(atol=atol, container="numpy", what="the KLs", plural=True)
        self._named(None, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if isinstance(expected, np.ndarray):
            with np.errstate(invalid="ignore"):  # inf - inf, comparing with a slip's infinite answer
                bad = self._rows.diagnose(got, expected)
            return ("nan-at-zero", f"the KLs hold NaN: {NAN_AT_ZERO}") if bad and bad[0] == "nan" else bad
        if isinstance(got, float) and math.isnan(got):
            return "nan-at-zero", f"the KL is NaN: {NAN_AT_ZERO}"
        if expected == math.inf and type(got) is float and got == math.inf:
            return None
        bad = self._one.diagnose(got, expected)
        if bad and bad[0] == "value" and expected == math.inf:
            return "value", (
                f"{bad[1]}: where logp is finite and ref_logp is -inf, the policy gives mass to a "
                "completion the reference never produces, and the KL is +inf"
            )
        return bad


def _seq_case(logp, ref_logp, expected, why, lists=False) -> Case:
    want = expected if isinstance(expected, float) else np.array(expected, dtype=float)
    if not lists:
        logp, ref_logp = np.array(logp, dtype=float), np.array(ref_logp, dtype=float)
    return Case({"logp": logp, "ref_logp": ref_logp}, want, why)


def _seq_random_kwargs(rng: np.random.Generator) -> dict:
    """One distribution (K,) or M of them (M, K). About a quarter of the policy's probabilities
    are 0 (logp -inf); the reference is 0 only where the policy is, at times; now and then the
    policy, the reference or both keep less than all their mass (a pruned enumeration)."""
    K = int(rng.integers(1, 9))
    one = rng.random() < 0.5
    rows = 1 if one else int(rng.integers(1, 5))
    p = rng.dirichlet(np.full(K, float(rng.choice([0.3, 1.0, 5.0]))), size=rows)  # (rows, K)
    zero = rng.random((rows, K)) < 0.25
    zero[np.arange(rows), p.argmax(axis=1)] = False  # each row keeps some mass
    p[zero] = 0.0
    p = p / p.sum(axis=1, keepdims=True)
    q = rng.dirichlet(np.ones(K), size=rows)
    q[zero & (rng.random((rows, K)) < 0.5)] = 0.0  # the reference misses what the policy misses
    q = q / q.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        logp, ref_logp = np.log(p), np.log(q)
    if rng.random() < 0.2:
        ref_logp = ref_logp + float(rng.uniform(-1.0, 0.0))
    if rng.random() < 0.25:  # the policy's kept answers sum to less than 1, one share per row
        logp = logp + rng.uniform(-1.0, 0.0, (rows, 1))
    if one:
        logp, ref_logp = logp[0], ref_logp[0]
    as_lists = rng.random() < 0.3
    return {"logp": logp.tolist() if as_lists else logp, "ref_logp": ref_logp.tolist() if as_lists else ref_logp}


def _seq_slip(kind: str):
    """Return sequence_kl with one usual slip (see ``SEQ_SLIPS``)."""
    known_slip(kind, ("mean", "reverse", "nan-at-zero", "no-exp", "first-axis", "renormalized-policy"))

    def sequence_kl_(logp, ref_logp):
        logp, ref_logp = np.asarray(logp, dtype=float), np.asarray(ref_logp, dtype=float)
        with np.errstate(all="ignore"):
            if kind == "renormalized-policy":  # the right code, on a policy scaled to sum to 1
                logp = logp - np.log(np.exp(logp).sum(axis=-1, keepdims=True))
                kept = logp > -np.inf
                kl = np.where(kept, np.exp(logp) * (logp - ref_logp), 0.0).sum(axis=-1)
            elif kind == "mean":
                kl = (logp - ref_logp).mean(axis=-1)
            elif kind == "reverse":  # the right code with the two distributions swapped
                kept = ref_logp > -np.inf
                kl = np.where(kept, np.exp(ref_logp) * (ref_logp - logp), 0.0).sum(axis=-1)
            elif kind == "nan-at-zero":
                kl = (np.exp(logp) * (logp - ref_logp)).sum(axis=-1)
            elif kind == "no-exp":
                kl = (logp * (logp - ref_logp)).sum(axis=-1)
            else:  # "first-axis"
                kept = logp > -np.inf
                kl = np.where(kept, np.exp(logp) * (logp - ref_logp), 0.0).sum(axis=0)
        return float(kl) if np.ndim(kl) == 0 else kl

    return sequence_kl_


SEQ_SLIPS = (
    Slip(
        "mean",
        _seq_slip("mean"),
        "that is the plain mean of logp - ref_logp: weight each term by its probability under the "
        "policy, exp(logp), and sum",
    ),
    Slip(
        "reverse",
        _seq_slip("reverse"),
        "that is KL(pi_ref || pi), weighted by exp(ref_logp): the KL here is KL(pi || pi_ref), weighted by exp(logp)",
    ),
    Slip("nan-at-zero", _seq_slip("nan-at-zero"), NAN_AT_ZERO),
    Slip("no-exp", _seq_slip("no-exp"), "that weights by logp: the weight is the probability, exp(logp)"),
    Slip(
        "first-axis",
        _seq_slip("first-axis"),
        "that sums along the first axis: sum along the last, axis=-1, one KL per row",
    ),
    Slip(
        "renormalized-policy",
        _seq_slip("renormalized-policy"),
        "that renormalizes the policy to sum to 1: pi(y) is exp(logp) as given, and the kept answers may "
        "sum to less than 1 (the others were pruned); do not divide by their sum",
    ),
)

_HALF = math.log(0.5)

SEQUENCE_KL = Exercise(
    name="sequence_kl",
    chapter=11,
    title="The exact sequence KL",
    expect=ExpectSequenceKL(atol=1e-9, slips=SEQ_SLIPS),
    cases=(
        _seq_case(
            np.log([0.5, 0.5]),
            np.log([0.25, 0.75]),
            0.5 * math.log(4 / 3),
            "0.5 log(0.5 / 0.25) + 0.5 log(0.5 / 0.75) = 0.5 log 2 + 0.5 log(2/3) = 0.143841",
        ),
        _seq_case(
            np.log([0.25, 0.75]),
            np.log([0.5, 0.5]),
            0.25 * math.log(0.5) + 0.75 * math.log(1.5),
            "the two swapped: 0.25 log 0.5 + 0.75 log 1.5 = 0.130812, not 0.143841: the KL is not symmetric",
        ),
        _seq_case(np.log([0.2, 0.3, 0.5]), np.log([0.2, 0.3, 0.5]), 0.0, "the policy is the reference: KL 0"),
        _seq_case(
            [0.0, -np.inf],
            np.log([0.5, 0.5]),
            math.log(2),
            "the policy always says the first: 1 * log(1 / 0.5) = log 2, and the second adds 0",
        ),
        _seq_case(
            [0.0],
            [math.log(0.1)],
            math.log(10),
            "one completion, which the reference gives 0.1: log 10 (the reference's kept mass need not sum to 1)",
        ),
        _seq_case(
            [_HALF, _HALF, -np.inf],
            [_HALF, math.log(0.25), -np.inf],
            0.5 * math.log(2),
            "logp and ref_logp both -inf on the last: that term is 0; 0.5 log 1 + 0.5 log 2 = 0.346574",
        ),
        _seq_case(
            np.log([[0.5, 0.5], [0.25, 0.75]]),
            np.log([[0.25, 0.75], [0.5, 0.5]]),
            [0.5 * math.log(4 / 3), 0.25 * math.log(0.5) + 0.75 * math.log(1.5)],
            "two distributions (2, 2), one per row: the two KLs above, an array (2,)",
        ),
        _seq_case(
            [[0.0, -np.inf, -np.inf], np.log([0.2, 0.3, 0.5])],
            [np.log([0.5, 0.25, 0.25]), np.log([0.2, 0.3, 0.5])],
            [math.log(2), 0.0],
            "two rows of three: log(1 / 0.5) = log 2, and a row equal to its reference, 0",
        ),
        _seq_case(
            [math.log(0.8), math.log(0.2)],
            [_HALF, _HALF],
            0.8 * math.log(1.6) + 0.2 * math.log(0.4),
            "lists: 0.8 log(0.8 / 0.5) + 0.2 log(0.2 / 0.5) = 0.376 - 0.183 = 0.192745, a Python float",
            lists=True,
        ),
        _seq_case(
            [_HALF, _HALF],
            [0.0, -np.inf],
            math.inf,
            "the reference never says the second, the policy does, half the time: the KL is +inf",
        ),
        _seq_case(
            [_HALF],
            [math.log(0.25)],
            0.5 * math.log(2),
            "the policy keeps 0.5 of its mass here (the rest was pruned): pi(y) = exp(logp) = 0.5, not 1; "
            "0.5 log(0.5 / 0.25) = 0.5 log 2 = 0.346574",
        ),
        _seq_case(
            np.log([0.4, 0.4]),
            np.log([0.5, 0.25]),
            0.4 * math.log(1.28),
            "the policy's two kept answers sum to 0.8: 0.4 log(0.4 / 0.5) + 0.4 log(0.4 / 0.25) "
            "= 0.4 log(0.8 * 1.6) = 0.4 log 1.28 = 0.098744",
        ),
    ),
    hints=(
        "KL(pi || pi_ref) is the policy's expectation of log pi(y) - log pi_ref(y): weight each "
        "completion's log-ratio by its probability under the policy, exp(logp), and sum over the "
        "completions, the last axis. Take exp(logp) as it is: the kept completions of either "
        "distribution may sum to less than 1 (the others were pruned), and nothing is renormalized.",
        "A completion with logp = -inf has probability 0 and adds 0, but NumPy computes "
        "exp(-inf) * (-inf - ref_logp) as 0 * (-inf) = NaN: keep only the terms where logp is finite. "
        "Sum with `axis=-1`, so that each row of a 2-D input is one distribution.",
        "Convert both inputs with `np.asarray(x, dtype=float)`; `kept = logp > -np.inf`; "
        "`terms = np.where(kept, np.exp(logp) * (logp - ref_logp), 0.0)` (inside "
        "`with np.errstate(invalid='ignore'):`, which silences the warning about the NaN it leaves out); "
        "`kl = terms.sum(axis=-1)`. Return `float(kl)` for 1-D input and `kl` for 2-D input.",
    ),
    reference=sequence_kl,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.exact.exact_sequence_kl",
        "minirlhf.exact._times_mass",
        "minirlhf.studies.kl_exact._times_mass",
    ),
    random_kwargs=_seq_random_kwargs,
    # the weighted sum of log-ratios (1), terms of probability 0 and the axis (2), the Python float
    # or the NumPy array (3)
    hint_for={
        "mean": 1,
        "reverse": 1,
        "no-exp": 1,
        "nan-at-zero": 2,
        "first-axis": 2,
        "renormalized-policy": 1,
        "shape": 2,
        "inf": 2,
        "numpy-scalar": 3,
        "type": 3,
        "int": 3,
    },
)

# ----------------------------------------------------------------------------- 11.4 the exact KL of best-of-n

NAN_AT_NO_WIN = (
    "an answer with P_n(y) = 0 (one the policy never gives, or one whose chance to win underflows to 0) "
    "adds 0 to the KL, but NumPy computes its term 0 * log(0 / pi(y)) as NaN: keep only the answers "
    "with P_n(y) > 0"
)
ROUNDED_KL = "the contract asks for the KL within 1e-9, so do not round it"


class ExpectBestOfNKL(ExpectFloat):
    """KL(P_n || pi), a Python float within 1e-9 of the expected one. A NaN is named for the term
    of probability 0 that makes it, and an answer that is the expected one rounded to a few
    decimals is named as rounded."""

    def __init__(self, slips=()):
        super().__init__(atol=1e-9, what="the KL", slips=slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if isinstance(got, float) and math.isnan(got):
            return "nan-at-zero", f"the KL is NaN: {NAN_AT_NO_WIN}"
        return _said_rounded(super().diagnose(got, expected), got, expected, "it looks", ROUNDED_KL)


def _kl_case(probs, proxy, n, expected: float, why: str, lists=False) -> Case:
    if not lists:
        probs, proxy = np.array(probs, dtype=float), np.array(proxy, dtype=float)
    return Case({"probs": probs, "proxy": proxy, "n": n}, float(expected), why)


def _kl_slip(kind: str):
    """Return best_of_n_kl with one usual slip (see ``KL_SLIPS``)."""
    known_slip(kind, ("analytic", "reversed", "log2", "ties-not-merged", "nan-at-zero", "rounded"))
    by_order = _bon_slip("ties-by-order")

    def best_of_n_kl_(probs, proxy, n):
        if kind == "analytic":
            return math.log(n) - (n - 1) / n
        probs = np.asarray(probs, dtype=float)
        if kind == "ties-not-merged":  # each answer a rank of its own, tied ones in their order
            law = by_order(probs, proxy, n)
        else:
            values, block = np.unique(np.asarray(proxy, dtype=float), return_inverse=True)
            block = block.reshape(-1)
            mass = np.bincount(block, weights=probs, minlength=len(values))
            f = np.minimum(np.concatenate([[0.0], np.cumsum(mass)]), 1.0)
            won = (f[1:] ** n - f[:-1] ** n)[block]
            law = np.divide(won * probs, mass[block], out=np.zeros_like(probs), where=mass[block] > 0)
        with np.errstate(all="ignore"):
            if kind == "reversed":  # KL(pi || P_n): weighted by pi
                given = probs > 0
                return float((probs[given] * np.log(probs[given] / law[given])).sum())
            if kind == "nan-at-zero":
                return float((law * np.log(law / probs)).sum())
            won = law > 0
            kl = float((law[won] * np.log(law[won] / probs[won])).sum())
        if kind == "log2":
            return kl / math.log(2)
        if kind == "rounded":
            return round(kl, 4)
        return kl  # "ties-not-merged": the KL of the wrong law

    return best_of_n_kl_


KL_SLIPS = (
    Slip(
        "analytic",
        _kl_slip("analytic"),
        "that is log n - (n - 1) / n, exercise 11.2's formula: the KL for a score without atoms, only an "
        "upper bound here, where every answer is an atom; compute P_n and sum P_n log(P_n / pi)",
    ),
    Slip(
        "reversed",
        _kl_slip("reversed"),
        "that is KL(pi || P_n), weighted by pi: the KL here is KL(P_n || pi), weighted by P_n",
    ),
    Slip("log2", _kl_slip("log2"), "that is in bits, the log to base 2: the KL is in nats, take the natural log"),
    Slip(
        "ties-not-merged",
        _kl_slip("ties-not-merged"),
        "that gives each tied answer a rank of its own, by position: answers of equal proxy form one atom, "
        "and P_n splits it in proportion to pi, so P_n / pi is the same across it",
    ),
    Slip("nan-at-zero", _kl_slip("nan-at-zero"), NAN_AT_NO_WIN),
    Slip("rounded", _kl_slip("rounded"), ROUNDED_KL),
)

_K = 40  # pi uniform on 40 answers with distinct scores: P_2(i) = (2i - 1) / K^2
_UNIFORM_2 = math.fsum((2 * i - 1) / _K**2 * math.log((2 * i - 1) / _K) for i in range(1, _K + 1))
_TWO_ATOMS = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)  # P_2 = (0.25, 0.75) against (0.5, 0.5)

BEST_OF_N_KL = Exercise(
    name="best_of_n_kl",
    chapter=11,
    title="The exact KL of best-of-n",
    expect=ExpectBestOfNKL(slips=KL_SLIPS),
    cases=(
        _kl_case(
            [0.5, 0.5],
            [0, 1],
            2,
            _TWO_ATOMS,
            "two atoms, no tie: P_2 = 0.5^2, 1 - 0.5^2 = 0.25, 0.75, and 0.25 log 0.5 + 0.75 log 1.5 "
            "= 0.130812, below log 2 - 1/2 = 0.193147",
        ),
        _kl_case(
            [0.5, 0.5],
            [0, 1],
            3,
            0.125 * math.log(0.25) + 0.875 * math.log(1.75),
            "n = 3: P_3 = 0.125, 0.875, and 0.125 log 0.25 + 0.875 log 1.75 = 0.316377, below log 3 - 2/3 = 0.431946",
        ),
        _kl_case([0.5, 0.3, 0.2], [1, 2, 3], 1, 0.0, "n = 1: best-of-1 is the policy itself, KL 0"),
        _kl_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            2,
            0.25 * math.log(0.5) + 0.39 * math.log(1.3) + 0.36 * math.log(1.8),
            "P_2 = 0.25, 0.39, 0.36 (exercise 11.1): 0.25 log 0.5 + 0.39 log 1.3 + 0.36 log 1.8 = 0.140638",
        ),
        _kl_case(
            [0.2, 0.3, 0.5],
            [1, 1, 1],
            5,
            0.0,
            "all answers tied: one atom, and best-of-n moves no mass within an atom; P_5 = pi, KL 0",
        ),
        _kl_case(
            [0.5, 0.25, 0.25],
            [0, 1, 1],
            2,
            _TWO_ATOMS,
            "a tie makes one atom of mass 0.5: P_2 = 0.25, 0.375, 0.375, P_2 / pi = 0.5, 1.5, 1.5, so the KL "
            "is that of two atoms, 0.130812",
        ),
        _kl_case(
            [0.5, 0.0, 0.5],
            [1, 3, 2],
            2,
            _TWO_ATOMS,
            "the top answer has probability 0: never drawn, P_2 = 0.25, 0, 0.75, and it adds 0: 0.130812",
        ),
        _kl_case(
            [0.5, 0.3, 0.2],
            [1, 2, 3],
            1000,
            math.log(5),
            "n = 1000: P_n puts all but 0.8^1000, about 1e-97, on the top answer, so the KL is log(1 / 0.2) "
            "= log 5 = 1.609438, far below log 1000 - 0.999 = 5.908755",
        ),
        Case(
            {"probs": np.full(_K, 1 / _K), "proxy": list(range(_K)), "n": 2},
            _UNIFORM_2,
            "40 equal atoms, distinct scores: P_2(i) = (2i - 1) / 40^2, and the sum of P_2(i) log((2i - 1) / 40) "
            "is 0.192836, 3.1e-4 below log 2 - 1/2: nearer as the atoms shrink, never above",
        ),
        _kl_case(
            [0.5, 0.5],
            [0, 1],
            2,
            _TWO_ATOMS,
            "the contract's example as written, lists: 0.130812, a Python float",
            lists=True,
        ),
    ),
    hints=(
        "KL(P_n || pi) is the sum over the answers of P_n(y) log(P_n(y) / pi(y)), with P_n the exact "
        "law of exercise 11.1 (your `best_of_n_probs` computes it). Not log n - (n - 1) / n: that is the "
        "KL only when no answer carries probability of its own, and here every answer does.",
        "Weight each log-ratio by P_n(y), not by pi(y), and take the natural log: the KL is in nats. "
        "An answer with P_n(y) = 0 adds 0, but NumPy computes 0 * log(0 / pi(y)) as NaN: keep only the "
        "answers with P_n(y) > 0. Tied answers form one atom: P_n splits it in proportion to pi, which "
        "`best_of_n_probs` already does.",
        "`law = best_of_n_probs(probs, proxy, n)`; `probs = np.asarray(probs, dtype=float)`; "
        "`won = law > 0`; `return float((law[won] * np.log(law[won] / probs[won])).sum())`: a Python "
        "float, unrounded.",
    ),
    reference=best_of_n_kl,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.exact.best_of_n_stats",
        "minirlhf.exact.best_of_n_table",
        "minirlhf.exact.best_of_n",
        "minirlhf.studies.gao.best_of_n_probs",
        "minirlhf.studies.gao.sequence_kl",
    ),
    random_kwargs=_bon_random_kwargs,
    # the KL of the exact law, not the formula (1), its weight, base, zero terms and ties (2), the
    # Python float, unrounded (3)
    hint_for={
        "analytic": 1,
        "reversed": 2,
        "log2": 2,
        "ties-not-merged": 2,
        "nan-at-zero": 2,
        "rounded": 3,
        "numpy-scalar": 3,
        "type": 3,
        "int": 3,
    },
)

IN_THIS_CHAPTER = (BEST_OF_N_PROBS, BEST_OF_N_KL_BOUND, SEQUENCE_KL, BEST_OF_N_KL)
