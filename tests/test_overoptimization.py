"""Chapter 11's study: the exact point of a policy, the sampled KL sums, Gao et al.'s fits, a run
measured from inside, and the reward model trained on a fixed set of pairs."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import minirlhf.evaluation as evaluation
from minirlhf import exact, ppo, task
from minirlhf.model import TinyGPT
from minirlhf.reward_model import RMConfig, train_reward_model
from minirlhf.studies import gao
from minirlhf.studies import overoptimization as overopt


@pytest.fixture(scope="module")
def small(tilted_policy):
    """A small random policy tilted toward `;`, a second one as reference, and a reward model."""
    cfg, policy = tilted_policy(2.0)
    reference, rm = TinyGPT(cfg).eval(), TinyGPT(cfg, scalar_head=True).eval()
    pairs = torch.tensor([[1, 2], [0, 1], [3, 4]])
    return policy, reference, rm, pairs


def test_the_exact_point_is_the_engine_s_numbers_averaged_over_prompts(small):
    policy, reference, rm, pairs = small
    point = overopt.exact_point(policy, reference, rm, pairs, min_prob=1e-7)
    comps = exact.enumerate_completions(policy, task.encode_prompts(pairs), 0.7, 1e-7)
    kl = exact.exact_sequence_kl(comps, reference)
    assert point["kl"] == pytest.approx(kl.value.mean().item(), abs=1e-12)
    assert point["kl_lower"] <= point["kl"] <= point["kl_upper"]
    assert point["gold"] == pytest.approx(exact.expected_gold(comps, pairs).value.mean().item(), abs=1e-12)
    assert point["proxy_lower"] <= point["proxy"] <= point["proxy_upper"]
    assert point["completions"] == len(comps.logp) and point["pruned"] == comps.pruned.max().item()


def test_a_policy_against_itself_is_at_kl_0_exactly_and_by_sampling(small):
    policy, _, rm, pairs = small
    point = overopt.exact_point(policy, policy, rm, pairs)
    assert point["kl"] == 0.0 or 0 < point["kl"] < 1e-12
    assert point["kl_lower"] >= 0.0
    sampled = overopt.sampled_kl(policy, policy, task.encode_prompts(pairs), 8, seed=0)
    assert sampled == {"k1": 0.0, "k3": 0.0, "k1_sd": 0.0, "k3_sd": 0.0}


def test_the_sampled_sums_are_unbiased_for_the_exact_kl(small):
    policy, reference, rm, pairs = small
    truth = overopt.exact_point(policy, reference, rm, pairs, min_prob=1e-9)["kl"]
    sampled = overopt.sampled_kl(policy, reference, task.encode_prompts(pairs), 20_000, seed=1)
    n = 3 * 20_000
    for k in ("k1", "k3"):  # within 4 standard errors of the truth
        assert abs(sampled[k] - truth) < 4 * sampled[f"{k}_sd"] / math.sqrt(n), (k, sampled, truth)
    assert sampled["k3_sd"] > 0 and sampled["k1_sd"] > 0


@pytest.mark.parametrize("form, alpha, beta", [("bon", 0.3, 0.2), ("rl", 0.1, 0.25)])
def test_gao_s_forms_are_fitted_exactly_on_their_own_curves(form, alpha, beta):
    d = np.linspace(0.1, 3.0, 30)
    gain = d * (alpha - beta * (d if form == "bon" else np.log(d)))
    fit = gao.fit_gao(d**2, gain, form)
    assert fit["alpha"] == pytest.approx(alpha, abs=1e-10) and fit["beta"] == pytest.approx(beta, abs=1e-10)
    assert fit["rmse"] < 1e-10 and fit["r2"] == pytest.approx(1.0)
    peak = alpha / (2 * beta) if form == "bon" else math.exp(alpha / beta - 1)
    assert fit["peak_d"] == pytest.approx(peak)
    grid = np.linspace(1e-3, 5, 20001)
    curve = grid * (alpha - beta * (grid if form == "bon" else np.log(grid)))
    assert grid[curve.argmax()] == pytest.approx(peak, abs=1e-3)  # the peak is where the curve is highest


def test_a_fit_with_no_peak_says_so_and_bad_input_is_named():
    d = np.linspace(0.1, 2, 10)
    assert gao.fit_gao(d**2, -0.1 * d - 0.05 * d * d, "bon")["peak_d"] is None  # falls from the start
    # RL's form with beta a hair above 0 (a curve that keeps rising): its top is past any float
    far = gao.fit_gao(d**2, 0.3 * d - 1e-6 * d * np.log(d), "rl")
    assert 0 < far["beta"] < 1e-5 and far["peak_d"] == math.inf
    with pytest.raises(ValueError, match="form"):
        gao.fit_gao([0.1, 0.2, 0.3], [0, 0, 0], "ppo")
    with pytest.raises(ValueError, match="3 points"):
        gao.fit_gao([0.0, 0.1, 0.2], [0, 0.1, 0.2], "bon")  # KL 0 is left out: two points


def test_the_peak_of_a_curve():
    top = gao.peak([0.0, 0.5, 2.0], [0.2, 0.3, 0.1])
    assert top == {"index": 1, "gold": 0.3, "kl": 0.5, "sqrt_kl": math.sqrt(0.5), "gain": pytest.approx(0.1)}


def test_the_curves_that_need_no_training_come_from_one_enumeration(small):
    policy, _, rm, pairs = small
    curves = overopt.exact_curves(policy, rm, pairs, [1, 2, 64], [100.0, 1.0, 0.2], min_prob=1e-6)
    bon, tilt, ceiling = curves["bon"], curves["tilt"], curves["ceiling"]
    assert curves["n"] == [1, 2, 64] and curves["beta"] == [100.0, 1.0, 0.2]
    assert bon["kl"][0] == pytest.approx(0.0, abs=1e-12)
    assert bon["analytic"] == pytest.approx([0.0, math.log(2) - 0.5, math.log(64) - 63 / 64])
    assert all(k <= a + 1e-12 for k, a in zip(bon["kl"], bon["analytic"]))
    assert bon["proxy"][0] <= bon["proxy"][1] <= bon["proxy"][2]
    # the tilt by the proxy raises the proxy with the KL; the tilt by the verifier, the gold
    assert tilt["kl"][0] < tilt["kl"][1] < tilt["kl"][2] and tilt["proxy"][0] < tilt["proxy"][1] < tilt["proxy"][2]
    assert ceiling["gold"][0] < ceiling["gold"][1] < ceiling["gold"][2] and "proxy" not in ceiling
    for curve in (tilt, ceiling):
        for key in ("kl", "gold"):
            assert all(lo <= v <= hi for lo, v, hi in zip(curve[f"{key}_lower"], curve[key], curve[f"{key}_upper"]))
    # per prompt, averaged, is the curve
    assert np.mean(tilt["per_prompt"]["gold"], axis=1) == pytest.approx(tilt["gold"], abs=1e-15)
    assert np.shape(bon["per_prompt"]["kl"]) == (3, 3)
    # no policy reaches more gold at a KL than the verifier's tilt: best-of-n and the proxy's tilt lie below
    for curve in (bon, tilt):
        for kl, gold in zip(curve["kl"], curve["gold"]):
            assert (
                gold <= np.interp(kl, ceiling["kl"] + [1e9], ceiling["gold"] + [1.0]) + 1e-9 or kl > ceiling["kl"][-1]
            )


def test_a_run_s_scores_are_computed_once_and_are_the_engine_s(small):
    policy, reference, rm, pairs = small
    scores = overopt.Scores(reference, rm)
    plain = overopt.exact_point(policy, reference, rm, pairs, min_prob=1e-6)
    cached = overopt.exact_point(policy, reference, rm, pairs, min_prob=1e-6, scores=scores)
    first = len(scores.table)
    again = overopt.exact_point(policy, reference, rm, pairs, min_prob=1e-6, scores=scores)
    assert first == plain["completions"] and len(scores.table) == first  # nothing scored twice
    for key in ("kl", "gold", "proxy", "kl_upper", "proxy_lower"):
        assert cached[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-9) and again[key] == cached[key]


def test_an_unknown_optimizer_is_named(small):
    policy, _, rm, _ = small
    with pytest.raises(ValueError, match="optimizer must be one of"):
        overopt.rl_run({"optimizer": "sgd", "proxy": "book", "seed": 0}, policy=policy, rm=rm)


def test_a_run_is_measured_at_the_iterations_it_names_from_inside(small, monkeypatch):
    policy, _, rm, _ = small
    monkeypatch.setattr(overopt, "eval_pairs", lambda n=overopt.N_PROMPTS: task.eval_pairs()[:3])
    job = {"optimizer": "ppo-chapter-5", "proxy": "book", "seed": 0, "iterations": 2, "at": [0, 1, 2], "samples": 2}
    evalset = evaluation.EvalSet(task.eval_pairs()[:8])
    original = ppo.ppo_train

    def short(policy, reference, reward_fn, beta, config, **kwargs):  # 8 answers a batch, 8 eval prompts
        cfg = replace(config, batch_size=8)
        return original(policy, reference, reward_fn, beta, cfg, **{**kwargs, "evalset": evalset})

    monkeypatch.setattr(ppo, "ppo_train", short)
    out = overopt.rl_run(job, policy=policy, rm=rm)
    assert out["iteration"] == [0, 1, 2]
    assert out["kl"][0] < 1e-12 and out["kl"][2] > 1e-6  # the start is the reference (up to rounding)
    for key in ("gold", "proxy", "k1", "k3", "pruned", "kl_upper", "greedy_kl"):
        assert len(out[key]) == 3
    assert out["greedy_kl"][0] < 1e-12 and out["greedy_kl"][2] > 1e-6
    # the run's own evaluation only at its start and end; its batch log at every iteration
    assert out["log"]["eval_iterations"] == [0, 2] and len(out["log"]["objective/kl"]) == 2
    sparse = overopt.rl_run({**job, "iterations": 4, "at": [0, 2, 4]}, policy=policy, rm=rm)
    assert sparse["iteration"] == [0, 2, 4] and sparse["log"]["eval_iterations"] == [0, 4]
    # every optimizer of the table runs, with its own settings and reward
    for name in overopt.OPTIMIZERS:
        run = overopt.rl_run({**job, "optimizer": name, "iterations": 1, "at": [0, 1]}, policy=policy, rm=rm)
        assert run["iteration"] == [0, 1], name
        # a random policy is never right: the verifier gives every group equal rewards, nothing to learn
        assert (run["kl"][1] > 1e-9) == (name != "rloo-verifier"), name
    assert len(run["per_prompt"][1]["gold"]) == 3


def test_the_callback_gets_the_policy_of_that_iteration_in_eval_mode(small):
    policy, _, rm, _ = small
    seen = []

    def callback(iteration, log, model):
        seen.append((iteration, model.training, len(log["accuracy"]), [p.clone() for p in model.parameters()][0]))

    cfg = ppo.PPOConfig(iterations=2, batch_size=8, seed=0)
    trained, _ = ppo.ppo_train(
        policy,
        policy,
        ppo.rm_reward(rm),
        0.0,
        cfg,
        rm=rm,
        progress=False,
        callback=callback,
        evalset=evaluation.EvalSet(task.eval_pairs()[:4]),
    )
    assert [(i, training, n) for i, training, n, _ in seen] == [(1, False, 2), (2, False, 3)]
    assert torch.equal(seen[-1][3], next(trained.parameters()))


def test_a_reward_model_trained_on_a_fixed_set_sees_only_that_set():
    pairs = task.train_pairs()[:1]
    one = (task.encode_prompts(pairs), task.correct_completions(pairs), task.correct_completions(pairs) * 0 + 1)
    cfg = RMConfig(steps=3, batch_size=4, dtype="float64")
    _, log = train_reward_model(cfg, progress=False, data=one)
    assert len(log["loss"]) == 3 and log["loss"][0] > log["loss"][-1]  # one pair, learned
    a, _ = train_reward_model(cfg, progress=False, data=one)
    b, _ = train_reward_model(cfg, progress=False, data=one)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _ids(*rows):
    return tuple(torch.zeros(n, width, dtype=torch.long) for n, width in rows)


@pytest.mark.parametrize(
    "data, name",
    [
        (_ids((2, 6), (2, 4)), "data"),
        (_ids((2, 5), (2, 4), (2, 4)), "prompts"),
        (_ids((2, 6), (3, 4), (2, 4)), "chosen"),
        (_ids((0, 6), (0, 4), (0, 4)), "prompts"),
    ],
)
def test_a_bad_fixed_set_is_named(data, name):
    with pytest.raises(ValueError, match=name):
        train_reward_model(RMConfig(steps=1), progress=False, data=data)


def test_the_proxies_are_the_book_s_pairs_cut_short():
    prompts, chosen, rejected = overopt.proxy_data("200")
    assert prompts.shape == (200, 6) and chosen.shape == rejected.shape == (200, 4)
    assert not bool((chosen == rejected).all(1).any())  # every pair a right answer against a wrong one
    with pytest.raises(ValueError, match="proxy must be one of"):
        overopt.load_proxy("100", progress=False)


def test_the_study_hands_out_the_longest_runs_first_and_returns_results_in_job_order(monkeypatch):
    ran = []

    def fake_job(job, progress=False):
        ran.append(job.get("name", job["kind"]))  # a DPO job takes no other keys than its own
        return ran[-1]

    monkeypatch.setattr(overopt, "_study_job", fake_job)
    monkeypatch.setattr(overopt, "make_proxies", lambda names, made=(), progress=True, workers=None: None)
    monkeypatch.setattr(overopt.dpo, "prepare_reference", lambda reference, config=None, data=None: None)
    monkeypatch.setattr(overopt.store, "load_sft", lambda progress=True: (None, {}))
    jobs = [
        {"name": "curves", "kind": "exact", "proxy": "book"},
        {"name": "rl short", "kind": "rl", "iterations": 40},
        {"kind": "dpo", "beta": 1.0, "steps": 600},
        {"name": "rl long", "kind": "rl", "iterations": 64},
        {"name": "check", "kind": "check", "proxy": "book"},
    ]
    assert overopt.run_study(jobs, progress=False, workers=1) == [job.get("name", "dpo") for job in jobs]
    assert ran == ["dpo", "rl long", "rl short", "curves", "check"]


def test_the_proxies_are_made_once_each_the_longest_first_of_both_kinds(monkeypatch):
    from minirlhf.studies import onpolicy_proxies

    made = []
    monkeypatch.setattr(overopt, "_stored", lambda item: item == "800")
    monkeypatch.setattr(overopt, "load_proxy", lambda name, progress=True: made.append(name))
    monkeypatch.setattr(onpolicy_proxies, "load", lambda *item, progress=True: made.append(item))
    overopt.make_proxies(["200", "800", "near-miss"], [("on-policy", 12_800, 1)], progress=False, workers=1)
    # 1,000 steps of 64 on-policy pairs, then 400 and 100 steps of 128: "800" is stored already
    assert made == [("on-policy", 12_800, 1), "near-miss", "200"]
    rl = {"kind": "rl", "data": "on-policy", "pairs": 12_800, "rm_seed": 2, "seed": 0}
    assert overopt._made_key(rl) == ("on-policy", 12_800, 2)
    assert overopt._made_key({**rl, "kind": "exact", "seed": 1}) == ("on-policy", 12_800, 1)
