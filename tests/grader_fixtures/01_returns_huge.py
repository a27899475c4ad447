# Grader fixture: returns a million numbers per call (4 MB as float32). Expected: refused in
# the kernel, so nothing that size is written or read; "cannot be graded".
# verdict: fail
# says: returned a ndarray, which cannot be graded (it holds more than 10,000 numbers or characters

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    return np.zeros(1_000_000, dtype=np.float32)

# %%
check("kl_penalty", kl_penalty);
