"""Chapter 2's REINFORCE exercise: the cases are worked by hand, each usual slip fails one of
them, the random inputs are valid, and the chapter's bandit loop improves the policy with the
reference loss (and not with a loss of the wrong sign)."""

import ast

import numpy as np
import pytest
import torch

from minirlhf import pg
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import get
from minirlhf.course.nbgen import SOURCES, drop_markers, parse
from minirlhf.course.report import next_hint

EX = get("reinforce_loss")


def test_the_reference_reproduces_every_case_worked_by_hand():
    assert 8 <= len(EX.cases) <= 10 and all(case.why for case in EX.cases)
    for i, case in enumerate(EX.cases, 1):
        got = EX.reference(**case.kwargs)
        assert EX.expect.problem(got, case.expected) is None, f"case {i}: {case.why}"


def test_a_few_cases_by_their_numbers():
    assert [c.expected for c in EX.cases][:3] == [0.5, -0.25, 1.0]
    assert EX.cases[5].expected == pytest.approx(-(-0.05 + 1.15 - 0.35 + 0.6) / 4)


def test_the_reference_is_a_loss_with_the_policy_gradient():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = pg.reinforce_loss(logp, torch.tensor([1.0, 0.0]), 0.5)
    assert loss.shape == () and loss.requires_grad
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([-0.25, 0.25]))  # -(R - b) / N


def _variant(slip):
    """Return reinforce_loss with one deliberate slip."""

    def loss(logp, rewards, baseline):
        if slip == "rewards detached":  # harmless: the rewards carry no gradient anyway
            rewards = rewards.detach()
        weight = {"baseline ignored": rewards, "baseline added": rewards + baseline}.get(slip, rewards - baseline)
        if slip == "logp detached":
            logp = logp.detach()
        terms = weight * logp
        out = terms.sum() if slip == "sum" else terms.mean()
        if slip != "no minus":
            out = -out
        if slip == "item":
            return out.item()
        if slip == "per sample":
            return -terms
        return out

    return loss


SLIPS = ["no minus", "baseline ignored", "baseline added", "sum", "item", "per sample", "logp detached"]


@pytest.mark.parametrize("slip", [None, "rewards detached"])
def test_the_loss_without_a_slip_passes(slip):
    assert run_cases(_variant(slip), EX).passed


@pytest.mark.parametrize("slip", SLIPS)
def test_every_usual_slip_fails_a_case(slip):
    assert not run_cases(_variant(slip), EX).passed, f"no case catches the slip {slip!r}"


def test_the_checker_names_the_slips_in_words():
    case = EX.cases[0]
    assert "wrong sign" in EX.expect.problem(_variant("no minus")(**case.kwargs), case.expected)
    assert "no .item()" in EX.expect.problem(_variant("item")(**case.kwargs), case.expected)
    assert "no gradient" in EX.expect.problem(_variant("logp detached")(**case.kwargs), case.expected)


def test_the_random_kwargs_are_valid():
    rng = np.random.default_rng(0)
    for _ in range(200):
        kwargs = EX.random_kwargs(rng)
        logp, rewards, baseline = kwargs["logp"], kwargs["rewards"], kwargs["baseline"]
        assert logp.ndim == 1 and logp.shape == rewards.shape and len(logp) >= 1
        assert logp.requires_grad and not rewards.requires_grad and bool((logp < 0).all())
        assert type(baseline) is float and np.isfinite(baseline)
        got = EX.reference(**kwargs)
        assert EX.expect.problem(got, got) is None


def _chapter_bandit():
    """Run the chapter's bandit cell and its ``train_bandit``; return the namespace."""
    path = next(SOURCES.glob("02_*.py"))
    codes = [
        drop_markers(c["source"]) for c in parse(path.read_text(encoding="utf-8"), path.name) if c["kind"] == "code"
    ]
    namespace = {}
    exec(compile("import torch", "<imports>", "exec"), namespace)
    bandit = next(code for code in codes if code.lstrip().startswith("R = torch.tensor"))
    exec(compile(bandit, "<bandit cell>", "exec"), namespace)
    for code in codes:
        for node in ast.parse(code).body:
            if isinstance(node, ast.FunctionDef) and node.name == "train_bandit":
                exec(compile(ast.get_source_segment(code, node), "<train_bandit>", "exec"), namespace)
    assert "train_bandit" in namespace, "chapter 2 defines no train_bandit"
    return namespace


def test_the_chapters_loop_improves_the_policy_with_the_loss():
    ns = _chapter_bandit()
    _, curve = ns["train_bandit"](pg.reinforce_loss)
    assert curve[-1] > curve[0] + 0.5 and curve[-1] > 0.9
    _, wrong = ns["train_bandit"](_variant("no minus"))
    assert wrong[-1] < wrong[0]


# The hint each slip gets: the one about its own mistake, not one picked by the share of
# passing cases (1 the weights, 2 the mean, 3 the minus and the tensor with its gradient).
HINT_FOR_SLIP = [
    ("no minus", "sign", 3),
    ("baseline ignored", "no-baseline", 1),
    ("baseline added", "baseline-added", 1),
    ("sum", "sum", 2),
    ("item", "not-a-tensor", 3),
    ("per sample", "not-averaged", 2),
    ("logp detached", "no-grad", 3),
]


@pytest.mark.parametrize("slip, mistake, number", HINT_FOR_SLIP, ids=[row[0] for row in HINT_FOR_SLIP])
def test_every_slip_gets_the_hint_for_its_mistake(slip, mistake, number):
    report = run_cases(_variant(slip), EX)
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, EX.hints[number - 1])
    assert sorted(SLIPS) == sorted(row[0] for row in HINT_FOR_SLIP)


def test_a_slip_the_checker_does_not_know_falls_back_to_the_share_of_passing_cases():
    def scaled(logp, rewards, baseline):  # a loss off by a factor no slip explains
        return -1.37 * ((rewards - baseline) * logp).mean()

    report = run_cases(scaled, EX)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    assert report.hint() == next_hint(EX.hints, report.n_passed, len(EX.cases))
