"""Chapter 8's exercises: the cases are worked by hand, each usual slip fails one of them and
gets the hint for its mistake, a case that expects a ValueError is judged the same in the
check cell and in the grader, and functions written to the contracts drive a GRPO run."""

import dataclasses
import math
import re
import statistics

import nbformat
import numpy as np
import pytest
import torch

import minirlhf.estimators.group as group_estimator
import minirlhf.estimators.group_centred as centred_estimator
import minirlhf.evaluation as evaluation
import minirlhf.leashes.loss as loss_leash
import minirlhf.leashes.reward as reward_leash
from minirlhf import ppo
from minirlhf.course import grader
from minirlhf.course.cases import Raises, run_cases
from minirlhf.course.exercises import get
from minirlhf.course.report import next_hint
from minirlhf.model import GPTConfig, TinyGPT

# the slip that skips the checks takes a sample std of groups of one
pytestmark = pytest.mark.filterwarnings(r"ignore:var\(\).*degrees of freedom:UserWarning")

ADV = get("group_advantages")
LOSS = get("grpo_token_loss")


# ----------------------------------------------------------------------------- by hand


def _adv_by_hand(rewards, group_size, eps):
    """GRPO's advantages in float64 from the formula of the contract (statistics.stdev is the
    sample std), 0 for a group of equal rewards."""
    out = []
    for i in range(0, len(rewards), group_size):
        group = rewards[i : i + group_size]
        if len(set(group)) == 1:
            out += [0.0] * group_size
            continue
        mean, std = statistics.mean(group), statistics.stdev(group)
        out += [(r - mean) / (std + eps) for r in group]
    return out


def _loss_by_hand(new_logp, old_logp, ref_logp, advantages, mask, epsilon, beta, kl_clamp):
    """GRPO's loss in float64, one token at a time."""
    surrogate = k3 = kept = 0.0
    inputs = (new_logp, old_logp, ref_logp, advantages, mask)
    for row in zip(*(np.asarray(x, dtype=float).tolist() for x in inputs)):
        for n, o, r, a, m in zip(*row):
            if not m:
                continue
            ratio = math.exp(n - o)
            surrogate += min(ratio * a, min(max(ratio, 1 - epsilon), 1 + epsilon) * a)
            d = min(max(r - n, -kl_clamp), kl_clamp)
            k3 += math.exp(d) - d - 1
            kept += 1
    return -surrogate / kept + beta * k3 / kept


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_the_reference_passes_every_case_and_about_ten_are_worked(ex):
    assert 8 <= len(ex.cases) <= 12 and all(case.why for case in ex.cases)
    report = run_cases(ex.reference, ex)
    assert report.passed, str(report)
    for i, case in enumerate(ex.cases, 1):
        if not isinstance(case.expected, Raises):
            got = ex.reference(**case.kwargs)
            assert ex.expect.problem(got, case.expected) is None, f"case {i}: {case.why}"


def test_the_advantage_cases_agree_with_the_formula_by_hand():
    for i, case in enumerate(ADV.cases, 1):
        if isinstance(case.expected, Raises):
            continue
        kw = case.kwargs
        want = _adv_by_hand(kw["rewards"].tolist(), kw["group_size"], kw["eps"])
        assert case.expected.tolist() == pytest.approx(want, abs=1e-5), f"case {i}: {case.why}"


def test_the_loss_cases_agree_with_the_formula_by_hand():
    for i, case in enumerate(LOSS.cases, 1):
        assert case.expected == pytest.approx(_loss_by_hand(**case.kwargs), abs=1e-6), f"case {i}: {case.why}"


def test_a_few_cases_by_their_numbers():
    # The values written out, so that a change to a case's tensors cannot silently move them.
    assert ADV.cases[0].expected.tolist() == pytest.approx([1.4997, -0.4999, -0.4999, -0.4999], abs=1e-4)
    assert ADV.cases[5].expected.tolist()[-1] == pytest.approx(-2.4742, abs=1e-4)
    assert ADV.cases[6].expected.tolist() == pytest.approx([-0.4142, 0.4142], abs=1e-4)
    assert [round(c.expected, 4) for c in LOSS.cases] == [
        -0.25,
        0.321,
        0.36,
        -0.4816,
        -0.1171,
        -0.125,
        -1.2,
        -1.1,
        0.3591,
        0.3165,
    ]


def test_the_cases_cover_what_the_brief_asks():
    raising = [c for c in ADV.cases if isinstance(c.expected, Raises)]
    assert [c.kwargs["group_size"] for c in raising] == [1, 2]  # too small; does not divide 5
    assert all(c.expected == Raises(ValueError, "group_size") for c in raising)
    assert ADV.cases[-1] is raising[-1] and ADV.cases[-2] is raising[0]  # last, after every value case
    # the float rounding of an equal group: a plain (r - mean) / (std + eps) is not 0 there
    r = ADV.cases[7].kwargs["rewards"]
    assert len(set(r.tolist())) == 1 and ((r - r.mean()) / (r.std() + 1e-4)).abs().max() > 5e-4
    kw = [c.kwargs for c in LOSS.cases]
    assert any(k["beta"] == 0.0 for k in kw) and any(k["epsilon"] != 0.2 for k in kw)
    assert any(k["kl_clamp"] != 10.0 for k in kw)
    assert any(len(set(k["mask"].sum(1).tolist())) > 1 for k in kw)  # rows of different lengths
    assert any((k["advantages"] == 0).all() and k["beta"] > 0 for k in kw)  # only k3 counts


def test_beta_zero_is_chapter_5s_loss():
    case = next(c for c in LOSS.cases if c.kwargs["beta"] == 0.0)
    kw = {k: case.kwargs[k] for k in ("new_logp", "old_logp", "advantages", "mask", "epsilon")}
    assert float(reward_leash.ppo_token_loss(**kw)) == pytest.approx(case.expected, abs=1e-6)


# ----------------------------------------------------------------------------- 8.1 learners' versions


def _adv_variant(slip=None):
    """Return a group_advantages written to the contract, with one deliberate slip."""

    def group_advantages(rewards, group_size, eps=1e-4):
        if slip != "no check" and (group_size < 2 or len(rewards) % group_size):
            if slip == "TypeError":
                raise TypeError("bad group size")
            raise ValueError("no" if slip == "silent message" else f"group_size {group_size} does not fit")
        n_groups = len(rewards) // group_size
        if slip == "interleaved":
            groups = torch.stack([rewards[k::n_groups] for k in range(n_groups)])
        else:
            groups = torch.stack([rewards[k * group_size : (k + 1) * group_size] for k in range(n_groups)])
        mean = groups.sum(1, keepdim=True) / group_size
        std = groups.var(1, correction=0 if slip == "ddof 0" else 1, keepdim=True).sqrt()
        if slip == "batch":
            mean, std = rewards.mean(), rewards.std()
        if slip == "leave one out":
            mean = (groups.sum(1, keepdim=True) - groups) / (group_size - 1)
        adv = {"no std": groups - mean, "eps outside": (groups - mean) / std + eps, "nan": (groups - mean) / std}.get(
            slip, (groups - mean) / (std + eps)
        )
        if slip not in ("nan", "no special case"):
            equal = groups.max(1, keepdim=True).values == groups.min(1, keepdim=True).values
            adv = adv.masked_fill(equal, 0.0)
        if slip == "interleaved":
            adv = adv.T
        if slip == "grouped shape":
            return adv
        if slip == "a float":
            return float(adv.sum())
        return adv.flatten()

    return group_advantages


# The hint each slip gets: 1 the checks and the groups, 2 the baseline, 3 the scale, 4 equal
# rewards and the shape.
ADV_HINTS = [
    ("ddof 0", "population-std", 3),
    ("no std", "no-std", 3),
    ("batch", "batch-stats", 2),
    ("interleaved", "wrong-groups", 1),
    ("leave one out", "rloo", 2),
    ("no special case", "all-equal", 4),
    ("nan", "all-equal", 4),
    ("eps outside", "eps-outside", 3),
    ("grouped shape", "shape", 4),
    ("no check", "no-raise", 1),
    ("TypeError", "wrong-error", 1),
    ("silent message", "error-message", 1),
]


def test_the_advantages_without_a_slip_pass():
    assert run_cases(_adv_variant(), ADV).passed


@pytest.mark.parametrize("slip, mistake, number", ADV_HINTS, ids=[row[0] for row in ADV_HINTS])
def test_every_advantage_slip_fails_and_gets_the_hint_for_its_mistake(slip, mistake, number):
    report = run_cases(_adv_variant(slip), ADV)
    assert not report.passed, f"no case catches the slip {slip!r}"
    assert report.mistake == mistake  # the mistake of the first failure that has a hint
    assert report.hint() == (number, ADV.hints[number - 1])


@pytest.mark.parametrize(
    "slip, words",
    [
        ("ddof 0", "population std"),
        ("no std", "Dr. GRPO"),
        ("interleaved", "side by side"),
        ("leave one out", "leave-one-out"),
        ("no special case", "exactly 0"),
        ("eps outside", "eps goes inside"),
        ("nan", "NaN"),
        ("grouped shape", "one row per group"),
        ("a float", "torch tensor"),
        ("no check", "asks for a ValueError whose message names group_size"),
        ("TypeError", "raised TypeError (bad group size), but on this input the contract asks for a ValueError"),
        ("silent message", "does not name group_size"),
    ],
)
def test_the_advantage_report_names_the_slip(slip, words):
    report = run_cases(_adv_variant(slip), ADV)
    assert any(words in r.message for r in report.results if not r.passed), str(report)


def test_the_dr_grpo_slip_says_it_is_a_real_variant_but_not_grpos():
    message = next(
        r.message for r in run_cases(centred_estimator.group_centred_advantages, ADV).results if not r.passed
    )
    assert "a real variant" in message and "not GRPO's" in message


def test_the_raise_cases_pass_for_the_reference_and_fail_clearly_otherwise():
    raising = [i for i, c in enumerate(ADV.cases) if isinstance(c.expected, Raises)]
    right = run_cases(ADV.reference, ADV)
    assert all(right.results[i].passed and right.results[i].kind == "error" for i in raising)
    returns = run_cases(_adv_variant("no check"), ADV)
    text = str(returns)
    assert all(returns.results[i].mistake == "no-raise" for i in raising)
    assert "expected  raises ValueError naming group_size" in text and "returned" in text
    other = run_cases(_adv_variant("TypeError"), ADV)
    assert [other.results[i].mistake for i in raising] == ["wrong-error"] * 2
    assert sum(r.passed for r in other.results) == len(ADV.cases) - 2


def test_a_function_that_raises_on_every_input_is_named_with_its_line():
    def group_advantages(rewards, group_size, eps=1e-4):
        return rewards.view(-1, group_size).std(dim=2)

    report = run_cases(group_advantages, ADV)
    first = report.first_failure
    assert first.mistake == "error" and first.message.startswith("raised IndexError")
    assert re.search(
        r"\(in group_advantages, line \d+: return rewards.view\(-1, group_size\).std\(dim=2\)\)$", first.message
    )
    # the raise cases: an IndexError from the reshape is not the ValueError the contract asks for
    assert report.results[-1].mistake == "wrong-error"


def test_random_advantage_inputs_are_fair_and_often_hold_equal_groups():
    rng = np.random.default_rng(8)
    sizes, equal, verifier = set(), 0, 0
    for _ in range(300):
        kw = ADV.random_kwargs(rng)
        r, G = kw["rewards"], kw["group_size"]
        assert r.dtype == torch.float32 and r.dim() == 1 and len(r) % G == 0
        assert torch.equal(r * 8, (r * 8).round())  # on a grid of 1/8, so equal means equal
        adv = group_estimator.group_advantages(**kw)
        assert torch.isfinite(adv).all()
        assert adv.tolist() == pytest.approx(_adv_by_hand(r.tolist(), G, kw["eps"]), abs=1e-4)
        sizes.add(G)
        groups = r.view(-1, G)
        equal += bool((groups == groups[:, :1]).all(1).any())
        verifier += set(r.tolist()) <= {0.0, 1.0}
    assert sizes == set(range(2, 9))
    assert equal > 100 and verifier > 100


# ----------------------------------------------------------------------------- 8.2 learners' versions


def _loss_variant(slip=None):
    """Return a GRPO loss with the contract's signature and one deliberate slip."""

    def grpo_token_loss(new_logp, old_logp, ref_logp, advantages, mask, epsilon=0.2, beta=0.04, kl_clamp=10.0):
        ratio = torch.exp(new_logp - old_logp)
        surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
        if slip == "max":
            surrogate = torch.maximum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)
        if slip == "no clip":
            surrogate = ratio * advantages
        d = (new_logp - ref_logp) if slip in ("k3 sign", "k1") else (ref_logp - new_logp)
        if slip != "no clamp":
            d = d.clamp(-kl_clamp, kl_clamp)
        kl = torch.exp(d) - d - 1
        if slip == "k1":
            kl = d
        if slip == "k2":
            kl = 0.5 * d**2
        n = mask.sum()
        if slip == "per completion":
            return ((-surrogate + beta * kl) * mask).sum(1).div(mask.sum(1)).mean()
        policy = -(surrogate * mask).sum() / n
        leash = (kl * mask).sum() / n
        if slip == "kl unmasked":
            leash = kl.mean()
        if slip == "kl over B*T":
            leash = (kl * mask).mean()
        if slip == "beta ignored":
            beta = 0.04
        out = policy - beta * leash if slip == "kl subtracted" else policy + beta * leash
        if slip == "sign":
            return -out
        if slip == "item":
            return out.item()
        if slip == "per token":
            return -(surrogate * mask) + beta * kl * mask
        if slip == "nan":
            return out * torch.tensor(float("nan"))
        return out

    return grpo_token_loss


# The hint each slip gets: 1 the surrogate and its mean, 2 the k3 term, 3 its masked mean,
# 4 the sum, beta and the tensor.
LOSS_HINTS = [
    ("k3 sign", "k3-sign", 2),
    ("k1", "k1", 2),
    ("k2", "k2", 2),
    ("kl subtracted", "kl-sign", 4),
    ("kl unmasked", "kl-mask", 3),
    ("kl over B*T", "kl-mask", 3),
    ("no clamp", "no-clamp", 2),
    ("per completion", "sequence-mean", 1),
    ("max", "min-clip", 1),
    ("no clip", "min-clip", 1),
    ("beta ignored", "no-beta", 4),
    ("sign", "sign", 4),
    ("item", "not-a-tensor", 4),
    ("per token", "not-averaged", 3),
    ("nan", "nan", 3),
]


def test_the_loss_without_a_slip_passes():
    assert run_cases(_loss_variant(), LOSS).passed


@pytest.mark.parametrize("slip, mistake, number", LOSS_HINTS, ids=[row[0] for row in LOSS_HINTS])
def test_every_loss_slip_fails_and_gets_the_hint_for_its_mistake(slip, mistake, number):
    report = run_cases(_loss_variant(slip), LOSS)
    assert not report.passed, f"no case catches the slip {slip!r}"
    assert report.mistake == mistake
    assert report.hint() == (number, LOSS.hints[number - 1])


@pytest.mark.parametrize(
    "slip, words",
    [
        ("k3 sign", "d = ref_logp - new_logp"),
        ("k1", "(k1)"),
        ("k2", "k2 = d^2 / 2"),
        ("kl subtracted", "the loss adds it"),
        ("kl over B*T", "divides by B * T"),
        ("no clamp", "clamp"),
        ("per completion", 'loss_type="dapo"'),
        ("max", "take the minimum"),
        ("beta ignored", "beta = 0.04"),
        ("sign", "wrong sign"),
        ("item", "torch tensor"),
        ("per token", "averaged"),
        ("nan", "NaN"),
    ],
)
def test_the_loss_report_names_the_slip(slip, words):
    report = run_cases(_loss_variant(slip), LOSS)
    assert any(words in r.message for r in report.results if not r.passed), str(report)


def test_not_written_yet_reads_as_todo():
    def grpo_token_loss(**kwargs):
        raise NotImplementedError("your code here")

    def group_advantages(**kwargs):
        raise NotImplementedError("your code here")

    assert run_cases(grpo_token_loss, LOSS).state == "todo"
    assert run_cases(group_advantages, ADV).state == "todo"  # the raise cases too: not a wrong raise


def test_random_loss_inputs_are_fair_and_exercise_the_clamp():
    rng = np.random.default_rng(8)
    clamped = grouped = 0
    for _ in range(300):
        kw = LOSS.random_kwargs(rng)
        B, T = kw["mask"].shape
        for name in ("new_logp", "old_logp", "ref_logp", "advantages"):
            assert kw[name].shape == (B, T)
        assert (kw["mask"].sum(1) >= 1).all() and (kw["advantages"][kw["mask"] == 0] == 0).all()
        got = loss_leash.grpo_token_loss(**kw)
        assert torch.isfinite(got) and float(got) == pytest.approx(_loss_by_hand(**kw), abs=1e-4)
        kept = kw["mask"].bool()
        clamped += bool(((kw["ref_logp"] - kw["new_logp"]).abs()[kept] > kw["kl_clamp"]).any())
        grouped += all(len(set(row[m].tolist())) == 1 for row, m in zip(kw["advantages"], kept))
    assert clamped > 50 and grouped > 100


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_hints_go_from_a_nudge_to_nearly_the_answer(ex):
    assert len(ex.hints) == 4
    assert ("reshape(-1)" if ex is ADV else ".item()") in ex.hints[-1]


@pytest.mark.parametrize("ex", [ADV, LOSS], ids=lambda e: e.name)
def test_a_mistake_no_slip_explains_falls_back_to_the_share_of_passing_cases(ex):
    def scaled(**kwargs):
        return 1.37 * ex.reference(**kwargs)

    report = run_cases(scaled, ex)
    assert {r.mistake for r in report.results if not r.passed} == {"value"}
    assert report.hint() == next_hint(ex.hints, report.n_passed, len(ex.cases))


# ----------------------------------------------------------------------------- in a GRPO run and in the grader


def test_functions_written_to_the_contracts_drive_a_grpo_run():
    """ppo_train with GRPO's settings and separately written functions gives the reference's run."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = TinyGPT(GPTConfig())
    cfg = ppo.PPOConfig(iterations=2, batch_size=16, group_size=4, advantages="group", kl_placement="loss", seed=3)
    evalset = evaluation.EvalSet(ppo.task.eval_pairs()[:32])

    def first_digit_reward(pairs, prompts, completions):  # an untrained policy never adds right
        return completions[:, 0].float()

    def run(**fns):
        return ppo.ppo_train(policy, policy, first_digit_reward, 0.1, cfg, evalset=evalset, progress=False, **fns)[1]

    ours = run(advantage_fn=_adv_variant(), loss_fn=_loss_variant())
    theirs = run()
    for key in ("kl", "policy/clipfrac_avg", "loss/policy_avg"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-5)
    assert run(advantage_fn=_adv_variant("no std"))["loss/policy_avg"] != theirs["loss/policy_avg"]


def test_the_grader_judges_the_raise_cases_from_the_learners_kernel(tmp_path):
    path = tmp_path / "grpo.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import torch\n\n"
            "def group_advantages(rewards, group_size, eps=1e-4):\n"
            "    if group_size < 2 or len(rewards) % group_size:\n"
            "        raise ValueError(f'group_size {group_size} does not fit {len(rewards)} rewards')\n"
            "    g = rewards.view(-1, group_size)\n"
            "    adv = (g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + eps)\n"
            "    same = (g == g[:, :1]).all(1, keepdim=True)\n"
            "    return torch.where(same, torch.zeros_like(adv), adv).reshape(-1)\n\n"
            "def never_raises(rewards, group_size, eps=1e-4):\n"
            "    try:\n"
            "        return group_advantages(rewards, group_size, eps)\n"
            "    except ValueError:\n"
            "        return torch.zeros_like(rewards)\n\n"
            "def type_error(rewards, group_size, eps=1e-4):\n"
            "    if group_size < 2 or len(rewards) % group_size:\n"
            "        raise TypeError('group_size')\n"
            "    return group_advantages(rewards, group_size, eps)\n"
        )
    ]
    nbformat.write(nb, str(path))
    few = dict(n_random=5)
    exercises = [
        dataclasses.replace(ADV, **few),
        dataclasses.replace(ADV, **few, name="never_raises"),
        dataclasses.replace(ADV, **few, name="type_error"),
    ]
    result = grader.grade_notebook(path, seed=1, time_limit=5.0, exercises=exercises)
    assert not result.error, result.error
    right, returns, wrong_type = result.exercises
    assert right.passed and len(right.results) == len(ADV.cases) + 5
    n = len(ADV.cases)
    assert [r.mistake for r in returns.results[n - 2 : n]] == ["no-raise"] * 2
    assert "asks for a ValueError whose message names group_size" in returns.results[n - 1].message
    assert [r.mistake for r in wrong_type.results[n - 2 : n]] == ["wrong-error"] * 2
    assert "raised TypeError (group_size)" in wrong_type.results[n - 1].message
