# Grader fixture: the exercise function was renamed. Expected: "not found: did you rename it?"
# with the new name.
# verdict: fail
# says: not found: did you rename it? (the notebook defines kl_penalty_v2)

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty_v2(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty_v2);
