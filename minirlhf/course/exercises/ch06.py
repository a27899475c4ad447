"""Chapter 6 exercise: the prompt's share of a reward's variance over a batch."""

import numpy as np
import torch

from ...studies.robustness import prompt_share
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectFloat

# ----------------------------------------------------------------------------- 6.1 the share


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _case(rewards, group_size, expected, why) -> Case:
    return Case({"rewards": _t(rewards), "group_size": group_size}, expected, why)


def _random_kwargs(rng: np.random.Generator) -> dict:
    """P prompts with K completions each, side by side (now and then 64 rewards, 16 prompts of
    4, as in a run's batch). The rewards lie on a grid of 1/8 (exact in float32), so that equal
    rewards are exactly equal, except that an all-equal batch is now and then at a value float32
    cannot hold (0.1, 1.3, ...)."""
    P, K = int(rng.integers(1, 9)), int(rng.integers(2, 7))
    if rng.random() < 0.15:  # a run's batch of 64 rewards
        P, K = 16, 4
    kind = rng.random()
    if kind < 0.1:  # all rewards equal, now and then at a value float32 cannot hold exactly
        r = np.full((P, K), rng.integers(-16, 17) / 8 if rng.random() < 0.5 else rng.choice([0.1, 0.3, 1.3, 2.2]))
    elif kind < 0.35:  # a verifier: 0 or 1, each prompt with its own chance of a right answer
        r = (rng.random((P, K)) < rng.random((P, 1))).astype(float)
    else:  # a score: a prompt's offset plus the answer's part
        r = rng.normal(0.0, rng.choice([0.2, 1.0, 3.0]), (P, 1)) + rng.normal(0.0, rng.choice([0.3, 1.0]), (P, K))
        r = np.round(r * 8) / 8
        r[rng.random(P) < 0.2] = r[0, 0]  # a few prompts whose answers all score alike
    return {"rewards": torch.from_numpy(r.reshape(-1).astype(np.float32)), "group_size": K}


def _slip(kind: str):
    """Return prompt_share with one usual slip (see ``SLIPS``)."""
    known_slip(
        kind,
        (
            "unbiased",
            "unbiased-within",
            "unbiased-total",
            "std",
            "std-squared",
            "axis-0",
            "swapped",
            "interleaved",
            "answer-share",
            "all-equal",
            "zero-variance",
        ),
    )

    def share(rewards, group_size):
        r = rewards.double()
        if kind == "zero-variance":  # tests the float32 variance for 0 in place of the rewards for equality
            total32 = rewards.float().var(unbiased=False)
            if bool(total32 == 0):
                return 0.0
            within32 = rewards.float().view(-1, group_size).var(1, unbiased=False).mean()
            return float(1 - within32 / total32)
        if bool((r == r[0]).all()):
            return 1.0 if kind == "all-equal" else 0.0
        groups = {
            "axis-0": r.view(-1, group_size).T,
            "swapped": r.view(group_size, -1),
            "interleaved": r.view(group_size, -1).T,
        }.get(kind, r.view(-1, group_size))  # a row per group, as the slip takes it
        unbiased_within = kind in ("unbiased", "unbiased-within")
        unbiased_total = kind in ("unbiased", "unbiased-total")
        within = groups.var(1, unbiased=unbiased_within).mean()
        total = r.var(unbiased=unbiased_total)
        if kind == "std":
            within, total = groups.std(1, unbiased=False).mean(), r.std(unbiased=False)
        if kind == "std-squared":
            within = groups.std(1, unbiased=False).mean() ** 2
        if kind == "answer-share":
            return float(within / total)
        return float(1 - within / total)

    return share


SLIPS = (
    Slip(
        "unbiased",
        _slip("unbiased"),
        "that divides both variances by n - 1 (unbiased=True, ddof=1): divide by the count, unbiased=False",
    ),
    Slip(
        "unbiased",
        _slip("unbiased-within"),
        "that divides the within-prompt variances by n - 1 (torch's default): pass unbiased=False",
    ),
    Slip(
        "unbiased",
        _slip("unbiased-total"),
        "that divides the total variance by n - 1 (torch's default): pass unbiased=False",
    ),
    Slip(
        "std",
        _slip("std"),
        "that is 1 - mean within-prompt std / total std: average variances, not standard deviations",
    ),
    Slip("std", _slip("std-squared"), "that squares the mean within-prompt std: average the variances, then divide"),
    Slip(
        "wrong-axis",
        _slip("axis-0"),
        "that takes the variance down the columns (dim 0), across "
        "prompts: a prompt's completions are a row, so use dim 1",
    ),
    Slip(
        "wrong-axis",
        _slip("swapped"),
        "that reshapes to (group_size, -1): one prompt per row is reshape(-1, group_size)",
    ),
    Slip(
        "wrong-axis",
        _slip("interleaved"),
        "that groups every (N / group_size)-th reward, as if the "
        "batch were made by repeat: a prompt's completions sit "
        "side by side",
    ),
    Slip(
        "answer-share",
        _slip("answer-share"),
        "that is the answer's share, within / total: the prompt's share is 1 minus it",
    ),
    Slip(
        "all-equal",
        _slip("all-equal"),
        "equal rewards have no variance, so none of it is the prompt's: the contract returns 0.0",
    ),
    Slip(
        "all-equal",
        _slip("zero-variance"),
        "that tests the variance for 0, and the float32 variance of "
        "equal rewards such as 1.3 comes out near 1e-14, not 0: test "
        "the rewards for equality, (rewards == rewards[0]).all()",
    ),
)


PROMPT_SHARE = Exercise(
    name="prompt_share",
    chapter=6,
    title="The prompt's share of a reward's variance",
    expect=ExpectFloat(atol=1e-4, what="the share", slips=SLIPS),
    cases=(
        _case(
            [0.0, 2.0, 2.0, 4.0],
            2,
            0.5,
            "the example: prompt means 1 and 3, within-prompt variance 1 each, total variance 2; 1 - 1 / 2",
        ),
        _case(
            [0.0, 2.0, 2.0, 4.0],
            4,
            0.0,
            "the same rewards as one prompt with 4 completions: all the variance is within it",
        ),
        _case(
            [1.0, 1.0, 3.0, 3.0],
            2,
            1.0,
            "every completion of a prompt scores the same: within-prompt variance 0, share 1",
        ),
        _case([0.0, 2.0, 0.0, 2.0], 2, 0.0, "the same two scores under both prompts: equal prompt means, share 0"),
        _case(
            [1.0, 1.0, 1.0, 5.0, 5.0, 5.0],
            3,
            1.0,
            "a prompt's completions sit side by side: the groups are [1, 1, 1] and [5, 5, 5], "
            "not [1, 1], [1, 5], [5, 5]",
        ),
        _case(
            [1.0, 1.0, 1.0, 0.0, 3.0, 3.0],
            3,
            0.2,
            "the first prompt's answers all score 1 (variance 0), the second's variance is 2; "
            "within 1, total 1.25, share 1 - 1 / 1.25 (0.0 if both divide by n - 1)",
        ),
        _case([0.5] * 6, 3, 0.0, "all rewards equal: no variance to split (0 / 0), and the contract returns 0.0"),
        _case(
            [-1.5, -0.5, 2.0, 3.0],
            2,
            49 / 53,
            "RM-like scores: prompt means -1 and 2.5, within 0.25, total 53 / 16 = 3.3125, share "
            "1 - 0.25 / 3.3125 = 0.9245",
        ),
        _case(
            [0.0, 1.0, 4.0, 5.0, 8.0, 10.0],
            2,
            217 / 226,
            "3 prompts of 2 (not square, so a wrong axis shows): within (0.25 + 0.25 + 1) / 3 = 0.5, "
            "total 113 / 9 = 12.56, share 1 - 0.5 / 12.56 = 0.9602",
        ),
        _case(
            [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0],
            4,
            5 / 9,
            "a verifier's 0 or 1, 4 prompts of 4: within (0 + 0 + 0.25 + 0.1875) / 4 = 7 / 64, "
            "total 9 / 16 * 7 / 16 = 63 / 256, share 1 - 4 / 9 = 5 / 9",
        ),
        _case(
            [1.3] * 6,
            3,
            0.0,
            "all rewards equal at 1.3, which float32 cannot hold exactly: the variance of the six equal "
            "floats can come out near 1e-14 instead of 0, and the share is still 0.0",
        ),
    ),
    hints=(
        "Put one prompt per row: `groups = rewards.reshape(-1, group_size)`, shape (N / group_size, "
        "group_size), since a prompt's completions sit side by side. Check first that group_size is at "
        "least 2 and divides `len(rewards)`; if not, raise a ValueError that names group_size.",
        "The answer's part is the variance among a prompt's completions, averaged over the prompts: "
        "`within = groups.var(dim=1, unbiased=False).mean()`. Average variances, not standard "
        "deviations: variances add up (total = between + within), standard deviations do not.",
        "The total is the variance of all N rewards, `total = rewards.var(unbiased=False)`. Both variances "
        "divide by their count: torch's `.var()` divides by n - 1 unless told `unbiased=False` (NumPy's "
        "`ddof=0`), and then the two parts no longer add up to the total.",
        "The prompt's share is what the answers leave over: return `float(1 - within / total)`, a Python "
        "float. When all rewards are equal there is nothing to split (0 / 0 is NaN): return 0.0 before "
        "dividing.",
    ),
    reference=prompt_share,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=("minirlhf.estimators.group_centred.group_centred_advantages",),
    random_kwargs=_random_kwargs,
    # the groups (1), the within-prompt variance (2), the divisor (3), the share, its type and
    # the equal rewards (4)
    hint_for={
        "wrong-axis": 1,
        "std": 2,
        "unbiased": 3,
        "answer-share": 4,
        "all-equal": 4,
        "nan": 4,
        "inf": 4,
        "type": 4,
        "numpy-scalar": 4,
        "int": 4,
    },
)

IN_THIS_CHAPTER = (PROMPT_SHARE,)
