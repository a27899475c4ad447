"""The arms of the experiment, by name: what rewards each, its KL coefficient, the settings it
changes from the recipe, which trainer runs it, and how figures draw it.

This module is data. :data:`REGISTRY` is one literal; each :class:`Arm` checks itself when it is
defined (an unknown reward or trainer, a setting its trainer does not have, a config its
trainer refuses), and the registry gives every arm a style that no other arm has. The stored
runs are keyed on an arm's resolved settings, not on this file (``minirlhf.course.runs``), so
adding an arm reruns nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from . import trainers
from .palette import BLACK, BLUE, DARK_YELLOW, GRAY, GREEN, ORANGE, PALETTE, PINK, SKY, YELLOW

__all__ = [
    "Arm",
    "REWARDS",
    "LINESTYLES",
    "REGISTRY",
    "ARMS",
    "DEFAULT_ARMS",
    "DEFAULT_BETA",
    "LABELS",
    "GRPO_SETTINGS",
]

REWARDS = {
    "rm": "the reward model's score",
    "verifier": "the verifier: 1 if the sum is right, else 0",
    "pairs": "no reward: chapter 4's preference pairs themselves (DPO)",
}
LINESTYLES = ("-", "--", ":", "-.")  # once every color of the palette is taken, the next arms reuse them dashed


@dataclass(frozen=True)
class Arm:
    """One arm of the experiment: what rewards it, its KL coefficient, the settings of its
    trainer's config it changes from the recipe (none for chapter 5's arms), which trainer
    runs it, and how figures draw it (left None, the registry picks a style no other arm has).
    """

    name: str
    reward: str  # a key of REWARDS
    beta: float  # the default KL coefficient (DPO: the beta of its loss)
    label: str  # for tables and legends
    help: str  # one line for --help
    settings: dict = field(default_factory=dict)  # PPOConfig (DPO: DPOConfig) fields set over the recipe
    trainer: str = "ppo"  # a key of minirlhf.trainers.TRAINERS
    color: str | None = None  # for figures
    linestyle: str | None = None  # for figures

    def __post_init__(self):
        where = f"arm {self.name!r}"
        if not (isinstance(self.name, str) and self.name.strip() == self.name and self.name):
            raise ValueError(f"an arm's name must be a non-empty word, got {self.name!r}")
        if self.trainer not in trainers.TRAINERS:
            raise ValueError(f"{where}: trainer must be one of {tuple(trainers.TRAINERS)}, got {self.trainer!r}")
        if self.reward not in REWARDS:
            raise ValueError(f"{where}: reward must be one of {tuple(REWARDS)}, got {self.reward!r}")
        trainer = trainers.TRAINERS[self.trainer]
        if self.reward not in trainer.rewards:
            raise ValueError(
                f"{where}: the trainer {self.trainer!r} learns from {' or '.join(map(repr, trainer.rewards))}; "
                f"got reward {self.reward!r}"
            )
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta >= 0):
            raise ValueError(f"{where}: beta must be a finite number >= 0, got {self.beta!r}")
        for text in ("label", "help"):
            if not (isinstance(getattr(self, text), str) and getattr(self, text).strip()):
                raise ValueError(f"{where}: {text} must be a non-empty string")
        config = trainer.config
        unknown = set(self.settings) - {f.name for f in fields(config)}
        if unknown:
            raise ValueError(f"{where}: {config.__name__} has no setting {', '.join(sorted(unknown))}")
        try:
            config(**self.settings)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if self.linestyle is not None and self.linestyle not in LINESTYLES:
            raise ValueError(f"{where}: linestyle must be one of {LINESTYLES}, got {self.linestyle!r}")


def _registry(*arms: Arm) -> dict[str, Arm]:
    """Return ``{name: arm}``, refusing a repeated name, with a style for every arm: its own
    color if given, else the first palette color no arm has taken; once all are taken, the
    palette again with the next line style. No two arms share color and line style."""
    names = [arm.name for arm in arms]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"arm names must be unique, repeated: {', '.join(repeated)}")
    taken = {(arm.color, arm.linestyle or "-") for arm in arms if arm.color is not None}
    free = [(color, ls) for ls in LINESTYLES for color in PALETTE if (color, ls) not in taken]
    styled = {}
    for arm in arms:
        if arm.color is None:
            color, ls = free.pop(0)
            arm = replace(arm, color=color, linestyle=ls)
        elif arm.linestyle is None:
            arm = replace(arm, linestyle="-")
        styled[arm.name] = arm
    styles = [(arm.color, arm.linestyle) for arm in styled.values()]
    if len(set(styles)) != len(styles):
        raise ValueError("two arms share a color and a line style: give one of them another")
    return styled


# GRPO (Shao et al. 2024) on this world: 8 prompts x 8 completions = 64 completions per
# iteration, as chapter 5's 64 prompts x 1 (equal sample budget); group-relative advantages;
# the leash as the k3 loss term. 8 is also TRL's default num_generations
# (trl/trainer/grpo_config.py).
GRPO_SETTINGS = {"group_size": 8, "advantages": "group", "kl_placement": "loss"}

# A GRPO arm's beta weighs the k3 loss term, not a per-token reward, so chapter 5's values do
# not carry over; each is matched instead, so that the arms are compared at an equal distance
# from the reference. Both are chapter 8's picks: minirlhf.studies.matching runs the arm at a
# few betas on seeds 5-7, which the comparison does not use, beside chapter 5's arm with the
# same reward on the same seeds (sweep), and keeps the beta whose KL to the reference at the
# end is closest (match_beta). The chapter prints both sweeps and asserts that each pick is
# the beta below. DeepSeekMath's 0.04 is one of grpo-verifier's sweep; pass
# --beta-grpo-verifier / --beta-grpo-rm (or betas=) to run another.
#
# A new arm's beta is matched the same way, not borrowed, as chapter 8 does for remax-verifier
# (against grpo-verifier).
#
# DPO (Rafailov et al. 2023) on the RM's 12,800 pairs, one pass (200 steps of 64 pairs),
# evaluated every 8 steps: 25 points after the start, as PPO's 25 iterations. Its beta follows
# the rule of the GRPO arms: a short sweep (seeds 0-2, the default DPOConfig, in float32 as
# above) picked the one whose KL to the reference at the end matched the rm arm's, since DPO
# learns from the RM's own pairs (minirlhf.studies.matching makes such a sweep for any arm).
# In float64 the match still holds over seeds 0-4 (chapter 9 tests it seed by seed). The
# default of the paper and of TRL, 0.1 (trl/trainer/dpo_config.py), ends at 0.177 (seed 0,
# chapter 9's beta sweep), further than the verifier arm; pass --beta-dpo 0.1 (or betas=) to
# run it.
REGISTRY = _registry(
    # chapter 5
    Arm("rm", "rm", 0.5, "reward-model arm", "chapter 5: the reward model's score, leash in the reward", color=ORANGE),
    Arm(
        "verifier",
        "verifier",
        0.08,
        "verifier arm",
        "chapter 5: the verifier (1 if right), leash in the reward",
        color=BLUE,
    ),
    # chapter 8: GRPO, and its variants of the group baseline at grpo-verifier's beta: without
    # the division by the group's std (Liu et al. 2025), and the leave-one-out baseline of RLOO
    Arm(
        "grpo-verifier",
        "verifier",
        0.05,
        "GRPO verifier arm",
        "GRPO: the verifier, 8 prompts x 8 completions, k3 loss term",
        GRPO_SETTINGS,
        color=GREEN,
    ),
    Arm(
        "grpo-rm",
        "rm",
        1.25,
        "GRPO reward-model arm",
        "GRPO: the reward model's score, 8 x 8, k3 loss term",
        GRPO_SETTINGS,
        color=PINK,
    ),
    Arm(
        "centred-verifier",
        "verifier",
        0.05,
        "group-centred verifier arm",
        "GRPO without the std: r minus the group's mean",
        {**GRPO_SETTINGS, "advantages": "group-centred"},
        color=YELLOW,
    ),
    Arm(
        "rloo-verifier",
        "verifier",
        0.05,
        "RLOO verifier arm",
        "GRPO with RLOO's baseline: r minus the others' mean",
        {**GRPO_SETTINGS, "advantages": "rloo"},
        color=SKY,
    ),
    # ReMax (Li et al. 2023): one completion per prompt against its prompt's greedy completion;
    # beta from chapter 8's sweep on seeds 5-7, the one whose KL at the end is closest to grpo-verifier's
    # (minirlhf.studies.matching: sweep, then match_beta)
    Arm(
        "remax-verifier",
        "verifier",
        0.03,
        "ReMax verifier arm",
        "ReMax: r minus the greedy answer's reward, k3 loss term",
        {"advantages": "remax", "kl_placement": "loss"},
    ),
    # chapter 9: DPO; DPO on pairs of which half have a near-miss as the rejected answer
    # (chapter 4's near-miss retrain applied to DPO's data); and the control with no
    # preference at all, SFT on the pairs' chosen answers (TRL's DPO loss_type "sft") with
    # DPO's batches, optimizer and steps, whose beta only scales the logged implicit rewards
    Arm(
        "dpo",
        "pairs",
        1.25,
        "DPO arm",
        "DPO on chapter 4's pairs: no reward model, no sampling",
        trainer="dpo",
        color=DARK_YELLOW,
    ),
    Arm(
        "dpo-near-miss",
        "pairs",
        1.25,
        "DPO arm, near-miss pairs",
        "DPO on pairs with a near-miss as half the rejected answers",
        {"near_miss_share": 0.5},
        trainer="dpo",
        color=BLACK,
    ),
    Arm(
        "sft-chosen",
        "pairs",
        1.25,
        "SFT on the chosen answers",
        "control: SFT on the pairs' chosen answers, no preference",
        {"loss_type": "sft"},
        trainer="dpo",
        color=GRAY,
    ),
    # no chapter: grpo-verifier with k2 in the loss in place of k3 (minirlhf.leashes.k2_loss),
    # the example of adding a leash. Its beta is grpo-verifier's, not matched: match it
    # (minirlhf.studies.matching) before comparing it with another arm.
    Arm(
        "grpo-k2-verifier",
        "verifier",
        0.05,
        "GRPO k2 verifier arm",
        "GRPO with k2 in the loss instead of k3 (the reverse KL's gradient); beta not matched",
        {**GRPO_SETTINGS, "kl_placement": "k2-loss"},
    ),
    # chapter 5, "The recipe or the start?": the original project's recipe as its text states it,
    # from our start: the batch-standardized score copied to every token (the estimator
    # "broadcast"), the leash per token in the loss (k3 with the log-ratio clamped), at chapter
    # 5's betas
    Arm(
        "original-rm",
        "rm",
        0.5,
        "original recipe, rm arm",
        "chapter 5: the original project's recipe, the reward model's score, leash in the loss",
        {"advantages": "broadcast", "kl_placement": "loss"},
    ),
    Arm(
        "original-verifier",
        "verifier",
        0.08,
        "original recipe, verifier arm",
        "chapter 5: the original project's recipe, the verifier, leash in the loss",
        {"advantages": "broadcast", "kl_placement": "loss"},
    ),
)
ARMS = tuple(REGISTRY)
DEFAULT_ARMS = ("rm", "verifier")  # chapter 5's experiment, the command's default
DEFAULT_BETA = {name: arm.beta for name, arm in REGISTRY.items()}
LABELS = {name: arm.label for name, arm in REGISTRY.items()}
