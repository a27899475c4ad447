"""Chapter 10 exercises: for each planted bug, name the metric that gives it away, then fix it.

A "name the tell" exercise is a function that returns ``(metric, reason)``: a metric of the
bug's dashboard that separates the buggy run from the correct one, and one sentence saying
why (:class:`~minirlhf.course.cases.ExpectTell`). A "fix it" exercise is the engine function
the bug broke, written again from the buggy copy; the engine's own function is the reference,
and the bug is one of the named slips. :func:`band_report` then plants the fix in the run.
"""

import copy
import dataclasses

import numpy as np
import torch

from ..cases import Case, Exercise, ExpectArray, ExpectTell, Slip, Tell, run_cases
from ...model import completion_mask
from ...ppo import k3_loss_term, logprobs_from_logits
from ...studies import silent_bugs as sb
from ...task import encode
from . import ch08, ch09
from .ch02 import ExpectLoss

# ----------------------------------------------------------------------------- name the tell

# Per bug: the reference's answer, groups of word stems one of which the reason must hold
# (see Tell), and the hints, from the panel to the answer.
TELLS = {
    "kl-no-grad": (
        "the KL term reaches the loss but not the gradient, so nothing pulls the policy back and "
        "the KL to the reference keeps growing",
        (("gradient",), ("detach",), ("no_grad",), ("leash", "nothing"), ("leash", "not"), ("pull",)),
        ("Accuracy and the reward look like a healthy run's. Look at the two KL panels: is the policy "
         "kept as close to the reference as in the correct run?",
         "The evaluation's `kl` drifts above the correct run's (by less than three seeds' spread): the leash "
         "is there in the loss, but it does not hold. What must a loss term have, to move the weights?",
         "Answer `kl`, with a reason that says the leash carries no gradient, so nothing pulls the policy back.")),
    "k1-loss": (
        "the leash term's expected gradient is zero, so it pulls nowhere and the KL to the reference "
        "grows as if there were no leash",
        (("gradient",), ("zero",), ("nothing",), ("nowhere",), ("leash", "not")),
        ("Accuracy is close to the correct run's. Which panel says how far the policy went from the "
         "reference, measured exactly rather than on the sampled tokens?",
         "The evaluation's `kl` ends above the band, while `objective/kl` is too noisy to tell over three "
         "seeds. A leash that does not hold: what does its gradient do on average?",
         "Answer `kl`, with a reason that says the leash term's gradient is zero on average, so it does not pull.")),
    "no-mask": (
        "every one of the 4 tokens is counted, also those after the end mark, so the completion "
        "length is always 4",
        (("mask",), ("every", "token"), ("all", "token"), ("after", "end"), ("always", "4")),
        ("The accuracy panel hides it. Which panel is exactly flat?",
         "`val/completion_length` sits at exactly 4.0 from the first batch: the mask's sum is the length. "
         "What must the mask be, for every completion to count 4 tokens?",
         "Answer `val/completion_length`, with a reason that says the mask counts every token, also after "
         "the end mark.")),
    "pad-is-end": (
        "the end mark is masked out as if it were padding, so each answer counts one token less",
        (("end", "mark"), ("pad",), ("mask", "end"), ("one", "less"), (";",), ("shorter",)),
        ("The accuracy panel hides it again. Compare the completion length with the correct run's.",
         "`val/completion_length` is exactly one token shorter than the correct run's from the first "
         "batch. Which token of every answer is no longer counted?",
         "Answer `val/completion_length`, with a reason that says the end mark is masked out like padding.")),
    "ratio-to-reference": (
        "the clip compares the policy with the reference, so once a token has moved 20% from it "
        "its gradient stops and the policy stays near the reference",
        (("clip",), ("ratio",), ("reference",), ("stop",), ("stall",)),
        ("Accuracy follows the correct run's. Which panel stays low, and leaves the band late in the run?",
         "The evaluation's `kl` flattens low early: something stops the policy moving away from where it "
         "started. Which part of PPO's loss stops updates?",
         "Answer `kl` (or `accuracy`), with a reason that says the clipped ratio is taken against the "
         "reference, so the clip stops every token that has moved from the start.")),
    "no-temperature": (
        "the log-probs are taken at temperature 1 while the answers are sampled at 0.7, so the "
        "logged KL is computed on the wrong distribution",
        (("temperature",), ("0.7",), ("sampl", "distribution")),
        ("The accuracy panel hides it; compare the two KL panels over the whole run.",
         "`objective/kl` is below the correct run's over the run, while the exact `kl` of the evaluation is "
         "not: the logged KL is computed from other log-probs than the sampler's. Which setting of the "
         "sampler could they leave out?",
         "Answer `objective/kl`, with a reason that says the log-probs leave out the sampling temperature.")),
    "dpo-rejected-flipped": (
        "the rejected answer's log-ratio has the wrong sign, so the loss also rewards raising the "
        "rejected answer, and its log-prob goes up",
        (("rejected", "rais"), ("rejected", "up"), ("rejected", "ris"), ("rejected", "higher"),
         ("rejected", "sign"), ("rejected", "flip")),
        ("Accuracy alone does not say what went wrong. Look at DPO's own logs: which of them is the wrong "
         "way up?",
         "`rewards/accuracies` falls to near 0 and `logps/rejected` rises: the policy now makes the "
         "rejected answers more likely, not less. What in the loss could ask for that?",
         "Answer `logps/rejected` (or `rewards/accuracies`), with a reason that says the rejected answer's "
         "log-ratio has the wrong sign, so the loss raises it.")),
}


def tell_name(bug: str) -> str:
    """The exercise name (and the learner's function name) of a bug's "name the tell"."""
    return "tell_" + bug.replace("-", "_")


def fix_name(bug: str) -> str:
    """The exercise name of a bug's "fix it"."""
    return "fix_" + bug.replace("-", "_")


def _no_inputs(rng) -> dict:
    # A tell takes no input. The grader tries no random inputs (n_random=0): another accepted
    # metric is as right as the reference's. The drift test compares the chapter's answer
    # with the reference's, metric for metric.
    return {}


def _tell_exercise(bug: str) -> Exercise:
    b = sb.BUGS[bug]
    reason, groups, hints = TELLS[bug]
    shown = sb.DASHBOARD[sb._trainer(b.arm)]

    def reference():
        return b.tells[0], reason

    reference.__name__ = tell_name(bug)
    return Exercise(
        name=tell_name(bug), chapter=10, title=f"Name the tell: {b.title}", expect=ExpectTell(),
        cases=(Case({}, Tell(tuple(b.tells), groups, tuple(shown)),
                    f"the dashboard of the run with the bug, beside the correct run ({b.arm} arm, seeds 0-2)"),),
        hints=hints, reference=reference, random_kwargs=_no_inputs, n_random=0,
        hint_for={"unknown-metric": 1, "wrong-metric": 2, "no-reason": 3, "not-one-sentence": 3, "reason": 3})


# ----------------------------------------------------------------------------- fix it


def _lp(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def _k3_cases() -> tuple:
    rows = (
        ([-1.0, -2.0], [-1.0, -2.0], [1.0, 1.0], "the policy is the reference: every log-ratio 0, the leash 0"),
        ([-1.0, -2.0], [-1.5, -1.0], [1.0, 1.0],
         "d = ref - new = -0.5 and +1: k3 = e^d - d - 1 = 0.1065 and 0.7183, mean 0.4124"),
        ([-1.0, -2.0], [-1.5, -1.0], [1.0, 0.0], "the second token masked out: 0.1065"),
        ([-20.0, -1.0], [-1.0, -1.0], [1.0, 1.0], "d = +19 is clamped to 10: (e^10 - 11 + 0) / 2 = 11007.7"),
        ([[-0.2, -3.0, -1.0], [-2.0, -0.1, -4.0]], [[-0.5, -2.0, -1.0], [-1.0, -0.4, -6.0]],
         [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], "two answers, one shorter: the mean over the five kept tokens"),
    )
    cases = []
    for new, ref, mask, why in rows:
        kwargs = {"new_logp": _lp(new), "ref_logp": torch.tensor(ref), "mask": torch.tensor(mask), "kl_clamp": 10.0}
        cases.append(Case(kwargs, float(k3_loss_term(**{k: (v.detach() if hasattr(v, "detach") else v)
                                                         for k, v in kwargs.items()})), why))
    return tuple(cases)


def _k3_random_kwargs(rng) -> dict:
    B, T = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    ref = rng.uniform(-8.0, -0.05, (B, T))
    new = np.minimum(ref + rng.normal(0.0, float(rng.choice([0.1, 1.0, 15.0])), (B, T)), -1e-3)
    mask = (rng.random((B, T)) < 0.8).astype(float)
    mask[:, 0] = 1.0  # every answer keeps its first token
    return {"new_logp": _lp(new.tolist()), "ref_logp": torch.tensor(ref, dtype=torch.float32),
            "mask": torch.tensor(mask, dtype=torch.float32), "kl_clamp": float(rng.choice([10.0, 3.0]))}


def _k3_expect() -> ExpectLoss:
    return ExpectLoss(atol=1e-4, what="the leash term", slips=(
        Slip("k1", sb.k3_loss_term_k1, "that is the mean of k1, log pi - log ref: the leash is k3, "
                                       "exp(d) - d - 1 with d = ref_logp - new_logp"),))


_COMPLETIONS = ("68;;", "7;;;", "198;", "1987", ";;;;", "12;7", "0;12")


def _mask_cases() -> tuple:
    out = []
    for text in _COMPLETIONS:
        c = torch.tensor([encode(text)])
        out.append(Case({"completions": c}, completion_mask(c),
                        f"{text!r}: keep every token up to and including the first ';' "
                        f"(none in '1987': all four), nothing after it"))
    both = torch.tensor([encode(t) for t in _COMPLETIONS])
    out.append(Case({"completions": both}, completion_mask(both), "all of them in one batch, one row each"))
    return tuple(out)


def _mask_random_kwargs(rng) -> dict:
    B = int(rng.integers(1, 17))
    # mostly digits, with `;` often enough that answers end anywhere
    ids = np.where(rng.random((B, 4)) < 0.3, 12, rng.integers(0, 12, (B, 4)))
    return {"completions": torch.tensor(ids, dtype=torch.long)}


def _mask_expect() -> ExpectArray:
    return ExpectArray(atol=0.0, kind="torch", what="the mask", slips=(
        Slip("no-mask", sb.completion_mask_missing, "that keeps every token: the mask stops after the first ';'"),
        Slip("pad-is-end", sb.completion_mask_pad_is_end,
             "that drops every ';' and keeps what follows one: the end mark is a real token, kept, and "
             "everything after the first ';' is dropped")))


def _logprob_cases() -> tuple:
    g = torch.Generator().manual_seed(10)
    out = []
    # a vocabulary of 4 here, so that every input fits the report (the engine's is 13)
    for shape, t, why in (((1, 2, 4), 0.7, "one answer of two tokens at the book's temperature 0.7"),
                          ((2, 2, 4), 0.7, "two answers at 0.7"),
                          ((1, 2, 4), 1.0, "at temperature 1 the bug and the fix agree"),
                          ((1, 2, 4), 0.3, "a colder sampler")):
        logits = torch.round(3.0 * torch.randn(shape, generator=g), decimals=1)
        tokens = torch.randint(0, shape[2], shape[:2], generator=g)
        out.append(Case({"logits": logits, "tokens": tokens, "temperature": t},
                        logprobs_from_logits(logits, tokens, t), why))
    return tuple(out)


FIX_HINTS = {
    "kl-no-grad": (
        "Compare each line with chapter 8's leash: which tensor must the gradient flow through?",
        "The value of the term is right; what is missing is its gradient with respect to `new_logp`. "
        "Which call cuts a tensor off from the graph?",
        "`new_logp.detach()` cuts the leash off from the policy's weights: the value is the same, the "
        "gradient is gone. Use `new_logp` itself, then return the masked mean of `exp(d) - d - 1`."),
    "k1-loss": (
        "The line that computes `d` was right. What should the term be, as a function of `d`?",
        "Chapter 1's k3 is exp(d) - d - 1 with d = log ref - log pi; the buggy line returned k1, the "
        "masked mean of new_logp - ref_logp.",
        "Compute `d` as before, clamped, and return the masked mean of `torch.exp(d) - d - 1`: the sum "
        "over kept tokens divided by `mask.sum()`."),
    "no-mask": (
        "Chapter 3's mask keeps each answer up to and including its first `;`.",
        "`ends_before` counts the `;` strictly before each token: it is 0 up to and including the first "
        "`;`, and 1 or more after it.",
        "Return a float tensor that is 1 where `ends_before` is 0, and 0 elsewhere."),
    "pad-is-end": (
        "A mask of `token != pad` fits padding that never appears inside an answer; here the pad is the "
        "end mark itself.",
        "The first `;` must be kept and everything after it dropped, whatever the tokens are: "
        "`ends_before` says which tokens come after a `;`.",
        "Return a float tensor that is 1 where `ends_before` is 0, and 0 elsewhere."),
    "ratio-to-reference": (
        "PPO's ratio compares the policy now with the policy that sampled the batch (chapter 5).",
        "Of the three log-probs, `old_logp` is the sampler's; the reference's belong in the leash only.",
        "The surrogate is `ppo.ppo_token_loss` of `new_logp` and `old_logp`, with the advantages, the "
        "mask and epsilon."),
    "no-temperature": (
        "The answers were sampled from softmax(logits / temperature); the log-probs must be of that "
        "distribution.",
        "At temperature 1 the buggy line and the right one agree: what changes when it is 0.7?",
        "Divide the logits by `temperature` inside `F.log_softmax(..., dim=-1)`."),
    "dpo-rejected-flipped": (
        "Both log-ratios are policy minus reference (chapter 9).",
        "The chosen log-ratio above is right; the rejected one is built the same way from the rejected "
        "log-probs.",
        "The rejected log-ratio is `policy_rejected_logps` minus `ref_rejected_logps`."),
}


def _logprob_random_kwargs(rng) -> dict:
    B, T = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    return {"logits": torch.tensor(rng.normal(0.0, 3.0, (B, T, 13)), dtype=torch.float32),
            "tokens": torch.tensor(rng.integers(0, 13, (B, T)), dtype=torch.long),
            "temperature": float(rng.choice([0.3, 0.7, 1.0, 1.5]))}


def _fix(bug: str, reference, cases, expect, random_kwargs, n_random: int = 50) -> Exercise:
    hints = FIX_HINTS[bug]
    return Exercise(name=fix_name(bug), chapter=10, title=f"Fix it: {sb.BUGS[bug].title}", expect=expect,
                    cases=cases, hints=hints, reference=reference, random_kwargs=random_kwargs,
                    n_random=n_random,
                    hint_for={s.kind: 2 for s in expect.slips} | {"value": 1, "no-grad": 3})


def _from(exercise: Exercise, bug: str, slip: Slip) -> Exercise:
    # An earlier chapter's exercise of the same function, with this bug as a named slip (in
    # place of the earlier slip of the same kind, which would give the same answers).
    expect = copy.copy(exercise.expect)
    expect.slips = (slip,) + tuple(s for s in exercise.expect.slips if s.kind != slip.kind)
    return dataclasses.replace(exercise, name=fix_name(bug), chapter=10, title=f"Fix it: {sb.BUGS[bug].title}",
                               expect=expect, hints=FIX_HINTS[bug], n_random=50,
                               hint_for={s.kind: 2 for s in expect.slips} | {slip.kind: 3, "value": 1, "sign": 1,
                                                                               "not-a-tensor": 3, "inf": 3, "nan": 3})


IN_THIS_CHAPTER = (
    _tell_exercise("no-mask"),
    _fix("no-mask", completion_mask, _mask_cases(), _mask_expect(), _mask_random_kwargs),
    _tell_exercise("pad-is-end"),
    _fix("pad-is-end", completion_mask, _mask_cases(), _mask_expect(), _mask_random_kwargs),
    _tell_exercise("kl-no-grad"),
    _fix("kl-no-grad", k3_loss_term, _k3_cases(), _k3_expect(), _k3_random_kwargs),
    _tell_exercise("k1-loss"),
    _fix("k1-loss", k3_loss_term, _k3_cases(), _k3_expect(), _k3_random_kwargs),
    _tell_exercise("ratio-to-reference"),
    _from(ch08.GRPO_TOKEN_LOSS, "ratio-to-reference",
          Slip("ratio-to-reference", sb.grpo_token_loss_ratio_to_reference,
               "that takes the ratio against the reference: PPO's ratio is against old_logp, the policy that "
               "sampled the batch")),
    _tell_exercise("no-temperature"),
    _fix("no-temperature", logprobs_from_logits, _logprob_cases(), ExpectArray(
        atol=1e-5, kind="torch", what="the log-probs", plural=True, slips=(
            Slip("no-temperature", sb.logprobs_from_logits_no_temperature,
                 "that leaves the temperature out: the answers were sampled from softmax(logits / "
                 "temperature)"),)), _logprob_random_kwargs),
    _tell_exercise("dpo-rejected-flipped"),
    _from(ch09.DPO_LOSS, "dpo-rejected-flipped",
          Slip("one-term", sb.dpo_loss_rejected_flipped,
               "that turns the rejected log-ratio upside down: both are policy minus reference")),
)


# ----------------------------------------------------------------------------- the run


def band_report(bug: str, fn, runs: dict, progress: bool = False) -> str:
    """Return a few lines: whether the learner's fix ``fn`` of ``bug`` passes its exercise, and
    if it does, whether it lands in the correct run's band when planted in the run (seeds of
    ``runs``, :func:`~minirlhf.studies.silent_bugs.band_check`). Never raises for the learner's code."""
    from . import get

    report = run_cases(fn, get(fix_name(bug)))
    if not report.passed:
        return (f"{fix_name(bug)}: the check above does not pass yet "
                f"({report.n_passed} of {len(report.results)} cases), so the run is not made.")
    result = sb.band_check(bug, fn, runs, progress=progress)
    seeds = len(runs["correct"][sb.BUGS[bug].arm])
    lines = [f"your fix, planted in the {sb.BUGS[bug].arm} run, seeds 0-{seeds - 1}: each tell,",
             "  then the correct run's band (mean ± 95% half-width)"]
    for metric, row in result.items():
        if metric == "passed":
            continue
        mean, half = row["band"]
        lines.append(f"  {metric:<20} {row['fixed']:9.4f} vs {mean:9.4f} ± {half:.4f}: "
                     f"{'inside' if row['inside'] else 'OUTSIDE'}")
    lines.append("PASS: the run is healthy again" if result["passed"] else
                 "not yet: the run still differs from the correct one")
    return "\n".join(lines)
