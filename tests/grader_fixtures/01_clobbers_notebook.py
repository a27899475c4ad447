# Grader fixture: cells that delete the notebook by its relative path and overwrite it by
# its absolute path (GRADER_FIXTURE_FOLDER, set by the test), then a right function.
# Expected: the relative path reaches nothing (the kernel works in an empty folder); the
# overwrite is reported and the version graded is kept in kept/ (never beside the notebook).
# verdict: pass
# says: raised FileNotFoundError
# says: FILE  the notebook file changed while it was graded

# %%
import os

import numpy as np

from minirlhf.course.exercises import check

# %%
os.remove("01_clobbers_notebook.ipynb")

# %%
folder = os.environ.get("GRADER_FIXTURE_FOLDER")
if folder:
    with open(os.path.join(folder, "01_clobbers_notebook.ipynb"), "w") as f:
        f.write("{}")

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)

# %%
check("kl_penalty", kl_penalty);
