# Grader fixture: a loop that never ends and swallows every interrupt (a bare except).
# Expected: the grader restarts the kernel, reports it, and does not hang.
# verdict: fail
# says: ignored the interrupt

# %%
import time

from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    while True:
        try:
            time.sleep(0.01)
        except BaseException:
            pass

# %%
check("kl_penalty", kl_penalty);
