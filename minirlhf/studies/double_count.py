"""Where each way of adding the KL pulls the policy: expected gradients, computed exactly.

Chapter 2 adds the leash to PPO in the reward (version 1), as a k3 loss term (version 2), or
both in the reward and again as ``beta * mean(new_logp - ref_logp)`` (version 3, a bug). Their
*values* are easy to compare on a batch; this module compares their *gradients*, and does it
without sampling noise.

The world is one token: a policy ``pi_theta = softmax(theta)`` over a few tokens, a frozen
reference ``pi_ref = softmax(logits_ref)`` and a reward per token. PPO samples the batch from
``pi_old = softmax(theta_old)`` and averages per-sample terms over it; here every average over
``y ~ pi_old`` is a sum over the vocabulary weighted by ``pi_old(y)``, so each objective below
is the exact expectation of its batch version, and torch differentiates it exactly.

With ``ratio = pi_theta / pi_old`` and ``kl = log pi_theta - log pi_ref`` (per token):

========================  ====================================================================
``"kl in reward"``        ``E_old[clip-min(ratio, r - beta * kl)]``; kl follows theta (ch. 2's J)
``"kl fixed at rollout"`` the same with kl computed from pi_old: a constant, as real code does
``"kl in reward, 2 beta"`` ``"kl in reward"`` with 2 * beta
``"counted twice"``       ``"kl in reward"`` minus ``beta * E_old[kl]`` (the bug)
``"k3 loss term"``        ``E_old[clip-min(ratio, r)]`` minus ``beta * E_old[k3]`` (GRPO's place)
``"kl in reward + k3"``   ``"kl in reward"`` minus ``beta * E_old[k3]``
========================  ====================================================================

and ``"true"`` is ``E_theta[r] - beta * KL(pi_theta || pi_ref)``, the objective all of them
stand in for. While every ratio stays inside the clip band, the reward part of every version
is exactly ``E_theta[r]`` (because ``pi_old * ratio = pi_theta``), so what differs between
them is the *leash*: the gradient minus the gradient of ``E_theta[r]``. :func:`study` reports
each leash at the first step of an update (theta = theta_old) and after one update step.

Two facts the tests check: the bug's extra term has the expected gradient
``-beta * sum_y pi_old(y) grad log pi_theta(y) = beta * grad KL(pi_old || pi_theta)``, zero at
theta_old and pointing away from pi_old after; and at theta_old the k3 term's is exactly
``-beta * grad KL(pi_ref || pi_theta)``, the KL in the other direction.
"""

from __future__ import annotations

import torch

__all__ = ["VERSIONS", "SHOWN", "objectives", "divergences", "gradients", "cosine", "update", "study", "format_study"]

VERSIONS = (
    "kl in reward",
    "kl fixed at rollout",
    "kl in reward, 2 beta",
    "counted twice",
    "k3 loss term",
    "kl in reward + k3",
)
SHOWN = tuple(v for v in VERSIONS if v != "kl fixed at rollout")  # the versions study reports


def _as_tensor(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def _clipped(ratio, adv, epsilon):
    """Return min(ratio * adv, clip(ratio, 1 - epsilon, 1 + epsilon) * adv), elementwise."""
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * adv)


def objectives(theta, theta_old, logits_ref, reward, beta, epsilon=0.2) -> dict:
    """Return {name: expected objective}, 0-d tensors differentiable in ``theta``: "true" and
    the six :data:`VERSIONS`, each the exact expectation over y ~ softmax(theta_old) of its
    batch mean."""
    logp = theta.log_softmax(-1)  # (V,)
    logp_old = _as_tensor(theta_old).log_softmax(-1).detach()  # (V,) the sampling policy
    logp_ref = _as_tensor(logits_ref).log_softmax(-1)  # (V,)
    reward = _as_tensor(reward)  # (V,)
    p, p_old = logp.exp(), logp_old.exp()
    ratio = torch.exp(logp - logp_old)  # (V,)
    kl = logp - logp_ref  # (V,) k1 of each token, follows theta
    k3 = torch.exp(-kl) - 1 + kl  # (V,)

    def expect(per_token):
        """Return the average over y ~ pi_old, summed exactly over the vocabulary."""
        return (p_old * per_token).sum()

    in_reward = expect(_clipped(ratio, reward - beta * kl, epsilon))
    return {
        "true": (p * reward).sum() - beta * (p * kl).sum(),
        "kl in reward": in_reward,
        "kl fixed at rollout": expect(_clipped(ratio, reward - beta * (logp_old - logp_ref), epsilon)),
        "kl in reward, 2 beta": expect(_clipped(ratio, reward - 2 * beta * kl, epsilon)),
        "counted twice": in_reward - beta * expect(kl),
        "k3 loss term": expect(_clipped(ratio, reward, epsilon)) - beta * expect(k3),
        "kl in reward + k3": in_reward - beta * expect(k3),
    }


def divergences(theta, theta_old, logits_ref) -> dict:
    """Return the exact KLs, 0-d tensors differentiable in ``theta``: "KL(pi || ref)",
    "KL(ref || pi)" and "KL(old || pi)", where pi = softmax(theta)."""
    logp = theta.log_softmax(-1)
    logp_old = _as_tensor(theta_old).log_softmax(-1).detach()
    logp_ref = _as_tensor(logits_ref).log_softmax(-1)
    return {
        "KL(pi || ref)": (logp.exp() * (logp - logp_ref)).sum(),
        "KL(ref || pi)": (logp_ref.exp() * (logp_ref - logp)).sum(),
        "KL(old || pi)": (logp_old.exp() * (logp_old - logp)).sum(),
    }


def gradients(quantities: dict, theta: torch.Tensor) -> dict:
    """Return {name: d quantity / d theta} for a dict of 0-d tensors built from ``theta``."""
    return {name: torch.autograd.grad(q, theta, retain_graph=True)[0].detach() for name, q in quantities.items()}


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Return the cosine of the angle between two vectors, or NaN if either is zero."""
    norms = float(a.norm() * b.norm())
    return float(torch.dot(a, b)) / norms if norms > 0 else float("nan")


def update(theta_old, logits_ref, reward, beta, lr, epsilon=0.2) -> torch.Tensor:
    """Return theta after one gradient-ascent step of size ``lr`` on ``"kl in reward"``,
    starting at theta_old."""
    theta = _as_tensor(theta_old).clone().requires_grad_(True)
    J = objectives(theta, theta_old, logits_ref, reward, beta, epsilon)["kl in reward"]
    (grad,) = torch.autograd.grad(J, theta)
    return (theta + lr * grad).detach()


def study(logits_ref, theta_old, reward, beta, lr, epsilon=0.2) -> dict:
    """Return the leashes at the first step of an update and after one update step.

    A version's *leash* is its expected gradient minus the gradient of E_theta[r]. Sizes are
    norms divided by the norm of beta * grad KL(pi || ref), the leash the setting asks for;
    cosines of 0 vectors are NaN. For step "first step" (theta = theta_old) and "after one
    update" (:func:`update`), the result holds

    - ``"leash"``: {name: (size, cosine with -grad KL(pi || ref), the pull toward the
      reference)} for "true" and the versions of :data:`SHOWN`;
    - ``"extra"``: the bug's extra term, (size, cosine with +grad KL(old || pi), that is away
      from pi_old, cosine with -grad KL(pi || ref));
    - ``"k3"``: the k3 term's leash against -beta * grad KL(ref || pi), (norm ratio, cosine);

    and ``"ratios"``: (min, max) of pi_new / pi_old after the update.
    """
    theta_new = update(theta_old, logits_ref, reward, beta, lr, epsilon)
    ratios = theta_new.softmax(-1) / _as_tensor(theta_old).softmax(-1)
    out = {"ratios": (float(ratios.min()), float(ratios.max())), "leash": {}, "extra": {}, "k3": {}}
    for step, point in (("first step", _as_tensor(theta_old)), ("after one update", theta_new)):
        theta = point.clone().requires_grad_(True)
        reward_part = (theta.softmax(-1) * _as_tensor(reward)).sum()
        g = gradients(
            {
                **objectives(theta, theta_old, logits_ref, reward, beta, epsilon),
                **divergences(theta, theta_old, logits_ref),
                "reward": reward_part,
            },
            theta,
        )
        unit = float(beta * g["KL(pi || ref)"].norm())
        toward_ref = -g["KL(pi || ref)"]

        def size_and_cos(v, direction, scale=unit):
            if float(v.norm()) <= 1e-12 * scale:  # zero up to rounding: no direction
                return 0.0, float("nan")
            return float(v.norm()) / scale, cosine(v, direction)

        out["leash"][step] = {name: size_and_cos(g[name] - g["reward"], toward_ref) for name in ("true",) + SHOWN}
        extra = g["counted twice"] - g["kl in reward"]
        size, away = size_and_cos(extra, g["KL(old || pi)"])
        out["extra"][step] = (size, away, size_and_cos(extra, toward_ref)[1])
        reverse = -beta * g["KL(ref || pi)"]
        out["k3"][step] = size_and_cos(g["k3 loss term"] - g["reward"], reverse, float(reverse.norm()))
    return out


LABELS = {
    "true": "true: E[r] - beta KL",
    "kl in reward": "1. KL in the reward",
    "kl in reward, 2 beta": "1. with 2 * beta",
    "counted twice": "3. both (the bug)",
    "k3 loss term": "2. k3 loss term",
    "kl in reward + k3": "1 and a k3 loss term",
}


def format_study(result: dict) -> str:
    """Return the study as text: the leash of every version (size and cosine), the ratios
    after the update, then the bug's extra term and the k3 term; numbers to 2 decimals, '-'
    for the cosine of a zero vector."""

    def num(x):
        return f"{'-':>9}" if x != x else f"{x:>+9.2f}"

    steps = list(result["leash"])
    head = f"{'':<22}" + "".join(f"{s:>18}" for s in steps)
    lines = [head, f"{'leash of':<22}" + f"{'size':>9}{'cos':>9}" * len(steps), "-" * len(head)]
    for name, label in LABELS.items():
        lines.append(
            f"{label:<22}"
            + "".join(f"{result['leash'][s][name][0]:>9.2f}{num(result['leash'][s][name][1])}" for s in steps)
        )
    lo, hi = result["ratios"]
    lines += [f"ratios pi_new / pi_old after the update: {lo:.2f} to {hi:.2f}", "", head]
    extra, k3 = result["extra"], result["k3"]
    lines += [
        "bug's extra term",
        f"{'  size':<22}" + "".join(f"{extra[s][0]:>18.2f}" for s in steps),
        f"{'  cos, away from old':<22}" + "".join(num(extra[s][1]).rjust(18) for s in steps),
        f"{'  cos, toward ref':<22}" + "".join(num(extra[s][2]).rjust(18) for s in steps),
        "k3 term / -beta grad KL(ref || pi)",
        f"{'  size':<22}" + "".join(f"{k3[s][0]:>18.2f}" for s in steps),
        f"{'  cos':<22}" + "".join(num(k3[s][1]).rjust(18) for s in steps),
    ]
    return "\n".join(lines)
