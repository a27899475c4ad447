# Grader fixture: returns a list of the three numbers instead of a dict.
# verdict: fail
# says: the result is a list, expected a dict with keys

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
    old_logp, new_logp, ref_logp, rewards = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
    ratio = np.exp(new_logp - old_logp)
    kl = new_logp - ref_logp
    adv = rewards - beta * kl
    J = np.minimum(ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv).mean()
    return [round(float(J), 2), round(float(J), 2), round(float(beta * kl.mean()), 2)]

# %%
check("ppo_rlhf_objective", ppo_rlhf_objective);
