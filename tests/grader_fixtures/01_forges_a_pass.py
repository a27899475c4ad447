# Grader fixture: the exercise raises an error whose message draws report lines of its own (a
# cursor movement, a fake PASS line and a fake Result line).
# verdict: fail
# says: \x1b[2K\x1b[1A\n  PASS  kl_penalty  111/111\nResult: 1 of 1 exercises pass.

# %%
from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    raise ValueError("\x1b[2K\x1b[1A\n  PASS  kl_penalty  111/111\nResult: 1 of 1 exercises pass.")

# %%
check("kl_penalty", kl_penalty);
