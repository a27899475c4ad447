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
    for arm, line in zip(experiment.ARMS, table[1:3]):  # ours, then the reference's end beside it
        assert line.split()[0] == arm and f"{experiment.REFERENCE[arm]['end']:.3f}" in line.split()
    for name in ("ppo_accuracy.png", "ppo_rm_score.png", "ppo_kl.png", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["beta"] == {"rm": 0.5, "verifier": 0.08}
    assert set(results["arms"]) == {"rm", "verifier"} and set(results["arms"]["rm"]) == {"0", "1"}
    run = results["arms"]["verifier"]["1"]
    assert len(run["accuracy"]) == len(run["rm_score"]) == len(run["kl"]) == 3
    summary = results["summary"]["rm"]
    assert summary["n_seeds"] == 2
    ends = [results["arms"]["rm"][s]["accuracy"][-1] for s in ("0", "1")]
    assert summary["end"] == pytest.approx(sum(ends) / 2)  # the table is made from the runs
    assert "rm_pair_accuracy" in results and "rm_near_miss_accuracy" in results
