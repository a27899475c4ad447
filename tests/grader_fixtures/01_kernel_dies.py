# Grader fixture: the function ends the kernel process. Expected: a clear line, no crash.

# %%
import os

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    os._exit(3)

# %%
check("kl_penalty", kl_penalty);
