"""DPO's over-optimization study: a DPO run measured exactly from inside, its steps the same as
train_dpo's, the steps it is measured at, its checks of a job, and the reading of a run's peak."""

import math

import pytest
import torch

from minirlhf import dpo, task
from minirlhf.evaluation import EvalSet
from minirlhf.model import TinyGPT
from minirlhf.studies import dpo_overopt as study
from minirlhf.studies import overoptimization as overopt

N_PAIRS, BATCH = 12_800, 64  # the book's pairs, and chapter 9's batch


@pytest.fixture(scope="module")
def small(tilted_policy):
    """A small random policy tilted toward `;` (also the reference) and a reward model."""
    cfg, policy = tilted_policy(2.0)
    return policy, TinyGPT(cfg, scalar_head=True).eval()


@pytest.fixture
def few(monkeypatch):
    """Three eval prompts instead of 100."""
    monkeypatch.setattr(overopt, "eval_pairs", lambda n=overopt.N_PROMPTS: task.eval_pairs()[:3])


def test_the_start_is_measured_at_kl_0_and_the_run_at_the_steps_asked(small, few):
    policy, rm = small
    out = study.dpo_run({"beta": 0.5, "seed": 0, "steps": 3, "at": [0, 1, 3]}, policy=policy, rm=rm)
    assert out["step"] == [0, 1, 3]
    assert out["epoch"] == [0.0, BATCH / N_PAIRS, 3 * BATCH / N_PAIRS]
    assert out["steps_per_epoch"] == N_PAIRS // BATCH and out["n_pairs"] == N_PAIRS
    assert out["kl"][0] < 1e-12 and out["kl_lower"][0] >= 0.0  # the start is the reference
    assert out["kl"][1] > 1e-6 and out["kl"][2] > out["kl"][1]
    for key in ("kl", "kl_upper", "gold", "gold_lower", "proxy", "proxy_upper", "pruned", "completions"):
        assert len(out[key]) == 3, key
    assert all(lo <= x <= hi for lo, x, hi in zip(out["gold_lower"], out["gold"], out["gold_upper"]))
    assert len(out["per_prompt"]) == 3 and len(out["per_prompt"][2]["kl"]) == 3
    assert len(out["log"]["loss"]) == 3
    assert out["log"]["loss"][0] == pytest.approx(math.log(2), abs=1e-12)  # the first step starts at the reference
    assert out["config"]["beta"] == 0.5 and out["config"]["anneal_lr"] is False
    # without step 0 the start is not measured
    assert study.dpo_run({"beta": 0.5, "steps": 2, "at": [2]}, policy=policy, rm=rm)["step"] == [2]


def test_by_default_a_run_is_measured_densely_at_first_and_each_quarter_epoch(small, few):
    assert study.measured_steps(600, 200) == [
        0, 1, 2, 4, 8, 16, 32, 50, 64, 100, 128, 150, 200, 250, 256, 300, 350, 400, 450, 500, 512, 550, 600
    ]  # fmt: skip
    assert study.measured_steps(5, 200) == [0, 1, 2, 4, 5]
    assert study.steps_per_epoch() == N_PAIRS // BATCH
    policy, rm = small
    assert study.dpo_run({"beta": 1.0, "steps": 5}, policy=policy, rm=rm)["step"] == [0, 1, 2, 4, 5]


@pytest.mark.parametrize(
    "job, match",
    [
        ({"beta": 0.0, "steps": 2}, "beta must be a finite number > 0"),
        ({"beta": -1.0, "steps": 2}, "beta must be a finite number > 0"),
        ({"beta": float("nan"), "steps": 2}, "beta must be a finite number > 0"),
        ({"beta": float("inf"), "steps": 2}, "beta must be a finite number > 0"),
        ({"beta": "0.1", "steps": 2}, "beta must be a finite number > 0"),
        ({"steps": 2}, "beta must be a finite number > 0"),
        ({"beta": 0.1, "steps": 0}, "steps must be a whole number >= 1"),
        ({"beta": 0.1, "steps": 2.5}, "steps must be a whole number >= 1"),
        ({"beta": 0.1, "steps": True}, "steps must be a whole number >= 1"),
        ({"beta": 0.1}, "steps must be a whole number >= 1"),
        ({"beta": 0.1, "steps": 2, "seed": -1}, "seed must be a whole number >= 0"),
        ({"beta": 0.1, "steps": 2, "at": [0, 3]}, "at must list whole numbers of steps from 0 to steps"),
        ({"beta": 0.1, "steps": 2, "at": []}, "at must list whole numbers of steps from 0 to steps"),
        ({"beta": 0.1, "steps": 2, "lr": 1e-3}, "job has unknown keys"),
        ({"beta": 0.1, "steps": 2, "data": "human"}, "data must be 'book' or 'on-policy'"),
        ({"beta": 0.1, "steps": 2, "data": "on-policy"}, r"pairs must be one of \(800, 3200, 12800\)"),
        ({"beta": 0.1, "steps": 2, "data": "on-policy", "pairs": 100}, "pairs must be one of"),
        ({"beta": 0.1, "steps": 2, "data": "on-policy", "pairs": 800, "seed": 5}, r"seed must be one of \(0, 1, 2\)"),
        ({"beta": 0.1, "steps": 2, "pairs": 800}, "pairs names a size of the on-policy pairs"),
    ],
)
def test_a_job_it_cannot_run_is_refused_on_one_line(small, job, match):
    policy, rm = small
    for run in (lambda: study.dpo_config(job), lambda: study.dpo_run(job, policy=policy, rm=rm)):
        with pytest.raises(ValueError, match=match) as caught:
            run()
        assert "\n" not in str(caught.value)


def test_a_run_depends_on_its_seed_only(small, few):
    policy, rm = small
    job = {"beta": 0.5, "seed": 3, "steps": 2, "at": [0, 2]}
    first, again = (study.dpo_run(job, policy=policy, rm=rm) for _ in range(2))
    assert first == again
    other = study.dpo_run({**job, "seed": 4}, policy=policy, rm=rm)
    assert other["gold"][0] == first["gold"][0] and other["kl"][1] != first["kl"][1]


@pytest.mark.parametrize("anneal_lr", [False, True])
def test_the_steps_are_train_dpo_s_to_the_last_bit(small, few, anneal_lr):
    policy, rm = small
    before = [p.clone() for p in policy.parameters()]
    job = {"beta": 0.5, "seed": 1, "steps": 3, "anneal_lr": anneal_lr}
    cfg = study.dpo_config(job)
    trained, log = dpo.train_dpo(policy, policy, cfg, evalset=EvalSet(task.eval_pairs()[:4]), progress=False)
    # the step loop alone, with no evaluation between its steps, takes train_dpo's steps
    seen = []
    for step, model, metrics in dpo.steps(policy, policy, cfg):
        seen.append((step, metrics))
    assert [step for step, _ in seen] == [0, 1, 2, 3] and seen[0][1] is None  # the start first
    for name in dpo.DPO_METRICS:
        assert [metrics[name] for _, metrics in seen[1:]] == log[name], name
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), trained.state_dict().values()))
    # the study drives that loop: its log is train_dpo's, and its last point is that of train_dpo's weights
    run = study.dpo_run({**job, "at": [3]}, policy=policy, rm=rm)
    assert all(run["log"][name] == log[name] for name in run["log"])
    point = overopt.exact_point(
        trained,
        policy,
        rm,
        overopt.eval_pairs(),
        value_range=study.exact.score_range(rm),
        floor=study.exact.token_logprob_floor(policy, overopt.TEMPERATURE),
        scores=overopt.Scores(policy, rm),
    )
    assert {key: run[key] for key in point} == {key: [value] for key, value in point.items()}
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))  # the start is not changed


def test_with_a_constant_learning_rate_a_point_is_the_run_of_its_own_length(small, few):
    policy, rm = small
    long, short = ({"beta": 0.5, "seed": 0, "steps": s, "at": [2]} for s in (3, 2))
    assert study.dpo_run(long, policy=policy, rm=rm)["gold"] == study.dpo_run(short, policy=policy, rm=rm)["gold"]
    annealed = study.dpo_run({**long, "anneal_lr": True}, policy=policy, rm=rm)  # its rate depends on the length
    assert annealed["kl"] != study.dpo_run({**short, "anneal_lr": True}, policy=policy, rm=rm)["kl"]


def test_chapter_11s_study_runs_the_dpo_jobs_and_refuses_a_bad_one_first(small, few, monkeypatch):
    policy, rm = small
    monkeypatch.setattr(study.store, "load_sft", lambda progress=True: (policy, {}))
    monkeypatch.setattr(study.store, "load_rm", lambda progress=True: (rm, {}))
    jobs = [{"beta": b, "seed": 0, "steps": 1, "at": [0, 1]} for b in (0.5, 2.0)]
    assert overopt.run_study([{"kind": "dpo", **job} for job in jobs], progress=False, workers=1) == [
        study.dpo_run(job, policy=policy, rm=rm) for job in jobs
    ]
    bad = [{"kind": "dpo", **jobs[0]}, {"kind": "dpo", "beta": 0, "steps": 1}]
    with pytest.raises(ValueError, match="beta"):
        overopt.run_study(bad, progress=False, workers=1)
    made = study.study_jobs([0.5], [0, 1], epochs=2)
    assert made == [{"beta": 0.5, "seed": s, "steps": 400, "anneal_lr": False} for s in (0, 1)]


def _curve(steps, gold, kl=None):
    kl = kl or [0.01 * s for s in steps]
    return {"step": steps, "epoch": [s / 200 for s in steps], "kl": kl, "gold": gold, "steps_per_epoch": 200}


def test_a_run_s_peak_and_whether_it_falls_within_the_first_epoch():
    run = _curve([0, 50, 100, 200, 400], [0.2, 0.35, 0.3, 0.25, 0.1])
    top = study.peaks(run)
    assert top["gain"] == pytest.approx(0.15) and top["step"] == 50 and top["epoch"] == 0.25
    assert top["kl"] == 0.5 and top["sqrt_kl"] == math.sqrt(0.5)
    assert top["end_gain"] == pytest.approx(-0.1) and top["end_below_start"]
    assert top["epoch1_step"] == 50 and top["epoch1_drop"] == pytest.approx(0.1) and top["falls_in_epoch1"]
    rising = study.peaks(_curve([0, 100, 200, 400], [0.2, 0.25, 0.3, 0.4]))
    assert rising["step"] == 400 and rising["epoch1_step"] == 200 and rising["epoch1_drop"] == 0.0
    assert not rising["falls_in_epoch1"] and not rising["end_below_start"]
    flat = study.peaks(_curve([0, 100, 200], [0.2, 0.3, 0.3]))  # a peak before the end, held to it
    assert flat["epoch1_step"] == 100 and flat["epoch1_drop"] == 0.0 and not flat["falls_in_epoch1"]
    assert study.peaks(_curve([0, 100], [0.2, 0.3]))["epoch1_drop"] is None  # not measured at the epoch's end
    with pytest.raises(ValueError, match="step 0"):
        study.peaks(_curve([1, 2], [0.2, 0.3]))


def test_a_run_on_the_on_policy_pairs_trains_on_them_and_measures_their_proxy(small, few, monkeypatch):
    """A job with data "on-policy" trains on that size's pairs (dpo.steps' data) and measures the
    on-policy proxy of its size and seed; study_jobs lists each size's runs, three passes each."""
    from minirlhf.studies import onpolicy_proxies

    policy, rm = small
    book = dpo.preference_pairs()
    fake = {n: tuple(x[:n] for x in (book[0], book[2], book[1])) for n in onpolicy_proxies.SIZES}  # swapped
    asked = []
    monkeypatch.setattr(onpolicy_proxies, "onpolicy_data", lambda n, policy=None: fake[n])
    monkeypatch.setattr(onpolicy_proxies, "job_proxy", lambda *key: asked.append(key) or (rm, {}))
    job = {"beta": 0.5, "seed": 2, "steps": 3, "at": [0, 3], "data": "on-policy", "pairs": 800}
    out = study.dpo_run(job, policy=policy)
    assert asked == [("on-policy", 800, 2)] and out["n_pairs"] == 800 and out["steps_per_epoch"] == 13
    assert out["epoch"] == [0.0, 3 * BATCH / 800]
    same = [m for _, m, _ in dpo.steps(policy, policy, study.dpo_config(job), data=fake[800])][-1]
    book_run = study.dpo_run({k: v for k, v in job.items() if k not in ("data", "pairs")}, policy=policy, rm=rm)
    measured = overopt.exact_point(same, policy, rm, overopt.eval_pairs())
    assert out["kl"][-1] == pytest.approx(measured["kl"], abs=1e-12) and out["kl"][-1] != book_run["kl"][-1]
    jobs = study.study_jobs([1.25], [0], data="on-policy")
    assert [(j["pairs"], j["steps"]) for j in jobs] == [(800, 39), (3_200, 150), (12_800, 600)]
    assert all(j["data"] == "on-policy" for j in jobs)
    with pytest.raises(ValueError, match="data must be 'book' or 'on-policy'"):
        study.study_jobs(data="human")
