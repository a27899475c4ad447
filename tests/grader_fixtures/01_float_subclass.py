# Grader fixture: returns a float subclass that claims to equal everything. Expected: the
# same verdict as in the check cell: it cannot be graded, as it is not a plain float.
# verdict: fail
# says: returned a Agreeable, which cannot be graded (a subclass of float

# %%
from minirlhf.course.exercises import check

# %%
class Agreeable(float):
    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__


def kl_penalty(logp_policy, logp_reference, beta):
    return Agreeable(0.0)

# %%
check("kl_penalty", kl_penalty);
