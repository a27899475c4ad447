# Grader fixture: the exercise raises an exception whose __str__ itself raises.
# verdict: fail
# says: raised __main__.Unprintable: <unprintable __main__.Unprintable>

# %%
from minirlhf.course.exercises import check


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("str failed")

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    raise Unprintable()

# %%
check("kl_penalty", kl_penalty);
