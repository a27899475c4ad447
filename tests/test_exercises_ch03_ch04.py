"""The exercises of chapters 3 and 4: hand-worked cases, the checker's verdicts on typical
mistakes, the randomized inputs, and the chapter's solution against the package."""

import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minirlhf.course import nbgen
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import check, get
from minirlhf.course.expect import ExpectScalarTensor
from minirlhf.course.report import next_hint
from minirlhf.reward_model import bradley_terry_loss
from minirlhf.sft import masked_sft_loss

NAMES = ("masked_sft_loss", "bradley_terry_loss")


# --------------------------------------------------------------------------- the cases


@pytest.mark.parametrize("name", NAMES)
def test_every_case_is_reproduced_by_the_reference(name):
    exercise = get(name)
    assert len(exercise.cases) >= 6 and len(exercise.hints) >= 3
    for i, case in enumerate(exercise.cases, 1):
        got = exercise.reference(**case.kwargs)
        assert exercise.expect.problem(got, case.expected) is None, f"case {i}: {case.why}"
        assert abs(float(got) - float(case.expected)) < 1e-4, f"case {i}: {case.why}"


def test_hand_worked_values_of_the_sft_loss():
    assert masked_sft_loss(
        torch.zeros(3, 5, 13), torch.zeros(3, 5, dtype=torch.long), torch.ones(3, 5)
    ).item() == pytest.approx(math.log(13), abs=1e-6)
    # p(target) = 3/4 -> log(4/3)
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert masked_sft_loss(logits, torch.tensor([[1]]), torch.ones(1, 1)).item() == pytest.approx(
        math.log(4 / 3), abs=1e-6
    )


def test_hand_worked_values_of_the_bt_loss():
    def bt(c, r):
        return bradley_terry_loss(torch.tensor(c), torch.tensor(r)).item()

    assert bt([0.0], [0.0]) == pytest.approx(0.6931, abs=1e-4)
    assert bt([2.0], [0.0]) == pytest.approx(0.1269, abs=1e-4)
    assert bt([-60.0], [40.0]) == pytest.approx(100.0, abs=1e-4)
    # why the margin -100 case exists: the naive form overflows in float32
    assert torch.isinf(-torch.log(torch.sigmoid(torch.tensor(-100.0))))


def test_the_prompt_gets_no_gradient():
    logits = torch.randn(2, 9, 13, requires_grad=True)
    targets = torch.randint(13, (2, 9))
    mask = torch.zeros(2, 9)
    mask[:, 5:8] = 1
    masked_sft_loss(logits, targets, mask).backward()
    per_position = logits.grad.abs().sum(-1)
    assert (per_position[mask == 0] == 0).all()
    assert (per_position[mask == 1] > 0).all()


# --------------------------------------------------------------------------- typical mistakes


def _ce(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def sft_unmasked(logits, targets, mask):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def sft_mean_over_all(logits, targets, mask):
    return (_ce(logits, targets) * mask).mean()


def sft_row_means(logits, targets, mask):
    ce = _ce(logits, targets) * mask
    return (ce.sum(1) / mask.sum(1)).mean()


def sft_log_of_softmax(logits, targets, mask):
    ce = -torch.log(torch.softmax(logits, -1)).gather(-1, targets[..., None])[..., 0]
    mask = mask.float()
    return (ce * mask).sum() / mask.sum()


def sft_item(logits, targets, mask):
    mask = mask.float()
    return ((_ce(logits, targets) * mask).sum() / mask.sum()).item()


def sft_per_position(logits, targets, mask):
    return _ce(logits, targets) * mask


def bt_log_of_sigmoid(r_chosen, r_rejected):
    return -torch.log(torch.sigmoid(r_chosen - r_rejected)).mean()


def bt_log1p_exp(r_chosen, r_rejected):
    return torch.log(1 + torch.exp(r_rejected - r_chosen)).mean()


def bt_no_mean(r_chosen, r_rejected):
    return -F.logsigmoid(r_chosen - r_rejected)


def bt_swapped(r_chosen, r_rejected):
    return -F.logsigmoid(r_rejected - r_chosen).mean()


def bt_abs_margin(r_chosen, r_rejected):
    return -F.logsigmoid((r_chosen - r_rejected).abs()).mean()


def bt_two_sigmoids(r_chosen, r_rejected):
    return (-F.logsigmoid(r_chosen) - F.logsigmoid(-r_rejected)).mean()


def bt_item(r_chosen, r_rejected):
    return float(-F.logsigmoid(r_chosen - r_rejected).mean())


# (exercise, mistaken function, the case that catches it, words of the message, the mistake
# it carries, the hint that helps with it)
MISTAKES = [
    ("masked_sft_loss", sft_unmasked, "two badly predicted prompt positions", "off by", "no-mask", 2),
    ("masked_sft_loss", sft_mean_over_all, "only the middle position counts", "off by", "mean-over-all", 2),
    ("masked_sft_loss", sft_row_means, "not a mean of row means", "off by", "row-means", 2),
    ("masked_sft_loss", sft_log_of_softmax, "a logit of 1000", "infinite", "inf", 1),
    ("masked_sft_loss", sft_item, "uniform logits", "no .item()", "not-a-tensor", 3),
    ("masked_sft_loss", sft_per_position, "uniform logits", "one value per position", "not-averaged", 2),
    ("bradley_terry_loss", bt_log_of_sigmoid, "margin -100", "infinite", "inf", 2),
    ("bradley_terry_loss", bt_log1p_exp, "margin -100", "infinite", "inf", 2),
    ("bradley_terry_loss", bt_no_mean, "equal scores", "one value per pair", "not-averaged", 1),
    ("bradley_terry_loss", bt_swapped, "margin +2", "off by", "margin-sign", 1),
    ("bradley_terry_loss", bt_abs_margin, "margin -2", "off by", "margin-sign", 1),
    ("bradley_terry_loss", bt_two_sigmoids, "equal scores", "off by", "two-sigmoids", 1),
    ("bradley_terry_loss", bt_item, "equal scores", "no .item()", "not-a-tensor", 3),
]


@pytest.mark.parametrize("name, fn, case, message, mistake, number", MISTAKES, ids=[m[1].__name__ for m in MISTAKES])
def test_a_typical_mistake_is_caught_with_a_clear_message(name, fn, case, message, mistake, number):
    report = check(name, fn, show=False)
    assert report.state == "fail"
    caught = next(r for r in report.results if case in r.case.why)
    assert not caught.passed and message in caught.message and caught.mistake == mistake
    assert report.hint() == (number, get(name).hints[number - 1])  # the hint for this mistake
    text = str(report)
    assert "FAIL case" in text and "expected" in text and "returned" in text


@pytest.mark.parametrize("name", NAMES)
def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases(name):
    def scaled(**kwargs):  # off by a factor that no usual slip gives
        return 1.37 * get(name).reference(**kwargs)

    report = check(name, scaled, show=False)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    exercise = get(name)
    assert report.hint() == next_hint(exercise.hints, report.n_passed, len(exercise.cases))


def test_a_wrong_value_says_how_far_off_it_is():
    report = check("bradley_terry_loss", bt_swapped, show=False)
    failure = next(r for r in report.results if not r.passed and r.message.startswith("the loss is"))
    assert failure.message == (
        "the loss is 2.127, expected 0.1269 (off by 2); that is the loss with chosen and "
        "rejected swapped: the margin is r_chosen - r_rejected"
    )
    # at margin 0 the swapped loss has the right value, log 2, and the gradient of the other sign
    first = report.first_failure
    assert first.mistake == "margin-sign" and first.message.startswith(
        "the value is right, but the gradient with respect to r_chosen is not: 0.5 at [0], expected -0.5"
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_stub_is_reported_as_not_implemented(name):
    def stub(**kwargs):
        raise NotImplementedError("your code here")

    report = check(name, stub, show=False)
    assert report.state == "todo"
    assert "not implemented yet" in str(report)


# --------------------------------------------------------------------------- randomized inputs


def _random_cases(name, n=60, seed=0):
    from minirlhf.course.grader.grading import _random_cases as draw

    exercise = get(name)
    return exercise, draw(dataclasses.replace(exercise, n_random=n), seed)


def sft_by_hand(logits, targets, mask):
    logp = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    ce = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = mask.to(logits.dtype)
    return (ce * mask).sum() / mask.sum()


def bt_softplus(r_chosen, r_rejected):
    return F.softplus(r_rejected - r_chosen).mean()


@pytest.mark.parametrize(
    "name, right, wrong",
    [
        ("masked_sft_loss", sft_by_hand, sft_unmasked),
        ("masked_sft_loss", sft_by_hand, sft_row_means),
        ("bradley_terry_loss", bt_softplus, bt_log_of_sigmoid),
        ("bradley_terry_loss", bt_softplus, bt_swapped),
    ],
)
def test_randomized_inputs_pass_a_right_answer_and_catch_a_wrong_one(name, right, wrong):
    exercise, cases = _random_cases(name)
    assert len(cases) == 60
    assert run_cases(right, exercise, cases).passed
    assert not run_cases(wrong, exercise, cases).passed


def test_randomized_inputs_are_tensors_of_the_contract():
    rng = np.random.default_rng(1)
    for _ in range(50):
        kw = get("masked_sft_loss").random_kwargs(rng)
        B, T, V = kw["logits"].shape
        assert kw["targets"].shape == kw["mask"].shape == (B, T)
        assert kw["targets"].dtype == torch.long and int(kw["targets"].max()) < V
        assert kw["mask"].sum() >= 1 and set(kw["mask"].unique().tolist()) <= {0, 1}
        kw = get("bradley_terry_loss").random_kwargs(rng)
        assert kw["r_chosen"].shape == kw["r_rejected"].shape and kw["r_chosen"].dim() == 1


# --------------------------------------------------------------------------- the comparator


def test_the_scalar_comparator():
    expect = ExpectScalarTensor(per="pair")
    assert expect.problem(torch.tensor(0.5), 0.5) is None
    assert expect.problem(torch.tensor(0.5, requires_grad=True) * 1, 0.50004) is None
    assert "no .item()" in expect.problem(0.5, 0.5)
    assert "no .item()" in expect.problem(np.float32(0.5), 0.5)
    assert "shape (3,)" in expect.problem(torch.zeros(3), 0.0)
    assert "one value per pair" in expect.problem(torch.zeros(3), 0.0)
    assert "infinite" in expect.problem(torch.tensor(float("inf")), 100.0)
    assert "NaN" in expect.problem(torch.tensor(float("nan")), 1.0)
    assert "off by 0.1" in expect.problem(torch.tensor(0.6), 0.5)
    assert "the contract asks for a torch tensor" in expect.problem([0.5], 0.5)


# --------------------------------------------------------------------------- the chapters


def _solution(stem: str, name: str):
    """Return the function ``name`` as the chapter source's solution cell defines it."""
    source = next(p for p in nbgen.sources() if p.stem.startswith(stem))
    cells = nbgen.parse(source.read_text(encoding="utf-8"))
    code = next(c["source"] for c in cells if c["kind"] == "code" and f"def {name}(" in c["source"])
    namespace = {"torch": torch, "F": F, "np": np}
    exec(nbgen.drop_markers(code), namespace)
    return namespace[name]


@pytest.mark.parametrize("stem, name", [("03_", "masked_sft_loss"), ("04_", "bradley_terry_loss")])
def test_the_chapter_solution_passes_and_agrees_with_the_package(stem, name):
    solution = _solution(stem, name)
    exercise, cases = _random_cases(name, n=40, seed=3)
    assert check(name, solution, show=False).passed
    assert run_cases(solution, exercise, cases).passed
