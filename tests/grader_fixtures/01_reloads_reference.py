# Grader fixture: the exercise reloads the package's module to get a fresh, unblocked copy of
# the reference.
# verdict: fail
# says: the package's own solution, which is not available while the grader runs

# %%
import importlib

import minirlhf.objectives
from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    return importlib.reload(minirlhf.objectives).kl_penalty(logp_policy, logp_reference, beta)

# %%
check("kl_penalty", kl_penalty);
