"""Exact quantities by enumeration: a two-token world by hand, Monte Carlo, the pruned mass, best-of-n."""

import math

import pytest
import torch
from cached_context import context

from minirlhf import task
from minirlhf.exact import (
    analytic_best_of_n_kl,
    best_of_n,
    best_of_n_stats,
    best_of_n_table,
    canonical_completions,
    enumerate_completions,
    exact_sequence_kl,
    expected_gold,
    expected_proxy,
    gold_rewards,
    proxy_rewards,
    score_range,
    sequence_logprobs,
    token_logprob_floor,
)
from minirlhf.model import TinyGPT, completion_logits, generate, make_generator, reward_scores
from minirlhf.task import PROMPT_LEN, SEMI
from minirlhf.tilted import tilted_stats, tilted_table

ONE = task.VOCAB.index("1")
T = 0.7  # the book's sampling temperature


# ----------------------------------------------------------------------------- a two-token world


class TwoTokens(torch.nn.Module):
    """A stand-in policy with TinyGPT's call: at answer position t only `1` (logit ``one[t]``)
    and `;` (logit ``semi[t]``) can come, whatever the prompt; every other token has logit -inf."""

    def __init__(self, one, semi):
        super().__init__()
        self.one, self.semi = torch.tensor(one, dtype=torch.float64), torch.tensor(semi, dtype=torch.float64)

    blocks = (None,)  # one block: its cache holds the tokens seen (tests/cached_context.py)

    def forward(self, idx, cache=None, last=None):  # TinyGPT's signature
        whole, start = context(idx, cache)  # (B, S + L), S of them cached
        out = torch.zeros(*idx.shape, len(task.VOCAB), dtype=torch.float64)  # (B, L, 13)
        for i in range(max(start, PROMPT_LEN - 1), whole.shape[1]):  # position i predicts answer token i - 5
            out[:, i - start, :] = -math.inf
            out[:, i - start, ONE], out[:, i - start, SEMI] = (
                self.one[i - PROMPT_LEN + 1],
                self.semi[i - PROMPT_LEN + 1],
            )
        return out if last is None else out[:, -last:]


class CountOnes(torch.nn.Module):
    """A stand-in reward model: the score after each prefix is the number of `1`s in its answer part."""

    scalar_head = True

    def forward(self, idx):
        ones = (idx == ONE).double()  # (B, 10)
        ones[:, :PROMPT_LEN] = 0
        return torch.cumsum(ones, dim=1)


ANSWERS = [";", "1;", "11;", "111;", "1111"]  # every completion of the two-token world


def stop_probs(model):
    """P(`;` | reached position t) at temperature T, t = 0..3."""
    return torch.sigmoid((model.semi - model.one) / T).tolist()


def by_hand(model):
    """Return pi of each answer in ANSWERS, in closed form."""
    q = stop_probs(model)
    reach = [1.0, 1 - q[0], (1 - q[0]) * (1 - q[1]), (1 - q[0]) * (1 - q[1]) * (1 - q[2])]
    return [reach[0] * q[0], reach[1] * q[1], reach[2] * q[2], reach[3] * q[3], reach[3] * (1 - q[3])]


def kl_by_chain_rule(policy, reference):
    """Sequence KL = sum over positions of P(reach t) KL(Bernoulli(q_t) || Bernoulli(r_t))."""
    q, r = stop_probs(policy), stop_probs(reference)
    total, reach = 0.0, 1.0
    for qt, rt in zip(q, r):
        total += reach * (qt * math.log(qt / rt) + (1 - qt) * math.log((1 - qt) / (1 - rt)))
        reach *= 1 - qt
    return total


POLICY = TwoTokens(one=[0.0, 0.0, 0.0, 0.0], semi=[-1.0, 0.5, 0.5, 0.3])
REFERENCE = TwoTokens(one=[0.3, 0.0, 0.0, 0.6], semi=[0.0, 0.0, 1.5, -0.2])
PAIRS = torch.tensor([[0, 1], [5, 6]])  # their right answers: `1;` and `11;`
PROMPTS = task.encode_prompts(PAIRS)


def texts(comps):
    return task.decode_completions(comps.tokens)


def test_the_two_token_world_is_enumerated_exactly():
    comps = enumerate_completions(POLICY, PROMPTS, T, min_prob=1e-12)
    assert comps.counts().tolist() == [5, 5] and comps.pruned.tolist() == [0.0, 0.0]  # logit -inf: no mass
    for span in comps.spans():
        got = dict(zip(texts(comps)[span], comps.probs[span].tolist()))
        assert got == pytest.approx(dict(zip(ANSWERS, by_hand(POLICY))), rel=1e-12)
    assert comps.tokens[comps.prompt_index == 0].tolist()[0][-1] == SEMI  # padded with `;` after the answer


def test_kl_gold_and_proxy_of_the_two_token_world_by_hand():
    comps = enumerate_completions(POLICY, PROMPTS, T, min_prob=1e-12)
    kl = exact_sequence_kl(comps, REFERENCE, floor=-50.0)
    assert kl.value.tolist() == pytest.approx([kl_by_chain_rule(POLICY, REFERENCE)] * 2, rel=1e-12)
    assert torch.equal(kl.lower, kl.value) and torch.equal(kl.upper, kl.value)  # nothing pruned
    pi = by_hand(POLICY)
    gold = expected_gold(comps, PAIRS)
    assert gold.value.tolist() == pytest.approx([pi[1], pi[2]], rel=1e-12)
    proxy = expected_proxy(comps, CountOnes(), value_range=(0.0, 4.0))
    assert proxy.value.tolist() == pytest.approx([sum(k * p for k, p in enumerate(pi))] * 2, rel=1e-12)
    assert exact_sequence_kl(comps, POLICY, floor=-50.0).value.abs().max() < 1e-15


def test_pruning_in_the_two_token_world_keeps_the_mass_and_bounds_the_truth():
    pi, ref = by_hand(POLICY), by_hand(REFERENCE)
    mass_111 = pi[3] + pi[4]  # the prefix `111`
    assert mass_111 < min(pi[:3])
    comps = enumerate_completions(POLICY, PROMPTS, T, min_prob=1.01 * mass_111)
    assert set(texts(comps)) == {";", "1;", "11;"}
    assert comps.pruned.tolist() == pytest.approx([mass_111] * 2, rel=1e-12)
    floor = min(math.log(min(r, 1 - r)) for r in stop_probs(REFERENCE))
    kl = exact_sequence_kl(comps, REFERENCE, floor=floor)
    truth = kl_by_chain_rule(POLICY, REFERENCE)
    assert (kl.lower <= truth).all() and (truth <= kl.upper).all() and (kl.lower < kl.upper).all()
    m, m_ref = mass_111, ref[3] + ref[4]
    assert kl.lower.tolist() == pytest.approx((kl.value + m * math.log(m / m_ref)).tolist(), abs=1e-13)
    upper = kl.value + m * (math.log(comps.min_prob) - 4 * floor)  # pi(y) < min_prob, ref(y) >= e^(4 floor)
    assert kl.upper.tolist() == pytest.approx(upper.tolist(), abs=1e-13)
    gold = expected_gold(comps, PAIRS)
    assert gold.value[1] == pytest.approx(pi[2]) and gold.upper[1] == pytest.approx(pi[2] + m)
    true_proxy = sum(k * p for k, p in enumerate(pi))
    proxy = expected_proxy(comps, CountOnes(), value_range=(0.0, 4.0))
    assert (proxy.lower <= true_proxy).all() and (true_proxy <= proxy.upper).all()


# ----------------------------------------------------------------------------- small TinyGPTs


@pytest.fixture(scope="module")
def small(tilted_policy):
    """A small random policy, sharpened (head x 2) and tilted toward `;` so that `3;` and `1;`
    (right for 1 + 2 and 0 + 1) are likely; a random reference and reward model of its size."""
    cfg, policy = tilted_policy(1.0)
    reference, rm = TinyGPT(cfg).eval(), TinyGPT(cfg, scalar_head=True).eval()
    pairs = torch.tensor([[1, 2], [0, 1], [50, 61]])
    return policy, reference, rm, pairs, task.encode_prompts(pairs)


@pytest.fixture(scope="module")
def everything(small):
    """Every one of the 22,621 completions of the first prompt, and its KL, gold and proxy: the
    truth, nothing pruned."""
    policy, reference, rm, pairs, prompts = small
    comps = enumerate_completions(policy, prompts[:1], T, min_prob=0.0)
    truth = {
        "kl": exact_sequence_kl(comps, reference).value,
        "gold": expected_gold(comps, pairs[:1]).value,
        "proxy": expected_proxy(comps, rm).value,
    }
    return comps, truth


def test_with_min_prob_zero_every_completion_is_there_once(everything):
    everything, _ = everything
    assert everything.counts().tolist() == [1 + 12 + 12**2 + 12**3 + 12**4] and everything.pruned.tolist() == [0.0]
    assert len(torch.unique(everything.tokens, dim=0)) == 22621
    assert torch.equal(canonical_completions(everything.tokens), everything.tokens)
    assert (everything.per_prompt(everything.probs) - 1).abs().max() < 1e-12


@pytest.mark.parametrize("min_prob", [1e-2, 1e-4, 1e-6])
def test_the_pruned_mass_is_what_the_enumeration_left_out(small, everything, min_prob):
    policy, reference, rm, pairs, prompts = small
    everything, truth = everything
    comps = enumerate_completions(policy, prompts[:1], T, min_prob=min_prob)
    assert (comps.per_prompt(comps.probs) + comps.pruned - 1).abs().max() < 1e-12
    assert (comps.probs >= min_prob).all() and (comps.pruned > 0).all()
    # the kept completions are among all of them, with the same log-probs; the rest weigh `pruned`
    full = dict(zip(map(tuple, everything.tokens.tolist()), everything.logp.tolist()))
    kept = torch.tensor([full[tuple(t)] for t in comps.tokens.tolist()], dtype=torch.float64)
    assert torch.allclose(kept, comps.logp, rtol=0, atol=1e-12)
    left_out = 1 - comps.per_prompt(kept.exp())
    assert torch.allclose(left_out, comps.pruned, rtol=1e-9, atol=1e-14)
    # every bound holds the value computed with nothing pruned
    for part, key in (
        (exact_sequence_kl(comps, reference), "kl"),
        (expected_gold(comps, pairs[:1]), "gold"),
        (expected_proxy(comps, rm), "proxy"),
    ):
        assert (part.lower <= truth[key] + 1e-12).all() and (truth[key] <= part.upper + 1e-12).all(), key


def test_the_bounds_read_from_the_weights_hold(small, everything):
    policy, reference, rm, _, _ = small
    everything, _ = everything
    three = everything.tokens[(everything.tokens[:, :3] != SEMI).all(1) & (everything.tokens[:, 3] == SEMI)]
    prompts = everything.prompts.expand(len(three), PROMPT_LEN)  # `xyz;` passes every prefix: every context
    for model in (policy, reference):
        logits = completion_logits(model, prompts, three)  # (1728, 4, 13)
        assert token_logprob_floor(model, T) <= torch.log_softmax(logits / T, dim=-1).min()
    scores = proxy_rewards(everything, rm)
    low, high = score_range(rm)
    assert low <= scores.min() and scores.max() <= high
    with pytest.raises(ValueError, match="TinyGPT"):
        token_logprob_floor(POLICY)


def test_sequence_logprobs_agree_with_the_enumeration(small):
    policy, *_, prompts = small
    comps = enumerate_completions(policy, prompts, T, min_prob=1e-5)
    again = sequence_logprobs(policy, prompts[comps.prompt_index], comps.tokens, T)
    assert torch.allclose(again, comps.logp, rtol=0, atol=1e-12)
    assert exact_sequence_kl(comps, policy).value.abs().max() < 1e-12  # KL(pi || pi) = 0
    # the same in small forward passes: each row's keys and values follow it through the cut
    chunked = enumerate_completions(policy, prompts, T, min_prob=1e-5, batch_size=7)
    assert torch.equal(chunked.tokens, comps.tokens) and torch.allclose(chunked.logp, comps.logp, rtol=0, atol=1e-12)


def test_the_exact_distribution_agrees_with_monte_carlo(small):
    policy, _, rm, pairs, prompts = small
    comps = enumerate_completions(policy, prompts, T, min_prob=1e-6)
    n = 20_000
    samples = generate(policy, prompts.repeat_interleave(n, 0), T, generator=make_generator(0))  # (3n, 4)
    samples = canonical_completions(samples)
    gold, proxy = expected_gold(comps, pairs), expected_proxy(comps, rm)
    scores = proxy_rewards(comps, rm)
    for i, span in enumerate(comps.spans()):
        drawn = samples[i * n : (i + 1) * n]
        p = dict(zip(map(tuple, comps.tokens[span].tolist()), comps.probs[span].tolist()))
        counts = {}
        for row in map(tuple, drawn.tolist()):
            counts[row] = counts.get(row, 0) + 1
        # chi-square over the completions expected at least 5 times, the rest in one bin
        big = [y for y, q in p.items() if n * q >= 5]
        expected = [n * p[y] for y in big] + [n * (1 - sum(p[y] for y in big))]
        observed = [counts.get(y, 0) for y in big] + [n - sum(counts.get(y, 0) for y in big)]
        chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
        df = len(expected) - 1
        assert df > 50 and chi2 < df + 5 * math.sqrt(2 * df), (chi2, df)
        # the mean verifier reward and the mean RM score, within 4 standard errors
        right = task.batch_verify(pairs[i].expand(n, 2), drawn).double().mean()
        g = gold.value[i].item()
        assert abs(right - g) <= 4 * math.sqrt(g * (1 - g) / n) + comps.pruned[i], (right, g)
        sampled = reward_scores(rm, prompts[i].expand(n, PROMPT_LEN), drawn).double().mean()
        sd = math.sqrt((comps.probs[span] * scores[span] ** 2).sum() - proxy.value[i] ** 2)
        reach = max(abs(x) for x in score_range(rm)) * comps.pruned[i]  # what the pruned completions may add
        assert abs(sampled - proxy.value[i]) <= 4 * sd / math.sqrt(n) + reach
    assert (gold.value[:2] > 0.05).all()  # the verifier's check has teeth


# ----------------------------------------------------------------------------- best-of-n


def test_best_of_one_is_pi_and_best_of_n_sums_to_one():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.1], dtype=torch.float64)
    proxy = torch.tensor([1.0, 2.0, 2.0, 3.0, 0.0])
    assert torch.allclose(best_of_n(probs, proxy, 1, pruned=0.05), probs, rtol=1e-12)
    ns = torch.arange(1, 3001)
    p_n = best_of_n(probs, proxy, ns, pruned=0.05)  # (3000, 5)
    assert torch.allclose(p_n.sum(1) + 0.05 ** ns.double(), torch.ones(3000, dtype=torch.float64), rtol=0, atol=1e-12)
    assert p_n[-1].tolist() == pytest.approx([0, 0, 0, 1, 0], abs=1e-12)  # the top proxy wins for large n


def test_best_of_n_with_distinct_proxies_by_hand():
    pi = by_hand(POLICY)
    proxy = torch.arange(5.0)  # the number of `1`s: every answer of the two-token world is distinct
    F = [sum(pi[: k + 1]) for k in range(5)]
    for n in (1, 2, 3, 17):
        hand = [F[k] ** n - (F[k - 1] ** n if k else 0.0) for k in range(5)]
        assert best_of_n(torch.tensor(pi, dtype=torch.float64), proxy, n).tolist() == pytest.approx(hand, rel=1e-10)


def test_ties_share_the_block_in_proportion_to_pi_and_lower_the_kl():
    # a verifier as the proxy: right (mass p) or wrong; the best of n is right with 1 - (1 - p)^n
    probs = torch.tensor([0.05, 0.15, 0.5, 0.3], dtype=torch.float64)
    proxy = torch.tensor([1.0, 1.0, 0.0, 0.0])
    p, ns = 0.2, torch.arange(1, 2001, dtype=torch.float64)
    right = 1 - (1 - p) ** ns
    p_n = best_of_n(probs, proxy, ns)
    assert torch.allclose(p_n[:, 0], right * 0.25, rtol=1e-10) and torch.allclose(p_n[:, 2], (1 - right) * 0.5 / 0.8)
    stats = best_of_n_stats(probs, proxy, ns, gold=proxy)
    binary = right * torch.log(right / p) + torch.xlogy(1 - right, (1 - right) / (1 - p))
    assert torch.allclose(stats["kl"], binary, rtol=1e-9, atol=1e-15)
    assert torch.allclose(stats["gold"], right, rtol=1e-12)
    # it saturates at log(1 / p), far below the analytic log n - (n - 1) / n
    assert stats["kl"][-1] == pytest.approx(math.log(1 / p), rel=1e-9)
    assert analytic_best_of_n_kl(2000) - stats["kl"][-1] > 4.9


def test_best_of_n_kl_is_below_the_analytic_value_and_near_it_when_pi_is_nearly_continuous():
    g = make_generator(0)
    ns = torch.arange(1, 2001)
    analytic = analytic_best_of_n_kl(ns)
    assert analytic[0] == 0.0
    for proxy in (torch.randn(50, generator=g), torch.randint(8, (50,), generator=g).double()):  # distinct; ties
        probs = torch.rand(50, generator=g, dtype=torch.float64) ** 4
        kl = best_of_n_stats(probs / probs.sum(), proxy, ns)["kl"]
        assert (kl <= analytic + 1e-12).all() and kl[0].abs() < 1e-12 and (kl[1:] < analytic[1:]).all()
    K = 20_000  # uniform over many distinct values: nearly continuous, for n << K
    uniform = torch.full((K,), 1 / K, dtype=torch.float64)
    kl = best_of_n_stats(uniform, torch.arange(K, dtype=torch.float64), ns[:100])["kl"]
    assert (analytic[:100] - kl).max() < 0.01 and (analytic[:100] - kl >= 0).all()


def test_best_of_n_agrees_with_monte_carlo_ties_and_pruned_mass_included():
    probs = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.1], dtype=torch.float64)
    pruned, n, trials = 0.05, 3, 200_000
    proxy = torch.tensor([1.0, 2.0, 2.0, 3.0, 0.0])
    g = make_generator(1)
    draws = torch.multinomial(
        torch.cat([probs, torch.tensor([pruned], dtype=torch.float64)]), trials * n, True, generator=g
    )
    draws = draws.view(trials, n)  # index 5 is the pruned outcome, ranked below all
    values = torch.cat([proxy, torch.tensor([-math.inf])])[draws]  # (trials, n)
    is_max = values == values.max(1, keepdim=True).values
    pick = (is_max * torch.rand(trials, n, generator=g)).argmax(1)  # uniform among the tied maxima
    winner = draws[torch.arange(trials), pick]
    freq = torch.bincount(winner, minlength=6).double() / trials
    exact = torch.cat([best_of_n(probs, proxy, n, pruned), torch.tensor([pruned**n], dtype=torch.float64)])
    assert ((freq - exact).abs() <= 5 * (exact * (1 - exact) / trials).sqrt() + 1e-9).all(), (freq, exact)


def test_best_of_n_stats_agree_with_the_law_itself():
    g = make_generator(2)
    probs = torch.rand(40, generator=g, dtype=torch.float64)
    probs = 0.99 * probs / probs.sum()
    proxy, gold = torch.randint(10, (40,), generator=g).double(), torch.rand(40, generator=g, dtype=torch.float64)
    ns = torch.tensor([1, 2, 5, 50, 700])
    stats = best_of_n_stats(probs, proxy, ns, gold=gold, pruned=0.01, chunk=2)
    p_n = best_of_n(probs, proxy, ns, pruned=0.01)  # (5, 40)
    lump = 0.01 ** ns.double()
    kl = torch.xlogy(p_n, p_n / probs).sum(1) + torch.xlogy(lump, lump / 0.01)
    assert torch.allclose(stats["kl"], kl, rtol=1e-9, atol=1e-14)
    assert torch.allclose(stats["proxy"], p_n @ proxy, rtol=1e-12)
    assert torch.allclose(stats["gold"], p_n @ gold, rtol=1e-12)
    assert torch.allclose(stats["escape"], 1 - 0.99 ** ns.double(), rtol=1e-12)


def _pruned_law(g, size):
    """A law of ``size`` completions with tied proxies, split at random into kept and pruned."""
    probs = torch.rand(size, generator=g, dtype=torch.float64) ** 3
    probs = probs / probs.sum()
    proxy = torch.randint(5, (size,), generator=g).double()  # ties, among kept and pruned alike
    order = torch.randperm(size, generator=g)
    cut = int(torch.randint(1, size, (1,), generator=g))
    return probs, proxy, order[cut:], order[:cut]


def test_best_of_n_kl_bounds_hold_wherever_the_pruned_completions_rank():
    # the true KL, of the law with the pruned completions put back, lies within the bounds
    # computed from the kept ones alone, and so does the merged outcome's KL
    g, ns, held, tight = make_generator(5), torch.tensor([1, 2, 3, 8, 64, 1000]), 0, 0
    for _ in range(400):
        probs, proxy, kept, gone = _pruned_law(g, int(torch.randint(2, 12, (1,), generator=g)))
        pruned = float(probs[gone].sum())
        if pruned > 0.99:
            continue
        stats = best_of_n_stats(probs[kept], proxy[kept], ns, pruned=pruned)
        true = best_of_n_stats(probs, proxy, ns)["kl"]
        for kl in (true, stats["kl"]):
            assert (stats["kl_lower"] <= kl + 1e-12).all() and (kl <= stats["kl_upper"] + 1e-12).all()
        held += 1
        # the pruned completions' share, escape x log n, is needed: without it the bound fails
        tight += bool((true > stats["kl_upper"] - stats["escape"] * ns.log() + 1e-12).any())
    assert held > 300 and tight > 100


def test_best_of_n_kl_bounds_close_without_pruned_mass_and_narrow_with_little():
    g, ns = make_generator(6), torch.tensor([1.0, 16, 4096])
    kept = torch.rand(2_000, generator=g, dtype=torch.float64)
    proxy = torch.randn(2_001, generator=g, dtype=torch.float64)
    for small in (1e-9, 1e-6):  # one completion of that mass pruned: the best of all
        probs = torch.cat([kept / kept.sum() * (1 - small), torch.tensor([small], dtype=torch.float64)])
        proxy[-1] = proxy.max() + 1
        whole = best_of_n_stats(probs, proxy, ns)
        assert torch.equal(whole["kl_lower"], whole["kl"]) and torch.equal(whole["kl_upper"], whole["kl"])
        cut = best_of_n_stats(probs[:-1], proxy[:-1], ns, pruned=small)
        assert (cut["kl_lower"] <= whole["kl"]).all() and (whole["kl"] <= cut["kl_upper"]).all()
        width = cut["kl_upper"] - cut["kl_lower"]
        # the pruned draws (escape x log n) and as much again where the kept ones shift
        assert (width <= cut["escape"] * (2 * ns.log() + 1) + small).all(), (small, width)


def test_best_of_n_table_runs_over_the_prompts(small):
    policy, _, rm, pairs, prompts = small
    comps = enumerate_completions(policy, prompts, T, min_prob=1e-4)
    table = best_of_n_table(comps, proxy_rewards(comps, rm), [1, 4, 64], gold=gold_rewards(comps, pairs))
    assert {k: tuple(v.shape) for k, v in table.items()} == {
        k: (3, 3) for k in ("kl", "kl_lower", "kl_upper", "proxy", "gold", "escape")
    }
    assert torch.allclose(table["gold"][0], expected_gold(comps, pairs).value, rtol=1e-9)
    assert (table["proxy"][2] > table["proxy"][0]).all()


def test_bad_inputs_are_named():
    probs, proxy = torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([0.0, 1.0])
    for call, name in (
        (lambda: enumerate_completions(POLICY, PROMPTS, T, min_prob=1.0), "min_prob"),
        (lambda: enumerate_completions(POLICY, PROMPTS, 0.0), "temperature"),
        (lambda: enumerate_completions(POLICY, PROMPTS[:, :4]), "prompts"),
        (lambda: best_of_n(probs * 0.9, proxy, 2), "sum to 1"),
        (lambda: best_of_n(probs, proxy, 0), "n must"),
        (lambda: best_of_n(probs, proxy[:1], 2), "probs and proxy"),
        (lambda: expected_gold(enumerate_completions(POLICY, PROMPTS, T), PAIRS[:1]), "pairs"),
    ):
        with pytest.raises(ValueError, match=name):
            call()


# ----------------------------------------------------------------------------- the tilted optimum


def _tilt_by_hand(probs, reward, beta):
    w = probs * torch.exp(reward / beta)
    return w / w.sum()


def test_the_tilt_by_hand_and_its_kl_identity():
    g = torch.Generator().manual_seed(3)
    probs = torch.rand(40, generator=g, dtype=torch.float64)
    probs /= probs.sum()
    reward = torch.randn(40, generator=g, dtype=torch.float64) * 2
    gold = (torch.rand(40, generator=g, dtype=torch.float64) < 0.3).double()
    betas = torch.tensor([50.0, 2.0, 0.5, 0.1], dtype=torch.float64)
    stats = tilted_stats(probs, reward, betas, gold)
    for i, beta in enumerate(betas):
        t = _tilt_by_hand(probs, reward, beta)
        assert math.isclose(stats["kl"][i], float(torch.xlogy(t, t / probs).sum()), rel_tol=1e-9, abs_tol=1e-14)
        assert math.isclose(stats["reward"][i], float(t @ reward), rel_tol=1e-12)
        assert math.isclose(stats["gold"][i], float(t @ gold), rel_tol=1e-12, abs_tol=1e-15)
    # a large beta leaves pi be; a small one puts the mass on the best-scored answer
    assert stats["kl"][0] < 1e-3 and stats["reward"][-1] > reward.max() - 0.3
    assert (stats["kl"].diff() > 0).all() and (stats["reward"].diff() > 0).all()


def test_the_tilt_maximizes_reward_minus_beta_kl():
    g = torch.Generator().manual_seed(4)
    probs = torch.rand(12, generator=g, dtype=torch.float64)
    probs /= probs.sum()
    reward = torch.randn(12, generator=g, dtype=torch.float64)
    beta = 0.7
    best = tilted_stats(probs, reward, beta)
    objective = float(best["reward"] - beta * best["kl"])
    for _ in range(200):  # no other law of the same support does better
        q = torch.rand(12, generator=g, dtype=torch.float64) ** 3
        q /= q.sum()
        assert float(q @ reward - beta * torch.xlogy(q, q / probs).sum()) <= objective + 1e-12


def test_the_verifier_tilt_is_the_least_kl_for_its_gold():
    """Tilting with a 0/1 reward reaches gold G at the binary KL(G || p), the least any law can."""
    probs = torch.tensor([0.1, 0.15, 0.5, 0.25], dtype=torch.float64)
    right = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    p = float(probs @ right)
    stats = tilted_stats(probs, right, [3.0, 1.0, 0.3], right)
    for kl, gold in zip(stats["kl"].tolist(), stats["gold"].tolist()):
        binary = gold * math.log(gold / p) + (1 - gold) * math.log((1 - gold) / (1 - p))
        assert gold > p and math.isclose(kl, binary, rel_tol=1e-9)


def test_the_tilts_bounds_hold_whatever_the_pruned_answers_score():
    g = torch.Generator().manual_seed(5)
    probs = torch.rand(30, generator=g, dtype=torch.float64)
    probs /= probs.sum()
    reward = torch.rand(30, generator=g, dtype=torch.float64) * 4 - 2
    gold = (torch.rand(30, generator=g, dtype=torch.float64) < 0.4).double()
    betas = [5.0, 1.0, 0.4]
    kept = probs > 0.02  # the rest is "pruned": it may score anything in (-2, 2)
    m = float(probs[~kept].sum())
    assert 0 < m < 0.5
    bounds = tilted_stats(probs[kept], reward[kept], betas, gold[kept], m, (-2.0, 2.0))
    for trial in range(20):
        hidden = reward.clone()
        hidden[~kept] = torch.rand(int((~kept).sum()), generator=g, dtype=torch.float64) * 4 - 2
        if trial == 0:
            hidden[~kept] = 2.0  # the worst case for the bounds
        truth = tilted_stats(probs, hidden, betas, gold)
        for key in ("kl", "reward", "gold"):
            assert (bounds[f"{key}_lower"] <= truth[key] + 1e-12).all(), key
            assert (truth[key] <= bounds[f"{key}_upper"] + 1e-12).all(), key
    assert (bounds["tilted_pruned"] > m).all() and (bounds["tilted_pruned"] < 1).all()
    assert (bounds["kl_lower"] <= bounds["kl"]).all() and (bounds["kl"] <= bounds["kl_upper"]).all()


def test_the_tilt_table_runs_over_the_prompts_and_bad_inputs_are_named(small):
    policy, _, rm, pairs, prompts = small
    comps = enumerate_completions(policy, prompts, T, min_prob=1e-4)
    proxy, gold = proxy_rewards(comps, rm), gold_rewards(comps, pairs)
    table = tilted_table(comps, proxy, [100.0, 1.0], gold, score_range(rm))
    assert table["kl"].shape == (2, 3) and (table["kl"][0] < table["kl"][1]).all()
    assert torch.allclose(table["gold"][0], expected_gold(comps, pairs).value, atol=2e-3)  # beta 100: nearly pi
    probs = torch.tensor([0.5, 0.5], dtype=torch.float64)
    reward = torch.tensor([0.0, 1.0], dtype=torch.float64)
    for call, name in (
        (lambda: tilted_stats(probs, reward, 0.0), "beta must"),
        (lambda: tilted_stats(probs, reward, [1.0, float("nan")]), "beta must"),
        (lambda: tilted_stats(probs * 0.9, reward, 1.0, pruned=0.1), "reward_range"),
        (lambda: tilted_stats(probs, reward, 1.0, gold=reward[:1]), "gold must"),
    ):
        with pytest.raises(ValueError, match=name):
            call()
