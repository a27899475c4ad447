# Grader fixture: averages only the tokens with a positive KL, which is an empty mean (NaN)
# when there are none.
# verdict: fail
# says: the result is NaN

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    kl = kl[kl > 0]
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
