"""Chapter 9's exercise: the cases are worked by hand, each usual slip fails one of them and gets
the hint for its mistake, and a loss written to the contract drives a DPO run."""

import math

import pytest
import torch
import torch.nn.functional as F

from minirlhf import dpo
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get

LOSS = get("dpo_loss")


def _by_hand(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    """DPO's loss in float64, one pair at a time: log(1 + e^-m), written so that it never overflows."""
    terms = []
    for pc, pr, rc, rr in zip(
        *(x.tolist() for x in (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps))
    ):
        m = beta * ((pc - rc) - (pr - rr))
        terms.append(max(-m, 0.0) + math.log1p(math.exp(-abs(m))))
    return sum(terms) / len(terms)


def test_the_reference_passes_every_case_and_they_are_worked_by_hand():
    assert 8 <= len(LOSS.cases) <= 12 and all(case.why for case in LOSS.cases)
    assert run_cases(LOSS.reference, LOSS).passed
    for i, case in enumerate(LOSS.cases, 1):
        assert case.expected == pytest.approx(_by_hand(**case.kwargs), abs=1e-6), f"case {i}: {case.why}"
    # the values written out, so that a change to a case's tensors cannot silently move them
    assert [round(c.expected, 4) for c in LOSS.cases] == [0.6931, 0.3133, 0.1269, 1.7014, 1.7014, 0.41, 200.0, 0.6533]


def test_the_cases_cover_beta_the_reference_and_a_margin_float32_cannot_take():
    kw = [c.kwargs for c in LOSS.cases]
    assert {k["beta"] for k in kw} >= {0.1, 0.5, 1.0}
    runaway = next(k for k in kw if k["policy_chosen_logps"].min() < -100)
    margin = runaway["beta"] * (
        (runaway["policy_chosen_logps"] - runaway["ref_chosen_logps"])
        - (runaway["policy_rejected_logps"] - runaway["ref_rejected_logps"])
    )
    assert torch.sigmoid(margin).item() == 0.0  # log(sigmoid(...)) is -inf there
    # a pair the policy alone ranks right and DPO, against the reference, ranks wrong
    assert any(
        (k["policy_chosen_logps"] > k["policy_rejected_logps"]).all()
        and (
            (k["policy_chosen_logps"] - k["ref_chosen_logps"]) < (k["policy_rejected_logps"] - k["ref_rejected_logps"])
        ).all()
        for k in kw
    )


def _variant(slip=None):
    """Return a dpo_loss written to the contract as a learner might, with one deliberate slip."""

    def dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta=0.1):
        r_chosen = beta * (policy_chosen_logps - ref_chosen_logps)  # the implicit rewards
        r_rejected = beta * (policy_rejected_logps - ref_rejected_logps)
        if slip == "no reference":
            r_chosen, r_rejected = beta * policy_chosen_logps, beta * policy_rejected_logps
        if slip == "references crossed":
            r_chosen = beta * (policy_chosen_logps - ref_rejected_logps)
            r_rejected = beta * (policy_rejected_logps - ref_chosen_logps)
        if slip == "one term flipped":
            r_rejected = beta * (ref_rejected_logps - policy_rejected_logps)
        if slip == "beta outside":
            return -beta * F.logsigmoid((r_chosen - r_rejected) / beta).mean()
        if slip == "no beta":
            r_chosen, r_rejected = r_chosen / beta, r_rejected / beta
        margin = r_rejected - r_chosen if slip == "swapped" else r_chosen - r_rejected
        if slip == "log of sigmoid":
            return -torch.log(torch.sigmoid(margin)).mean()
        if slip == "objective":
            return F.logsigmoid(margin).mean()
        if slip == "item":
            return -F.logsigmoid(margin).mean().item()
        if slip == "per pair":
            return -F.logsigmoid(margin)
        if slip == "sum":
            return -F.logsigmoid(margin).sum()
        return -F.logsigmoid(margin).mean()

    return dpo_loss


# The hint each slip gets: 1 the log-ratios, 2 the margin and Bradley-Terry, 3 log space, 4 the line.
HINTS = [
    ("no reference", "reference", 1),
    ("references crossed", "reference", 1),
    ("one term flipped", "one-term", 1),
    ("swapped", "margin-sign", 2),
    ("beta outside", "beta", 2),
    ("no beta", "beta", 2),
    ("sum", "sum", 2),
    ("per pair", "not-averaged", 2),
    ("objective", "sign", 2),
    ("log of sigmoid", "inf", 3),
    ("item", "not-a-tensor", 4),
]


def test_the_loss_without_a_slip_passes():
    assert run_cases(_variant(), LOSS).passed


@pytest.mark.parametrize("slip, mistake, number", HINTS, ids=[row[0] for row in HINTS])
def test_every_slip_fails_and_gets_the_hint_for_its_mistake(slip, mistake, number):
    report = run_cases(_variant(slip), LOSS)
    assert not report.passed, f"no case catches the slip {slip!r}"
    assert report.mistake == mistake
    assert report.hint() == (number, LOSS.hints[number - 1])


@pytest.mark.parametrize(
    "slip, words",
    [
        ("no reference", "leaves the reference out"),
        ("references crossed", "the other answer"),
        ("one term flipped", "upside down"),
        ("swapped", "chosen and rejected swapped"),
        ("beta outside", "beta goes inside"),
        ("sum", "take the mean"),
        ("log of sigmoid", "logsigmoid"),
        ("objective", "wrong sign"),
        ("item", "torch tensor"),
        ("per pair", "one value per pair"),
    ],
)
def test_the_report_names_the_slip(slip, words):
    report = run_cases(_variant(slip), LOSS)
    assert any(words in r.message for r in report.results if not r.passed), str(report)


def test_the_package_loss_is_bradley_terry_on_the_implicit_rewards():
    from minirlhf.reward_model import bradley_terry_loss

    g = torch.Generator().manual_seed(3)
    pc, pr, rc, rr = (-torch.rand(16, generator=g) * 10 for _ in range(4))
    for beta in (0.1, 1.25):
        want = bradley_terry_loss(dpo.implicit_rewards(pc, rc, beta), dpo.implicit_rewards(pr, rr, beta))
        assert dpo.dpo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(want.item(), rel=1e-6)
