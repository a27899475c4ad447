# %% [markdown]
# # 2. The PPO-RLHF objective
#
# Placeholder text, to be written.

# %%
import numpy as np

from minirlhf.exercises import check

# %% tags=["solution"]
def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    """Return the KL-shaped clipped surrogate and its parts, rounded to 2 decimals."""
    # BEGIN SOLUTION
    old_logp, new_logp, ref_logp, rewards = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
    ratio = np.exp(new_logp - old_logp)
    kl = new_logp - ref_logp
    adv = rewards - beta * kl
    J = np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv).mean()
    return {"objective": round(float(J), 2), "policy_loss": round(float(J), 2),
            "kl_penalty": round(float(beta * kl.mean()), 2)}
    # END SOLUTION

# %% [hints] ppo_rlhf_objective

# %%
check("ppo_rlhf_objective", ppo_rlhf_objective);
