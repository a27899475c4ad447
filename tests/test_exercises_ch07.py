"""Chapter 7: the adaptive KL controller and GAE, checked against numbers worked by hand,
against their defining properties, and against plausible slips that the checks must catch."""

import numpy as np
import pytest

from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get
from minirlhf.course.report import next_hint
from minirlhf.ppo import adaptive_kl_update, gae

# ----------------------------------------------------------------------------- the controller


@pytest.mark.parametrize(
    "beta, kl, target, n_steps, horizon, expected",
    [
        (0.1, 6.0, 6.0, 1024, 10_000, 0.1),  # on target
        (0.1, 60.0, 6.0, 1024, 10_000, 0.1 * (1 + 0.2 * 0.1024)),  # capped at +0.2
        (0.1, 0.0, 6.0, 1024, 10_000, 0.1 * (1 - 0.2 * 0.1024)),  # capped at -0.2
        (0.5, 0.11, 0.1, 64, 640, 0.505),  # e = 0.1 inside the clip
        (0.3, 100.0, 1.0, 0, 10_000, 0.3),  # no samples, no change
        (0.0, 5.0, 0.05, 64, 1000, 0.0),  # beta = 0 stays 0
        (1.0, 2.0, 1.0, 1000, 1000, 1.2),  # one horizon at the cap: +20%
    ],
)
def test_controller_by_hand(beta, kl, target, n_steps, horizon, expected):
    got = adaptive_kl_update(beta, kl, target, n_steps, horizon)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, abs=1e-12)


def test_controller_moves_toward_the_target_and_at_most_20_percent_per_horizon():
    rng = np.random.default_rng(0)
    for _ in range(500):
        beta, target = rng.uniform(0.01, 2), rng.uniform(0.01, 5)
        kl = target * rng.uniform(0, 4)
        horizon = int(rng.integers(10, 10_000))
        new = adaptive_kl_update(beta, kl, target, horizon, horizon)  # one whole horizon
        assert 0.8 * beta - 1e-12 <= new <= 1.2 * beta + 1e-12
        assert np.sign(new - beta) == np.sign(np.clip(kl / target - 1, -0.2, 0.2))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"target": 0.0}, "target"),
        ({"target": -1.0}, "target"),
        ({"horizon": 0}, "horizon"),
        ({"n_steps": -1}, "n_steps"),
        ({"beta": -0.1}, "beta"),
    ],
)
def test_controller_rejects_bad_input_by_name(kwargs, name):
    args = {"beta": 0.1, "kl": 0.05, "target": 0.05, "n_steps": 64, "horizon": 1000, **kwargs}
    with pytest.raises(ValueError, match=name):
        adaptive_kl_update(**args)


def _controller_slips():
    def no_clip(beta, kl, target, n_steps, horizon):
        return float(beta * (1 + (kl / target - 1) * n_steps / horizon))

    def clips_beta_not_error(beta, kl, target, n_steps, horizon):
        return float(np.clip(beta * (1 + (kl / target - 1) * n_steps / horizon), 0.8 * beta, 1.2 * beta))

    def inverted(beta, kl, target, n_steps, horizon):
        e = float(np.clip(target / kl - 1 if kl else 0.2, -0.2, 0.2))
        return float(beta * (1 + e * n_steps / horizon))

    def numpy_scalar(beta, kl, target, n_steps, horizon):
        return beta * (1 + np.clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon) + np.float64(0)

    def additive(beta, kl, target, n_steps, horizon):
        return float(beta + np.clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon)

    return [no_clip, clips_beta_not_error, inverted, numpy_scalar, additive]


@pytest.mark.parametrize("slip", _controller_slips(), ids=lambda f: f.__name__)
def test_controller_checks_catch_slips(slip):
    report = run_cases(slip, get("adaptive_kl_update"))
    assert not report.passed


# ----------------------------------------------------------------------------- GAE


def test_gae_worked_example():
    # rewards only at the end, values 0.5, 0.6, 0.8: deltas 0.1, 0.2, 0.2
    r, v = [0.0, 0.0, 1.0], [0.5, 0.6, 0.8]
    np.testing.assert_allclose(gae(r, v, 1.0, 0.5), [0.25, 0.3, 0.2], atol=1e-12)
    np.testing.assert_allclose(gae(r, v, 1.0, 0.0), [0.1, 0.2, 0.2], atol=1e-12)
    np.testing.assert_allclose(gae(r, v, 1.0, 1.0), [0.5, 0.4, 0.2], atol=1e-12)


def _returns(r, gamma):
    out, running = np.zeros_like(r), np.zeros(r.shape[:-1])
    for t in reversed(range(r.shape[-1])):
        running = r[..., t] + gamma * running
        out[..., t] = running
    return out


def test_gae_limits_on_random_batches():
    rng = np.random.default_rng(1)
    for _ in range(200):
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, 12)))
        r, v = rng.normal(size=shape), rng.normal(size=shape)
        gamma = float(rng.choice([1.0, 0.99, 0.5]))
        # lam = 1: the discounted return minus the value
        np.testing.assert_allclose(gae(r, v, gamma, 1.0), _returns(r, gamma) - v, atol=1e-10)
        # lam = 0: the one-step TD error, with V = 0 after the last token
        v_next = np.concatenate([v[:, 1:], np.zeros((shape[0], 1))], axis=1)
        np.testing.assert_allclose(gae(r, v, gamma, 0.0), r + gamma * v_next - v, atol=1e-10)
        # a batch is its rows, one by one
        lam = float(rng.uniform(0, 1))
        rows = np.stack([gae(row_r, row_v, gamma, lam) for row_r, row_v in zip(r, v)])
        np.testing.assert_allclose(gae(r, v, gamma, lam), rows, atol=1e-12)


def test_gae_does_not_change_its_inputs_and_rejects_bad_input():
    r, v = np.array([0.0, 1.0]), np.array([0.2, 0.4])
    gae(r, v, 1.0, 0.95)
    assert r.tolist() == [0.0, 1.0] and v.tolist() == [0.2, 0.4]
    with pytest.raises(ValueError, match="values"):
        gae([0.0, 1.0], [0.2], 1.0, 0.95)
    with pytest.raises(ValueError, match="lam"):
        gae(r, v, 1.0, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        gae(r, v, -0.1, 0.9)


def _gae_slips():
    def forgets_gamma_in_trace(rewards, values, gamma, lam):
        rewards, values = np.asarray(rewards, float), np.asarray(values, float)
        adv, nv, na = np.zeros_like(rewards), 0.0, 0.0
        for t in reversed(range(rewards.shape[-1])):
            na = rewards[..., t] + gamma * nv - values[..., t] + lam * na
            adv[..., t], nv = na, values[..., t]
        return adv

    def forward_walk(rewards, values, gamma, lam):
        rewards, values = np.asarray(rewards, float), np.asarray(values, float)
        adv, prev = np.zeros_like(rewards), 0.0
        T = rewards.shape[-1]
        for t in range(T):
            nv = values[..., t + 1] if t + 1 < T else 0.0
            prev = rewards[..., t] + gamma * nv - values[..., t] + gamma * lam * prev
            adv[..., t] = prev
        return adv

    def bootstraps_past_the_end(rewards, values, gamma, lam):
        rewards, values = np.asarray(rewards, float), np.asarray(values, float)
        adv, nv, na = np.zeros_like(rewards), values[..., -1], 0.0
        for t in reversed(range(rewards.shape[-1])):
            na = rewards[..., t] + gamma * nv - values[..., t] + gamma * lam * na
            adv[..., t], nv = na, values[..., t]
        return adv

    def returns_a_list(rewards, values, gamma, lam):
        return gae(rewards, values, gamma, lam).tolist()

    def first_axis(rewards, values, gamma, lam):
        rewards, values = np.asarray(rewards, float), np.asarray(values, float)
        adv, nv, na = np.zeros_like(rewards), 0.0, 0.0
        for t in reversed(range(len(rewards))):
            na = rewards[t] + gamma * nv - values[t] + gamma * lam * na
            adv[t], nv = na, values[t]
        return adv

    return [forgets_gamma_in_trace, forward_walk, bootstraps_past_the_end, returns_a_list, first_axis]


@pytest.mark.parametrize("slip", _gae_slips(), ids=lambda f: f.__name__)
def test_gae_checks_catch_slips(slip):
    report = run_cases(slip, get("gae"))
    assert not report.passed


@pytest.mark.parametrize("name", ["adaptive_kl_update", "gae"])
def test_every_case_is_reproduced_and_random_inputs_are_valid(name):
    ex = get(name)
    assert len(ex.cases) >= 6 and len(ex.hints) >= 3
    assert run_cases(ex.reference, ex).passed
    rng = np.random.default_rng(3)
    for _ in range(200):
        ex.reference(**ex.random_kwargs(rng))  # never raises: the random inputs are valid


# The hint each slip gets: the one about its own mistake. Controller: 2 the error and its clip,
# 3 the multiplicative update and the Python float. GAE: 1 the backward walk from 0 after the
# end, 2 the TD error, the trace and [..., t], 3 the NumPy array.
HINTS = [
    ("adaptive_kl_update", "no_clip", "no-clip", 2),
    ("adaptive_kl_update", "clips_beta_not_error", "clip-beta", 2),
    ("adaptive_kl_update", "inverted", "inverted", 2),
    ("adaptive_kl_update", "numpy_scalar", "numpy-scalar", 3),
    ("adaptive_kl_update", "additive", "additive", 3),
    ("gae", "forgets_gamma_in_trace", "no-gamma-in-trace", 2),
    ("gae", "forward_walk", "forward", 1),
    ("gae", "bootstraps_past_the_end", "bootstrap-past-end", 1),
    ("gae", "returns_a_list", "type", 3),
    ("gae", "first_axis", "first-axis", 2),
]


@pytest.mark.parametrize("name, slip, mistake, number", HINTS, ids=[row[1] for row in HINTS])
def test_every_slip_gets_the_hint_for_its_mistake(name, slip, mistake, number):
    fn = {f.__name__: f for f in _controller_slips() + _gae_slips()}[slip]
    report = run_cases(fn, get(name))
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, get(name).hints[number - 1])


def test_the_table_covers_every_slip():
    assert sorted(f.__name__ for f in _controller_slips() + _gae_slips()) == sorted(row[1] for row in HINTS)


@pytest.mark.parametrize("name", ["adaptive_kl_update", "gae"])
def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases(name):
    ex = get(name)

    def scaled(**kwargs):
        return 1.37 * ex.reference(**kwargs)

    report = run_cases(scaled, ex)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    assert report.hint() == next_hint(ex.hints, report.n_passed, len(ex.cases))
