# Grader fixture: the function raises KeyboardInterrupt itself. Expected: "raised
# KeyboardInterrupt", not a time-out ("is there a loop that never ends?").
# verdict: fail
# says: raised KeyboardInterrupt (in kl_penalty, line 3: raise KeyboardInterrupt("stop")), which stops the program

# %%
from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    # the learner's way to say "stop here"
    raise KeyboardInterrupt("stop")

# %%
check("kl_penalty", kl_penalty);
