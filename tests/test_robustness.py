"""Chapter 6's robustness study: the stopping rule of the partial starts, the prompt's share of
a reward's variance, stored starts, and the five-seed experiment shared with chapter 5."""

import ast

import pytest
import torch

from minirlhf import paths, sft
from minirlhf.course.nbgen import SOURCES
from minirlhf.studies import robustness


def test_first_reaching_by_hand():
    steps, acc = [0, 5, 10, 15, 20], [0.0, 0.2, 0.33, 0.34, 0.5]
    assert robustness.first_reaching(steps, acc, 1 / 3) == 15
    assert robustness.first_reaching(steps, acc, 0.33) == 10  # "at least"
    assert robustness.first_reaching(steps, acc, 0.0) == 5  # step 0 never counts
    with pytest.raises(ValueError, match="reaches accuracy 0.6"):
        robustness.first_reaching(steps, acc, 0.6)


def test_prompt_share_by_hand():
    # every completion of a prompt scores the same: the prompt explains everything
    assert robustness.prompt_share(torch.tensor([1.0, 1.0, 3.0, 3.0]), 2) == pytest.approx(1.0)
    # the same scores under every prompt: the prompt explains nothing
    assert robustness.prompt_share(torch.tensor([0.0, 2.0, 0.0, 2.0]), 2) == pytest.approx(0.0)
    # prompt means 1 and 3 (between-prompt variance 1), within-prompt variance 1 each: half
    assert robustness.prompt_share(torch.tensor([0.0, 2.0, 2.0, 4.0]), 2) == pytest.approx(0.5)
    # the same four rewards as one prompt of four completions: all of it is within
    assert robustness.prompt_share(torch.tensor([0.0, 2.0, 2.0, 4.0]), 4) == pytest.approx(0.0)
    # a prompt's completions sit side by side: groups [1, 1, 1] and [5, 5, 5], not [1, 1], ...
    assert robustness.prompt_share([1.0, 1.0, 1.0, 5.0, 5.0, 5.0], 3) == pytest.approx(1.0)


def test_prompt_share_is_the_between_prompt_share():
    g = torch.Generator().manual_seed(0)
    r = (torch.randn(7, 1, generator=g) + 0.5 * torch.randn(7, 5, generator=g)).reshape(-1)  # (35,)
    between = r.view(7, 5).mean(1).var(unbiased=False)
    assert robustness.prompt_share(r, 5) == pytest.approx(float(between / r.var(unbiased=False)))


def test_prompt_share_of_equal_rewards_is_zero_not_nan():
    assert robustness.prompt_share(torch.full((6,), 0.1, dtype=torch.float64), 3) == 0.0
    assert robustness.prompt_share(torch.ones(4), 2) == 0.0


def test_prompt_share_refuses_what_it_cannot_split():
    with pytest.raises(ValueError, match="group_size 3 does not divide the 7 rewards"):
        robustness.prompt_share(torch.arange(7.0), 3)
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        robustness.prompt_share(torch.arange(4.0), 1)
    with pytest.raises(ValueError, match="1-D"):
        robustness.prompt_share(torch.ones(3, 4), 4)
    with pytest.raises(ValueError, match="non-empty"):
        robustness.prompt_share(torch.ones(0), 2)


def test_partial_start_stops_at_the_rule_and_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path)
    # target 0: the first measurement after step 0 reaches it, so the start is 5 steps long
    model, metrics = robustness.partial_start(0, target=0.0, every=5, max_steps=10, progress=False)
    assert metrics["steps"] == 5
    assert (tmp_path / "models" / "partial_sft-seed0.pt").is_file()
    same, _ = sft.train_sft(sft.SFTConfig(seed=0, steps=5), progress=False)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))

    def no_training(*args, **kwargs):
        raise AssertionError("trained again instead of reading the stored start")

    monkeypatch.setattr(sft, "train_sft", no_training)
    again, metrics_again = robustness.partial_start(0, target=0.0, every=5, max_steps=10, progress=False)
    assert metrics_again["steps"] == 5
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_sft_stops_after_the_first_evaluation_that_reaches_stop_at_as_a_shorter_run_would_end():
    cfg = dict(seed=0, batch_size=8)
    model, log = sft.train_sft(sft.SFTConfig(steps=20, **cfg), eval_every=5, progress=False, stop_at=0.0)
    assert log["steps"] == [0, 5] and len(log["loss"]) == 5  # step 0 never counts
    same, _ = sft.train_sft(sft.SFTConfig(steps=5, **cfg), progress=False)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), same.state_dict().values()))


# ----------------------------------------------------------------------------- shared with chapter 5


def _code(number: int) -> str:
    from minirlhf.course.nbgen import drop_markers, parse

    path = next(SOURCES.glob(f"{number:02d}_*.py"))
    cells = parse(path.read_text(encoding="utf-8"), path.name)
    return "\n".join(drop_markers(c["source"]) for c in cells if c["kind"] == "code")


def _assignments(source: str, names=("SEEDS", "cfg")) -> dict:
    """Return the first assignment of each of ``names`` in ``source``, as an AST dump."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = getattr(node.targets[0], "id", None)
            if name in names:
                found.setdefault(name, ast.dump(node.value))
    return found


def test_chapters_5_and_6_read_one_experiment_with_one_set_of_settings():
    call = (
        "results = stored_experiment(SEEDS, cfg, BETA,\n"
        '                            {(arm, "0"): runs[arm] for arm in ARMS},\n'
        "                            progress=PROGRESS)"
    )
    five, six = _code(5), _code(6)
    assert call in five and call in six
    assert 'load_or_run(OUTPUTS / "results.json"' not in five + six  # only through the helper
    assert _assignments(five) == _assignments(six) and set(_assignments(six)) == {"SEEDS", "cfg"}
