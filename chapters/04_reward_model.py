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
# trains the reward model (a few seconds) and saves it under `outputs/models`.
# ```

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from minirlhf import store, task
from minirlhf import reward_model as rmlib
from minirlhf.course.exercises import check
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.experiment import REFERENCE
from minirlhf.model import (GPTConfig, TinyGPT, generate, make_generator,
                            reward_scores)
from minirlhf.palette import BLUE, GREEN, ORANGE, PINK  # safe for color blindness

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the book build or nbval.
PROGRESS = someone_watching()


def signed(x, width=0):
    """Return x with its sign and 2 decimals ('+0.00', never '-0.00')."""
    return f"{round(float(x), 2) + 0.0:>+{width}.2f}"

# %% [markdown]
# ## Preference pairs
#
# InstructGPT's labellers saw several completions of one prompt and ranked them; every two
# completions of a ranking make one training pair, the better one *chosen* and the worse one
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
# the result must be a 0-d tensor within $10^{-4}$ of the value worked by hand.

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
# - **Near-miss accuracy** uses a near-miss instead: `68;` against a number from `58;` to
#   `78;`, a kind of pair the RM was never shown.

# %%
rm, _ = store.load_rm(progress=PROGRESS)
report = rmlib.rm_report(rm)
reference = {"pair accuracy": REFERENCE["rm_pair_accuracy"],
             "near-miss accuracy": REFERENCE["rm_near_miss_accuracy"]}
rows = [str(rmlib.RMConfig()), "",
        "                       this run   book's reference run"]
for name, key in (("pair accuracy", "pair_accuracy"),
                  ("near-miss accuracy", "near_miss_accuracy")):
    rows.append(f"{name:<22} {report[key]:>8.3f}   {reference[name]:>8.3f}")
rows += ["", "mean margin r(correct) - r(wrong), garbage:    "
         + signed(report["margin"]["random"]),
         "mean margin r(correct) - r(wrong), near-miss:  "
         + signed(report["margin"]["near_miss"])]
print("\n".join(rows))

# %% [markdown]
# On the kind of pair it was trained on, the RM is right most of the time and by a wide
# margin. On near-misses it is barely better than a coin toss, and its margin shrinks to
# almost nothing. The same happens in the book's reference run, with somewhat different
# numbers: the scale of RM scores is arbitrary, and a different run lands elsewhere, but the
# gap between the two accuracies is the point.
#
# ## Seeing the blind spot
#
# Split the wrong answers by kind and look at every held-out margin, not just the mean. Four
# kinds: a random wrong number (garbage, as in training); the true sum with the ones digit
# off by one (`68` to `67` or `69`); with the tens digit off by one (`58` or `78`); and an
# answer of the wrong length (`6` or `683`, a digit dropped or added).

# %%
KIND_LABELS = {
    "random": "random garbage\n(as in training)",
    "ones_off_by_one": "ones digit\noff by one",
    "tens_off_by_one": "tens digit\noff by one",
    "wrong_length": "wrong length\n(digit dropped or added)",
}
by_kind = {kind: rmlib.pair_margins(rm, kind).numpy() for kind in KIND_LABELS}
rows = ["kind               pairs   mean margin   ranked right"]
for kind, m in by_kind.items():
    rows.append(f"{kind:<18} {len(m):>5}   {signed(m.mean(), 11)}   "
                f"{(m > 0).mean():>12.3f}")
print("\n".join(rows))

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(8, 4.2), constrained_layout=True)
rng = np.random.default_rng(0)  # horizontal jitter only
colors = [BLUE, ORANGE, PINK, GREEN]
for x, ((kind, m), color) in enumerate(zip(by_kind.items(), colors)):
    ax.scatter(x + rng.uniform(-0.28, 0.28, len(m)), m, s=7, alpha=0.35,
               color=color, lw=0)
    ax.boxplot(m, positions=[x], widths=0.62, showfliers=False,
               medianprops={"color": "black"}, whiskerprops={"color": "grey"},
               capprops={"color": "grey"}, boxprops={"color": "grey"})
    ax.scatter([x], [m.mean()], marker="D", s=46, color="black", zorder=4,
               label="mean" if x == 0 else None)
    ax.annotate(f"mean {signed(m.mean())}\nright {(m > 0).mean():.0%}",
                (x, m.max()), xytext=(0, 6), textcoords="offset points",
                ha="center", va="bottom", fontsize=10)
ax.axhline(0, color="black", lw=0.9, ls="--", label="margin 0: no preference")
ax.set_xticks(range(len(by_kind)), list(KIND_LABELS.values()))
ax.set_ylabel("margin r(correct) − r(wrong)\n(reward-model units)")
ax.set_xlabel("kind of wrong answer (400 held-out prompts each)")
ax.set_ylim(min(m.min() for m in by_kind.values()) - 0.8,
            max(m.max() for m in by_kind.values()) + 3.2)
ax.legend(frameon=False, loc="lower right")
show_figure(
    fig,
    alt="Strip and box plots of the reward model's margin per held-out "
        "pair, by kind of wrong answer. Random garbage: mean "
        f"{signed(by_kind['random'].mean())}, ranked right "
        f"{(by_kind['random'] > 0).mean():.0%}. Ones digit off by one: mean "
        f"{signed(by_kind['ones_off_by_one'].mean())}, "
        f"{(by_kind['ones_off_by_one'] > 0).mean():.0%}. Tens digit off by "
        f"one: mean {signed(by_kind['tens_off_by_one'].mean())}, "
        f"{(by_kind['tens_off_by_one'] > 0).mean():.0%}. Wrong length: mean "
        f"{signed(by_kind['wrong_length'].mean())}, "
        f"{(by_kind['wrong_length'] > 0).mean():.0%}. The two near-miss "
        "kinds sit on the zero line.",
    caption="The reward model's margin r(correct) − r(wrong) on held-out "
            "prompts, per pair (dots), with box and mean (diamond). Above "
            "the dashed line the RM ranks the correct answer higher.",
)

# %% [markdown]
# Garbage and answers of the wrong length are pushed far below the correct answer. The two
# near-miss kinds collapse onto the zero line, and the RM is right about those pairs only a
# little more often than a coin toss would be. Here is one prompt up close, `23+45=`, with
# the RM's score of a handful of answers, from its favourite down:

# %%
a, b = 23, 45
answers = [68, 67, 69, 58, 78, 86, 60, 50, 150, 6, 680]
prompt = task.encode_prompts(torch.tensor([[a, b]] * len(answers)))  # (11, 6)
with torch.no_grad():
    r = reward_scores(rm, prompt, task.encode_answers(answers))  # (11,)
rows = ["answer  RM score  verifier's kind"]
for i in r.argsort(descending=True).tolist():
    text = task.format_answer(answers[i])
    kind = task.answer_kind(a, b, text)
    rows.append(f"{text:<7} {signed(r[i], 8)}  {kind}")
print("\n".join(rows))

# %% [markdown]
# The truth does not stand out from the crowd of answers of about the right size,
# near-misses and other wrong numbers alike; only the answers of the wrong size are pushed
# far down. A policy trained against this RM would be paid about the same for a near-miss as
# for the truth.
#
# ## Why it cannot see near-misses
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
        ("  with a near-miss as the rejected answer", f"{int(near.sum()):,}"),
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
    up_ok = (digit + k <= 9) & (up <= task.MAX_SUM) & (n_digits(up) == length)
    down_ok = (digit - k >= 0) & (n_digits(down) == length)
    coin = torch.rand(truth.shape, generator=g) < 0.5
    use_up = up_ok & (~down_ok | coin)
    return torch.where(use_up, up, down), up_ok | down_ok


eval_pairs = task.eval_pairs()  # (400, 2): held out
eval_truth = eval_pairs.sum(1)
eval_prompts = task.encode_prompts(eval_pairs)
with torch.no_grad():
    correct = task.correct_completions(eval_pairs)  # (400, 4)
    r_true = reward_scores(rm, eval_prompts, correct)  # (400,)
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
    rows += [f"{name}: mean margin  " + "".join(signed(v, 6) for v in margin),
             f"{name}: ranked right " + "".join(f"{v:>6.2f}" for v in ranked)]
print("\n".join(rows))

# %% tags=["hide-input"]
fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4),
                                  constrained_layout=True, sharex=True)
for place, name, color, marker in ((10, "tens digit", BLUE, "o"),
                                    (1, "ones digit", ORANGE, "s")):
    left.plot(ks, moved[place][:, 0], color=color, marker=marker,
              label=f"{name} moved by k")
    right.plot(ks, moved[place][:, 1], color=color, marker=marker,
               label=f"{name} moved by k")
left.axhline(0, color="black", lw=0.9, ls="--")
right.axhline(0.5, color="black", lw=0.9, ls="--")
right.text(9, 0.47, "coin toss", ha="right", va="top", fontsize=9.5)
left.set_ylabel("mean margin r(correct) − r(wrong)\n(reward-model units)")
right.set_ylabel("fraction ranked right")
right.set_ylim(0, 1.02)
for ax in (left, right):
    ax.set_xlabel("k: how far one digit of the true sum is moved")
    ax.set_xticks(ks)
left.legend(frameon=False, loc="upper left")
show_figure(
    fig,
    alt="Two panels against k from 1 to 9. Moving the tens digit by k: "
        f"the mean margin rises from {signed(moved[10][0, 0])} at k = 1 to "
        f"{signed(moved[10][-1, 0])} at k = 9, and the fraction ranked right "
        f"from {moved[10][0, 1]:.2f} to {moved[10][-1, 1]:.2f}. Moving the "
        f"ones digit: the mean margin stays between "
        f"{signed(moved[1][:, 0].min())} and "
        f"{signed(moved[1][:, 0].max())}, and "
        f"the fraction ranked right between {moved[1][:, 1].min():.2f} and "
        f"{moved[1][:, 1].max():.2f}, near a coin toss, for every k.",
    caption="What the RM reads: the size of the answer. Left, its mean "
            "margin when one digit of the true sum is moved by k; right, how "
            "often it still ranks the truth higher.",
)

# %% [markdown]
# The tens digit behaves like a sense of size: the further it moves, the more the RM
# dislikes the answer, and one step away it hardly notices. The ones digit barely registers at
# all, at any distance. The RM has learned roughly how large the sum of two numbers is, which
# is enough for nearly every pair it was shown, and not the last digit, which only the
# arithmetic can tell.
#
# **Capacity and training length.** Getting the ones digit right means actually adding, and
# that is hard for this network in a short run: chapter 3's policy, the same network after
# its short SFT run, writes the correct sum for about a third of the prompts. The RM trains
# for only 100 steps, and, as the Bradley–Terry gradient showed, pairs that are already
# ranked right by a comfortable margin stop contributing, so once the sense of size is good
# enough the loss has little left to push with, and no pair ever points it at the last
# digit. Longer training might sharpen the sense of size enough to catch some tens-digit
# near-misses, but nothing in the data asks for the last digit. The exercises at the end let
# you test both: train longer, or put near-misses into the pairs.
#
# ## What this means for RLHF
#
# Take the partial policy of chapter 3 and score its own greedy answers with the RM, grouped
# by what the verifier says they are.

# %%
policy, _ = store.load_sft(progress=PROGRESS)
greedy = generate(policy, eval_prompts, greedy=True)  # (400, 4)
kinds = task.batch_kinds(eval_pairs, greedy)
with torch.no_grad():
    scores = reward_scores(rm, eval_prompts, greedy).numpy()  # (400,)
rows = ["the policy's answers   count   mean RM score"]
for kind in task.KINDS:
    chosen = np.array([k == kind for k in kinds])
    if chosen.any():
        mean = scores[chosen].mean()
        rows.append(f"{kind:<20} {chosen.sum():>7}   {signed(mean, 13)}")
print("\n".join(rows))

# %% [markdown]
# The policy's near-misses score close to its correct answers, much closer than its other
# wrong answers do. An optimizer that maximizes this RM gains little by turning a near-miss
# into the right answer, and loses little by turning a right answer into a near-miss. That is the reward model chapter
# 5 hands to PPO, next to the verifier, to see which of the two makes the policy better at
# arithmetic. Gao et al. measured the same pattern at scale: optimizing a learned reward
# raises its score past the point where the true quality starts to fall
# {cite}`gao2023scaling`.
#
# ## Summary
#
# - A reward model scores a prompt and a completion with one number; it is trained on pairs,
#   with the Bradley–Terry loss $-\log\sigma(r_c - r_r)$, written with `logsigmoid` so that
#   it stays finite.
# - The loss sees only margins between the completions it is shown. The RM learns whatever
#   separates those pairs most cheaply, here the rough size of the answer.
# - On held-out pairs like its training pairs it is accurate; on near-misses, which its data
#   never contrasted, it is close to a coin toss, and so are its scores of the policy's own
#   near-misses.
#
# ## Exercises
#
# 1. **Put near-misses into the data.** The cell below trains a reward model whose rejected
#    answers are near-misses for a share of each batch. It is switched off so that the
#    chapter runs fast; set `RETRAIN = True` and run it (it trains from scratch). What happens
#    to the tens-digit and the ones-digit near-miss accuracy? Why might one respond faster
#    than the other? Try `NEAR_MISS_SHARE = 1.0`: what happens to the accuracy on garbage?
# 2. **Train longer.** With `NEAR_MISS_SHARE = 0.0`, train for 400 and for 800 steps. Which
#    accuracies move, and which stay where they were? Redraw the figure of margins against
#    k for the longer run.
# 3. **Predict, then measure.** Make rejected answers that keep the ones digit and replace
#    the tens digit by a random one (`68;` becomes `18;` or `98;`), score them with
#    `reward_scores` against the correct answers of the evaluation prompts, and count how
#    often the RM ranks the truth higher. Write your prediction down first, from the second
#    figure.
# 4. **A different reading position.** The RM reads its score at the first `;`. What would go
#    wrong if it read the score at the last position of the 10-token window instead, after
#    the padding? Think about `68;;` and `68;7`.
# 5. **Temperature of preferences.** Bradley–Terry says a margin of 2 means the chosen
#    answer wins with probability $\sigma(2) \approx 0.88$. Our labeller is never unsure. What
#    does that do to the scale of the margins as training goes on, and why does it not matter
#    for PPO, which normalizes the rewards of each batch?
# 6. **Label noise.** In the training loop below, swap chosen and rejected for 10% of each
#    batch and retrain. How much do the accuracies drop? Real labellers disagree with each
#    other far more often than this {cite}`ouyang2022instructgpt`.

# %%
RETRAIN = False  # True: train a reward model with near-misses as negatives
NEAR_MISS_SHARE = 0.5  # share of each batch whose rejected answer is one
STEPS = 100  # the book's RM trains for 100 steps


def train_rm_with_near_misses(steps, share, cfg=None):
    """Return a reward model trained like the book's, except that the
    first `share` of each batch gets a near-miss as its rejected answer."""
    cfg = cfg or rmlib.RMConfig()
    torch.manual_seed(cfg.seed)
    model = TinyGPT(GPTConfig(), scalar_head=True)
    g, pool = make_generator(cfg.seed), task.train_pairs()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    n_near = int(round(share * cfg.batch_size))
    for _ in range(steps):
        # 1. a batch of pairs: correct answer against a wrong one
        batch = task.sample_pairs(cfg.batch_size, g, pool)  # (B, 2)
        prompts, chosen, rejected = rmlib.preference_batch(batch, g)
        if n_near:  # a wrong answer within 10 of the truth
            rejected[:n_near] = task.wrong_answers(batch[:n_near],
                                                   "near_miss", g)
        # 2. score both sides in one forward pass, then the Bradley-Terry step
        scores = reward_scores(model, prompts.repeat(2, 1),
                               torch.cat([chosen, rejected]))  # (2B,)
        r_chosen, r_rejected = scores.chunk(2)
        loss = rmlib.bradley_terry_loss(r_chosen, r_rejected)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
