"""The baseline-variance measurement of chapter 7: sampled values match the closed forms,
and the closed forms match cases worked by hand."""

import pytest

from minirlhf.studies import variance


def test_closed_form_by_hand():
    # p = 0.5: a token's own noise vanishes (x^2 = 1/4 always), so only the other tokens count.
    got = variance.closed_form(4, p=0.5, lam=0.5, batch_size=5)
    assert got["batch mean"] == pytest.approx(3 + 4 / 4)  # T - 1 others + T / (B - 1)
    assert got["value, lam = 1"] == pytest.approx((3 + 2 + 1 + 0) / 4)  # later tokens only
    # GAE: later tokens weighted by lam^2k: (1/4 + 1/16 + 1/64) + (1/4 + 1/16) + 1/4 + 0, over 4
    assert got["value + GAE"] == pytest.approx((0.328125 + 0.3125 + 0.25) / 4)
    # one token: the value baseline leaves only the token's own noise, kappa
    p = 0.3
    kappa = (p * 0.7**4 + 0.7 * p**4) / (p * 0.7) ** 2 - 1
    one = variance.closed_form(1, p=p)
    assert one["value, lam = 1"] == pytest.approx(kappa) and one["value + GAE"] == pytest.approx(kappa)


@pytest.mark.parametrize("T", [1, 3, 16, 64])
def test_measurement_agrees_with_closed_form(T):
    got = variance.measure(T, p=0.3, lam=0.9, batch_size=32, n_batches=128, seed=1)
    want = variance.closed_form(T, p=0.3, lam=0.9, batch_size=32)
    for method in variance.METHODS:
        assert got[method] == pytest.approx(want[method], rel=0.08), method


def test_the_batch_baseline_grows_with_length_and_gae_does_not():
    short, long = variance.closed_form(4), variance.closed_form(512)
    assert long["batch mean"] / short["batch mean"] > 100  # about linear in T: 4 -> 512
    assert long["value + GAE"] < 1 / (1 - 0.95**2) + 1  # bounded by kappa + lam^2 / (1 - lam^2)
    assert long["value, lam = 1"] == pytest.approx(short["value, lam = 1"] + (511 - 3) / 2)


def test_study_is_deterministic_and_reports_the_closed_form_beside_the_measurement():
    a = variance.study(lengths=(1, 4), n_batches=8)
    b = variance.study(lengths=(1, 4), n_batches=8)
    assert a == b
    assert a["T"] == [1, 4] and all(len(v) == 2 for v in a["measured"].values())
    for m in variance.METHODS:
        for i, T in enumerate(a["T"]):
            assert a["exact"][m][i] == pytest.approx(variance.closed_form(T)[m])
            assert a["measured"][m][i] == pytest.approx(a["exact"][m][i], rel=0.5)  # 8 batches: rough


@pytest.mark.parametrize(
    "kwargs, name",
    [({"T": 0}, "T"), ({"T": 2.5}, "T"), ({"p": 1.0}, "p"), ({"lam": 1.2}, "lam"), ({"batch_size": 1}, "batch_size")],
)
def test_bad_input_is_rejected_by_name(kwargs, name):
    args = {"T": 4, **kwargs}
    with pytest.raises(ValueError, match=name):
        variance.closed_form(**args)
    with pytest.raises(ValueError, match=name):
        variance.measure(**args)
