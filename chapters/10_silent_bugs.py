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
#    names, each a mean over seeds 0-4 with a 95% band.
# 2. **Name the tell**: the metric that gives the bug away, and what the changed line must be
#    doing, picked from a list.
# 3. **See the changed line, and fix it.** Your fix is planted in the run, which must land
#    back inside the correct run's band.
#
# The chapter ends with the tells measured, which panel moves first, five checks that catch
# every one of these bugs before training, a debugging checklist, and six common bugs that it
# does not plant.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1 to 9: the leash and its estimators (1, 2, 7), the completion mask (3), PPO's
# ratio and clip (5), GRPO's k3 term (8) and DPO's loss (9). With nothing stored, a first run
# of the notebook takes about seven minutes on a 2-core CPU: it makes 50 runs (seven with a
# bug and three correct ones, for five seeds), then plants your fixes in each of the seven
# runs, for the same five seeds, each long cell with a progress bar in JupyterLab. Later runs
# read the 50 runs back, and only the runs of your fixes are made again (about four minutes).
# The runs are named by letter only: what each bug is, is for you to find.
# ```

# %%
import textwrap

import torch
import torch.nn.functional as F

from minirlhf import store, task
from minirlhf.course.exercises import check
from minirlhf.course.exercises import ch10
from minirlhf.course.exercises.ch10 import band_report
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.course.runs import stored_bug_runs
from minirlhf.experiment import run_arm
from minirlhf.leashes import loss as loss_leash
from minirlhf.leashes import reward as reward_leash
from minirlhf.arms import REGISTRY
from minirlhf.ppo import PPOConfig
from minirlhf.stats import mean_ci95
from minirlhf.studies import silent_bugs as sb

torch.set_num_threads(1)  # one thread: runs are bit-identical
PROGRESS = someone_watching()  # bars for a person at JupyterLab only

models = store.load_all(progress=PROGRESS)
policy = models["policy"]
# Every bug's run and the correct run of its arm, seeds 0-4, stored.
stored = stored_bug_runs(ch10.RUNS_FILE, ch10.SEEDS, progress=PROGRESS)
runs = stored["runs"]
seeds = ", ".join(runs["correct"]["verifier"])
print(f"{len(ch10.RUNS)} runs with a bug, {', '.join(ch10.RUNS)}")
print(f"correct runs of {', '.join(runs['correct'])}")
print(f"seeds {seeds}")


def dashboard(letter, narrow=False):
    """Run ``letter``'s dashboard beside the correct run; no panel marked."""
    arm = sb.BUGS[ch10.bug_of(letter)].arm
    axes = sb.plot_dashboard(runs, ch10.bug_of(letter),
                             label=f"run {letter}", narrow=narrow,
                             bold=False)
    fig = axes[0].figure
    fig.suptitle(f"Run {letter} ({arm} arm) and a correct run", fontsize=10)
    fig.tight_layout()
    return fig


def show_dashboard(letter):
    arm = sb.BUGS[ch10.bug_of(letter)].arm
    x = sb.X_LABEL[sb._trainer(arm)]
    show_figure(lambda narrow=False: dashboard(letter, narrow),
                alt=f"Eight panels of run {letter}'s logged metrics "
                    f"against the {x}, in orange, beside a correct "
                    f"run of the {arm} arm in gray, each the mean over "
                    "five seeds with a 95% band.",
                caption=f"Run {letter} (orange) and the correct "
                        f"{arm} run (gray): seeds 0-4, 95% bands.")


def compare(letter, metric=None):
    """Print the whole-run paired test of run ``letter`` against the
    correct run."""
    print(ch10.compare(letter, runs, metric))


_free = {}


def free_run(arm, seed=0):
    """The log of a correct run of ``arm`` with no leash (beta = 0), made
    once per arm and seed."""
    if (arm, seed) not in _free:
        _free[arm, seed] = run_arm(arm, policy, models["rm"], seed, 0.0,
                                   PPOConfig(), progress=PROGRESS)[1]
    return _free[arm, seed]


def unleashed(letter, seed=0):
    """Say panel by panel whether run ``letter``'s curve for ``seed`` is
    the correct run of its arm with no leash (beta = 0), digit for
    digit."""
    bug = ch10.bug_of(letter)
    arm = sb.BUGS[bug].arm
    if sb._trainer(arm) == "dpo":
        print(f"run {letter} is a DPO run: its beta is not a leash that can "
              "be taken away")
        return
    free = free_run(arm, seed)
    ours = runs[bug][str(seed)]
    print(f"run {letter} against the {arm} arm with beta = 0, seed {seed}:")
    for metric in sb.DASHBOARD[sb._trainer(arm)]:
        a, b = ours[metric], free[metric]
        gap = max(abs(x - y) for x, y in zip(a, b))
        same = ("the same, digit for digit" if list(a) == list(b)
                else f"differs, by up to {gap:.3g}")
        print(f"  {metric:<22} {same}")


def changed_line(letter):
    """Print the line that run ``letter``'s bug changed, as the run has
    it."""
    b = sb.BUGS[ch10.bug_of(letter)]
    _, buggy = sb.one_line_diff(b)
    print(f"run {letter}: one line of {b.module}.{b.name} is now")
    print(textwrap.fill(buggy, 77, initial_indent="  ",
                        subsequent_indent="      "))


# %% [markdown]
# ## How to name a tell
#
# Each "name the tell" exercise is a function with no arguments that returns
# `(metric, mechanism)`, or `(metric, mechanism, note)`:
#
# - `metric` is a panel of the run's dashboard, its title written as there (for example
#   `"objective/entropy"`), that **separates** the run from the correct one. Panels are read
#   over the whole run: each panel's mean over the run (for `accuracy` and `kl`, after the
#   start), seed by seed, buggy minus correct, as chapter 5 compared its arms. The panel
#   separates the runs when the 95% interval of those five differences excludes 0.
#   `compare("A")` prints that test for every panel of run A, and `compare("A", "accuracy")`
#   for one (below). Any panel that separates is a right answer. When no panel does, the
#   answer is `None`: over five seeds, that bug does not show on the dashboard. The check
#   measures which panels separate on the runs stored above, when it runs: the answers are
#   not written anywhere in advance.
# - `mechanism` is the number of what the changed line does, from the list below. It holds
#   every run's bug and three that no run has, in no particular order. Pick the one that would
#   move the panels the way they moved, and leave the others where they are.
# - `note`, if you want one, is your own sentence saying why. The check does not grade it.
#
# The metrics are those of chapters 5 and 9. `accuracy` and `kl` come from the evaluation on
# the 400 eval prompts: `kl` is the exact per-token KL to the reference. The others are
# logged on each training batch under TRL's names. Runs A to F are PPO or GRPO runs, and run
# G is a DPO run. All the panels of a dashboard share one x axis: the iteration for PPO and
# GRPO (point 0 of `accuracy` and `kl` is the start, before any update), and the step for DPO,
# whose evaluation comes every few steps and is drawn at its step. The hints go from "look at
# this panel" to the answer, and a run's answer is told in full, folded, after its check.

# %%
compare("A", "accuracy")

# %% [markdown]
# The mechanisms to pick from:

# %%
for number, text in ch10.MECHANISMS:
    print(textwrap.fill(text, 77, initial_indent=f"{number:>2}. ",
                        subsequent_indent="    ", break_on_hyphens=False))

# %% [markdown]
# ## Run A
#
# The verifier arm of chapter 5, with one line of the engine changed.

# %% tags=["hide-input"]
show_dashboard("A")

# %% [markdown]
# ### Exercise 10.1: name the tell of run A

# %% tags=["solution"]
def tell_run_a():
    """Return (metric, mechanism, note): the panel that gives run A away,
    the number of its mechanism, and why (not graded)."""
    # BEGIN SOLUTION
    return ("val/completion_length", 6,
            "every one of the 4 tokens is counted, also those after the end "
            "mark, so the length is always 4")
    # END SOLUTION

# %% [hints] tell_run_a

# %%
check("tell_run_a", tell_run_a);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run A</summary>
#
# **The completion mask is missing** (mechanism 6). The mask is all ones, so the loss, the
# leash and every average count the tokens after the first `;` too. Accuracy does not
# notice: the verifier reads the answer only up to its `;`, and the padding that follows is
# trained on the same advantage. The length panel does notice, at exactly 4 from the first
# batch, and five more panels separate the runs over the whole run (`compare("A")`), among
# them `objective/entropy`, another average over the mask.
#
# </details>

# %%
changed_line("A")

# %% [markdown]
# ### Exercise 10.2: fix it
#
# Write `completion_mask` again, as chapter 3 defined it, under the name
# `fix_run_a(completions)`. It takes token ids `(B, 4)` and returns a float tensor `(B, 4)`
# with 1 on each token up to and including the first `;`, and 0 after it. An answer with no
# `;` keeps all four tokens. The two lines above yours are the engine's.

# %% tags=["solution"]
def fix_run_a(completions):
    """Return the float mask (B, 4): 1 up to and including the first `;`."""
    is_end = (completions == task.SEMI).long()
    ends_before = torch.cumsum(is_end, dim=1) - is_end  # ';' strictly before
    # BEGIN SOLUTION
    return (ends_before == 0).float()
    # END SOLUTION

# %% [hints] fix_run_a

# %%
check("fix_run_a", fix_run_a);

# %% [markdown]
# Passing the check is not the end: the same function now goes back into the run. The next
# cell plants your function where the engine's `completion_mask` was and runs the verifier arm
# for seeds 0-4. First it says whether each seed's run is the correct run digit for digit:
# the engine is deterministic, so a fix that computes what the engine's function computes
# gives the correct runs exactly, and that is the real proof of a fix. Then, on each panel
# that separates the bug's run (measured on the stored runs, as the checks of the tells
# measure them), it prints your runs' value and the bug's own beside the correct runs' band.
# That band is of one number a run, each panel's mean over the run (as in `compare`): the
# correct runs' mean over seeds with its 95% half-width, not the band drawn point by point
# on the dashboard. A fix that lands in the band without the same digits computes something
# a little different somewhere. Every "fix it" below ends the same way.

# %%
print(band_report("A", fix_run_a, runs, progress=PROGRESS))

# %% [markdown]
# ## Run B
#
# The verifier arm again, with another line changed.

# %% tags=["hide-input"]
show_dashboard("B")

# %% [markdown]
# ### Exercise 10.3: name the tell of run B

# %% tags=["solution"]
def tell_run_b():
    """Return (metric, mechanism, note): the panel that gives run B away,
    the number of its mechanism, and why (not graded)."""
    # BEGIN SOLUTION
    return ("val/completion_length", 2,
            "the end mark is masked out as if it were padding, so each "
            "answer counts one token less")
    # END SOLUTION

# %% [hints] tell_run_b

# %%
check("tell_run_b", tell_run_b);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run B</summary>
#
# **The end mark is taken for padding** (mechanism 2). The mask is `token != pad`, the usual
# way to build an attention mask, but here the pad is the end mark `;`. Every `;` is dropped,
# including the one that ends the answer, and a token after it is kept. The policy is never
# trained to end its answer. In this world the end mark comes easily, so accuracy holds over
# 25 iterations; in a chat model, answers that never stop are the classic symptom. Chapter
# 3's choice of `;` as both end mark and padding is what makes this bug easy to write.
#
# </details>

# %%
changed_line("B")

# %% [markdown]
# ### Your fix, in run B
#
# Run B broke the function you wrote again in exercise 10.2, another way. A mask right on
# every input is right for both runs, so your `fix_run_a` goes into run B as it is:

# %%
print(band_report("B", fix_run_a, runs, progress=PROGRESS))

# %% [markdown]
# ## Run C
#
# GRPO's reward-model arm of chapter 8 (`grpo-rm`), whose leash is $\beta$ times a k3 term in
# the loss, with one line changed. This arm is chosen for the leash bugs because its leash
# binds: the next cell runs it with $\beta = 0$ for one seed, and its KL ends several times
# the correct run's.

# %%
free = free_run("grpo-rm", 0)
leashed = runs["correct"]["grpo-rm"]["0"]
print("grpo-rm, seed 0: exact KL to the reference at the end")
beta = REGISTRY["grpo-rm"].beta
print(f"  beta = {beta} (the arm's): {leashed['kl'][-1]:.4f}")
print(f"  beta = 0:{'':14}{free['kl'][-1]:.4f}  "
      f"({free['kl'][-1] / leashed['kl'][-1]:.1f} times)")

# %% tags=["hide-input"]
show_dashboard("C")

# %% [markdown]
# For the leash bugs, one more tool: `unleashed("C")` runs the correct arm with no leash at
# all, $\beta = 0$, for seed 0, and says panel by panel whether run C's seed 0 is that run,
# digit for digit. What would each mechanism of the list predict?

# %%
unleashed("C")

# %% [markdown]
# ### Exercise 10.4: name the tell of run C

# %% tags=["solution"]
def tell_run_c():
    """Return (metric, mechanism, note): the panel that gives run C away
    (None if none does), the number of its mechanism, and why (not
    graded)."""
    # BEGIN SOLUTION
    return ("kl", 7,
            "the run is the run with beta = 0 digit for digit: the leash "
            "has a value but no gradient")
    # END SOLUTION

# %% [hints] tell_run_c

# %%
check("tell_run_c", tell_run_c);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run C</summary>
#
# **The KL term carries no gradient** (mechanism 7). The policy's log-probs are detached
# inside the k3 term, as if it were computed under `torch.no_grad()`. The loss still shows
# the leash's value, but its gradient is zero, so every step is the step of GRPO with
# $\beta = 0$: the run is the unleashed run to the last digit, as `unleashed("C")` printed.
# Both KL panels end several times the correct run's, and accuracy pays for the drift (the
# table at the end). Mechanism 1, k1 as the loss, would also loosen the leash, but its
# gradient is zero only on average: in each batch it pushes, so its run would not be the
# unleashed run digit for digit. The check of the leash's gradient before training finds
# this bug at once.
#
# </details>

# %%
changed_line("C")

# %% [markdown]
# ### Exercise 10.5: fix it
#
# Write `k3_loss_term` again, as `fix_run_c(new_logp, ref_logp, mask, kl_clamp=10.0)`: the
# masked mean of $e^{d} - d - 1$, with $d$ = `ref_logp - new_logp` clamped to
# $\pm$`kl_clamp`, and its gradient through `new_logp`. The inputs are `(B, T)` tensors, and
# you return a 0-d tensor. The body is two lines.

# %% tags=["solution"]
def fix_run_c(new_logp, ref_logp, mask, kl_clamp=10.0):
    """Return the mean over masked tokens of k3 = exp(d) - d - 1."""
    # BEGIN SOLUTION
    d = (ref_logp - new_logp).clamp(-kl_clamp, kl_clamp)
    return ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    # END SOLUTION

# %% [hints] fix_run_c

# %%
check("fix_run_c", fix_run_c);

# %%
print(band_report("C", fix_run_c, runs, progress=PROGRESS))

# %% [markdown]
# ## Run D
#
# GRPO's reward-model arm again, with another line of the leash changed.

# %% tags=["hide-input"]
show_dashboard("D")

# %% [markdown]
# ### Exercise 10.6: name the tell of run D

# %% tags=["solution"]
def tell_run_d():
    """Return (metric, mechanism, note): the panel that gives run D away
    (None if none does), the number of its mechanism, and why (not
    graded)."""
    # BEGIN SOLUTION
    return ("objective/entropy", 1,
            "on the policy's own samples the leash pulls nowhere on "
            "average, so the KL climbs as in run C, but it still pushes "
            "in each batch, and the seeds scatter")
    # END SOLUTION

# %% [hints] tell_run_d

# %%
check("tell_run_d", tell_run_d);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run D</summary>
#
# **k1 as the loss term** (mechanism 1). The leash is the mean of k1 = $\log\pi_\theta -
# \log \pi_\text{ref}$ over the sampled tokens. As an estimate of the KL's value, k1 is
# unbiased (chapter 1). As a loss, its gradient is $\nabla \log \pi_\theta$ of the sampled
# tokens. On the first update of a batch the samples are the policy's own, and on average
# that is $\sum_y \pi_\theta(y)\,\nabla\log\pi_\theta(y) = \nabla \sum_y \pi_\theta(y) =
# 0$: the leash pulls nowhere, and the KL climbs above the correct run's as in run C. On the
# second update the samples come from $\pi_\text{old}$, the policy before the first, and the
# average gradient of $\beta$ times the term is $\beta\sum_y
# \pi_\text{old}(y)\,\nabla\log\pi_\theta(y) = -\beta\,\nabla
# \mathrm{KL}(\pi_\text{old}\,\|\,\pi_\theta)$: a step down the loss raises that KL, and
# pushes the policy away from the policy that sampled the batch, not back to the reference.
# In any one batch, too, it pushes down the tokens that were sampled, a push that differs from
# seed to seed: run D's seeds scatter far more than run C's (its bands are wider), and it is
# not the unleashed run (`unleashed("D")` says so panel by panel). Its panels that separate
# (the table at the end) are those a production run logs; `accuracy` is one only where a
# verifier can grade every answer, as here. Chapter 7 shows the same trap from the other
# side, with k3 in the reward.
#
# </details>

# %%
changed_line("D")

# %% [markdown]
# ### Your fix, in run D
#
# Run D broke the function you wrote again in exercise 10.5: this time the line that computes
# `d` was right, and the return line was wrong. Your `fix_run_c` goes into run D as it is:

# %%
print(band_report("D", fix_run_c, runs, progress=PROGRESS))

# %% [markdown]
# ## Run E
#
# GRPO's reward-model arm, with a line of its loss changed.

# %% tags=["hide-input"]
show_dashboard("E")

# %% [markdown]
# ### Exercise 10.7: name the tell of run E

# %% tags=["solution"]
def tell_run_e():
    """Return (metric, mechanism, note): the panel that gives run E away
    (None if none does), the number of its mechanism, and why (not
    graded)."""
    # BEGIN SOLUTION
    return ("kl", 4,
            "the clip compares the policy with the reference, so a token "
            "that has moved 20% from the start gets no more gradient")
    # END SOLUTION

# %% [hints] tell_run_e

# %%
check("tell_run_e", tell_run_e);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run E</summary>
#
# **The ratio is taken against the reference** (mechanism 4). PPO's ratio compares the policy
# now with the policy that sampled the batch, so that the clip bounds one update (chapter 5).
# Taken against the frozen reference, the clip bounds the whole run instead. A token whose
# probability has moved 20% from the start gets no more gradient in the direction it was
# going. The run stays closer to the reference: both KL panels are lower than the correct
# run's over the run, by about two fifths (the band report below). In these runs that costs
# no accuracy. The logged `policy/clipfrac_avg` does not show it either: the engine logs the
# clip against the sampling policy, as TRL does, and that is not what this loss clipped.
#
# </details>

# %%
changed_line("E")

# %% [markdown]
# ### Exercise 10.8: fix it
#
# Write GRPO's loss `grpo_token_loss` again, as `fix_run_e`, with the contract of exercise
# 8.2. The leash term is given, and the clipped policy loss (chapter 5's `ppo_token_loss`,
# here `reward_leash.ppo_token_loss`) is the line to write.

# %% tags=["solution"]
def fix_run_e(new_logp, old_logp, ref_logp, advantages, mask,
              epsilon=0.2, beta=0.04, kl_clamp=10.0):
    """Return the clipped policy loss plus beta times the mean k3."""
    leash = loss_leash.k3_loss_term(new_logp, ref_logp, mask, kl_clamp)
    # BEGIN SOLUTION
    policy_loss = reward_leash.ppo_token_loss(new_logp, old_logp,
                                              advantages, mask, epsilon)
    # END SOLUTION
    return policy_loss + beta * leash

# %% [hints] fix_run_e

# %%
check("fix_run_e", fix_run_e);

# %%
print(band_report("E", fix_run_e, runs, progress=PROGRESS))

# %% [markdown]
# ## Run F
#
# Chapter 5's verifier arm, with one line changed in a function that many stages call.

# %% tags=["hide-input"]
show_dashboard("F")

# %% [markdown]
# ### Exercise 10.9: name the tell of run F

# %% tags=["solution"]
def tell_run_f():
    """Return (metric, mechanism, note): the panel that gives run F away
    (None if none does), the number of its mechanism, and why (not
    graded)."""
    # BEGIN SOLUTION
    return ("policy/approxkl_avg", 9,
            "the log-probs are taken at temperature 1 while the answers are "
            "sampled at 0.7, so each update's log-ratios come out smaller")
    # END SOLUTION

# %% [hints] tell_run_f

# %%
check("tell_run_f", tell_run_f);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run F</summary>
#
# **The log-probs leave out the temperature** (mechanism 9). The answers are sampled from
# softmax(logits / 0.7), but the ratio, the leash and the logged KL use log-probs at
# temperature 1. At temperature 1 the distribution is flatter and every log-ratio comes out
# smaller, roughly by the factor 0.7 that divides the logits, so PPO's own measures of an
# update are well below the correct run's: `policy/approxkl_avg`, which grows with the
# square of a log-ratio, is about half, and `policy/clipfrac_avg` and the logged
# `objective/kl` are lower too. The leash, measured at the wrong temperature, holds less:
# the exact KL of the evaluation, computed at 0.7, ends higher than the correct run's. The
# gradient is that of another distribution than the one that wrote the answers, and accuracy
# is a little lower over the run. A check before training finds the bug at once.
#
# </details>

# %%
changed_line("F")

# %% [markdown]
# ### Exercise 10.10: fix it
#
# Write `logprobs_from_logits` again, as `fix_run_f(logits, tokens, temperature=1.0)`: the
# log-probability of each token under softmax(logits / temperature). It takes logits
# `(B, T, V)` and token ids `(B, T)`, and returns `(B, T)`. The engine's vocabulary has
# V = 13 tokens; the check's cases use 4, so that their inputs fit the report.

# %% tags=["solution"]
def fix_run_f(logits, tokens, temperature=1.0):
    """Return log p(token) under softmax(logits / temperature)."""
    # BEGIN SOLUTION
    logp = F.log_softmax(logits / temperature, dim=-1)
    # END SOLUTION
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)

# %% [hints] fix_run_f

# %%
check("fix_run_f", fix_run_f);

# %%
print(band_report("F", fix_run_f, runs, progress=PROGRESS))

# %% [markdown]
# ## Run G
#
# Chapter 9's DPO arm, with one line of its loss changed. A DPO run logs its own metrics
# (chapter 9): the implicit rewards of the chosen and rejected answers, their margin, how
# often the chosen one wins, and the log-probs of both.

# %% tags=["hide-input"]
show_dashboard("G")

# %% [markdown]
# ### Exercise 10.11: name the tell of run G

# %% tags=["solution"]
def tell_run_g():
    """Return (metric, mechanism, note): the panel that gives run G away
    (None if none does), the number of its mechanism, and why (not
    graded)."""
    # BEGIN SOLUTION
    return ("logps/rejected", 10,
            "the rejected answer's log-ratio has the wrong sign, so the "
            "loss also rewards raising the rejected answer, and its "
            "log-prob rises")
    # END SOLUTION

# %% [hints] tell_run_g

# %%
check("tell_run_g", tell_run_g);

# %% [markdown]
# <details class="answer">
# <summary>What was wrong in run G</summary>
#
# **DPO's rejected log-ratio is the wrong way round** (mechanism 10). It is computed as
# reference minus policy, so the margin is the sum of the two log-ratios, and the loss falls
# when the policy raises *both* answers. The run no longer learns a preference:
# `logps/rejected` rises where the correct run's falls, `logps/chosen` is lower than the
# correct run's over the run, and `rewards/accuracies` falls to near 0.
#
# Nor does it learn to write the right answers. On the eval prompts (the cell after this
# answer), the right answer's log-prob falls by 0.057551 over the run, where the correct run's
# rises by 0.229584. What the run learns is wrong answers: a random wrong number, the kind the
# pairs reject, gains 2.61756 nats, and a near-miss 0.64648. Its greedy accuracy still rises
# from the start, by 0.049500 against the correct run's 0.069500, and in both runs the share
# of near-misses among the greedy answers falls, by 0.046000 and 0.04200 (the difference holds
# 0): answers that were
# near-misses become right. The mean log-probs do not say why. Greedy decoding takes the
# likeliest token at each step, prompt by prompt, and a mean over 400 prompts does not show
# which answer is likeliest for each. Exercise 9.1's check names this one-term slip too.
#
# </details>

# %% [markdown]
# What run G learns to write, beside the correct DPO run: on the 400 eval prompts, the
# log-prob of the right answer and of two kinds of wrong one (the held-out log-probs that
# chapter 9's DPO runs log), and the share of greedy answers that are right or near-misses.
# Each is the change from the start to the end of the run, mean and 95% half-width over seeds
# 0-4, and last the paired difference of those changes, run G minus the correct run.

# %%
writes = sb.what_it_writes(runs, ch10.bug_of("G"))
print(f"{'change from the start':<24}{'correct run':<22}run G")
for key, row in writes.items():
    good, bad = (ch10.interval_text(*row[w]) for w in ("correct", "buggy"))
    print(f"{key:<24}{good:<22}{bad}")
print(f"\n{'':<24}{'start':>8}   run G - correct run")
for key, row in writes.items():
    diff = ch10.interval_text(*row["difference"])
    print(f"{key:<24}{row['start']:>8.3f}   {diff}")

# %%
changed_line("G")

# %% [markdown]
# ### Exercise 10.12: fix it
#
# Write `dpo_loss` again, as `fix_run_g`, with the contract of exercise 9.1. The chosen
# log-ratio and the loss are given, and the rejected log-ratio is the line to write.

# %% tags=["solution"]
def fix_run_g(policy_chosen_logps, policy_rejected_logps,
              ref_chosen_logps, ref_rejected_logps, beta=0.1):
    """Return DPO's loss: the mean of -log sigmoid(beta * margin)."""
    chosen = policy_chosen_logps - ref_chosen_logps
    # BEGIN SOLUTION
    rejected = policy_rejected_logps - ref_rejected_logps
    # END SOLUTION
    return -F.logsigmoid(beta * (chosen - rejected)).mean()

# %% [hints] fix_run_g

# %%
check("fix_run_g", fix_run_g);

# %%
print(band_report("G", fix_run_g, runs, progress=PROGRESS))

# %% [markdown]
# ## The tells, measured
#
# For each run, every panel of its dashboard that separates it from the correct run by the
# test the checks of the tells used: the panel's mean over the run (for `accuracy` and `kl`,
# after the start), seed by seed, buggy minus correct, and the 95% interval of those
# differences. The correct run's value is a mean over seeds 0-4, and the difference is the
# mean of the five seeds' differences with its 95% half-width. The last column is how far the
# interval's near edge is from 0, in half-widths: 0.25 says the edge is a quarter of a
# half-width clear of 0; "exact" marks a difference that is the same number on every seed.
# These rows are the answer keys: each check above read them from the same runs.

# %%
print(f"{'run':<4} {'panel':<21} {'correct':>9}  {'buggy - correct':<27}"
      f" {'margin':>6}")
for letter, bug in ch10.RUNS.items():
    for metric, row in sb.tell_table(runs, [bug])[bug].items():
        diff = ch10.interval_text(*row["difference"])
        margin = ("exact" if row["margin"] == float("inf")
                  else f"{row['margin']:.2f}")
        print(f"{letter:<4} {metric:<21} {row['correct'][0]:>9.3g}  "
              f"{diff:<27} {margin:>6}")

# %% [markdown]
# Each run has at least one panel besides `accuracy` (which a run without a verifier does not
# have) whose interval clears 0 by a quarter of its half-width or more; the next cell checks
# it on the runs above.

# %%
for letter, bug in ch10.RUNS.items():
    rows = sb.tell_table(runs, [bug])[bug]
    best = max(((r["margin"], m) for m, r in rows.items()
                if m != "accuracy"), default=(float("-inf"), None))
    assert best[0] >= 0.25, (letter, best)
    print(f"run {letter}: {best[1]} clears 0 by "
          + ("every seed alike" if best[0] == float("inf")
             else f"{best[0]:.2f} half-widths"))

# %% [markdown]
# ## Which panel moves first
#
# Over seeds 0-4, every run has panels that separate it from the correct run: most of the
# dashboard for runs A, B and G, and for the others both KL panels at least. Run D's KL
# scatters from seed to seed, and its clearest tell is `objective/entropy`. Every
# run's best panel other than `accuracy` clears 0 by more than a quarter of its half-width.
#
# A dashboard is read while the run goes on, so it matters *when* a tell shows. For each panel
# that separates a run, and only for those, the next cell prints the first point from which
# the panel stays apart from the correct run for three points in a row: an iteration, or for
# run G a DPO step, as on the dashboards' x axis. A point is apart when the table's test, made
# on that point alone, finds it so: the five seeds' differences there, buggy minus correct,
# have a 95% interval that excludes 0, on the side of the whole-run difference. Both runs'
# noise is in those differences. Three points in a row keep a one-point blip out. And since
# only panels that pass the whole-run test are timed, a panel the bug does not move is timed
# with a chance of about 5%, that test's own, not 5% at each point of its curve. A difference
# below $10^{-12}$ is float64 rounding, never a departure: at the start a policy's KL to itself
# comes out near $10^{-17}$, not exactly 0. The time itself is a description, not a test: with
# five seeds it may be a point or two early or late.

# %%
for letter, bug in ch10.RUNS.items():
    x = sb.X_LABEL[sb._trainer(sb.BUGS[bug].arm)]
    first = {m: sb.first_departure(runs, bug, m)
             for m in sb.separating(runs, bug)}
    moved = sorted((i, m) for m, i in first.items() if i is not None)
    timed = ", ".join(f"{m} at {i}" for i, m in moved) or "-"
    never = [m for m, i in first.items() if i is None]
    print(textwrap.fill(f"run {letter} ({bug}), by {x}: {timed}", 77,
                        subsequent_indent="    "))
    if never:
        print(textwrap.fill("    separates, never apart 3 points in a row: "
                            + ", ".join(never), 77,
                            subsequent_indent="    "))

# %% [markdown]
# Four kinds of bug show four ways:
#
# - **A wrong mask** (runs A and B) shows at the first iteration, in `val/completion_length`,
#   the mask's own sum, in `objective/entropy`, another average over the mask, in
#   `policy/approxkl_avg` and in the exact `kl`. The logged `objective/kl` follows, from
#   iteration 5 in run A and 9 in run B.
# - **A leash that does not hold** (runs C and D) shows in the KL as the policy drifts: the
#   exact `kl` is apart from iteration 4 in both, and accuracy, lower, from iteration 5 in run
#   C and 3 in run D. Run D's `objective/entropy` separates over the whole run but is never
#   apart at three points in a row.
# - **A wrong loss** shows in what the loss moves. Run G's DPO logs are apart from step 2,
#   while its accuracy is apart only from step 8. Run E's exact `kl` is apart from iteration
#   3, lower: the clip against the reference holds the policy back from the start.
# - **Log-probs at the wrong temperature** (run F) show late point by point: the exact `kl`
#   is apart from iteration 15 and `policy/approxkl_avg` from 21, and the other panels that
#   separate run F never are.
#
# The panels that show a bug early measure the changed line itself: the mask's length, DPO's
# own logs. A bug that moves the policy through the leash, the clip or the log-probs shows
# later, as the policy drifts, and some panels only over the whole run.

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
for letter in [None, *ch10.RUNS]:
    bug = None if letter is None else sb.BUGS[ch10.bug_of(letter)]
    results = sb.run_checks(policy, bug)
    label = "engine" if letter is None else f"run {letter}"
    marks = "".join(f"{'ok' if results[n][0] else 'CAUGHT':>12}"
                    for n in names)
    print(f"{label:<9}{marks}")
print("\nWhat the mask check shows, on the engine and on run B:")
print("  engine:", sb.check_mask(policy)[1])
with sb.planted(sb.BUGS[ch10.bug_of("B")]):
    print("  run B: ", sb.check_mask(policy)[1])

# %% [markdown]
# The engine passes all five, and every bug fails at least one: runs C and D, whose leash
# does not hold, fail the leash-gradient check, and run F fails two. The checks take a few
# seconds, where the dashboards needed five seeds of whole runs. Together they cover what a
# dashboard shows late, or only over many seeds.
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
#   should be, from the first iteration: the mask.
# - `objective/entropy` off a healthy run's from the first iteration, up or down: the mask.
# - Both KL panels climbing far past a healthy run's, with accuracy falling: the leash does
#   not hold (runs C and D). A leash with no gradient gives the run with $\beta = 0$ digit for
#   digit; a leash that pulls only on average scatters from seed to seed. The leash-gradient
#   check before training catches both.
# - Both KL panels lower than a healthy run's while accuracy holds: the clip may be measured
#   against the reference (run E).
# - `objective/kl` lower than an exact KL on the same answers would have it, or
#   `policy/approxkl_avg` and `policy/clipfrac_avg` well below a healthy run's: the
#   log-probs in the loss are not the sampler's.
# - DPO's `rewards/accuracies` near 0, or `logps/rejected` rising: a sign in the loss.
#
# **Always:** compare with a healthy run. Over the whole run, accuracy separated four of
# these runs (C, D, F and G) from the correct one, run F's by less than a point, and a real
# run has no accuracy to read at all. Only a baseline with bands over seeds tells what is
# normal, and that is how every dashboard above was read. Count the seeds, too: over three,
# the best panels of runs C and D clear 0 by much less than over five (exercise 1 below).
#
# ## Bugs this chapter does not plant
#
# Seven bugs are a sample. Six more are common in RLHF code, and none of them is planted
# here, so none was measured. For each, the tell we would expect from what the bug does, and
# a check that finds it before training:
#
# - **The group reshape in the wrong order.** GRPO's advantages reshape the batch's rewards
#   with `view(-1, G)`, one row a prompt (chapter 8). That is right only when each prompt's G
#   answers sit side by side, as `repeat_interleave` puts them (`rollout` in our `ppo.py`;
#   in TRL 1.12.0, `RepeatSampler` in `trl/trainer/utils.py` and `rewards.view(-1,
#   num_generations)` in `trl/trainer/grpo_trainer.py`). Repeat the prompts with `.repeat(G,
#   1)` instead and every shape still fits, but each row then holds one answer to each of G
#   different prompts: an answer is judged against answers to other questions. We would
#   expect nothing to jump, and accuracy to gain less, as with a baseline shared by different
#   prompts. Check: print the prompts of one group; they must be one prompt, G times.
# - **Dropout left on.** Our small model has no dropout. In a model that has it, a policy in
#   training mode gives other log-probs for the same tokens on every pass, so the first
#   update's ratio would not be 1, nor the first KL 0. The ratio check above would find it.
#   TRL's `disable_dropout` gives that reason (`trl/trainer/grpo_config.py`, off by default
#   there; `trl/trainer/dpo_config.py`, on by default).
# - **The reward read at the wrong token.** Our RM is read at each answer's first `;`
#   (chapter 3). Read at the last position instead, it scores the padding after the end mark
#   too. We would expect `objective/scores` to stop following accuracy. Check: change the
#   tokens after an answer's end mark; its score must not change.
# - **A reference that shares the policy's weights.** The reference is the policy object
#   itself, not a frozen copy (mechanism 8 of the list). The leash then measures the policy
#   against itself: both KL panels would read exactly 0 at every point, and the leash would
#   pull only towards the policy that sampled each batch, never back to the start (exercise 3
#   below). The first KL is 0 in a correct run too, so check the KL after one step: it must
#   be above 0.
# - **Gradient accumulation that averages averages.** When a batch is split into
#   micro-batches, each with its own token mean, the mean of those means gives a token of a
#   short micro-batch more weight than the token mean over the whole batch. No panel would
#   show it, only a difference from the same run without accumulation. Our engine steps on
#   the full batch, with the token mean over all of it. In TRL 1.12.0's GRPO trainer
#   (`_compute_loss` in `grpo_trainer.py`), `loss_type="dapo"` divides by the kept tokens of
#   the whole batch (`num_items_in_batch`), while `"bnpo"` takes each micro-batch's own token
#   mean: the two differ exactly here. Check: the loss and gradient of one batch are the same
#   in one piece and in four.
# - **Sampler and trainer that disagree.** At scale a separate inference engine samples the
#   answers, and the trainer computes the log-probs again with other kernels and precision.
#   The two differ a little, so the first ratio is not exactly 1. Run F is the extreme case.
#   TRL corrects for the gap with importance sampling when vLLM, such an engine, samples
#   (`vllm_importance_sampling_correction` in `grpo_config.py`). Check, as the log-prob check
#   above does: the sampler's own log-probs of its answers against the trainer's.

# %% [markdown]
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. Three seeds or five?** This chapter reads five seeds of every run. Had it read three
# (seeds 0-2), which runs would still have a tell, and which would have lost theirs? Predict
# from the dashboards, the bands' widths in particular, then look.
#
# <details class="answer">
# <summary>Worked answer: three seeds or five</summary>
#
# The cell below makes the table's test again on seeds 0-2 alone, and prints, for each run,
# how many panels separate it and the best margin among the panels a real run logs (not
# `accuracy`), beside the same over five seeds. Runs whose bug moves a panel by much more than
# the seeds' spread (the masks, the leash with no gradient, the clip, DPO's sign) keep their
# tells with three seeds. Run D keeps three of its four panels, and its best margin falls from
# 1.69 to 1.05 half-widths: k1's push differs from batch to batch, so its seeds scatter, and
# an interval over three seeds is wide (Student's t for two degrees of freedom is more than
# half as large again as for four). A bug whose effect is noisy needs more seeds than one
# whose effect is
# steady, and a null over three seeds says little.
#
# </details>

# %% tags=["hide-input"]
first3 = {"correct": {arm: {s: logs[s] for s in ("0", "1", "2")}
                      for arm, logs in runs["correct"].items()},
          **{bug: {s: runs[bug][s] for s in ("0", "1", "2")}
             for bug in ch10.RUNS.values()}}
print(f"{'run':<4}{'panels that separate':>22}"
      f"{'best margin, not accuracy':>30}")
print(f"{'':<4}{'3 seeds':>13}{'5 seeds':>9}{'3 seeds':>18}{'5 seeds':>12}")
for letter, bug in ch10.RUNS.items():
    cells = []
    for these in (first3, runs):
        rows = sb.tell_table(these, [bug])[bug]
        best = max((r["margin"] for m, r in rows.items()
                    if m != "accuracy"), default=None)
        text = ("-" if best is None else "exact" if best == float("inf")
                else f"{best:.2f}")
        cells.append((len(rows), text))
    print(f"{letter:<4}{cells[0][0]:>13}{cells[1][0]:>9}"
          f"{cells[0][1]:>18}{cells[1][1]:>12}")

# %% [markdown]
# **2. The band and the pair.** A fix is judged twice: whether its runs are the correct runs
# digit for digit, and whether its value on each panel lands in the correct runs' band, one
# number per seed. The tells were read from paired differences instead. Find panels where the
# bug's own value lands inside the correct runs' band although the paired test separates the
# bug's run, and say why the two tests disagree.
#
# <details class="answer">
# <summary>Worked answer: the band and the pair</summary>
#
# The cell below lists them: for each run, the panels that separate it by the paired test
# while its mean over seeds lies inside the correct runs' band (the band the fix reports
# print). The band holds the whole spread of the correct runs from seed to seed: how hard the
# prompts drawn for that seed were, how lucky its samples. A buggy run with the same seed
# draws its first batch from the same prompts with the same random numbers, so much of that
# spread is shared, and the seed-by-seed difference cancels it. The paired test sees a shift
# smaller than the spread of either run; the band does not. That is why a fix's report leads
# with the digits: a fix that is right gives the correct runs exactly, and only a fix that
# computes the same numbers another way, in another order, leaves the band as the test.
#
# </details>

# %% tags=["hide-input"]
for letter, bug in ch10.RUNS.items():
    arm = sb.BUGS[bug].arm
    seeds = sorted(runs[bug], key=int)
    hidden = []
    for metric in sb.separating(runs, bug):
        mean, half = mean_ci95([sb.tell_value(runs["correct"][arm][s],
                                                   metric) for s in seeds])
        value = sum(sb.tell_value(runs[bug][s], metric)
                    for s in seeds) / len(seeds)
        if abs(value - mean) <= half:
            hidden.append(f"{metric} ({value:.4g} in "
                          f"{mean:.4g} ± {half:.2g})")
    line = f"run {letter}: " + (", ".join(hidden) or "none")
    print(textwrap.fill(line, 77, subsequent_indent="    "))

# %% [markdown]
# **3. Mechanism 8.** No run planted mechanism 8: the reference shares the policy's weights.
# Predict its dashboard beside a correct run, and what `unleashed` would print for it.
#
# <details class="answer">
# <summary>Worked answer: mechanism 8</summary>
#
# The reference would move with the policy. Its log-probs of a batch are taken when the batch
# is sampled, from the policy of that moment, so they are the sampling policy's: both KL
# panels read exactly 0 at every point, the most visible tell of all. The leash is not
# simply gone, though. On the first update of a batch its term and gradient are 0, and that
# step is the unleashed run's; on the second, k3 pulls the policy back towards the policy
# that sampled the batch, a trust region of its own, not towards the start. So `unleashed`
# would print "differs" for every panel from the second update on, and the run would drift
# from the start with nothing to hold it but that pull. The check after one step (the
# KL must be above 0) finds it before the run.
#
# </details>
