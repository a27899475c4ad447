# Grader fixture: a right answer that prints a thousand lines per call, and a cell that
# prints a flood. Expected: the exercise passes, with a note about the printing.
# verdict: pass
# says: note: it printed

# %%
import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    for step in range(1000):
        print("debug: step", step)
    return round(float(beta * kl.mean()), 2)

# %%
for i in range(100_000):
    print("flood", i)

# %%
check("kl_penalty", kl_penalty);
