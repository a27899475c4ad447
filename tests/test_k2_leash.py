"""The leash "k2 in the loss": one module of minirlhf.leashes, found by the table, run by the
update, keyed on its own code, and run from the command line by its arm."""

import json

import pytest
import torch

from minirlhf import experiment, leashes, task
from minirlhf.arms import REGISTRY
from minirlhf.commands import experiment as command
from minirlhf.evaluation import EvalSet
from minirlhf.leashes.k2_loss import k2_loss_term, k2_token_loss
from minirlhf.leashes.reward import ppo_token_loss
from minirlhf.model import GPTConfig, TinyGPT


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_k2_by_hand():
    new = t([[-1.0, -2.0, -3.0]]).requires_grad_(True)
    ref = t([[-1.5, -2.0, -9.0]])
    term = k2_loss_term(new, ref, t([[1.0, 1.0, 0.0]]))
    assert term.item() == pytest.approx((0.5 * 0.5**2 + 0.0) / 2)  # the masked token does not count
    term.backward()
    assert new.grad[0].tolist() == pytest.approx([0.5 / 2, 0.0, 0.0])  # d (d^2 / 2) = d, over 2 tokens


def test_the_loss_is_the_surrogate_plus_beta_k2():
    new, old, ref = t([[-1.0, -2.0]]), t([[-1.1, -2.2]]), t([[-1.3, -1.0]])
    adv, mask = t([[0.5, 0.5]]), t([[1.0, 1.0]])
    got = k2_token_loss(new, old, ref, adv, mask, 0.2, 0.3, 10.0)
    want = ppo_token_loss(new, old, adv, mask, 0.2) + 0.3 * (0.5 * (0.3**2 + 1.0**2) / 2)
    assert got.item() == pytest.approx(want.item())


def test_on_its_own_samples_k2s_gradient_is_the_reverse_kls():
    """Exactly, by enumeration over a three-token vocabulary: E_pi[grad k2] = grad KL(pi || ref)."""
    logits = t([0.3, -0.2, 0.5]).requires_grad_(True)
    ref = torch.log_softmax(t([0.0, 0.4, -0.1]), 0)
    logp = torch.log_softmax(logits, 0)
    p = logp.exp().detach()
    (p * 0.5 * (logp - ref) ** 2).sum().backward()  # the expectation over the policy's samples, not differentiated
    k2_grad = logits.grad.clone()
    logits.grad = None
    logp = torch.log_softmax(logits, 0)
    (logp.exp() * (logp - ref)).sum().backward()  # KL(pi || ref), differentiated through the sampling too
    assert torch.allclose(k2_grad, logits.grad, atol=1e-12)


def test_the_table_finds_it_and_its_arm_runs_it():
    assert "k2-loss" in leashes.names() and not leashes.get("k2-loss").in_reward
    arm = REGISTRY["grpo-k2-verifier"]
    assert arm.settings["kl_placement"] == "k2-loss"


def test_it_runs_from_the_command_line(monkeypatch, tmp_path, capsys):
    # Small untrained models stand in for the trained ones, so the run takes a second.
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).double().eval(), TinyGPT(small, scalar_head=True).double().eval()
    monkeypatch.setattr(experiment, "load_sft", lambda **kw: (policy, {"accuracy": 0.0}))
    monkeypatch.setattr(experiment, "load_rm", lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5}))
    monkeypatch.setattr(experiment, "EvalSet", lambda: EvalSet(task.eval_pairs()[:40]))
    argv = ["--arms", "grpo-k2-verifier", "--seeds", "1", "--iterations", "2", "--workers", "1"]
    assert command.main([*argv, "--out", str(tmp_path)]) == 0
    assert "grpo-k2-verifier" in capsys.readouterr().out  # its row of the table
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["arm_settings"]["grpo-k2-verifier"]["kl_placement"] == "k2-loss"
    assert len(results["arms"]["grpo-k2-verifier"]["0"]["kl"]) == 3  # the start and two iterations
