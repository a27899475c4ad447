"""SFT: the masked loss worked by hand, the batch layout, and a short deterministic run."""

import math

import pytest
import torch

from minirlhf import task
from minirlhf.sft import SFTConfig, greedy_accuracy, masked_sft_loss, sft_batch, train_sft


def test_masked_loss_by_hand():
    # Two positions over a 2-token vocabulary. Position 0 (masked out) is confidently wrong;
    # position 1 has logits (0, 0) and target 1: cross-entropy ln 2.
    logits = torch.tensor([[[10.0, -10.0], [0.0, 0.0]]])
    targets = torch.tensor([[1, 1]])
    mask = torch.tensor([[0.0, 1.0]])
    assert math.isclose(masked_sft_loss(logits, targets, mask).item(), math.log(2), rel_tol=1e-6)
    # Unmasked, the mean includes position 0's cross-entropy of about 20.
    both = masked_sft_loss(logits, targets, torch.ones(1, 2)).item()
    assert math.isclose(both, (20.0 + math.log(2)) / 2, rel_tol=1e-4)


def test_masked_positions_get_no_gradient():
    logits = torch.randn(2, 3, 13, requires_grad=True)
    targets = torch.randint(13, (2, 3))
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    masked_sft_loss(logits, targets, mask).backward()
    assert (logits.grad[mask == 0] == 0).all()
    assert (logits.grad[mask == 1].abs().sum(-1) > 0).all()


def test_masked_loss_rejects_bad_input():
    with pytest.raises(ValueError, match="mask"):
        masked_sft_loss(torch.zeros(1, 2, 13), torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="agree"):
        masked_sft_loss(torch.zeros(1, 2, 13), torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3))


def test_sft_batch_layout_by_hand():
    inputs, targets, mask = sft_batch(torch.tensor([[23, 45], [99, 99], [7, 5]]))
    assert task.decode(inputs[0]) == "23+45=68;" and task.decode(targets[0]) == "3+45=68;;"
    assert mask[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0]  # '6', '8', ';'
    assert mask[1].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]  # '1', '9', '8', ';'
    assert task.decode(inputs[2]) == ";;7+5=12;" and mask[2].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0]


def test_short_run_is_deterministic_and_learns():
    cfg = SFTConfig(steps=20, batch_size=16)
    m1, log1 = train_sft(cfg, progress=False)
    m2, log2 = train_sft(cfg, progress=False)
    assert log1["loss"] == log2["loss"]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert log1["loss"][-1] < log1["loss"][0] - 0.5  # from about ln 13 = 2.56 toward the digits
    assert log1["steps"] == [20]
    assert log1["accuracy"] == [greedy_accuracy(m1)]  # the log's accuracy is the model's, on the eval set
    with pytest.raises(ValueError, match="steps"):
        train_sft(SFTConfig(steps=0), progress=False)


def test_a_kept_model_is_the_shorter_run_bit_for_bit():
    """Chapter 3 reads the 260-step policy from the learning curve's longer run."""
    from minirlhf.sft import SFTConfig, sft_learning_curve, train_sft

    short, _ = train_sft(SFTConfig(steps=3, batch_size=8), progress=False)
    curve = sft_learning_curve(steps=5, every=2, config=SFTConfig(steps=3, batch_size=8), progress=False, keep=(3,))
    assert list(curve["models"]) == [3]
    kept = curve["models"][3].state_dict()
    assert all(torch.equal(v, kept[k]) for k, v in short.state_dict().items())
    assert "models" not in sft_learning_curve(steps=2, every=1, config=SFTConfig(steps=1, batch_size=8), progress=False)
