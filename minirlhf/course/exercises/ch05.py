"""Chapter 5 exercises: the leash in the per-token reward (advantages), and the clipped loss."""

import math

import numpy as np
import torch

from ...estimators.batch import kl_shaped_advantages
from ...leashes.reward import ppo_token_loss
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectArray, ExpectScalarTensor
from ._inputs import as_tensor, batch_size, prefix_mask

# ----------------------------------------------------------------------------- 5.1 advantages


class ExpectTokenAdvantages(ExpectArray):
    """A (B, T) torch tensor of advantages; names the usual slips in words."""

    def __init__(self, slips=()):
        super().__init__(atol=1e-4, container="torch", what="the advantages", plural=True, slips=slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if type(got).__module__.startswith("torch") and hasattr(got, "shape"):
            B, T = tuple(expected.shape)
            if tuple(got.shape) == (B,):
                return "per-completion", (
                    f"the advantages have shape ({B},), one number per completion; the "
                    f"leash makes them differ token by token: return shape ({B}, {T})"
                )
            if tuple(got.shape) == (T, B) and B != T:
                return "transposed", f"the advantages have shape ({T}, {B}): transposed, expected ({B}, {T})"
        return super().diagnose(got, expected)


def _adv_case(scores, old, ref, mask, beta, expected, why, kl_clamp=10.0, dtype=torch.float32) -> Case:
    def tensor(values):
        return torch.tensor(values, dtype=dtype)

    return Case(
        {
            "scores": tensor(scores),
            "old_logp": tensor(old),
            "ref_logp": tensor(ref),
            "mask": tensor(mask),
            "beta": beta,
            "kl_clamp": kl_clamp,
        },
        tensor(expected),
        why,
    )


def _adv_random_kwargs(rng: np.random.Generator) -> dict:
    B, T = batch_size(rng, 6), int(rng.integers(1, 5))
    old = rng.uniform(-4.0, -0.05, (B, T))
    ref = old + rng.normal(0.0, 0.5, (B, T))
    if rng.random() < 0.3:  # one runaway token, far from the reference
        ref[int(rng.integers(B)), int(rng.integers(T))] = -40.0
    return {
        "scores": as_tensor(np.clip(rng.normal(0.0, 1.0, B), -3.0, 3.0)),
        "old_logp": as_tensor(old),
        "ref_logp": as_tensor(ref),
        "mask": as_tensor(prefix_mask(rng, B, T)),
        "beta": float(rng.choice([0.0, 0.05, 0.08, 0.5, 1.0])),
        "kl_clamp": float(rng.choice([0.5, 2.0, 10.0])),
    }


def _adv_slip(kind: str):
    """Return kl_shaped_advantages with one usual slip (see ``ADV_SLIPS``)."""
    known_slip(
        kind,
        (
            "kl-sign",
            "no-clamp",
            "clamp-above-only",
            "padding-pays",
            "myopic",
            "no-baseline",
            "baseline-all-rows",
            "baseline-per-row",
            "baseline-nan",
        ),
    )

    def advantages(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0):
        B, T = mask.shape
        kl = (ref_logp - old_logp) if kind == "kl-sign" else (old_logp - ref_logp)
        if kind == "clamp-above-only":
            kl = kl.clamp(max=kl_clamp)
        elif kind != "no-clamp":
            kl = kl.clamp(-kl_clamp, kl_clamp)
        rewards = -beta * kl * (1.0 if kind == "padding-pays" else mask)
        last = mask.sum(1).long() - 1
        rewards = rewards.clone()
        rewards[torch.arange(B), last] += scores
        if kind == "myopic":  # the score on every token, each token paying only its own KL
            returns = (scores[:, None] - beta * kl) * mask
        else:
            returns = rewards.flip(1).cumsum(1).flip(1) * mask
        if kind == "baseline-per-row":
            return (returns - (returns.sum(1) / mask.sum(1))[:, None]) * mask
        baseline = {
            "no-baseline": torch.zeros(T),
            "baseline-all-rows": returns.mean(0),
            "baseline-nan": returns.sum(0) / mask.sum(0),
        }.get(kind, returns.sum(0) / mask.sum(0).clamp(min=1))
        return (returns - baseline) * mask

    return advantages


ADV_SLIPS = (
    Slip("kl-sign", _adv_slip("kl-sign"), "that is kl = ref_logp - old_logp: subtract the other way"),
    Slip("no-clamp", _adv_slip("no-clamp"), "that is the KL without the clamp to [-kl_clamp, kl_clamp]"),
    Slip(
        "no-clamp",
        _adv_slip("clamp-above-only"),
        "that clamps the KL from above only: clamp it to [-kl_clamp, kl_clamp], so that a log-ratio "
        "far below 0 stops at -kl_clamp too",
    ),
    Slip(
        "padding-pays",
        _adv_slip("padding-pays"),
        "that charges the KL of dropped tokens: multiply the per-token reward by the mask",
    ),
    Slip(
        "myopic",
        _adv_slip("myopic"),
        "that gives each token the score and only its own KL: sum the rewards from t to the end (the return-to-go)",
    ),
    Slip("no-baseline", _adv_slip("no-baseline"), "that is the returns with no baseline subtracted"),
    Slip(
        "baseline-all-rows",
        _adv_slip("baseline-all-rows"),
        "that is a baseline over every row: average only the rows that reach each position",
    ),
    Slip(
        "nan",
        _adv_slip("baseline-nan"),
        "a position that no completion reaches has a baseline of 0 / 0, "
        "NaN, and NaN * 0 is still NaN: divide by mask.sum(0).clamp(min=1)",
    ),
    Slip(
        "baseline-per-row",
        _adv_slip("baseline-per-row"),
        "that is a baseline per row: the baseline of position t averages over the rows (dim 0)",
    ),
)


KL_SHAPED_ADVANTAGES = Exercise(
    name="kl_shaped_advantages",
    chapter=5,
    title="The leash in the reward: per-token advantages",
    expect=ExpectTokenAdvantages(slips=ADV_SLIPS),
    cases=(
        _adv_case(
            [1.0, -1.0],
            [[-1.0] * 3] * 2,
            [[-1.0] * 3] * 2,
            [[1.0] * 3] * 2,
            0.5,
            [[1.0] * 3, [-1.0] * 3],
            "no divergence (old = ref): the score reaches every token through the return, and the "
            "baseline, the mean of +1 and -1, is 0",
        ),
        _adv_case(
            [1.0, 0.0],
            [[-0.9, -0.8, -0.7], [-1.0] * 3],
            [[-1.0] * 3] * 2,
            [[1.0] * 3] * 2,
            0.5,
            [[0.35, 0.375, 0.425], [-0.35, -0.375, -0.425]],
            "kl = [0.1, 0.2, 0.3] in row 0: rewards [-0.05, -0.1, 1 - 0.15], returns [0.70, 0.75, "
            "0.85]; the first token also pays for the second and third tokens' KL",
        ),
        _adv_case(
            [2.0, 0.0],
            [[-1.0] * 3] * 2,
            [[-1.0] * 3] * 2,
            [[1.0, 1.0, 0.0], [1.0] * 3],
            0.5,
            [[1.0, 1.0, 0.0], [-1.0, -1.0, 0.0]],
            "row 0 ends after 2 tokens: its score is paid on its last kept token, [0, 1], and "
            "reaches index 0 through the return; the advantage of a dropped token is 0",
        ),
        _adv_case(
            [3.0, 1.0, 2.0],
            [[-1.0] * 2] * 3,
            [[-1.0] * 2] * 3,
            [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]],
            0.0,
            [[1.0, 0.0], [-1.0, -0.5], [0.0, 0.5]],
            "the baseline of a position averages only the rows that reach it: at position 1, "
            "the mean of 1 and 2 is 1.5 (not (0 + 1 + 2) / 3)",
        ),
        _adv_case(
            [0.0, 0.0],
            [[-0.5], [-1.0]],
            [[-30.0], [-1.0]],
            [[1.0], [1.0]],
            0.1,
            [[-0.5], [0.5]],
            "a runaway token: log-ratio 29.5 is clamped to kl_clamp = 10, reward -0.1 * 10 = -1, "
            "and the baseline -0.5 (-1.475 without the clamp)",
        ),
        _adv_case(
            [0.0, 0.0],
            [[-30.0], [-1.0]],
            [[-0.5], [-1.0]],
            [[1.0], [1.0]],
            0.1,
            [[0.5], [-0.5]],
            "a token the policy has all but dropped: log-ratio -29.5 is clamped from below to "
            "-kl_clamp = -10, reward -0.1 * -10 = +1, baseline 0.5 (1.475 with a clamp from above only)",
        ),
        _adv_case(
            [0.0, 0.0],
            [[-1.0], [-1.0]],
            [[-3.0], [-1.0]],
            [[1.0], [1.0]],
            1.0,
            [[-0.5], [0.5]],
            "kl_clamp = 1 is an argument: kl = 2 is clamped to 1, reward -1, baseline -0.5",
            kl_clamp=1.0,
        ),
        _adv_case(
            [0.0, 0.0],
            [[-2.0], [-1.0]],
            [[-1.0], [-1.0]],
            [[1.0], [1.0]],
            0.5,
            [[0.25], [-0.25]],
            "a token the policy likes less than the reference: kl = -1 keeps its sign, and the reward -0.5 * -1 = +0.5",
        ),
        _adv_case(
            [1.0, -1.0],
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[-1.0, -6.0], [-1.0, -1.0]],
            [[1.0, 0.0], [1.0, 1.0]],
            1.0,
            [[1.0, 0.0], [-1.0, 0.0]],
            "row 0's second token, [0, 1], is padding with kl = 5: the mask drops it, so its KL must "
            "not reach the return of row 0's first token, [0, 0]",
        ),
        _adv_case(
            [1.5],
            [[-1.0, -2.0]],
            [[-1.5, -1.0]],
            [[1.0, 1.0]],
            0.5,
            [[0.0, 0.0]],
            "a batch of one completion: its baseline is its own return, so every advantage is 0",
        ),
        _adv_case(
            [0.6, -0.6, 0.0],
            [[-1.0, -1.0], [-0.7, -1.0], [-1.0, -0.7]],
            [[-1.0, -1.0], [-1.0, -1.0], [-1.0, -1.0]],
            [[1.0, 1.0]] * 3,
            1.0,
            [[0.8, 0.7], [-0.7, -0.5], [-0.1, -0.2]],
            "three rows, all kept: returns [0.6, 0.6], [-0.9, -0.6], [-0.3, -0.3]; the baselines "
            "are the column means -0.2 and -0.1; B != T, so a baseline over the wrong axis fails",
        ),
        _adv_case(
            [1e8 + 1.0, 1e8 - 1.0],
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[-1.5, -1.0], [-1.0, -1.0]],
            [[1.0, 1.0], [1.0, 1.0]],
            0.2,
            [[0.95, 1.0], [-0.95, -1.0]],
            "scores 1e8 + 1 and 1e8 - 1, float64 tensors: an RM's level is arbitrary (this "
            "chapter), and the baseline takes it away; returns [1e8 + 0.9, 1e8 + 1] and [1e8 - 1] * 2, "
            "advantages +-0.95 and +-1. A float32 step anywhere (torch.zeros(B, T), .float()) keeps "
            "no digit below 8 at 1e8",
            dtype=torch.float64,
        ),
        _adv_case(
            [1.0, -1.0],
            [[-1.0, -1.0]] * 2,
            [[-1.0, -1.0]] * 2,
            [[1.0, 0.0], [1.0, 0.0]],
            0.5,
            [[1.0, 0.0], [-1.0, 0.0]],
            "no completion reaches position 1: its baseline would be 0 / 0 (NaN); it holds 0",
        ),
    ),
    hints=(
        "Start with the per-token reward: `kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)` and "
        "`rewards = -beta * kl * mask`, so the tokens the mask drops carry nothing.",
        "The score goes on each completion's last kept token, at index `mask.sum(1).long() - 1`. Add it on a "
        "copy: `rewards[torch.arange(len(scores)), last] += scores`.",
        "The return-to-go sums the rewards from t to the end: `returns = rewards.flip(1).cumsum(1).flip(1)`. "
        "Multiply by the mask again, so dropped positions hold 0.",
        "The baseline of position t is the mean return of the rows that reach t: "
        "`returns.sum(0) / mask.sum(0).clamp(min=1)`, shape (T,). Return `(returns - baseline) * mask`.",
    ),
    reference=kl_shaped_advantages,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=("minirlhf.ppo.gae",),
    random_kwargs=_adv_random_kwargs,
    # the per-token reward (1), the score added on a copy (2), the return-to-go (3), the baseline (4)
    hint_for={
        "kl-sign": 1,
        "no-clamp": 1,
        "padding-pays": 1,
        "per-completion": 1,
        "mutated": 2,
        "myopic": 3,
        "no-baseline": 4,
        "baseline-all-rows": 4,
        "baseline-per-row": 4,
        "transposed": 4,
        "nan": 4,
    },
)

# ----------------------------------------------------------------------------- 5.2 the loss


def _case(new, old, adv, mask, epsilon, expected, why):
    return Case(
        {
            "new_logp": as_tensor(new),
            "old_logp": as_tensor(old),
            "advantages": as_tensor(adv),
            "mask": as_tensor(mask),
            "epsilon": epsilon,
        },
        expected,
        why,
    )


def _random_kwargs(rng: np.random.Generator) -> dict:
    B, T = batch_size(rng, 6), int(rng.integers(1, 5))
    old = rng.uniform(-4.0, -0.05, (B, T))
    mask = prefix_mask(rng, B, T)
    return {
        "new_logp": as_tensor(old + rng.normal(0.0, 0.3, (B, T))),
        "old_logp": as_tensor(old),
        "advantages": as_tensor(np.clip(rng.normal(0.0, 1.0, (B, T)), -3.0, 3.0) * mask),
        "mask": as_tensor(mask),
        "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
    }


E05 = math.exp(0.5)  # the ratio when new_logp - old_logp = 0.5
E04 = math.exp(0.4)


def _slip(kind: str):
    """Return ppo_token_loss with one usual slip (see ``SLIPS``)."""
    known_slip(
        kind,
        (
            "ratio-inverted",
            "transposed",
            "max",
            "clip-only",
            "no-clip",
            "min-of-means",
            "no-mask",
            "mean-over-all",
            "row-means",
            "sum",
        ),
    )

    def loss(new_logp, old_logp, advantages, mask, epsilon=0.2):
        ratio = torch.exp(old_logp - new_logp) if kind == "ratio-inverted" else torch.exp(new_logp - old_logp)
        A = advantages.T if kind == "transposed" else advantages
        clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * A
        surrogate = {"max": torch.maximum(ratio * A, clipped), "clip-only": clipped, "no-clip": ratio * A}.get(
            kind, torch.minimum(ratio * A, clipped)
        )
        if kind == "min-of-means":  # the smaller of the two terms' masked means
            return -torch.minimum((ratio * A * mask).sum() / mask.sum(), (clipped * mask).sum() / mask.sum())
        if kind == "sum":
            return -(surrogate * mask).sum()
        if kind == "no-mask":
            return -surrogate.mean()
        if kind == "mean-over-all":
            return -(surrogate * mask).mean()
        if kind == "row-means":
            return -((surrogate * mask).sum(1) / mask.sum(1)).mean()
        return -(surrogate * mask).sum() / mask.sum()

    return loss


SLIPS = (
    Slip("ratio-inverted", _slip("ratio-inverted"), "that is the ratio upside down: exp(new_logp - old_logp)"),
    Slip(
        "transposed",
        _slip("transposed"),
        "that uses the advantages transposed: each advantage belongs where it stands, (B, T)",
    ),
    Slip(
        "min-clip",
        _slip("min-of-means"),
        "that is the smaller of the two terms' means: take the minimum token by token, then the mean",
    ),
    Slip("min-clip", _slip("max"), "that is the maximum of the two terms: take the minimum"),
    Slip("min-clip", _slip("clip-only"), "that is the clipped term alone: take the minimum of both terms"),
    Slip("min-clip", _slip("no-clip"), "that is ratio * advantages with no clipping: the clipped term is missing"),
    Slip("no-mask", _slip("no-mask"), "that is the mean over every token, padding too: use the mask"),
    Slip(
        "mean-over-all",
        _slip("mean-over-all"),
        "that is .mean() of the masked terms, which divides by B * T: divide by mask.sum()",
    ),
    Slip("row-means", _slip("row-means"), "that is the mean of the rows' means: average over all kept tokens at once"),
    Slip("sum", _slip("sum"), "that is the sum over the kept tokens: divide it by mask.sum(), their number"),
)


PPO_TOKEN_LOSS = Exercise(
    name="ppo_token_loss",
    chapter=5,
    title="The per-token clipped loss",
    expect=ExpectScalarTensor(
        atol=1e-4,
        per="token (over the tokens the mask keeps)",
        why_inf="look for an exp of a huge number",
        sign_hint="the loss is minus the clipped objective, because the optimizer minimises it",
        slips=SLIPS,
        grad_wrt=("new_logp",),
    ),
    cases=(
        _case(
            [[-1.0], [-2.0]],
            [[-1.0], [-2.0]],
            [[1.0], [-0.5]],
            [[1.0], [1.0]],
            0.2,
            -(1.0 - 0.5) / 2,
            "on-policy: ratio 1, so the loss is minus the mean advantage, -(1 - 0.5) / 2",
        ),
        _case(
            [[-1.0, -1.0, -0.1]],
            [[-1.0, -1.0, -3.0]],
            [[2.0, 2.0, 2.0]],
            [[1.0, 1.0, 0.0]],
            0.2,
            -2.0,
            "the third token is padding (mask 0) with a wild ratio: it must not count, and the mean is "
            "over the 2 kept tokens: -(2 + 2) / 2",
        ),
        _case(
            [[-1.5]],
            [[-2.0]],
            [[1.0]],
            [[1.0]],
            0.2,
            -1.2,
            "A > 0, ratio e^0.5 = 1.649 above 1 + epsilon: clipped to 1.2, loss -1.2 * 1",
        ),
        _case(
            [[-1.5]],
            [[-1.0]],
            [[-1.0]],
            [[1.0]],
            0.2,
            0.8,
            "A < 0, ratio e^-0.5 = 0.607 below 1 - epsilon: clipped to 0.8, loss -(0.8 * -1)",
        ),
        _case(
            [[-1.5]],
            [[-1.0]],
            [[1.0]],
            [[1.0]],
            0.2,
            -math.exp(-0.5),
            "A > 0 but the ratio fell to e^-0.5 = 0.607: the min keeps the unclipped 0.607, so the "
            "gradient can undo the fall; loss -0.607",
        ),
        _case(
            [[-1.0, -2.0], [-0.5, -1.0]],
            [[-1.0, -2.0], [-1.0, -1.0]],
            [[1.0, 1.0], [-1.0, -1.0]],
            [[1.0, 1.0], [1.0, 0.0]],
            0.2,
            -(2.0 - E05) / 3,
            "A < 0 with ratio e^0.5 keeps the unclipped -e^0.5; 3 kept tokens: -(1 + 1 - e^0.5) / 3",
        ),
        _case(
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[1.0, 1.0], [4.0, 0.0]],
            [[1.0, 1.0], [1.0, 0.0]],
            0.2,
            -2.0,
            "a mean over the 3 kept tokens, -(1 + 1 + 4) / 3, not a mean of row means (-2.5)",
        ),
        _case(
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[-1.0, -1.0], [-1.0, -1.0]],
            [[1.5, 0.0], [-0.5, -0.5]],
            [[1.0, 0.0], [1.0, 1.0]],
            0.2,
            -(1.5 - 0.5 - 0.5) / 3,
            "one advantage per token, used where it stands; B = T = 2, so transposed advantages "
            "still run (and give -(1.5 + 0 - 0.5) / 3)",
        ),
        _case(
            [[-1.5]],
            [[-2.0]],
            [[1.0]],
            [[1.0]],
            0.1,
            -1.1,
            "epsilon is an argument: at 0.1 the ratio e^0.5 is clipped to 1.1",
        ),
        _case(
            [[-1.0, -1.5, -2.0]],
            [[-1.0, -2.0, -2.0]],
            [[0.5, -1.0, 0.0]],
            [[1.0, 1.0, 1.0]],
            0.2,
            -(0.5 - E05) / 3,
            "a zero advantage adds 0 whatever the ratio, and still counts in the mean: -(0.5 - e^0.5 + 0) / 3",
        ),
        _case(
            [[-0.5, -0.6]],
            [[-1.0, -1.0]],
            [[1.0, -1.0]],
            [[1.0, 1.0]],
            0.2,
            -(1.2 - E04) / 2,
            "ratios e^0.5 with A = 1 and e^0.4 = 1.492 with A = -1: the min keeps 1.2 and -1.492 token by "
            "token, loss -(1.2 - 1.492) / 2 = 0.1459; the smaller of the two terms' means would give 0",
        ),
    ),
    hints=(
        "Work per token on (B, T) tensors: `ratio = torch.exp(new_logp - old_logp)`. The advantages are "
        "already per token, and the leash is already inside them.",
        "The clipped surrogate per token is `torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, "
        "1 + epsilon) * advantages)`.",
        "Average over the tokens the mask keeps, not over all B * T: `(surrogate * mask).sum() / mask.sum()`.",
        "Put together: the loss is `-(surrogate * mask).sum() / mask.sum()`, with a minus because the "
        "optimizer minimises it. Return the tensor, not `.item()`.",
    ),
    reference=ppo_token_loss,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=("minirlhf.studies.double_count._clipped",),
    random_kwargs=_random_kwargs,
    # the ratio and the advantages as they stand (1), the min and the clip (2), the masked mean
    # (3), the minus and the tensor (4)
    hint_for={
        "ratio-inverted": 1,
        "transposed": 1,
        "min-clip": 2,
        "no-mask": 3,
        "mean-over-all": 3,
        "row-means": 3,
        "sum": 3,
        "not-averaged": 3,
        "nan": 3,
        "sign": 4,
        "not-a-tensor": 4,
        "no-grad": 4,
        "grad": 4,
    },
)

IN_THIS_CHAPTER = (KL_SHAPED_ADVANTAGES, PPO_TOKEN_LOSS)
