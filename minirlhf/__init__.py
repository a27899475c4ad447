"""minirlhf: PPO-based RLHF built by hand, from the KL penalty to a two-arm experiment.

The engine, what you import to do RLHF at toy scale (the chapter that teaches each part):

==================  ==========================================================================
``objectives``      the sampled KL penalty (ch. 1) and the PPO-RLHF objective (ch. 2), NumPy
``task``            the sums world: prompts, answers, the verifier, the eval set (ch. 3)
``model``           TinyGPT, a small causal transformer, with sampling and log-probs (ch. 3)
``sft``             supervised fine-tuning, loss on completion tokens only (ch. 3)
``reward_model``    the same network with a scalar head, trained with Bradley-Terry (ch. 4)
``store``           trained models on disk; ``load_sft`` and ``load_rm`` (ch. 3 and 4)
``ppo``             ``ppo_train``: rollout, reward, advantages, clipped updates (ch. 5 and 7);
                    GRPO's group advantages and loss (ch. 8)
``dpo``             DPO: its loss and training on chapter 4's pairs (a chapter still to come)
``experiment``      the experiment over seeds and arms, its table, figures and command line (ch. 5)
``progress``        progress bars and status lines, shown only when the caller asks
``palette``         the colors of every figure
``paths``           where outputs go; atomic file writes
``bench``           ``python -m minirlhf.bench``: wall time and memory of each stage
==================  ==========================================================================

Beside the engine: :mod:`minirlhf.course` (exercises, grader, notebook generator, sliders),
which builds the book on top of the engine, and :mod:`minirlhf.studies` (chapter-only
analyses). The engine imports neither, and changes no global setting when imported: entry
points (the command line, the notebooks, the benchmark) choose the torch thread count.
"""

from .objectives import kl_penalty, ppo_rlhf_objective
from .ppo import PPOConfig, ppo_train, rm_reward, verifier_reward
from .reward_model import RMConfig
from .sft import SFTConfig
from .store import load_rm, load_sft

__all__ = [
    "kl_penalty", "ppo_rlhf_objective", "SFTConfig", "RMConfig", "PPOConfig", "ppo_train",
    "rm_reward", "verifier_reward", "load_sft", "load_rm", "run_experiment",
]
__version__ = "0.1.0"


def __getattr__(name):
    # run_experiment is imported on first use, so that `python -m minirlhf.experiment` does not
    # find its own module already imported (runpy warns about that).
    if name == "run_experiment":
        from .experiment import run_experiment

        return run_experiment
    raise AttributeError(f"module 'minirlhf' has no attribute {name!r}")
