# %% [markdown]
# # 10. Silent bugs: what the metrics say when the code is wrong
#
# PPO-based RLHF is fiddly. A run with a wrong line rarely crashes: it trains, the reward
# often rises, and the result is quietly worse, or right for the wrong reason. Practitioners
# learn to read a run's metrics by debugging runs like that. {cite}`huang2024nimplementation`
# list the details a correct implementation needs, and Spinning Up's exercises hand the
# reader a run with a planted bug to find {cite}`achiam2018spinningup`. This chapter does the
# same at toy scale, where a run takes seconds.
#
# Seven runs follow, A to G. Each is a real run of the book's engine with **one line of one
# function changed**, a bug of a kind that people have shipped. For each run:
#
# 1. **Look at its dashboard** beside a correct run: the metrics every run logs under TRL's
#    names, each a mean over seeds 0-2 with a 95% band.
# 2. **Name the tell** (exercises 10.1, 10.3, ...): the metric that gives the bug away, and
#    one sentence saying why it moves.
# 3. **See the changed line, and fix it** (exercises 10.2, 10.4, ...). Your fix is planted in
#    the run, which must land back inside the correct run's band.
#
# The chapter ends with the tells measured, which panel moves first, five checks that catch
# every one of these bugs before training, and a debugging checklist.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1 to 9: the leash and its estimators (1, 2, 7), the completion mask (3), PPO's
# ratio and clip (5), GRPO's k3 term (8) and DPO's loss (9). With nothing stored, a first run
# of the notebook took about four and a half minutes on a busy 2-core CPU (it makes 30 runs,
# then plants each of your seven fixes in three more), each long cell with a progress bar in
# JupyterLab. Later runs read the 30 runs back, and only the checks of your fixes run again.
# ```

# %%
import textwrap

import torch
import torch.nn.functional as F

from minirlhf import ppo, store, task
from minirlhf.course.exercises import check
from minirlhf.course.exercises.ch10 import band_report
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.course.runs import stored_bug_runs
from minirlhf.paths import OUTPUTS
from minirlhf.studies import silent_bugs as sb

torch.set_num_threads(1)  # one thread: runs are bit-identical
PROGRESS = someone_watching()  # bars for a person at JupyterLab only

models = store.load_all(progress=PROGRESS)
policy = models["policy"]
# Every bug's run and the correct run of its arm, seeds 0-2, stored.
stored = stored_bug_runs(OUTPUTS / "silent_bugs.json", progress=PROGRESS)
runs = stored["runs"]
# The runs in the chapter's order, by letter.
LETTERS = dict(zip(("no-mask", "pad-is-end", "kl-no-grad", "k1-loss",
                    "ratio-to-reference", "no-temperature",
                    "dpo-rejected-flipped"), "ABCDEFG"))
seeds = ", ".join(runs["correct"]["verifier"])
print(f"{len(sb.BUGS)} runs with a bug; correct runs of "
      f"{', '.join(runs['correct'])}")
print(f"seeds {seeds}")


def dashboard(bug, narrow=False):
    """The run's dashboard beside the correct run; no panel marked."""
    axes = sb.plot_dashboard(runs, bug, label=f"run {LETTERS[bug]}",
                             narrow=narrow, bold=False)
    fig = axes[0].figure
    fig.suptitle(f"Run {LETTERS[bug]} ({sb.BUGS[bug].arm} arm) and a "
                 "correct run", fontsize=10)
    fig.tight_layout()
    return fig


def show_dashboard(bug):
    arm = sb.BUGS[bug].arm
    show_figure(lambda narrow=False: dashboard(bug, narrow),
                alt=f"Eight panels of run {LETTERS[bug]}'s logged metrics "
                    f"against the iteration, in orange, beside a correct "
                    f"run of the {arm} arm in gray, each the mean over "
                    "three seeds with a 95% band.",
                caption=f"Run {LETTERS[bug]} (orange) and the correct "
                        f"{arm} run (gray): seeds 0-2, 95% bands.")


def changed_line(bug):
    """Print the engine's line and the line the bug changed it to."""
    b = sb.BUGS[bug]
    engine, buggy = sb.one_line_diff(b)
    print(f"{b.module}.{b.name}, one line changed:")
    for who, line in (("engine", engine), (f"run {LETTERS[bug]}", buggy)):
        print(textwrap.fill(line, 77, initial_indent=f"  {who}: ",
                            subsequent_indent=" " * 12))


# %% [markdown]
# ## How to name a tell
#
# Each "name the tell" exercise is a function with no arguments that returns a pair of
# strings, `(metric, reason)`:
#
# - `metric` is one of the panel titles of the run's dashboard, as written there (for
#   example `"objective/entropy"`). It must be a metric that the bug moves. For most runs
#   that is a panel where the buggy run parts from the correct one; for three of them (C, D
#   and E) the bug moves its panel by less than three seeds' spread, and the tell is the
#   panel that drifts the way the bug says it should (*The tells, measured* gives the sizes).
# - `reason` is one sentence saying why that metric moves: what the bug must be doing to the
#   loss, the mask or the log-probs. The check looks for the mechanism in your words, not
#   for an exact phrase.
#
# The metrics are those of chapters 5 and 9. `accuracy` and `kl` come from the evaluation on
# the 400 eval prompts: `kl` is the exact per-token KL to the reference. The others are
# logged on each training batch under TRL's names. The hints go from "look at this panel" to
# the answer. Runs A to F are PPO or GRPO runs, and run G is a DPO run.

# %% [markdown]
# ## Run A
#
# The verifier arm of chapter 5, with one line of the engine changed.

# %% tags=["hide-input"]
show_dashboard("no-mask")

# %% [markdown]
# ### Exercise 10.1: name the tell of run A

# %% tags=["solution"]
def tell_no_mask():
    """Return (metric, reason): the panel that gives run A away, and why."""
    # BEGIN SOLUTION
    return ("val/completion_length",
            "every one of the 4 tokens is counted, also those after the "
            "end mark, so the length is always 4")
    # END SOLUTION

# %% [hints] tell_no_mask

# %%
check("tell_no_mask", tell_no_mask);

# %% [markdown]
# **What was wrong: the completion mask is missing.** The mask is all ones, so the loss, the
# leash and every average count the tokens after the first `;` too. Accuracy does not notice:
# the verifier reads the answer only up to its `;`, and the padding that follows is trained
# on the same advantage. The length panel does notice, at exactly 4.0 from the first batch.

# %%
changed_line("no-mask")

# %% [markdown]
# ### Exercise 10.2: fix it
#
# Write `completion_mask` again, as chapter 3 defined it, under the name
# `fix_no_mask(completions)`. It takes token ids
# `(B, 4)` and returns a float tensor `(B, 4)` with 1 on each token up to and including the
# first `;`, and 0 after it. An answer with no `;` keeps all four tokens. The two lines above
# yours are the engine's.

# %% tags=["solution"]
def fix_no_mask(completions):
    """Return the float mask (B, 4): 1 up to and including the first `;`."""
    is_end = (completions == task.SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end  # ';' strictly before
    # BEGIN SOLUTION
    return (ends_before == 0).float()
    # END SOLUTION

# %% [hints] fix_no_mask

# %%
check("fix_no_mask", fix_no_mask);

# %% [markdown]
# Passing the check is not the end: the same function now goes back into the run. The next
# cell plants your function where the engine's `completion_mask` was, runs the verifier arm
# for seeds 0-2, and compares the tells with the correct run's band. Every "fix it" below
# ends the same way.

# %%
print(band_report("no-mask", fix_no_mask, runs, progress=PROGRESS))

# %% [markdown]
# ## Run B
#
# The verifier arm again, with another line changed.

# %% tags=["hide-input"]
show_dashboard("pad-is-end")

# %% [markdown]
# ### Exercise 10.3: name the tell of run B

# %% tags=["solution"]
def tell_pad_is_end():
    """Return (metric, reason): the panel that gives run B away, and why."""
    # BEGIN SOLUTION
    return ("val/completion_length",
            "the end mark is masked out as if it were padding, so each "
            "answer counts one token less")
    # END SOLUTION

# %% [hints] tell_pad_is_end

# %%
check("tell_pad_is_end", tell_pad_is_end);

# %% [markdown]
# **What was wrong: the end mark is taken for padding.** The mask is `token != pad`, the usual
# way to build an attention mask, but here the pad is the end mark `;`. Every `;` is dropped,
# including the one that ends the answer, and a token after it is kept. The policy is never
# trained to end its answer. In this world the end mark comes easily, so accuracy holds over
# 25 iterations; in a chat model, answers that never stop are the classic symptom. Chapter 3's
# choice of `;` as both end mark and padding is what makes this bug easy to write.

# %%
changed_line("pad-is-end")

# %% [markdown]
# ### Exercise 10.4: fix it
#
# The same contract as exercise 10.2, as `fix_pad_is_end(completions)`. This time the buggy
# line was `return (completions != task.SEMI).float()`.

# %% tags=["solution"]
def fix_pad_is_end(completions):
    """Return the float mask (B, 4): 1 up to and including the first `;`."""
    is_end = (completions == task.SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end  # ';' strictly before
    # BEGIN SOLUTION
    return (ends_before == 0).float()
    # END SOLUTION

# %% [hints] fix_pad_is_end

# %%
check("fix_pad_is_end", fix_pad_is_end);

# %%
print(band_report("pad-is-end", fix_pad_is_end, runs, progress=PROGRESS))

# %% [markdown]
# ## Run C
#
# GRPO's verifier arm of chapter 8, whose leash is $\beta$ times a k3 term in the loss, with
# one line changed.

# %% tags=["hide-input"]
show_dashboard("kl-no-grad")

# %% [markdown]
# ### Exercise 10.5: name the tell of run C

# %% tags=["solution"]
def tell_kl_no_grad():
    """Return (metric, reason): the panel that gives run C away, and why."""
    # BEGIN SOLUTION
    return ("kl",
            "the KL term reaches the loss but not the gradient, so nothing "
            "pulls the policy back and the KL keeps growing")
    # END SOLUTION

# %% [hints] tell_kl_no_grad

# %%
check("tell_kl_no_grad", tell_kl_no_grad);

# %% [markdown]
# **What was wrong: the KL term carries no gradient.** The policy's log-probs are detached
# inside the k3 term, as if it were computed under `torch.no_grad()`. The loss still shows
# the leash's value, but its gradient is zero, so the run is GRPO with $\beta = 0$. The exact
# KL of the evaluation drifts above the correct run's as the run goes on, but over seeds 0-2
# it never leaves the correct run's band, and accuracy looks fine. In this arm, over 25
# iterations, taking the leash away moves the KL by less than the spread of three seeds: of
# the seven bugs, this is the one the dashboard does not show. The check of the leash's
# gradient before training finds it at once.

# %%
changed_line("kl-no-grad")

# %% [markdown]
# ### Exercise 10.6: fix it
#
# Write `k3_loss_term` again, as `fix_kl_no_grad(new_logp, ref_logp, mask, kl_clamp=10.0)`:
# the masked mean of
# $e^{d} - d - 1$, with $d$ = `ref_logp - new_logp` clamped to $\pm$`kl_clamp`, and its
# gradient through `new_logp`. The inputs are `(B, T)` tensors, and you return a 0-d tensor.
# The body is two lines.

# %% tags=["solution"]
def fix_kl_no_grad(new_logp, ref_logp, mask, kl_clamp=10.0):
    """Return the mean over masked tokens of k3 = exp(d) - d - 1."""
    # BEGIN SOLUTION
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    # END SOLUTION

# %% [hints] fix_kl_no_grad

# %%
check("fix_kl_no_grad", fix_kl_no_grad);

# %%
print(band_report("kl-no-grad", fix_kl_no_grad, runs, progress=PROGRESS))

# %% [markdown]
# ## Run D
#
# GRPO's verifier arm again.

# %% tags=["hide-input"]
show_dashboard("k1-loss")

# %% [markdown]
# ### Exercise 10.7: name the tell of run D

# %% tags=["solution"]
def tell_k1_loss():
    """Return (metric, reason): the panel that gives run D away, and why."""
    # BEGIN SOLUTION
    return ("kl",
            "the leash term's expected gradient is zero, so it pulls "
            "nowhere and the KL grows as if there were no leash")
    # END SOLUTION

# %% [hints] tell_k1_loss

# %%
check("tell_k1_loss", tell_k1_loss);

# %% [markdown]
# **What was wrong: k1 as the loss term.** The leash is the mean of k1 = $\log\pi - \log
# \pi_\text{ref}$ over the sampled tokens. As an estimate of the KL's value, k1 is unbiased
# (chapter 1). As a loss, its gradient is $\nabla \log \pi$ of the sampled tokens. On average
# that is $\sum_y \pi(y)\,\nabla\log\pi(y) = \nabla \sum_y \pi(y) = 0$: the leash pulls nowhere.
# Chapter 7 shows the same trap from the other side, with k3 in the reward.

# %%
changed_line("k1-loss")

# %% [markdown]
# ### Exercise 10.8: fix it
#
# The same contract as exercise 10.6, as `fix_k1_loss`. This time the line that computes `d`
# was right, and the return line was wrong; write the whole body again.

# %% tags=["solution"]
def fix_k1_loss(new_logp, ref_logp, mask, kl_clamp=10.0):
    """Return the mean over masked tokens of k3 = exp(d) - d - 1."""
    # BEGIN SOLUTION
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    # END SOLUTION

# %% [hints] fix_k1_loss

# %%
check("fix_k1_loss", fix_k1_loss);

# %%
print(band_report("k1-loss", fix_k1_loss, runs, progress=PROGRESS))

# %% [markdown]
# ## Run E
#
# GRPO's verifier arm, with a line of its loss changed.

# %% tags=["hide-input"]
show_dashboard("ratio-to-reference")

# %% [markdown]
# ### Exercise 10.9: name the tell of run E

# %% tags=["solution"]
def tell_ratio_to_reference():
    """Return (metric, reason): the panel that gives run E away, and why."""
    # BEGIN SOLUTION
    return ("kl",
            "the clip compares the policy with the reference, so once a "
            "token has moved 20% from the start its gradient stops and "
            "the policy stays near the reference")
    # END SOLUTION

# %% [hints] tell_ratio_to_reference

# %%
check("tell_ratio_to_reference", tell_ratio_to_reference);

# %% [markdown]
# **What was wrong: the ratio is taken against the reference.** PPO's ratio compares the policy
# now with the policy that sampled the batch, so that the clip bounds one update (chapter 5).
# Taken against the frozen reference, the clip bounds the whole run instead. A token whose
# probability has moved 20% from the start gets no more gradient in the direction it was
# going. The run stays close to the reference: its exact KL flattens early and low. In these
# runs that costs no accuracy, though. Run E's accuracy follows the correct run's, so the
# reference answer above names a panel that does not give the bug away here (the table at
# the end: -0.003 ± 0.040); `kl` is the panel that shows it, and only late, because the
# correct run's band is wide. The logged `policy/clipfrac_avg` does not show it either: the
# engine logs the clip against the sampling policy, as TRL does, and that is not what this
# loss clipped.

# %%
changed_line("ratio-to-reference")

# %% [markdown]
# ### Exercise 10.10: fix it
#
# Write GRPO's loss `grpo_token_loss` again, as `fix_ratio_to_reference`, with the contract
# of exercise 8.2. The leash term is given, and the clipped surrogate (`ppo.ppo_token_loss`)
# is the line to write.

# %% tags=["solution"]
def fix_ratio_to_reference(new_logp, old_logp, ref_logp, advantages, mask,
                           epsilon=0.2, beta=0.04, kl_clamp=10.0):
    """Return the clipped surrogate plus beta times the mean k3."""
    leash = ppo.k3_loss_term(new_logp, ref_logp, mask, kl_clamp)
    # BEGIN SOLUTION
    surrogate = ppo.ppo_token_loss(new_logp, old_logp, advantages, mask,
                                   epsilon)
    # END SOLUTION
    return surrogate + beta * leash

# %% [hints] fix_ratio_to_reference

# %%
check("fix_ratio_to_reference", fix_ratio_to_reference);

# %%
print(band_report("ratio-to-reference", fix_ratio_to_reference, runs,
                  progress=PROGRESS))

# %% [markdown]
# ## Run F
#
# Chapter 5's verifier arm, with one line changed in a function that many stages call.

# %% tags=["hide-input"]
show_dashboard("no-temperature")

# %% [markdown]
# ### Exercise 10.11: name the tell of run F

# %% tags=["solution"]
def tell_no_temperature():
    """Return (metric, reason): the panel that gives run F away, and why."""
    # BEGIN SOLUTION
    return ("objective/kl",
            "the log-probs are taken at temperature 1 while the answers are "
            "sampled at 0.7, so the logged KL is computed on the wrong "
            "distribution")
    # END SOLUTION

# %% [hints] tell_no_temperature

# %%
check("tell_no_temperature", tell_no_temperature);

# %% [markdown]
# **What was wrong: the log-probs leave out the temperature.** The answers are sampled from
# softmax(logits / 0.7), but the ratio, the leash and the logged KL use log-probs at
# temperature 1. The gradient is that of another distribution than the one that wrote the
# answers. The logged `objective/kl` is lower than the correct run's on average over the
# run (see *The tells, measured* below), though no stretch of it leaves the band. The exact
# KL of the evaluation, computed at 0.7, does the opposite: it rises faster than the correct
# run's in the first iterations, and ends a little higher. Two KLs that disagree are the
# sign. A check before training finds the bug at once.

# %%
changed_line("no-temperature")

# %% [markdown]
# ### Exercise 10.12: fix it
#
# Write `logprobs_from_logits` again, as `fix_no_temperature(logits, tokens,
# temperature=1.0)`: the log-probability of each token under softmax(logits / temperature).
# It takes logits `(B, T, 13)` and token ids `(B, T)`, and returns `(B, T)`.

# %% tags=["solution"]
def fix_no_temperature(logits, tokens, temperature=1.0):
    """Return log p(token) under softmax(logits / temperature)."""
    # BEGIN SOLUTION
    logp = F.log_softmax(logits / temperature, dim=-1)
    # END SOLUTION
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

# %% [hints] fix_no_temperature

# %%
check("fix_no_temperature", fix_no_temperature);

# %%
print(band_report("no-temperature", fix_no_temperature, runs,
                  progress=PROGRESS))

# %% [markdown]
# ## Run G
#
# Chapter 9's DPO arm, with one line of its loss changed. A DPO run logs its own metrics
# (chapter 9): the implicit rewards of the chosen and rejected answers, their margin, how
# often the chosen one wins, and the log-probs of both.

# %% tags=["hide-input"]
show_dashboard("dpo-rejected-flipped")

# %% [markdown]
# ### Exercise 10.13: name the tell of run G

# %% tags=["solution"]
def tell_dpo_rejected_flipped():
    """Return (metric, reason): the panel that gives run G away, and why."""
    # BEGIN SOLUTION
    return ("logps/rejected",
            "the rejected answer's log-ratio has the wrong sign, so the "
            "loss also rewards raising the rejected answer, and its "
            "log-prob rises")
    # END SOLUTION

# %% [hints] tell_dpo_rejected_flipped

# %%
check("tell_dpo_rejected_flipped", tell_dpo_rejected_flipped);

# %% [markdown]
# **What was wrong: DPO's rejected log-ratio is the wrong way round.** It is computed as
# reference minus policy, so the margin is the sum of the two log-ratios, and the loss falls
# when the policy raises *both* answers. The run still gains accuracy, less than the correct
# run, but it no longer learns a preference: `logps/rejected` rises where the correct run's
# falls, `logps/chosen` does not rise, and `rewards/accuracies` falls to near 0. This is the
# one-term slip of exercise 9.1, and the reason that exercise names it.

# %%
changed_line("dpo-rejected-flipped")

# %% [markdown]
# ### Exercise 10.14: fix it
#
# Write `dpo_loss` again, as `fix_dpo_rejected_flipped`, with the contract of exercise 9.1.
# The chosen log-ratio and the loss are given, and the rejected log-ratio is the line to
# write.

# %% tags=["solution"]
def fix_dpo_rejected_flipped(policy_chosen_logps, policy_rejected_logps,
                             ref_chosen_logps, ref_rejected_logps, beta=0.1):
    """Return DPO's loss: the mean of -log sigmoid(beta * margin)."""
    chosen = policy_chosen_logps - ref_chosen_logps
    # BEGIN SOLUTION
    rejected = policy_rejected_logps - ref_rejected_logps
    # END SOLUTION
    return -F.logsigmoid(beta * (chosen - rejected)).mean()

# %% [hints] fix_dpo_rejected_flipped

# %%
check("fix_dpo_rejected_flipped", fix_dpo_rejected_flipped);

# %%
print(band_report("dpo-rejected-flipped", fix_dpo_rejected_flipped, runs,
                  progress=PROGRESS))

# %% [markdown]
# ## The tells, measured
#
# For each bug, the metrics named as its tells, reduced to one number a run (the mean over the
# run; for `accuracy` and `kl`, the mean after the start). Each cell is a mean over seeds 0-2,
# and the last column is the paired difference, buggy minus correct, seed by seed, with its
# 95% interval. A tell *separates* the runs when that interval excludes 0.

# %%
table = sb.tell_table(runs, bugs=list(LETTERS))
print(f"{'run':<4} {'tell':<22} {'correct':>9} {'buggy':>9} "
      f"{'difference':>18}")
for bug, rows in table.items():
    for metric, row in rows.items():
        diff, half = row["difference"]
        verdict = "separates" if row["separates"] else "DOES NOT"
        print(f"{LETTERS[bug]:<4} {metric:<22} {row['correct'][0]:>9.3f} "
              f"{row['buggy'][0]:>9.3f} {diff:>+9.3f} ± {half:.3f}  "
              f"{verdict}")

# %% [markdown]
# ## Which panel moves first
#
# Over seeds 0-2, the tells of runs A, B, F and G separate. Those of runs C, D and E do not.
# Their KL differences have the sign the bug predicts (more KL in runs C and D, less in run
# E), but three seeds do not tell them from noise, and run E's accuracy does not move at all.
#
# A dashboard is read while the run goes on, so it matters *when* a tell shows. For each run,
# the first points at which a panel leaves the correct run's band and stays out for three
# points (an iteration of PPO or GRPO; for DPO, a step of its own logs, or an evaluation for
# `accuracy` and `kl`; at most three panels a run, `-` when none does):

# %%
for bug in LETTERS:
    metrics = sb.DASHBOARD[sb._trainer(sb.BUGS[bug].arm)]
    first = {m: sb.first_departure(runs, bug, m) for m in metrics}
    moved = sorted((i, m) for m, i in first.items() if i is not None)
    shown = ", ".join(f"{m} at {i}" for i, m in moved[:3]) or "-"
    print(f"run {LETTERS[bug]} ({bug}):\n    {shown}")

# %% [markdown]
# Three kinds of bug show three ways:
#
# - **A wrong mask** (runs A and B) shows in the first batch, in `val/completion_length`, the
#   mask's own sum. `objective/entropy`, another average over the mask, leaves the band at
#   once in run B and by iteration 5 in run A.
# - **A leash that does not hold** (runs C and D) shows late, if at all, and only in the KL.
#   Run D's exact `kl` leaves the band at iteration 21, when most of the run is spent (its
#   noisier `objective/kl` is out earlier, from iteration 5). Run C's never leaves it.
# - **A wrong loss** shows in what the loss moves. Run E's KL flattens early, but the correct
#   run's band is wide, and it leaves the band only at iteration 20. Run G's DPO logs are the
#   wrong way up from the first step.
#
# Run F's log-probs at the wrong temperature show early in the exact `kl`, from iteration 3,
# before it comes back into the band. And one bug does not show on the dashboard point by
# point at all: run C.

# %% [markdown]
# ## Checks before training
#
# Most of these bugs can be caught before a single update, with a few passes on the starting
# policy. `minirlhf.studies.silent_bugs.CHECKS` holds five such checks, and each reads the
# engine's functions the way a run does:
#
# - **mask:** a few answers printed with their masked tokens shown as `.`, compared with the
#   text's first `;`.
# - **log-probs:** the log-probs the loss uses are those of the sampler, at its temperature.
# - **ratio:** on the first update of a batch, before any step, the ratio is exactly 1, so the
#   loss equals minus the mean advantage, even when the policy has moved from the reference.
# - **leash gradient:** the leash term is given every possible first token, weighted by its
#   probability, so that it is its own expectation. Its gradient must then match the gradient
#   of the exact KL.
# - **DPO gradient:** at the start, DPO's loss is $\log 2$, and its gradient raises the chosen
#   answer and lowers the rejected one.
#
# The table runs every check on the engine and with each bug planted:

# %%
names = list(sb.CHECKS)
short = {"leash gradient": "leash grad.", "DPO gradient": "DPO grad."}
print(f"{'':<9}" + "".join(f"{short.get(n, n):>12}" for n in names))
for bug in [None, *LETTERS]:
    results = sb.run_checks(policy, None if bug is None else sb.BUGS[bug])
    label = "engine" if bug is None else f"run {LETTERS[bug]}"
    marks = "".join(f"{'ok' if results[n][0] else 'CAUGHT':>12}"
                    for n in names)
    print(f"{label:<9}{marks}")
print("\nWhat the mask check shows, on the engine and on run B:")
print("  engine:", sb.check_mask(policy)[1])
with sb.planted(sb.BUGS["pad-is-end"]):
    print("  run B: ", sb.check_mask(policy)[1])

# %% [markdown]
# The engine passes all five, and every bug fails at least one. Run C, which no panel showed,
# fails the leash-gradient check, and run F fails two. The checks cost a second. Together they
# cover what a dashboard shows late or not at all.
#
# ## A debugging checklist
#
# Distilled from the seven runs.
#
# **Before training:**
#
# - Print a few masks as characters. The kept tokens must end with the end mark, and nothing
#   after it may be kept.
# - Check that the first update's ratio is exactly 1, and that the first KL is 0 (the policy
#   is the reference).
# - Check that the log-probs in the loss are the sampler's, temperature included.
# - Check that the leash's gradient points back to the reference. Zero is a bug, and so is
#   a gradient that is right only on average over many runs.
#
# **While training, panel by panel:**
#
# - `val/completion_length` flat at the maximum, or one token short of what the answers
#   should be: the mask.
# - `objective/entropy` off a healthy run's from the first batch, up or down: the mask.
# - The exact KL creeping above a healthy run's late in the run: the leash has no gradient, or
#   one that is zero on average. Over a few seeds it may stay inside the band, so check the
#   leash's gradient before training instead.
# - The KL flattens early and stays low: the clip is measured against the wrong policy.
# - `objective/kl` disagrees with an exact KL on the same answers: the log-probs in the loss
#   are not the sampler's.
# - DPO's `rewards/accuracies` near 0, or `logps/rejected` rising: a sign in the loss.
#
# **Always:** compare with a healthy run. Five of these runs (A, B, C, E and F) ended with
# about the correct run's accuracy. Only a baseline with bands over seeds tells what is
# normal, and that is how every dashboard above was read. Three seeds are not always enough:
# they did not separate the tells of runs C, D and E.
