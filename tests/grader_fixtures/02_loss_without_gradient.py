# Grader fixture: a REINFORCE loss with the right value, rebuilt from .item(): a leaf with no
# path to the log-probs, so it trains nothing.
# verdict: fail
# says: your loss has no gradient: was it computed under no_grad, or rebuilt from .item()?

# %%
import numpy as np
import torch

from minirlhf.course.exercises import check

# %%
def reinforce_loss(logp, rewards, baseline):
    loss = -((rewards - baseline) * logp).mean()
    return torch.tensor(loss.item(), requires_grad=True)

# %%
check("reinforce_loss", reinforce_loss);

# %%
def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    old_logp, new_logp, ref_logp, rewards = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
    ratio = np.exp(new_logp - old_logp)
    kl = new_logp - ref_logp
    adv = rewards - beta * kl
    J = np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv).mean()
    return {"objective": round(float(J), 2), "policy_loss": round(float(J), 2),
            "kl_penalty": round(float(beta * kl.mean()), 2)}

# %%
check("ppo_rlhf_objective", ppo_rlhf_objective);
