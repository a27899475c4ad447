"""Chapter 6's exercise: the cases are worked by hand, each usual slip fails one of them and
gets the hint for its mistake, the grader's randomized inputs are fair, and the chapter's
measurement of the prompt's share runs on the learner's function."""

import ast
from fractions import Fraction

import numpy as np
import pytest
import torch

from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get
from minirlhf.course.nbgen import SOURCES, drop_markers, parse
from minirlhf.course.report import next_hint
from minirlhf.studies import robustness

SHARE = get("prompt_share")


def _by_hand(rewards, group_size) -> Fraction:
    """The share in exact fractions, straight from the formula of the contract."""
    r = [Fraction(x) for x in rewards]
    n, mean = len(r), sum(r) / len(r)
    total = sum((x - mean) ** 2 for x in r) / n
    groups = [r[i : i + group_size] for i in range(0, n, group_size)]
    within = sum(sum((x - sum(g) / group_size) ** 2 for x in g) / group_size for g in groups) / len(groups)
    return 1 - within / total if total else Fraction(0)


def test_the_reference_reproduces_every_case_worked_by_hand():
    assert len(SHARE.cases) >= 8
    for i, case in enumerate(SHARE.cases, 1):
        rewards = case.kwargs["rewards"].tolist()
        assert case.expected == pytest.approx(float(_by_hand(rewards, case.kwargs["group_size"])), abs=1e-12), i
        assert SHARE.expect.problem(SHARE.reference(**case.kwargs), case.expected) is None, f"case {i}: {case.why}"


def test_a_few_cases_by_their_numbers():
    # The values written out, so that a change to a case's rewards cannot silently move them.
    assert [c.expected for c in SHARE.cases][:7] == [0.5, 0.0, 1.0, 0.0, 1.0, 0.2, 0.0]
    assert SHARE.cases[7].expected == pytest.approx(0.9245, abs=1e-4)
    assert SHARE.cases[9].expected == pytest.approx(5 / 9)


def test_the_cases_cover_the_edges_a_learner_meets():
    kwargs = [c.kwargs for c in SHARE.cases]
    equal_group = [any(len(set(g)) == 1 for g in kw["rewards"].view(-1, kw["group_size"]).tolist()) for kw in kwargs]
    all_equal = [len(set(kw["rewards"].tolist())) == 1 for kw in kwargs]
    not_square = [len(kw["rewards"]) != kw["group_size"] ** 2 for kw in kwargs]
    assert sum(all_equal) >= 1 and sum(a < b for a, b in zip(all_equal, equal_group)) >= 2
    assert sum(not_square) >= 3
    assert any(kw["group_size"] == len(kw["rewards"]) for kw in kwargs)  # one prompt


# ----------------------------------------------------------------------------- learners' versions


def _variant(slip=None):
    """Return a prompt_share written to the contract with NumPy, with one deliberate slip."""

    def prompt_share(rewards, group_size):
        r = rewards.numpy().astype(float)
        if len(r) % group_size:
            raise ValueError(f"group_size {group_size} does not divide {len(r)}")
        if slip != "nan" and (r == r[0]).all():  # the NaN slip divides 0 by 0
            return 1.0 if slip == "all equal gives 1" else 0.0
        ddof = 1 if slip == "ddof=1" else 0
        if slip == "interleaved":
            groups = r.reshape(group_size, -1).T  # every group_size-th reward
        else:
            groups = r.reshape(-1, group_size)
        axis = 0 if slip == "axis 0" else 1
        within = groups.var(axis=axis, ddof=ddof).mean()
        total = r.var(ddof=ddof)
        if slip == "mean std":
            within, total = groups.std(axis=1).mean(), r.std()
        if slip == "answer's share":
            return float(within / total)
        with np.errstate(invalid="ignore"):
            share = 1 - within / total
        if slip == "a tensor":
            return torch.tensor(share)
        if slip == "a NumPy float":
            return share
        return float(share)

    return prompt_share


# The hint each slip gets: 1 the groups, 2 the within-prompt variance, 3 the divisor, 4 the
# share, its type and the equal rewards.
HINTS = [
    ("ddof=1", "unbiased", 3),
    ("mean std", "std", 2),
    ("axis 0", "wrong-axis", 1),
    ("interleaved", "wrong-axis", 1),
    ("answer's share", "answer-share", 4),
    ("all equal gives 1", "all-equal", 4),
    ("nan", "nan", 4),
    ("a tensor", "type", 4),
    ("a NumPy float", "numpy-scalar", 4),
]


def test_the_variant_without_a_slip_passes():
    assert run_cases(_variant(), SHARE).passed


@pytest.mark.parametrize("slip, mistake, number", HINTS, ids=[row[0] for row in HINTS])
def test_every_usual_slip_fails_and_gets_the_hint_for_its_mistake(slip, mistake, number):
    report = run_cases(_variant(slip), SHARE)
    assert not report.passed, f"no case catches the slip {slip!r}"
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, SHARE.hints[number - 1])


@pytest.mark.parametrize(
    "slip, words",
    [
        ("ddof=1", "n - 1"),
        ("mean std", "standard deviations"),
        ("interleaved", "side by side"),
        ("nan", "NaN"),
        ("a tensor", "Python float"),
    ],
)
def test_the_report_names_the_slip(slip, words):
    report = run_cases(_variant(slip), SHARE)
    assert any(words in r.message for r in report.results if not r.passed)


def test_the_ddof_slip_is_caught_where_the_brief_says():
    # a prompt whose answers all score 1: with n - 1 in both variances the share comes out 0
    case = SHARE.cases[5]
    assert case.expected == pytest.approx(0.2)
    assert _variant("ddof=1")(**case.kwargs) == pytest.approx(0.0)


def test_not_written_yet_reads_as_todo():
    def prompt_share(rewards, group_size):
        raise NotImplementedError("your code here")

    assert run_cases(prompt_share, SHARE).state == "todo"


def test_a_changed_input_is_reported():
    def in_place(rewards, group_size):
        out = _variant()(rewards, group_size)
        rewards -= rewards.mean()  # the right answer, but the input centred in place
        return out

    report = run_cases(in_place, SHARE)
    assert report.first_failure.mistake == "mutated"


def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases():
    def scaled(**kwargs):
        return 1.37 * SHARE.reference(**kwargs)

    report = run_cases(scaled, SHARE)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    assert report.hint() == next_hint(SHARE.hints, report.n_passed, len(SHARE.cases))


def test_the_hints_go_from_the_groups_to_the_share():
    assert len(SHARE.hints) >= 3
    assert "reshape(-1, group_size)" in SHARE.hints[0] and "ValueError" in SHARE.hints[0]
    assert "unbiased=False" in SHARE.hints[2] and "0.0" in SHARE.hints[-1]


# ----------------------------------------------------------------------------- the grader's inputs


def test_random_inputs_are_fair_and_cover_the_edges():
    rng = np.random.default_rng(5)
    seen = {"all equal": 0, "an equal group": 0, "0 or 1": 0, "one prompt": 0}
    for _ in range(500):
        kw = SHARE.random_kwargs(rng)
        r, k = kw["rewards"], kw["group_size"]
        assert isinstance(r, torch.Tensor) and r.dtype == torch.float32 and r.ndim == 1
        assert k >= 2 and len(r) % k == 0
        # on a grid of 1/8, so equal means exactly equal; or all equal, at a value float32 cannot hold
        assert torch.equal(r * 8, (r * 8).round()) or bool((r == r[0]).all())
        share = SHARE.reference(**kw)  # inside the contract: the reference does not refuse
        assert -1e-9 <= share <= 1 + 1e-9
        assert share == pytest.approx(float(_by_hand(r.tolist(), k)), abs=1e-9)
        groups = r.view(-1, k)
        seen["all equal"] += bool((r == r[0]).all())
        seen["an equal group"] += bool((groups == groups[:, :1]).all(1).any()) and not bool((r == r[0]).all())
        seen["0 or 1"] += set(r.tolist()) == {0.0, 1.0}
        seen["one prompt"] += len(r) == k
    assert min(seen.values()) >= 20, seen


def test_the_solution_in_float32_agrees_with_the_reference_on_random_inputs():
    rng = np.random.default_rng(11)
    mine = _variant()
    for _ in range(300):
        kw = SHARE.random_kwargs(rng)
        assert SHARE.expect.problem(mine(**kw), SHARE.reference(**kw)) is None


# ----------------------------------------------------------------------------- the refusals


def _chapter_code() -> list[str]:
    path = next(SOURCES.glob("06_*.py"))
    return [
        drop_markers(c["source"]) for c in parse(path.read_text(encoding="utf-8"), path.name) if c["kind"] == "code"
    ]


def _chapter_solution():
    code = next(c for c in _chapter_code() if c.lstrip().startswith("def prompt_share("))
    namespace = {"torch": torch}
    exec(compile(code, "<chapter 6's prompt_share>", "exec"), namespace)
    return namespace["prompt_share"]


@pytest.mark.parametrize("fn", [SHARE.reference, _chapter_solution()], ids=["package", "chapter"])
def test_both_refuse_a_group_size_that_does_not_split_the_rewards(fn):
    with pytest.raises(ValueError, match="group_size"):
        fn(torch.zeros(7), group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        fn(torch.arange(4.0), group_size=1)
    assert fn(torch.full((6,), 0.1), group_size=3) == 0.0  # equal rewards: 0, not NaN


# ----------------------------------------------------------------------------- the chapter uses it


def _calls(code: str) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)}


def test_the_chapter_measures_the_shares_with_the_learners_function():
    codes = _chapter_code()
    pick = next(c for c in codes if "share_fn = prompt_share" in c)
    assert 'run_cases(prompt_share, get("prompt_share"))' in pick and "share_fn = robustness.prompt_share" in pick
    measure = next(c for c in codes if "repeat_interleave(K" in c)
    assert "share_fn" in _calls(measure)  # the learner's function (or the package's) sets the shares
    assert "robustness.prompt_share" in _calls(measure)  # and the package's checks it
    assert codes.index(pick) < codes.index(measure)
    check_cell = next(i for i, c in enumerate(codes) if 'check("prompt_share"' in c)
    assert check_cell < codes.index(pick)


def test_the_refusal_test_of_the_chapter_tells_a_refusal_from_a_value():
    code = next(c for c in _chapter_code() if c.lstrip().startswith("def refusal("))
    code = code.split("\n\n\nverdict")[0]
    namespace = {"torch": torch}
    exec(compile(code, "<refusal>", "exec"), namespace)
    refusal = namespace["refusal"]
    refused, said = refusal(robustness.prompt_share)
    assert refused and "group_size" in said
    assert refusal(lambda rewards, group_size: 0.0) == (False, "a value, not a ValueError")
    assert refusal(_raise_todo) == (False, "a NotImplementedError, not a ValueError")


def _raise_todo(rewards, group_size):
    raise NotImplementedError("your code here")
