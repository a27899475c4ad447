# Grader fixture: the exercise is right, but an earlier cell raises. Expected: the cell is
# reported with its line, the run goes on, and the exercise passes.
# verdict: pass
# says: code cell 2, line 2: raised ZeroDivisionError: division by zero

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
tokens = []
average = sum(tokens) / len(tokens)

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
