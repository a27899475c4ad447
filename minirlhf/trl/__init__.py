"""The experiment run by TRL's own trainers, next to ours, measured by the same code.

    python -m minirlhf.commands.trl_run --arm grpo-verifier --seeds 1
    python -m minirlhf.commands.trl_run --compare --seeds 5     # ours and TRL's, every arm
    accelerate launch --config_file configs/cpu_two_processes.yaml -m minirlhf.commands.trl_run \\
        --arm grpo-verifier --iterations 3

Needs the optional extra (``pip install -e ".[trl]"``): TRL 1.12.0, the last release with
the PPO trainer. Each TRL arm starts from the book's partial-SFT policy and reward model,
converted exactly to Hugging Face models (:mod:`minirlhf.hf`); nothing is downloaded. After
every iteration the policy is converted back and measured by our
:func:`~minirlhf.evaluation.evaluate` (accuracy, RM score and exact per-token KL to the start,
on the 400 eval prompts), so ours and TRL's are judged by the same code.

============  ============================================  =================================
TRL arm       TRL trainer                                   our arm (:data:`~minirlhf.arms.REGISTRY`)
============  ============================================  =================================
grpo-verifier ``GRPOTrainer``, the verifier as reward func  grpo-verifier (chapter 8)
grpo-rm       ``GRPOTrainer``, the converted RM             grpo-rm (chapter 8)
rloo-verifier ``RLOOTrainer``, the verifier                 rloo-verifier (chapter 8)
rm            ``trl.experimental.ppo.PPOTrainer``, the RM,  rm (chapter 5)
              a value model
============  ============================================  =================================

The settings come from our :class:`~minirlhf.ppo.PPOConfig` through one mapping,
:func:`~minirlhf.trl.settings.trl_settings`, which the book prints. It turns off TRL 1.12.0's
default ratio factor on GRPO's k3 (``use_bias_correction_kl``), so that both sides
differentiate the same leash. The package can be imported without TRL (the mapping and the
summaries need only the standard library); running a trainer needs it.

**Float64.** TRL runs our models in their own dtype, float64: the policy, the reference (GRPO
and RLOO load it from a folder, where TRL's default would be float32), the value model and the
reward model, with no mixed precision; :func:`~minirlhf.trl.run.run_trl_arm` checks every
weight and logs the dtype. While TRL trains, torch's default dtype is float64 too, so the
tensors TRL makes without naming a dtype (GRPO's and RLOO's rewards before the group baseline,
PPO's statistics) follow. Two steps stay float32, because the libraries name float32
themselves (TRL 1.12.0, transformers 5.23.0):

- *Sampling.* ``generate`` casts the next-token logits to float32 before the temperature and
  the softmax (``transformers/generation/utils.py``, line 3247). GRPO and RLOO only draw the
  tokens from those probabilities and recompute every log-prob with a float64 forward pass.
  TRL's PPO keeps them: its rollout log-probs are the float32 scores' log-softmax
  (``trl/experimental/ppo/ppo_trainer.py``, lines 110 and 703), so the old log-probs of its
  ratio and the k1 KL in its reward carry float32 rounding (about 1e-7).
- *Rewards.* GRPO and RLOO store a reward function's values as float32
  (``trl/trainer/grpo_trainer.py``, line 1690; ``trl/trainer/rloo_trainer.py``, line 1124):
  exact for the verifier's 0 and 1, the RM's score rounded to 7 digits.

Run with torch's AVX-512 kernels, its AVX2 ones and its portable ones, each arm gave the same
accuracies and KLs within 1e-15. PPO's float32 log-probs could still round
differently on another CPU: moving every one of them by one unit in the last place moves its
KL by about 1e-8, far below the printed digits (``tests/test_trl_run.py`` allows 1e-5 there).

**The modules**, one job each: :mod:`~minirlhf.trl.settings` (the TRL arms and the mapping of
our settings to TRL's), :mod:`~minirlhf.trl.trainers` (TRL's trainers as data: each one's own
settings and how it is built from our models), :mod:`~minirlhf.trl.run` (one run, measured
after every iteration), :mod:`~minirlhf.trl.compare` (ours and TRL's, seed for seed, and the
side-by-side table), :mod:`~minirlhf.trl.profile` (where TRL's time goes). The figures are in
:mod:`minirlhf.plots` (:func:`~minirlhf.plots.side_by_side_figure`), the command line in
:mod:`minirlhf.commands.trl_run`. The names below are the package's public face; ``compare``
itself is :func:`minirlhf.trl.compare.compare`.
"""

from .compare import format_side_by_side, side_by_side
from .profile import PROFILE_STAGES, format_profile, profile_stages
from .run import import_trl, run_trl_arm
from .settings import HOUSEKEEPING, PPO_NAMES, TRL_ARMS, TRL_VERSION, TRLArm, ppo_names_html, trl_settings
from .trainers import TRL_TRAINERS, kl_coef_for

__all__ = [
    "TRL_VERSION",
    "TRLArm",
    "TRL_ARMS",
    "TRL_TRAINERS",
    "PPO_NAMES",
    "HOUSEKEEPING",
    "ppo_names_html",
    "trl_settings",
    "kl_coef_for",
    "import_trl",
    "run_trl_arm",
    "side_by_side",
    "format_side_by_side",
    "PROFILE_STAGES",
    "profile_stages",
    "format_profile",
]
