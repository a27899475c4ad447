# Grader fixture: a cell that runs past the cell time-out, then a cell that ends the kernel
# (so the grader restarts it after the time-out), then a right function. Expected: both
# cells are reported, the exercise passes, and nothing else is printed: no asyncio "Task
# exception was never retrieved" tracebacks from the time-out's leftovers.
# run: cli
# verdict: exit 0
# says: code cell 2: ran longer than the 3 s limit per cell (--cell-timeout) and was stopped
# says: code cell 3: stopped the kernel
# says: PASS  kl_penalty
# grade with: --cell-timeout 3

# %%
import os
import time

import numpy as np

# %%
time.sleep(60)

# %%
os._exit(3)

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)
