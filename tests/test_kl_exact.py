"""The law of a run's KL sums, exactly: a two-token world by hand, E[k1] = E[k3] = KL, Monte Carlo,
batches that read low, near and far from the reference, and the answers' length."""

import itertools
import math

import pytest
import torch
from cached_context import context

from minirlhf import exact, task
from minirlhf.evaluation import EvalSet, evaluate
from minirlhf.model import GPTConfig, TinyGPT, completion_logprobs, completion_mask, generate, make_generator
from minirlhf.studies import kl_exact as ke
from minirlhf.studies.overoptimization import sampled_kl
from minirlhf.task import PROMPT_LEN, SEMI

ONE = task.VOCAB.index("1")
T = 0.7  # the book's sampling temperature


# ----------------------------------------------------------------------------- a two-token world


class TwoTokens(torch.nn.Module):
    """A stand-in policy with TinyGPT's call: at answer position t only `1` (logit ``one[v][t]``)
    and `;` (logit ``semi[v][t]``) can come, v the last digit of the prompt (``;;0+v=``); every
    other token has logit -inf."""

    def __init__(self, one, semi):
        super().__init__()
        self.one, self.semi = torch.tensor(one, dtype=torch.float64), torch.tensor(semi, dtype=torch.float64)

    blocks = (None,)  # one block: its cache holds the tokens seen (tests/cached_context.py)

    def forward(self, idx, cache=None, last=None):  # TinyGPT's signature
        whole, start = context(idx, cache)  # (B, S + L), S of them cached
        v = whole[:, PROMPT_LEN - 2]  # the digit before `=`
        out = torch.zeros(*idx.shape, len(task.VOCAB), dtype=torch.float64)  # (B, L, 13)
        for i in range(max(start, PROMPT_LEN - 1), whole.shape[1]):  # position i predicts answer token i - 5
            t = i - PROMPT_LEN + 1
            out[:, i - start, :] = -math.inf
            out[:, i - start, ONE], out[:, i - start, SEMI] = self.one[v, t], self.semi[v, t]
        return out if last is None else out[:, -last:]


POLICY = TwoTokens(
    one=[[0.0, 0.0, 0.0, 0.0], [0.5, 0.0, -0.5, 0.0]], semi=[[-1.0, 0.5, 0.5, 0.3], [0.0, -0.5, 1.0, 0.0]]
)
REFERENCE = TwoTokens(
    one=[[0.3, 0.0, 0.0, 0.6], [0.0, 0.2, 0.0, 0.0]], semi=[[0.0, 0.0, 1.5, -0.2], [0.5, 0.0, 0.3, 0.1]]
)
PAIRS = torch.tensor([[0, 0], [0, 1]])  # v = 0 and v = 1
PROMPTS = task.encode_prompts(PAIRS)


def stop_probs(model, v):
    """P(`;` | reached position t) at temperature T, t = 0..3, for the prompt ending in v."""
    return torch.sigmoid((model.semi[v] - model.one[v]) / T).tolist()


def by_hand(policy, reference, v):
    """Return, for each answer `;`, `1;`, `11;`, `111;`, `1111`: (pi, k1, k2, k3, length), in closed form."""
    q, r = stop_probs(policy, v), stop_probs(reference, v)
    rows = []
    for j in range(5):  # j ones, then `;` unless j = 4
        steps = [(1 - q[s], 1 - r[s]) for s in range(j)] + ([(q[j], r[j])] if j < 4 else [])
        log_ratio = [math.log(a) - math.log(b) for a, b in steps]  # -log r_t of each token
        rows.append(
            (
                math.prod(a for a, _ in steps),
                sum(log_ratio),
                sum(x * x / 2 for x in log_ratio),
                sum(math.exp(-x) - 1 + x for x in log_ratio),
                len(steps),
            )
        )
    return rows


def moments_by_hand(rows, column):
    mean = sum(row[0] * row[column] for row in rows)
    return mean, sum(row[0] * (row[column] - mean) ** 2 for row in rows)


@pytest.fixture(scope="module")
def two_token_law():
    comps = exact.enumerate_completions(POLICY, PROMPTS, T, min_prob=0.0)
    return ke.answer_moments(comps, POLICY, REFERENCE)


def test_the_two_token_world_by_hand(two_token_law):
    law = two_token_law
    assert law.comps.counts().tolist() == [5, 5] and law.comps.pruned.tolist() == [0.0, 0.0]
    for v in (0, 1):
        rows = by_hand(POLICY, REFERENCE, v)
        for column, name in enumerate(ke.ESTIMATORS, start=1):
            mean, var = moments_by_hand(rows, column)
            est = law.estimator(name)
            assert est.mean.value[v].item() == pytest.approx(mean, rel=1e-12), name
            assert est.var.value[v].item() == pytest.approx(var, rel=1e-12), name
            assert est.mean.lower[v] == est.mean.value[v] == est.mean.upper[v]  # nothing pruned
            assert est.var.lower[v] == est.var.value[v] == est.var.upper[v]
        # k1 and k3 are unbiased for the sequence KL, k2 is not
        kl = law.kl.value[v].item()
        assert law.k1.mean.value[v].item() == pytest.approx(kl, rel=1e-12)
        assert law.k3.mean.value[v].item() == pytest.approx(kl, rel=1e-12)
        assert abs(law.k2.mean.value[v].item() - kl) > 1e-3
        length = ke.length_split(law)["length"].value[v].item()
        assert length == pytest.approx(sum(row[0] * row[4] for row in rows), rel=1e-12)


def test_pruning_in_the_two_token_world_bounds_every_moment():
    prompts = PROMPTS[:1]
    rows = by_hand(POLICY, REFERENCE, 0)
    mass_111 = rows[3][0] + rows[4][0]  # the prefix `111`
    assert mass_111 < min(row[0] for row in rows[:3])
    comps = exact.enumerate_completions(POLICY, prompts, T, min_prob=1.01 * mass_111)
    assert comps.counts().tolist() == [3] and comps.pruned.item() == pytest.approx(mass_111, rel=1e-12)
    floors = tuple(min(math.log(min(p, 1 - p)) for p in stop_probs(model, 0)) for model in (POLICY, REFERENCE))
    law = ke.answer_moments(comps, POLICY, REFERENCE, floors=floors)
    for column, name in enumerate(ke.ESTIMATORS, start=1):
        mean, var = moments_by_hand(rows, column)
        est = law.estimator(name)
        kept = rows[:3]
        s1 = sum(r[0] * r[column] for r in kept)
        assert est.mean.value.item() == pytest.approx(s1, rel=1e-12)
        # the value: the law with the pruned mass on one outcome of sum 0
        assert est.var.value.item() == pytest.approx(sum(r[0] * r[column] ** 2 for r in kept) - s1**2, rel=1e-12)
        assert est.mean.lower.item() <= mean + 1e-12 and mean <= est.mean.upper.item() + 1e-12, name
        assert est.var.lower.item() <= var + 1e-12 and var <= est.var.upper.item() + 1e-12, name
        assert est.var.lower.item() < est.var.upper.item()
    # a batch is drawn from that law; the truth lies between its bounds, and so does the chance of reading below it
    got = ke.batch_below_truth(law, 4, reps=20_000, seed=0, estimators=ke.ESTIMATORS)
    assert got["escape"] == pytest.approx(-math.expm1(4 * math.log1p(-mass_111)), rel=1e-12)
    assert got["truth_lower"] <= got["truth"] <= got["truth_upper"] and got["truth_lower"] < got["truth_upper"]
    for name in ke.ESTIMATORS:
        g = got[name]
        assert g["below_lower"] <= g["below"] <= g["below_upper"]
        assert abs(g["sim_mean"] - g["mean"]) < 4 * g["sd"] / math.sqrt(20_000), name
        assert g["sim_sd"] == pytest.approx(g["sd"], rel=0.05), name
    # the pruned answers' lengths are 4: within [1, 4] each
    split = ke.length_split(law)
    truth = sum(row[0] * row[4] for row in rows)
    assert split["mean_length_lower"] <= truth <= split["mean_length_upper"]


# ----------------------------------------------------------------------------- small TinyGPTs


@pytest.fixture(scope="module")
def small(tilted_policy):
    """A small random policy, sharpened and tilted toward `;`, and a random reference of its size."""
    cfg, policy = tilted_policy(1.0)
    reference = TinyGPT(cfg).eval()
    pairs = torch.tensor([[1, 2], [0, 1], [50, 61]])
    return policy, reference, pairs, task.encode_prompts(pairs)


@pytest.fixture(scope="module")
def everything(small):
    """Every one of the 22,621 answers of the first two prompts: nothing pruned."""
    policy, reference, _, prompts = small
    comps = exact.enumerate_completions(policy, prompts[:2], T, min_prob=0.0)
    return ke.answer_moments(comps, policy, reference)


def test_k1_and_k3_sums_are_unbiased_for_the_sequence_kl(small, everything):
    policy, reference, _, _ = small
    law = everything
    assert law.comps.pruned.tolist() == [0.0, 0.0]
    kl = exact.exact_sequence_kl(law.comps, reference).value
    assert (kl > 1.0).all()  # far enough from the reference that the identity is not 0 = 0
    for name in ("k1", "k3"):
        assert torch.allclose(law.estimator(name).mean.value, kl, rtol=1e-10, atol=0), name
    assert (law.k2.mean.value - kl).abs().min() > 0.1  # k2 is biased
    assert torch.equal(law.k3.var.lower, law.k3.var.value) and torch.equal(law.k3.var.upper, law.k3.var.value)
    assert torch.equal(law.length, completion_mask(law.comps.tokens).double().sum(1))


@pytest.mark.parametrize("min_prob", [1e-3, 1e-5])
def test_the_bounds_hold_the_moments_computed_with_nothing_pruned(small, everything, min_prob):
    policy, reference, _, prompts = small
    comps = exact.enumerate_completions(policy, prompts[:2], T, min_prob=min_prob)
    assert (comps.pruned > 0).all()
    law = ke.answer_moments(comps, policy, reference)  # the floors read from the weights
    for name in ke.ESTIMATORS:
        part, truth = law.estimator(name), everything.estimator(name)
        for what in ("mean", "var"):
            b, t = getattr(part, what), getattr(truth, what).value
            assert (b.lower <= t * (1 + 1e-10) + 1e-12).all() and (t <= b.upper * (1 + 1e-10) + 1e-12).all(), (
                name,
                what,
            )


def test_the_exact_law_agrees_with_the_run_s_sampled_sums(small, everything):
    policy, reference, _, prompts = small
    law, n = everything, 20_000
    sampled = sampled_kl(policy, reference, prompts[:2], n, seed=0)  # n answers of each prompt, pooled
    for name in ("k1", "k3"):
        est = law.estimator(name)
        mu, var = est.mean.value, est.var.value  # (2,)
        pooled_mean = mu.mean().item()
        pooled_var = (var.mean() + ((mu - mu.mean()) ** 2).mean()).item()
        se = math.sqrt(var.mean().item() / (2 * n))  # stratified: n answers of each prompt
        assert abs(sampled[name] - pooled_mean) < 4 * se, name
        # the sample variance: its error is sqrt((mu4 - var^2) / n), mu4 from the exact law
        w = law.comps.probs / 2
        mu4 = (w * (est.values - pooled_mean) ** 4).sum().item()
        se_var = math.sqrt((mu4 - pooled_var**2) / (2 * n))
        assert abs(sampled[f"{name}_sd"] ** 2 - pooled_var) < 4 * se_var, name


# ----------------------------------------------------------------------------- a batch's mean


def batch_by_hand(law, draws):
    """Return {name: (P(batch mean < truth), mean, var)} over every outcome of ``draws``, a list
    with one list of (probability, index into law's rows) per draw."""
    truth = law.k1.mean.value.mean().item()
    out = {}
    for name in ("k1", "k3"):
        values = law.estimator(name).values.tolist()
        below = mean = second = 0.0
        for combo in itertools.product(*draws):
            p = math.prod(c[0] for c in combo)
            x = sum(values[c[1]] for c in combo) / len(draws)
            below += p * (x < truth)
            mean, second = mean + p * x, second + p * x * x
        out[name] = (below, mean, second - mean * mean)
    return out


@pytest.mark.parametrize("design,batch", [("stratified", 2), ("stratified", 4), ("rollout", 2), ("rollout", 3)])
def test_the_chance_a_batch_reads_low_matches_the_exact_sum_over_batches(two_token_law, design, batch):
    law = two_token_law
    probs, spans = law.comps.probs.tolist(), law.comps.spans()
    rows = [[(probs[i], i) for i in range(s.start, s.stop)] for s in spans]  # one prompt's answers
    if design == "stratified":
        draws = [rows[k % 2] for k in range(batch)]
    else:  # each draw picks its prompt uniformly
        draws = [[(p / 2, i) for r in rows for p, i in r]] * batch
    hand = batch_by_hand(law, draws)
    got = ke.batch_below_truth(law, batch, reps=20_000, seed=0, design=design)
    assert got["escape"] == 0.0 and got["truth"] == pytest.approx(law.kl.value.mean().item(), rel=1e-12)
    for name in ("k1", "k3"):
        below, mean, var = hand[name]
        g = got[name]
        assert g["mean"] == pytest.approx(mean, rel=1e-12) and g["var"] == pytest.approx(var, rel=1e-12)
        assert abs(g["below"] - below) < 4 * math.sqrt(below * (1 - below) / 20_000), (name, g["below"], below)
        assert g["below_lower"] == g["below_upper"] == g["below"]  # nothing pruned: the truth is known
        assert abs(g["sim_mean"] - mean) < 4 * math.sqrt(var / 20_000)
    assert hand["k3"][0] > 0.6  # k3 reads low on most batches here: a skewed, unbiased law


def test_the_chance_a_batch_reads_low_matches_batches_drawn_as_a_run_draws_them(small, everything):
    policy, reference, _, prompts = small
    reps, per_prompt = 3_000, 4
    many = prompts[:2].repeat_interleave(per_prompt, 0).repeat(reps, 1)  # (8 reps, 6): 4 of each prompt a batch
    answers = generate(policy, many, T, generator=make_generator(1))
    log_ratio = (
        completion_logprobs(policy, many, answers, T) - completion_logprobs(reference, many, answers, T)
    ).double()
    mask = completion_mask(answers).double()
    sums = {"k1": (log_ratio * mask).sum(1), "k3": ((torch.expm1(-log_ratio) + log_ratio) * mask).sum(1)}
    got = ke.batch_below_truth(everything, 2 * per_prompt, reps=20_000, seed=0)
    for name, s in sums.items():
        drawn = (s.reshape(reps, 2 * per_prompt).mean(1) < got["truth"]).double().mean().item()
        p = got[name]["below"]
        assert abs(drawn - p) < 4 * math.sqrt(p * (1 - p) * (1 / reps + 1 / 20_000)), (name, drawn, p)
    assert got["k3"]["below"] > got["k1"]["below"] + 0.1


def test_a_policy_against_itself_reads_exactly_zero(small):
    policy, _, _, prompts = small
    comps = exact.enumerate_completions(policy, prompts, T, min_prob=1e-6)
    law = ke.answer_moments(comps, policy, policy)
    for name in ke.ESTIMATORS:
        assert not law.estimator(name).values.any() and not law.estimator(name).var.value.any()
    got = ke.batch_below_truth(law, 3, reps=500, seed=0, estimators=ke.ESTIMATORS)
    assert got["truth"] == 0.0 and all(got[k]["below"] == 0.0 and got[k]["sd"] == 0.0 for k in ke.ESTIMATORS)
    assert 0 < got["escape"] <= 3 * comps.pruned.max().item()
    again = ke.batch_below_truth(law, 3, reps=500, seed=0, design="rollout")
    assert again["k1"]["below"] == 0.0 and again["escape"] == pytest.approx(
        -math.expm1(3 * math.log1p(-comps.pruned.mean().item()))
    )


def test_the_draws_depend_on_the_seed_only(everything):
    a = ke.batch_below_truth(everything, 2, reps=3_000, seed=5, design="rollout")
    b = ke.batch_below_truth(everything, 2, reps=3_000, seed=5, design="rollout")
    c = ke.batch_below_truth(everything, 2, reps=3_000, seed=6, design="rollout")
    assert a == b and a["k3"]["sim_mean"] != c["k3"]["sim_mean"]


# ----------------------------------------------------------------------------- near and far from the reference


def test_k3_is_less_noisy_near_the_reference_and_noisier_far_from_it(small, everything):
    policy, reference, _, prompts = small
    assert torch.equal(ke.blend(reference, policy, 0.0).head.weight, reference.head.weight)
    assert torch.equal(ke.blend(reference, policy, 1.0).head.weight, policy.head.weight)
    near = ke.estimator_variances([ke.blend(reference, policy, 0.02)], reference, prompts[:1], min_prob=1e-7)
    assert 0 < near["kl"][0] < 0.01
    assert near["k3_var"][0] < near["k1_var"][0] / 100
    assert near["k1_var"][0] / near["kl"][0] == pytest.approx(2.0, rel=0.01)  # Var[k1] ~ chi-square ~ 2 KL
    # the policy itself, nothing pruned: k3's variance is many times k1's
    assert (everything.k3.var.value > 10 * everything.k1.var.value).all()


# ----------------------------------------------------------------------------- per token and per answer


def test_the_greedy_per_token_kl_is_evaluate_s_and_the_ratio_splits(small, everything):
    policy, reference, pairs, prompts = small
    greedy = ke.greedy_token_kl(policy, reference, prompts[:2], T)
    assert greedy["kl"] == pytest.approx(evaluate(policy, reference, None, EvalSet(pairs[:2]), T)["kl"], rel=1e-12)
    split = ke.length_split(everything, greedy["kl"])
    assert 1 <= split["mean_length"] <= 4
    assert split["per_token_kl"] == pytest.approx(split["kl"] / split["mean_length"], rel=1e-15)
    assert split["greedy_over_kl"] == pytest.approx(split["one_over_length"] * split["greedy_over_sampled"], rel=1e-12)
    length = (everything.comps.probs * completion_mask(everything.comps.tokens).double().sum(1)).sum() / 2
    assert split["mean_length"] == pytest.approx(length.item(), rel=1e-12)


def test_measure_gathers_every_number(small):
    policy, reference, _, prompts = small
    got = ke.measure(policy, reference, prompts[:2], batches=(4, 3), reps=200, min_prob=1e-6)
    assert got["batches"][4]["design"] == "stratified" and got["batches"][3]["design"] == "rollout"
    assert got["kl_lower"] <= got["kl"] <= got["kl_upper"] and got["k1_sd"] >= got["k1_sd_within"]
    assert got["length"]["greedy_over_kl"] > 0


# ----------------------------------------------------------------------------- the checks


def test_bad_arguments_are_refused(small, everything):
    policy, reference, _, prompts = small
    with pytest.raises(ValueError, match="batch must be a multiple"):
        ke.batch_below_truth(everything, 3)
    with pytest.raises(ValueError, match="batch must be an int"):
        ke.batch_below_truth(everything, 0, design="rollout")
    with pytest.raises(ValueError, match="design must be"):
        ke.batch_below_truth(everything, 2, design="uniform")
    with pytest.raises(ValueError, match="reps must be"):
        ke.batch_below_truth(everything, 2, reps=0)
    with pytest.raises(ValueError, match="name must be"):
        ke.batch_below_truth(everything, 2, estimators=("k4",))
    comps = exact.enumerate_completions(policy, prompts[:1], T, min_prob=1e-3)
    with pytest.raises(ValueError, match="policy must be the model comps enumerates"):
        ke.answer_moments(comps, reference, reference)
    with pytest.raises(ValueError, match="floors must be"):
        ke.answer_moments(comps, policy, reference, floors=(-3.0, 1.0))
    with pytest.raises(ValueError, match="batch_size must be"):
        ke.answer_terms(comps, policy, reference, batch_size=0)
    with pytest.raises(ValueError, match="alpha must be finite"):
        ke.blend(reference, policy, float("nan"))
    with pytest.raises(ValueError, match="policy must have the reference's architecture"):
        ke.blend(reference, TinyGPT(GPTConfig(n_layer=1, n_embd=32, n_head=2)), 0.5)
    with pytest.raises(ValueError, match="floors must be"):
        ke.answer_moments(comps, policy, reference, floors=(-3.0,))
    assert torch.isfinite(ke.answer_moments(comps, policy, reference).k1.var.upper).all()
