"""The arithmetic task: tokens, the eval set, parsing, the verifier and the kinds of wrong answer."""

import math

import pytest
import torch

from minirlhf import task


def test_vocab_and_round_trip():
    assert task.VOCAB == "0123456789+=;" and len(task.VOCAB) == 13
    assert task.encode("23+45=") == [2, 3, 10, 4, 5, 11]
    assert task.decode(task.encode("68;")) == "68;"
    with pytest.raises(ValueError, match="vocabulary"):
        task.encode("2*3")


def test_prompts_are_left_padded_to_six_tokens():
    prompts = task.encode_prompts(torch.tensor([[23, 45], [7, 5], [99, 99]]))
    assert prompts.shape == (3, 6)
    assert [task.decode(p) for p in prompts] == ["23+45=", ";;7+5=", "99+99="]
    answers = task.correct_completions(torch.tensor([[23, 45], [7, 5], [99, 99]]))
    assert [task.decode(a) for a in answers] == ["68;;", "12;;", "198;"]


def test_eval_set_is_fixed_distinct_and_held_out():
    first, second = task.eval_pairs(), task.eval_pairs()
    assert first.shape == (400, 2) and torch.equal(first, second)
    codes = first[:, 0] * 100 + first[:, 1]
    assert codes.unique().numel() == 400
    train = task.train_pairs()
    assert len(train) == 9600
    assert not set(codes.tolist()) & set((train[:, 0] * 100 + train[:, 1]).tolist())


def test_sample_pairs_is_seeded_and_in_range():
    a = task.sample_pairs(50, torch.Generator().manual_seed(3))
    b = task.sample_pairs(50, torch.Generator().manual_seed(3))
    assert torch.equal(a, b) and a.min() >= 0 and a.max() <= 99
    with pytest.raises(ValueError, match="n must be"):
        task.sample_pairs(0, torch.Generator())


@pytest.mark.parametrize(
    "text, expected",
    [
        ("68;", 68),
        ("0;", 0),
        ("198;", 198),
        ("68;5;", 68),  # read up to the first `;`
        ("7;;;", 7),
        ("", None),  # empty completion
        (";", None),  # nothing before the `;`
        ("68", None),  # no `;`
        ("6868", None),  # four tokens, no `;`
        ("07;", None),  # leading zero
        ("00;", None),
        ("1234;", None),  # too long
        ("6+8;", None),
        ("=;", None),
    ],
)
def test_parse_completion(text, expected):
    assert task.parse_completion(text) == expected


def test_verify():
    assert task.verify(23, 45, "68;") == 1.0
    assert task.verify(23, 45, "68;;") == 1.0
    assert task.verify(23, 45, "67;") == 0.0
    assert task.verify(23, 45, "068;") == 0.0
    assert task.verify(0, 0, "0;") == 1.0


def test_near_misses_by_hand():
    assert task.near_misses(68) == list(range(58, 68)) + list(range(69, 79))
    assert task.near_misses(3) == [0, 1, 2] + list(range(4, 14))  # nothing below 0
    assert task.is_near_miss(68, 78) and task.is_near_miss(68, 59) and task.is_near_miss(68, 61)
    assert not task.is_near_miss(68, 79)  # 11 away
    assert not task.is_near_miss(68, 68)  # right is not a miss
    assert not task.is_near_miss(68, 168)


def test_answer_kind():
    assert task.answer_kind(23, 45, "68;") == "correct"
    assert task.answer_kind(23, 45, "67;") == "near_miss"
    assert task.answer_kind(23, 45, "78;") == "near_miss"
    assert task.answer_kind(23, 45, "79;") == "other_wrong"
    assert task.answer_kind(23, 45, "90;") == "other_wrong"
    assert task.answer_kind(23, 45, "68") == "malformed"
    assert task.answer_kind(23, 45, "068;") == "malformed"


def test_batch_helpers_cut_at_first_semicolon():
    pairs = torch.tensor([[23, 45], [23, 45], [1, 1]])
    comps = torch.stack([torch.tensor(task.encode(s)) for s in ["68;9", "67;;", "2222"]])
    assert task.decode_completions(comps) == ["68;", "67;", "2222"]
    assert task.batch_verify(pairs, comps).tolist() == [1.0, 0.0, 0.0]
    assert task.batch_kinds(pairs, comps) == ["correct", "near_miss", "malformed"]
    offsets = task.answer_offsets(pairs, comps)
    assert offsets[:2].tolist() == [0.0, -1.0] and math.isnan(offsets[2])


def test_wrong_answers_have_their_kind():
    g = torch.Generator().manual_seed(0)
    pairs = task.eval_pairs()
    truth = pairs.sum(1)

    def numbers(kind):
        return torch.tensor(
            [task.parse_completion(t) for t in task.decode_completions(task.wrong_answers(pairs, kind, g))]
        )

    garbage = numbers("random")
    assert (garbage != truth).all() and not task.near_miss_mask(truth, garbage).any()
    assert garbage.min() >= 0 and garbage.max() <= task.MAX_SUM
    assert task.near_miss_mask(truth, numbers("near_miss")).all()
    ones = numbers("ones_off_by_one")
    assert ((ones - truth).abs() == 1).all() and (ones // 10 == truth // 10).all()
    tens = numbers("tens_off_by_one")
    assert ((tens - truth).abs() == 10).all()
    garbage_gap = (garbage - truth).abs()
    assert garbage_gap.min() > task.NEAR_MISS_WINDOW
    length = numbers("wrong_length")
    assert all(len(str(a)) != len(str(t)) for a, t in zip(length.tolist(), truth.tolist()))
    edge = torch.tensor([[0, 0], [0, 5], [99, 99]])  # sums 0, 5, 198
    got = task.decode_completions(task.wrong_answers(edge, "wrong_length", g))
    assert all(len(t) - 1 != len(str(s)) for t, s in zip(got, [0, 5, 198]))  # "-1": the `;`
    with pytest.raises(ValueError, match="kind"):
        task.wrong_answers(pairs, "nonsense", g)


def test_near_miss_mask_agrees_with_is_near_miss():
    truth = torch.arange(199).repeat_interleave(220)
    answer = torch.arange(220).repeat(199)
    slow = torch.tensor([task.is_near_miss(t, a) for t, a in zip(truth.tolist(), answer.tolist())])
    assert torch.equal(task.near_miss_mask(truth, answer), slow)


def test_kind_transitions_by_hand():
    before = ["correct", "correct", "correct", "near_miss"]
    after = ["correct", "near_miss", "near_miss", "other_wrong"]
    got = task.kind_transitions(before, after)
    assert set(got) == {"correct", "near_miss"}
    assert got["correct"] == {"correct": 1 / 3, "near_miss": 2 / 3, "other_wrong": 0.0, "malformed": 0.0}
    assert got["near_miss"]["other_wrong"] == 1.0
    with pytest.raises(ValueError, match="before"):
        task.kind_transitions(before, after[:2])
