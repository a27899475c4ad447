"""The planted bugs: each is one line away from the engine, planting it reaches the engine's
run and is undone after, and the checks before training catch every one."""

import dataclasses
import importlib
import inspect

import pytest
import torch

from minirlhf import dpo, evaluation, ppo
from minirlhf.dpo import DPOConfig
from minirlhf.ppo import PPOConfig
from minirlhf.store import load_sft
from minirlhf.studies import silent_bugs as sb
from minirlhf.studies.silent_bugs import runs as bug_runs
from minirlhf.task import SEMI

# What each bug's one changed line becomes (the engine's line, then the copy's), by bug.
CHANGED = {
    "kl-no-grad": ("new_logp)", "new_logp.detach())"),
    "k1-loss": ("torch.exp(d) - d - 1", "new_logp - ref_logp"),
    "no-mask": ("(ends_before == 0)", "torch.ones_like(ends_before)"),
    "pad-is-end": ("(ends_before == 0)", "(completions != SEMI)"),
    "ratio-to-reference": ("ppo_token_loss(new_logp, old_logp", "ppo_token_loss(new_logp, ref_logp"),
    "no-temperature": ("logits / temperature", "log_softmax(logits, dim=-1)"),
    "dpo-rejected-flipped": (
        "policy_rejected_logps - ref_rejected_logps",
        "ref_rejected_logps - policy_rejected_logps",
    ),
}


@pytest.mark.parametrize("name", list(sb.BUGS))
def test_each_bug_is_one_line_of_the_engine(name):
    bug = sb.BUGS[name]
    engine_line, copy_line = sb.one_line_diff(bug)
    want_engine, want_copy = CHANGED[name]
    assert want_engine in engine_line and want_copy in copy_line
    engine = getattr(importlib.import_module(bug.module), bug.name)
    assert inspect.signature(engine, eval_str=True) == inspect.signature(bug.copy, eval_str=True)
    # every module the bug is planted in looks up that same engine function
    assert all(getattr(importlib.import_module(m), bug.name) is engine for m in bug.modules)


def test_one_line_diff_refuses_a_copy_two_lines_away():
    def completion_mask(completions: torch.Tensor) -> torch.Tensor:
        is_end = (completions == SEMI).long()
        ends_before = torch.cumsum(is_end, dim=1)
        return torch.ones_like(ends_before).float()

    bug = sb.Bug("t", "t", ("minirlhf.ppo",), "completion_mask", completion_mask, "verifier")
    with pytest.raises(ValueError, match="differs in 2 line"):
        sb.one_line_diff(bug)


def test_a_bug_names_its_modules():
    one = sb.Bug("t", "t", "minirlhf.ppo", "completion_mask", sb.completion_mask_missing, "verifier")
    assert one.modules == ("minirlhf.ppo",) and one.module == "minirlhf.ppo"  # one name is one module
    assert sb.BUGS["no-mask"].modules == ("minirlhf.ppo", "minirlhf.evaluation")
    with pytest.raises(ValueError, match="modules must name"):
        sb.Bug("t", "t", (), "completion_mask", sb.completion_mask_missing, "verifier")


def test_planting_swaps_the_function_and_puts_it_back():
    original = ppo.completion_mask
    bug = sb.BUGS["no-mask"]
    with sb.planted(bug):  # in the update and in the measurement after each iteration
        assert ppo.completion_mask is bug.copy and evaluation.completion_mask is bug.copy
    assert ppo.completion_mask is original and evaluation.completion_mask is original
    with pytest.raises(RuntimeError):
        with sb.planted(sb.BUGS["dpo-rejected-flipped"]):
            raise RuntimeError("a run that fails")
    assert dpo.dpo_loss.__module__ == "minirlhf.dpo" and dpo.dpo_loss.__name__ == "dpo_loss"


@pytest.fixture(scope="module")
def sft():
    return load_sft(progress=False)[0]


@pytest.mark.parametrize("name", ["no-mask", "ratio-to-reference", "kl-no-grad"])
def test_a_planted_bug_reaches_the_engine_run(tiny, sft, name):
    # From the partial-SFT policy (an untrained one earns no reward, and nothing moves).
    _, rm, evalset = tiny
    policy, bug = sft, sb.BUGS[name]
    cfg = PPOConfig(iterations=3)
    good = sb.run_bug(None, bug.arm, policy, rm, 0, evalset, config=cfg)
    bad = sb.run_bug(bug, bug.arm, policy, rm, 0, evalset, config=cfg)
    assert good["accuracy"][0] == bad["accuracy"][0]  # the same start
    assert good["objective/entropy"] != bad["objective/entropy"] or good["kl"] != bad["kl"]
    again = sb.run_bug(None, bug.arm, policy, rm, 0, evalset, config=cfg)
    assert again["kl"] == good["kl"]  # the engine is whole again


def test_a_planted_dpo_bug_reaches_the_dpo_run(tiny):
    policy, rm, evalset = tiny
    bug = sb.BUGS["dpo-rejected-flipped"]
    cfg = DPOConfig(steps=8, eval_every=4)
    good = sb.run_bug(None, "dpo", policy, rm, 0, evalset, config=cfg)
    bad = sb.run_bug(bug, "dpo", policy, rm, 0, evalset, config=cfg)
    assert bad["rewards/accuracies"] != good["rewards/accuracies"]


# Which checks before training each bug fails (every other check passes).
CAUGHT = {
    None: set(),
    "kl-no-grad": {"leash gradient"},
    "k1-loss": {"leash gradient"},
    "no-mask": {"mask"},
    "pad-is-end": {"mask"},
    "ratio-to-reference": {"ratio"},
    "no-temperature": {"log-probs", "leash gradient"},
    "dpo-rejected-flipped": {"DPO gradient"},
}


@pytest.mark.parametrize("name", list(CAUGHT))
def test_the_checks_before_training_catch_every_bug(sft, name):
    results = sb.run_checks(sft, None if name is None else sb.BUGS[name])
    assert set(results) == set(sb.CHECKS)
    failed = {check for check, (passed, _) in results.items() if not passed}
    assert failed == CAUGHT[name], {check: seen for check, (_, seen) in results.items()}
    assert set(CAUGHT) - {None} == set(sb.BUGS)


def test_the_mask_check_shows_the_mask_as_characters(sft):
    _, shown = sb.check_mask(sft)
    with sb.planted(sb.BUGS["pad-is-end"]):
        _, shown_bad = sb.check_mask(sft)
    assert shown.count("->") == 4 and ";." in shown  # "44;; -> 44;.": the end mark kept
    assert ";" not in shown_bad.split("->")[1].split()[0]  # the end mark eaten


def test_tell_table_separates_by_paired_differences():
    def log(kl):
        return {**{k: [0.5, 0.5, 0.5] for k in sb.DASHBOARD["ppo"]}, "kl": [0.0] + kl, "objective/kl": kl}

    runs = {
        "correct": {"grpo-rm": {0: log([0.1, 0.1]), 1: log([0.1, 0.12]), 2: log([0.1, 0.11])}},
        "kl-no-grad": {0: log([0.2, 0.2]), 1: log([0.2, 0.22]), 2: log([0.2, 0.21])},
    }
    table = sb.tell_table(runs)["kl-no-grad"]
    assert list(table) == ["kl", "objective/kl"]  # only the panels that separate, measured
    row = table["kl"]
    assert row["difference"][0] == pytest.approx(0.1) and row["separates"]
    assert row["margin"] > 1e6  # the same difference on every seed, to the last bits
    assert row["correct"][0] == pytest.approx((0.1 + 0.11 + 0.105) / 3)
    same = {"correct": runs["correct"], "kl-no-grad": runs["correct"]["grpo-rm"]}
    assert sb.tell_table(same)["kl-no-grad"] == {}
    assert not sb.tell_table(same, every=True)["kl-no-grad"]["kl"]["separates"]


def test_the_margin_is_the_near_edge_in_half_widths():
    def log(kl):
        return {"kl": [0.0, kl]}

    runs = {"correct": {"grpo-rm": {"0": log(0.1), "1": log(0.1), "2": log(0.1)}}}
    runs["kl-no-grad"] = {"0": log(0.3), "1": log(0.31), "2": log(0.32)}
    row = sb.paired_difference(runs, "kl-no-grad", "kl")
    mean, half = row["difference"]
    assert row["margin"] == pytest.approx(mean / half - 1) and row["margin"] > 0 and row["separates"]
    runs["kl-no-grad"] = {"0": log(0.0), "1": log(0.1), "2": log(0.35)}  # holds 0: a negative margin
    row = sb.paired_difference(runs, "kl-no-grad", "kl")
    assert row["margin"] < 0 and not row["separates"]


def test_study_runs_every_bug_and_each_arm_once_per_seed(monkeypatch):
    calls = []

    def fake_run(bug, arm, policy, rm, seed, evalset=None, progress=False, config=None):
        calls.append((None if bug is None else bug.name, arm, seed))
        keys = sb.DASHBOARD[sb._trainer(arm)]
        return {k: [float(seed)] * 3 for k in keys} | {"unused": [0.0]}

    monkeypatch.setattr(bug_runs, "run_bug", fake_run)  # where study looks it up
    runs = sb.study(seeds=(0, 1), policy="p", rm="r", workers=1)  # here, so the calls are counted
    assert set(runs) == {"correct", *sb.BUGS}
    assert set(runs["correct"]) == {"verifier", "grpo-rm", "dpo"}
    assert all(set(runs[name]) == {"0", "1"} for name in sb.BUGS)
    assert "unused" not in runs["no-mask"]["0"] and "val/completion_length" in runs["no-mask"]["0"]
    assert len(calls) == 2 * (3 + len(sb.BUGS))


def test_stored_bug_runs_are_reused(monkeypatch, tmp_path):
    from minirlhf.course import runs as stored

    made = []
    monkeypatch.setattr(sb, "study", lambda seeds, progress=False, workers=None: made.append(seeds) or {"correct": {}})
    path = tmp_path / "bugs.json"
    first = stored.stored_bug_runs(path, seeds=(0,))
    second = stored.stored_bug_runs(path, seeds=(0,))
    assert first == second and len(made) == 1
    stored.stored_bug_runs(path, seeds=(0, 1))  # other seeds: run again
    assert len(made) == 2


def test_the_dashboard_titles_the_tells_in_bold():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def log(v, length=3.5):
        return {**{k: [v, v + 1.0, v + 2.0] for k in sb.DASHBOARD["ppo"]}, "val/completion_length": [length] * 3}

    runs = {"correct": {"verifier": {"0": log(0.0), "1": log(0.5)}}, "no-mask": {"0": log(0.0, 4), "1": log(0.5, 4)}}
    axes = sb.plot_dashboard(runs, "no-mask")  # only the panel that separates is bold, as measured
    titles = {ax.get_title(): ax.title.get_fontweight() for ax in axes if ax.get_visible()}
    assert set(titles) == set(sb.DASHBOARD["ppo"])
    assert titles["val/completion_length"] == "bold" and titles["accuracy"] == "normal"
    labels = [ax.get_xlabel() for ax in axes if ax.get_visible()]
    assert labels == [""] * 4 + ["iteration"] * 4  # one axis, named under each column
    plt.close("all")


def test_band_check_plants_the_fix_and_judges_the_panels_that_separate(monkeypatch):
    seen = []

    def log(length, entropy):
        return {
            **{k: [0.5, 0.5] for k in sb.DASHBOARD["ppo"]},
            "val/completion_length": length,
            "objective/entropy": entropy,
        }

    def good(seed):
        return log([3.5, 3.5], [0.5, 0.5 + 0.01 * seed])

    def fake_run(bug, arm, policy, rm, seed, evalset=None, progress=False, config=None):
        seen.append((bug.copy, arm, seed))
        return good(seed)

    runs = {
        "correct": {"verifier": {str(s): good(s) for s in range(3)}},
        "no-mask": {str(s): log([4.0, 4.0], [0.5, 0.5 + 0.01 * s]) for s in range(3)},  # only the length moves
    }
    monkeypatch.setattr(bug_runs, "run_bug", fake_run)  # where band_check looks it up
    fix = lambda completions: completions  # noqa: E731  (never called: run_bug is faked)
    result = sb.band_check("no-mask", fix, runs, policy="p", rm="r", workers=1)  # here, so calls are seen
    assert [s for *_, s in seen] == [0, 1, 2] and all(c is fix and a == "verifier" for c, a, _ in seen)
    assert list(result["panels"]) == ["val/completion_length"]  # the panel that separates, measured
    row = result["panels"]["val/completion_length"]
    assert row["inside"] and row["buggy"] == 4.0 and not row["bug_inside"]
    assert result["passed"] and result["identical"]
    # runs that land in the band without being the correct runs: passed, not identical
    monkeypatch.setattr(bug_runs, "run_bug", lambda bug, arm, policy, rm, seed, *args, **kw: good(2 - seed))
    other = sb.band_check("no-mask", fix, runs, policy="p", rm="r", workers=1)
    assert other["passed"] and not other["identical"]
    # the stored bug runs change: so do the panels judged
    runs["no-mask"] = {str(s): log([3.5, 3.5], [0.9, 0.9 + 0.01 * s]) for s in range(3)}
    monkeypatch.setattr(bug_runs, "run_bug", fake_run)
    assert list(sb.band_check("no-mask", fix, runs, policy="p", rm="r", workers=1)["panels"]) == ["objective/entropy"]
    runs["correct"]["verifier"] = {
        k: {**v, "objective/entropy": [0.9, 0.9]} for k, v in runs["correct"]["verifier"].items()
    }
    assert not sb.band_check("no-mask", fix, runs, policy="p", rm="r", workers=1)["passed"]


def _kl_runs(correct, buggy):
    def logs(values_by_seed):
        return {str(s): {"kl": list(v)} for s, v in enumerate(values_by_seed)}

    return {"correct": {"grpo-rm": logs(correct)}, "kl-no-grad": logs(buggy)}


_CORRECT = [
    [0.0, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10],
    [0.0, 0.12, 0.11, 0.12, 0.12, 0.11, 0.12],
    [0.0, 0.11, 0.12, 0.11, 0.10, 0.12, 0.11],
]


def test_first_departure_needs_k_points_in_a_row_apart_by_the_paired_test():
    # seed by seed, buggy minus correct: a blip at point 1, back at 2, apart from 3 on
    bump = [0.0, 0.3, 0.0, 0.3, 0.3, 0.3, 0.3]
    buggy = [[c + b + 0.01 * s for c, b in zip(row, bump)] for s, row in enumerate(_CORRECT)]
    runs = _kl_runs(_CORRECT, buggy)
    assert sb.first_departure(runs, "kl-no-grad", "kl") == 3
    assert sb.first_departure(runs, "kl-no-grad", "kl", k=1) == 1  # the blip counts when one point is enough
    assert sb.first_departure(runs, "kl-no-grad", "kl", k=5) is None  # never five in a row
    x, mean, half = sb.point_differences(runs, "kl-no-grad", "kl")
    assert list(x) == list(range(7)) and mean[3] == pytest.approx(0.31) and half[3] > 0
    assert sb.first_departure(_kl_runs(_CORRECT, _CORRECT), "kl-no-grad", "kl") is None


def test_first_departure_uses_the_buggy_runs_own_noise():
    # the buggy mean is far outside the correct run's band, but one seed of three is the
    # correct run's: the paired differences (0, 0, big) hold 0, and the panel is not timed
    buggy = [row[:] for row in _CORRECT]
    buggy[2] = [v + 1.0 for v in buggy[2]]
    assert sb.first_departure(_kl_runs(_CORRECT, buggy), "kl-no-grad", "kl", k=1) is None


def test_first_departure_never_times_a_zero_band_or_a_panel_that_does_not_separate():
    zeros = [[0.0] * 7] * 3
    # every correct seed exactly 0 (a zero-width band); one buggy seed of three a little above
    blip = [[0.0] * 7, [0.0] * 7, [0.0] + [0.01] * 6]
    assert sb.first_departure(_kl_runs(zeros, blip), "kl-no-grad", "kl", k=1) is None
    assert sb.first_departure(_kl_runs(zeros, zeros), "kl-no-grad", "kl", k=1) is None
    # every seed moved by the same amount from point 1 on: apart, with no spread to hide it
    same = [[c + (0.0 if i == 0 else 1.0) for i, c in enumerate(row)] for row in _CORRECT]
    assert sb.first_departure(_kl_runs(_CORRECT, same), "kl-no-grad", "kl") == 1
    # apart on the wrong side of the whole-run difference at points 1-2 only: not timed there
    early = [
        [c + (-0.3 if i in (1, 2) else 0.5) + 0.01 * s for i, c in enumerate(row)] for s, row in enumerate(_CORRECT)
    ]
    assert sb.first_departure(_kl_runs(_CORRECT, early), "kl-no-grad", "kl", k=2) == 3
    with pytest.raises(ValueError, match="k must be"):
        sb.first_departure(_kl_runs(_CORRECT, _CORRECT), "kl-no-grad", "kl", k=0)
    # a residue of float64 rounding at the start, the same on every seed, is not a departure
    residue = [[c + (3e-17 if i == 0 else 1.0) for i, c in enumerate(row)] for row in _CORRECT]
    assert sb.first_departure(_kl_runs(_CORRECT, residue), "kl-no-grad", "kl") == 1


def test_curve_x_puts_every_panel_on_one_axis():
    ppo_log = {"kl": [0.0] * 4, "objective/kl": [0.0] * 3}
    assert list(sb.curve_x(ppo_log, "kl", "ppo")) == [0, 1, 2, 3]  # before training, then after each
    assert list(sb.curve_x(ppo_log, "objective/kl", "ppo")) == [1, 2, 3]  # each iteration's batch
    dpo_log = {"accuracy": [0.1, 0.2, 0.3], "steps": [0, 8, 16], "logps/chosen": [0.0] * 16}
    assert list(sb.curve_x(dpo_log, "accuracy", "dpo")) == [0, 8, 16]
    assert list(sb.curve_x(dpo_log, "logps/chosen", "dpo")) == list(range(1, 17))
    with pytest.raises(ValueError, match="trainer must be"):
        sb.curve_x(ppo_log, "kl", "sft")


def test_tell_table_every_metric_of_the_dashboard():
    def log(v):
        return {k: [0.0, v, v] for k in sb.DASHBOARD["ppo"]}

    runs = {
        "correct": {"verifier": {"0": log(1.0), "1": log(1.1), "2": log(0.9)}},
        "no-mask": {"0": log(2.0), "1": log(2.1), "2": log(1.9)},
    }
    every = sb.tell_table(runs, ["no-mask"], every=True)["no-mask"]
    assert list(every) == list(sb.DASHBOARD["ppo"]) and all(row["separates"] for row in every.values())
    assert list(sb.tell_table(runs, ["no-mask"])["no-mask"]) == list(sb.DASHBOARD["ppo"])
    assert sb.separating(runs, "no-mask") == sb.DASHBOARD["ppo"]
    assert sb.paired_difference(runs, "no-mask", "kl")["difference"][0] == pytest.approx(1.0)


def test_band_report_never_raises_for_the_learners_code(monkeypatch):
    """A fix that passes its check but raises on its 60th call inside the run (review E8) gets
    a line that says so, not a traceback."""
    from minirlhf.course.exercises import ch10
    from minirlhf.model import completion_mask

    calls = []

    def fix(completions):
        calls.append(1)
        if len(calls) > 60:
            raise IndexError("index 4 is out of bounds")
        return completion_mask(completions)

    def fake_band_check(name, fn, runs, progress=False):
        batch = torch.tensor([[1, 2, SEMI, SEMI]])
        for _ in range(100):  # the run calls the mask on every batch
            fn(batch)
        raise AssertionError("not reached")

    monkeypatch.setattr(sb, "band_check", fake_band_check)
    text = ch10.band_report("B", fix, runs={"correct": {"verifier": {"0": {}}}})
    assert "fix_run_a passes its check, but raised during run B: IndexError: index 4 is out of bounds" in text
    assert "line" in text and "fix" in text  # where, in the learner's code
    calls.clear()
    broken = ch10.band_report("A", lambda completions: completions, runs={})
    assert broken.startswith("fix_run_a: the check above does not pass yet")


def test_what_it_writes_compares_the_change_from_the_start():
    def log(end, malformed):
        return {"heldout/logps_correct": [-2.0, -1.5, end], "kinds": {"malformed": [0.2, 0.1, malformed]}}

    runs = {
        "correct": {"dpo": {"0": log(-1.0, 0.1), "1": log(-1.1, 0.1), "2": log(-0.9, 0.1)}},
        "dpo-rejected-flipped": {"0": log(-1.8, 0.0), "1": log(-1.7, 0.02), "2": log(-1.9, 0.01)},
    }
    rows = sb.what_it_writes(runs, "dpo-rejected-flipped", keys=("heldout/logps_correct", "kinds/malformed"))
    row = rows["heldout/logps_correct"]
    assert row["start"] == -2.0 and row["correct"][0] == pytest.approx(1.0)
    assert row["buggy"][0] == pytest.approx(0.2) and row["difference"][0] == pytest.approx(-0.8)
    assert rows["kinds/malformed"]["buggy"][0] == pytest.approx(-0.19)
    with pytest.raises(ValueError, match="DPO bug"):
        sb.what_it_writes(runs, "no-mask")


def test_band_report_names_a_fix_that_calls_the_engines_function(monkeypatch):
    """A fix that calls the engine's own function passes its check, and in the run calls itself,
    since it has taken that function's place (learner 2026-12-06): the report says so, not
    "RecursionError ... with shapes the check's cases may not have"."""
    from minirlhf.course.exercises import ch10
    from minirlhf.model import completion_mask

    def fake_band_check(name, fn, runs, progress=False):
        with sb.planted(dataclasses.replace(sb.BUGS[name], copy=fn)):  # as the run plants it
            return fn(torch.tensor([[1, 2, SEMI, SEMI]]))

    def fix_run_a(completions):
        return ppo.completion_mask(completions)  # the engine's function, reached by its module

    assert ppo.completion_mask is completion_mask
    monkeypatch.setattr(sb, "band_check", fake_band_check)
    text = ch10.band_report("A", fix_run_a, runs={})
    assert "called itself without end" in text and "completion_mask" in text and "RecursionError" not in text
    assert ppo.completion_mask is completion_mask


def test_band_report_leads_with_the_digits_and_shows_the_bug_beside_the_band(monkeypatch):
    from minirlhf.course.exercises import ch10
    from minirlhf.model import completion_mask

    row = {"fixed": 3.5, "buggy": 4.0, "band": (3.5, 0.01), "inside": True, "bug_inside": False}
    monkeypatch.setattr(sb, "separating", lambda runs, name: ("val/completion_length",))
    for identical, last in ((True, "PASS: the run is the correct run again"), (False, "PASS within the band")):
        result = {"panels": {"val/completion_length": row}, "identical": identical, "passed": True}
        monkeypatch.setattr(sb, "band_check", lambda name, fn, runs, progress=False, r=result: r)
        text = ch10.band_report("A", completion_mask, runs={"correct": {"verifier": {"0": {}, "1": {}}}})
        lines = text.splitlines()
        verdict = next(line for line in lines if line.startswith(("PASS", "not yet")))
        assert lines[0].endswith("seeds 0-1:") and "digit for digit" in lines[1] and verdict.startswith(last)
        assert "bug   4.0000 OUT" in text and "3.5000 in" in text
        assert max(len(line) for line in lines) <= 77, text


def test_the_mask_check_names_the_slip_that_drops_the_end_mark():
    # a mask one short (the tokens strictly before the first ';') is told from run B's bug
    # (every ';' dropped) on the first case, where the two differ
    from minirlhf.course.cases import run_cases
    from minirlhf.course.exercises import get
    from minirlhf.task import SEMI

    def fix_run_a(completions):
        return (torch.cumsum((completions == SEMI).long(), dim=1) == 0).float()

    ex = get("fix_run_a")
    first = next(r for r in run_cases(fix_run_a, ex).results if not r.passed)
    assert "drops the first ';' itself" in first.message and "every ';'" not in first.message
