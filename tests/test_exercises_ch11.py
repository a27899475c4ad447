"""Chapter 11: best-of-n's exact law, its analytic KL, the exact sequence KL and the exact KL of
best-of-n, checked against numbers worked by hand, against the engine (minirlhf.exact), against
their defining properties, and against plausible slips that the checks must catch."""

import math

import numpy as np
import pytest
import torch

from minirlhf import exact
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import ch11, get
from minirlhf.studies.gao import best_of_n_kl, best_of_n_kl_bound, best_of_n_probs, sequence_kl

# ----------------------------------------------------------------------------- best-of-n


@pytest.mark.parametrize(
    "probs, proxy, n, expected",
    [
        ([0.5, 0.3, 0.2], [1, 2, 3], 1, [0.5, 0.3, 0.2]),  # one draw: the policy
        ([0.5, 0.3, 0.2], [1, 2, 3], 2, [0.25, 0.39, 0.36]),  # 0.5^2, 0.8^2 - 0.5^2, 1 - 0.8^2
        ([0.2, 0.3, 0.5], [3, 2, 1], 2, [0.36, 0.39, 0.25]),  # ranked by proxy, not position
        ([0.5, 0.25, 0.25], [0, 1, 1], 2, [0.25, 0.375, 0.375]),  # a tie splits its block's 0.75
        ([0.5, 0.5], [0, 1], 3, [0.125, 0.875]),
        ([0.5, 0.3, 0.2], [1, 2, 3], 10, [0.0009765625, 0.1063976199, 0.8926258176]),  # 0.5^10, 0.8^10
        ([0.5, 0.0, 0.5], [1, 3, 2], 2, [0.25, 0.0, 0.75]),  # never drawn, never best
        ([0.5, 0.0, 0.0, 0.5], [1, 3, 3, 2], 2, [0.25, 0.0, 0.0, 0.75]),  # a tied block of no mass
        ([0.2, 0.3, 0.5], [1, 1, 1], 5, [0.2, 0.3, 0.5]),  # all tied: the probs
        ([0.5, 0.3, 0.2], [1, 2, 3], 1000, [0.0, 0.0, 1.0]),
        ([0.1, 0.4, 0.2, 0.3], [2, 1, 2, 0], 2, [0.17, 0.40, 0.34, 0.09]),
    ],
)
def test_best_of_n_by_hand(probs, proxy, n, expected):
    got = best_of_n_probs(probs, proxy, n)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (len(probs),)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def _random_distribution(rng):
    """One prompt's completions: probabilities (some 0 at times) and proxies, often tied."""
    K = int(rng.integers(1, 10))
    probs = rng.dirichlet(np.full(K, float(rng.choice([0.2, 1.0, 5.0]))))
    if K > 1 and rng.random() < 0.3:
        probs[0] = 0.0
        probs = probs / probs.sum() if probs.sum() > 0 else np.eye(K)[1]
    proxy = rng.integers(0, int(rng.integers(1, 4)), K).astype(float) if rng.random() < 0.7 else rng.normal(size=K)
    return probs, proxy


def test_best_of_n_agrees_with_the_engine_on_random_inputs_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(200):
        probs, proxy = _random_distribution(rng)
        n = int(rng.choice([1, 2, 3, 5, 16, 100, 1000, 12345]))
        want = exact.best_of_n(torch.as_tensor(probs, dtype=torch.float64), torch.as_tensor(proxy), n).numpy()
        np.testing.assert_allclose(best_of_n_probs(probs, proxy, n), want, rtol=0, atol=1e-12)


def test_best_of_n_agrees_with_the_engine_on_the_exercises_random_inputs():
    rng = np.random.default_rng(1)
    ex = get("best_of_n_probs")
    for _ in range(200):
        kw = ex.random_kwargs(rng)
        t = {k: torch.as_tensor(np.asarray(kw[k], dtype=float), dtype=torch.float64) for k in ("probs", "proxy")}
        want = exact.best_of_n(t["probs"], t["proxy"], kw["n"]).numpy()
        np.testing.assert_allclose(best_of_n_probs(**kw), want, rtol=0, atol=1e-12)


def test_best_of_n_is_a_distribution_that_moves_up_with_n():
    rng = np.random.default_rng(2)
    ns = [1, 2, 3, 4, 8, 16, 64, 256, 1000]
    for _ in range(200):
        probs, proxy = _random_distribution(rng)
        np.testing.assert_allclose(best_of_n_probs(probs, proxy, 1), probs, atol=1e-12)
        laws = [best_of_n_probs(probs, proxy, n) for n in ns]
        for law in laws:
            assert (law >= -1e-15).all() and law.sum() == pytest.approx(1.0, abs=1e-12)
            assert (law[probs == 0] == 0).all()  # never drawn, never best
        expected_proxy = [float(law @ proxy) for law in laws]
        assert all(b >= a - 1e-12 for a, b in zip(expected_proxy, expected_proxy[1:]))
        # completions of one proxy keep the policy's proportions
        for v in np.unique(proxy):
            tied = (proxy == v) & (probs > 0)
            if tied.sum() > 1:
                ratio = laws[2][tied] / probs[tied]
                np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9, atol=1e-300)


def test_best_of_n_takes_lists_and_ints():
    got = best_of_n_probs([0.5, 0.3, 0.2], [1, 2, 3], np.int64(2))
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, [0.25, 0.39, 0.36], atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"probs": [0.5, 0.5], "proxy": [1.0, 2.0, 3.0]}, "proxy"),  # shapes differ
        ({"probs": [[0.5, 0.5]], "proxy": [[1.0, 2.0]]}, "probs"),  # not 1-D
        ({"probs": [1.2, -0.2], "proxy": [1.0, 2.0]}, "probs"),  # negative
        ({"probs": [0.5, 0.4], "proxy": [1.0, 2.0]}, "probs"),  # sums to 0.9
        ({"n": 0}, "n"),
        ({"n": -3}, "n"),
        ({"n": 2.0}, "n"),
        ({"n": True}, "n"),
        ({"proxy": [1.0, np.nan]}, "proxy"),
        ({"proxy": [1.0, np.inf]}, "proxy"),
    ],
)
def test_best_of_n_rejects_bad_input_by_name(kwargs, name):
    args = {"probs": [0.5, 0.5], "proxy": [1.0, 2.0], "n": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        best_of_n_probs(**args)


def test_best_of_n_accepts_a_sum_within_1e_9():
    got = best_of_n_probs([0.5, 0.5 + 5e-10], [0.0, 1.0], 2)
    assert got.sum() == pytest.approx(1.0, abs=1e-8)


# ----------------------------------------------------------------------------- the analytic KL


@pytest.mark.parametrize(
    "n, expected",
    [
        (1, 0.0),
        (2, 0.6931471805599453 - 0.5),
        (4, 1.3862943611198906 - 0.75),
        (16, 2.772588722239781 - 0.9375),
        (4096, 8.317766166719343 - 4095 / 4096),
    ],
)
def test_bound_by_hand(n, expected):
    got = best_of_n_kl_bound(n)
    assert type(got) is float and got == pytest.approx(expected, abs=1e-12)


def test_bound_agrees_with_the_engine_and_grows_like_log_n():
    ns = [1, 2, 3, 7, 10, 100, 1000, 12345, 10**6] + list(np.random.default_rng(3).integers(1, 10**6, 200))
    for n in ns:
        assert best_of_n_kl_bound(int(n)) == pytest.approx(exact.analytic_best_of_n_kl(int(n)).item(), abs=1e-12)
    values = [best_of_n_kl_bound(n) for n in range(1, 200)]
    assert all(b > a for a, b in zip(values, values[1:]))
    assert all(math.log(n) - 1 <= best_of_n_kl_bound(n) <= math.log(n) for n in range(1, 200))


def test_bound_is_the_limit_of_the_exact_kl_as_the_atoms_shrink():
    # many completions of equal probability, distinct proxies: KL(P_n || pi) nears the bound,
    # from below, since every completion is still an atom
    K, n = 20_000, 8
    probs = np.full(K, 1 / K)
    law = best_of_n_probs(probs, np.arange(K, dtype=float), n)
    kept = law > 0
    kl = float((law[kept] * np.log(law[kept] / probs[kept])).sum())
    assert kl == pytest.approx(best_of_n_kl_bound(n), abs=1e-3)
    assert kl < best_of_n_kl_bound(n)


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "3", None])
def test_bound_rejects_bad_n_by_name(n):
    with pytest.raises(ValueError, match="n"):
        best_of_n_kl_bound(n)


# ----------------------------------------------------------------------------- the sequence KL

HALF = math.log(0.5)


@pytest.mark.parametrize(
    "logp, ref_logp, expected",
    [
        (np.log([0.5, 0.5]), np.log([0.25, 0.75]), 0.5 * math.log(2) + 0.5 * math.log(2 / 3)),
        (np.log([0.25, 0.75]), np.log([0.5, 0.5]), 0.25 * math.log(0.5) + 0.75 * math.log(1.5)),
        (np.log([0.2, 0.3, 0.5]), np.log([0.2, 0.3, 0.5]), 0.0),
        ([0.0, -np.inf], np.log([0.5, 0.5]), math.log(2)),
        ([0.0], [math.log(0.1)], math.log(10)),  # the reference's kept mass need not sum to 1
        ([HALF, HALF, -np.inf], [HALF, math.log(0.25), -np.inf], 0.5 * math.log(2)),  # -inf on both: 0
        ([HALF, HALF], [0.0, -np.inf], math.inf),  # the reference cannot produce what the policy does
    ],
)
def test_sequence_kl_by_hand(logp, ref_logp, expected):
    got = sequence_kl(logp, ref_logp)
    assert type(got) is float
    assert got == pytest.approx(expected, abs=1e-12) if math.isfinite(expected) else got == math.inf


def test_sequence_kl_of_rows_is_an_array_one_per_row():
    logp = np.log([[0.5, 0.5], [0.25, 0.75]])
    ref = np.log([[0.25, 0.75], [0.5, 0.5]])
    got = sequence_kl(logp.tolist(), ref.tolist())
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (2,)
    np.testing.assert_allclose(got, [sequence_kl(logp[0], ref[0]), sequence_kl(logp[1], ref[1])], atol=1e-15)
    np.testing.assert_allclose(got, [0.5 * math.log(4 / 3), 0.25 * math.log(0.5) + 0.75 * math.log(1.5)], atol=1e-12)


def test_sequence_kl_is_gibbs_nonnegative_and_matches_the_engines_best_of_n_kl():
    rng = np.random.default_rng(4)
    for _ in range(200):
        probs, proxy = _random_distribution(rng)
        n = int(rng.choice([1, 2, 5, 16, 100]))
        law = best_of_n_probs(probs, proxy, n)
        with np.errstate(divide="ignore"):
            kl = sequence_kl(np.log(law), np.log(probs))
        assert kl >= -1e-12
        stats = exact.best_of_n_stats(torch.as_tensor(probs, dtype=torch.float64), torch.as_tensor(proxy), n)
        assert kl == pytest.approx(stats["kl"].item(), abs=1e-9)
        assert kl <= best_of_n_kl_bound(n) + 1e-9  # the bound holds, ties or none


def test_sequence_kl_on_the_exercises_random_inputs_is_finite_and_its_rows_are_independent():
    rng = np.random.default_rng(5)
    ex = get("sequence_kl")
    shapes = set()
    for _ in range(200):
        kw = ex.random_kwargs(rng)
        got = sequence_kl(**kw)
        logp = np.asarray(kw["logp"], dtype=float)
        shapes.add(logp.ndim)
        assert np.isfinite(got).all()
        if logp.ndim == 2:
            rows = [sequence_kl(a, b) for a, b in zip(logp, np.asarray(kw["ref_logp"], dtype=float))]
            np.testing.assert_allclose(got, rows, atol=1e-15)
    assert shapes == {1, 2}


@pytest.mark.parametrize(
    "logp, ref_logp, name",
    [
        ([0.0, -1.0], [0.0], "ref_logp"),  # shapes differ
        (0.0, 0.0, "logp"),  # 0-d
        (np.zeros((1, 1, 2)), np.zeros((1, 1, 2)), "logp"),  # 3-D
        ([np.nan, 0.0], [0.0, 0.0], "logp"),
        ([np.inf, 0.0], [0.0, 0.0], "logp"),
    ],
)
def test_sequence_kl_rejects_bad_input_by_name(logp, ref_logp, name):
    with pytest.raises(ValueError, match=name):
        sequence_kl(logp, ref_logp)


# ----------------------------------------------------------------------------- the exact KL of best-of-n

TWO_ATOMS = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)


@pytest.mark.parametrize(
    "probs, proxy, n, expected",
    [
        ([0.5, 0.5], [0, 1], 2, TWO_ATOMS),  # P_2 = (0.25, 0.75): 0.130812, not log 2 - 1/2 = 0.193147
        ([0.5, 0.5], [0, 1], 3, 0.125 * math.log(0.25) + 0.875 * math.log(1.75)),
        ([0.5, 0.3, 0.2], [1, 2, 3], 1, 0.0),  # best-of-1 is the policy
        ([0.5, 0.3, 0.2], [1, 2, 3], 2, 0.25 * math.log(0.5) + 0.39 * math.log(1.3) + 0.36 * math.log(1.8)),
        ([0.2, 0.3, 0.5], [1, 1, 1], 5, 0.0),  # one atom: P_n = pi
        ([0.5, 0.25, 0.25], [0, 1, 1], 2, TWO_ATOMS),  # the tie is one atom of mass 0.5
        ([0.5, 0.0, 0.5], [1, 3, 2], 2, TWO_ATOMS),  # never drawn, adds 0
        ([0.5, 0.3, 0.2], [1, 2, 3], 1000, math.log(5)),  # all on the top answer: log(1 / 0.2)
    ],
)
def test_best_of_n_kl_by_hand(probs, proxy, n, expected):
    got = best_of_n_kl(probs, proxy, n)
    assert type(got) is float and got == pytest.approx(expected, abs=1e-12)


def test_the_counterexample_is_below_the_formula():
    assert best_of_n_kl([0.5, 0.5], [0.0, 1.0], 2) == pytest.approx(0.130812, abs=1e-6)
    assert best_of_n_kl_bound(2) == pytest.approx(0.193147, abs=1e-6)


def test_best_of_n_kl_is_the_sequence_kl_of_the_law_and_the_engines_and_below_the_formula():
    rng = np.random.default_rng(8)
    for _ in range(300):
        probs, proxy = _random_distribution(rng)
        n = int(rng.choice([1, 2, 3, 5, 16, 100, 1000]))
        got = best_of_n_kl(probs, proxy, n)
        with np.errstate(divide="ignore"):
            assert got == pytest.approx(sequence_kl(np.log(best_of_n_probs(probs, proxy, n)), np.log(probs)), abs=1e-12)
        stats = exact.best_of_n_stats(torch.as_tensor(probs, dtype=torch.float64), torch.as_tensor(proxy), n)
        assert got == pytest.approx(stats["kl"].item(), abs=1e-9)
        assert -1e-15 <= got <= best_of_n_kl_bound(n) + 1e-12
        if n == 1:
            assert got == pytest.approx(0.0, abs=1e-15)
        else:  # every answer is an atom: strictly below the formula
            assert got < best_of_n_kl_bound(n)


def test_best_of_n_kl_of_equal_atoms_rises_to_the_formula_from_below():
    # pi uniform on K distinct scores, n = 2: P_2(i) = (2i - 1) / K^2
    gaps = []
    for K in (2, 10, 100, 1000):
        got = best_of_n_kl(np.full(K, 1 / K), np.arange(K), 2)
        by_hand = math.fsum((2 * i - 1) / K**2 * math.log((2 * i - 1) / K) for i in range(1, K + 1))
        assert got == pytest.approx(by_hand, abs=1e-12)
        gaps.append(best_of_n_kl_bound(2) - got)
    assert gaps[0] == pytest.approx(math.log(2) - 0.5 - TWO_ATOMS, abs=1e-12)
    assert all(a > b > 0 for a, b in zip(gaps, gaps[1:])) and gaps[-1] < 1e-3


def test_ties_merge_atoms_and_can_only_lower_the_kl():
    # merging two answers into one tie coarse-grains P_n and pi alike
    apart = best_of_n_kl([0.5, 0.25, 0.25], [0.0, 1.0, 2.0], 2)
    tied = best_of_n_kl([0.5, 0.25, 0.25], [0.0, 1.0, 1.0], 2)
    assert tied == pytest.approx(TWO_ATOMS, abs=1e-12) and tied < apart


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"probs": [0.5, 0.5], "proxy": [1.0, 2.0, 3.0]}, "proxy"),
        ({"probs": [0.5, 0.4], "proxy": [1.0, 2.0]}, "probs"),
        ({"probs": [1.2, -0.2], "proxy": [1.0, 2.0]}, "probs"),
        ({"n": 0}, "n"),
        ({"n": 2.0}, "n"),
        ({"proxy": [1.0, np.nan]}, "proxy"),
    ],
)
def test_best_of_n_kl_rejects_bad_input_by_name(kwargs, name):
    args = {"probs": [0.5, 0.5], "proxy": [1.0, 2.0], "n": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        best_of_n_kl(**args)


# ----------------------------------------------------------------------------- the exercises


@pytest.mark.parametrize("ex", ch11.IN_THIS_CHAPTER, ids=lambda ex: ex.name)
def test_the_reference_passes_and_the_random_inputs_are_valid(ex):
    assert ex.chapter == 11 and run_cases(ex.reference, ex).passed
    rng = np.random.default_rng(6)
    for _ in range(200):
        ex.reference(**ex.random_kwargs(rng))


def test_the_random_inputs_cover_the_contract():
    rng = np.random.default_rng(7)
    bon = [ch11.BEST_OF_N_PROBS.random_kwargs(rng) for _ in range(300)]
    assert {kw["n"] for kw in bon} == {1, 2, 3, 5, 16, 100, 1000}
    assert {len(kw["probs"]) for kw in bon} == set(range(1, 9))
    assert any(isinstance(kw["probs"], list) for kw in bon) and any(isinstance(kw["probs"], np.ndarray) for kw in bon)
    assert any(len(np.unique(kw["proxy"])) < len(kw["proxy"]) for kw in bon)  # ties
    assert any(0.0 in np.asarray(kw["probs"]) for kw in bon)
    bounds = [ch11.BEST_OF_N_KL_BOUND.random_kwargs(rng)["n"] for _ in range(300)]
    assert min(bounds) == 1 and 10**5 < max(bounds) <= 10**6 and all(type(n) is int for n in bounds)
    seq = [ch11.SEQUENCE_KL.random_kwargs(rng) for _ in range(300)]
    assert any(-np.inf in np.asarray(kw["logp"]) for kw in seq)
    mass = [np.exp(np.asarray(kw["logp"], dtype=float)).sum(axis=-1) for kw in seq]
    assert any((m < 0.9).any() for m in mass)  # policies whose kept answers sum to less than 1
    assert any(np.allclose(m, 1.0) for m in mass)
    for kw in seq:  # the reference is never -inf where the policy is not
        logp, ref = np.asarray(kw["logp"], dtype=float), np.asarray(kw["ref_logp"], dtype=float)
        assert not ((logp > -np.inf) & (ref == -np.inf)).any()


SLIPS = [(ex.name, slip) for ex in ch11.IN_THIS_CHAPTER for slip in ex.expect.slips]


@pytest.mark.parametrize("name, slip", SLIPS, ids=[f"{name}-{slip.kind}" for name, slip in SLIPS])
def test_every_slip_fails_the_check_in_its_own_words(name, slip):
    report = run_cases(slip.fn, get(name))
    assert not report.passed
    failed = [r for r in report.results if not r.passed]
    assert any(slip.says in r.message for r in failed), [r.message for r in failed]


def test_the_slip_names_are_the_contracts():
    assert [s.kind for s in ch11.BON_SLIPS] == [
        "no-minus",
        "worst-of-n",
        "ties-by-order",
        "at-least-once",
        "not-split",
        "rounded",
    ]
    assert [s.kind for s in ch11.BOUND_SLIPS] == ["log-only", "plus", "log2", "one-over-n"]
    assert [s.kind for s in ch11.SEQ_SLIPS] == [
        "mean",
        "reverse",
        "nan-at-zero",
        "no-exp",
        "first-axis",
        "renormalized-policy",
    ]
    assert [s.kind for s in ch11.KL_SLIPS] == [
        "analytic",
        "reversed",
        "log2",
        "ties-not-merged",
        "nan-at-zero",
        "rounded",
    ]


def _bon_plain(probs, proxy, n):
    """A learner's version without the care about ties: a share of 0 / 0 is NaN."""
    probs, proxy = np.asarray(probs, dtype=float), np.asarray(proxy, dtype=float)
    values, block = np.unique(proxy, return_inverse=True)
    mass = np.bincount(block.reshape(-1), weights=probs)
    f = np.concatenate([[0.0], np.cumsum(mass)])
    with np.errstate(invalid="ignore"):
        return ((f[1:] ** n - f[:-1] ** n) / mass)[block] * probs


def _bon_list(probs, proxy, n):
    return best_of_n_probs(probs, proxy, n).tolist()


def _seq_numpy_float(logp, ref_logp):
    got = sequence_kl(logp, ref_logp)
    return np.float64(got) if isinstance(got, float) else got


def _seq_nansum(logp, ref_logp):
    """Dropping the NaN terms is right: 0 * (-inf) is a term of probability 0."""
    logp, ref_logp = np.asarray(logp, dtype=float), np.asarray(ref_logp, dtype=float)
    with np.errstate(invalid="ignore"):
        kl = np.nansum(np.exp(logp) * (logp - ref_logp), axis=-1)
    return float(kl) if logp.ndim == 1 else kl


def _seq_finite_for_inf(logp, ref_logp):
    got = sequence_kl(logp, ref_logp)
    return 0.0 if isinstance(got, float) and math.isinf(got) else got


@pytest.mark.parametrize(
    "fn, name, mistake",
    [
        (_bon_plain, "best_of_n_probs", "nan"),
        (_bon_list, "best_of_n_probs", "type"),
        (_seq_numpy_float, "sequence_kl", "numpy-scalar"),
    ],
)
def test_other_wrong_versions_fail_with_their_mistake(fn, name, mistake):
    report = run_cases(fn, get(name))
    assert not report.passed and report.mistake == mistake


def test_a_finite_kl_where_it_is_infinite_fails_saying_why():
    report = run_cases(_seq_finite_for_inf, get("sequence_kl"))
    assert not report.passed and report.first_failure.mistake == "value"
    assert "the reference never produces, and the KL is +inf" in report.first_failure.message


def test_the_nansum_version_passes_and_a_nan_says_where_it_comes_from():
    assert run_cases(_seq_nansum, get("sequence_kl")).passed
    report = run_cases(ch11._seq_slip("nan-at-zero"), get("sequence_kl"))
    assert report.mistake == "nan-at-zero"
    assert "0 * (-inf) = NaN" in " ".join(str(report).split())


# ----------------------------------------------------------------------------- what the reviews found


@pytest.mark.parametrize("decimals", [2, 4, 6, 8])
def test_a_rounded_law_fails_the_visible_check_saying_it_looks_rounded(decimals):
    def rounded(probs, proxy, n):
        return np.round(best_of_n_probs(probs, proxy, n), decimals)

    report = run_cases(rounded, get("best_of_n_probs"))
    assert not report.passed and report.mistake == "rounded"
    failed = [r for r in report.results if not r.passed]
    assert all(r.mistake == "rounded" for r in failed)
    assert f"they look rounded to {decimals} decimals" in failed[0].message
    assert ch11.ROUNDED_PROBS in failed[0].message


def test_the_rounded_slip_of_best_of_n_fails_only_the_case_that_needs_ten_decimals():
    report = run_cases(ch11._bon_slip("rounded"), get("best_of_n_probs"))
    failed = [r for r in report.results if not r.passed]
    assert len(failed) == 1 and failed[0].case.kwargs["n"] == 10
    assert "rounded to 4 decimals" in failed[0].message


def test_a_wrong_law_is_not_called_rounded():
    def one_hot(probs, proxy, n):  # the best always wins: wrong, and short decimals
        out = np.zeros(len(probs))
        out[int(np.argmax(proxy))] = 1.0
        return out

    report = run_cases(one_hot, get("best_of_n_probs"))
    assert not report.passed and all(r.mistake != "rounded" for r in report.results)


def test_a_rounded_kl_fails_saying_it_looks_rounded():
    def rounded(probs, proxy, n):
        return round(best_of_n_kl(probs, proxy, n), 6)

    report = run_cases(rounded, get("best_of_n_kl"))
    assert not report.passed and report.mistake == "rounded"
    assert "it looks rounded to 6 decimals" in report.first_failure.message


def _seq_renormalized(logp, ref_logp):
    """The policy renormalized to sum to 1 before the KL: wrong, pi(y) is exp(logp) as given."""
    logp = np.asarray(logp, dtype=float)
    logp = logp - np.log(np.sum(np.exp(logp), axis=-1, keepdims=True))
    return sequence_kl(logp, ref_logp)


def test_a_renormalized_policy_fails_the_check_and_the_grader_naming_the_mistake():
    ex = get("sequence_kl")
    report = run_cases(_seq_renormalized, ex)
    assert not report.passed and report.mistake == "renormalized-policy"
    assert "renormalizes the policy" in report.first_failure.message
    rng = np.random.default_rng(9)
    wrong = 0
    for _ in range(ex.n_random):  # the grader's random inputs catch it too
        kw = ex.random_kwargs(rng)
        wrong += ex.expect.problem(_seq_renormalized(**kw), ex.reference(**kw)) is not None
    assert wrong >= 10


def _kl_with_own_law(probs, proxy, n):
    """The third hint, on the package's law."""
    law = best_of_n_probs(probs, proxy, n)
    probs = np.asarray(probs, dtype=float)
    won = law > 0
    return float((law[won] * np.log(law[won] / probs[won])).sum())


def test_the_hinted_kl_passes_and_agrees_on_the_random_inputs():
    ex = get("best_of_n_kl")
    assert run_cases(_kl_with_own_law, ex).passed
    rng = np.random.default_rng(10)
    for _ in range(300):
        kw = ex.random_kwargs(rng)
        assert ex.expect.problem(_kl_with_own_law(**kw), ex.reference(**kw)) is None


def test_the_analytic_formula_fails_every_case_but_n_1():
    report = run_cases(ch11._kl_slip("analytic"), get("best_of_n_kl"))
    failed = [r for r in report.results if not r.passed]
    assert [r.case.kwargs["n"] == 1 for r in report.results if r.passed] == [True]
    assert all(r.mistake == "analytic" for r in failed)
    near = [r for r in failed if len(r.case.kwargs["probs"]) == 40]  # 3.1e-4 off, still caught
    assert len(near) == 1


def test_a_numpy_float_kl_fails_as_such():
    def numpy_float(probs, proxy, n):
        return np.float64(best_of_n_kl(probs, proxy, n))

    report = run_cases(numpy_float, get("best_of_n_kl"))
    assert not report.passed and report.mistake == "numpy-scalar"
