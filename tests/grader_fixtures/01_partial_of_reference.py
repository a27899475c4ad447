# Grader fixture: the package's solution behind a functools.partial, called inside a
# try/except that swallows everything. Expected: the call is still caught using the reference.
# verdict: fail
# says: calls minirlhf.objectives.kl_penalty, the package's own solution

# %%
import functools

from minirlhf.course.exercises import check
from minirlhf.objectives import kl_penalty as _theirs

_borrowed = functools.partial(_theirs)

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    try:
        return _borrowed(logp_policy, logp_reference, beta)
    except BaseException:
        return 0.0

# %%
check("kl_penalty", kl_penalty);
