# Grader fixture: the loop never ends. Expected: the first call runs out of time, the rest
# are not run, and the grader moves on.
# verdict: fail
# says: took longer than 0.5 s: is there a loop that never ends?

# %%
from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    total, i = 0.0, 0
    while i < len(logp_policy):
        total += logp_policy[i] - logp_reference[i]
    return round(beta * total / len(logp_policy), 2)

# %%
check("kl_penalty", kl_penalty);
