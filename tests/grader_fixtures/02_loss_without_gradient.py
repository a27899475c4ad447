# Grader fixture: a REINFORCE loss with the right value, rebuilt from .item(): a leaf with no
# path to the log-probs, so it trains nothing.
# verdict: fail
# says: your loss has no gradient: was it computed under no_grad, or rebuilt from .item()?

# %%
import torch

from minirlhf.course.exercises import check

# %%
def reinforce_loss(logp, rewards, baseline):
    loss = -((rewards - baseline) * logp).mean()
    return torch.tensor(loss.item(), requires_grad=True)

# %%
check("reinforce_loss", reinforce_loss);
