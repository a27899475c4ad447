"""Reading curves at equal KL, and the paired bootstrap over prompts and runs."""

import numpy as np
import pytest

from minirlhf.studies import frontier


def test_a_curve_is_read_linearly_in_sqrt_kl_and_never_extrapolated():
    kl, values = [0.0, 1.0, 4.0], [0.0, 1.0, 3.0]  # d = 0, 1, 2
    assert frontier.at_kl(kl, values, [0.25, 2.25]) == pytest.approx([0.5, 2.0])  # d = 0.5 and 1.5
    assert frontier.at_kl(kl[::-1], values[::-1], [1.0]) == pytest.approx([1.0])  # any order
    assert np.isnan(frontier.at_kl(kl, values, [9.0])).all()
    with pytest.raises(ValueError, match="kl and values"):
        frontier.at_kl([0.0], [1.0], [0.0])


def test_the_bootstrap_is_the_whole_sample_s_value_and_covers_the_truth():
    rng = np.random.default_rng(1)
    covered = 0
    for trial in range(40):
        x = rng.normal(0.3, 1.0, 200)
        value, lower, upper = frontier.bootstrap(lambda p, r: x[p].mean(), 200, reps=400, seed=trial)
        assert value == pytest.approx(x.mean())
        covered += lower <= 0.3 <= upper
    assert covered >= 34  # about 95% of 40
    again = frontier.bootstrap(lambda p, r: x[p].mean(), 200, reps=400, seed=39)
    assert again == (value, lower, upper)  # the same draws for the same seed


def test_runs_are_drawn_with_the_prompts():
    per = np.array([[1.0, 1.0], [3.0, 3.0]])  # (runs, prompts): the runs differ, the prompts do not
    value, lower, upper = frontier.bootstrap(lambda p, r: per[np.ix_(r, p)].mean(), 2, n_runs=2, reps=500)
    assert value == 2.0 and lower == 1.0 and upper == 3.0
    with pytest.raises(ValueError, match="n_prompts"):
        frontier.bootstrap(lambda p, r: 0.0, 0)


def test_runs_of_one_recipe_become_arrays_seed_by_evaluation_by_prompt():
    run = {"iteration": [0, 1], "per_prompt": [{"kl": [0.0, 0.0], "gold": [1, 0]}, {"kl": [0.1, 0.2], "gold": [1, 1]}]}
    arrays = frontier.rl_arrays([run, run], keys=("kl", "gold"))
    assert arrays["kl"].shape == (2, 2, 2) and arrays["gold"][1, 1].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="different iterations"):
        frontier.rl_arrays([run, {**run, "iteration": [0, 2]}])
    with pytest.raises(ValueError, match="at least one"):
        frontier.rl_arrays([])
    dpo_run = {"step": [0, 8], "per_prompt": run["per_prompt"]}  # a DPO run counts steps
    assert frontier.rl_arrays([dpo_run], keys=("gold",))["gold"].shape == (1, 2, 2)
