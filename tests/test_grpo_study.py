"""Chapter 8's small studies: one answer's advantage in a verifier group, the chance of an
all-equal group, and the token weights of the two loss averagings."""

import math

import numpy as np
import pytest
import torch

from minirlhf.studies import grpo


def test_a_lone_right_answer_in_a_group_of_eight_by_hand():
    # rewards (1, 0 x 7): mean 1/8, sample std sqrt((7/8) * (1/8) * 8 / 7) = sqrt(1/8)
    std = math.sqrt(1 / 8)
    right, wrong = grpo.verifier_group(8, 1)
    assert right == pytest.approx((1 - 1 / 8) / (std + 1e-4), abs=1e-5)
    assert wrong == pytest.approx((0 - 1 / 8) / (std + 1e-4), abs=1e-5)
    # without the std: 7/8 and -1/8; RLOO: 1 - 0 and 0 - 1/7
    assert grpo.verifier_group(8, 1, "group-centred") == pytest.approx((7 / 8, -1 / 8))
    assert grpo.verifier_group(8, 1, "rloo") == pytest.approx((1.0, -1 / 7))


def test_all_equal_groups_have_no_signal_and_a_missing_side_is_nan():
    right, wrong = grpo.verifier_group(8, 8)
    assert right == 0.0 and math.isnan(wrong)
    right, wrong = grpo.verifier_group(8, 0)
    assert math.isnan(right) and wrong == 0.0
    with pytest.raises(ValueError, match="n_right"):
        grpo.verifier_group(4, 5)
    with pytest.raises(ValueError, match="estimator"):
        grpo.verifier_group(4, 1, "batch")


def test_the_all_equal_chance():
    assert grpo.all_equal_chance(0.5, 8) == pytest.approx(2 / 256)
    assert np.allclose(grpo.all_equal_chance([0.0, 1.0], 3), [1.0, 1.0])
    # against sampling: 200,000 groups of 4 at p = 0.3
    rng = np.random.default_rng(0)
    groups = rng.random((200_000, 4)) < 0.3
    same = (groups.all(1) | (~groups).all(1)).mean()
    assert same == pytest.approx(grpo.all_equal_chance(0.3, 4), abs=0.003)
    with pytest.raises(ValueError, match="p_right"):
        grpo.all_equal_chance(1.2, 8)


def test_token_weights_sum_to_one_under_both_averagings():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    w = grpo.token_weights(mask)
    assert list(w) == [2, 4] and w[2]["count"] == 1 and w[4]["count"] == 2
    for key in ("token", "completion"):
        assert sum(n * v["count"] * v[key] for n, v in w.items()) == pytest.approx(1.0)
    assert w[2]["token"] == w[4]["token"] == pytest.approx(1 / 10)
    assert w[2]["completion"] == pytest.approx(1 / 6) and w[4]["completion"] == pytest.approx(1 / 12)
    with pytest.raises(ValueError, match="at least one token"):
        grpo.token_weights(torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
