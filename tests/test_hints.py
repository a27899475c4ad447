"""Hints that match the mistake, and reports that show every input.

A failure carries the kind of mistake the checker diagnosed (a comparator's, or a usual slip
whose answer the learner's equals); the report shows the hint the exercise ties to it, and
falls back to the share of passing cases only when no failure's mistake has one. Every case
shows all its inputs, in lines that fit a notebook's 77 characters."""

import html
import re

import numpy as np
import pytest
import torch

from minirlhf.course.cases import MISTAKES, CaseResult, run_cases
from minirlhf.course.exercises import EXERCISES, get
from minirlhf.course.report import REPORT_WIDTH, Report, describe_kwargs, next_hint

KL = get("kl_penalty")
PPO = get("ppo_rlhf_objective")


# --------------------------------------------------------------------------- the mappings


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_mapped_mistake_is_one_the_checker_can_name_and_every_hint_exists(name):
    ex = EXERCISES[name]
    known = set(MISTAKES) | {s.kind for s in ex.expect.slips} | {"per-completion", "transposed"}
    assert ex.hint_for, f"{name} ties no mistake to a hint"
    for mistake, number in ex.hint_for.items():
        assert mistake in known, f"{name}: {mistake!r} is no mistake the checker names"
        assert 1 <= number <= len(ex.hints), f"{name}: {mistake!r} points at hint {number}"
    assert all(s.kind in ex.hint_for for s in ex.expect.slips), f"{name}: a slip with no hint"
    assert ex.hints == tuple(ex.hints) and len(ex.hints) >= 3  # the graded hints stay for the dropdowns


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_no_slip_is_right_on_every_case(name):
    ex = EXERCISES[name]
    for slip in ex.expect.slips:
        assert not run_cases(slip.fn, ex).passed, f"{name}: the slip {slip.kind!r} passes every case"


# --------------------------------------------------------------------------- chapter 1


def _kl(policy, reference):
    return np.asarray(policy, dtype=float) - np.asarray(reference, dtype=float)


def kl_reversed(logp_policy, logp_reference, beta):
    return round(float(beta * _kl(logp_reference, logp_policy).mean()), 2)


def kl_abs_per_token(logp_policy, logp_reference, beta):
    return round(float(beta * np.mean([abs(k) for k in _kl(logp_policy, logp_reference)])), 2)


def kl_clipped(logp_policy, logp_reference, beta):
    return round(float(beta * np.clip(_kl(logp_policy, logp_reference), 0, None).mean()), 2)


def kl_no_beta(logp_policy, logp_reference, beta):
    return round(float(_kl(logp_policy, logp_reference).mean()), 2)


def kl_sum(logp_policy, logp_reference, beta):
    return round(float(beta * _kl(logp_policy, logp_reference).sum()), 2)


def kl_numpy(logp_policy, logp_reference, beta):
    return np.round(beta * _kl(logp_policy, logp_reference).mean(), 2)


def kl_unrounded(logp_policy, logp_reference, beta):
    return float(beta * _kl(logp_policy, logp_reference).mean())


def kl_half_up(logp_policy, logp_reference, beta):
    return float(f"{beta * _kl(logp_policy, logp_reference).mean() + 1e-12:.2f}")


def kl_list(logp_policy, logp_reference, beta):
    return [round(float(beta * _kl(logp_policy, logp_reference).mean()), 2)]


def kl_abs_of_mean(logp_policy, logp_reference, beta):
    return round(float(beta * abs(_kl(logp_policy, logp_reference).mean())), 2)


# 1 the arrays and the subtraction, 2 the sign (no abs, no clip), 3 beta, the mean, round, float
KL_TABLE = [
    (kl_reversed, "kl-reversed", 2),
    (kl_abs_per_token, "sign", 2),
    (kl_abs_of_mean, "sign", 2),
    (kl_clipped, "clip-at-0", 2),
    (kl_no_beta, "no-beta", 3),
    (kl_sum, "sum", 3),
    (kl_numpy, "numpy-scalar", 3),
    (kl_unrounded, "not-rounded", 3),
    (kl_half_up, "round-half-up", 3),
    (kl_list, "type", 3),
]


# --------------------------------------------------------------------------- chapter 2's objective


def objective(slip=None):
    """A learner's ppo_rlhf_objective, right or with one slip."""

    def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta):
        old, new, ref, r = (np.asarray(x, dtype=float) for x in (old_logp, new_logp, ref_logp, rewards))
        ratio = np.exp(old - new) if slip == "ratio upside down" else np.exp(new - old)
        kl = ref - new if slip == "kl reversed" else new - ref
        adv = r if slip == "no kl in the advantage" else r - beta * kl
        unclipped, clipped = ratio * adv, np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv
        surrogate = {"no clip": unclipped, "clip only": clipped, "max": np.maximum(unclipped, clipped)}.get(
            slip, np.minimum(unclipped, clipped)
        )
        penalty = beta * (new - ref).mean()
        J = surrogate.mean()
        if slip == "kl subtracted twice":
            J = J - penalty
        loss = -J if slip == "policy_loss = -J" else J
        if slip == "kl subtracted from the objective only":  # policy_loss stays the surrogate
            loss, J = J, J - penalty
        out = {
            "objective": round(float(J), 2),
            "policy_loss": round(float(loss), 2),
            "kl_penalty": round(float(penalty), 2),
        }
        if slip == "numpy scalars":
            out = {k: np.float64(v) for k, v in out.items()}
        if slip == "no kl_penalty key":
            del out["kl_penalty"]
        if slip == "a tuple":
            return tuple(out.values())
        return out

    return ppo_rlhf_objective


# 1 the per-token ratio, KL and advantage, 2 the min and the clip, 3 the dict and J without the penalty
PPO_TABLE = [
    ("kl subtracted twice", "kl-twice", 3),
    ("kl subtracted from the objective only", "kl-twice", 3),
    ("no clip", "min-clip", 2),
    ("clip only", "min-clip", 2),
    ("max", "min-clip", 2),
    ("kl reversed", "kl-sign", 1),
    ("no kl in the advantage", "no-kl", 1),
    ("ratio upside down", "ratio-inverted", 1),
    ("policy_loss = -J", "loss-negated", 3),
    ("numpy scalars", "numpy-scalar", 3),
    ("no kl_penalty key", "missing-key", 3),
    ("a tuple", "type", 3),
]


# --------------------------------------------------------------------------- chapter 6's share

SHARE = get("prompt_share")


def _groups_and_total(rewards, group_size, unbiased=False):
    r = rewards.double()
    return r.view(-1, group_size), r.var(unbiased=unbiased)


def share_unbiased(rewards, group_size):
    if (rewards == rewards[0]).all():
        return 0.0
    groups, total = _groups_and_total(rewards, group_size, unbiased=True)
    return float(1 - groups.var(1).mean() / total)


def share_mean_std(rewards, group_size):
    if (rewards == rewards[0]).all():
        return 0.0
    groups, total = _groups_and_total(rewards, group_size)
    return float(1 - groups.std(1, unbiased=False).mean() / total.sqrt())


def share_axis_0(rewards, group_size):
    if (rewards == rewards[0]).all():
        return 0.0
    groups, total = _groups_and_total(rewards, group_size)
    return float(1 - groups.var(0, unbiased=False).mean() / total)


def share_nan(rewards, group_size):
    groups, total = _groups_and_total(rewards, group_size)
    return float(1 - groups.var(1, unbiased=False).mean() / total)


def share_tensor(rewards, group_size):
    if (rewards == rewards[0]).all():
        return torch.tensor(0.0)
    groups, total = _groups_and_total(rewards, group_size)
    return 1 - groups.var(1, unbiased=False).mean() / total


# 1 the groups, 2 the within-prompt variance, 3 the divisor, 4 the share, its type, equal rewards
SHARE_TABLE = [
    (share_unbiased, "unbiased", 3),
    (share_mean_std, "std", 2),
    (share_axis_0, "wrong-axis", 1),
    (share_nan, "nan", 4),
    (share_tensor, "type", 4),
]


@pytest.mark.parametrize("fn, mistake, number", SHARE_TABLE, ids=[row[0].__name__ for row in SHARE_TABLE])
def test_every_prompt_share_slip_gets_the_hint_for_its_mistake(fn, mistake, number):
    report = run_cases(fn, SHARE)
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, SHARE.hints[number - 1])


@pytest.mark.parametrize("fn, mistake, number", KL_TABLE, ids=[row[0].__name__ for row in KL_TABLE])
def test_every_kl_penalty_slip_gets_the_hint_for_its_mistake(fn, mistake, number):
    report = run_cases(fn, KL)
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, KL.hints[number - 1])


@pytest.mark.parametrize("slip, mistake, number", PPO_TABLE, ids=[row[0] for row in PPO_TABLE])
def test_every_objective_slip_gets_the_hint_for_its_mistake(slip, mistake, number):
    assert run_cases(objective(), PPO).passed
    report = run_cases(objective(slip), PPO)
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, PPO.hints[number - 1])


def test_the_kl_counted_twice_gets_the_hint_about_it_and_says_so():
    report = run_cases(objective("kl subtracted twice"), PPO)
    first = report.first_failure
    assert first.message == (
        "objective is 1.16, expected 1.18; that is J minus the KL penalty, but the penalty "
        "is already inside the advantage: do not subtract it again"
    )
    assert "Do not subtract the penalty from `J`" in report.hint()[1]
    # before, 7 of 10 passing picked the middle hint, about min and clip
    assert next_hint(PPO.hints, report.n_passed, len(PPO.cases))[0] == 2


def test_the_words_say_what_is_wrong_with_the_numbers():
    report = run_cases(objective("policy_loss = -J"), PPO)
    assert report.first_failure.message.startswith("policy_loss has the wrong sign: -1.18, expected 1.18")
    assert "got[" not in str(report)


@pytest.mark.parametrize("table, ex", [(KL_TABLE, KL), (PPO_TABLE, PPO)], ids=["kl_penalty", "ppo_rlhf_objective"])
def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases(table, ex):
    def scaled(**kwargs):
        got = ex.reference(**kwargs)
        if isinstance(got, dict):
            return {k: round(1.37 * v, 2) for k, v in got.items()}
        return round(1.37 * got, 2)

    report = run_cases(scaled, ex)
    assert report.first_failure.mistake == "value"
    assert {r.mistake for r in report.results if not r.passed} <= {"value", "sign"}
    assert report.hint() == next_hint(ex.hints, report.n_passed, len(ex.cases))


def test_a_time_out_still_shows_no_hint():
    report = Report(KL, [CaseResult(KL.cases[0], False, None, "took longer", kind="timeout")])
    assert report.hint() == (0, "")


def test_the_first_failure_with_a_mapped_mistake_decides():
    cases = KL.cases
    results = [
        CaseResult(cases[0], False, 1.0, "x", mistake="value"),
        CaseResult(cases[1], False, 1.0, "x", mistake="no-beta"),
        CaseResult(cases[2], False, 1.0, "x", mistake="sign"),
    ]
    assert Report(KL, results).hint()[0] == 3


# --------------------------------------------------------------------------- every input shows


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_case_shows_all_its_inputs_in_lines_that_fit(name):
    ex = EXERCISES[name]
    for i, case in enumerate(ex.cases, 1):
        report = Report(ex, [CaseResult(case, False, None, "the result is None", mistake="type")])
        text = str(report)
        assert all(len(line) <= REPORT_WIDTH for line in text.splitlines()), f"case {i}:\n{text}"
        if not case.kwargs:  # a function of no inputs (chapter 10's tells) shows no input line
            assert "\n       input " not in text
            continue
        inputs = " ".join(text.split("\n       input     ", 1)[1].split("\n       expected", 1)[0].split())
        described = describe_kwargs(case.kwargs)
        assert inputs == " ".join(described.split()), f"case {i}: inputs cut"
        assert "..." not in described and all(f"{k}=" in described for k in case.kwargs)
        page = html.unescape(report._repr_html_())
        assert described in page
    page = html.unescape(run_cases(ex.reference, ex)._repr_html_())  # the PASS list of the cases
    for case in ex.cases:
        assert describe_kwargs(case.kwargs) in page


def test_chapter_2s_case_7_shows_epsilon_and_beta():
    text = str(Report(PPO, [CaseResult(PPO.cases[6], False, None, "x", mistake="type")]))
    assert "epsilon=0.2, beta=0.2" in text


def test_a_large_input_is_summarized_by_its_shape_not_cut():
    described = describe_kwargs(get("masked_sft_loss").cases[6].kwargs)
    assert described.startswith("logits=tensor of shape (2, 9, 13), every entry 0.0, targets=tensor([[12, 12, 2,")
    assert "mask=tensor([[0, 0, 0, 0, 0, 1, 1, 1, 0]," in described and len(described) < 300
    assert describe_kwargs({"x": np.arange(100.0)}) == (
        "x=array of shape (100,): 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, ... (100 numbers)"
    )


def test_every_line_of_a_failing_report_fits():
    for name in sorted(EXERCISES):
        ex = EXERCISES[name]
        for fn in [lambda **kw: None] + [s.fn for s in ex.expect.slips]:
            text = str(run_cases(fn, ex))
            assert all(len(line) <= REPORT_WIDTH for line in text.splitlines()), text
            assert not re.search(r"got\[", text)
