# %% [markdown]
# # 4. The reward model
#
# A verifier for arithmetic is one line of code. For most of what people want from a
# language model (a helpful answer, a faithful summary, a polite refusal) there is no such
# line, so RLHF learns one: people compare two answers to the same prompt, and a *reward
# model* is trained to give the one they preferred the higher score
# {cite}`ziegler2019finetuning,stiennon2020summarize,ouyang2022instructgpt`. The policy is then
# optimized against that learned score.
#
# This chapter trains such a reward model (RM) for our sums, with a program in the role of
# the people. You will write the loss it is trained with, measure how well it ranks answers
# it has never seen, and find its blind spot: it ranks what it was shown, which is not the
# same as what is true.
#
# ```{admonition} What you need
# :class: tip
# Chapter 3 (the task, the policy, the completion mask). The first run of this notebook
# trains the reward model (about fifteen seconds) and the five variants its worked answers
# compare, and saves them under `outputs/models`; later runs load them. A first run of the
# whole notebook takes about two minutes on a 2-core CPU, most of it for the variants, made
# side by side (two are trained for 400 steps, four times as long as the book's RM); a later
# run takes about ten seconds.
# ```

# %%
import inspect
import textwrap
from dataclasses import asdict

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from minirlhf import store, task
from minirlhf import reward_model as rmlib
from minirlhf.course.exercises import check
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.experiment import ORIGINAL
from minirlhf.model import (GPTConfig, TinyGPT, generate, make_generator,
                            n_params, reward_scores)
# the Okabe-Ito colors, safe for color blindness
from minirlhf.palette import BLUE, GREEN, ORANGE, PINK, SKY
from minirlhf.parallel import map_runs
from minirlhf.progress import progress_bar
from minirlhf.studies import rm_blind_spot

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or under nbval.
PROGRESS = someone_watching()
# 9-pt text: figures are drawn 6.8 in wide for the page, 3.6 in for a phone
plt.rcParams["font.size"] = 9


def signed(x, width=0):
    """Return x with its sign and 2 decimals ('+0.00', never '-0.00')."""
    return f"{round(float(x), 2) + 0.0:>+{width}.2f}"

# %% [markdown]
# ## Preference pairs
#
# InstructGPT's labellers saw 4 to 9 completions of one prompt and ranked them; every two
# completions of a ranking make one comparison, the better one *chosen* and the worse one
# *rejected* {cite}`ouyang2022instructgpt`. Our labeller is a program with one simple taste:
# for each prompt it prefers the correct answer to a wrong number drawn at random between 0
# and 198. The random numbers are never the truth and never a near-miss (a wrong answer
# within 10 of the truth): garbage, in other words, the kind of wrong answer that is easy to
# collect. A few pairs, drawn the way the training run draws them:

# %%
g = make_generator(3)
pairs = task.sample_pairs(8, g)  # (8, 2): training prompts
# prompts (8, 6), chosen (8, 4), rejected (8, 4):
prompts, chosen, rejected = rmlib.preference_batch(pairs, g)
rows = ["prompt    chosen  rejected  kind of the rejected"]
for (a, b), c, r in zip(pairs.tolist(), task.decode_completions(chosen),
                        task.decode_completions(rejected)):
    kind = task.answer_kind(a, b, r)
    rows.append(f"{task.format_prompt(a, b):<9} {c:<7} {r:<9} {kind}")
print("\n".join(rows))  # one print per cell keeps the output in one piece

# %% [markdown]
# ## The Bradley–Terry model
#
# The reward model $r_\phi(x, y)$ gives a prompt $x$ and a completion $y$ one number. The
# Bradley–Terry model turns two such numbers into the probability that a labeller prefers
# the first completion:
#
# $$
# P(y_c \succ y_r \mid x) = \sigma\big(r_\phi(x, y_c) - r_\phi(x, y_r)\big)
# = \frac{1}{1 + e^{-(r_c - r_r)}},
# $$
#
# and the RM is fitted by maximum likelihood on the pairs, that is by minimizing
#
# $$
# \mathcal{L}_{\text{BT}} = -\frac{1}{N}\sum_{i=1}^{N} \log \sigma(r_{c,i} - r_{r,i}).
# $$
#
# Three properties of this loss shape everything the RM learns:
#
# - **Only the margin** $\Delta = r_c - r_r$ matters. Adding a constant to every score
#   changes nothing, so the RM's zero point means nothing, and its scores should only ever be
#   compared with each other (chapter 5 normalizes them in each batch for that reason).
# - **Pairs already ranked right stop teaching.** The gradient is
#   $\partial \mathcal{L} / \partial \Delta = -\sigma(-\Delta)$, close to 0 once a pair is
#   ranked right with a margin of a few units and close to $-1$ while it is ranked wrong. The
#   RM spends its learning on the pairs it still gets wrong.
# - **It ranks what it is shown.** Nothing in the loss refers to the truth; only to which of
#   two given completions was preferred. Whatever the pairs never contrast, the RM is free to
#   get wrong.
#
# The network is the policy's (chapter 3) with a head that returns one number per position
# instead of 13 logits. The score of a completion is read at its first `;`: with causal
# attention, that position is the first that has seen the prompt and the whole answer.
#
# ## Exercise 4.1: `bradley_terry_loss`
#
# **Contract.** `bradley_terry_loss(r_chosen, r_rejected)` takes two float tensors of the
# same shape (N,), the RM's scores of the chosen and of the rejected completion of N pairs,
# and returns the mean of $-\log \sigma(r_{\text{chosen}} - r_{\text{rejected}})$ over the pairs
# as a **0-d torch tensor** (no `.item()`: training backpropagates through it). It must stay
# finite for any finite scores, including a margin of $-100$.
#
# **Examples.** Equal scores give $\log 2 \approx 0.6931$: the model is unsure. A margin of
# $+2$ gives $\log(1 + e^{-2}) \approx 0.1269$, and a margin of $-2$ gives
# $\log(1 + e^{2}) \approx 2.1269$. A margin of $-100$ gives $100$.
#
# **How it is judged.** Equal scores, margins of $\pm 2$, the same margin shifted by 103, a
# batch mean, a batch with one pair in the wrong order, a margin of $-100$ and one of $+60$;
# the result must be a 0-d tensor within $10^{-4}$ of the value worked by hand, with the
# package's gradient with respect to both scores.

# %% tags=["solution"]
def bradley_terry_loss(r_chosen, r_rejected):
    """Return the mean of -log sigmoid(r_chosen - r_rejected), a 0-d
    tensor."""
    # BEGIN SOLUTION
    margin = r_chosen - r_rejected  # (N,)
    return -F.logsigmoid(margin).mean()
    # END SOLUTION

# %% [hints] bradley_terry_loss

# %%
check("bradley_terry_loss", bradley_terry_loss);

# %% [markdown]
# Why the last case insists on `logsigmoid`: in 32-bit floats, $\sigma(-100) = 1/(1 + e^{100})$
# needs $e^{100}$, which is larger than the largest float32 (both are printed below), so the
# sigmoid comes out as exactly 0 and its log as $-\infty$. `F.logsigmoid` computes the log
# directly, as $\min(\Delta, 0) - \log(1 + e^{-|\Delta|})$, which never forms the huge number.
# One infinite loss turns the gradients of all the shared weights into NaN, and the run is
# lost. The package's
# `minirlhf.reward_model.bradley_terry_loss`, used from here on, does the same:

# %%
margins = torch.tensor([-100.0, -10.0, -2.0, 0.0, 2.0, 10.0])
naive = -torch.log(torch.sigmoid(margins))
stable = torch.stack([rmlib.bradley_terry_loss(m[None], torch.zeros(1))
                      for m in margins])
grad = -torch.sigmoid(-margins)  # dL/dmargin
rows = [f"largest float32 {torch.finfo(torch.float32).max:.3g}; "
        f"e^100 in float32: {torch.exp(torch.tensor(100.0)).item()}", "",
        "margin      " + "".join(f"{m:>9.0f}" for m in margins.tolist())]
for name, values in (("naive loss", naive), ("BT loss", stable),
                     ("dL/dmargin", grad)):
    rows.append(f"{name:<12}" + "".join(f"{v:>9.4f}" for v in values))
print("\n".join(rows))

# %% [markdown]
# ## Training the reward model
#
# The training run draws 128 fresh pairs per step from the training prompts (the 400
# evaluation prompts are held out), scores the chosen and the rejected completions in one
# forward pass, and takes an AdamW step on the Bradley–Terry loss, for 100 steps. The next
# cell loads the trained RM, or trains and saves it on a first run, then measures it on
# pairs it never saw: the 400 evaluation prompts, each with the correct answer against a
# fresh wrong answer.
#
# - **Pair accuracy** uses a random wrong number as the rejected answer, the same kind of
#   pair as in training: the fraction where $r(\text{correct}) > r(\text{wrong})$.
# - **Near-miss accuracy** uses a near-miss instead, drawn at random from the 20 numbers
#   within 10 of the truth: `68;` against one of `58;` to `78;`, a kind of pair the RM was
#   never shown.

# %%
rm, _ = store.load_rm(progress=PROGRESS)
report = rmlib.rm_report(rm)
original = {"pair accuracy": ORIGINAL["rm_pair_accuracy"],
            "near-miss accuracy": ORIGINAL["rm_near_miss_accuracy"]}
rows = [*textwrap.wrap(str(rmlib.RMConfig()), 77,
                      subsequent_indent="    "), "",
        "                       this run   the original run"]
for name, key in (("pair accuracy", "pair_accuracy"),
                  ("near-miss accuracy", "near_miss_accuracy")):
    rows.append(f"{name:<22} {report[key]:>8.3f}   {original[name]:>8.3f}")
rows += ["", "mean margin r(correct) - r(wrong), garbage:    "
         + signed(report["margin"]["random"]),
         "mean margin r(correct) - r(wrong), near-miss:  "
         + signed(report["margin"]["near_miss"])]
print("\n".join(rows))

# %% [markdown]
# On the kind of pair it was trained on, the RM is right most of the time and by a wide
# margin. On near-misses, taken together, it is right only a little more often than a coin
# toss, and its mean margin is a small fraction of the margin on garbage. The same happens in
# the original run (the numbers of the project this book rebuilds), with somewhat different
# numbers: the scale of RM scores is
# arbitrary, and a different run lands elsewhere, but the gap between the two accuracies is
# the point. Near-misses are not all alike, though: *Seeing the blind spot*, below, splits
# them.
#
# ### How InstructGPT trained its reward model, and how ours differs
#
# The loss is InstructGPT's; the rest differs in three ways {cite}`ouyang2022instructgpt`.
#
# - **A whole ranking per batch element.** A ranking of $K$ completions (InstructGPT's
#   labellers ranked $K = 4$ to $9$) gives $\binom{K}{2}$ comparisons, 6 to 36 of them, and
#   they are strongly correlated: each completion takes part in $K - 1$ of them. Shuffled into
#   the data set as separate pairs, they made the RM overfit within a single epoch. So all
#   $\binom{K}{2}$ comparisons of one prompt went into one batch element, with the loss
#   averaged over them, and each completion needed one forward pass, $K$ in all, instead of
#   one per comparison. Our labeller hands over two completions per prompt: $K = 2$, one
#   comparison, and a batch element is one pair, so the two ways coincide: two completions
#   scored per comparison. Nor is there an epoch to overfit in, since every step draws new
#   pairs.
# - **A bias that puts the zero at the demonstrations.** A constant added to every score
#   leaves the Bradley–Terry loss unchanged, so InstructGPT fixed the constant afterwards,
#   with a bias that makes the labellers' demonstrations score 0 on average before RL
#   starts. Ours has no such bias, and its zero is wherever training left it: on the
#   held-out prompts the correct answers, which play the demonstrations' part, score on
#   average the number printed below, not 0. Chapter 5 standardizes the scores of each
#   batch, which removes any constant, so the bias would change nothing there; it would only
#   let a single score be read on its own, as above or below the demonstrations' average.
# - **A judge smaller than the judged.** InstructGPT used a 6B-parameter RM for its
#   175B-parameter policy. Ours is the policy's network with a one-number head, as large as
#   the policy give or take the head (both counts are printed below). The judge here is no
#   smaller than the judged; whatever it misses, it misses for other reasons, and the
#   sections below measure them.

# %%
eval_pairs = task.eval_pairs()  # (400, 2): held out
eval_prompts = task.encode_prompts(eval_pairs)  # (400, 6)
with torch.no_grad():
    correct = task.correct_completions(eval_pairs)  # (400, 4)
    r_true = reward_scores(rm, eval_prompts, correct)  # (400,)
print(f"mean score of the correct answers, 400 held-out prompts: "
      f"{signed(r_true.mean())}\n"
      f"parameters: reward model {n_params(rm):,}; policy "
      f"{n_params(TinyGPT(GPTConfig())):,}")

# %% [markdown]
# ## Seeing the blind spot
#
# Near-miss accuracy lumps together answers that are wrong in different places. Compared
# with the truth digit by digit (chapter 3), a near-miss differs in the ones digit only (for
# 68: 60 to 67, and 69), in the tens digit only, by one (58, 78), or in several digits (59,
# and 70 to 77; all of these change the tens digit too). The next cell scores *every*
# near-miss of each of the 400 held-out sums against the truth, about twenty per prompt, and
# sets the three classes beside two kinds of far-off wrong answer, one per prompt: garbage,
# as in training, and the true sum with a digit dropped or added (`6` or `683`). Pairs that
# share a prompt also share the score of its correct answer, so they are not independent:
# the 95% intervals come from resampling prompts, not pairs.

# %%
# every near-miss of every held-out prompt: about 8,000 pairs
table = rm_blind_spot.blind_spot_table(rm)
print(rm_blind_spot.format_table(table))

# %% tags=["hide-input"]
KIND_LABELS = {
    "random": "garbage\n(as in training)",
    "wrong_length": "digit dropped\nor added",
    "tens_digit": "near-miss:\ntens digit only",
    "several_digits": "near-miss:\nseveral digits",
    "ones_digit": "near-miss:\nones digit only",
}
by_kind = {kind: table[kind]["margins"] for kind in KIND_LABELS}
COLORS = [BLUE, GREEN, PINK, SKY, ORANGE]
GREY = {"color": "grey"}


def draw_margins(narrow=False):
    """Return the strip and box plots of the margins by kind of wrong
    answer: one column per kind, or one row per kind on a phone."""
    fig, ax = plt.subplots(figsize=(3.6, 6.2) if narrow else (6.8, 4.3),
                           layout="constrained")
    rng = np.random.default_rng(0)  # jitter across the column only
    for i, ((kind, m), color) in enumerate(zip(by_kind.items(), COLORS)):
        spread = i + rng.uniform(-0.22, 0.22, len(m))
        ax.scatter(*((m, spread) if narrow else (spread, m)), s=6, lw=0,
                   alpha=min(0.35, 250 / len(m)), color=color)
        ax.boxplot(m, positions=[i], widths=0.5, showfliers=False,
                   orientation="horizontal" if narrow else "vertical",
                   medianprops={"color": "black"}, whiskerprops=GREY,
                   capprops=GREY, boxprops=GREY)
        ax.scatter(*((m.mean(), i) if narrow else (i, m.mean())),
                   marker="D", s=40, color="black", zorder=4,
                   label="mean" if i == 0 else None)
        stats = f"mean {signed(m.mean())}, right {(m > 0).mean():.3f}"
        if narrow:  # the kind and its numbers above its row
            name = " ".join(KIND_LABELS[kind].split())
            ax.text(0.02, i - 0.32, f"{name}\n{stats}", va="bottom",
                    transform=ax.get_yaxis_transform(), zorder=5,
                    bbox={"color": "white", "pad": 0.5})  # over the line
        else:
            ax.annotate(stats.replace(", ", "\n"), (i, m.max()),
                        xytext=(0, 5), textcoords="offset points",
                        ha="center", va="bottom")
    zero = ax.axvline if narrow else ax.axhline
    zero(0, color="black", lw=0.9, ls="--", label="margin 0: no preference")
    lo = min(m.min() for m in by_kind.values()) - 0.8
    hi = max(m.max() for m in by_kind.values())
    label = "margin r(correct) − r(wrong)\n(reward-model units)"
    if narrow:
        ax.set_yticks([])
        ax.set_ylim(len(by_kind) - 0.6, -1.0)  # the first kind on top
        ax.set_xlim(lo, hi + 0.8)
        ax.set_xlabel(label)
        fig.legend(loc="outside upper center", ncols=2, frameon=False)
    else:
        ax.set_xticks(range(len(by_kind)), list(KIND_LABELS.values()))
        ax.set_ylim(lo, hi + 3.2)
        ax.set_ylabel(label)
        ax.set_xlabel("kind of wrong answer, on the 400 held-out prompts")
        ax.legend(frameon=False, loc="upper right")
    return fig


show_figure(
    draw_margins,
    alt="Strip and box plots of the reward model's margin per held-out "
        "pair, by kind of wrong answer. "
        + " ".join(f"{' '.join(label.split())}: mean "
                   f"{signed(by_kind[kind].mean())}, ranked right "
                   f"{(by_kind[kind] > 0).mean():.3f}."
                   for kind, label in KIND_LABELS.items())
        + " The garbage and dropped-or-added margins lie far above zero; "
        "the near-miss margins crowd around zero, the ones-digit ones "
        "centred on it.",
    caption="What the RM can tell apart: its margin r(correct) − r(wrong) "
            "per held-out pair (dots), with box and mean (diamond), by "
            "kind of wrong answer; past the dashed zero line it ranks the "
            "correct answer higher. Garbage and answers of the wrong "
            "length lie far past the line; near-misses crowd around it, "
            "and those in the ones digit sit right on it. One pair per "
            "prompt for the far-off kinds, every near-miss of each prompt "
            "for the others.",
)

# %% [markdown]
# Garbage and answers with a digit dropped or added are pushed far below the correct answer.
# The near-misses are not: their margins crowd around the zero line, and how far above it
# depends on where the slip is. A tens digit off by one is caught in 0.668 of the pairs, more
# often than not, though by a small mean margin (+0.27); near-misses that change several
# digits do a little worse (0.608); and a wrong ones digit is caught barely more often than
# a coin toss would catch it: in 0.547 of the pairs, with a mean margin of +0.02. Its
# interval, 0.515 to 0.578, lies just above 0.5, so the RM is not quite blind to the ones
# digit, but what little it sees there is worth next to nothing in score. The RM spots
# garbage, sees a slip in the tens digit dimly, and the ones digit hardly at all. Here is one
# prompt up close, `23+45=`, with the RM's score of a handful of answers, from its favourite
# down:

# %%
a, b = 23, 45
answers = [68, 67, 69, 58, 78, 86, 60, 50, 150, 6, 680]
pair = torch.tensor([[a, b]] * len(answers))  # (11, 2)
prompt = task.encode_prompts(pair)  # (11, 6)
with torch.no_grad():
    r = reward_scores(rm, prompt, task.encode_answers(answers))  # (11,)
rows = ["answer  RM score  verifier's kind"]
for i in r.argsort(descending=True).tolist():
    text = task.format_answer(answers[i])
    kind = task.answer_kind(a, b, text)
    rows.append(f"{text:<7} {signed(r[i], 8)}  {kind}")
print("\n".join(rows))

# %% [markdown]
# The truth comes out on top here, but only just: `68;` scores +1.31, the near-misses `67;`
# and `58;` +1.29 and +1.27, and the seven answers from `50;` to `78;` all score between
# +1.08 and +1.31, `50;` among them, which is not even a near-miss.
# Only the answers of the wrong size (`6;`, `150;`, `680;`) are pushed far down, and `86;`
# part of the way, to -0.49. On this prompt, a policy trained against the RM would be paid
# nearly as much for `67;` or `58;` as for `68;`: the few hundredths between them are tiny
# next to the gap between the truth and an answer of the wrong size.
#
# ## Why it barely sees the ones digit
#
# Three causes, each measurable.
#
# **Data.** Count what the training pairs contrast. The next cell draws 100 batches of 128
# pairs by the training recipe and sorts them by how the rejected number differs from the
# truth.

# %%
g = make_generator(11)
pool = task.train_pairs()
truth, wrong = [], []
for _ in range(rmlib.RMConfig().steps):
    batch = task.sample_pairs(rmlib.RMConfig().batch_size, g, pool)
    _, _, rejected = rmlib.preference_batch(batch, g)
    truth.append(batch.sum(1))
    wrong.append(torch.tensor([task.parse_completion(t) for t in
                               task.decode_completions(rejected)]))
truth, wrong = torch.cat(truth), torch.cat(wrong)  # (12800,) each
near = task.near_miss_mask(truth, wrong)
only_ones = (wrong // 10 == truth // 10) & (wrong != truth)
gap = (wrong - truth).abs()
rows = [("training pairs drawn", f"{len(truth):,}"),
        ("  with a near-miss as the rejected answer",
         f"{int(near.sum()):,}"),
        ("  that differ from the truth in the ones digit only",
         f"{int(only_ones.sum()):,}"),
        ("  smallest gap |wrong - truth|", f"{int(gap.min())}"),
        ("  median gap |wrong - truth|", f"{int(gap.median())}")]
for name, value in rows:
    print(f"{name:<52} {value:>7}")

# %% [markdown]
# Not one near-miss, and so not one pair in which the two answers share every digit but the
# last: every rejected number is more than 10 away from the truth, and a typical one is
# dozens away. Every pair can be ranked by asking whether the answer has about the right
# size.
#
# **What the RM learned instead.** Move one digit of the true sum by 1, 2, ... 9 and watch
# the margin. If the RM checked the arithmetic, any change would cost the same. If it judges
# the size of the answer, the margin should grow with the size of the change, and a change in
# the ones digit (at most 9 away) should cost far less than one in the tens digit.

# %%
def n_digits(n):
    """Return the number of decimal digits of each entry of n."""
    return 1 + (n >= 10).long() + (n >= 100).long()


def moved_digit(truth, place, k, g):
    """Return (wrong, valid): each sum with the digit at `place` (1 or 10)
    moved up or down by k, at random where both work; `valid` marks the
    sums where a move keeps the length and stays within 0..198."""
    digit = (truth // place) % 10
    up, down = truth + k * place, truth - k * place
    length = n_digits(truth)
    up_ok = ((digit + k <= 9) & (up <= task.MAX_SUM)
             & (n_digits(up) == length))
    down_ok = (digit - k >= 0) & (n_digits(down) == length)
    coin = torch.rand(truth.shape, generator=g) < 0.5
    use_up = up_ok & (~down_ok | coin)
    return torch.where(use_up, up, down), up_ok | down_ok


eval_truth = eval_pairs.sum(1)  # (400,); r_true holds their RM scores
g = make_generator(5)
ks = np.arange(1, 10)
moved = {}  # place -> (mean margin, fraction ranked right, pairs) per k
for place in (1, 10):
    stats = []
    for k in ks:
        wrong, valid = moved_digit(eval_truth, place, int(k), g)
        with torch.no_grad():
            answers = task.encode_answers(wrong[valid].tolist())
            r_wrong = reward_scores(rm, eval_prompts[valid], answers)
        m = (r_true[valid] - r_wrong).numpy()
        stats.append((m.mean(), (m > 0).mean(), len(m)))
    moved[place] = np.array(stats)
rows = ["digit moved by k   " + "".join(f"{k:>6}" for k in ks)]
for place, name in ((1, "ones"), (10, "tens")):
    margin, ranked = moved[place][:, 0], moved[place][:, 1]
    rows += [f"{name}: mean margin  "
             + "".join(signed(v, 6) for v in margin),
             f"{name}: ranked right "
             + "".join(f"{v:>6.2f}" for v in ranked)]
print("\n".join(rows))

# %% tags=["hide-input"]
def draw_moved(narrow=False):
    """Return the mean margin and the fraction ranked right against k: two
    panels side by side, or one above the other on a phone."""
    rows, cols = (2, 1) if narrow else (1, 2)
    size = (3.6, 5.0) if narrow else (6.8, 3.0)
    fig, (top, low) = plt.subplots(rows, cols, sharex=True, figsize=size,
                                   layout="constrained")
    for place, name, color, marker in ((10, "tens digit", BLUE, "o"),
                                        (1, "ones digit", ORANGE, "s")):
        for ax, column in ((top, 0), (low, 1)):
            ax.plot(ks, moved[place][:, column], color=color, marker=marker,
                    label=f"{name} moved by k")
    top.axhline(0, color="black", lw=0.9, ls="--")
    low.axhline(0.5, color="black", lw=0.9, ls="--")
    low.text(9, 0.47, "coin toss", ha="right", va="top")
    top.set_ylabel("mean margin r(correct) − r(wrong)\n"
                   "(reward-model units)")
    low.set_ylabel("fraction ranked right")
    low.set_ylim(0, 1.05)
    for ax in (low,) if narrow else (top, low):
        ax.set_xlabel("k: how far one digit of the sum is moved")
        ax.set_xticks(ks)
    top.legend(frameon=False, loc="upper left")
    return fig


show_figure(
    draw_moved,
    alt="Two panels against k from 1 to 9. Moving the tens digit by k: "
        f"the mean margin rises from {signed(moved[10][0, 0])} at k = 1 to "
        f"{signed(moved[10][-1, 0])} at k = 9, and the fraction ranked "
        f"right from {moved[10][0, 1]:.2f} to {moved[10][-1, 1]:.2f}. "
        f"Moving the ones digit: the mean margin stays between "
        f"{signed(moved[1][:, 0].min())} and "
        f"{signed(moved[1][:, 0].max())}, and "
        f"the fraction ranked right between {moved[1][:, 1].min():.2f} and "
        f"{moved[1][:, 1].max():.2f}, a little above a coin toss, for "
        "every k.",
    caption="What the RM reads: the size of the answer. Move the tens digit "
            "of the true sum further (blue) and the RM's mean margin and "
            "the fraction of pairs it ranks right both climb; move the ones "
            "digit (orange) and both stay nearly flat, the margin near 0 "
            "and the fraction a little above a coin toss, however far it "
            "moves.",
)

# %% [markdown]
# The tens digit behaves like a sense of size: the further it moves, the more the RM
# dislikes the answer, from a mean margin of +0.23 at one step to +7.43 at nine; one step
# away, the step a tens-digit near-miss takes, it notices only weakly (0.62 ranked right), as
# the tens-digit row of the table in *Seeing the blind spot* showed. The ones digit barely
# registers, at any distance: its mean margin stays between +0.01 and +0.11, and the fraction
# ranked right between 0.54 and 0.60, a little above a coin toss however far the digit
# moves. The RM has learned roughly how large the sum of two numbers is, which is enough for
# nearly every pair it was shown, and next to nothing of the last digit, which only the
# arithmetic can tell.
#
# **Capacity and training length.** Getting the ones digit right means actually adding, and
# that is hard for this network in a short run: chapter 3's policy, the same network after
# its short SFT run, writes the correct sum for about a third of the prompts. The RM trains
# for only 100 steps, and, as the Bradley–Terry gradient showed, pairs that are already
# ranked right by a comfortable margin stop contributing, so once the sense of size is good
# enough the loss has little left to push with, and no pair ever points it at the last
# digit. Longer training might sharpen the sense of size enough to catch more of the
# tens-digit near-misses, but nothing in the data asks for the last digit. The exercises at
# the end let you test both: train longer, or put near-misses into the pairs.
#
# ## What this means for RLHF
#
# Take the partial policy of chapter 3 and score its own greedy answers with the RM, grouped
# by what the verifier says they are. Then, prompt by prompt, ask what the RM would pay for
# the truth instead of the policy's wrong answer: the margin r(truth) − r(the policy's
# answer) on the same prompt, with the near-misses split as before.

# %%
policy, _ = store.load_sft(progress=PROGRESS)
greedy = generate(policy, eval_prompts, greedy=True)  # (400, 4)
kinds = task.batch_kinds(eval_pairs, greedy)
with torch.no_grad():
    scores = reward_scores(rm, eval_prompts, greedy).numpy()  # (400,)
rows = ["the policy's answers".ljust(27)
        + f"{'count':>6}{'mean RM score':>23}"]
for kind in task.KINDS:
    chosen = np.array([k == kind for k in kinds])
    if chosen.any():
        mean = scores[chosen].mean()
        rows.append(f"{kind:<27}{chosen.sum():>6}{signed(mean, 23)}")

gain = r_true.numpy() - scores  # (400,): r(truth) - r(the policy's answer)
groups = {rm_blind_spot.LABELS[c]: []
          for c in rm_blind_spot.NEAR_MISS_CLASSES}
groups |= {"every near-miss": [], "other wrong": []}
texts = task.decode_completions(greedy)
for truth, text, kind, d in zip(eval_truth.tolist(), texts, kinds, gain):
    if kind == "near_miss":
        c = rm_blind_spot.near_miss_class(truth, task.parse_completion(text))
        groups[rm_blind_spot.LABELS[c]].append(d)
        groups["every near-miss"].append(d)
    elif kind == "other_wrong":
        groups["other wrong"].append(d)
rows += ["", "the policy's wrong answer".ljust(27) + f"{'count':>6}"
         f"{'r(truth) - r(answer)':>23}{'truth scores higher':>21}"]
for name, d in groups.items():
    d = np.array(d)
    rows.append(f"{name:<27}{len(d):>6}{signed(d.mean(), 23)}"
                f"{(d > 0).mean():>21.2f}")
print("\n".join(rows))

# %% [markdown]
# The policy's near-misses score close to its correct answers (+1.66 against +2.06 on
# average), much closer than its other wrong answers do (-0.71). Prompt by prompt: where the
# policy writes a near-miss, the RM scores the truth higher in 0.57 of the prompts, a little
# more than half, and by +0.04 on average. Where only the ones digit is wrong, the truth
# wins in 0.53 of the prompts, about a coin toss, by +0.03; where several digits are wrong,
# the policy's answer even scores a little higher on average (-0.05), though the truth wins
# in 0.55 of those prompts; a wrong tens digit is caught more often (0.68), still by little
# (+0.14). Only the policy's few other wrong answers would clearly pay to fix (+1.45, the
# truth higher in 0.78). An optimizer that maximizes this RM gains little by turning a
# near-miss into the right answer, and loses little by turning a right answer into a
# near-miss. That is the reward model chapter 5
# hands to PPO, next to the verifier, to see which of the two makes the policy better at
# arithmetic. Gao et al. measured the same pattern at scale: optimizing a learned reward
# raises its score past the point where the true quality starts to fall
# {cite}`gao2023scaling`.
#
# ## Summary
#
# You can now:
#
# - train a reward model on preference pairs with the Bradley–Terry loss (your
#   `bradley_terry_loss`), written with `logsigmoid` so that it stays finite;
# - say what the loss can and cannot teach: only margins between the completions it is shown,
#   so the RM learns whatever separates those pairs most cheaply, here the rough size of the
#   answer;
# - measure a reward model beyond its headline accuracy: by kind of wrong answer, with
#   intervals that resample prompts, and on the policy's own answers;
# - explain the blind spot this RM brings to chapter 5: it spots garbage, sees a tens digit off
#   by one dimly, and a wrong ones digit barely, ranking it right little more often than a
#   coin toss.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. Put near-misses into the data.** The cell below trains a reward model whose rejected
# answers are near-misses for a share of each batch. It is switched off so that the chapter
# runs fast; set `RETRAIN = True` and run it (it trains from scratch). What happens to the
# tens-digit and the ones-digit near-miss accuracy? Why might one respond faster than the
# other? Try `NEAR_MISS_SHARE = 1.0`: what happens to the accuracy on garbage?

# %%
RETRAIN = False  # True: train a reward model with near-misses as negatives
NEAR_MISS_SHARE = 0.5  # share of each batch whose rejected answer is one
STEPS = 100  # the book's RM trains for 100 steps


def train_rm_with_near_misses(steps, share, cfg=None, flip=0.0):
    """Return a reward model trained like the book's, except that the
    first `share` of each batch gets a near-miss as its rejected answer
    and the last `flip` of each batch has chosen and rejected swapped."""
    cfg = cfg or rmlib.RMConfig()
    torch.manual_seed(cfg.seed)
    model = TinyGPT(GPTConfig(), scalar_head=True)
    g, pool = make_generator(cfg.seed), task.train_pairs()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    n_near = int(round(share * cfg.batch_size))
    n_flip = int(round(flip * cfg.batch_size))
    bar = progress_bar(total=steps, enabled=PROGRESS,
                       desc=f"RM, near-miss share {share:g}, flip {flip:g}")
    for _ in range(steps):
        # 1. a batch of pairs: correct answer against a wrong one
        batch = task.sample_pairs(cfg.batch_size, g, pool)  # (B, 2)
        prompts, chosen, rejected = rmlib.preference_batch(batch, g)
        if n_near:  # a wrong answer within 10 of the truth
            rejected[:n_near] = task.wrong_answers(batch[:n_near],
                                                   "near_miss", g)
        if n_flip:  # a labeller's mistakes: the wrong answer preferred
            chosen[-n_flip:], rejected[-n_flip:] = (
                rejected[-n_flip:].clone(), chosen[-n_flip:].clone())
        # 2. score both sides in one pass, then the Bradley-Terry step
        scores = reward_scores(model, prompts.repeat(2, 1),
                               torch.cat([chosen, rejected]))  # (2B,)
        r_chosen, r_rejected = scores.chunk(2)
        loss = rmlib.bradley_terry_loss(r_chosen, r_rejected)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        bar.update(1)
    bar.close()
    return model.eval()


if RETRAIN:
    new = rmlib.rm_report(train_rm_with_near_misses(STEPS, NEAR_MISS_SHARE))
    rows = [f"accuracy by kind   book's RM   "
            f"{NEAR_MISS_SHARE:.0%} near-misses, {STEPS} steps"]
    for kind in task.WRONG_KINDS:
        rows.append(f"{kind:<18} {report['accuracy'][kind]:>9.3f}   "
                    f"{new['accuracy'][kind]:>9.3f}")
    print("\n".join(rows))
else:
    print("Switched off: set RETRAIN = True and run this cell again.")

# %% [markdown]
# <details class="answer">
# <summary>Worked answer: put near-misses into the data</summary>
#
# The cell below trains three variants and sets their accuracy on each kind of held-out pair
# (far-off garbage, and the three classes of near-miss of *Seeing the blind spot*) beside the
# book's RM. Read it in two steps.
#
# After 100 steps, the book's training length, near-misses in the data do not help. With half
# of each batch made of pairs the network cannot separate yet, every accuracy comes out lower
# than the book's RM's: the tens digit 0.528 against 0.668, the ones digit 0.513 against
# 0.547, and garbage 0.870 against 0.965, with only half of each batch left to teach the
# contrast of size. With every rejected answer a near-miss, the RM learns next to nothing in
# 100 steps, garbage included (0.497, a coin toss): it is never shown
# the easy contrast of size that the book's RM learns first, and no pair it is shown can be
# ranked by anything it has learned yet. Its garbage accuracy shows that what the book's RM
# knows about garbage came entirely from the garbage pairs.
#
# Given 400 steps, the half-and-half RM is the one to read: compare it with the 400-step RM
# without near-misses in exercise 2, which separates what the near-miss pairs add from what
# the longer training adds. A tens digit off by one moves the answer by 10, which a sharper
# sense of size can catch; a wrong ones digit leaves the size nearly unchanged, and only
# learning the last digit of the sum helps, which this network finds hard (chapter 3's
# policy, the same network, gets about a third of the sums right after its short run). The
# last column shows how little either digit gains here. The half-and-half RM catches a wrong
# tens digit in 0.718 of the pairs, against 0.708 for the 400-step RM without near-misses:
# nearly all of its rise over the book's RM (0.668) comes from the longer training, not from
# the near-miss pairs. It catches a wrong ones digit in 0.578 of the pairs, against 0.539: a
# gain of a few hundredths, about as large as the uncertainty of one such accuracy (the book's
# RM's ones-digit interval runs from 0.515 to 0.578), and still far below the tens digit. So
# in this run neither responds fast: the tens digit to more training, the ones digit, if at
# all, a little to the data. Data that contrasts the right thing is not enough on its own:
# the model also needs the capacity and the training to learn it.
#
# </details>

# %% tags=["hide-input"]
KINDS_SHOWN = ("random", "tens_digit", "several_digits", "ones_digit")


def variant(steps, share, flip=0.0):
    """Return (model, {kind: held-out accuracy}) of the reward model that
    train_rm_with_near_misses trains with these settings. A first run
    trains and measures it and saves both under outputs/models; later runs
    load them while the settings, the code of that function and of the
    package's training and measuring are the same."""
    settings = {"steps": steps, "share": share, "flip": flip,
                "recipe": asdict(rmlib.RMConfig()),
                "trainer": inspect.getsource(train_rm_with_near_misses),
                "measure": store.code_fingerprint(rm_blind_spot)}

    def train():
        model = train_rm_with_near_misses(steps, share, flip=flip)
        table = rm_blind_spot.blind_spot_table(model, n_boot=10)
        return model, {"accuracy": {kind: table[kind]["accuracy"]
                                    for kind in KINDS_SHOWN}}

    name = f"ch04_rm_share{share:g}_steps{steps}_flip{flip:g}"
    model, metrics = store.load_or_train(name, settings, train,
                                         progress=PROGRESS)
    return model, metrics["accuracy"]


# Every variant the chapter reads (these three, the 400-step RM of exercise
# 2 and the noisy RM of exercise 3), made side by side, one per core, the
# longest first; the cells below load them from disk.
ALL_VARIANTS = [(400, 0.5), (400, 0.0), (100, 0.5), (100, 1.0),
                (STEPS, 0.0, 0.1)]
map_runs(lambda v: variant(*v)[1], ALL_VARIANTS, progress=PROGRESS,
         desc="reward-model variants", label=lambda v: f"variant {v}")

# the book's RM (near-miss share 0, 100 steps), measured in the table above
book = {kind: table[kind]["accuracy"] for kind in KINDS_SHOWN}
variants = {"book's RM": book}
for share, steps in ((0.5, 100), (1.0, 100), (0.5, 400)):
    _, variants[f"{share:.1f} x {steps}"] = variant(steps, share)


def accuracy_rows(accuracies):
    """Return lines: each model's held-out accuracy by kind of pair, from
    {name: {kind: accuracy}}."""
    names = list(accuracies)
    lines = [f"{'accuracy':<16}" + "".join(f"{n:>13}" for n in names)]
    for kind in KINDS_SHOWN:
        lines.append(f"{kind:<16}" + "".join(
            f"{accuracies[n][kind]:>13.3f}" for n in names))
    return lines


print("columns: the book's RM, then near-miss share x training steps")
print("\n".join(accuracy_rows(variants)))

# %% [markdown]
# **2. Train longer.** With `NEAR_MISS_SHARE = 0.0`, train for 400 and for 800 steps. Which
# accuracies move, and which stay where they were? Redraw the figure of margins against k for
# the longer run.
#
# <details class="answer">
# <summary>Worked answer: train longer</summary>
#
# The cell below trains for 400 steps (800 takes twice as long again; run it yourself) and
# compares. Longer training on the same pairs sharpens what those pairs teach, the sense of
# size, so the garbage accuracy, already near the top, has little room (0.965, then 0.978),
# and the near-miss classes can move only as far as a finer sense of size reaches: a tens
# digit off by one, a change of 10, is within its reach, and its accuracy rises from 0.668 to
# 0.708 (several digits, which change the tens digit too, from 0.608 to 0.639); a wrong ones
# digit is not, and stays where it was (0.547, then 0.539), because no pair ever contrasts
# two answers of the same size. To redraw the figure, rerun the cell that fills `moved` with
# `rm` replaced by the longer-trained model, `rm_400`, then `show_figure(draw_moved)`.
#
# </details>

# %% tags=["hide-input"]
rm_400, accuracy_400 = variant(400, 0.0)
longer = {"book's RM (100 steps)": book, "400 steps": accuracy_400}
print("\n".join(accuracy_rows(longer)))

# %% [markdown]
# **3. Predict, then measure.** Make rejected answers that keep the ones digit and replace the
# tens digit by a random one (`68;` becomes `18;` or `98;`), score them with `reward_scores`
# against the correct answers of the evaluation prompts, and count how often the RM ranks the
# truth higher. Write your prediction down first, from the second figure.
#
# <details class="answer">
# <summary>Worked answer: predict, then measure</summary>
#
# The prediction from the figure of margins against k: moving the tens digit by $k$ raises the
# margin and the fraction ranked right with $k$, so a random new tens digit, usually several
# steps away, should be ranked right most of the time. The cell below measures it on the
# evaluation prompts whose sum has two digits (for a three-digit sum the tens digit is not the
# leading one), with a new tens digit drawn uniformly from the other nine, skipping a leading
# zero; it prints the fraction ranked right overall and split by how far the tens digit moved.
# The prediction holds in its direction, less well in its size. The truth is ranked higher
# in 0.799 of the pairs, and the groups climb with the distance, from 0.649 for a move of one
# step through 0.720 to 0.958 for a move of four or more. The nearest group lands close to
# the figure's value at k = 1 (0.62), but the middle one sits below the figure's 0.76 and
# 0.86 at k = 2 and 3. Each group has only a few dozen pairs, on two-digit sums only, so its
# fraction is uncertain by several hundredths; and the figure averages over all 400 sums,
# three-digit ones included, whose tens digit is not the leading one. The curve is a guide to
# the trend, not to each group's exact value.
#
# </details>

# %% tags=["hide-input"]
g = make_generator(13)
two = (eval_truth >= 10) & (eval_truth <= 99)  # two-digit sums
truth2 = eval_truth[two]
shift = torch.randint(1, 10, truth2.shape, generator=g)  # 1..9
new_tens = (truth2 // 10 + shift) % 10
wrong2 = new_tens * 10 + truth2 % 10
ok = new_tens > 0  # a leading zero would make a one-digit answer
with torch.no_grad():
    r_w = reward_scores(rm, eval_prompts[two][ok],
                        task.encode_answers(wrong2[ok].tolist()))
right = (r_true[two][ok] > r_w).numpy()
far = (new_tens[ok] - truth2[ok] // 10).abs().numpy()
print(f"{int(ok.sum())} pairs: the truth ranked higher in "
      f"{right.mean():.3f}")
for lo, hi in ((1, 1), (2, 3), (4, 9)):
    sel = (far >= lo) & (far <= hi)
    print(f"  tens digit moved by {lo} to {hi}: {right[sel].mean():.3f} "
          f"({sel.sum()} pairs)")

# %% [markdown]
# **4. A different reading position.** The RM reads its score at the first `;`. What would go
# wrong if it read the score at the last position of the 10-token window instead, after the
# padding? Think about `68;;` and `68;7`.
#
# <details class="answer">
# <summary>Worked answer: a different reading position</summary>
#
# The verifier ignores everything after the first `;`, and so does the completion mask, but a
# score read at the last position would see it. `68;;` and `68;7` are the same answer, yet the
# RM would score them differently, and the tokens after the `;` are exactly the ones the policy
# draws in lockstep and that no loss trains (chapter 3). A policy optimized against that RM
# could raise its score by what it writes after the answer is over: a free channel for reward
# hacking, invisible to the verifier. The reading position would also move with the answer's
# length (a 2-token answer is followed by more padding than a 4-token one), so the RM would
# have to learn the same judgement at different distances from the answer. Reading at the
# first `;` fixes both: it is the first position that has seen the whole answer, and causal
# attention keeps it blind to whatever comes after.
#
# </details>
#
# **5. Temperature of preferences.** Bradley–Terry says a margin of 2 means the chosen answer
# wins with probability $\sigma(2) \approx 0.88$. Our labeller is never unsure. What does that
# do to the scale of the margins as training goes on, and why does it not matter for PPO, which
# normalizes the rewards of each batch?
#
# <details class="answer">
# <summary>Worked answer: temperature of preferences</summary>
#
# A labeller who always prefers the correct answer says the true probability is 1, and the
# Bradley–Terry likelihood reaches 1 only as the margin goes to infinity. Nothing in the loss
# stops the margins from growing: every pair ranked right still has a gradient
# $-\sigma(-\Delta)$, small but never zero, so the scale of the scores keeps growing the longer
# the RM trains. The cell below measures it on the garbage pairs, where the RM is surest:
# their mean margin is 4.89 after 100 steps, the book's RM, and 10.34 after 400, the model of
# exercise 2, more than twice as large, while the share of those pairs ranked right barely
# moved (0.965, then 0.978). The *ranking* is what
# carries information; the scale is an accident of training length. PPO in chapter 5
# standardizes the scores of each batch, subtracting their mean and dividing by their standard
# deviation, so multiplying every score by a constant changes nothing there (apart from the
# clip at $\pm 3$ standard deviations). A trainer that used raw scores would see its effective
# learning rate, and the weight of the KL leash against the reward, change with the RM's
# training length. With noisy labels (exercise 6) the scale has a finite optimum instead.
#
# </details>

# %% tags=["hide-input"]
print("mean margin over the garbage pairs (held out):")
for name, model in (("book's RM, 100 steps", rm), ("400 steps", rm_400)):
    margin = rmlib.pair_margins(model, "random").mean().item()
    print(f"  {name:<22}{margin:+.2f}")

# %% [markdown]
# **6. Label noise.** In the training loop above, swap chosen and rejected for 10% of each
# batch and retrain. How much do the accuracies drop? Real labellers disagree with each other
# far more often than this {cite}`ouyang2022instructgpt`.
#
# <details class="answer">
# <summary>Worked answer: label noise</summary>
#
# `train_rm_with_near_misses` takes a `flip` argument for this; the cell below trains with
# `flip=0.1` (100 steps, no near-misses) and compares with the book's RM. A flipped pair says
# the wrong answer won, but the flips are spread over every kind of pair, so they tell the RM
# nothing systematic about which answers are better. They still cost it a visible part of what
# it learns in 100 steps: the garbage accuracy drops from 0.965 to 0.897 and the tens digit's
# from 0.668 to 0.580, while the ones digit's, barely above a coin toss to begin with, has
# little to lose (0.547, then 0.536). A likely reason is the Bradley–Terry gradient: the RM
# spends its learning on the pairs it still ranks wrong, and once it ranks by size, those
# are mostly the flipped ones, which pull against everything else it has learned. The scale
# changes too: if one pair in ten is flipped, the likelihood is highest where
# $\sigma(\Delta) = 0.9$, a margin of $\log 9$ (printed below), instead of growing without
# limit, so the noise works like a brake on the margins. The last lines show the brake: after
# the same 100 steps the flipped RM's mean margin on the garbage pairs is 1.67, against 4.89
# for the book's RM, below the 2.197 of $\log 9$. Label noise that is *systematic*, a
# labeller who prefers longer answers, say, is a different matter: that the RM learns.
#
# </details>

# %% tags=["hide-input"]
rm_flipped, accuracy_flipped = variant(STEPS, 0.0, flip=0.1)
noisy = {"book's RM": book, "10% flipped": accuracy_flipped}
print("\n".join(accuracy_rows(noisy)))
print(f"margin where sigma = 0.9: log 9 = {np.log(9):.3f}")
print("mean margin over the garbage pairs (held out):")
for name, model in (("book's RM", rm), ("10% flipped", rm_flipped)):
    margin = rmlib.pair_margins(model, "random").mean().item()
    print(f"  {name:<22}{margin:+.2f}")
