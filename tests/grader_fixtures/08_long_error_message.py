# Grader fixture: a right group_advantages whose ValueError names group_size only after 800
# characters: the message is judged whole, in the grader as in the check cell.
# verdict: pass
# says: PASS  group_advantages

# %%
import torch

from minirlhf.course.exercises import check

# %%
def group_advantages(rewards, group_size, eps=1e-4):
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError("a long preamble " * 50 + f"then: group_size {group_size} does not fit")
    r = rewards.view(-1, group_size)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + eps)
    same = (r == r[:, :1]).all(1, keepdim=True)
    return torch.where(same, torch.zeros_like(adv), adv).reshape(-1)

# %%
check("group_advantages", group_advantages);

# %%
def grpo_token_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.04, kl_clamp=10.0):
    ratio = torch.exp(new_logp - old_logp)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    k3 = torch.exp(d) - d - 1
    return (-(surrogate * mask).sum() + beta * (k3 * mask).sum()) / mask.sum()
