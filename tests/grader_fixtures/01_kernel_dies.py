# Grader fixture: the function is right on short inputs and ends the kernel process on longer
# ones. Expected: a clear line, no crash, and FAIL (a crash is not slowness, even after right
# answers).
# verdict: fail
# says: stopped the kernel (a crash, exit() or out of memory)

# %%
import os

import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    if len(logp_policy) > 5:
        os._exit(3)
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
