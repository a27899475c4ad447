"""Chapter 10 exercises: for each run with a planted bug, name its tell, then fix the function.

The chapter names its runs by letter (:data:`RUNS`) until each answer is shown. A "name the
tell" exercise is a function that returns ``(metric, mechanism)`` or ``(metric, mechanism,
note)``: a panel of the run's dashboard that separates it from the correct run by the whole-run
paired test (None when none does), and the number of what the changed line does, from
:data:`MECHANISMS`; the note is the learner's own sentence and is not graded
(:class:`~minirlhf.course.tells.ExpectTell`). A "fix it" exercise is the engine function the
bug broke, written again; the engine's own function is the reference, and the bugs of that
function are named slips. Runs B and D break the functions that runs A and C break, so their
fixes are those of A and C. :func:`band_report` then plants a fix in the run.
"""

import copy
import dataclasses
import textwrap
from functools import partial

import numpy as np
import torch

from ...leashes.loss import k3_loss_term
from ...model import completion_mask
from ...paths import OUTPUTS
from ...ppo import logprobs_from_logits
from ...safe_text import shorten
from ...studies import silent_bugs as sb
from ...task import SEMI, encode
from ..cases import Case, Exercise, MeasuredCases, NotReady, Slip, run_cases
from ..expect import ExpectArray
from ..runs import NotStored, stored_bug_runs
from ..sandbox import _exception_name, _exception_text, _where
from ..tells import ExpectTell, Tell
from . import ch08, ch09
from .ch02 import ExpectLoss

# ----------------------------------------------------------------------------- the runs

# The bug of each run, in the chapter's order: run A is the first.
RUNS = {
    "A": "no-mask",
    "B": "pad-is-end",
    "C": "kl-no-grad",
    "D": "k1-loss",
    "E": "ratio-to-reference",
    "F": "no-temperature",
    "G": "dpo-rejected-flipped",
}
# The exercise whose fix each run's bug is planted back with: B breaks A's function, D breaks C's.
FIX_OF = {"A": "A", "B": "A", "C": "C", "D": "C", "E": "E", "F": "F", "G": "G"}


def bug_of(letter: str) -> str:
    """Return the name of run ``letter``'s bug (a key of :data:`minirlhf.studies.silent_bugs.BUGS`)."""
    if letter not in RUNS:
        raise ValueError(f"there is no run {letter!r}: the runs are {', '.join(RUNS)}")
    return RUNS[letter]


# ----------------------------------------------------------------------------- name the tell

# What a changed line can do, numbered as the chapter lists them: every run's bug, in no
# particular order, and three that no run has.
MECHANISMS = (
    (
        1,
        "The leash term is k1, the mean of log pi - log pi_ref over the sampled tokens, whose gradient "
        "is zero on average over the policy's own samples.",
    ),
    (2, "The completion mask drops every `;`, the end mark included, as if it were padding."),
    (3, "The advantages have the wrong sign: the loss makes the answers that scored well less likely."),
    (4, "The clipped ratio compares the policy with the frozen reference, not with the policy that sampled the batch."),
    (5, "DPO's loss leaves out the rejected answer's log-ratio, so it only raises the chosen answer."),
    (6, "The completion mask keeps every token, also those after the answer's end mark."),
    (7, "The leash term keeps its value but carries no gradient: the policy's log-probs are detached in it."),
    (8, "The reference model shares the policy's weights, so the leash measures the policy against itself."),
    (9, "The log-probs in the loss are taken at temperature 1, not at the temperature the answers were sampled at."),
    (10, "DPO's rejected log-ratio is the wrong way round: reference minus policy, not policy minus reference."),
)
MECHANISM_OF = {
    "no-mask": 6,
    "pad-is-end": 2,
    "kl-no-grad": 7,
    "k1-loss": 1,
    "ratio-to-reference": 4,
    "no-temperature": 9,
    "dpo-rejected-flipped": 10,
}

# The chapter's runs: every bug's run and the correct run of its arm, for these seeds, stored
# by the chapter's first cell in this file. The answer keys of the tells and the panels a fix
# is judged on are measured on them when a check runs (silent_bugs.separating), never listed
# here: a change of the runs changes the keys with them.
SEEDS = (0, 1, 2, 3, 4)
RUNS_FILE = OUTPUTS / "silent_bugs.json"


def stored_runs() -> dict:
    """Return the chapter's runs as its first cell stored them (``{"correct": {arm: {seed:
    log}}, bug: {seed: log}}``), never making them; :class:`~minirlhf.course.cases.NotReady`
    with one line when they are not there."""
    try:
        return stored_bug_runs(RUNS_FILE, SEEDS, make=False)["runs"]
    except NotStored as exc:
        raise NotReady(
            f"chapter 10's runs are not stored yet ({exc}): run the chapter's first code cell, which "
            "makes them (Run All does), then check again"
        ) from None


def runs_ready() -> str | None:
    """None when the chapter's runs are stored, else the one line :func:`stored_runs` raises."""
    try:
        stored_runs()
    except NotReady as exc:
        return str(exc)
    return None


def answer_key(letter: str, runs: dict) -> tuple:
    """Return ``(metric, mechanism)``: a panel that separates run ``letter`` from the correct one
    in ``runs`` (the one whose interval clears 0 by the most, among those a real run logs, so
    not ``accuracy`` while another separates), or None when none does; and its mechanism."""
    bug = bug_of(letter)
    rows = sb.tell_table(runs, [bug])[bug]
    ranked = sorted(rows, key=lambda m: (m == "accuracy", -rows[m]["margin"]))
    return (ranked[0] if ranked else None), MECHANISM_OF[bug]


# The reference answers: plain functions of this module, so that the grader can block them
# while their exercise is graded (a closure it could not), each measured on the stored runs.
def tell_run_a():
    return answer_key("A", stored_runs())


def tell_run_b():
    return answer_key("B", stored_runs())


def tell_run_c():
    return answer_key("C", stored_runs())


def tell_run_d():
    return answer_key("D", stored_runs())


def tell_run_e():
    return answer_key("E", stored_runs())


def tell_run_f():
    return answer_key("F", stored_runs())


def tell_run_g():
    return answer_key("G", stored_runs())


# Per run, the hints: where to look, how to pick the mechanism, nearly the answer.
TELL_HINTS = {
    "A": (
        'Start with the panel that is exactly flat. `compare("A")` prints every panel\'s whole-run paired '
        "difference from the correct run, and whether it separates the two.",
        "`val/completion_length` is 4 tokens, every token of every answer, from the first batch: the mask's "
        "sum is the length. Which mechanism makes the mask count every token?",
        "`val/completion_length` (or another panel that separates), and mechanism 6: the mask keeps every "
        "token, also those after the end mark.",
    ),
    "B": (
        'Look at the length first, as in run A, and at `compare("B")`.',
        "`val/completion_length` is about one token below the correct run's from the first batch: one token "
        "of almost every answer is no longer counted. Which token, and which mechanism drops it?",
        "`val/completion_length` (or another panel that separates), and mechanism 2: the end mark is taken "
        "for padding and dropped from the mask.",
    ),
    "C": (
        'Test every panel with `compare("C")`, and look at how far the two KL panels end from the correct run\'s.',
        "Both KL panels end several times the correct run's, and accuracy is lower: the leash does not hold. "
        "Two mechanisms of the list make a leash that does not hold. One leaves the run exactly as it would be "
        'with no leash at all; `unleashed("C")` runs the correct arm with beta = 0 for seed 0 and compares it '
        "with run C's seed 0, digit for digit. Which mechanism gives that?",
        "`kl` (or another panel that separates), and mechanism 7: the leash term's log-probs are detached, so "
        "it carries no gradient, and run C is the run with beta = 0 to the last digit.",
    ),
    "D": (
        'Test every panel with `compare("D")`, and look at the width of its bands beside run C\'s.',
        "The KL leans above the correct run's, as in run C, but its seeds scatter far more, and "
        '`unleashed("D")` says that run D is not the run with no leash: its leash still pushes, batch by '
        "batch. Run C's bug took the leash's pull away entirely; which mechanism leaves a leash that pulls "
        "nowhere on average and still pushes in each batch?",
        "`objective/entropy` (or another panel that separates), and mechanism 1: the leash term is k1, whose "
        "gradient is zero on average over the policy's own samples.",
    ),
    "E": (
        'Test every panel with `compare("E")`: the two KL panels separate.',
        "Both KL panels are lower than the correct run's over the run, while accuracy does not move: the "
        "policy stays nearer the reference than a healthy run does. What in GRPO's loss could stop a token "
        "that has moved far enough from where the run started?",
        "`kl` (or another panel that separates), and mechanism 4: the clipped ratio is taken against the "
        "reference, so the clip stops every token that has moved 20% from the start.",
    ),
    "F": (
        'Test every panel with `compare("F")`: four separate. Look at the two panels of PPO\'s own update, '
        "`policy/clipfrac_avg` and `policy/approxkl_avg`.",
        "`policy/approxkl_avg` is about half the correct run's over the run: the log-ratios of each update "
        "come out smaller than they are, as if the log-probs were those of a flatter distribution than the "
        "one the answers were sampled from. Which setting of the sampler could they leave out?",
        "`policy/approxkl_avg` (or another panel that separates), and mechanism 9: the log-probs leave out "
        "the sampling temperature.",
    ),
    "G": (
        'Almost every panel separates here (`compare("G")`): which of DPO\'s logs are the wrong way up?',
        "`rewards/accuracies` falls to near 0 and `logps/rejected` rises, while `rewards/chosen` stays near "
        "0: the rejected answers become far more likely, and the chosen ones hardly move. Of the two DPO "
        "mechanisms of the list, which could make the loss ask for a rejected answer to rise?",
        "`logps/rejected` (or another panel that separates), and mechanism 10: the rejected log-ratio has the "
        "wrong sign, so the loss raises the rejected answer too.",
    ),
}
_TELL_REFERENCES = {
    "A": tell_run_a,
    "B": tell_run_b,
    "C": tell_run_c,
    "D": tell_run_d,
    "E": tell_run_e,
    "F": tell_run_f,
    "G": tell_run_g,
}


def tell_name(letter: str) -> str:
    """The exercise name (and the learner's function name) of run ``letter``'s "name the tell"."""
    return f"tell_run_{letter.lower()}"


def fix_name(letter: str) -> str:
    """The exercise name of the "fix it" that run ``letter``'s bug is planted back with."""
    return f"fix_run_{FIX_OF[letter].lower()}"


def tell(letter: str, runs: dict) -> Tell:
    """Return the expected answer of run ``letter``'s "name the tell", its panels measured on
    ``runs`` (:func:`~minirlhf.studies.silent_bugs.separating`)."""
    bug = sb.BUGS[bug_of(letter)]
    before = list(RUNS)[: list(RUNS).index(letter)]
    return Tell(
        run=f"run {letter}",
        separating=sb.separating(runs, bug_of(letter)),
        mechanism=MECHANISM_OF[bug_of(letter)],
        mechanisms=MECHANISMS,
        shown=tuple(sb.DASHBOARD[sb._trainer(bug.arm)]),
        earlier=tuple((MECHANISM_OF[RUNS[b]], f"run {b}") for b in before),
    )


def _no_inputs(rng) -> dict:
    # A tell takes no input. The grader tries no random inputs (n_random=0); the drift test
    # compares the chapter's answer with the reference's.
    return {}


def _tell_cases(letter: str) -> tuple:
    # The one case of a tell, measured on the stored runs when the check runs.
    arm = sb.BUGS[bug_of(letter)].arm
    seeds = f"seeds {SEEDS[0]}-{SEEDS[-1]}"
    why = f"run {letter}'s dashboard beside the correct run ({arm} arm, {seeds})"
    return (Case({}, tell(letter, stored_runs()), why),)


def _tell_exercise(letter: str) -> Exercise:
    hint_for = {
        "type": 1,
        "unknown-metric": 1,
        "wrong-metric": 1,
        "no-metric": 1,
        "unknown-mechanism": 2,
        "mechanism": 2,
    }
    return Exercise(
        name=tell_name(letter),
        chapter=10,
        title=f"Name the tell of run {letter}",
        expect=ExpectTell(),
        cases=MeasuredCases(partial(_tell_cases, letter)),
        ready=runs_ready,
        hints=TELL_HINTS[letter],
        reference=_TELL_REFERENCES[letter],
        # What computes the answer key from the runs: blocked with the reference while graded.
        also_blocks=(
            "minirlhf.course.exercises.ch10.answer_key",
            "minirlhf.course.exercises.ch10.tell",
            "minirlhf.studies.silent_bugs.separating",
            "minirlhf.studies.silent_bugs.tell_table",
        ),
        random_kwargs=_no_inputs,
        n_random=0,
        hint_for=hint_for,
    )


def compare(letter: str, runs: dict, metric: str | None = None) -> str:
    """Return, for every panel of run ``letter``'s dashboard (or ``metric`` only), the whole-run
    paired test against the correct run (:func:`~minirlhf.studies.silent_bugs.paired_difference`):
    the mean over seeds of buggy minus correct, its 95% interval, and whether it separates."""
    bug = bug_of(letter)
    shown = sb.DASHBOARD[sb._trainer(sb.BUGS[bug].arm)]
    if metric is not None and metric not in shown:
        return textwrap.fill(
            f"{metric!r} is not a panel of run {letter}'s dashboard: its panels are {', '.join(shown)}",
            77,
            subsequent_indent="  ",
        )
    lines = [
        f"run {letter} minus the correct run, each metric's mean over the run, seed by seed:",
        "  mean difference ± 95% half-width: separates when the interval excludes 0",
    ]
    for m in [metric] if metric else shown:
        row = sb.paired_difference(runs, bug, m)
        lines.append(
            f"  {m:<22} {interval_text(*row['difference'])}  {'separates' if row['separates'] else 'does not separate'}"
        )
    return "\n".join(lines)


def interval_text(mean: float, half: float) -> str:
    """Return 'mean ± half' (a mean and its 95% half-width), with the decimals that show the
    half-width to four figures, so that a mean just outside its interval reads so."""
    places = 3 if not half > 0 else max(3, 3 - int(np.floor(np.log10(half))))
    mean = 0.0 if round(mean, places) == 0 else mean  # no "-0.000" for a mean that rounds to 0
    return f"{mean:+.{places}f} ± {half:.{places}f}"


# ----------------------------------------------------------------------------- fix it


def _lp(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def _k3_cases() -> tuple:
    # (B, T) tensors, as the run passes them: one answer of two tokens, then two of three
    rows = (
        (
            [[-1.0, -2.0]],
            [[-1.0, -2.0]],
            [[1.0, 1.0]],
            10.0,
            "the policy is the reference: every log-ratio 0, the leash 0",
        ),
        (
            [[-1.0, -2.0]],
            [[-1.5, -1.0]],
            [[1.0, 1.0]],
            10.0,
            "d = ref - new = -0.5 and +1: k3 = e^d - d - 1 = 0.1065 and 0.7183, mean 0.4124",
        ),
        ([[-1.0, -2.0]], [[-1.5, -1.0]], [[1.0, 0.0]], 10.0, "the second token masked out: 0.1065"),
        (
            [[-20.0, -1.0]],
            [[-1.0, -1.0]],
            [[1.0, 1.0]],
            10.0,
            "d = +19 is clamped to 10: (e^10 - 11 + 0) / 2 = 11007.7",
        ),
        (
            [[-20.0, -1.0]],
            [[-1.0, -1.0]],
            [[1.0, 1.0]],
            3.0,
            "kl_clamp = 3: d = +19 is clamped to 3, (e^3 - 4) / 2 = 8.043",
        ),
        (
            [[-0.2, -3.0, -1.0], [-2.0, -0.1, -4.0]],
            [[-0.5, -2.0, -1.0], [-1.0, -0.4, -6.0]],
            [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]],
            10.0,
            "two answers, one shorter: the mean over the five kept tokens",
        ),
    )
    cases = []
    for new, ref, mask, clamp, why in rows:
        kwargs = {"new_logp": _lp(new), "ref_logp": torch.tensor(ref), "mask": torch.tensor(mask), "kl_clamp": clamp}
        cases.append(
            Case(
                kwargs,
                float(k3_loss_term(**{k: (v.detach() if hasattr(v, "detach") else v) for k, v in kwargs.items()})),
                why,
            )
        )
    return tuple(cases)


def _k3_random_kwargs(rng) -> dict:
    B, T = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    ref = rng.uniform(-8.0, -0.05, (B, T))
    new = np.minimum(ref + rng.normal(0.0, float(rng.choice([0.1, 1.0, 15.0])), (B, T)), -1e-3)
    mask = (rng.random((B, T)) < 0.8).astype(float)
    mask[:, 0] = 1.0  # every answer keeps its first token
    return {
        "new_logp": _lp(new.tolist()),
        "ref_logp": torch.tensor(ref, dtype=torch.float32),
        "mask": torch.tensor(mask, dtype=torch.float32),
        "kl_clamp": float(rng.choice([10.0, 3.0])),
    }


def _k3_expect() -> ExpectLoss:
    return ExpectLoss(
        atol=1e-4,
        what="the leash term",
        slips=(
            Slip(
                "k1",
                sb.k3_loss_term_k1,
                "that is the mean of k1, log pi - log ref: the leash is k3, "
                "exp(d) - d - 1 with d = ref_logp - new_logp",
            ),
            Slip(
                "clamp-fixed",
                _k3_clamped_at_10,
                "that clamps d to plus or minus 10 whatever kl_clamp says: clamp with the argument",
            ),
        ),
    )


def _k3_clamped_at_10(new_logp, ref_logp, mask, kl_clamp=10.0):
    # the slip: the clamp's bound written as a number, not read from kl_clamp
    return k3_loss_term(new_logp, ref_logp, mask, 10.0)


# the first two tell the usual slips apart (a ';' with a digit after it); the rest cover the
# ends: several ';', one at the last place, none, only ';'
_COMPLETIONS = ("12;7", "0;12", "68;;", "7;;;", "198;", "1987", ";;;;")


def _mask_cases() -> tuple:
    out = []
    for text in _COMPLETIONS:
        c = torch.tensor([encode(text)])
        out.append(
            Case(
                {"completions": c},
                completion_mask(c),
                f"{text!r}: keep every token up to and including the first ';' "
                f"(none in '1987': all four), nothing after it",
            )
        )
    both = torch.tensor([encode(t) for t in _COMPLETIONS])
    out.append(Case({"completions": both}, completion_mask(both), "all of them in one batch, one row each"))
    return tuple(out)


def _mask_random_kwargs(rng) -> dict:
    B = int(rng.integers(1, 17))
    # mostly digits, with `;` often enough that answers end anywhere
    ids = np.where(rng.random((B, 4)) < 0.3, 12, rng.integers(0, 12, (B, 4)))
    return {"completions": torch.tensor(ids, dtype=torch.long)}


def _mask_expect() -> ExpectArray:
    return ExpectArray(
        atol=0.0,
        container="torch",
        dtype="float",
        what="the mask",
        slips=(
            Slip("no-mask", sb.completion_mask_missing, "that keeps every token: the mask stops after the first ';'"),
            Slip(
                "pad-is-end",
                sb.completion_mask_pad_is_end,
                "that drops every ';' and keeps what follows one: the end mark is a real token, kept, and "
                "everything after the first ';' is dropped",
            ),
            Slip(
                "end-dropped",
                _mask_end_dropped,
                "that drops the first ';' itself: the end mark is a token the policy wrote, kept in the mask",
            ),
        ),
    )


def _mask_end_dropped(completions):
    # the slip: the tokens strictly before the first ';', one short of the answer
    return (torch.cumsum((completions == SEMI).long(), dim=1) == 0).float()


def _logprob_cases() -> tuple:
    g = torch.Generator().manual_seed(10)
    out = []
    # a vocabulary of 4 here, so that every input fits the report (the engine's is 13)
    # float64 logits, as the run's (the engine computes in float64)
    for shape, t, why in (
        ((1, 2, 4), 0.7, "one answer of two tokens at the book's temperature 0.7"),
        ((2, 2, 4), 0.7, "two answers at 0.7"),
        ((1, 2, 4), 1.0, "at temperature 1 the bug and the fix agree"),
        ((1, 2, 4), 0.3, "a colder sampler"),
    ):
        logits = torch.round(3.0 * torch.randn(shape, generator=g), decimals=1).double()
        tokens = torch.randint(0, shape[2], shape[:2], generator=g)
        expected = logprobs_from_logits(logits, tokens, t)
        # the logits require a gradient, as the run's do: log-probs cut off from them fail
        out.append(Case({"logits": logits.requires_grad_(), "tokens": tokens, "temperature": t}, expected, why))
    return tuple(out)


# Per fix (by the letter of the run it is written for), the hints.
FIX_HINTS = {
    "A": (
        "Chapter 3's mask keeps each answer up to and including its first `;`, and nothing after it.",
        "`ends_before` counts the `;` strictly before each token: it is 0 up to and including the first "
        "`;`, and 1 or more after it.",
        "Return a float tensor that is 1 where `ends_before` is 0, and 0 elsewhere.",
    ),
    "C": (
        "Chapter 8's leash: the masked mean of k3 = exp(d) - d - 1, with d = ref_logp - new_logp clamped to "
        "plus or minus `kl_clamp`.",
        "Its value is not enough: training needs its gradient with respect to `new_logp`. Which call would "
        "cut a tensor off from the graph?",
        "Compute `d` from `ref_logp` and `new_logp` themselves, nothing detached, clamped with "
        "`.clamp(-kl_clamp, kl_clamp)`; then divide the sum of `(torch.exp(d) - d - 1) * mask` by `mask.sum()`.",
    ),
    "E": (
        "PPO's ratio compares the policy now with the policy that sampled the batch (chapter 5).",
        "Of the three log-probs, `old_logp` is the sampler's; the reference's belong in the leash only.",
        "The policy loss is `reward_leash.ppo_token_loss` of `new_logp` and `old_logp`, with the advantages, the "
        "mask and epsilon.",
    ),
    "F": (
        "The answers were sampled from softmax(logits / temperature); the log-probs must be of that distribution.",
        "At temperature 1 the buggy line and the right one agree: what changes at the book's temperature?",
        "Divide the logits by `temperature` inside `F.log_softmax(..., dim=-1)`.",
    ),
    "G": (
        "Both log-ratios are policy minus reference (chapter 9).",
        "The chosen log-ratio above is right; the rejected one is built the same way from the rejected log-probs.",
        "The rejected log-ratio is `policy_rejected_logps` minus `ref_rejected_logps`.",
    ),
}


def _logprob_random_kwargs(rng) -> dict:
    B, T = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    return {
        "logits": torch.tensor(rng.normal(0.0, 3.0, (B, T, 13)), dtype=torch.float64, requires_grad=True),
        "tokens": torch.tensor(rng.integers(0, 13, (B, T)), dtype=torch.long),
        "temperature": float(rng.choice([0.3, 0.7, 1.0, 1.5])),
    }


def _fix(
    letter: str, reference, cases, expect, random_kwargs, n_random: int = 50, hint_for=None, also_blocks=()
) -> Exercise:
    return Exercise(
        name=fix_name(letter),
        chapter=10,
        title=f"Fix run {letter}'s function",
        expect=expect,
        cases=cases,
        hints=FIX_HINTS[letter],
        reference=reference,
        random_kwargs=random_kwargs,
        n_random=n_random,
        hint_for={s.kind: 2 for s in expect.slips} | {"value": 1} | (hint_for or {}),
        also_blocks=also_blocks,
    )


def _from(exercise: Exercise, letter: str, slip: Slip) -> Exercise:
    # An earlier chapter's exercise of the same function, with this bug as a named slip (in
    # place of the earlier slip of the same kind, which would give the same answers).
    expect = copy.copy(exercise.expect)
    expect.slips = (slip,) + tuple(s for s in exercise.expect.slips if s.kind != slip.kind)
    return dataclasses.replace(
        exercise,
        name=fix_name(letter),
        chapter=10,
        title=f"Fix run {letter}'s function",
        expect=expect,
        hints=FIX_HINTS[letter],
        n_random=50,
        hint_for={s.kind: 2 for s in expect.slips}
        | {slip.kind: 3, "value": 1, "sign": 1, "not-a-tensor": 3, "inf": 3, "nan": 3},
    )


IN_THIS_CHAPTER = (
    _tell_exercise("A"),
    _fix(
        "A",
        completion_mask,
        _mask_cases(),
        _mask_expect(),
        _mask_random_kwargs,
        hint_for={"dtype": 3},
        also_blocks=("minirlhf.task.decode_completions",),
    ),
    _tell_exercise("B"),
    _tell_exercise("C"),
    _fix("C", k3_loss_term, _k3_cases(), _k3_expect(), _k3_random_kwargs, hint_for={"k1": 1, "no-grad": 2}),
    _tell_exercise("D"),
    _tell_exercise("E"),
    _from(
        ch08.GRPO_TOKEN_LOSS,
        "E",
        Slip(
            "ratio-to-reference",
            sb.grpo_token_loss_ratio_to_reference,
            "that takes the ratio against the reference: PPO's ratio is against old_logp, the policy that "
            "sampled the batch",
        ),
    ),
    _tell_exercise("F"),
    _fix(
        "F",
        logprobs_from_logits,
        _logprob_cases(),
        ExpectArray(
            atol=1e-5,
            container="torch",
            what="the log-probs",
            plural=True,
            dtype="float64",
            grad_why="the run differentiates these log-probs (its loss is built from them)",
            grad_wrt=("logits",),
            slips=(
                Slip(
                    "no-temperature",
                    sb.logprobs_from_logits_no_temperature,
                    "that leaves the temperature out: the answers were sampled from softmax(logits / temperature)",
                ),
            ),
        ),
        _logprob_random_kwargs,
        hint_for={"no-grad": 3, "grad": 3, "float32": 3, "dtype": 3},
        also_blocks=("minirlhf.studies.silent_bugs.copies.logprobs_from_logits_no_temperature",),
    ),
    _tell_exercise("G"),
    _from(
        ch09.DPO_LOSS,
        "G",
        Slip(
            "one-term",
            sb.dpo_loss_rejected_flipped,
            "that turns the rejected log-ratio upside down: both are policy minus reference",
        ),
    ),
)


# ----------------------------------------------------------------------------- the run


def band_report(letter: str, fn, runs: dict, progress: bool = False) -> str:
    """Return a few lines: whether the learner's fix ``fn`` of run ``letter``'s function passes
    its exercise, and if it does, what run ``letter`` does with ``fn`` planted in place of the
    buggy copy (seeds of ``runs``, :func:`~minirlhf.studies.silent_bugs.band_check`): whether
    each seed's run is the correct run digit for digit, and, on each panel that separates the
    bug, the fixed runs' value and the bug's own beside the correct runs' band. Never raises for
    the learner's code: what the function raises during the run, exit() included, is reported in
    a line. An interrupt (the stop button) still stops the cell."""
    from . import get

    bug = sb.BUGS[bug_of(letter)]
    report = run_cases(fn, get(fix_name(letter)))
    if not report.passed:
        return (
            f"{fix_name(letter)}: the check above does not pass yet "
            f"({report.n_passed} of {len(report.results)} cases), so the run is not made."
        )
    try:
        result = sb.band_check(bug_of(letter), fn, runs, progress=progress)
    except RecursionError:
        return (
            f"{fix_name(letter)} passes its check, but in run {letter} it called itself without end: "
            f"while the run is made, your function takes the place of the engine's {bug.name}, so a fix "
            f"that calls {bug.name} calls itself. Write the computation out instead."
        )
    except KeyboardInterrupt:  # the stop button: the learner stops the run, and the cell with it
        raise
    except SystemExit as exc:  # exit() in the learner's function: a report, never the kernel's end
        return (
            f"{fix_name(letter)} passes its check, but called exit() during run {letter}{_where(exc)}: "
            "return a value instead."
        )
    except BaseException as exc:  # the learner's function, called on the run's own batches
        text, _ = _exception_text(exc)
        return (
            f"{fix_name(letter)} passes its check, but raised during run {letter}: {_exception_name(exc)}: "
            f"{shorten(text, 300)}{_where(exc)}. The run calls it on every batch, with shapes the check's "
            "cases may not have: look at the inputs it gets there."
        )
    seeds = sorted(runs["correct"][bug.arm], key=int)
    separating = sb.separating(runs, bug_of(letter))
    lines = [
        f"your fix, planted in run {letter} ({bug.arm} arm), seeds {seeds[0]}-{seeds[-1]}:",
        "  "
        + (
            "every seed's run is the correct run, digit for digit on every panel"
            if result["identical"]
            else "the runs are not the correct runs digit for digit"
        ),
        "  on each panel that separates the bug's run" + (":" if separating else " (none does, so on every panel):"),
        "  your runs' value, the bug's, the correct runs' band (mean ± 95% half-width)",
    ]
    for metric, row in result["panels"].items():
        mean, half = row["band"]
        lines.append(
            f"  {metric:<21}{row['fixed']:8.4f} {'in ' if row['inside'] else 'OUT'}  bug {row['buggy']:8.4f} "
            f"{'in ' if row['bug_inside'] else 'OUT'}  band {mean:.4f} ± {half:.4f}"
        )
    if result["identical"]:
        verdict = "PASS: the run is the correct run again, to the last digit"
    elif result["passed"]:
        verdict = (
            "PASS within the band, but not digit for digit: the engine's function gives other digits in at "
            "least one place, and a run grows any difference; read yours against the engine's"
        )
    else:
        verdict = "not yet: the run still differs from the correct one"
    return "\n".join([*lines, textwrap.fill(verdict, 77, subsequent_indent="  ")])
