"""The arm registry checks itself: properties every arm has, not a list of names."""

import dataclasses

import pytest

from minirlhf import arms, experiment, trainers
from minirlhf import arms as arm_table
from minirlhf.arms import REGISTRY, Arm, _registry
from minirlhf.dpo import DPOConfig
from minirlhf.palette import PALETTE
from minirlhf.ppo import PPOConfig


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_arm_is_complete_and_its_config_is_accepted(name):
    arm = REGISTRY[name]
    assert arm.name == name and arm.help.strip() and arm.label.strip()
    assert arm.reward in arms.REWARDS and arm.trainer in trainers.TRAINERS
    assert arm.color in PALETTE and arm.linestyle in arms.LINESTYLES
    base = DPOConfig() if arm.trainer == "dpo" else PPOConfig()
    cfg = experiment.arm_config(name, base, seed=7)
    assert isinstance(cfg, trainers.TRAINERS[arm.trainer].config) and cfg.seed == 7
    assert all(getattr(cfg, key) == value for key, value in arm.settings.items())


def test_no_two_arms_look_alike_in_a_figure():
    styles = [(arm.color, arm.linestyle) for arm in REGISTRY.values()]
    assert len(set(styles)) == len(styles)
    assert set(arm_table.DEFAULT_ARMS) <= set(REGISTRY) and arm_table.ARMS == tuple(REGISTRY)


def test_when_the_palette_runs_out_the_next_arms_are_dashed():
    many = [Arm(f"arm{i}", "verifier", 0.1, f"arm {i}", "a test arm") for i in range(len(PALETTE) + 3)]
    styled = _registry(*many)
    assert [a.linestyle for a in styled.values()] == ["-"] * len(PALETTE) + ["--"] * 3
    assert len({(a.color, a.linestyle) for a in styled.values()}) == len(many)
    taken = _registry(Arm("mine", "rm", 0.1, "mine", "mine", color=PALETTE[0]), *many[:2])
    assert taken["arm0"].color == PALETTE[1]  # a color an arm asked for is not given to another


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(reward="verfier"), "reward must be one of"),
        (dict(trainer="ppo2"), "trainer must be one of"),
        (dict(reward="pairs"), "the trainer .ppo. learns from .rm. or .verifier.; got reward .pairs."),
        (dict(trainer="dpo"), "the trainer .dpo. learns from .pairs.; got reward .verifier."),
        (dict(beta=-0.1), "beta must be a finite number >= 0"),
        (dict(beta=float("nan")), "beta must be a finite number >= 0"),
        (dict(help=""), "help must be a non-empty string"),
        (dict(label=" "), "label must be a non-empty string"),
        (dict(settings={"group_sise": 8}), "PPOConfig has no setting group_sise"),
        (dict(settings={"advantages": "group"}), "needs group_size >= 2"),
        (dict(settings={"advantages": "grup", "group_size": 8, "kl_placement": "loss"}), "advantages must be one of"),
        (dict(linestyle="dotted"), "linestyle must be one of"),
    ],
)
def test_a_wrong_arm_is_refused_where_it_is_defined(changes, message):
    good = dict(name="mine", reward="verifier", beta=0.1, label="my arm", help="a test arm")
    with pytest.raises(ValueError, match=message) as raised:
        Arm(**{**good, **changes})
    assert "arm 'mine'" in str(raised.value)


def test_a_repeated_name_or_style_is_refused():
    one = Arm("mine", "verifier", 0.1, "mine", "mine")
    with pytest.raises(ValueError, match="repeated: mine"):
        _registry(one, one)
    with pytest.raises(ValueError, match="share a color and a line style"):
        _registry(dataclasses.replace(one, color=PALETTE[0]), dataclasses.replace(one, name="other", color=PALETTE[0]))
