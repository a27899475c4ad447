"""The k1, k2, k3 estimators and the two-Gaussian study: hand values, closed forms checked by
quadrature, Monte Carlo against the closed forms, and the note's published table."""

import math

import numpy as np
import pytest

from minirlhf.studies import estimators as est


def test_estimators_on_hand_worked_values():
    policy, reference = np.array([-1.0, -2.0, -0.5]), np.array([-1.0, -1.0, -1.5])
    # kl = [0, -1, 1]
    np.testing.assert_allclose(est.k1(policy, reference), [0.0, -1.0, 1.0])
    np.testing.assert_allclose(est.k2(policy, reference), [0.0, 0.5, 0.5])
    # k3 = exp(-kl) - 1 + kl: 0, e - 2, 1/e
    np.testing.assert_allclose(est.k3(policy, reference), [0.0, math.e - 2, 1 / math.e])


def test_k3_is_never_negative_and_precise_for_tiny_kl():
    kl = np.random.default_rng(0).normal(0, 3, 10_000)
    assert (est.k3(kl, np.zeros_like(kl)) >= 0).all()
    # For kl = 1e-8, k3 = kl**2 / 2 to first order; a naive exp(-kl) - 1 + kl loses it all.
    assert est.k3([1e-8], [0.0])[0] == pytest.approx(5e-17, rel=1e-6)


def test_estimators_reject_mismatched_shapes_by_name():
    with pytest.raises(ValueError, match="logp_reference"):
        est.k3([-1.0, -2.0], [-1.0])


def test_gaussian_logps_are_normal_log_densities_of_the_same_draws():
    logq, logp = est.gaussian_logps(0.5, 5, np.random.default_rng(3))
    x = np.random.default_rng(3).standard_normal(5)
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(logq, -0.5 * x**2 - half_log_2pi)
    np.testing.assert_allclose(logp, -0.5 * (x - 0.5) ** 2 - half_log_2pi)
    # so kl = log q - log p = mu**2 / 2 - mu * x, as the chapter derives
    np.testing.assert_allclose(logq - logp, 0.125 - 0.5 * x)


@pytest.mark.parametrize("mu", [0.1, 0.5, 1.0, 2.0])
def test_closed_forms_agree_with_gauss_hermite_quadrature(mu):
    # E over x ~ N(0, 1) by Gauss-Hermite quadrature (probabilists' weights), to ~1e-12.
    nodes, weights = np.polynomial.hermite_e.hermegauss(120)
    weights = weights / weights.sum()
    kl_true = est.true_kl(mu)
    logq = -0.5 * nodes**2
    logp = -0.5 * (nodes - mu) ** 2
    exact = est.closed_form(mu)
    for name, k in est.ESTIMATORS.items():
        values = k(logq, logp)
        mean = (weights * values).sum()
        std = math.sqrt((weights * (values - mean) ** 2).sum())
        assert (mean - kl_true) / kl_true == pytest.approx(exact[name][0], abs=1e-9)
        assert std / kl_true == pytest.approx(exact[name][1], rel=1e-9)


def test_closed_form_numbers_of_the_chapter():
    small, large = est.closed_form(0.1), est.closed_form(1.0)
    assert small["k1"] == (0.0, pytest.approx(20.0))
    assert small["k2"][0] == pytest.approx(0.0025)
    assert small["k2"][1] == pytest.approx(math.sqrt(2.01))
    assert small["k3"][1] == pytest.approx(1.41657, abs=1e-5)
    assert large["k2"] == (pytest.approx(0.25), pytest.approx(math.sqrt(3)))
    assert large["k3"][1] == pytest.approx(2 * math.sqrt(math.e - 2))
    with pytest.raises(ValueError, match="mu"):
        est.closed_form(0.0)


def test_published_table_matches_the_closed_form_to_the_digits_it_prints():
    for mu, table in est.PUBLISHED.items():
        exact = est.closed_form(mu)
        for name, values in table.items():
            for printed, true in zip(values, exact[name]):
                text = f"{printed:g}"
                decimals = len(text.split(".")[1]) if "." in text else 0
                assert abs(printed - true) <= 0.5 * 10**-decimals + 1e-9, (mu, name, printed, true)


@pytest.mark.parametrize("mu", [0.1, 1.0])
def test_monte_carlo_agrees_with_the_closed_form(mu):
    mc, exact = est.monte_carlo(mu, n=2_000_000, seed=5), est.closed_form(mu)
    for name in est.ESTIMATORS:
        bias, std, se = mc[name]
        assert abs(bias - exact[name][0]) < 4 * se, name
        assert std == pytest.approx(exact[name][1], rel=0.01), name
        assert se == pytest.approx(std / math.sqrt(2_000_000))


def test_monte_carlo_is_deterministic_and_chunking_does_not_change_the_samples():
    a = est.monte_carlo(1.0, n=400_000, seed=2, chunk=100_000)
    b = est.monte_carlo(1.0, n=400_000, seed=2, chunk=100_000)
    c = est.monte_carlo(1.0, n=400_000, seed=2, chunk=200_000)
    assert a == b
    for name in est.ESTIMATORS:  # the same draws, grouped differently
        assert np.allclose(a[name], c[name], rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="n"):
        est.monte_carlo(1.0, n=1_000, chunk=300)


def test_paired_difference_resolves_the_small_k2_bias():
    ratio, se = est.paired_difference(0.1, "k2", "k3", n=2_000_000, seed=0)
    assert se < 1e-4
    assert abs(ratio - est.closed_form(0.1)["k2"][0]) < 4 * se


def test_study_rows_and_table():
    rows = est.study(mus=(0.1, 1.0, 2.0), n=1_000_000, seed=0)
    assert [(r["mu"], r["estimator"]) for r in rows] == [
        (mu, k) for mu in (0.1, 1.0, 2.0) for k in ("k1", "k2", "k3")]
    assert rows[-1]["paper_bias"] is None  # the note has no mu = 2
    table = est.format_study(rows)
    lines = table.splitlines()
    assert len(lines) == 3 + len(rows)
    assert max(len(line) for line in lines) <= 74  # fits the book's code column
    assert "20.000" in table and "0.0025" in table


def test_std_crossover_solves_equal_noise_and_matches_the_chapter():
    mu = est.std_crossover()
    assert mu == pytest.approx(1.12091, abs=1e-5)
    exact = est.closed_form(mu)
    assert exact["k3"][1] == pytest.approx(exact["k1"][1], rel=1e-12)
    assert math.exp(mu * mu) == pytest.approx(1 + 2 * mu * mu, rel=1e-12)
    # k3 is the quieter one below the crossover and the noisier one above it
    for below, above in ((0.1, 1.2), (1.0, 2.0), (mu - 1e-3, mu + 1e-3)):
        assert est.closed_form(below)["k3"][1] < est.closed_form(below)["k1"][1]
        assert est.closed_form(above)["k3"][1] > est.closed_form(above)["k1"][1]
    # the chapter's claim at mu = 1: about 1.70 for k3 against k1's 2
    assert est.closed_form(1.0)["k3"][1] == pytest.approx(1.695, abs=5e-4)


@pytest.mark.parametrize("mu", [0.9, est.std_crossover(), 1.3])
def test_std_ratios_around_the_crossover_agree_with_monte_carlo(mu):
    # k3's spread has heavy (log-normal) tails here, so the sampled std is looser than at mu <= 1
    mc, exact = est.monte_carlo(mu, n=2_000_000, seed=11), est.closed_form(mu)
    for name in ("k1", "k3"):
        assert mc[name][1] == pytest.approx(exact[name][1], rel=0.03), name
    if mu == 0.9:
        assert mc["k3"][1] < 0.8 * mc["k1"][1]
    if mu == 1.3:
        assert mc["k3"][1] > 1.15 * mc["k1"][1]
