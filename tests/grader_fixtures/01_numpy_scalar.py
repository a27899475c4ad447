# Grader fixture: returns a NumPy scalar instead of a Python float.
# verdict: fail
# says: the result is a NumPy scalar (numpy.float64)

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return np.round(beta * kl.mean(), 2)

# %%
check("kl_penalty", kl_penalty);
