# Grader fixture: right values, but it subtracts in place and so changes the caller's list.
# verdict: fail
# says: changed its input 'logp_policy' in place: work on a copy

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    for i in range(len(logp_policy)):
        logp_policy[i] -= logp_reference[i]
    return round(float(beta * np.mean(logp_policy)), 2)

# %%
check("kl_penalty", kl_penalty);
