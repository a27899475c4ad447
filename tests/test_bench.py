"""The benchmark's verdict and table, on rows made by hand (the stages themselves take a minute)."""

import pytest

from minirlhf import arms as arm_table
from minirlhf.commands import bench


def rows(seconds, peak_mb=400.0):
    return [{"stage": s, "seconds": t, "peak_mb": peak_mb} for s, t in zip(bench.STAGES, seconds)]


def test_within_budget_only_when_every_stage_is():
    budgets = [budget for _, budget in bench.STAGES.values()]
    assert bench.judge(rows(budgets))  # exactly at the budget counts as within
    over = rows(budgets[:1] + [budgets[1] + 0.1] + budgets[2:])
    assert not bench.judge(over) and [r["within_budget"] for r in over] == [True, False] + [True] * (len(budgets) - 2)
    assert not bench.judge(rows(budgets, peak_mb=bench.MEMORY_BUDGET_MB))


def test_the_table_shows_each_stage_its_budget_and_what_is_over():
    judged = rows([9.54, 12.0, 21.23, 12.5, 4.0, 15.0, 5.0, 6.0, 7.0])
    bench.judge(judged)
    lines = bench.format_table(judged).splitlines()
    assert lines[0].split() == ["stage", "wall", "time", "budget", "peak", "memory", "what"]
    assert lines[1].split()[:5] == ["sft_and_rm", "9.5", "s", "30", "s"]
    assert lines[2].endswith("OVER") and not lines[1].endswith("OVER")  # 12 s against a 10 s budget
    assert len(lines) == 1 + len(bench.STAGES)


def test_an_unknown_stage_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="stage must be one of"):
        bench.run_stage("nope", tmp_path)


def test_every_stage_runs_once_in_the_order():
    assert sorted(bench.ORDER) == sorted(bench.STAGES) and len(bench.ORDER) == len(set(bench.ORDER))
    assert bench.ORDER[-1] == "pipeline"  # from scratch, in a folder of its own


def test_the_grpo_stage_runs_both_grpo_arms_for_one_seed(monkeypatch):
    import minirlhf.experiment as experiment

    calls = []
    monkeypatch.setattr(experiment, "run_experiment", lambda **kw: calls.append(kw))
    bench._work("one_seed_grpo_arms")
    assert calls == [{"seeds": 1, "progress": False, "arms": ("grpo-verifier", "grpo-rm")}]
    assert all(arm in arm_table.REGISTRY for arm in calls[0]["arms"])
    calls.clear()
    bench._work("one_seed_both_arms")  # chapter 5's stage is unchanged: the default arms
    assert calls == [{"seeds": 1, "progress": False}]


def test_the_dpo_stage_runs_the_dpo_arm_for_one_seed_within_a_measured_budget(monkeypatch):
    import minirlhf.experiment as experiment

    calls = []
    monkeypatch.setattr(experiment, "run_experiment", lambda **kw: calls.append(kw))
    bench._work("one_seed_dpo_arm")
    assert calls == [{"seeds": 1, "progress": False, "arms": ("dpo",)}]
    assert arm_table.REGISTRY["dpo"].trainer == "dpo"
    what, budget = bench.STAGES["one_seed_dpo_arm"]
    assert budget == bench.DPO_BUDGET and "DPO" in what
    assert bench.ORDER.index("one_seed_dpo_arm") < bench.ORDER.index("pipeline")


def test_the_trl_stages_run_trl_arms(monkeypatch):
    from minirlhf import store
    from minirlhf import trl as bridge

    calls = []
    monkeypatch.setattr(store, "load_sft", lambda progress: ("policy", {}))
    monkeypatch.setattr(store, "load_rm", lambda progress: ("rm", {}))
    monkeypatch.setattr(bridge, "run_trl_arm", lambda *a, **kw: calls.append((a, kw)))
    for stage, arm in bench.TRL_STAGES.items():
        bench._work(stage)
        assert calls[-1] == ((arm, "policy", "rm", 0), {"progress": False})
        assert "TRL" in bench.STAGES[stage][0] and bench.ORDER.index(stage) < bench.ORDER.index("pipeline")
    assert set(bridge.TRL_ARMS) >= set(bench.TRL_STAGES.values())


def test_one_and_two_workers_take_turns_and_give_the_median_and_the_speed_up(monkeypatch, tmp_path):
    times = iter([40.0, 21.0, 38.0, 20.0, 45.0, 30.0])  # one worker, two, one, two, ...
    order = []

    def fake_stage(stage, outputs):
        order.append(stage)
        return {"stage": stage, "seconds": next(times), "peak_mb": 300.0}

    monkeypatch.setattr(bench, "run_stage", fake_stage)
    one, two = bench.run_paired(tmp_path, repeats=3)
    assert order == list(bench.PAIRED) * 3
    assert (one["seconds"], two["seconds"]) == (40.0, 21.0) and two["runs_seconds"] == [21.0, 20.0, 30.0]
    assert bench.speedup([one, two]) == 40.0 / 21.0 and bench.speedup([one]) is None


def test_the_paired_stages_run_the_experiment_with_one_and_two_workers(monkeypatch):
    import minirlhf.experiment as experiment

    calls = []
    monkeypatch.setattr(experiment, "run_experiment", lambda **kw: calls.append(kw))
    for stage in bench.PAIRED:
        bench._work(stage)
    assert calls == [{"seeds": 5, "progress": False, "workers": 1}, {"seeds": 5, "progress": False, "workers": 2}]


# ---- the command line (D10): help, the output file checked first, the exit status


def test_help_says_what_it_does_and_the_exit_status(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and "usage: python -m minirlhf.commands.bench" in out and "Exit status" in out
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--fast"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "unrecognized arguments" in err


def test_bench_json_is_checked_before_any_stage_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "run_stage", lambda *a: pytest.fail("a stage ran"))
    monkeypatch.setattr(bench.paths, "OUTPUTS", tmp_path)
    (tmp_path / "bench.json").mkdir()
    assert bench.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"python -m minirlhf.commands.bench: error: cannot write the results: {tmp_path / 'bench.json'} is a "
        "folder, not a file that can be replaced"
    )


@pytest.mark.parametrize("over, status", [(False, 0), (True, 1)])
def test_a_stage_over_budget_gives_exit_status_1_and_the_file_all_the_same(tmp_path, monkeypatch, capsys, over, status):
    import json

    monkeypatch.setattr(bench.paths, "OUTPUTS", tmp_path)
    monkeypatch.setattr(bench, "_has_trl", lambda: True)
    budget = dict(bench.STAGES)
    monkeypatch.setattr(
        bench,
        "run_stage",
        lambda stage, outputs: {
            "stage": stage,
            "seconds": budget[stage][1] + (1.0 if over and stage == "pipeline" else -1.0),
            "peak_mb": 100.0,
        },
    )
    assert bench.main([]) == status
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["all_within_budget"] is not over
    assert ("over budget: pipeline" in capsys.readouterr().err) is over
