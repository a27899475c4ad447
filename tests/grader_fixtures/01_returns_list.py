# Grader fixture: returns a list instead of a float.
# verdict: fail
# says: the result is a list, expected a Python float

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return [round(float(beta * k), 2) for k in kl]

# %%
check("kl_penalty", kl_penalty);
