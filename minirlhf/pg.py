"""The policy gradient before PPO: the REINFORCE loss with a baseline.

Defined in chapter 2.

For actions ``y_i`` sampled from the policy, the gradient of
``-mean_i (R_i - b) * log pi(y_i)`` is minus an unbiased estimate of the policy gradient
``grad E_{y ~ pi}[R(y)]`` (Williams 1992), for any baseline ``b`` that does not depend on the
sampled actions. Minimizing the loss climbs the expected reward.
"""

import torch


def reinforce_loss(logp: torch.Tensor, rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    """Return the REINFORCE loss, a 0-d tensor: ``-mean((rewards - baseline) * logp)``.

    logp: (N,) log-probs of the sampled actions, with their gradient; rewards: (N,), treated
    as constants; baseline: a number. Only the loss's gradient means something: its value
    shifts with the baseline.
    """
    weight = torch.as_tensor(rewards, dtype=logp.dtype) - baseline  # (N,)
    return -(weight.detach() * logp).mean()
