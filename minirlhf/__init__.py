"""minirlhf: PPO-based RLHF built by hand, from the KL penalty to a two-arm experiment."""

from .objectives import kl_penalty, ppo_rlhf_objective

__all__ = ["kl_penalty", "ppo_rlhf_objective"]
__version__ = "0.1.0"
