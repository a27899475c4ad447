# Grader fixture: a plausible mistake, the absolute value of the KL. Right on most inputs,
# wrong whenever the mean is negative.
# verdict: fail
# says: the result has the wrong sign

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * abs(kl.mean())), 2)

# %%
check("kl_penalty", kl_penalty);
