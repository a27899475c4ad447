# Grader fixture: the exercise cell has a syntax error (a missing parenthesis), so the
# function is never defined. Expected: the cell and its line are named; the exercise is "not found".
# verdict: fail
# says: kl_penalty  not defined, because code cell 2 failed (above)

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean(), 2)

# %%
check("kl_penalty", kl_penalty);
