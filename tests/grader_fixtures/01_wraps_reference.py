# Grader fixture: a function of the notebook's own that only calls the package's solution.
# Expected: the reference raises while the exercise is graded, and the report says so.
# verdict: fail
# says: calls minirlhf.objectives.kl_penalty, the package's own solution, which is not available while the grader runs

# %%
import minirlhf
from minirlhf.course.exercises import check

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    return minirlhf.kl_penalty(logp_policy, logp_reference, beta)

# %%
check("kl_penalty", kl_penalty);
