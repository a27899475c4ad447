"""The win rate of best-of-n against pi, exactly (Beirami et al. 2024, section 5): by hand, its n / (n + 1)
limit and bound, the pruned mass's bounds, Monte Carlo, bad input."""

import math

import numpy as np
import pytest
import torch

from minirlhf.exact import analytic_best_of_n_win_rate, best_of_n, best_of_n_win_rate


def f64(*values):
    return torch.tensor(values, dtype=torch.float64)


def brute_force(probs: torch.Tensor, proxy: torch.Tensor, n: int) -> tuple[float, float]:
    """(strict, tie) summed over every pair (y, z), y from the best-of-n law, z from pi: O(K^2)."""
    p_n = best_of_n(probs, proxy, n)  # (K,)
    joint = p_n[:, None] * probs[None, :]  # (K, K)
    above = proxy[:, None] > proxy[None, :]
    equal = proxy[:, None] == proxy[None, :]
    return (joint * above).sum().item(), (joint * equal).sum().item()


def random_law(g: torch.Generator, k: int, levels: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random pi over k completions (peaked or flat), with distinct proxies or ``levels`` tied values."""
    probs = torch.rand(k, generator=g, dtype=torch.float64) ** (1 + 5 * torch.rand(1, generator=g).item())
    proxy = torch.randn(k, generator=g, dtype=torch.float64)
    if levels is not None:
        proxy = torch.randint(levels, (k,), generator=g).double()
    return probs / probs.sum(), proxy


# ----------------------------------------------------------------------------- by hand


def test_two_equally_likely_answers_by_hand():
    # pi = (1/2, 1/2), the second scoring higher. Best of 2 picks the low one only if both draws are
    # low: P_2 = (1/4, 3/4). Against Z ~ pi: Y high and Z low, 3/4 * 1/2 = 3/8, a strict win; Y and Z
    # equal, 1/4 * 1/2 + 3/4 * 1/2 = 1/2, a tie; so the win rate is 3/8 + 1/4 = 5/8 < 2/3.
    out = best_of_n_win_rate(f64(0.5, 0.5), f64(0.0, 1.0), 2)
    assert out["strict"].item() == pytest.approx(3 / 8, abs=1e-15)
    assert out["tie"].item() == pytest.approx(1 / 2, abs=1e-15)
    assert out["win_rate"].item() == pytest.approx(5 / 8, abs=1e-15)
    assert out["win_rate"].dim() == 0 and out["lower"] == out["win_rate"] == out["upper"] and out["escape"] == 0
    # best of 3: P_3 = (1/8, 7/8), strict 7/16, tie 1/2, win rate 11/16
    assert best_of_n_win_rate(f64(0.5, 0.5), f64(0.0, 1.0), 3)["win_rate"].item() == pytest.approx(11 / 16, abs=1e-15)


def test_a_tie_between_two_completions_by_hand():
    # pi = (1/4, 1/4, 1/2) with the last two tied: blocks low (1/4) and high (3/4). Best of 2 is low
    # with 1/16, high with 15/16: strict 15/16 * 1/4 = 15/64, tie 1/16 * 1/4 + 15/16 * 3/4 = 46/64,
    # win rate 15/64 + 23/64 = 19/32. Which completion of the block is drawn does not matter.
    out = best_of_n_win_rate(f64(0.25, 0.25, 0.5), f64(0.0, 1.0, 1.0), 2)
    assert out["strict"].item() == pytest.approx(15 / 64, abs=1e-15)
    assert out["tie"].item() == pytest.approx(46 / 64, abs=1e-15)
    assert out["win_rate"].item() == pytest.approx(19 / 32, abs=1e-15)


def test_best_of_one_wins_half_the_time():
    # n = 1 is pi against itself: the win rate is 1/2 by symmetry, the tie sum_b m_b^2
    g = torch.Generator().manual_seed(0)
    for levels in (None, 3):
        probs, proxy = random_law(g, 30, levels)
        out = best_of_n_win_rate(probs, proxy, 1)
        mass = torch.zeros(len(torch.unique(proxy)), dtype=torch.float64)
        mass.index_add_(0, torch.unique(proxy, return_inverse=True)[1], probs)
        assert out["win_rate"].item() == pytest.approx(0.5, abs=1e-14)
        assert out["tie"].item() == pytest.approx((mass**2).sum().item(), abs=1e-14)


def test_the_analytic_value_by_hand():
    expected = [1 / 2, 2 / 3, 3 / 4, 0.999]
    assert analytic_best_of_n_win_rate([1, 2, 3, 999]).tolist() == pytest.approx(expected, abs=1e-15)


# ----------------------------------------------------------------------------- against a plain sum, and vectorized


def test_it_agrees_with_a_pairwise_sum_ties_included():
    g = torch.Generator().manual_seed(1)
    ns = [1, 2, 3, 10, 250]
    for levels in (None, 2, 5):
        probs, proxy = random_law(g, 40, levels)
        out = best_of_n_win_rate(probs, proxy, torch.tensor(ns))
        for i, n in enumerate(ns):
            strict, tie = brute_force(probs, proxy, n)
            assert out["strict"][i].item() == pytest.approx(strict, abs=1e-13)
            assert out["tie"][i].item() == pytest.approx(tie, abs=1e-13)
            assert out["win_rate"][i].item() == pytest.approx(strict + tie / 2, abs=1e-13)
            one = best_of_n_win_rate(probs, proxy, n)  # a single n: 0-dim, the same values
            assert all(one[k].dim() == 0 and one[k].item() == pytest.approx(out[k][i].item(), abs=1e-15) for k in out)


# ----------------------------------------------------------------------------- n / (n + 1)


def test_many_equally_likely_distinct_answers_approach_n_over_n_plus_one():
    # uniform over K distinct scores: blocks of width 1/K, so per block the gap to n / (n + 1),
    # int_a^b (u - (a + b) / 2) n u^(n-1) du, is at most n (n - 1) / 12 / K^3 (n u^(n-1) has slope
    # <= n (n - 1) on [0, 1]), and at most n (n - 1) / (12 K^2) in all
    K = 20_000
    ns = torch.tensor([1, 2, 4, 16, 64, 256], dtype=torch.float64)
    out = best_of_n_win_rate(torch.full((K,), 1 / K, dtype=torch.float64), torch.arange(K, dtype=torch.float64), ns)
    gap = analytic_best_of_n_win_rate(ns) - out["win_rate"]
    assert (gap >= -1e-14).all() and (gap <= ns * (ns - 1) / (12 * K**2) + 1e-14).all(), gap
    assert (out["tie"] - 1 / K).abs().max() < 1e-15  # a tie is Y = Z, each of the K answers


def test_the_win_rate_never_exceeds_n_over_n_plus_one():
    g = torch.Generator().manual_seed(2)
    ns = torch.cat([torch.arange(1, 60), torch.tensor([100, 1000, 10**5])])
    bound = analytic_best_of_n_win_rate(ns)
    for trial in range(200):
        probs, proxy = random_law(g, int(torch.randint(1, 30, (1,), generator=g)), [None, 1, 2, 4][trial % 4])
        out = best_of_n_win_rate(probs, proxy, ns)
        assert (out["win_rate"] <= bound + 1e-13).all(), (trial, (out["win_rate"] - bound).max())
        assert ((out["strict"] >= 0) & (out["tie"] >= 0) & (out["strict"] + out["tie"] <= 1 + 1e-13)).all()
    # a single answer ties everything: win rate 1/2 for every n
    assert best_of_n_win_rate(f64(1.0), f64(0.0), ns)["win_rate"].tolist() == pytest.approx([0.5] * len(ns))


def test_ties_counted_as_wins_would_break_the_bound():
    # why ties count half: counted as wins, a likely top answer would win above n / (n + 1)
    out = best_of_n_win_rate(f64(0.9, 0.1), f64(1.0, 0.0), 2)
    assert out["strict"] + out["tie"] > analytic_best_of_n_win_rate(2)[0] > out["win_rate"]


# ----------------------------------------------------------------------------- the pruned mass


def test_the_pruned_mass_is_one_outcome_below_every_completion():
    probs, pruned = f64(0.1, 0.2, 0.3, 0.25, 0.1), 0.05
    proxy = f64(1.0, 2.0, 2.0, 3.0, 0.0)
    lumped = torch.cat([probs, f64(pruned)])  # the pruned outcome, explicitly, ranked below all
    lumped_proxy = torch.cat([proxy, f64(-1.0)])
    ns = torch.tensor([1, 2, 7, 40])
    out = best_of_n_win_rate(probs, proxy, ns, pruned=pruned)
    explicit = best_of_n_win_rate(lumped, lumped_proxy, ns)
    for k in ("win_rate", "strict", "tie"):
        assert torch.allclose(out[k], explicit[k], rtol=0, atol=1e-14), k
    assert torch.allclose(out["escape"], 1 - 0.95 ** (ns.double() + 1), rtol=1e-12)


def test_the_bounds_hold_whatever_the_pruned_completions_score():
    g = torch.Generator().manual_seed(3)
    ns = torch.tensor([1, 2, 3, 8, 30, 200])
    for trial in range(60):
        probs, proxy = random_law(g, 25, [None, 3][trial % 2])
        cut = torch.rand(25, generator=g) < 0.2  # these completions go unenumerated
        if cut.all() or not cut.any():
            continue
        pruned = probs[cut].sum().item()
        kept = best_of_n_win_rate(probs[~cut], proxy[~cut], ns, pruned=pruned)
        for scores in (proxy[cut], proxy[cut] + 10, proxy[cut] - 10, torch.randn(int(cut.sum()), generator=g)):
            full = proxy.clone()
            full[cut] = scores.double()
            truth = best_of_n_win_rate(probs, full, ns)["win_rate"]
            assert (kept["lower"] <= truth + 1e-13).all() and (truth <= kept["upper"] + 1e-13).all(), trial
        assert (kept["lower"] <= kept["win_rate"] + 1e-13).all() and (kept["win_rate"] <= kept["upper"] + 1e-13).all()
        assert (kept["upper"] - kept["lower"] <= kept["escape"] + 1e-13).all()


# ----------------------------------------------------------------------------- Monte Carlo


def test_it_agrees_with_monte_carlo():
    probs = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    proxy = np.array([1.0, 2.0, 2.0, 3.0, 0.0])  # a tie between the second and third
    n, trials = 3, 400_000
    rng = np.random.default_rng(4)
    draws = rng.choice(len(probs), size=(trials, n + 1), p=probs)  # n for best-of-n, the last for Z
    best, z = proxy[draws[:, :n]].max(1), proxy[draws[:, n]]
    score = (best > z) + 0.5 * (best == z)  # 1 a win, 1/2 a tie, 0 a loss
    exact = best_of_n_win_rate(torch.from_numpy(probs), torch.from_numpy(proxy), n)
    w, strict, tie = exact["win_rate"].item(), exact["strict"].item(), exact["tie"].item()
    sd = math.sqrt((strict + tie / 4 - w**2) / trials)  # the score's exact standard deviation / sqrt(trials)
    assert abs(score.mean() - w) <= 5 * sd, (score.mean(), w, sd)
    for freq, p in (((best > z).mean(), strict), ((best == z).mean(), tie)):
        assert abs(freq - p) <= 5 * math.sqrt(p * (1 - p) / trials), (freq, p)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((f64(0.5, 0.5), f64(0.0, 1.0, 2.0), 2), {}, "probs and proxy must be 1-D"),
        ((f64(0.5, 0.5), f64(0.0, math.nan), 2), {}, "proxy must be finite"),
        ((f64(0.5, 0.5), f64(0.0, 1.0), 2), {"pruned": 1.0}, "pruned in"),
        ((f64(-0.5, 1.5), f64(0.0, 1.0), 2), {}, "probs must be >= 0"),
        ((f64(0.5, 0.4), f64(0.0, 1.0), 2), {}, "probs and pruned must sum to 1"),
        ((f64(0.5, 0.5), f64(0.0, 1.0), 0), {}, "n must be integers >= 1"),
        ((f64(0.5, 0.5), f64(0.0, 1.0), [2, 2.5]), {}, "n must be integers >= 1"),
        ((f64(0.5, 0.5), f64(0.0, 1.0), []), {}, "n must be integers >= 1"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        best_of_n_win_rate(*args, **kwargs)


def test_the_analytic_value_refuses_bad_n():
    with pytest.raises(ValueError, match="n must be integers >= 1"):
        analytic_best_of_n_win_rate(0)
