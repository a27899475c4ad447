"""Proxies trained on the initial policy's own answers (Gao et al.'s recipe): the decisive pairs,
their prefixes, the settings that key the stored proxies, and the names they accept."""

import pytest
import torch

from minirlhf import exact, store, task
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.studies import onpolicy_proxies as op
from minirlhf.studies import overoptimization as overopt


def fake_generate(policy, prompts, temperature, generator=None):
    """Answer each prompt right with probability 1/2, else with a number 1..3 too high; the
    fourth token is a digit after the `;` (padding any reader must ignore)."""
    sums = [eval(task.decode(row).strip(";=")) for row in prompts.tolist()]
    right = torch.rand(len(sums), generator=generator) < 0.5
    off = torch.randint(1, 4, (len(sums),), generator=generator)
    answers = task.encode_answers([s if r else s + int(o) for s, r, o in zip(sums, right.tolist(), off.tolist())])
    answers[:, -1] = torch.where(answers[:, -1] == task.SEMI, 7, answers[:, -1])
    return answers


@pytest.fixture
def fake(monkeypatch):
    """A stand-in policy (a small TinyGPT: only its weights' digest is read) whose answers are
    :func:`fake_generate`'s, an empty cache and 200 as the largest size."""
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig(n_layer=1, n_embd=16, n_head=2)).eval()
    monkeypatch.setattr(op, "generate", fake_generate)
    monkeypatch.setattr(op, "_sft", lambda: policy)
    monkeypatch.setattr(op, "_CACHE", {})
    return policy


def test_the_pairs_are_decisive_right_against_wrong_on_training_prompts_only(fake):
    data = op.decisive_pairs(300, chunk=64)
    pairs, chosen, rejected = data["pairs"], data["chosen"], data["rejected"]
    assert pairs.shape == (300, 2) and chosen.shape == rejected.shape == (300, 4)
    assert torch.equal(data["prompts"], task.encode_prompts(pairs))
    assert task.batch_verify(pairs, chosen).eq(1).all() and task.batch_verify(pairs, rejected).eq(0).all()
    # every prompt is a training prompt; none is an eval prompt
    train = set(map(tuple, task.train_pairs().tolist()))
    assert set(map(tuple, pairs.tolist())) <= train
    assert not set(map(tuple, pairs.tolist())) & set(map(tuple, task.eval_pairs().tolist()))
    # the undecided prompts are counted; the last prompt drawn is the 300th decisive one
    assert data["drawn"] == 300 + data["both_right"] + data["both_wrong"] == int(data["index"][-1]) + 1
    assert data["both_right"] > 0 and data["both_wrong"] > 0
    assert bool((data["index"].diff() > 0).all())
    # an answer ends at its first `;`: what the policy wrote after it is not kept
    for answers in (chosen, rejected):
        assert torch.equal(answers, exact.canonical_completions(answers))


def test_a_smaller_set_is_the_beginning_of_a_larger_one(fake):
    small, large = op.decisive_pairs(70, chunk=32), op.decisive_pairs(200, chunk=32)
    for key in ("pairs", "prompts", "chosen", "rejected", "index"):
        assert torch.equal(small[key], large[key][:70]), key
    assert small["drawn"] == int(large["index"][69]) + 1
    other_seed = op.decisive_pairs(70, chunk=32, seed=1)
    assert not torch.equal(small["pairs"], other_seed["pairs"])


def test_the_proxies_data_are_prefixes_of_the_largest_set(fake, monkeypatch):
    monkeypatch.setattr(op, "SIZES", (20, 200))
    monkeypatch.setattr(op, "CHUNK", 64)
    drawn = op.decisive_pairs(200, chunk=op.CHUNK)
    small, large = op.onpolicy_data(20), op.onpolicy_data(200)
    for a, b, key in zip(small, large, ("prompts", "chosen", "rejected")):
        assert torch.equal(a, b[:20]) and torch.equal(b, drawn[key]), key


def test_the_settings_key_on_kind_size_seed_steps_and_the_policy(fake, monkeypatch):
    def key(kind, size, seed):
        stem, cfg, settings = op.proxy_settings(kind, size, seed)
        return stem, store.settings_hash(settings)

    cases = [(k, s, d) for k in op.KINDS for s in (800, 3_200) for d in (0, 1)]
    stems, hashes = zip(*(key(*c) for c in cases))
    assert len(set(stems)) == len(set(hashes)) == len(cases)
    stem, cfg, settings = op.proxy_settings("on-policy", 800, 2)
    assert stem == "proxy-onpolicy-800-seed2" and cfg.seed == 2 and cfg.steps == op.train_steps(800) == 25
    assert settings["pairs"] == 800 and settings["rm"]["seed"] == 2
    monkeypatch.setattr(op, "EPOCHS", op.EPOCHS + 1)
    assert key("on-policy", 800, 2)[1] != store.settings_hash(settings)
    other = TinyGPT(GPTConfig(n_layer=1, n_embd=16, n_head=2)).eval()  # another initial policy
    assert store.settings_hash(op.proxy_settings("on-policy", 800, 2, other)[2]) != store.settings_hash(settings)
    # the off-policy proxy of seed 0 is chapter 11's own, under chapter 11's settings
    assert op.proxy_settings("off-policy", 800, 0)[0] == "proxy-800"
    assert op.proxy_settings("off-policy", 800, 0)[2] == overopt._proxy_settings("800")[1]
    assert op.proxy_settings("off-policy", 800, 1)[1].seed == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (("onpolicy", 800, 0), "kind must be one of"),
        (("on-policy", 200, 0), "size must be one of"),
        (("on-policy", "800", 0), "size must be one of"),
        (("off-policy", True, 0), "size must be one of"),
        (("on-policy", 800, -1), "seed must be a whole number"),
        (("off-policy", 800, 1.0), "seed must be a whole number"),
    ],
)
def test_bad_names_are_named_in_one_line(fake, args, message):
    for fn in (op.proxy_settings, op.load):
        with pytest.raises(ValueError, match=message) as info:
            fn(*args)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_a_bad_number_of_pairs_is_named(fake, n):
    with pytest.raises(ValueError, match="n must be a whole number >= 1") as info:
        op.decisive_pairs(n)
    assert "\n" not in str(info.value)


def test_a_proxy_is_trained_once_stored_and_loaded(fake, monkeypatch, tmp_path):
    monkeypatch.setattr(store.paths, "OUTPUTS", tmp_path)
    monkeypatch.setattr(op, "SIZES", (20, 200))
    monkeypatch.setattr(op, "CHUNK", 64)
    monkeypatch.setattr(op, "EPOCHS", 20)  # 2 steps of 256 for 20 pairs
    calls = []
    train = op.reward_model.train_reward_model
    monkeypatch.setattr(op.reward_model, "rm_report", lambda rm: {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5})

    def counting(cfg, progress=True, data=None):
        calls.append((cfg.steps, cfg.seed, len(data[0])))
        return train(cfg, progress=progress, data=data)

    monkeypatch.setattr(op.reward_model, "train_reward_model", counting)
    rm, metrics = op.load("on-policy", 20, 1, progress=False)
    assert calls == [(2, 1, 20)] and (tmp_path / "models" / "proxy-onpolicy-20-seed1.pt").is_file()
    assert metrics["drawn"] == int(op.decisive_pairs(20, chunk=64)["index"][-1]) + 1
    assert {"pair_accuracy", "near_miss_accuracy", "final_loss", "train_seconds"} <= set(metrics)
    again, metrics_again = op.load("on-policy", 20, 1, progress=False)
    assert len(calls) == 1 and metrics_again == metrics
    assert all(torch.equal(a, b) for a, b in zip(rm.state_dict().values(), again.state_dict().values()))
    # chapter 11's study reads it through job_proxy, with its held-out on-policy accuracy
    rm_job, report = op.job_proxy("on-policy", 20, 1)
    assert len(calls) == 1 and op.weights_digest(rm_job) == op.weights_digest(rm)
    assert report == {
        "pair_accuracy": 0.5,
        "near_miss_accuracy": 0.5,
        "onpolicy_accuracy": op.heldout_accuracy(rm)["accuracy"],
        "drawn": metrics["drawn"],
    }
    assert 0.0 <= report["onpolicy_accuracy"] <= 1.0


def test_the_held_out_pairs_are_decisive_on_the_eval_prompts_and_drawn_once(fake):
    pairs, chosen, rejected = op.heldout_pairs()
    assert task.batch_verify(pairs, chosen).eq(1).all() and task.batch_verify(pairs, rejected).eq(0).all()
    assert set(map(tuple, pairs.tolist())) <= set(map(tuple, task.eval_pairs().tolist()))
    again = op.heldout_pairs()
    assert all(a is b for a, b in zip(again, (pairs, chosen, rejected)))  # the process's cache


def test_a_proxy_that_ranks_the_held_out_pairs_by_the_truth_scores_one(fake, monkeypatch):
    pairs, chosen, rejected = op.heldout_pairs()
    right = set(zip(map(tuple, task.encode_prompts(pairs).tolist()), map(tuple, chosen.tolist())))

    def scores(rm, prompts, completions):
        rows = zip(map(tuple, prompts.tolist()), map(tuple, completions.tolist()))
        return torch.tensor([1.0 if row in right else 0.0 for row in rows])

    monkeypatch.setattr(op, "reward_scores", scores)
    assert op.heldout_accuracy(None) == {"accuracy": 1.0, "pairs": len(pairs)}
    monkeypatch.setattr(op, "reward_scores", lambda rm, prompts, completions: torch.zeros(len(completions)))
    assert op.heldout_accuracy(None)["accuracy"] == 0.0  # a tie counts as wrong


def test_each_proxy_sees_its_pairs_the_same_number_of_times(monkeypatch):
    assert [op.train_steps(n) for n in op.SIZES] == [25, 100, 400]  # 8 passes of 256 pairs a step
    monkeypatch.setattr(op, "SIZES", (20, 300))
    assert op.train_steps(300) == 10  # 2,400 / 256 = 9.4: rounded up, never fewer passes
    with pytest.raises(ValueError, match="size must be one of"):
        op.train_steps(800)
