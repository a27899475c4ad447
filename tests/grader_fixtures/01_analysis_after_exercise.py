# Grader fixture: a right function and its check, then the chapter's analyses: a cell that
# would run for a minute and one that raises. No grade depends on them. Expected: they are
# not run (the report says which), the exercise passes, and grading takes seconds.
# verdict: pass
# says: PASS  kl_penalty
# says: note  the last 2 code cells, from cell 4 of the notebook, text cells counted, which starts `time.sleep(60)`, are not run: they come after the last exercise

# %%
import time

import numpy as np

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);

# %%
time.sleep(60)

# %%
raise RuntimeError("an analysis cell that fails")
