"""The blind-spot study of chapters 3 and 4: near-misses sorted by the digits they change,
intervals that resample prompts, and the table on reward models whose blindness is known."""

import numpy as np
import pytest
import torch

from minirlhf import store, task
from minirlhf.studies import rm_blind_spot as bs


@pytest.mark.parametrize(
    "truth, answer, kind",
    [
        (68, 67, "ones_digit"),
        (68, 60, "ones_digit"),
        (68, 69, "ones_digit"),
        (68, 58, "tens_digit"),
        (68, 78, "tens_digit"),
        (100, 110, "tens_digit"),
        (0, 10, "tens_digit"),  # 0 reads as 00: only the tens digit changes
        (68, 71, "several_digits"),
        (68, 59, "several_digits"),
        (68, 70, "several_digits"),
        (102, 98, "several_digits"),
        (5, 12, "several_digits"),
        (95, 105, "several_digits"),
    ],
)
def test_near_miss_class_by_hand(truth, answer, kind):
    assert bs.near_miss_class(truth, answer) == kind


def test_what_is_not_a_near_miss_is_refused():
    for truth, answer in ((68, 68), (68, 79), (68, 57), (68, 6)):
        with pytest.raises(ValueError, match="not a near-miss"):
            bs.near_miss_class(truth, answer)
    with pytest.raises(ValueError, match="0..999"):
        bs.digits_changed(68, 1000)


def test_composition_of_the_window():
    assert bs.composition([68]) == {"ones_digit": 9, "tens_digit": 2, "several_digits": 9}
    # 3: 0..2 and 4..9 differ in the ones digit only, 13 in the tens digit only, 10..12 in both
    assert bs.composition([3]) == {"ones_digit": 9, "tens_digit": 1, "several_digits": 3}
    truths = task.eval_pairs().sum(1).tolist()
    assert sum(bs.composition(truths).values()) == sum(len(task.near_misses(t)) for t in truths)


def test_every_near_miss_lists_the_window_of_each_prompt():
    pairs = torch.tensor([[23, 45], [1, 2], [99, 99]])
    index, answers, classes = bs.every_near_miss(pairs)
    for i, truth in enumerate(pairs.sum(1).tolist()):
        assert answers[index == i].tolist() == task.near_misses(truth)
    assert classes == [bs.near_miss_class(int(pairs[i].sum()), int(n)) for i, n in zip(index, answers)]


def test_prompt_bootstrap_resamples_prompts_not_pairs():
    assert bs.prompt_bootstrap([1, 1, 1, 1], [0, 0, 1, 1]) == (1.0, 1.0)
    rng = np.random.default_rng(0)
    per_prompt = rng.random(200) < 0.5  # one verdict per prompt, copied to 20 pairs each
    right, prompt = np.repeat(per_prompt, 20), np.repeat(np.arange(200), 20)
    low, high = bs.prompt_bootstrap(right, prompt)
    assert low < right.mean() < high
    # 200 independent verdicts, not 4,000: about +-1.96 * sqrt(0.25 / 200) = +-0.069
    assert high - low == pytest.approx(2 * 1.96 * np.sqrt(0.25 / 200), rel=0.15)
    assert bs.prompt_bootstrap(right, prompt) == (low, high)  # seeded
    with pytest.raises(ValueError, match="same length"):
        bs.prompt_bootstrap([1, 0], [0])


class ScoreByRule(torch.nn.Module):
    """A stand-in reward model that scores the stated answer by a rule (NaN when malformed)."""

    scalar_head = True

    def __init__(self, rule):
        super().__init__()
        self.rule = rule

    def forward(self, x):  # (B, 10) -> (B, 10): the same score at every position
        scores = []
        for row in x.tolist():
            prompt = task.decode(row[: task.PROMPT_LEN]).lstrip(";")
            a, b = (int(v) for v in prompt[:-1].split("+"))
            answer = task.parse_completion(task.decode_completions(torch.tensor([row[task.PROMPT_LEN :]]))[0])
            scores.append(float(self.rule(a + b, answer)))
        return torch.tensor(scores)[:, None].expand(-1, x.shape[1])


def test_the_table_routes_each_kind_of_near_miss_to_its_row():
    pairs = task.eval_pairs()[:40]
    # a judge that reads only the tens and hundreds digits: blind to the ones digit alone
    tens_reader = ScoreByRule(lambda truth, answer: -abs(answer // 10 - truth // 10))
    table = bs.blind_spot_table(tens_reader, pairs, n_boot=200)
    assert list(table) == list(bs.ROWS)
    assert table["ones_digit"]["accuracy"] == 0.0 and table["ones_digit"]["margin"] == 0.0
    assert table["tens_digit"]["accuracy"] == 1.0 and table["tens_digit"]["margin"] == 1.0
    assert table["several_digits"]["accuracy"] == 1.0
    assert table["random"]["pairs"] == table["random"]["prompts"] == 40
    near = table["near_miss"]
    assert near["pairs"] == sum(table[c]["pairs"] for c in bs.NEAR_MISS_CLASSES)
    assert near["pairs"] == sum(len(task.near_misses(int(t))) for t in pairs.sum(1))
    # the verifier as a judge ranks every pair right
    exact = bs.blind_spot_table(ScoreByRule(lambda truth, answer: float(answer == truth)), pairs, n_boot=200)
    for row in bs.ROWS:
        assert exact[row]["accuracy"] == 1.0 and (exact[row]["low"], exact[row]["high"]) == (1.0, 1.0)
    text = bs.format_table(exact)
    assert all(bs.LABELS[row] in text for row in bs.ROWS) and "1.000 [1.000, 1.000]" in text


def test_the_books_reward_model_is_blind_to_the_ones_digit_but_not_to_the_tens():
    """What chapters 3 and 4 say about the book's reward model, checked on it."""
    rm, _ = store.load_rm(progress=False)
    table = bs.blind_spot_table(rm)
    ones, tens, several = table["ones_digit"], table["tens_digit"], table["several_digits"]
    # barely better than a coin toss: under 0.6 with its whole interval, a margin near 0
    assert ones["accuracy"] < 0.6 and ones["high"] < 0.6 and abs(ones["margin"]) < 0.1
    assert tens["low"] > 0.55 and tens["margin"] > 0.15  # caught more often than not, by a little
    assert ones["accuracy"] < several["accuracy"] < tens["accuracy"]
    for far in ("random", "wrong_length"):
        assert table[far]["low"] > 0.85 and table[far]["margin"] > 2.0  # garbage is spotted
