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


def _make_slowly(path, log):
    # A process making a stored file: it takes a second, and notes that it ran.
    import time

    def run():
        with open(log, "a") as f:
            f.write("ran\n")
        time.sleep(1.0)
        return {"arms": {}, "value": 7}

    return runs.load_or_run(path, {"n": 1}, {}, run, arms=())


def test_two_processes_that_need_one_stored_file_make_it_once(tmp_path):
    """Two chapters run side by side (make test runs them so): the second waits for the file
    the first is making and reads it, rather than make the same runs again."""
    import multiprocessing

    path, log = tmp_path / "shared.json", tmp_path / "ran.txt"
    ctx = multiprocessing.get_context("fork")
    first = ctx.Process(target=_make_slowly, args=(path, log))
    first.start()
    for _ in range(100):  # until the first has begun its run
        if log.exists():
            break
        __import__("time").sleep(0.05)
    waited = []
    found = runs.load_or_run(path, {"n": 1}, {}, lambda: waited.append("ran") or {"arms": {}, "value": 8}, arms=())
    first.join(10)
    assert first.exitcode == 0
    assert log.read_text() == "ran\n" and waited == []  # made once, by the first
    assert found["value"] == 7
    # a lock that cannot be taken costs a second run, never a wrong file
    (tmp_path / ".other.json.making").mkdir()
    assert runs.load_or_run(tmp_path / "other.json", {"n": 2}, {}, lambda: {"arms": {}, "v": 1}, arms=())["v"] == 1
