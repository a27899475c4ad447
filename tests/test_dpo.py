"""DPO: the loss by hand, the sequence log-probs and their mask, the pairs, and a tiny run."""

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from minirlhf import dpo, reward_model, task
from minirlhf.evaluation import EvalSet
from minirlhf.model import GPTConfig, TinyGPT, completion_mask
from minirlhf.reward_model import RMConfig


def t(*values):
    return torch.tensor(values, dtype=torch.float)


# ---- the loss


def test_dpo_loss_by_hand():
    # pair 1: chosen log-ratio -1 - (-2) = 1, rejected -3 - (-2) = -1; beta 0.5 -> 0.5 * 2 = 1,
    # -log sigmoid(1) = log(1 + e^-1) = 0.313262. Pair 2: every log-ratio 0 -> log 2 = 0.693147.
    loss = dpo.dpo_loss(t(-1.0, -4.0), t(-3.0, -5.0), t(-2.0, -4.0), t(-2.0, -5.0), 0.5)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx((math.log1p(math.exp(-1)) + math.log(2)) / 2, abs=1e-6)
    pc = t(-1.0, -4.0).requires_grad_()
    r_c, r_r = dpo.implicit_rewards(pc, t(-2.0, -4.0), 0.5), dpo.implicit_rewards(t(-3.0, -5.0), t(-2.0, -5.0), 0.5)
    assert r_c.tolist() == pytest.approx([0.5, 0.0]) and r_r.tolist() == pytest.approx([-0.5, 0.0])
    assert not r_c.requires_grad and not r_r.requires_grad


def test_dpo_loss_is_minus_logsigmoid_of_the_margin_and_scales_with_beta():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(32, generator=g) * 5 for _ in range(4))
    for beta in (0.1, 1.0, 3.0):
        loss = dpo.dpo_loss(pc, pr, rc, rr, beta)
        r_c, r_r = dpo.implicit_rewards(pc, rc, beta), dpo.implicit_rewards(pr, rr, beta)
        margin = beta * ((pc - rc) - (pr - rr))
        assert loss.item() == pytest.approx(-F.logsigmoid(margin).mean().item(), rel=1e-6)
        assert torch.allclose(r_c - r_r, margin, atol=1e-5)  # the loss is Bradley-Terry's on them
        assert loss.item() == pytest.approx(-F.logsigmoid(r_c - r_r).mean().item(), rel=1e-5)
    # beta multiplies the log-ratios: beta 2 on x is beta 1 on 2x
    assert dpo.dpo_loss(pc, pr, rc, rr, 2.0).item() == pytest.approx(
        dpo.dpo_loss(2 * pc, 2 * pr, 2 * rc, 2 * rr, 1.0).item(), rel=1e-6
    )
    huge = dpo.dpo_loss(t(0.0), t(-1000.0), t(0.0), t(0.0), 1.0)  # finite at any margin
    assert torch.isfinite(huge) and huge.item() == pytest.approx(0.0, abs=1e-6)


def test_dpo_loss_has_gradients_only_through_the_policy():
    pc, pr = t(-1.0, -2.0).requires_grad_(), t(-3.0, -1.0).requires_grad_()
    loss = dpo.dpo_loss(pc, pr, t(-2.0, -2.0), t(-2.0, -2.0), 0.1)
    loss.backward()
    assert (pc.grad < 0).all() and (pr.grad > 0).all()  # raise the chosen, lower the rejected


@pytest.mark.parametrize(
    "args, message",
    [
        ((t(-1.0, -2.0), t(-1.0), t(-1.0, -2.0), t(-1.0, -2.0), 0.1), "policy_rejected_logps has shape"),
        ((t(-1.0), t(-1.0), t(-1.0), torch.zeros(1, 1), 0.1), "ref_rejected_logps must be a non-empty 1-D"),
        ((t(), t(), t(), t(), 0.1), "policy_chosen_logps must be a non-empty 1-D"),
        ((t(-1.0), t(-1.0), [-1.0], t(-1.0), 0.1), "ref_chosen_logps must be"),
        ((t(-1.0), t(-1.0), t(-1.0), t(-1.0), 0.0), "beta must be a number > 0"),
        ((t(-1.0), t(-1.0), t(-1.0), t(-1.0), -0.1), "beta must be a number > 0"),
    ],
)
def test_dpo_loss_names_the_wrong_argument(args, message):
    with pytest.raises(ValueError, match=message):
        dpo.dpo_loss(*args)


# ---- sequence log-probs, with SFT's mask


@pytest.fixture
def small():
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(n_layer=1, n_embd=16, n_head=2)).eval()


def by_hand(model, prompt_ids: torch.Tensor, completion: str, n_tokens: int) -> float:
    # one token at a time: the log-prob of each of the first n_tokens given all before it
    ids = prompt_ids.tolist() + task.encode(completion)
    total = 0.0
    for i in range(len(prompt_ids), len(prompt_ids) + n_tokens):
        logits = model(torch.tensor([ids[:i]]))[0, -1]
        total += torch.log_softmax(logits, -1)[ids[i]].item()
    return total


@torch.no_grad()
def test_sequence_logps_sums_the_tokens_up_to_the_first_semicolon(small):
    prompts = task.encode_prompts(torch.tensor([[23, 45], [23, 45], [3, 4], [3, 4]]))
    texts = ["68;;", "68;7", "7;;;", "7777"]  # padding after `;` differs; the last has no `;`
    completions = torch.tensor([task.encode(x) for x in texts])
    got = dpo.sequence_logps(small, prompts, completions)
    assert got[0].item() == pytest.approx(by_hand(small, prompts[0], "68;;", 3), abs=1e-5)
    assert got[1].item() == pytest.approx(got[0].item(), abs=1e-6)  # the padding is not counted
    assert got[2].item() == pytest.approx(by_hand(small, prompts[2], "7;;;", 2), abs=1e-5)
    assert got[3].item() == pytest.approx(by_hand(small, prompts[3], "7777", 4), abs=1e-5)  # malformed: all 4
    assert completion_mask(completions).sum(1).tolist() == [3, 3, 2, 4]


# ---- the pairs are the reward model's


def test_the_pairs_are_the_ones_the_reward_model_trains_on(monkeypatch):
    cfg = RMConfig(steps=3, batch_size=8)
    seen = []
    real = reward_model.preference_batch

    def recording(pairs, generator, kind="random"):
        out = real(pairs, generator, kind)
        seen.append(out)
        return out

    monkeypatch.setattr(reward_model, "preference_batch", recording)
    reward_model.train_reward_model(cfg, progress=False)
    monkeypatch.setattr(reward_model, "preference_batch", real)
    rm_prompts, rm_chosen, rm_rejected = (torch.cat(x) for x in zip(*seen))
    prompts, chosen, rejected = dpo.preference_pairs(rm_config=cfg)
    assert prompts.shape == (24, 6)
    assert torch.equal(prompts, rm_prompts) and torch.equal(chosen, rm_chosen) and torch.equal(rejected, rm_rejected)


def test_the_pairs_never_use_an_eval_prompt_and_near_misses_replace_a_share():
    cfg = RMConfig(steps=4, batch_size=10)
    prompts, chosen, rejected = dpo.preference_pairs(0.3, cfg)
    eval_prompts = {tuple(p) for p in task.encode_prompts(task.eval_pairs()).tolist()}
    assert not eval_prompts & {tuple(p) for p in prompts.tolist()}
    texts = [task.decode(c.tolist()) for c in chosen]
    truth = torch.tensor([task.parse_completion(x) for x in texts])
    wrong = torch.tensor([task.parse_completion(task.decode(r.tolist())) for r in rejected])
    near = task.near_miss_mask(truth, wrong).view(4, 10)  # (steps, batch)
    assert near[:, :3].all() and not near[:, 3:].any()  # the first 30% of each batch, and only they
    plain = dpo.preference_pairs(0.0, cfg)
    assert torch.equal(plain[0][:10], prompts[:10])  # the first batch's prompts come first either way
    with pytest.raises(ValueError, match="near_miss_share"):
        dpo.preference_pairs(1.5, cfg)


# ---- training


TINY = dict(steps=12, batch_size=16, lr=3e-3, eval_every=4, rm_config=RMConfig(steps=2, batch_size=32))


@pytest.fixture
def evalset():
    return EvalSet(task.eval_pairs()[:40])


def test_a_tiny_run_lowers_the_loss_and_leaves_both_inputs_untouched(small, evalset):
    before = {k: v.clone() for k, v in small.state_dict().items()}
    trained, log = dpo.train_dpo(small, small, dpo.DPOConfig(**TINY, beta=1.0), evalset=evalset, progress=False)
    assert all(torch.equal(before[k], v) for k, v in small.state_dict().items())  # reference (and start) frozen
    assert any(not torch.equal(before[k], v) for k, v in trained.state_dict().items())
    assert log["loss"][0] == pytest.approx(math.log(2), abs=1e-5)  # policy = reference: every margin 0
    assert sum(log["loss"][-3:]) / 3 < log["loss"][0] - 0.05
    assert log["steps"] == [0, 4, 8, 12] and len(log["accuracy"]) == len(log["kl"]) == 4
    assert log["kl"][0] == pytest.approx(0.0, abs=1e-6) and log["kl"][-1] > 0
    assert all(len(log[name]) == 12 for name in dpo.DPO_METRICS)
    assert all(len(log[key]) == 4 for key in dpo.HELDOUT_LOGPS)
    prompts, answers = dpo.heldout_answers()
    right = dpo.sequence_logps(small, prompts, answers["heldout/logps_correct"]).double().mean().item()
    assert log["heldout/logps_correct"][0] == pytest.approx(right)  # the start, measured on the held-out pairs
    assert task.decode_completions(answers["heldout/logps_correct"][:3]) == [
        f"{a + b};" for a, b in task.eval_pairs()[:3].tolist()
    ]
    assert log["rewards/margins"][-1] > 0 and log["n_pairs"] == 64
    assert math.isnan(log["rm_score"][0])  # no rm given: nothing to score with
    report = log["implicit_reward"]
    assert set(report) == {"pair_accuracy", "near_miss_accuracy", "margin", "accuracy"}
    assert set(report["accuracy"]) == set(task.WRONG_KINDS)


def test_a_learners_loss_fn_drives_the_run(small, evalset):
    calls = []

    def mine(pc, pr, rc, rr, beta):
        calls.append(beta)
        return dpo.dpo_loss(pc, pr, rc, rr, beta) * 0.0  # a loss with no gradient: nothing may move

    trained, log = dpo.train_dpo(
        small, small, dpo.DPOConfig(**TINY, beta=0.7), evalset=evalset, progress=False, loss_fn=mine
    )
    assert calls == [0.7] * 12
    assert all(torch.equal(a, b) for a, b in zip(small.state_dict().values(), trained.state_dict().values()))
    assert log["loss"] == [0.0] * 12


def test_the_runs_are_repeatable_and_the_seed_orders_the_pairs(small, evalset):
    def run(seed):
        return dpo.train_dpo(
            small,
            small,
            dpo.DPOConfig(**{**TINY, "steps": 3, "eval_every": 3}, seed=seed),
            evalset=evalset,
            progress=False,
        )[1]["loss"]

    assert run(0) == run(0) and run(0) != run(1)


def test_n_pairs_trains_on_the_first_pairs_only(small, evalset, monkeypatch):
    seen = []
    real = dpo.sequence_logps

    def spy(model, prompts, completions):
        if model is not small and len(prompts) == 2 * TINY["batch_size"]:  # a training step's pass
            seen.append(prompts[: len(prompts) // 2].clone())
        return real(model, prompts, completions)

    monkeypatch.setattr(dpo, "sequence_logps", spy)
    cfg = dpo.DPOConfig(**{**TINY, "steps": 6}, n_pairs=32)
    _, log = dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False)
    first = dpo.preference_pairs(0.0, TINY["rm_config"])[0][:32]
    used = torch.cat(seen)  # the six training steps' prompts: each of the 32 pairs, three times
    assert log["n_pairs"] == 32 and len(used) == 96
    assert sorted(map(tuple, used.tolist())) == sorted(map(tuple, first.repeat(3, 1).tolist()))
    with pytest.raises(ValueError, match="n_pairs must be None or a whole number >= batch_size"):
        dpo.DPOConfig(batch_size=64, n_pairs=10)
    with pytest.raises(ValueError, match="n_pairs must be at most the 64 pairs"):
        dpo.train_dpo(small, small, dpo.DPOConfig(**TINY, n_pairs=100), evalset=evalset, progress=False)


@torch.no_grad()
def test_the_implicit_reward_margins_are_beta_times_the_log_ratios(small):
    torch.manual_seed(1)
    other = TinyGPT(GPTConfig(n_layer=1, n_embd=16, n_head=2)).eval()
    pairs = task.eval_pairs()[:20]
    prompts, chosen, rejected = reward_model.preference_batch(pairs, torch.Generator().manual_seed(7), "near_miss")
    want = 0.3 * (
        (dpo.sequence_logps(other, prompts, chosen) - dpo.sequence_logps(small, prompts, chosen))
        - (dpo.sequence_logps(other, prompts, rejected) - dpo.sequence_logps(small, prompts, rejected))
    )
    got = dpo.implicit_reward_margins(other, small, 0.3, "near_miss", pairs)
    assert torch.allclose(got, want, atol=1e-5)
    same = dpo.implicit_reward_report(small, small, 0.3)  # policy = reference: no preference at all
    assert same["pair_accuracy"] == 0.0 and same["margin"]["random"] == 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"steps": 0}, "steps"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"eval_every": 0}, "eval_every"),
        ({"beta": 0.0}, "beta must be > 0"),
        ({"lr": -1.0}, "lr must be > 0"),
        ({"near_miss_share": 2.0}, "near_miss_share"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dpo.DPOConfig(**kwargs)


def test_the_sft_control_is_the_cross_entropy_of_the_chosen_tokens(small, evalset):
    from minirlhf.model import completion_logits, completion_mask

    cfg = dpo.DPOConfig(**{**TINY, "steps": 2}, loss_type="sft")
    _, log = dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False)
    # step 1 runs on the start: its loss is the token-mean cross-entropy of the first batch's chosen answers
    prompts, chosen, _ = dpo.preference_pairs(0.0, TINY["rm_config"])
    idx = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(0))[: TINY["batch_size"]]
    logits = completion_logits(small, prompts[idx], chosen[idx])  # (B, 4, V)
    ce = F.cross_entropy(logits.flatten(0, 1), chosen[idx].flatten(), reduction="none").view(chosen[idx].shape)
    mask = completion_mask(chosen[idx])
    assert log["loss"][0] == pytest.approx(((ce * mask).sum() / mask.sum()).item(), rel=1e-5)
    with pytest.raises(ValueError, match="loss_fn replaces DPO's sigmoid loss"):
        dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False, loss_fn=dpo.dpo_loss)
    with pytest.raises(ValueError, match="loss_type must be one of"):
        dpo.DPOConfig(loss_type="ipo")


def test_the_reference_log_probs_are_kept_per_reference_and_pairs_and_change_nothing(small, evalset):
    dpo._REFERENCE_LOGPS.clear()
    cfg = dpo.DPOConfig(**{**TINY, "steps": 3, "eval_every": 3})
    first = dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False)[1]
    assert len(dpo._REFERENCE_LOGPS) == 1
    again = dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False)[1]
    assert len(dpo._REFERENCE_LOGPS) == 1 and again["loss"] == first["loss"]
    dpo._REFERENCE_LOGPS.clear()  # computed afresh: the same numbers, bit for bit
    assert dpo.train_dpo(small, small, cfg, evalset=evalset, progress=False)[1]["loss"] == first["loss"]
    other = copy.deepcopy(small)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)  # another reference: its own log-probs
    dpo.train_dpo(other, other, cfg, evalset=evalset, progress=False)
    dpo.train_dpo(small, small, dataclasses.replace(cfg, near_miss_share=0.5), evalset=evalset, progress=False)
    assert len(dpo._REFERENCE_LOGPS) == 3


def test_runs_handed_to_workers_find_the_references_log_probs_already_computed(monkeypatch):
    """The reference's log-probs of the 12,800 pairs are the same for every DPO run from one
    policy: run_arms computes them once, before the workers are forked, not once per worker."""
    from minirlhf import experiment, parallel
    from minirlhf.model import GPTConfig, TinyGPT

    torch.manual_seed(3)
    policy = TinyGPT(GPTConfig()).eval()
    dpo._REFERENCE_LOGPS.clear()
    seen = []
    monkeypatch.setattr(parallel, "map_runs", lambda *a, **k: seen.append(len(dpo._REFERENCE_LOGPS)) or [])
    from minirlhf.ppo import PPOConfig

    experiment.run_arms([("dpo", 0, None), ("dpo", 1, 0.5), ("rm", 0, None)], policy, None, PPOConfig())
    assert seen == [1]  # one set of pairs, computed here before the runs were handed out
    experiment.run_arms([("dpo-near-miss", 0, None)], policy, None, dpo.DPOConfig())
    assert seen == [1, 2]  # other pairs: computed, and the first kept


def test_steps_train_on_the_pairs_handed_to_them(small):
    cfg = dpo.DPOConfig(**{**TINY, "steps": 3})
    pairs = dpo.preference_pairs(0.0, TINY["rm_config"])

    def last(data=None):
        return [model for _, model, _ in dpo.steps(small, small, cfg, data=data)][-1].state_dict()

    # the config's own pairs handed over are the config's run, to the last bit
    assert all(torch.equal(a, b) for a, b in zip(last().values(), last(pairs).values()))
    # other pairs (the rejected answers swapped for the chosen): another run, and its own reference log-probs
    dpo._REFERENCE_LOGPS.clear()
    swapped = last((pairs[0], pairs[2], pairs[1]))
    assert len(dpo._REFERENCE_LOGPS) == 1 and not torch.equal(swapped["head.weight"], last()["head.weight"])
    dpo.prepare_reference(small, cfg, (pairs[0], pairs[2], pairs[1]))
    assert len(dpo._REFERENCE_LOGPS) == 2  # the same key as the run's: computed once


@pytest.mark.parametrize(
    "data",
    [
        lambda p: p[:2],
        lambda p: (p[0].double(), p[1], p[2]),
        lambda p: (p[0][:5], p[1], p[2]),
        lambda p: (p[0][:, :4], p[1], p[2]),
        lambda p: (p[0][:0], p[1][:0], p[2][:0]),
        lambda p: (p[0], p[1].tolist(), p[2]),
    ],
)
def test_pairs_of_another_form_are_refused_in_one_line(small, data):
    pairs = dpo.preference_pairs(0.0, TINY["rm_config"])
    with pytest.raises(ValueError, match=r"data must be \(prompts \(N, 6\), chosen \(N, 4\), rejected \(N, 4\)\)"):
        next(dpo.steps(small, small, dpo.DPOConfig(**TINY), data=data(pairs)))
