"""Chapter 5 exercise: the per-token PPO-RLHF loss, with the completion mask and the KL leash."""

import math

import numpy as np
import torch

from ..cases import Case, Exercise, ExpectScalarTensor
from ...ppo import ppo_token_loss


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _case(new, old, ref, adv, mask, epsilon, beta, expected, why, kl_clamp=10.0):
    return Case({"new_logp": _t(new), "old_logp": _t(old), "ref_logp": _t(ref), "advantages": _t(adv),
                 "mask": _t(mask), "epsilon": epsilon, "beta": beta, "kl_clamp": kl_clamp}, expected, why)


def _random_kwargs(rng: np.random.Generator) -> dict:
    B, T = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    old = rng.uniform(-4.0, -0.05, (B, T))
    ref = old + rng.normal(0.0, 0.5, (B, T))
    if rng.random() < 0.3:  # one runaway token, far from the reference
        ref[int(rng.integers(B)), int(rng.integers(T))] = -40.0
    mask = (rng.random((B, T)) < 0.7).astype(np.float32)
    mask[int(rng.integers(B)), 0] = 1.0  # at least one token counts
    as_t = lambda x: torch.from_numpy(np.asarray(x, dtype=np.float32))  # noqa: E731
    return {
        "new_logp": as_t(old + rng.normal(0.0, 0.3, (B, T))),
        "old_logp": as_t(old),
        "ref_logp": as_t(ref),
        "advantages": as_t(np.clip(rng.normal(0.0, 1.0, B), -3.0, 3.0)),
        "mask": as_t(mask),
        "epsilon": float(rng.choice([0.1, 0.2, 0.3])),
        "beta": float(rng.choice([0.0, 0.05, 0.08, 0.5, 1.0])),
        "kl_clamp": float(rng.choice([0.5, 2.0, 10.0])),
    }


E05 = math.exp(0.5)  # the ratio when new_logp - old_logp = 0.5
E01 = math.exp(0.1)

PPO_TOKEN_LOSS = Exercise(
    name="ppo_token_loss",
    chapter=5,
    title="The per-token PPO-RLHF loss",
    expect=ExpectScalarTensor(
        atol=1e-4, per="token (over the tokens the mask keeps)",
        why_inf="look for an exp of a huge number (is the log-ratio clamped?)",
        sign_hint="the loss is minus the clipped objective, because the optimizer minimises it"),
    cases=(
        _case([[-1.0], [-2.0]], [[-1.0], [-2.0]], [[-1.0], [-2.0]], [1.0, -0.5], [[1.0], [1.0]], 0.2, 0.1,
              -(1.0 - 0.5) / 2, "on-policy, no KL: ratio 1, so the loss is -mean(A) = -(1 - 0.5) / 2"),
        _case([[-1.0, -1.0, -0.1]], [[-1.0, -1.0, -3.0]], [[-1.0, -1.0, -3.0]], [2.0], [[1.0, 1.0, 0.0]],
              0.2, 0.1, -2.0,
              "the third token is padding (mask 0) with a wild ratio: it must not count, and the mean is "
              "over the 2 kept tokens: -(2 + 2) / 2"),
        _case([[-1.5]], [[-2.0]], [[-2.0]], [1.0], [[1.0]], 0.2, 0.1, -1.2,
              "A > 0, ratio e^0.5 = 1.649 above 1 + epsilon: clipped to 1.2, loss -1.2 * 1"),
        _case([[-1.5]], [[-1.0]], [[-1.0]], [-1.0], [[1.0]], 0.2, 0.1, 0.8,
              "A < 0, ratio e^-0.5 = 0.607 below 1 - epsilon: clipped to 0.8, loss -(0.8 * -1)"),
        _case([[-1.0]], [[-1.0]], [[-3.0]], [0.5], [[1.0]], 0.2, 0.5, 0.5,
              "the leash: kl = -1 - (-3) = 2 turns A = 0.5 - 0.5 * 2 = -0.5, negative: loss 0.5"),
        _case([[-0.9]], [[-1.0]], [[-3.0]], [0.5], [[1.0]], 0.2, 0.5, 0.5 * E01,
              "kl is fixed at rollout, old_logp - ref_logp = 2 (not new_logp - ref_logp = 2.1): "
              "A = -0.5, ratio e^0.1, loss 0.5 e^0.1"),
        _case([[-0.5]], [[-0.5]], [[-30.0]], [0.0], [[1.0]], 0.2, 0.1, 1.0,
              "a runaway token: log-ratio 29.5 is clamped to kl_clamp = 10, so A = -0.1 * 10 = -1, loss 1 "
              "(2.95 without the clamp)"),
        _case([[-1.0]], [[-1.0]], [[-3.0]], [0.0], [[1.0]], 0.2, 1.0, 1.0,
              "kl_clamp = 1 is an argument: kl = 2 is clamped to 1, A = -1, loss 1", kl_clamp=1.0),
        _case([[-1.0, -2.0], [-0.5, -1.0]], [[-1.0, -2.0], [-1.0, -1.0]], [[-9.0, -9.0], [-9.0, -9.0]],
              [1.0, -1.0], [[1.0, 1.0], [1.0, 0.0]], 0.2, 0.0, -(2.0 - E05) / 3,
              "beta = 0, so ref_logp plays no part; A < 0 with ratio e^0.5 keeps the unclipped -e^0.5; "
              "3 kept tokens: -(1 + 1 - e^0.5) / 3, a mean over tokens, not of row means"),
        _case([[-1.0, -1.0], [-1.0, -1.0]], [[-1.0, -1.0], [-1.0, -1.0]], [[-1.0, -1.0], [-1.0, -1.0]],
              [1.5, -0.5], [[1.0, 0.0], [1.0, 1.0]], 0.2, 0.1, -(1.5 - 0.5 - 0.5) / 3,
              "one advantage per completion, shared by its tokens (row 1: 1.5; row 2: -0.5, -0.5); "
              "B = T = 2, so an advantage broadcast along the wrong axis still runs"),
    ),
    hints=(
        "Work per token on (B, T) tensors: `ratio = torch.exp(new_logp - old_logp)`. The leash uses the "
        "policy that sampled, fixed at rollout: `kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)`.",
        "`advantages` holds one number per completion, shape (B,). Give it a token axis before you subtract "
        "the leash: `A = advantages[:, None] - beta * kl`, shape (B, T).",
        "The clipped surrogate per token is `torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)`. "
        "Average it over the tokens the mask keeps, not over all B * T.",
        "Put together: `surrogate = torch.minimum(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)`, and "
        "the loss is `-(surrogate * mask).sum() / mask.sum()`, with a minus because the optimizer minimises it.",
    ),
    reference=ppo_token_loss,
    random_kwargs=_random_kwargs,
)

IN_THIS_CHAPTER = (PPO_TOKEN_LOSS,)
