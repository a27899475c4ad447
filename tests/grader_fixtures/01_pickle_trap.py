# Grader fixture: no implementation, only an object that would rebuild itself as the package's
# own answer when unpickled, and write a marker file on the way (code run in the grader).
# Expected: nothing is unpickled in the grader, the marker never appears, and the value
# "cannot be graded".
# verdict: fail
# says: returned a Parcel, which cannot be graded

# %%
import os

from minirlhf.course.exercises import check

# %%
class Parcel:
    def __init__(self, kwargs):
        self.kwargs = kwargs

    def __reduce__(self):
        marker = os.environ.get("GRADER_FIXTURE_MARKER", os.devnull)
        code = (f"(open({marker!r}, 'w').write('unpickled'), "
                f"__import__('minirlhf').kl_penalty(**{self.kwargs!r}))[1]")
        return eval, (code,)


def kl_penalty(logp_policy, logp_reference, beta):
    return Parcel({"logp_policy": [float(x) for x in logp_policy],
                   "logp_reference": [float(x) for x in logp_reference], "beta": float(beta)})

# %%
check("kl_penalty", kl_penalty);
