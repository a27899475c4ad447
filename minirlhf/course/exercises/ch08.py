"""Chapter 8 exercises: GRPO's group advantages, and GRPO's loss (the clipped surrogate plus k3)."""

import math

import numpy as np
import torch

from ...estimators.group import group_advantages
from ...estimators.group_centred import group_centred_advantages
from ...estimators.rloo import rloo_advantages
from ...leashes.loss import grpo_token_loss
from ..cases import Case, Exercise, Raises, Slip, known_slip
from ..expect import ExpectArray, ExpectScalarTensor
from ._inputs import as_tensor, batch_size, prefix_mask

# ----------------------------------------------------------------------------- 8.1 advantages


class ExpectGroupAdvantages(ExpectArray):
    """A (B,) torch tensor of advantages; names a result left in its groups, (B / G, G)."""

    def __init__(self, slips=()):
        super().__init__(atol=1e-4, container="torch", what="the advantages", plural=True, slips=slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if type(got).__module__.startswith("torch") and hasattr(got, "shape") and got.dim() == 2:
            (B,) = tuple(expected.shape)
            if got.numel() == B and B:
                return "shape", (
                    f"the advantages have shape {tuple(got.shape)}, one row per group: return "
                    f"them flat, one per completion in the order of the rewards, shape ({B},)"
                )
        return super().diagnose(got, expected)


def _group_case(rewards, group_size, expected, why, eps=1e-4, dtype=torch.float32) -> Case:
    want = expected if isinstance(expected, Raises) else torch.tensor(expected, dtype=dtype)
    return Case({"rewards": torch.tensor(rewards, dtype=dtype), "group_size": group_size, "eps": eps}, want, why)


def _group_random_kwargs(rng: np.random.Generator) -> dict:
    """P prompts with G completions each, side by side. A verifier's 0 or 1 (often a group
    that is all right or all wrong), or a reward model's score on a grid of 1/8 (exact in
    float32, so that equal scores are exactly equal)."""
    P, G = int(rng.integers(1, 7)), int(rng.integers(2, 9))
    if rng.random() < 0.15:  # a run's batch: 16 prompts of 4, 64 completions
        P, G = 16, 4
    if rng.random() < 0.5:  # a verifier: each prompt with its own chance of a right answer
        chance = rng.choice([0.0, 0.1, 0.5, 0.9, 1.0], size=(P, 1))
        r = (rng.random((P, G)) < chance).astype(float)
    else:  # a score: the prompt's level plus the answer's part
        r = rng.normal(0.0, rng.choice([0.3, 2.0]), (P, 1)) + rng.normal(0.0, rng.choice([0.2, 1.0]), (P, G))
        r = np.round(r * 8) / 8
        r[rng.random(P) < 0.2] = r[0, 0]  # a few prompts whose answers all score alike
    return {
        "rewards": as_tensor(r.reshape(-1)),
        "group_size": G,
        "eps": float(rng.choice([1e-4, 1e-4, 1e-4, 0.01, 0.5])),
    }


def _checked(rewards, group_size):
    """The contract's checks, as a learner writes them; the slips keep them."""
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError(f"group_size {group_size} must be >= 2 and divide {len(rewards)}")


def _group_slip(kind: str):
    """Return group_advantages with one usual slip (see ``GROUP_SLIPS``)."""
    known_slip(
        kind,
        (
            "interleaved",
            "population-std",
            "batch-both",
            "batch-std",
            "rloo-std",
            "no-std",
            "eps-outside",
            "no-eps",
            "no-special-case",
        ),
    )

    def advantages(rewards, group_size, eps=1e-4):
        _checked(rewards, group_size)
        r = rewards.view(-1, group_size)  # (B / G, G): one row per prompt
        if kind == "interleaved":  # every (B / G)-th reward taken as a group
            r = rewards.view(group_size, -1).T
        mean = r.mean(1, keepdim=True)
        std = r.std(1, keepdim=True)
        if kind == "population-std":
            std = r.std(1, unbiased=False, keepdim=True)
        if kind == "batch-both":
            mean, std = rewards.mean(), rewards.std()
        if kind == "batch-std":
            std = rewards.std()
        if kind == "rloo-std":
            mean = (r.sum(1, keepdim=True) - r) / (group_size - 1)
        adv = (r - mean) / (std + eps)
        if kind == "no-std":
            adv = r - mean
        if kind == "eps-outside":
            adv = (r - mean) / std + eps
        if kind == "no-eps":
            adv = (r - mean) / std
        same = (r == r[:, :1]).all(1, keepdim=True)
        if kind not in ("no-special-case", "no-eps"):
            adv = torch.where(same, torch.zeros_like(adv), adv)
        return (adv.T if kind == "interleaved" else adv).reshape(-1)

    return advantages


GROUP_SLIPS = (
    Slip(
        "population-std",
        _group_slip("population-std"),
        "that divides by the population std (unbiased=False, over G): GRPO here, as TRL, uses the "
        "sample std, torch's default .std(), over G - 1",
    ),
    Slip(
        "no-std",
        group_centred_advantages,
        "that is r - mean with no division by the std: a real variant (Dr. GRPO, later in "
        "this chapter), but not GRPO's advantage",
    ),
    Slip(
        "batch-stats",
        _group_slip("batch-both"),
        "that uses the mean and std of the whole batch: GRPO compares each completion with its own group",
    ),
    Slip(
        "batch-stats",
        _group_slip("batch-std"),
        'that divides by the std of the whole batch (TRL\'s scale_rewards="batch"): GRPO '
        "divides by the std of each group",
    ),
    Slip(
        "wrong-groups",
        _group_slip("interleaved"),
        "that takes every (B / G)-th reward as a group, view(G, -1): a prompt's G completions "
        "sit side by side, view(-1, G)",
    ),
    Slip(
        "rloo",
        rloo_advantages,
        "that is the leave-one-out baseline of RLOO (later in this chapter): GRPO's baseline "
        "is the mean of the whole group, the completion's own reward included",
    ),
    Slip(
        "rloo",
        _group_slip("rloo-std"),
        "that is a leave-one-out baseline (RLOO's): GRPO's baseline is the mean of the whole "
        "group, the completion's own reward included",
    ),
    Slip(
        "all-equal",
        _group_slip("no-special-case"),
        "that divides a float's rounding error by eps: a group whose rewards all equal its first gets exactly 0",
    ),
    Slip(
        "all-equal",
        _group_slip("no-eps"),
        "that has no eps and no special case for a group of equal rewards, which gets exactly 0",
    ),
    Slip(
        "eps-outside",
        _group_slip("eps-outside"),
        "that adds eps after dividing, / std + eps: eps goes inside, / (std + eps)",
    ),
)

STD_0_2 = math.sqrt(2.0)  # the sample std of [0, 2]; that of two rewards 1 apart is STD_0_2 / 2
STD_1_2_6 = math.sqrt(7.0)  # the sample std of [1, 2, 6]
STD_7_ONES_1_ZERO = math.sqrt(1 / 8)  # the sample std of seven 1s and one 0

GROUP_ADVANTAGES = Exercise(
    name="group_advantages",
    chapter=8,
    title="GRPO's advantages: each answer against its own group",
    expect=ExpectGroupAdvantages(slips=GROUP_SLIPS),
    cases=(
        _group_case(
            [1.0, 0.0, 0.0, 0.0],
            4,
            [0.75 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4)],
            "one prompt, one right answer of 4: mean 0.25, sample std sqrt(0.75 / 3) = 0.5, "
            "so 0.75 / 0.5001 = 1.4997 and -0.25 / 0.5001 = -0.4999 (1.732 and -0.577 with "
            "the population std 0.433)",
        ),
        _group_case(
            [0.0, 1.0, 1.0, 1.0],
            2,
            [-0.5 / (STD_0_2 / 2 + 1e-4), 0.5 / (STD_0_2 / 2 + 1e-4), 0.0, 0.0],
            "two prompts of 2: the first's mean 0.5, std sqrt(0.5) = 0.7071, so -0.7070 and "
            "+0.7070; the second's two answers are both right: no signal, both 0 (0 / 0 "
            "without eps)",
        ),
        _group_case(
            [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
            3,
            [0.0] * 6,
            "a prompt's 3 answers sit side by side: [1, 1, 1] and [0, 0, 0], each all equal, "
            "so all 0; every second reward, [1, 1, 0] and [1, 0, 0], is not a group",
        ),
        _group_case(
            [2.0, 3.0, -1.0, -2.0],
            2,
            [
                -0.5 / (STD_0_2 / 2 + 1e-4),
                0.5 / (STD_0_2 / 2 + 1e-4),
                0.5 / (STD_0_2 / 2 + 1e-4),
                -0.5 / (STD_0_2 / 2 + 1e-4),
            ],
            "RM-like scores: group means 2.5 and -1.5, each std 0.7071, so -0.7070, 0.7070, "
            "0.7070, -0.7070: the prompt's level cancels (the batch's mean 0.5 would not)",
        ),
        _group_case(
            [1.0, 2.0, 6.0],
            3,
            [-2 / (STD_1_2_6 + 1e-4), -1 / (STD_1_2_6 + 1e-4), 3 / (STD_1_2_6 + 1e-4)],
            "mean 3, deviations -2, -1, 3, sample variance 14 / 2 = 7, std 2.6458: "
            "-0.7559, -0.3780, 1.1338 (leave-one-out would give -3, -1.5, 4.5 before "
            "any std)",
        ),
        _group_case(
            [1.0] * 7 + [0.0],
            8,
            [0.125 / (STD_7_ONES_1_ZERO + 1e-4)] * 7 + [-0.875 / (STD_7_ONES_1_ZERO + 1e-4)],
            "a verifier, 7 right of 8: mean 0.875, sample std sqrt(0.875 * 0.125 * 8 / 7) = "
            "0.3536, so 0.3535 for each right answer and -2.4742 for the one wrong",
        ),
        _group_case(
            [0.0, 2.0],
            2,
            [-1 / (STD_0_2 + 1.0), 1 / (STD_0_2 + 1.0)],
            "eps is an argument: at eps = 1, -1 / (1.4142 + 1) = -0.4142; with eps added "
            "after dividing it would be -1 / 1.4142 + 1 = 0.2929",
            eps=1.0,
        ),
        _group_case(
            [1.3] * 8,
            8,
            [0.0] * 8,
            "eight scores 1.3: the float32 mean is not exactly 1.3, so (r - mean) / "
            "(std + eps) comes out near 0.0012, not 0; test the group's rewards for "
            "equality with its first and give exactly 0",
        ),
        _group_case(
            [1e8 + 1.0, 1e8, 1e8, 1e8],
            4,
            [0.75 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4), -0.25 / (0.5 + 1e-4)],
            "the first case 1e8 higher, in float64: an RM's level is arbitrary (chapter 5), and the "
            "group's mean takes it away, so the advantages are the first case's. The variance as "
            "mean(r**2) - mean**2 subtracts two numbers near 1e16 and keeps no digit of it: subtract "
            "the mean first (.std() does); a float32 step keeps no digit below 8 at 1e8",
            dtype=torch.float64,
        ),
        _group_case(
            [1.0, 0.0],
            1,
            Raises(ValueError, "group_size"),
            "group_size = 1: a group of one is its own baseline, so the contract raises a "
            "ValueError that names group_size",
        ),
        _group_case(
            [1.0, 0.0, 1.0, 0.0, 1.0],
            2,
            Raises(ValueError, "group_size"),
            "5 rewards cannot be cut into groups of 2: raise a ValueError that names "
            "group_size, before any reshape fails on its own",
        ),
    ),
    hints=(
        "Check the arguments first: when `group_size` is below 2, or does not divide `len(rewards)`, "
        "raise a ValueError whose message names group_size. Then put one prompt per row: "
        "`grouped = rewards.view(-1, group_size)`, since a prompt's G completions sit side by side.",
        "The baseline is each group's own mean, the completion's reward included: "
        "`grouped.mean(1, keepdim=True)`, shape (B / G, 1). Not the batch's mean, and not the "
        "mean of the others (that is RLOO's baseline, built at the end of this chapter).",
        "Scale by each group's sample std, torch's default `grouped.std(1, keepdim=True)` (divides by "
        "G - 1, as TRL), with eps inside: `(grouped - mean) / (std + eps)`. Dropping the division is "
        "half of another estimator, Dr. GRPO, which the end of this chapter measures.",
        "A group whose rewards are all equal gets exactly 0: `same = (grouped == grouped[:, :1]).all(1, "
        "keepdim=True)`, then `torch.where(same, torch.zeros_like(adv), adv)`. Return "
        "`.reshape(-1)`, shape (B,).",
    ),
    reference=group_advantages,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.estimators.group_centred.group_centred_advantages",
        "minirlhf.estimators.rloo.rloo_advantages",
    ),
    random_kwargs=_group_random_kwargs,
    # the checks and the groups (1), the baseline (2), the scale (3), equal rewards and the
    # shape (4)
    hint_for={
        "no-raise": 1,
        "wrong-error": 1,
        "error-message": 1,
        "wrong-groups": 1,
        "batch-stats": 2,
        "rloo": 2,
        "population-std": 3,
        "no-std": 3,
        "eps-outside": 3,
        "all-equal": 4,
        "nan": 4,
        "inf": 4,
        "shape": 4,
    },
)

# ----------------------------------------------------------------------------- 8.2 the loss


def _loss_case(new, old, ref, adv, mask, expected, why, epsilon=0.2, beta=0.04, kl_clamp=10.0) -> Case:
    return Case(
        {
            "new_logp": as_tensor(new),
            "old_logp": as_tensor(old),
            "ref_logp": as_tensor(ref),
            "advantages": as_tensor(adv),
            "mask": as_tensor(mask),
            "epsilon": epsilon,
            "beta": beta,
            "kl_clamp": kl_clamp,
        },
        expected,
        why,
    )


def _loss_random_kwargs(rng: np.random.Generator) -> dict:
    B, T = batch_size(rng, 6), int(rng.integers(1, 5))
    old = rng.uniform(-4.0, -0.05, (B, T))
    new = old + rng.normal(0.0, 0.3, (B, T))
    ref = new + rng.normal(0.0, 0.5, (B, T))
    if rng.random() < 0.3:  # one runaway token, far from the reference
        ref[int(rng.integers(B)), int(rng.integers(T))] = -40.0
    mask = prefix_mask(rng, B, T)
    if rng.random() < 0.5:  # GRPO's: one advantage per completion, copied to its kept tokens
        adv = np.clip(rng.normal(0.0, 1.0, (B, 1)), -3.0, 3.0) * mask
    else:  # general per-token advantages
        adv = np.clip(rng.normal(0.0, 1.0, (B, T)), -3.0, 3.0) * mask
    return {
        "new_logp": as_tensor(new),
        "old_logp": as_tensor(old),
        "ref_logp": as_tensor(ref),
        "advantages": as_tensor(adv),
        "mask": as_tensor(mask),
        "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
        "beta": float(rng.choice([0.0, 0.04, 0.1, 0.5])),
        "kl_clamp": float(rng.choice([0.5, 2.0, 10.0])),
    }


def _loss_slip(kind: str):
    """Return grpo_token_loss with one usual slip (see ``LOSS_SLIPS``)."""
    known_slip(
        kind,
        (
            "max",
            "no-clip",
            "k3-sign",
            "k1",
            "k2",
            "no-clamp",
            "kl-unmasked",
            "kl-over-all",
            "sequence-mean",
            "kl-sign",
            "beta-one",
            "beta-default",
            "k3-detached",
        ),
    )

    def loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.04, kl_clamp=10.0):
        ratio = torch.exp(new_logp - old_logp)
        clipped = ratio.clamp(1 - epsilon, 1 + epsilon) * advantages
        surrogate = {"max": torch.maximum(ratio * advantages, clipped), "no-clip": ratio * advantages}.get(
            kind, torch.minimum(ratio * advantages, clipped)
        )
        d = (new_logp - ref_logp) if kind in ("k3-sign", "k1") else (ref_logp - new_logp)
        if kind == "k3-detached":  # the leash's value from a tensor cut off from the graph
            d = ref_logp - new_logp.detach()
        if kind != "no-clamp":
            d = d.clamp(-kl_clamp, kl_clamp)
        kl = {"k1": d, "k2": 0.5 * d**2}.get(kind, torch.exp(d) - d - 1)
        if kind == "sequence-mean":  # each completion's mean, then the mean over completions
            per_token = (-surrogate + beta * kl) * mask
            return (per_token.sum(1) / mask.sum(1)).mean()
        policy = -(surrogate * mask).sum() / mask.sum()
        leash = {"kl-unmasked": kl.mean(), "kl-over-all": (kl * mask).mean()}.get(kind, (kl * mask).sum() / mask.sum())
        b = {"beta-one": 1.0, "beta-default": 0.04}.get(kind, beta)
        return policy - b * leash if kind == "kl-sign" else policy + b * leash

    return loss


LOSS_SLIPS = (
    Slip(
        "k3-sign",
        _loss_slip("k3-sign"),
        "that is k3 with d = new_logp - ref_logp: GRPO's k3 takes d = ref_logp - new_logp",
    ),
    Slip(
        "k1",
        _loss_slip("k1"),
        "that is the plain log-ratio new_logp - ref_logp (k1): GRPO's leash is k3 = exp(d) - d - 1",
    ),
    Slip("k2", _loss_slip("k2"), "that is k2 = d^2 / 2: GRPO's leash is k3 = exp(d) - d - 1"),
    Slip("kl-sign", _loss_slip("kl-sign"), "that subtracts beta * k3: the leash is a penalty, so the loss adds it"),
    Slip(
        "kl-mask",
        _loss_slip("kl-unmasked"),
        "that averages k3 over every token, padding too: average it over the kept tokens",
    ),
    Slip(
        "kl-mask",
        _loss_slip("kl-over-all"),
        "that is .mean() of the masked k3, which divides by B * T: divide by mask.sum()",
    ),
    Slip("no-clamp", _loss_slip("no-clamp"), "that is k3 without the clamp of d to [-kl_clamp, kl_clamp]"),
    Slip(
        "sequence-mean",
        _loss_slip("sequence-mean"),
        "that averages each completion's tokens, then the completions: the paper's equation "
        '(TRL\'s loss_type="grpo"), but this book, like TRL\'s default loss_type="dapo", '
        "averages all kept tokens at once",
    ),
    Slip("min-clip", _loss_slip("max"), "that is the maximum of the two surrogate terms: take the minimum"),
    Slip(
        "min-clip",
        _loss_slip("no-clip"),
        "that is ratio * advantages with no clipping: take the minimum with the clipped term",
    ),
    Slip("no-beta", _loss_slip("beta-one"), "that adds k3 without multiplying by beta"),
    Slip("no-beta", _loss_slip("beta-default"), "that uses beta = 0.04 whatever beta is passed"),
    Slip(
        "k3-detached",
        _loss_slip("k3-detached"),
        "that computes k3 from new_logp.detach() (or from old_logp): "
        "the value is the same, but the leash has no gradient, so it "
        "cannot pull the policy back; use new_logp itself",
    ),
)

E = math.e
K3_TWO = (math.exp(-2.0) + 1.0 + math.exp(0.5) - 1.5) / 2  # mean k3 of d = -2 and d = 0.5
K3_CLAMPED = math.exp(-10.0) + 9.0  # k3 of d = -14, clamped to -10
K3_ONE = math.exp(-1.0)  # k3 of d = -1

GRPO_TOKEN_LOSS = Exercise(
    name="grpo_token_loss",
    chapter=8,
    title="GRPO's loss: the clipped surrogate with the leash as a k3 term",
    expect=ExpectScalarTensor(
        atol=1e-4,
        per="token (over the tokens the mask keeps)",
        why_inf="look for an exp of a huge number (is d clamped?)",
        sign_hint="the loss is minus the surrogate plus beta times k3, because the optimizer minimises it",
        slips=LOSS_SLIPS,
        grad_wrt=("new_logp",),
    ),
    cases=(
        _loss_case(
            [[-1.0, -1.0], [-2.0, -2.0]],
            [[-1.0, -1.0], [-2.0, -2.0]],
            [[-1.0, -1.0], [-2.0, -2.0]],
            [[1.0, 1.0], [-0.5, -0.5]],
            [[1.0, 1.0], [1.0, 1.0]],
            -(2.0 - 1.0) / 4,
            "on-policy at the reference: ratio 1 and k3 = 0, so the loss is minus the mean "
            "advantage, -(1 + 1 - 0.5 - 0.5) / 4 = -0.25",
        ),
        _loss_case(
            [[-1.0, -1.0]],
            [[-1.0, -1.0]],
            [[-3.0, -0.5]],
            [[0.0, 0.0]],
            [[1.0, 1.0]],
            0.5 * K3_TWO,
            "advantages 0, so only the leash counts: d = ref - new = -2 and 0.5, k3 = e^-2 + 1 "
            "= 1.1353 and e^0.5 - 1.5 = 0.1487, mean 0.6420, times beta 0.5 = 0.3210",
            beta=0.5,
        ),
        _loss_case(
            [[-0.5]],
            [[-0.5]],
            [[-14.5]],
            [[0.0]],
            [[1.0]],
            0.04 * K3_CLAMPED,
            "a runaway token: d = -14 is clamped to kl_clamp = -10, k3 = e^-10 + 9 = 9.00005, "
            "times 0.04 = 0.36 (0.52 without the clamp)",
        ),
        _loss_case(
            [[-1.0, -1.0, -0.1]],
            [[-1.0, -1.0, -3.0]],
            [[-1.0, -2.0, -30.0]],
            [[0.5, 0.5, 0.0]],
            [[1.0, 1.0, 0.0]],
            -0.5 + 0.1 * K3_ONE / 2,
            "the third token is padding with a wild ratio and d = -29.9: it must not count; "
            "over the 2 kept tokens: -0.5 + 0.1 * (0 + e^-1) / 2 = -0.4816",
            beta=0.1,
        ),
        _loss_case(
            [[-1.0, -2.0], [-0.5, -1.0]],
            [[-1.0, -2.0], [-1.0, -1.0]],
            [[-5.0, -5.0], [-5.0, -5.0]],
            [[1.0, 1.0], [-1.0, -1.0]],
            [[1.0, 1.0], [1.0, 0.0]],
            -(2.0 - math.exp(0.5)) / 3,
            "beta = 0: chapter 5's loss, whatever ref_logp says: A < 0 with ratio e^0.5 keeps "
            "the unclipped -e^0.5, so -(1 + 1 - e^0.5) / 3 = -0.1171",
            beta=0.0,
        ),
        _loss_case(
            [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
            [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
            [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
            [[0.5, 0.5, 0.5], [-1.0, 0.0, 0.0]],
            [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]],
            -(1.5 - 1.0) / 4,
            "rows of 3 and 1 kept tokens: the mean over all 4, -(0.5 * 3 - 1) / 4 = -0.125; "
            "the mean of the rows' means, -(0.5 - 1) / 2 = +0.25, is the paper's",
        ),
        _loss_case(
            [[-1.5]],
            [[-2.0]],
            [[-1.5]],
            [[1.0]],
            [[1.0]],
            -1.2,
            "A > 0 and ratio e^0.5 = 1.649 above 1 + epsilon: clipped to 1.2, loss -1.2 (new = ref, so k3 = 0)",
        ),
        _loss_case(
            [[-1.5]],
            [[-2.0]],
            [[-1.5]],
            [[1.0]],
            [[1.0]],
            -1.1,
            "epsilon is an argument: at 0.1 the ratio e^0.5 is clipped to 1.1",
            epsilon=0.1,
        ),
        _loss_case(
            [[-2.5]],
            [[-2.5]],
            [[-1.0]],
            [[0.0]],
            [[1.0]],
            0.5 * (E - 2.0),
            "kl_clamp is an argument: d = 1.5 is clamped to 1, k3 = e - 2 = 0.7183, times beta "
            "0.5 = 0.3591 (0.9908 with the clamp at 10)",
            beta=0.5,
            kl_clamp=1.0,
        ),
        _loss_case(
            [[-1.0, -1.5], [-0.5, -2.0]],
            [[-1.0, -1.0], [-1.0, -2.0]],
            [[-1.0, -0.5], [-1.5, -2.0]],
            [[1.0, -0.5], [-1.0, 0.0]],
            [[1.0, 1.0], [1.0, 1.0]],
            -(1.0 - 0.4 - math.exp(0.5)) / 4 + 0.2 * (E - 2.0 + math.exp(-1.0)) / 4,
            "per-token advantages: surrogate terms 1, min(-0.5 e^-0.5, -0.5 * 0.8) = -0.4, "
            "-e^0.5 and 0; k3 = e - 2 (d = 1) and e^-1 (d = -1); 1.0487 / 4 + 0.2 * 1.0862 / 4 "
            "= 0.3165",
            beta=0.2,
        ),
    ),
    hints=(
        "The surrogate is chapter 5's: `ratio = torch.exp(new_logp - old_logp)`, "
        "`torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)`, "
        "averaged over every kept token of the batch at once: `(x * mask).sum() / mask.sum()`.",
        "The leash is k3 per token: `d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)`, "
        "`k3 = torch.exp(d) - d - 1`, which is 0 where the policy agrees with the reference and never "
        "negative. Not the log-ratio (k1), nor d ** 2 / 2 (k2).",
        "Average k3 like the surrogate, over the tokens the mask keeps: `(k3 * mask).sum() / "
        "mask.sum()`, so padding adds nothing and does not count.",
        "Put together: the loss is `-surrogate_mean + beta * k3_mean`: the optimizer minimises it, so "
        "the leash is added. Return the tensor, not `.item()`.",
    ),
    reference=grpo_token_loss,
    # The package's other functions that give this answer: blocked with the reference while graded.
    also_blocks=(
        "minirlhf.leashes.k2_loss.k2_token_loss",
        "minirlhf.studies.silent_bugs.copies.grpo_token_loss_ratio_to_reference",
    ),
    random_kwargs=_loss_random_kwargs,
    # the surrogate and its mean (1), the k3 term (2), its masked mean (3), the sum, beta and
    # the tensor (4)
    hint_for={
        "min-clip": 1,
        "sequence-mean": 1,
        "k3-sign": 2,
        "k1": 2,
        "k2": 2,
        "no-clamp": 2,
        "kl-mask": 3,
        "not-averaged": 3,
        "nan": 3,
        "inf": 2,
        "kl-sign": 4,
        "no-beta": 4,
        "sign": 4,
        "not-a-tensor": 4,
        "k3-detached": 2,
        "no-grad": 4,
        "grad": 2,
    },
)

IN_THIS_CHAPTER = (GROUP_ADVANTAGES, GRPO_TOKEN_LOSS)
