"""Chapter 5's estimator: the score standardized over the batch, then the return-to-go with the
leash in it, minus the batch mean of each position (:func:`minirlhf.ppo.kl_shaped_advantages`)."""

from ..ppo import kl_shaped_advantages, standardized_scores
from . import Estimator

# ---------------------------------------------------- SHOWN VERBATIM IN CHAPTER 5
# Chapter 5 shows this function as it is: lines within 77 columns, and `make notebooks 05`
# after an edit (see the same banner in minirlhf/ppo.py).
# fmt: off


def leashed_advantages(fn, batch, rewards, reward_fn, beta, cfg):
    """Return the advantages (B, T): the scores standardized over the
    batch, then ``fn`` (the signature of :func:`kl_shaped_advantages`)
    puts them and the leash into each token, with beta = 0 when the
    leash is in the loss instead.

    Defined in chapter 5.
    """
    z = standardized_scores(rewards, cfg.adv_clip, cfg.adv_eps)  # (B,)
    leash = beta if cfg.kl_placement == "reward" else 0.0
    return fn(z, batch.old_logp, batch.ref_logp, batch.mask, leash,
              cfg.kl_clamp)  # (B, T)

# fmt: on


ESTIMATOR = Estimator(
    "batch",
    kl_shaped_advantages,
    leashed_advantages,
    "chapter 5: the standardized score against the batch mean of each position, the leash inside",
    leash_in_advantages=True,
)
