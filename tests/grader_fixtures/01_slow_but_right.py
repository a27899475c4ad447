# Grader fixture: right on every input, but each call sleeps 0.3 s, graded with a 1 s budget.
# Expected: SLOW, with how many inputs ran (all right) and how long a call takes; no hint.
# verdict: slow
# says: then the 1 s budget (--budget) ran out with
# says: not a wrong answer: make it faster, or grade with a larger --budget
# grade with: --budget 1

# %%
import time

import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    time.sleep(0.3)
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
