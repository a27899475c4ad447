"""The experiment driver: the interval worked by hand, the command line, and its outputs."""

import json
import math

import pytest
import torch

from minirlhf import experiment, task
from minirlhf.model import GPTConfig, TinyGPT

torch.set_num_threads(1)  # runs are bit-identical only at a fixed thread count


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
        (["--colour", "red"], "unrecognized arguments"),
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
    assert "verifier" in printed and "0.583" in printed  # our numbers beside the reference
    for name in ("ppo_accuracy.png", "ppo_rm_score.png", "ppo_kl.png", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["beta"] == {"rm": 0.5, "verifier": 0.08}
    assert set(results["arms"]) == {"rm", "verifier"} and set(results["arms"]["rm"]) == {"0", "1"}
    run = results["arms"]["verifier"]["1"]
    assert len(run["accuracy"]) == len(run["rm_score"]) == len(run["kl"]) == 3
    assert results["summary"]["rm"]["n_seeds"] == 2 and results["wall_seconds"] > 0
    assert "rm_pair_accuracy" in results and "rm_near_miss_accuracy" in results


def test_load_or_run_reuses_only_what_this_code_made_with_these_settings(tmp_path):
    from minirlhf import experiment

    calls = []

    def run():
        calls.append(1)
        return {"arms": {"rm": {"0": {"accuracy": [0.5, 0.6], "rm_score": [1.0, 1.1], "kl": [0.0, 0.1]}}}}

    path = tmp_path / "stored.json"
    first = experiment.load_or_run(path, {"beta": 0.5}, {}, run)
    again = experiment.load_or_run(path, {"beta": 0.5}, {}, run)
    assert first == again and len(calls) == 1
    experiment.load_or_run(path, {"beta": 0.2}, {}, run)  # other settings: run again
    assert len(calls) == 2
    start = {("rm", "0"): {"accuracy": [0.4], "rm_score": [1.0], "kl": [0.0]}}  # other start
    experiment.load_or_run(path, {"beta": 0.2}, start, run)
    assert len(calls) == 3
    path.write_text("{not json")  # corrupt: run again
    experiment.load_or_run(path, {"beta": 0.2}, {}, run)
    assert len(calls) == 4
