# Grader fixture: the function asks for beta with input(). Expected: "called input()", not
# "not implemented yet".
# verdict: fail
# says: called input() (in kl_penalty, line 2: beta = float(input("beta? "))), which waits for someone to type

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    beta = float(input("beta? "))
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
