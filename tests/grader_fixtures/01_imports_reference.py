# Grader fixture: the exercise cell imports the package's own solution instead of writing one.
# verdict: fail
# says: imported from the package, not your own function

# %%
from minirlhf import kl_penalty
from minirlhf.course.exercises import check

# %%
check("kl_penalty", kl_penalty);
