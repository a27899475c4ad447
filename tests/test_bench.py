"""The benchmark's verdict and table, on rows made by hand (the stages themselves take a minute)."""

import pytest

from minirlhf import arms as arm_table
from minirlhf.commands import bench


def rows(seconds, peak_mb=400.0, stages=tuple(bench.STAGES)):
    return [{"stage": s, "seconds": t, "peak_mb": peak_mb} for s, t in zip(stages, seconds)]


ALONE = tuple(s for s in bench.STAGES if not any(s in pair for pair in bench.TRL_PAIRS.values()))


def test_within_budget_only_when_every_stage_is():
    budgets = [bench.STAGES[s][1] for s in ALONE]
    assert bench.judge(rows(budgets, stages=ALONE))  # exactly at the budget counts as within
    over = rows(budgets[:1] + [budgets[1] + 0.1] + budgets[2:], stages=ALONE)
    assert not bench.judge(over) and [r["within_budget"] for r in over] == [True, False] + [True] * (len(budgets) - 2)
    assert not bench.judge(rows(budgets, peak_mb=bench.MEMORY_BUDGET_MB, stages=ALONE))


def pair_rows(ours, theirs, name="PPO"):
    ours_stage, trl_stage = bench.TRL_PAIRS[name]
    return rows([ours, theirs], stages=(ours_stage, trl_stage))


def test_ours_must_be_at_least_the_required_ratio_as_fast_as_trl():
    assert bench.MIN_RATIO == 1.5  # the claim the book makes
    exact = pair_rows(4.0, 6.0)  # 1.5 times as fast counts
    assert bench.judge(exact)
    assert bench.trl_ratios(exact) == [
        {
            "pair": "PPO",
            "arm": "rm",
            "ours_seconds": 4.0,
            "trl_seconds": 6.0,
            "ratio": 1.5,
            "required": 1.5,
            "fast_enough": True,
        }
    ]
    slow = pair_rows(4.0, 5.9)
    assert not bench.judge(slow) and all(r["within_budget"] for r in slow)  # within budget, yet judged
    assert [p["fast_enough"] for p in bench.trl_ratios(slow)] == [False]
    both = pair_rows(4.0, 9.0) + pair_rows(5.0, 7.0, "GRPO")
    assert [(p["pair"], p["arm"], p["fast_enough"]) for p in bench.trl_ratios(both)] == [
        ("PPO", "rm", True),
        ("GRPO", "grpo-verifier", False),
    ]
    assert bench.trl_ratios(pair_rows(4.0, 9.0)[:1]) == []  # one side missing: no ratio, nothing judged


def test_the_table_shows_each_stage_its_budget_and_what_is_over():
    over = bench.STAGES[ALONE[1]][1] + 0.5
    judged = rows([9.54, over, 21.23, 12.5, 4.0, 15.0], stages=ALONE[:6])
    bench.judge(judged)
    lines = bench.format_table(judged).splitlines()
    assert lines[0].split() == ["stage", "wall", "time", "budget", "peak", "memory", "what"]
    assert lines[1].split()[:5] == ["sft_and_rm", "9.5", "s", f"{bench.STAGES['sft_and_rm'][1]:.0f}", "s"]
    assert lines[2].endswith("OVER") and not lines[1].endswith("OVER")  # half a second over its budget
    assert len(lines) == 1 + len(judged)  # no pair, no ratio line


def test_the_table_shows_each_ratio_against_the_required_one():
    judged = pair_rows(4.0, 9.0) + pair_rows(5.0, 7.0, "GRPO")
    bench.judge(judged)
    lines = bench.format_table(judged).splitlines()
    assert len(lines) == 1 + 4 + 2  # the heading, the four stages, a line per pair
    ppo, grpo = lines[-2:]
    assert ppo.split()[:6] == ["TRL/ours", "PPO", "2.25", "x", "1.5", "x"] and not ppo.endswith("BELOW")
    assert "ours 4.0 s, TRL's trainer 9.0 s, arm rm, float64" in ppo
    assert grpo.split()[:3] == ["TRL/ours", "GRPO", "1.40"] and grpo.endswith("BELOW")


def test_an_unknown_stage_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="stage must be one of"):
        bench.run_stage("nope", tmp_path)


def test_every_stage_runs_once_in_the_order():
    assert sorted(bench.ORDER) == sorted(bench.STAGES) and len(bench.ORDER) == len(set(bench.ORDER))
    assert bench.ORDER[-1] == "pipeline"  # from scratch, in a folder of its own
    for ours, theirs in (bench.PAIRED, *bench.TRL_PAIRS.values()):  # side by side: they take turns
        assert bench.ORDER.index(theirs) == bench.ORDER.index(ours) + 1


def test_the_grpo_stage_runs_both_grpo_arms_for_one_seed(monkeypatch):
    import minirlhf.experiment as experiment

    calls = []
    monkeypatch.setattr(experiment, "run_experiment", lambda **kw: calls.append(kw))
    work = bench._work("one_seed_grpo_arms")
    assert calls == []  # nothing before the clock
    work()
    assert calls == [{"seeds": 1, "progress": False, "arms": ("grpo-verifier", "grpo-rm")}]
    assert all(arm in arm_table.REGISTRY for arm in calls[0]["arms"])
    calls.clear()
    bench._work("one_seed_both_arms")()  # chapter 5's stage is unchanged: the default arms
    assert calls == [{"seeds": 1, "progress": False}]


def test_the_dpo_stage_runs_the_dpo_arm_for_one_seed(monkeypatch):
    import minirlhf.experiment as experiment

    calls = []
    monkeypatch.setattr(experiment, "run_experiment", lambda **kw: calls.append(kw))
    bench._work("one_seed_dpo_arm")()
    assert calls == [{"seeds": 1, "progress": False, "arms": ("dpo",)}]
    assert arm_table.REGISTRY["dpo"].trainer == "dpo"
    assert "DPO" in bench.STAGES["one_seed_dpo_arm"][0]
    assert bench.ORDER.index("one_seed_dpo_arm") < bench.ORDER.index("pipeline")


def test_ours_and_trl_run_the_same_arm_with_the_same_models_settings_and_eval(monkeypatch):
    import minirlhf.experiment as experiment
    from minirlhf import store
    from minirlhf import trl as bridge
    from minirlhf.evaluation import EvalSet
    from minirlhf.ppo import PPOConfig

    before = []  # what happens before the clock
    calls = {}
    monkeypatch.setattr(store, "load_sft", lambda progress: ("policy", {}))
    monkeypatch.setattr(store, "load_rm", lambda progress: ("rm", {}))
    monkeypatch.setattr(bench, "_import_trl", lambda arm: before.append(("import TRL", arm)))
    monkeypatch.setattr(bench, "_warm_up", lambda: before.append("warm up"))
    monkeypatch.setattr(experiment, "run_arm", lambda *a, **kw: calls.setdefault("ours", (a, kw)))
    monkeypatch.setattr(bridge, "run_trl_arm", lambda *a, **kw: calls.setdefault("trl", (a, kw)))
    for name, (ours, theirs) in bench.TRL_PAIRS.items():
        before.clear()
        calls.clear()
        arm = bench.OURS_STAGES[ours]
        assert bench.TRL_STAGES[theirs] == arm and arm in bridge.TRL_ARMS and bridge.TRL_ARMS[arm].ours == arm
        work_ours, work_trl = bench._work(ours), bench._work(theirs)
        assert before == ["warm up", ("import TRL", arm), "warm up"] and calls == {}  # TRL's imports: its side only
        work_ours(), work_trl()
        (arm_ours, policy, rm, seed, beta, config, evalset), kw_ours = calls["ours"]
        (arm_trl, policy_trl, rm_trl, seed_trl, config_trl), kw_trl = calls["trl"]
        assert (arm_ours, policy, rm, seed) == (arm_trl, policy_trl, rm_trl, seed_trl) == (arm, "policy", "rm", 0)
        # the arm's own settings; evaluated before training and after the last iteration alone
        assert beta is None and config == config_trl == PPOConfig(eval_every=25) and config.iterations == 25
        assert isinstance(evalset, EvalSet) and isinstance(kw_trl["evalset"], EvalSet)  # the 400 eval prompts
        assert kw_ours == {"progress": False} and kw_trl == {"evalset": kw_trl["evalset"], "progress": False}
        assert name in bench.STAGES[ours][0] and "TRL" in bench.STAGES[theirs][0]


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
        bench._work(stage)()
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


def fake_stages(monkeypatch, tmp_path, trl_seconds=2.0, over=False, has_trl=True):
    # every stage 1 s under its budget (pipeline 1 s over, with over); ours 1 s and TRL's
    # trl_seconds on each pair, whatever their budgets; returns the order the stages ran in
    monkeypatch.setattr(bench.paths, "OUTPUTS", tmp_path)
    monkeypatch.setattr(bench, "_has_trl", lambda: has_trl)
    ran = []

    def fake(stage, outputs):
        ran.append(stage)
        seconds = bench.STAGES[stage][1] + (1.0 if over and stage == "pipeline" else -1.0)
        seconds = {**dict.fromkeys(bench.OURS_STAGES, 1.0), **dict.fromkeys(bench.TRL_STAGES, trl_seconds)}.get(
            stage, seconds
        )
        return {"stage": stage, "seconds": seconds, "peak_mb": 100.0}

    monkeypatch.setattr(bench, "run_stage", fake)
    return ran


@pytest.mark.parametrize("over, status", [(False, 0), (True, 1)])
def test_a_stage_over_budget_gives_exit_status_1_and_the_file_all_the_same(tmp_path, monkeypatch, capsys, over, status):
    import json

    ran = fake_stages(monkeypatch, tmp_path, over=over)
    assert bench.main([]) == status
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["all_within_budget"] is not over and saved["all_fast_enough"]
    assert ("over budget: pipeline" in capsys.readouterr().err) is over
    for ours, theirs in bench.TRL_PAIRS.values():  # side by side, taking turns
        assert [s for s in ran if s in (ours, theirs)] == [ours, theirs] * bench.REPEATS


@pytest.mark.parametrize("trl_seconds, status", [(1.5, 0), (1.49, 1)])
def test_ours_less_than_the_required_ratio_as_fast_gives_exit_status_1(
    tmp_path, monkeypatch, capsys, trl_seconds, status
):
    import json

    fake_stages(monkeypatch, tmp_path, trl_seconds=trl_seconds)
    assert bench.main([]) == status
    out, err = capsys.readouterr()
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["all_within_budget"] and saved["all_fast_enough"] is (status == 0)
    assert [(p["pair"], p["ratio"]) for p in saved["trl_ratios"]] == [("PPO", trl_seconds), ("GRPO", trl_seconds)]
    assert out.count("BELOW") == (2 if status else 0)
    assert ("ours less than 1.5x as fast as TRL's trainer: PPO, GRPO" in err) is bool(status)
    assert "over budget" not in err


def test_without_trl_the_pairs_are_skipped_with_a_line_that_says_so(tmp_path, monkeypatch, capsys):
    import json

    ran = fake_stages(monkeypatch, tmp_path, has_trl=False)
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    for ours, theirs in bench.TRL_PAIRS.values():
        assert ours not in ran and theirs not in ran
        assert f"skipping {ours} and {theirs}: TRL's side needs the optional extra" in out
    assert json.loads((tmp_path / "bench.json").read_text())["trl_ratios"] == []
