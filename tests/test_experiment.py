"""The experiment driver: the interval worked by hand, the command line, and its outputs."""

import json
import math

import pytest
import torch

from minirlhf import arms as arm_table
from minirlhf import cli, dpo, experiment, stats, task
from minirlhf.commands import experiment as command
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.reward_model import RMConfig


def test_mean_ci95_by_hand():
    # (1, 2, 3): mean 2, sample sd 1, t(2 df) = 4.303, half-width 4.303 / sqrt(3) = 2.4843
    mean, half = stats.mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(half, 2.4843, rel_tol=1e-4)
    mean, half = stats.mean_ci95([0.5])
    assert mean == 0.5 and math.isnan(half)
    with pytest.raises(ValueError, match="empty"):
        stats.mean_ci95([])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "0"], "a whole number >= 1"),
        (["--seeds", "two"], "whole number"),
        (["--iterations", "-3"], "a whole number >= 1"),
        (["--beta-rm", "-0.1"], ">= 0"),
        (["--beta-verifier", "nan"], ">= 0"),
        (["--beta-rm", "big"], "expected a number"),
        (["--color", "red"], "unrecognized arguments"),
    ],
)
def test_bad_options_get_a_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit):
        command.main(["--out", str(tmp_path / "file")])
    assert "not a folder" in capsys.readouterr().err


@pytest.fixture
def tiny_models(monkeypatch):
    # Small untrained models stand in for the trained ones, so the run takes a second.
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    monkeypatch.setattr(experiment, "load_sft", lambda **kw: (policy, {"accuracy": 0.0}))
    monkeypatch.setattr(experiment, "load_rm", lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5}))
    monkeypatch.setattr(
        experiment,
        "EvalSet",
        lambda: __import__("minirlhf.evaluation", fromlist=["EvalSet"]).EvalSet(task.eval_pairs()[:40]),
    )


def test_cli_writes_the_figures_and_results(tiny_models, tmp_path, capsys):
    assert command.main(["--seeds", "2", "--iterations", "2", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("arm ") :].splitlines()
    assert "end (orig)" in table[0] and "original run" in printed
    for arm, line in zip(arm_table.ARMS, table[1:3]):  # ours, then the original run's end beside it
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
        command.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_output_places_are_checked_before_the_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("the run started"))
    (tmp_path / "file").write_text("x")
    assert "argument --out: is empty: name a folder" in one_line_error(["--out", ""], capsys)
    assert f"{tmp_path / 'file'} is a regular file, not a folder" in one_line_error(
        ["--out", str(tmp_path / "file" / "run")], capsys
    )
    (tmp_path / "out" / "results.json").mkdir(parents=True)
    assert "results.json is a folder, where the output file should go" in one_line_error(
        ["--out", str(tmp_path / "out")], capsys
    )
    monkeypatch.setattr(experiment.paths, "OUTPUTS", tmp_path / "file")  # MINIRLHF_OUTPUTS names a file
    assert "the output folder (MINIRLHF_OUTPUTS, or outputs/)" in one_line_error([], capsys)
    assert "the models' folder" in one_line_error(["--out", str(tmp_path / "elsewhere")], capsys)


def test_absurd_seed_counts_are_refused(capsys):
    assert f"must be at most {command.MAX_SEEDS}, got 100000000" in one_line_error(["--seeds", "100000000"], capsys)


def test_long_runs_say_how_long_and_which_seed(tiny_models, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(command, "SECONDS_PER_ARM_ITERATION", 100.0)

    class Clock:  # 20 s pass between two readings of the clock: 140 s per seed (seven
        # intervals: the seed, the experiment and each of the two arms' runs read it)
        now = 0.0

        @classmethod
        def perf_counter(cls):
            cls.now += 20.0
            return cls.now

    monkeypatch.setattr(command, "time", Clock)  # the seed's time, read by the command
    monkeypatch.setattr(experiment, "time", Clock)  # the experiment's and each run's
    # one worker: the seeds one after another (tests/test_parallel.py has the runs in workers)
    assert command.main(["--seeds", "3", "--iterations", "1", "--workers", "1", "--out", str(tmp_path)]) == 0
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
    argv = ["--seeds", "3", "--iterations", "2", "--workers", "1", "--out", str(tmp_path)]
    assert command.main(argv) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "interrupted during seed 2 of 3: wrote the 1 finished seed; seeds 1 to 2 are not kept"
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["seeds"] == [0] and set(results["arms"]["rm"]) == {"0"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(command.OUTPUT_FILES)  # no .tmp left


def test_ctrl_c_before_any_seed_finished_writes_nothing(tiny_models, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert command.main(["--seeds", "2", "--out", str(tmp_path / "run")]) == 130
    assert "interrupted before the first seed finished: nothing written" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_write_that_fails_at_the_end_keeps_the_results(tiny_models, tmp_path, monkeypatch, capsys):
    import tempfile

    def disk_full(results, out):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(experiment, "write_outputs", disk_full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert command.main(["--seeds", "2", "--iterations", "1", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    (kept,) = tmp_path.glob("minirlhf-results-*.json")
    assert f"could not write to {tmp_path / 'run'} (No space left on device); the results are kept in {kept}" in err
    assert json.loads(kept.read_text())["settings"]["seeds"] == [0, 1]


def test_running_seed_by_seed_gives_the_results_of_one_run(tiny_models):
    whole = experiment.run_experiment([0, 1], 2, progress=False)
    parts = command._merge([experiment.run_experiment([seed], 2, progress=False) for seed in (0, 1)])
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
        command.main(["--help"])
    out = capsys.readouterr().out
    assert "--arms ARM [ARM ...]" in out and "default: rm verifier" in out
    listed = out[out.index("arms (--arms):") :].splitlines()[1:]
    assert [line.split()[0] for line in listed] == list(arm_table.REGISTRY)
    for arm in arm_table.REGISTRY:
        assert f"--beta-{arm}" in out


def test_the_registry_names_each_arms_reward_beta_and_settings():
    assert arm_table.DEFAULT_ARMS == ("rm", "verifier")
    assert arm_table.DEFAULT_BETA["rm"] == 0.5 and arm_table.DEFAULT_BETA["verifier"] == 0.08
    for name in ("rm", "verifier"):  # chapter 5's arms change nothing in the recipe
        assert arm_table.REGISTRY[name].settings == {}
        assert experiment.arm_config(name, experiment.PPOConfig()) == experiment.PPOConfig()
    for name, reward in (("grpo-verifier", "verifier"), ("grpo-rm", "rm")):
        arm = arm_table.REGISTRY[name]
        cfg = experiment.arm_config(name, experiment.PPOConfig(), seed=3)
        assert arm.reward == reward and cfg.seed == 3
        assert (cfg.group_size, cfg.advantages, cfg.kl_placement) == (8, "group", "loss")
        assert cfg.batch_size // cfg.group_size == 8  # 8 prompts x 8 completions = 64, as chapter 5
    for name, share in (("dpo", 0.0), ("dpo-near-miss", 0.5)):  # DPO's arms differ only in the pairs
        arm = arm_table.REGISTRY[name]
        cfg = experiment.arm_config(name, experiment.PPOConfig(), seed=3)
        assert (arm.trainer, arm.reward, arm.beta) == ("dpo", "pairs", 1.25)
        assert cfg == experiment.DPOConfig(seed=3, near_miss_share=share)
    with pytest.raises(ValueError, match="arm must be one of"):
        experiment.run_arm("grpo", None, None, 0, 0.1, experiment.PPOConfig())


def test_cli_runs_any_registered_arms_keyed_by_name(tiny_models, tmp_path, capsys):
    argv = [
        "--arms",
        "grpo-verifier",
        "rm",
        "--seeds",
        "2",
        "--iterations",
        "2",
        "--beta-grpo-verifier",
        "0.3",
        "--out",
        str(tmp_path),
    ]
    assert command.main(argv) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("arm ") :].splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["grpo-verifier", "rm"]
    assert table[1].split()[-7] == "-"  # no original run for a GRPO arm
    assert "grpo-verifier: share of groups with equal rewards" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["arms"]) == ["grpo-verifier", "rm"]
    assert results["settings"]["beta"] == {"grpo-verifier": 0.3, "rm": 0.5}
    assert results["settings"]["arm_settings"] == {"grpo-verifier": arm_table.GRPO_SETTINGS}
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
        experiment.run_experiment([0], 1, progress=False, arms=("rm", "ipo"))


# ---- the DPO arm: another trainer, the same evaluation, keyed by name


def test_the_dpo_arm_is_trained_by_dpo_with_its_own_config():
    arm = arm_table.REGISTRY["dpo"]
    assert (arm.trainer, arm.reward, arm.beta) == ("dpo", "pairs", arm_table.DEFAULT_BETA["dpo"])
    assert all(
        arm_table.REGISTRY[name].trainer == "ppo"
        for name in arm_table.ARMS
        if arm_table.REGISTRY[name].reward != "pairs"
    )
    cfg = experiment.arm_config("dpo", experiment.PPOConfig(), seed=3)  # a PPOConfig is not DPO's
    assert cfg == experiment.DPOConfig(seed=3)
    assert experiment.arm_config("dpo", experiment.DPOConfig(steps=7), seed=1) == experiment.DPOConfig(steps=7, seed=1)
    with pytest.raises(ValueError, match="config must be a PPOConfig"):
        experiment.arm_config("rm", experiment.DPOConfig())
    with pytest.raises(ValueError, match="advantage_fn must be None"):
        experiment.run_arm("dpo", None, None, 0, 0.1, experiment.DPOConfig(), advantage_fn=lambda *a: a)


TINY_DPO = dict(steps=6, batch_size=16, eval_every=2, rm_config=RMConfig(steps=2, batch_size=32))


def test_run_arm_passes_seed_beta_and_loss_fn_to_dpo(tiny_models):
    policy, rm = experiment.load_sft()[0], experiment.load_rm()[0]
    calls = []

    def mine(pc, pr, rc, rr, beta):
        calls.append(beta)
        return dpo.dpo_loss(pc, pr, rc, rr, beta)

    _, log = experiment.run_arm(
        "dpo", policy, rm, 2, 0.25, experiment.DPOConfig(**TINY_DPO), experiment.EvalSet(), loss_fn=mine, progress=False
    )
    assert calls == [0.25] * 6 and log["config"]["seed"] == 2 and log["config"]["beta"] == 0.25
    assert log["steps"] == [0, 2, 4, 6] and not math.isnan(log["rm_score"][-1])  # the RM's score is logged


def test_cli_runs_the_dpo_arm_beside_ppo_arms(tiny_models, tmp_path, capsys, monkeypatch):
    real = experiment.run_experiment
    monkeypatch.setattr(
        experiment, "run_experiment", lambda *a, **k: real(*a, **k, dpo_config=experiment.DPOConfig(**TINY_DPO))
    )
    argv = ["--arms", "rm", "dpo", "--seeds", "2", "--iterations", "3", "--beta-dpo", "0.3", "--out", str(tmp_path)]
    assert command.main(argv) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("arm ") :].splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["rm", "dpo"] and table[2].split()[-7] == "-"
    assert "dpo: implicit reward on the held-out pairs, pair accuracy" in printed
    assert "(the RM's: 0.500, 0.500)" in printed
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["arms"]) == ["rm", "dpo"] and results["settings"]["beta"] == {"rm": 0.5, "dpo": 0.3}
    assert results["settings"]["dpo"]["steps"] == 6 and "arm_settings" not in results["settings"]
    run, rm_run = results["arms"]["dpo"]["1"], results["arms"]["rm"]["1"]
    assert run["steps"] == [0, 2, 4, 6] and len(run["accuracy"]) == 4 and len(rm_run["accuracy"]) == 4
    assert len(run["rewards/chosen"]) == len(run["logps/rejected"]) == 6 and "steps" not in rm_run
    summary = results["summary"]["dpo"]
    pair = [results["arms"]["dpo"][s]["implicit_reward"]["pair_accuracy"] for s in ("0", "1")]
    assert summary["implicit_pair_accuracy"] == pytest.approx(sum(pair) / 2)
    assert "implicit_pair_accuracy" not in results["summary"]["rm"]
    ax = experiment.plot_curves(results, "accuracy", "accuracy", "t")
    assert ax.get_xlabel() == "PPO iteration, or DPO evaluation (every 2 steps of 16 pairs)"
    plain = experiment.plot_curves(
        {
            **results,
            "settings": {k: v for k, v in results["settings"].items() if k != "dpo"},
            "arms": {"rm": results["arms"]["rm"]},
        },
        "accuracy",
        "accuracy",
        "t",
    )
    assert plain.get_xlabel() == "PPO iteration (64 prompts each)"  # without DPO, as before


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arms", "rm", "dpo", "--beta-dpo", "0"], "must be > 0 for DPO"),
        (["--beta-dpo", "0.1"], "the arm dpo is not among --arms (rm verifier)"),
        (["--arms", "dpo", "dpo"], "names an arm twice"),
    ],
)
def test_bad_dpo_options_get_a_one_line_error(argv, message, monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("the run started"))
    assert message in one_line_error(argv, capsys)


def test_a_dpo_beta_of_zero_is_refused_before_any_run(tiny_models):
    with pytest.raises(ValueError, match="DPO arm dpo must be > 0"):
        experiment.run_experiment([0], 1, progress=False, arms=("rm", "dpo"), betas={"dpo": 0.0})


def test_the_estimate_counts_a_dpo_run_by_its_own_cost(monkeypatch, capsys):
    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    command._run_seeds(10, 25, ("rm", "dpo"), {})
    guess = 10 * (25 * command.SECONDS_PER_ARM_ITERATION + command.SECONDS_PER_DPO_RUN)
    assert f"about {cli.duration(guess)}" in capsys.readouterr().out
    command._run_seeds(20, 25, ("rm", "dpo"), {}, workers=2)  # two workers: half the time
    assert f"on 2 worker processes: about {cli.duration(guess)}" in capsys.readouterr().out


# ---- a stop signal keeps what is finished; one writer per folder; bounds


STOPPED_RUN = """
import os, signal, sys
import torch
from minirlhf import experiment, task
from minirlhf.commands import experiment as command
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.evaluation import EvalSet

torch.manual_seed(0)
small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
experiment.load_sft = lambda **kw: (policy, {"accuracy": 0.0})
experiment.load_rm = lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5})
experiment.EvalSet = lambda: EvalSet(task.eval_pairs()[:40])
real = experiment.run_experiment

def stopped_at_seed_2(seeds, *args, **kwargs):
    if seeds == [1]:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        signal.pause()  # the signal arrives during the run
    return real(seeds, *args, **kwargs)

experiment.run_experiment = stopped_at_seed_2
sys.exit(command.main(["--seeds", "3", "--iterations", "1", "--workers", "1", "--out", sys.argv[2]]))
"""


@pytest.mark.parametrize("name, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_and_sighup_keep_the_finished_seeds_as_ctrl_c_does(tmp_path, name, status):
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_RUN, name, str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "MINIRLHF_OUTPUTS": str(tmp_path / "outputs")},
        timeout=300,
    )
    assert done.returncode == status, done.stderr  # C11: not killed, finished seeds not lost
    assert done.stderr.strip().splitlines()[-1] == (
        f"stopped by {name} during seed 2 of 3: wrote the 1 finished seed; seeds 1 to 2 are not kept"
    )
    assert "Traceback" not in done.stderr
    assert json.loads((out / "results.json").read_text())["settings"]["seeds"] == [0]
    assert sorted(p.name for p in out.iterdir()) == sorted(command.OUTPUT_FILES)  # no lock or .tmp left


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path, monkeypatch, capsys):
    import os

    from minirlhf import paths

    monkeypatch.setattr(experiment, "run_experiment", lambda *a, **k: pytest.fail("the run started"))
    with paths.output_lock(tmp_path / "run", "the first run"):
        message = one_line_error(["--out", str(tmp_path / "run")], capsys)  # C9
    assert f"--out: {tmp_path / 'run'} is in use by another run (process {os.getpid()}" in message
    assert "the first run" in message


def test_absurd_iteration_counts_are_refused(capsys):
    assert f"must be at most {command.MAX_ITERATIONS}, got 1000000000" in one_line_error(  # D2
        ["--iterations", "1000000000"], capsys
    )
