"""Stored PPO runs of a plan (chapter 7): run once, keep what is asked, read back only for the
same plan from the same weights."""

import copy

import torch

from minirlhf.course import runs
from minirlhf.evaluation import EvalSet
from minirlhf.model import GPTConfig, TinyGPT, generate
from minirlhf.ppo import PPOConfig

TINY = {"iterations": 1, "batch_size": 8}


def _models():
    torch.manual_seed(0)
    return TinyGPT(GPTConfig()).eval(), TinyGPT(GPTConfig(), scalar_head=True).eval()


def test_weights_digest_sees_every_bit():
    policy, _ = _models()
    same, other = copy.deepcopy(policy), copy.deepcopy(policy)
    with torch.no_grad():
        weight = next(other.parameters())
        weight.view(-1)[0] = torch.nextafter(weight.view(-1)[0], torch.tensor(1e9))
    assert runs.weights_digest(policy) == runs.weights_digest(same) != runs.weights_digest(other)


def test_stored_runs_run_once_keep_what_is_asked_and_read_back(tmp_path, monkeypatch):
    policy, rm = _models()
    real, calls = runs.experiment.run_arm, []

    def counting(arm, *args, **kwargs):
        calls.append(arm)
        return real(arm, *args, **kwargs)

    monkeypatch.setattr(runs.experiment, "run_arm", counting)
    plan = {(0.0, 0): ("rm", 0.0, TINY), ("adaptive", 1): ("rm", 0.1, {**TINY, "kl_target": 0.05, "kl_horizon": 64})}
    path, keep = tmp_path / "ch07_test.json", ("accuracy", "beta")
    # in this process (workers=1), so that the calls are counted here
    first = runs.stored_runs(path, plan, policy, rm, keep=keep, answers=True, workers=1)
    again = runs.stored_runs(path, plan, policy, rm, keep=keep, answers=True, workers=1)
    assert calls == ["rm", "rm"] and first == again and list(first) == list(plan)
    assert set(first[0.0, 0]) == {"accuracy", "beta", "answers"}
    # the log and the answers are those of the same run made directly
    trained, log = real("rm", policy, rm, 0, 0.0, PPOConfig(**TINY), progress=False)
    assert first[0.0, 0]["accuracy"] == log["accuracy"] and first[0.0, 0]["beta"] == log["beta"]
    assert first[0.0, 0]["answers"] == generate(trained, EvalSet().prompts, greedy=True).tolist()
    assert [p.name for p in tmp_path.iterdir()] == ["ch07_test.json"]


def test_stored_runs_run_again_for_other_weights_plan_or_keys(tmp_path, monkeypatch):
    policy, rm = _models()
    calls = []
    monkeypatch.setattr(
        runs.experiment, "run_arm", lambda arm, *a, **k: calls.append(arm) or (None, {"accuracy": [0.5], "kl": [0.0]})
    )
    plan = {("fixed", 0): ("verifier", 0.08, TINY)}
    path = tmp_path / "stored.json"
    runs.stored_runs(path, plan, policy, rm, keep=("accuracy",), workers=1)
    runs.stored_runs(path, plan, policy, rm, keep=("accuracy",), workers=1)
    assert len(calls) == 1
    other_rm = copy.deepcopy(rm)
    with torch.no_grad():
        next(other_rm.parameters()).add_(1e-3)
    runs.stored_runs(path, plan, policy, other_rm, keep=("accuracy",), workers=1)  # another reward model
    assert len(calls) == 2
    runs.stored_runs(path, plan, rm, other_rm, keep=("accuracy",), workers=1)  # another start (weights)
    assert len(calls) == 3
    longer = {("fixed", 0): ("verifier", 0.08, {**TINY, "iterations": 2})}
    runs.stored_runs(path, longer, rm, other_rm, keep=("accuracy",), workers=1)  # another plan
    assert len(calls) == 4
    whole = runs.stored_runs(path, longer, rm, other_rm, workers=1)  # every key of the log
    assert len(calls) == 5 and whole[("fixed", 0)] == {"accuracy": [0.5], "kl": [0.0]}
