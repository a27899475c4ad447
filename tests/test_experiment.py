"""The experiment driver: the interval worked by hand, the command line, and its outputs."""

import json
import math

import pytest
import torch

from minirlhf import experiment, task
from minirlhf.model import GPTConfig, TinyGPT



def test_mean_ci95_by_hand():
    # (1, 2, 3): mean 2, sample sd 1, t(2 df) = 4.303, half-width 4.303 / sqrt(3) = 2.4843
    mean, half = experiment.mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(half, 2.4843, rel_tol=1e-4)
    mean, half = experiment.mean_ci95([0.5])
    assert mean == 0.5 and math.isnan(half)
    with pytest.raises(ValueError, match="empty"):
        experiment.mean_ci95([])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "0"], "at least 1"),
        (["--seeds", "two"], "whole number"),
        (["--iterations", "-3"], "at least 1"),
        (["--beta-rm", "-0.1"], ">= 0"),
        (["--beta-verifier", "nan"], ">= 0"),
        (["--beta-rm", "big"], "expected a number"),
        (["--color", "red"], "unrecognized arguments"),
    ],
)
def test_bad_options_get_a_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        experiment.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        experiment.main(["--out", str(tmp_path / "file")])
    assert "not a folder" in capsys.readouterr().err


@pytest.fixture
def tiny_models(monkeypatch):
    # Small untrained models stand in for the trained ones, so the run takes a second.
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    monkeypatch.setattr(experiment, "load_sft", lambda **kw: (policy, {"accuracy": 0.0}))
    monkeypatch.setattr(experiment, "load_rm", lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5}))
    monkeypatch.setattr(experiment, "EvalSet", lambda: __import__("minirlhf.ppo", fromlist=["EvalSet"]).EvalSet(task.eval_pairs()[:40]))


def test_cli_writes_the_figures_and_results(tiny_models, tmp_path, capsys):
    assert experiment.main(["--seeds", "2", "--iterations", "2", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("arm "):].splitlines()
    assert "end (orig)" in table[0] and "original run" in printed
    for arm, line in zip(experiment.ARMS, table[1:3]):  # ours, then the original run's end beside it
        assert line.split()[0] == arm and f"{experiment.ORIGINAL[arm]['end']:.3f}" in line.split()
    for name in ("ppo_accuracy.png", "ppo_rm_score.png", "ppo_kl.png", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["beta"] == {"rm": 0.5, "verifier": 0.08}
    assert results["original"] == experiment.ORIGINAL and "reference" not in results
    assert set(results["arms"]) == {"rm", "verifier"} and set(results["arms"]["rm"]) == {"0", "1"}
    run = results["arms"]["verifier"]["1"]
    assert len(run["accuracy"]) == len(run["rm_score"]) == len(run["kl"]) == 3
    summary = results["summary"]["rm"]
    assert summary["n_seeds"] == 2
    ends = [results["arms"]["rm"][s]["accuracy"][-1] for s in ("0", "1")]
    assert summary["end"] == pytest.approx(sum(ends) / 2)  # the table is made from the runs
    assert "rm_pair_accuracy" in results and "rm_near_miss_accuracy" in results


# ---- the command line checks its output places first, and never loses finished seeds


def one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        experiment.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_output_places_are_checked_before_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("the run started"))
    (tmp_path / "file").write_text("x")
    assert "argument --out: is empty: name a folder" in one_line_error(["--out", ""], capsys)
    assert f"{tmp_path / 'file'} is a regular file, not a folder" in one_line_error(
        ["--out", str(tmp_path / "file" / "run")], capsys)
    (tmp_path / "out" / "results.json").mkdir(parents=True)
    assert "results.json is a folder, where the output file should go" in one_line_error(
        ["--out", str(tmp_path / "out")], capsys)
    monkeypatch.setattr(experiment.paths, "OUTPUTS", tmp_path / "file")  # MINIRLHF_OUTPUTS names a file
    assert "the output folder (MINIRLHF_OUTPUTS, or outputs/)" in one_line_error([], capsys)
    assert "the models' folder" in one_line_error(["--out", str(tmp_path / "elsewhere")], capsys)


def test_absurd_seed_counts_are_refused(capsys):
    assert f"must be at most {experiment.MAX_SEEDS}, got 100000000" in one_line_error(["--seeds", "100000000"], capsys)


def test_long_runs_say_how_long_and_which_seed(tiny_models, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "SECONDS_PER_ARM_ITERATION", 100.0)

    class Clock:  # 20 s pass between two readings of the clock: 140 s per seed (seven
        # intervals: the seed, the experiment and each of the two arms' runs read it)
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 20.0
            return cls.now

    monkeypatch.setattr(experiment, "time", Clock)
    assert experiment.main(["--seeds", "3", "--iterations", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 seeds x 2 arms x 1 iterations: about 10.0 min (a rough estimate" in out
    assert "seed 1 of 3" in out and "seed 3 of 3" in out
    assert "seed 1 took 140.0 s: about 4.7 min to go for the other 2" in out


def test_ctrl_c_keeps_the_finished_seeds_and_nothing_partial(tiny_models, tmp_path, monkeypatch, capsys):
    real = experiment.run_experiment

    def interrupted_at_seed_2(seeds, *args, **kwargs):
        if seeds == [1]:
            raise KeyboardInterrupt
        return real(seeds, *args, **kwargs)

    monkeypatch.setattr(experiment, "run_experiment", interrupted_at_seed_2)
    assert experiment.main(["--seeds", "3", "--iterations", "2", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "interrupted during seed 2 of 3: wrote the 1 finished seed"
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["seeds"] == [0] and set(results["arms"]["rm"]) == {"0"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(experiment.OUTPUT_FILES)  # no .tmp left


def test_ctrl_c_before_any_seed_finished_writes_nothing(tiny_models, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert experiment.main(["--seeds", "2", "--out", str(tmp_path / "run")]) == 130
    assert "interrupted before the first seed finished: nothing written" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_write_that_fails_at_the_end_keeps_the_results(tiny_models, tmp_path, monkeypatch, capsys):
    import tempfile

    def disk_full(results, out):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(experiment, "write_outputs", disk_full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert experiment.main(["--seeds", "2", "--iterations", "1", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    (kept,) = tmp_path.glob("minirlhf-results-*.json")
    assert f"could not write to {tmp_path / 'run'} (No space left on device); the results are kept in {kept}" in err
    assert json.loads(kept.read_text())["settings"]["seeds"] == [0, 1]


def test_running_seed_by_seed_gives_the_results_of_one_run(tiny_models):
    whole = experiment.run_experiment([0, 1], 2, progress=False)
    parts = experiment._merge([experiment.run_experiment([seed], 2, progress=False) for seed in (0, 1)])
    assert parts["arms"] == whole["arms"] and parts["settings"] == whole["settings"]


# ---- the arms come from one registry


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arms", "ppo"], "invalid choice: 'ppo'"),
        (["--arms"], "expected at least one argument"),
        (["--arms", "rm", "grpo-rm", "rm"], "names an arm twice"),
        (["--beta-grpo-rm", "0.1"], "the arm grpo-rm is not among --arms (rm verifier)"),
        (["--arms", "grpo-verifier", "--beta-rm", "0.2"], "the arm rm is not among --arms"),
        (["--arms", "grpo-rm", "--beta-grpo-rm", "-1"], ">= 0"),
    ],
)
def test_bad_arms_get_a_one_line_error(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("the run started"))
    assert message in one_line_error(argv, capsys)


def test_help_lists_every_registered_arm(capsys):
    with pytest.raises(SystemExit):
        experiment.main(["--help"])
    out = capsys.readouterr().out
    assert "--arms ARM [ARM ...]" in out and "default: rm verifier" in out
    listed = out[out.index("arms (--arms):"):].splitlines()[1:]
    assert [line.split()[0] for line in listed] == list(experiment.REGISTRY)
    for arm in experiment.REGISTRY:
        assert f"--beta-{arm}" in out


def test_the_registry_names_each_arms_reward_beta_and_settings():
    assert experiment.ARMS == ("rm", "verifier", "grpo-verifier", "grpo-rm", "centred-verifier",
                               "rloo-verifier")
    assert experiment.DEFAULT_ARMS == ("rm", "verifier")
    assert experiment.DEFAULT_BETA["rm"] == 0.5 and experiment.DEFAULT_BETA["verifier"] == 0.08
    for name in ("rm", "verifier"):  # chapter 5's arms change nothing in the recipe
        assert experiment.REGISTRY[name].settings == {}
        assert experiment.arm_config(name, experiment.PPOConfig()) == experiment.PPOConfig()
    for name, reward in (("grpo-verifier", "verifier"), ("grpo-rm", "rm")):
        arm = experiment.REGISTRY[name]
        cfg = experiment.arm_config(name, experiment.PPOConfig(), seed=3)
        assert arm.reward == reward and cfg.seed == 3
        assert (cfg.group_size, cfg.advantages, cfg.kl_placement) == (8, "group", "loss")
        assert cfg.batch_size // cfg.group_size == 8  # 8 prompts x 8 completions = 64, as chapter 5
    with pytest.raises(ValueError, match="arm must be one of"):
        experiment.run_arm("grpo", None, None, 0, 0.1, experiment.PPOConfig())


def test_cli_runs_any_registered_arms_keyed_by_name(tiny_models, tmp_path, capsys):
    argv = ["--arms", "grpo-verifier", "rm", "--seeds", "2", "--iterations", "2",
            "--beta-grpo-verifier", "0.3", "--out", str(tmp_path)]
    assert experiment.main(argv) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("arm "):].splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["grpo-verifier", "rm"]
    assert table[1].split()[-7] == "-"  # no original run for a GRPO arm
    assert "grpo-verifier: share of groups with equal rewards" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["arms"]) == ["grpo-verifier", "rm"]
    assert results["settings"]["beta"] == {"grpo-verifier": 0.3, "rm": 0.5}
    assert results["settings"]["arm_settings"] == {"grpo-verifier": experiment.GRPO_SETTINGS}
    grpo, rm = results["arms"]["grpo-verifier"]["1"], results["arms"]["rm"]["1"]
    assert len(grpo["frac_reward_zero_std"]) == 2 and "frac_reward_zero_std" not in rm
    assert set(results["run_seconds"]["rm"]) == {"0", "1"}
    summary = results["summary"]["grpo-verifier"]
    means = [sum(results["arms"]["grpo-verifier"][s]["frac_reward_zero_std"]) / 2 for s in ("0", "1")]
    assert summary["zero_std_mean"] == pytest.approx(sum(means) / 2) and "zero_std_mean" not in results["summary"]["rm"]


def test_the_default_run_keeps_chapter_5s_layout(tiny_models):
    results = experiment.run_experiment([0], 1, progress=False)
    assert list(results["arms"]) == ["rm", "verifier"] and "arm_settings" not in results["settings"]
    assert set(results["settings"]) == {"seeds", "iterations", "beta", "ppo"}
    assert all("frac_reward_zero_std" not in run for runs in results["arms"].values() for run in runs.values())
    with pytest.raises(ValueError, match="not among the arms"):
        experiment.run_experiment([0], 1, progress=False, betas={"grpo-rm": 0.1})
    with pytest.raises(ValueError, match="arm must be one of"):
        experiment.run_experiment([0], 1, progress=False, arms=("rm", "dpo"))
