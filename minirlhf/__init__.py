"""minirlhf: PPO-based RLHF built by hand, from the KL penalty to a two-arm experiment.

The engine is what you import to do RLHF at toy scale. The README's "How the repository is
organised" lists every module with its job and the chapter that teaches it: that table is the
one list (a test keeps it complete), so it is not repeated here.

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
    "kl_penalty",
    "ppo_rlhf_objective",
    "SFTConfig",
    "RMConfig",
    "PPOConfig",
    "ppo_train",
    "rm_reward",
    "verifier_reward",
    "load_sft",
    "load_rm",
    "run_experiment",
]
__version__ = "0.1.0"


def __getattr__(name):
    # run_experiment is imported on first use: the experiment brings matplotlib, which the
    # engine's other users need not load.
    if name == "run_experiment":
        from .experiment import run_experiment

        return run_experiment
    raise AttributeError(f"module 'minirlhf' has no attribute {name!r}")
