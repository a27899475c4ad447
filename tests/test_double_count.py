"""The KL counted twice, on a one-token policy: the exact expected gradients of chapter 2's
versions against the KLs they stand for, and against sampled batches."""

import math

import pytest
import torch

from minirlhf.studies import double_count as dc

# The chapter's setting: the reference and policy of chapter 7's check, one reward per token.
REF = [2.0, 1.0, 0.0, -1.0, 0.5]
OLD = [2.5, 0.4, 0.3, -1.2, 0.9]
REWARD = [1.0, 0.0, 0.5, 0.0, 0.8]
BETA, LR = 0.5, 1.0


def grads_at(theta, beta=BETA, reward=REWARD):
    """Return the gradients of every objective and KL at theta, as a dict."""
    theta = torch.as_tensor(theta, dtype=torch.float64).clone().requires_grad_(True)
    reward_part = (theta.softmax(-1) * torch.tensor(reward, dtype=torch.float64)).sum()
    return dc.gradients(
        {**dc.objectives(theta, OLD, REF, reward, beta), **dc.divergences(theta, OLD, REF), "reward": reward_part},
        theta,
    )


def after_update():
    return dc.update(OLD, REF, REWARD, BETA, LR)


def close(a, b):
    return torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_at_the_first_step_the_bug_has_the_gradient_of_beta_not_of_two_beta():
    g = grads_at(OLD)
    assert close(g["counted twice"], g["kl in reward"])
    assert close(g["kl in reward"], g["true"])
    assert not torch.allclose(g["counted twice"], g["kl in reward, 2 beta"], atol=1e-3)
    # while its value is that of 2 * beta
    theta = torch.tensor(OLD, dtype=torch.float64, requires_grad=True)
    objs = dc.objectives(theta, OLD, REF, REWARD, BETA)
    assert objs["counted twice"].item() == pytest.approx(objs["kl in reward, 2 beta"].item())


def test_the_extra_term_is_beta_times_the_gradient_of_kl_old_to_pi_at_any_theta():
    for theta in (
        torch.tensor(OLD, dtype=torch.float64),
        after_update(),
        torch.tensor([0.0, 1.0, -1.0, 2.0, 0.0], dtype=torch.float64),
    ):
        g = grads_at(theta)
        extra = g["counted twice"] - g["kl in reward"]
        assert close(extra, BETA * g["KL(old || pi)"])
    assert float(grads_at(OLD)["KL(old || pi)"].norm()) < 1e-12  # zero at the first step


def test_version_one_is_the_true_gradient_while_no_ratio_is_clipped():
    theta = after_update()
    g = grads_at(theta)
    assert close(g["kl in reward"], g["true"])
    # the KL fixed at rollout agrees at the first step only; after it, it lags by
    # beta * grad KL(pi || old)
    assert close(grads_at(OLD)["kl fixed at rollout"], grads_at(OLD)["true"])
    theta_t = theta.clone().requires_grad_(True)
    logp, logp_old = theta_t.log_softmax(-1), torch.tensor(OLD, dtype=torch.float64).log_softmax(-1)
    (lag,) = torch.autograd.grad((logp.exp() * (logp - logp_old)).sum(), theta_t)
    assert close(g["kl fixed at rollout"], g["true"] + BETA * lag)
    assert not torch.allclose(g["kl fixed at rollout"], g["true"], atol=1e-4)


def test_without_a_leash_every_version_climbs_the_expected_reward():
    for theta in (torch.tensor(OLD, dtype=torch.float64), after_update()):
        g = grads_at(theta, beta=0.0)
        for name in dc.VERSIONS:
            assert close(g[name], g["reward"]), name


def test_the_k3_loss_term_is_the_reverse_kl_gradient_at_the_first_step_only():
    g = grads_at(OLD)
    assert close(g["k3 loss term"] - g["reward"], -BETA * g["KL(ref || pi)"])
    assert not close(g["k3 loss term"] - g["reward"], -BETA * g["KL(pi || ref)"])
    g = grads_at(after_update())
    k3_leash = g["k3 loss term"] - g["reward"]
    assert not torch.allclose(k3_leash, -BETA * g["KL(ref || pi)"], atol=1e-4)
    assert dc.cosine(k3_leash, -g["KL(ref || pi)"]) > 0.99


def test_the_exact_expectation_is_the_mean_of_sampled_batches():
    # Sample tokens from pi_old, average each sample's term as a batch would, differentiate:
    # with many samples this must land on the exact expected gradient of the bug, much nearer
    # to it than to version 1's, from which it differs only by the small extra term.
    theta_new = after_update()
    p_old = torch.tensor(OLD, dtype=torch.float64).softmax(-1)
    logp_ref = torch.tensor(REF, dtype=torch.float64).log_softmax(-1)
    reward = torch.tensor(REWARD, dtype=torch.float64)
    y = torch.multinomial(p_old, 1_000_000, replacement=True, generator=torch.Generator().manual_seed(0))
    theta = theta_new.clone().requires_grad_(True)
    logp = theta.log_softmax(-1)
    new, old, ref = logp[y], p_old.log()[y], logp_ref[y]  # (n,) per sampled token
    ratio, kl = torch.exp(new - old), new - ref
    adv = reward[y] - BETA * kl
    J = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean() - BETA * kl.mean()
    (sampled,) = torch.autograd.grad(J, theta)
    g = grads_at(theta_new)
    gap = float((g["counted twice"] - g["kl in reward"]).norm())
    assert float((sampled - g["counted twice"]).norm()) < 0.1 * gap


def test_study_of_the_chapter():
    result = dc.study(REF, OLD, REWARD, BETA, LR)
    lo, hi = result["ratios"]
    assert 0.8 < lo < 1 < hi < 1.2  # inside the clip band: nothing is clipped
    first, after = result["leash"]["first step"], result["leash"]["after one update"]
    assert first["counted twice"][0] == pytest.approx(1.0)
    assert first["kl in reward, 2 beta"][0] == pytest.approx(2.0)
    assert first["true"] == (pytest.approx(1.0), pytest.approx(1.0))
    assert after["counted twice"][0] == pytest.approx(0.87, abs=0.005)
    size, away, toward = result["extra"]["first step"]
    assert size == 0.0 and math.isnan(away) and math.isnan(toward)
    size, away, toward = result["extra"]["after one update"]
    assert size > 0.1 and away == pytest.approx(1.0) and toward < 0
    assert result["k3"]["first step"] == (pytest.approx(1.0), pytest.approx(1.0))
    assert result["k3"]["after one update"][0] != pytest.approx(1.0, abs=0.01)
    table = dc.format_study(result)
    assert max(len(line) for line in table.splitlines()) <= 74  # the book's code column
    assert "3. both (the bug)" in table and "-" in table


def test_cosine_of_a_zero_vector_is_nan():
    assert math.isnan(dc.cosine(torch.zeros(3), torch.ones(3)))
    assert dc.cosine(torch.tensor([1.0, 0.0]), torch.tensor([-2.0, 0.0])) == pytest.approx(-1.0)
