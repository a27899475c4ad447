# %% [markdown]
# # 1. The leash: a sampled KL penalty
#
# Placeholder text, to be written.

# %%
import numpy as np

from minirlhf.exercises import check

# %% [markdown]
# ## Exercise 1.1: `kl_penalty`

# %% tags=["solution"]
def kl_penalty(logp_policy, logp_reference, beta):
    """Return beta * mean(logp_policy - logp_reference), rounded to 2 decimals."""
    # BEGIN SOLUTION
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)
    # END SOLUTION

# %% [hints] kl_penalty

# %%
check("kl_penalty", kl_penalty);
