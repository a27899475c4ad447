"""The reward model: the Bradley-Terry loss worked by hand, the pairs, and a short run."""

import math

import pytest
import torch

from minirlhf import task
from minirlhf.model import make_generator
from minirlhf.reward_model import (
    RMConfig,
    bradley_terry_loss,
    margin_by_offset,
    preference_batch,
    rm_report,
    train_reward_model,
)


def test_bradley_terry_by_hand():
    # margin 0: -log sigmoid(0) = ln 2; margin +2: ln(1 + e^-2) = 0.1269; margin -2: 2.1269
    assert math.isclose(bradley_terry_loss(torch.tensor([0.0]), torch.tensor([0.0])).item(), math.log(2), rel_tol=1e-6)
    assert math.isclose(bradley_terry_loss(torch.tensor([3.0]), torch.tensor([1.0])).item(), 0.126928, rel_tol=1e-5)
    assert math.isclose(bradley_terry_loss(torch.tensor([1.0]), torch.tensor([3.0])).item(), 2.126928, rel_tol=1e-5)
    # the mean over pairs
    both = bradley_terry_loss(torch.tensor([3.0, 1.0]), torch.tensor([1.0, 3.0])).item()
    assert math.isclose(both, (0.126928 + 2.126928) / 2, rel_tol=1e-5)
    # it stays finite far out
    assert math.isclose(bradley_terry_loss(torch.tensor([-100.0]), torch.tensor([0.0])).item(), 100.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))


def test_bradley_terry_only_sees_the_margin():
    a = bradley_terry_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.0]))
    b = bradley_terry_loss(torch.tensor([11.0, 12.0]), torch.tensor([10.5, 10.0]))
    assert torch.allclose(a, b)


def test_preference_pairs_never_hold_a_near_miss():
    pairs = task.sample_pairs(500, make_generator(0))
    prompts, chosen, rejected = preference_batch(pairs, make_generator(1))
    truth = pairs.sum(1)
    got = torch.tensor([task.parse_completion(t) for t in task.decode_completions(rejected)])
    assert (got != truth).all() and not task.near_miss_mask(truth, got).any()
    assert task.batch_verify(pairs, chosen).all()


def test_short_run_learns_garbage_first():
    rm, log = train_reward_model(RMConfig(steps=25, batch_size=32), progress=False)
    assert log["loss"][-1] < log["loss"][0]
    report = rm_report(rm)
    assert set(report["margin"]) == set(task.WRONG_KINDS)
    assert report["margin"]["wrong_length"] > report["margin"]["ones_off_by_one"]
    # offset 0 compares the truth with itself: margin exactly 0
    pairs = task.eval_pairs()[:50]
    by_offset = margin_by_offset(rm, [0, 1], pairs)
    assert by_offset[0] == 0.0 and set(by_offset) == {0, 1}


def test_rm_from_a_policy_copies_its_body_and_keeps_the_random_head():
    from minirlhf.model import GPTConfig, TinyGPT

    torch.manual_seed(123)
    policy = TinyGPT(GPTConfig())
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    cfg = RMConfig(steps=1, batch_size=8, lr=1e-12)  # one step too small to move a weight visibly
    rm, _ = train_reward_model(cfg, progress=False, init=policy)
    scratch, _ = train_reward_model(cfg, progress=False)
    for k, v in rm.state_dict().items():
        if k.startswith("head."):  # the same random head as the RM from scratch
            assert torch.allclose(v, scratch.state_dict()[k], atol=1e-9), k
        else:  # the body is the policy's
            assert torch.allclose(v, before[k], atol=1e-9), k
    for k, v in policy.state_dict().items():  # init is not changed
        assert torch.equal(v, before[k]), k
    assert rm.scalar_head and not policy.scalar_head


def test_rm_init_must_be_a_language_model():
    from minirlhf.model import GPTConfig, TinyGPT

    with pytest.raises(ValueError, match="init"):
        train_reward_model(RMConfig(steps=1, batch_size=8), progress=False, init=TinyGPT(GPTConfig(), scalar_head=True))
    with pytest.raises(ValueError, match="init"):
        train_reward_model(RMConfig(steps=1, batch_size=8), progress=False, init="policy")
    with pytest.raises(ValueError, match="init"):
        train_reward_model(RMConfig(steps=1, batch_size=8), progress=False, init=TinyGPT(GPTConfig(n_layer=1)))


def test_trained_rm_report_takes_the_seed_and_checks_it():
    from minirlhf.reward_model import trained_rm_report

    cfg = RMConfig(steps=2, batch_size=8)
    rep = trained_rm_report(1, config=cfg)
    rm, _ = train_reward_model(RMConfig(steps=2, batch_size=8, seed=1), progress=False)
    assert rep == rm_report(rm)
    with pytest.raises(ValueError, match="seed"):
        trained_rm_report(-1, config=cfg)
