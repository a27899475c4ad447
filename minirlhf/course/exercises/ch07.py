"""Chapter 7 exercises: the adaptive KL controller, and generalized advantage estimation."""

import numpy as np

from ...ppo import adaptive_kl_update, gae
from ..cases import Case, Exercise, Slip, known_slip
from ..expect import ExpectArray, ExpectFloat

# ----------------------------------------------------------------------------- the controller


def _kl_case(beta, kl, target, n_steps, horizon, expected, why) -> Case:
    return Case({"beta": beta, "kl": kl, "target": target, "n_steps": n_steps, "horizon": horizon}, expected, why)


def _kl_random_kwargs(rng: np.random.Generator) -> dict:
    target = float(rng.choice([0.02, 0.05, 0.1, 1.0, 6.0]))
    horizon = int(rng.choice([64, 1000, 10_000]))
    # n_steps below 5 horizons: beyond, the rule could turn beta negative and is refused
    steps = [n for n in (0, 1, 64, 256, 512, 1024, 4000, 20_000) if n < 5 * horizon]
    return {
        "beta": float(rng.choice([0.0, 0.01, 0.05, 0.1, 0.5, 2.0])) * float(rng.uniform(0.5, 1.5)),
        "kl": float(target * rng.uniform(-0.5, 3.0)),  # a k1 batch mean can be negative
        "target": target,
        "n_steps": int(rng.choice(steps)),
        "horizon": horizon,
    }


def _kl_slip(kind: str):
    """Return adaptive_kl_update with one usual slip (see ``KL_SLIPS``)."""
    known_slip(kind, ("no-clip", "clip-beta", "inverted", "additive"))

    def update(beta, kl, target, n_steps, horizon):
        error = target / kl - 1 if kind == "inverted" and kl else kl / target - 1
        e = error if kind in ("no-clip", "clip-beta") else float(np.clip(error, -0.2, 0.2))
        if kind == "additive":
            return float(beta + e * n_steps / horizon)
        new = beta * (1 + e * n_steps / horizon)
        return float(np.clip(new, 0.8 * beta, 1.2 * beta)) if kind == "clip-beta" else float(new)

    return update


KL_SLIPS = (
    Slip("no-clip", _kl_slip("no-clip"), "that is the update with the error not clipped to [-0.2, 0.2]"),
    Slip("clip-beta", _kl_slip("clip-beta"), "that clips the new beta instead of the error: clip e"),
    Slip("inverted", _kl_slip("inverted"), "that is the error upside down: e = kl / target - 1"),
    Slip(
        "additive", _kl_slip("additive"), "that adds to beta: the update multiplies beta by (1 + e * n_steps / horizon)"
    ),
)


ADAPTIVE_KL_UPDATE = Exercise(
    name="adaptive_kl_update",
    chapter=7,
    title="The adaptive KL controller",
    expect=ExpectFloat(atol=1e-9, what="the new beta", slips=KL_SLIPS),
    cases=(
        _kl_case(0.1, 6.0, 6.0, 1024, 10_000, 0.1, "KL on target: the error is 0 and beta stays put"),
        _kl_case(
            0.1,
            60.0,
            6.0,
            1024,
            10_000,
            0.102048,
            "KL ten times the target: the error is capped at +0.2, beta * (1 + 0.2 * 0.1024)",
        ),
        _kl_case(
            0.1,
            0.0,
            6.0,
            1024,
            10_000,
            0.097952,
            "KL of 0, far below target: the error is capped at -0.2, beta * (1 - 0.2 * 0.1024)",
        ),
        _kl_case(
            0.5, 0.11, 0.1, 64, 640, 0.505, "KL 10% above target, inside the clip: e = 0.1, n_steps / horizon = 0.1"
        ),
        _kl_case(0.2, 0.9, 1.0, 500, 1000, 0.19, "KL 10% below target: e = -0.1, half a horizon, beta shrinks by 5%"),
        _kl_case(0.3, 100.0, 1.0, 0, 10_000, 0.3, "n_steps = 0: no samples seen, no change whatever the KL"),
        _kl_case(
            0.0, 5.0, 0.05, 64, 1000, 0.0, "beta = 0 stays 0: the controller multiplies, it cannot switch a leash on"
        ),
        _kl_case(1.0, 2.0, 1.0, 1000, 1000, 1.2, "one whole horizon at the cap: beta grows by exactly 20%"),
        _kl_case(
            0.5,
            -0.02,
            0.05,
            64,
            1000,
            0.4936,
            "a negative k1 estimate: e = clip(-1.4) = -0.2, beta * (1 - 0.2 * 0.064)",
        ),
        _kl_case(
            0.25, 0.06, 0.05, 2000, 1000, 0.35, "n_steps twice the horizon at the cap: beta * (1 + 0.2 * 2) = 0.35"
        ),
    ),
    hints=(
        "Two lines: first the clipped relative error `e` of the measured KL against the target, then the "
        "multiplicative update of `beta`. Nothing is rounded.",
        "`e = kl / target - 1`, then clip it to [-0.2, 0.2], with `np.clip` or with `min` and `max`. "
        "Clip the error, not the new beta.",
        "`e = float(np.clip(kl / target - 1, -0.2, 0.2))`; the new beta is `beta` times "
        "`(1 + e * n_steps / horizon)`. Return it as a Python float (`np.clip` gives a NumPy scalar).",
    ),
    reference=adaptive_kl_update,
    random_kwargs=_kl_random_kwargs,
    # the error and its clip (2), the multiplicative update and the Python float (3)
    hint_for={
        "no-clip": 2,
        "clip-beta": 2,
        "inverted": 2,
        "rounded": 1,
        "additive": 3,
        "numpy-scalar": 3,
        "type": 3,
        "int": 3,
        "float32": 3,
    },
)

# ----------------------------------------------------------------------------- GAE


def _gae_case(rewards, values, gamma, lam, expected, why) -> Case:
    return Case(
        {"rewards": rewards, "values": values, "gamma": gamma, "lam": lam}, np.array(expected, dtype=float), why
    )


def _gae_random_kwargs(rng: np.random.Generator) -> dict:
    T = int(rng.integers(1, 9))
    shape = (T,) if rng.random() < 0.5 else (int(rng.integers(1, 5)), T)
    rewards = rng.normal(0, 1, shape)
    if rng.random() < 0.2:  # whole-number rewards (a verifier's 0 or 1), as ints
        rewards = rng.integers(0, 2, shape)
    values = rng.normal(0, 1, shape)
    return {
        "rewards": rewards.tolist() if rng.random() < 0.3 else rewards,
        "values": values,
        "gamma": float(rng.choice([1.0, 0.99, 0.9, 0.5])),
        "lam": float(rng.choice([0.0, 0.5, 0.9, 0.95, 1.0])),
    }


def _gae_slip(kind: str):
    """Return gae with one usual slip (see ``GAE_SLIPS``)."""
    known_slip(
        kind, ("forward", "first-axis", "no-gamma-in-trace", "no-gamma-in-delta", "bootstrap-past-end", "int-output")
    )

    def gae_(rewards, values, gamma, lam):
        # "int-output" makes its output like the rewards as given: whole numbers stay ints
        adv = np.zeros_like(np.asarray(rewards)) if kind == "int-output" else None
        rewards, values = np.asarray(rewards, dtype=float), np.asarray(values, dtype=float)
        adv = np.zeros_like(rewards) if adv is None else adv
        T = rewards.shape[-1]
        if kind == "forward":
            previous = 0.0
            for t in range(T):
                next_value = values[..., t + 1] if t + 1 < T else 0.0
                previous = rewards[..., t] + gamma * next_value - values[..., t] + gamma * lam * previous
                adv[..., t] = previous
            return adv
        if kind == "first-axis":
            next_value, running = 0.0, 0.0
            for t in reversed(range(len(rewards))):
                running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
                adv[t], next_value = running, values[t]
            return adv
        trace = lam if kind == "no-gamma-in-trace" else gamma * lam
        discount = 1.0 if kind == "no-gamma-in-delta" else gamma  # of the next value, in the TD error
        next_value = values[..., -1] if kind == "bootstrap-past-end" else 0.0
        running = 0.0
        for t in reversed(range(T)):
            running = rewards[..., t] + discount * next_value - values[..., t] + trace * running
            adv[..., t], next_value = running, values[..., t]
        return adv

    return gae_


GAE_SLIPS = (
    Slip(
        "no-gamma-in-trace",
        _gae_slip("no-gamma-in-trace"),
        "that carries the next advantage with lam alone: the factor is gamma * lam",
    ),
    Slip(
        "no-gamma-in-delta",
        _gae_slip("no-gamma-in-delta"),
        "that leaves gamma out of the TD error: delta = r_t + gamma * V(s_(t+1)) - V(s_t)",
    ),
    Slip("forward", _gae_slip("forward"), "that walks forwards: walk from the last token back"),
    Slip(
        "bootstrap-past-end",
        _gae_slip("bootstrap-past-end"),
        "that uses a value after the last token: it is 0, the episode ends there",
    ),
    Slip(
        "first-axis",
        _gae_slip("first-axis"),
        "that walks along the first axis: index with [..., t] so a batch (B, T) walks along T",
    ),
    Slip(
        "int-output",
        _gae_slip("int-output"),
        "np.zeros_like of int rewards is an int array, which cuts "
        "every advantage stored in it to a whole number: convert the "
        "inputs with np.asarray(x, dtype=float) first",
    ),
)


GAE = Exercise(
    name="gae",
    chapter=7,
    title="Generalized advantage estimation",
    expect=ExpectArray(atol=1e-6, container="numpy", what="the advantages", plural=True, slips=GAE_SLIPS),
    cases=(
        _gae_case(
            [0.0, 0.0, 1.0],
            [0.5, 0.6, 0.8],
            1.0,
            1.0,
            [0.5, 0.4, 0.2],
            "lam = 1, gamma = 1: the return (1 from every token) minus the value",
        ),
        _gae_case(
            [0.0, 0.0, 1.0],
            [0.5, 0.6, 0.8],
            1.0,
            0.0,
            [0.1, 0.2, 0.2],
            "lam = 0: the one-step TD errors r_t + V_(t+1) - V_t, with V = 0 after the end",
        ),
        _gae_case(
            [0.0, 0.0, 1.0],
            [0.5, 0.6, 0.8],
            1.0,
            0.5,
            [0.25, 0.3, 0.2],
            "the worked example: A_2 = 0.2, A_1 = 0.2 + 0.5 * 0.2, A_0 = 0.1 + 0.5 * 0.3",
        ),
        _gae_case(
            [0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0],
            0.5,
            1.0,
            [0.25, 0.5, 1.0],
            "gamma = 0.5, no value: the discounted return, halved per token back from the end",
        ),
        _gae_case([2.0], [0.5], 1.0, 0.95, [1.5], "one token: r - V, whatever lam is"),
        _gae_case(
            [1.0, 2.0, 3.0],
            [0.0, 0.0, 0.0],
            1.0,
            1.0,
            [6.0, 5.0, 3.0],
            "reward on every token (as with a per-token KL), V = 0: the return-to-go",
        ),
        _gae_case(
            [-0.1, -0.1, 0.9],
            [0.4, 0.5, 0.6],
            1.0,
            0.9,
            [0.243, 0.27, 0.3],
            "KL-shaped rewards: deltas 0, 0, 0.3, then A_1 = 0.9 * 0.3, A_0 = 0.9 * 0.27",
        ),
        _gae_case(
            [0.0, 0.0, 1.0],
            [1.0, 1.0, 1.0],
            1.0,
            0.95,
            [0.0, 0.0, 0.0],
            "a perfect value estimate of a sure reward: nothing is left to credit",
        ),
        _gae_case(
            np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
            np.array([[0.5, 0.6, 0.8], [0.5, 0.5, 0.5]]),
            1.0,
            0.0,
            [[0.1, 0.2, 0.2], [0.0, 0.0, -0.5]],
            "a batch of two completions (2, 3): each row on its own, along the last axis",
        ),
        _gae_case(
            [0.0, 1.0],
            [0.0, 0.0],
            0.9,
            0.5,
            [0.45, 1.0],
            "gamma = 0.9, lam = 0.5: A_1 = 1, A_0 = 0 + 0.9 * 0 + 0.9 * 0.5 * 1 = 0.45",
        ),
        _gae_case(
            [0.0, 0.0, 1.0],
            [0.5, 0.6, 0.8],
            0.9,
            0.5,
            [0.1345, 0.21, 0.2],
            "gamma = 0.9 with a value on every token: deltas 0.9 * 0.6 - 0.5 = 0.04, 0.9 * 0.8 - 0.6 "
            "= 0.12 and 1 - 0.8 = 0.2; A_1 = 0.12 + 0.45 * 0.2, A_0 = 0.04 + 0.45 * 0.21",
        ),
        _gae_case(
            np.array([[0.0, 1.0], [1.0, 0.0]]),
            np.array([[0.5, 0.5], [0.2, 0.4]]),
            0.5,
            0.0,
            [[-0.25, 0.5], [1.0, -0.4]],
            "lam = 0, gamma = 0.5, a batch (2, 2): each advantage is its TD error r + 0.5 * V_next - V, "
            "[0 + 0.25 - 0.5, 1 - 0.5] and [1 + 0.2 - 0.2, 0 - 0.4]",
        ),
        _gae_case(
            [0, 0, 1],
            [0.5, 0.6, 0.8],
            1.0,
            0.5,
            [0.25, 0.3, 0.2],
            "the contract's example as written, rewards a list of ints: the advantages are floats",
        ),
    ),
    hints=(
        "Walk backwards, from the last token to the first. Each step needs the value of the next state "
        "(0 after the last token: the episode ends there) and the advantage of the next token "
        "(also 0 after the end).",
        "At token t the TD error is `delta = r_t + gamma * V(s_(t+1)) - V(s_t)`, and the advantage is "
        "`A_t = delta + gamma * lam * A_(t+1)`. Index with `[..., t]` instead of `[t]`: the same code then works "
        "for one completion (T,) and for a batch (B, T).",
        "Convert both inputs with `np.asarray(x, dtype=float)` and make the output with `np.zeros_like`. Keep two "
        "running numbers, the next value and the next advantage, both 0 to start. Loop over "
        "`reversed(range(rewards.shape[-1]))`: compute `delta` from `rewards[..., t]`, the next value and "
        "`values[..., t]`; set the running advantage to `delta + gamma * lam * (its old value)` and store it at "
        "`[..., t]`; then `values[..., t]` becomes the next value.",
    ),
    reference=gae,
    random_kwargs=_gae_random_kwargs,
    # the backward walk from 0 after the end (1), the TD error, the trace and [..., t] (2), the
    # NumPy array (3)
    hint_for={
        "forward": 1,
        "bootstrap-past-end": 1,
        "no-gamma-in-trace": 2,
        "no-gamma-in-delta": 2,
        "first-axis": 2,
        "shape": 2,
        "type": 3,
        "int-output": 3,
    },
)

IN_THIS_CHAPTER = (ADAPTIVE_KL_UPDATE, GAE)
