"""Matching an arm's beta to a target KL: the sweep's runs, and the pick of the closest beta."""

import math

import pytest
import torch

from minirlhf import task
from minirlhf.evaluation import EvalSet
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.ppo import PPOConfig
from minirlhf.stats import mean_ci95
from minirlhf.studies.matching import Match, final_kl, match_beta, sweep, swept_name


def _runs(ends: dict) -> dict:
    """Return sweep-shaped runs whose KL curves end at ``ends`` ({name: [end per seed]})."""
    return {name: {str(s): {"kl": [0.0, end]} for s, end in enumerate(seeds)} for name, seeds in ends.items()}


RUNS = _runs(
    {
        "grpo-verifier": [0.050, 0.048],  # the target: 0.049
        "remax-verifier 0.03": [0.065, 0.062],  # 0.0635
        "remax-verifier 0.06": [0.051, 0.050],  # 0.0505: closest
        "remax-verifier 0.12": [0.045, 0.044],  # 0.0445
    }
)
BETAS = [0.03, 0.06, 0.12]


def test_the_closest_beta_is_picked_with_each_betas_kl_and_interval():
    m = match_beta(RUNS, "remax-verifier", BETAS, "grpo-verifier")
    assert isinstance(m, Match) and m.arm == "remax-verifier"
    assert m.target == pytest.approx(0.049) and m.beta == 0.06
    assert list(m.final_kl) == BETAS
    assert m.final_kl[0.12] == mean_ci95([0.045, 0.044])
    assert m.gap(0.06) == pytest.approx(0.0015)
    # a number as the target; a tie goes to the first beta of betas
    assert match_beta(RUNS, "remax-verifier", BETAS, 0.0).beta == 0.12
    assert match_beta(RUNS, "remax-verifier", BETAS, 0.06).beta == 0.03  # 0.0635 is 0.0035 off, 0.0505 0.0095
    tie = _runs({"a 1": [0.25], "a 2": [0.75]})  # exact in binary: a true tie
    assert match_beta(tie, "a", [1, 2], 0.5).beta == 1 and match_beta(tie, "a", [2, 1], 0.5).beta == 2
    assert math.isnan(final_kl(tie["a 1"])[1])  # one seed: no interval


@pytest.mark.parametrize(
    "args, message",
    [
        ((RUNS, "remax-verifier", [], "grpo-verifier"), "betas must hold at least one beta"),
        ((RUNS, "remax-verifier", [0.06, -1.0], "grpo-verifier"), "betas must be finite numbers >= 0, got -1.0"),
        ((RUNS, "remax-verifier", [0.06, 0.06], "grpo-verifier"), "betas must not repeat a beta"),
        ((RUNS, "remax-verifier", [0.06, 0.24], "grpo-verifier"), "runs has no runs of 'remax-verifier 0.24'"),
        ((RUNS, "remax-verifier", BETAS, "grpo-rm"), "target 'grpo-rm' is not an arm of runs"),
        ((RUNS, "remax-verifier", BETAS, float("nan")), "target must be a KL"),
        ((RUNS, "remax-verifier", BETAS, -0.1), "target must be a KL"),
        ((_runs({"a 1": [0.1, 0.2], "b": [0.1]}), "a", [1], "b"), "target 'b' was run on seeds"),
        ((_runs({"a 1": [0.1, 0.2], "a 2": [0.1]}), "a", [1, 2], 0.1), "the runs at beta 2 are of other seeds"),
        (({"a 1": {"0": {"kl": []}}}, "a", [1], 0.1), "the run of seed 0 has no KL curve"),
    ],
)
def test_bad_input_is_refused_in_one_line(args, message):
    with pytest.raises(ValueError, match=message) as info:
        match_beta(*args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "arm, betas, seeds, against, message",
    [
        ("no-such-arm", [0.1], [0], None, "arm must name an arm"),
        ("verifier", [0.1], [0], "no-such-arm", "against must name an arm"),
        ("verifier", [], [0], None, "betas must hold at least one beta"),
        ("verifier", [0.1], [], None, "seeds must hold at least one seed"),
        ("verifier", [0.1], [0, 0], None, "seeds must not repeat a seed"),
        ("verifier", [0.1], [-1], None, "seeds must be whole numbers >= 0"),
    ],
)
def test_the_sweep_refuses_bad_input_before_any_run(arm, betas, seeds, against, message):
    with pytest.raises(ValueError, match=message) as info:
        sweep(arm, betas, seeds, None, None, PPOConfig(), against=against)  # no model: nothing may run
    assert "\n" not in str(info.value)


def test_a_tiny_sweep_keeps_its_runs_and_picks_the_beta_closest_to_each_target():
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    cfg = PPOConfig(iterations=2, batch_size=8, lr=1e-2)  # a large step: the betas end apart
    betas, seeds = [0.0, 10.0], [0, 1]
    runs = sweep(
        "rm", betas, seeds, policy, rm, cfg, against="verifier", evalset=EvalSet(task.eval_pairs()[:16]), workers=1
    )["arms"]
    assert list(runs) == ["verifier", swept_name("rm", 0.0), "rm 10"]
    for name, by_seed in runs.items():
        assert list(by_seed) == ["0", "1"], name
        assert all(set(log) == {"accuracy", "kl"} and len(log["kl"]) == 3 for log in by_seed.values())
    ends = {b: final_kl(runs[swept_name("rm", b)])[0] for b in betas}
    assert ends[0.0] != ends[10.0]
    for b in betas:  # the target a beta's own KL: that beta is the closest
        assert match_beta(runs, "rm", betas, ends[b]).beta == b
    m = match_beta(runs, "rm", betas, "verifier")
    assert m.target == final_kl(runs["verifier"])[0]
    assert m.beta == min(betas, key=lambda b: abs(ends[b] - m.target))
