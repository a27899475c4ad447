"""The package's two objectives: exact contracts, hand-worked values, and input validation."""

import math

import numpy as np
import pytest

from minirlhf import kl_penalty, ppo_rlhf_objective
from minirlhf.course.exercises import get

KL = get("kl_penalty")
PPO = get("ppo_rlhf_objective")
GOOD_PPO = dict(
    old_logp=[-1.0, -2.0], new_logp=[-1.1, -1.9], ref_logp=[-1.0, -2.0], rewards=[1.0, 0.0], epsilon=0.2, beta=0.1
)


# ---- every case of the exercise registry, reproduced exactly by the reference


@pytest.mark.parametrize("case", KL.cases, ids=[c.why[:40] for c in KL.cases])
def test_kl_penalty_reproduces_every_registry_case(case):
    got = kl_penalty(**case.kwargs)
    assert type(got) is float
    assert got == case.expected


@pytest.mark.parametrize("case", PPO.cases, ids=[c.why[:40] for c in PPO.cases])
def test_ppo_objective_reproduces_every_registry_case(case):
    got = ppo_rlhf_objective(**case.kwargs)
    assert set(got) == {"objective", "policy_loss", "kl_penalty"}
    assert all(type(v) is float for v in got.values())
    assert got == case.expected


def test_the_spec_examples():
    assert kl_penalty([-1, -2], [-1.5, -2.5], 0.1) == 0.05
    assert kl_penalty([-2, -3], [-1, -1], 1.0) == -1.5
    assert ppo_rlhf_objective([-2.0], [-1.8], [-2.0], [1.0], 0.2, 0.1) == {
        "objective": 1.18,
        "policy_loss": 1.18,
        "kl_penalty": 0.02,
    }
    assert ppo_rlhf_objective([-1.0], [-1.0], [-1.0], [1.0], 0.2, 0.1) == {
        "objective": 1.0,
        "policy_loss": 1.0,
        "kl_penalty": 0.0,
    }


def test_rounding_is_pythons_round_on_the_binary_value():
    # 0.125 is exact in binary: a true tie, sent to the even digit.
    assert kl_penalty([-0.5], [-1.0], 0.25) == 0.12
    # 0.375 is exact too: the even neighbour is 0.38.
    assert kl_penalty([-0.25], [-1.0], 0.5) == 0.38
    # A negative zero is written as 0.0.
    got = kl_penalty([-1.0, -1.0], [-1.0001, -0.9999], 1.0)
    assert got == 0.0 and math.copysign(1.0, got) == 1.0


def test_kl_penalty_keeps_the_sign_and_does_not_mask():
    # One token with kl = -1.5 and one with +0.5: the mean is -0.5, never clipped to 0.
    assert kl_penalty([-2.0, -1.0], [-0.5, -1.5], 1.0) == -0.5


def test_the_penalty_is_reported_not_subtracted_twice():
    # ratio 1, so J = mean(r - beta * kl) = mean([1 - 0.5, 0 - 1.0]) = -0.25; kl_penalty = 0.75.
    got = ppo_rlhf_objective([-1, -1], [-1, -1], [-2, -3], [1, 0], 0.2, 0.5)
    assert got == {"objective": -0.25, "policy_loss": -0.25, "kl_penalty": 0.75}


def _objective_by_hand(old, new, ref, r, eps, beta):
    """The formula again, one token at a time in plain Python, as an independent check."""
    total = 0.0
    for o, n, f, rew in zip(old, new, ref, r):
        ratio = math.exp(n - o)
        adv = rew - beta * (n - f)
        total += min(ratio * adv, min(max(ratio, 1 - eps), 1 + eps) * adv)
    return total / len(old)


def test_ppo_objective_agrees_with_a_plain_python_version_on_random_batches():
    rng = np.random.default_rng(1)
    for _ in range(300):
        kwargs = PPO.random_kwargs(rng)
        want = _objective_by_hand(
            kwargs["old_logp"],
            kwargs["new_logp"],
            kwargs["ref_logp"],
            kwargs["rewards"],
            kwargs["epsilon"],
            kwargs["beta"],
        )
        got = ppo_rlhf_objective(**kwargs)
        # Rounding may differ only when the exact value sits on a rounding boundary.
        assert abs(got["objective"] - want) <= 0.005 + 1e-9
        assert got["objective"] == got["policy_loss"]


# ---- validation: every bad input raises ValueError naming the argument


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(logp_policy=[-1.0, -2.0], logp_reference=[-1.0], beta=0.1), "logp_reference"),
        (dict(logp_policy=[], logp_reference=[], beta=0.1), "logp_policy"),
        (dict(logp_policy=[-1.0], logp_reference=[], beta=0.1), "logp_reference"),
        (dict(logp_policy=[-1.0, float("nan")], logp_reference=[-1.0, -1.0], beta=0.1), "logp_policy"),
        (dict(logp_policy=[-1.0], logp_reference=[-float("inf")], beta=0.1), "logp_reference"),
        (dict(logp_policy=[[-1.0], [-2.0]], logp_reference=[[-1.0], [-2.0]], beta=0.1), "logp_policy"),
        (dict(logp_policy=["a"], logp_reference=[-1.0], beta=0.1), "logp_policy"),
        (dict(logp_policy=[-1.0], logp_reference=[-1.0], beta=-0.1), "beta"),
        (dict(logp_policy=[-1.0], logp_reference=[-1.0], beta=float("nan")), "beta"),
    ],
)
def test_kl_penalty_rejects_bad_input_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        kl_penalty(**kwargs)


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(rewards=[1.0]), "rewards"),
        (dict(new_logp=[-1.0, -2.0, -3.0]), "new_logp"),
        (dict(ref_logp=[-1.0]), "ref_logp"),
        (dict(old_logp=[], new_logp=[], ref_logp=[], rewards=[]), "old_logp"),
        (dict(old_logp=[-1.0, float("nan")]), "old_logp"),
        (dict(new_logp=[-1.0, float("inf")]), "new_logp"),
        (dict(ref_logp=[float("nan"), -1.0]), "ref_logp"),
        (dict(rewards=[float("inf"), 0.0]), "rewards"),
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=1.0), "epsilon"),
        (dict(epsilon=-0.2), "epsilon"),
        (dict(epsilon=1.5), "epsilon"),
        (dict(epsilon=float("nan")), "epsilon"),
        (dict(beta=-0.5), "beta"),
        (dict(beta=float("inf")), "beta"),
    ],
)
def test_ppo_objective_rejects_bad_input_by_name(change, name):
    with pytest.raises(ValueError, match=name):
        ppo_rlhf_objective(**{**GOOD_PPO, **change})


def test_good_input_passes_validation():
    assert ppo_rlhf_objective(**GOOD_PPO)["objective"] == pytest.approx(
        round(
            _objective_by_hand(
                *(GOOD_PPO[k] for k in ("old_logp", "new_logp", "ref_logp", "rewards", "epsilon", "beta"))
            ),
            2,
        )
    )
    assert kl_penalty(np.array([-1.0]), [-1.0], 0) == 0.0


# ---- every bad input, named; extreme but finite inputs never give NaN or inf


def _grad(values):
    import torch

    return torch.tensor(values, requires_grad=True)


@pytest.mark.parametrize(
    "change, name, words",
    [
        (dict(logp_policy=None), "logp_policy", "is None"),
        (dict(logp_reference=[None, -1.0]), "logp_reference", "holds None, not a number"),
        (dict(logp_policy="-1.5"), "logp_policy", "is text"),
        (dict(logp_policy=["-1", "-2"]), "logp_policy", "holds text"),
        (dict(logp_policy=[-1 + 0j, -2.0]), "logp_policy", "complex"),
        (dict(logp_reference=np.array([-1.0 + 1j, -2.0])), "logp_reference", "complex"),
        (dict(logp_policy=[True, False]), "logp_policy", "booleans"),
        (dict(logp_policy=_grad([-1.0, -2.0])), "logp_policy", "requires grad"),
        (dict(beta=None), "beta", "got None"),
        (dict(beta=[0.1]), "beta", "single number, got a list"),
        (dict(beta=np.array([0.1])), "beta", "single number, got a ndarray of shape (1,)"),
        (dict(beta="0.1"), "beta", "got a str"),
        (dict(beta=0.1 + 0j), "beta", "complex"),
        (dict(beta=True), "beta", "got a bool"),
        (dict(beta=_grad(0.1)), "beta", "requires grad"),
        (dict(logp_policy=[10**400, -1.0]), "logp_policy", "too large"),
    ],
)
def test_kl_penalty_names_every_bad_input(change, name, words):
    kwargs = {"logp_policy": [-1.0, -2.0], "logp_reference": [-1.5, -2.5], "beta": 0.1, **change}
    with pytest.raises(ValueError, match=name) as info:
        kl_penalty(**kwargs)
    assert words in str(info.value) and "non-finite" not in str(info.value)


@pytest.mark.parametrize(
    "change, name",
    [
        (dict(old_logp=None), "old_logp"),
        (dict(new_logp="abc"), "new_logp"),
        (dict(ref_logp=[1j, 0]), "ref_logp"),
        (dict(rewards=_grad([1.0, 0.0])), "rewards"),
        (dict(epsilon=None), "epsilon"),
        (dict(epsilon=[0.2]), "epsilon"),
        (dict(epsilon="0.2"), "epsilon"),
        (dict(epsilon=0.2j), "epsilon"),
        (dict(beta=[0.1, 0.1]), "beta"),
        (dict(beta=_grad(0.1)), "beta"),
    ],
)
def test_ppo_objective_names_every_bad_input(change, name):
    with pytest.raises(ValueError, match=name):
        ppo_rlhf_objective(**{**GOOD_PPO, **change})


def test_scalars_may_be_numpy_numbers_or_zero_dimensional():
    assert kl_penalty([-1.0], [-2.0], np.float32(0.5)) == kl_penalty([-1.0], [-2.0], np.array(0.5)) == 0.5
    assert ppo_rlhf_objective(**{**GOOD_PPO, "epsilon": np.float64(0.2)}) == ppo_rlhf_objective(**GOOD_PPO)


@pytest.mark.parametrize(
    "kwargs, want",
    [
        (dict(logp_policy=[1e308, 1e308], logp_reference=[0.0, 0.0], beta=1.0), 1e308),  # the sum overflows
        (dict(logp_policy=[1e308], logp_reference=[-1e308], beta=0.1), 2e307),  # the difference overflows
        (dict(logp_policy=[1e308], logp_reference=[-1e308], beta=0.0), 0.0),  # 0 times a huge mean
        (dict(logp_policy=[-1000.0], logp_reference=[0.0], beta=1.0), -1000.0),
    ],
)
def test_kl_penalty_of_extreme_inputs_is_finite(kwargs, want):
    assert kl_penalty(**kwargs) == pytest.approx(want, rel=1e-12)


def test_kl_penalty_beyond_the_float_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"beta \* mean\(logp_policy - logp_reference\) is beyond the range"):
        kl_penalty([1e308], [-1e308], 1.0)


@pytest.mark.parametrize(
    "change, want",
    [
        (dict(old_logp=[0.0], new_logp=[-1000.0], ref_logp=[0.0], rewards=[1.0]), 0.0),  # ratio e^-1000 = 0
        (dict(old_logp=[-1000.0], new_logp=[0.0], ref_logp=[0.0], rewards=[1.0]), 1.2),  # clipped at 1 + eps
        (dict(old_logp=[-1000.0], new_logp=[0.0], ref_logp=[0.0], rewards=[0.0], beta=0.0), 0.0),  # not inf * 0
        (dict(old_logp=[-1.0] * 2, new_logp=[-1.0] * 2, ref_logp=[-1.0] * 2, rewards=[1e308] * 2, beta=0.0), 1e308),
    ],
)
def test_ppo_objective_of_extreme_inputs_is_finite(change, want):
    got = ppo_rlhf_objective(**{"epsilon": 0.2, "beta": 0.1, **change})
    assert got["objective"] == got["policy_loss"] == pytest.approx(want, rel=1e-12)
    assert all(np.isfinite(v) for v in got.values())


def test_ppo_objective_beyond_the_float_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"new_logp - old_logp = 1000 at token 0: the ratio exp\(1000\)"):
        ppo_rlhf_objective([-1000.0], [0.0], [0.0], [-1.0], 0.2, 0.0)
    with pytest.raises(ValueError, match="shaped advantage"):
        ppo_rlhf_objective([-1.0], [-1.0], [-1e308], [-1e308], 0.2, 1.0)
