# %% [markdown]
# # 6. Is the result robust?
#
# Chapter 5 ran one PPO loop with two rewards. Paid by the verifier, the partial-SFT policy
# got better at sums, though by less than the chapter set out to show; paid by the reward
# model, it raised the RM's score a little and its accuracy fell slightly. Over five PPO
# seeds the interval of the gap between the two arms stayed above zero, and the RM scored
# both arms' answers about alike.
#
# An interval over seeds answers one question: would another draw of prompts and samples
# give the same result? This chapter asks four more, each a way the result could still be an
# accident of how the experiment was set up.
#
# 1. **Is it the reward, or the noise?** Most of what the RM's score varies by in a batch
#    turns out to be the prompt, not the answer. You write the function that measures that
#    part (exercise 6.1); we take it out, and compare at an equal distance from the
#    reference.
# 2. **How hard should the leash pull?** Each arm ran at one $\beta$. We sweep $\beta$ from 0
#    to 1, and a slider shows the curves.
# 3. **Does it depend on the starting checkpoint?** Every run of chapter 5 started from one
#    partial-SFT policy. We make four more the same way and run both arms from each.
# 4. **What does a run look like from the inside?** A real run has no verifier. We read
#    the statistics a trainer logs about its own batches, under TRL's names, and ask whether
#    they tell the two arms apart.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1 to 5. This chapter reuses chapter 5's stored runs (the models and
# `outputs/results.json`) when they are there and makes them otherwise. With chapter 5's
# runs stored, a first run of this notebook, which makes its own runs side by side on the
# computer's cores, takes about three minutes on a 2-core machine, each long cell
# with a progress bar in JupyterLab; most of it goes to the runs from the five partial-SFT
# starts. With nothing stored it also makes chapter 5's runs and takes longer. Later runs
# read every result back and take about fifteen seconds.
# ```

# %%
from dataclasses import asdict

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirlhf import experiment, ppo, sft, store, task
from minirlhf.arms import DEFAULT_BETA
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import check, get
from minirlhf.course.explorer import explore, show_figure
from minirlhf.course.frontend import building_book, someone_watching
from minirlhf.course.runs import (load_or_run, same_curves,
                                  stored_experiment, stored_starts)
from minirlhf.model import generate, make_generator, reward_scores
from minirlhf.palette import ARM_COLORS  # one color per arm, in every figure
from minirlhf.parallel import map_runs
from minirlhf.paths import OUTPUTS
from minirlhf.stats import mean_ci95, pm
from minirlhf.studies import robustness

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or under nbval.
PROGRESS = someone_watching()

# %% [markdown]
# ## Chapter 5's experiment, rebuilt
#
# The next cell builds what this chapter starts from with the package's own functions: the
# partial-SFT policy (also the frozen reference) and the reward model, read from disk or
# trained; the recipe `ppo.PPOConfig()`; the two arms with their $\beta$; one run of each arm
# with seed 0, which keeps the training statistics read at the end of the chapter (trained
# every time, about five seconds); and the five-seed experiment. The experiment is read from `outputs/results.json`, the file chapter
# 5 writes, with exactly chapter 5's settings, so the two chapters always show the same runs.
# When it is missing or was made by other code, the cell runs it: ten more runs.

# %%
models = store.load_all(progress=PROGRESS)
policy, rm = models["policy"], models["rm"]
reference = policy  # every run trains a copy: this one stays frozen
cfg = ppo.PPOConfig()
ARMS = {"rm": (ppo.rm_reward(rm), DEFAULT_BETA["rm"]),
        "verifier": (ppo.verifier_reward, DEFAULT_BETA["verifier"])}
BETA = {arm: beta for arm, (_, beta) in ARMS.items()}
SEEDS = [0, 1, 2, 3, 4]

# arm -> the log of its seed-0 run; run_arms makes the runs side by side,
# one worker process per core, as map_runs does in chapter 5
runs = dict(zip(ARMS, experiment.run_arms(
    [(arm, 0, BETA[arm]) for arm in ARMS], policy, rm, cfg,
    progress=PROGRESS)))


results = stored_experiment(SEEDS, cfg, BETA,
                            {(arm, "0"): runs[arm] for arm in ARMS},
                            progress=PROGRESS)
logs = {arm: [results["arms"][arm][str(s)] for s in SEEDS] for arm in ARMS}
summary = experiment.summarize(results)


print(f"chapter 5, over seeds {SEEDS[0]}-{SEEDS[-1]} (mean ± 95% interval)")
print("arm (beta)       true accuracy              RM score at the end")
for arm in ARMS:
    s = summary[arm]
    print(f"{arm + f' ({BETA[arm]:g})':<16} {s['start']:.3f} -> "
          f"{pm(s['end'], s['end_ci']):<17}  "
          f"{pm(s['rm_score_end'], s['rm_score_end_ci'], 2, '+')}")
print("seed 0 of the stored experiment and the runs above agree to the\n"
      "last digit:",
      all(same_curves(logs[arm][0], runs[arm]) for arm in ARMS))

# %% [markdown]
# ## Is it the reward, or the noise?
#
# A careful reader should object at this point. The batch-mean baseline compares each
# completion with the whole batch, whatever its prompt, but the Bradley–Terry loss of
# chapter 4 only ever saw margins between two answers to the *same* prompt: nothing ties one
# prompt's scores to another's. Part of what the RM's score varies by in a batch may be the
# prompt alone, and that part says nothing about how good an answer is.
#
# How large is that part? Measuring it takes several completions of each prompt. The rewards
# of one prompt's completions vary only with the answer; whatever the batch varies by beyond
# that comes from which prompt was drawn. You write the measure.
#
# ### Exercise 6.1: `prompt_share`
#
# Take $P$ prompts with $K$ completions each, and rewards $r_{p,k}$. Let $\bar r_p$ be the
# mean reward of prompt $p$ and $\bar r$ the mean of all $PK$:
#
# $$
# W = \frac{1}{P} \sum_{p} \frac{1}{K} \sum_{k} \big(r_{p,k} - \bar r_p\big)^2, \qquad
# V = \frac{1}{PK} \sum_{p,k} \big(r_{p,k} - \bar r\big)^2,
# $$
#
# $$
# \text{share} = 1 - \frac{W}{V}.
# $$
#
# $W$ is the variance among a prompt's completions, averaged over the prompts; $V$ is the
# variance of the whole batch. Because both divide by their count, $V$ is exactly $W$ plus
# the variance of the prompt means $\bar r_p$, so the share is that last part over $V$, a
# number between 0 and 1: 1 when every completion of a prompt scores the same, 0 when every
# prompt has the same mean.
#
# **Contract.** `prompt_share(rewards, group_size)`:
#
# - `rewards` is a 1-D float tensor of length $N = PK$, and `group_size` is $K$. A prompt's
#   completions sit side by side: `rewards[0:K]` belong to the first prompt,
#   `rewards[K:2*K]` to the second, as `repeat_interleave` lays out a batch.
# - Return the share as a Python float. Both variances divide by their count, not by the
#   count minus 1.
# - When all rewards are equal there is no variance to split: return 0.0 (none of it is the
#   prompt's), not NaN.
# - When `group_size` is below 2 or does not divide the length, raise a `ValueError` whose
#   message names `group_size`. The check compares returned values, so it cannot test this;
#   the cell after it does.
# - Do not change the input in place.
#
# **Examples.** `torch.tensor([0.0, 2.0, 2.0, 4.0])` with `group_size=2` is two prompts,
# $(0, 2)$ and $(2, 4)$: means 1 and 3, $W = 1$, $V = 2$, share $1 - 1/2 = 0.5$. The same four
# rewards with `group_size=4` are one prompt, so $W = V = 2$ and the share is 0.
# `torch.tensor([1.0, 1.0, 3.0, 3.0])` with `group_size=2` gives 1.
#
# **How it is judged.** Eleven cases worked by hand, listed in the check's report: the examples
# above, the same scores under every prompt, rewards where grouping side by side and grouping
# every $K$-th give different shares, a prompt whose answers all score alike, all rewards
# equal, scores below 0, three prompts of two (so a variance along the wrong axis shows),
# a verifier's 0s and 1s, and all rewards equal at 1.3, which float32 cannot hold exactly
# (their variance can come out near $10^{-14}$ rather than 0). The result must be a Python
# float within $10^{-4}$ of the value worked by hand.

# %% tags=["solution"]
def prompt_share(rewards, group_size):
    """Return the prompt's share of the variance of rewards (N,), with
    group_size completions per prompt side by side: 1 - the mean
    within-prompt variance / the total variance, a Python float."""
    # BEGIN SOLUTION
    if group_size < 2 or len(rewards) % group_size:
        raise ValueError(f"group_size must be at least 2 and divide the "
                         f"{len(rewards)} rewards, got {group_size}")
    if bool((rewards == rewards[0]).all()):
        return 0.0  # no variance, so none of it is the prompt's
    groups = rewards.reshape(-1, group_size)  # (P, K): a prompt per row
    within = groups.var(1, unbiased=False).mean()  # mean over prompts
    total = rewards.var(unbiased=False)  # over all N = P * K rewards
    return float(1 - within / total)
    # END SOLUTION

# %% [hints] prompt_share

# %%
check("prompt_share", prompt_share);

# %% [markdown]
# The next cell picks the function that measures the shares below: yours when it passes every
# case and refuses 7 rewards in groups of 2 with a `ValueError` that names `group_size`;
# otherwise the package's `robustness.prompt_share`, and it says which.

# %%
def refusal(fn):
    """Return (True, its message) when fn refuses 7 rewards in groups of 2
    with a ValueError, else (False, what it did instead)."""
    try:
        fn(torch.zeros(7), group_size=2)
    except ValueError as err:
        return True, str(err)
    except Exception as err:  # not written yet, or another error
        return False, f"a {type(err).__name__}, not a ValueError"
    return False, "a value, not a ValueError"


verdict = run_cases(prompt_share, get("prompt_share"))
refused, said = refusal(prompt_share)
if verdict.passed and refused and "group_size" in said:
    share_fn = prompt_share
    print("Your prompt_share passes every case, and refuses 7 rewards in "
          f"groups of 2:\n  ValueError: {said}\n"
          "It measures the shares below.")
else:
    share_fn = robustness.prompt_share
    if verdict.not_implemented:
        why = "is not written yet"
    elif not verdict.passed:
        why = f"passes {verdict.n_passed} of {len(verdict.results)} cases"
    elif not refused:
        why = f"answers 7 rewards in groups of 2 with\n  {said}"
    else:
        why = ("refuses 7 rewards in groups of 2, but its ValueError\n"
               "  does not name group_size")
    print(f"Your prompt_share {why},\nso the shares below come from "
          "robustness.prompt_share. Write it,\nrun its check, then run the "
          "notebook from here again.")

# %% [markdown]
# The next cell measures the shares. It samples 8 completions for each of 64 prompts from the
# partial-SFT policy, scores all 512 with each reward, and hands each reward's 512 scores,
# 8 per prompt side by side, to the `prompt_share` the cell above picked. The last line
# checks it against the package's.

# %%
K = 8  # completions per prompt
g = make_generator(2)
rep_pairs = task.sample_pairs(cfg.batch_size, g, task.train_pairs())
rep_pairs = rep_pairs.repeat_interleave(K, 0)  # (512, 2)
rep_prompts = task.encode_prompts(rep_pairs)  # (512, 6)
rep = generate(policy, rep_prompts, cfg.temperature, generator=g)  # (512, 4)
batch_rewards = {}  # reward -> its 512 scores, a prompt's 8 side by side
shares = {}  # reward -> the prompt's share of their variance
print("reward     variance   within a prompt   share of the prompt")
for arm, (reward_fn, _) in ARMS.items():
    batch_rewards[arm] = reward_fn(rep_pairs, rep_prompts,
                                   rep).double()  # (512,)
    r = batch_rewards[arm].view(-1, K)  # (64, 8): a prompt per row
    total, within = r.var(unbiased=False), r.var(1, unbiased=False).mean()
    shares[arm] = share_fn(batch_rewards[arm], K)
    print(f"{arm:<9} {total:>9.3f}   {within:>15.3f}   "
          f"{shares[arm]:>19.0%}")
agree = all(abs(shares[arm] - robustness.prompt_share(batch_rewards[arm], K))
            < 1e-4 for arm in ARMS)
print("the same shares as the package's robustness.prompt_share:", agree)

# %% [markdown]
# For the RM, most of what varies in a batch is which prompt was drawn, not how good the
# answer was. The batch-mean baseline leaves that in the advantages. It does not bias the
# policy gradient, but it is noise, and a baseline per prompt would remove it: a learned
# critic $V(\text{prompt})$, as in full PPO {cite}`ouyang2022instructgpt`, or the mean over
# several completions of the same prompt, as in GRPO {cite}`shao2024deepseekmath` and RLOO
# {cite}`ahmadian2024rloo`. Could that noise, rather than the RM's blind spot, be what holds
# the rm arm back?
#
# Test it. Hand the rm arm a reward with the prompt's share taken out: the RM's score of the
# completion minus its score of the reference policy's greedy answer to the same prompt. The
# subtracted number depends only on the prompt, so it changes no expected gradient (the first
# question at the end of the chapter shows why), and it needs no ground truth. Five seeds, as
# in chapter 5, each run evaluated at its start and its end (the two points the table reads;
# `eval_every` in chapter 5's settings), stored in `outputs/rm_prompt_baseline.json` (under a
# minute to make).

# %%
@torch.no_grad()
def rm_minus_prompt_baseline(pairs, prompts, completions):
    """Return the RM's score of each completion minus its score of the
    reference's greedy answer to the same prompt (B,)."""
    greedy = generate(reference, prompts, greedy=True)  # (B, 4)
    baseline = reward_scores(rm, prompts, greedy)  # (B,)
    return reward_scores(rm, prompts, completions) - baseline  # (B,)


def at_end(seed):
    """Return chapter 5's recipe with ``seed``, evaluated at the start and
    the end only: the two points the table below reads."""
    return ppo.PPOConfig(seed=seed, eval_every=cfg.iterations)


def run_centred():
    """Return the rm arm's runs with the per-prompt baseline, every seed."""

    def run(seed):
        _, log = ppo.ppo_train(policy, reference, rm_minus_prompt_baseline,
                               BETA["rm"], at_end(seed), rm=rm,
                               progress=PROGRESS,
                               desc=f"per-prompt baseline, seed {seed}")
        return {k: log[k] for k in ("accuracy", "rm_score", "kl")}

    logs = map_runs(run, SEEDS, progress=PROGRESS)  # side by side
    return {"arms": {"rm": {str(seed): log
                            for seed, log in zip(SEEDS, logs)}}}


centred = load_or_run(
    OUTPUTS / "rm_prompt_baseline.json",
    {"seeds": SEEDS, "beta": BETA["rm"], "ppo": asdict(at_end(0))},
    {("rm", "0"): runs["rm"]}, run_centred, arms=())["arms"]["rm"]
control = {}  # baseline -> metric -> (mean, half-width) at the end
print(f"{'rm arm, end of run':<24}{'true accuracy':>16}{'RM score':>15}"
      f"{'KL':>15}")
centred_logs = [centred[str(s)] for s in SEEDS]
for name, arm_logs in (("batch-mean baseline", logs["rm"]),
                       ("per-prompt baseline", centred_logs)):
    control[name] = {
        k: mean_ci95([log[k][-1] for log in arm_logs])
        for k in ("accuracy", "rm_score", "kl")}
    print(f"{name:<24}{pm(*control[name]['accuracy']):>16}"
          f"{pm(*control[name]['rm_score'], 2, '+'):>15}"
          f"{pm(*control[name]['kl']):>15}")
print(f"(mean ± 95% interval over seeds {SEEDS[0]}-{SEEDS[-1]}; start: "
      f"accuracy {summary['rm']['start']:.3f})")

# %% [markdown]
# With the noise taken out, the rm arm gets better at what it is handed: the RM's score of
# its answers climbs higher than with the batch mean. Its accuracy does not improve; it falls,
# to 0.336 ± 0.023 from a start of 0.360, an interval that only just leaves the start out.
#
# The comparison is not clean, though, and the KL column shows why: at the same $\beta$ the
# per-prompt arm moved further from the reference. The recipe of chapter 5 standardizes every
# batch of scores before the leash is added. Take out the prompt's share of the variance and
# the batch's standard deviation shrinks, so each answer's difference from the others is
# divided by a smaller number: the signal grows against $\beta$ and against the learning
# rate. The next cell measures by how much on one batch of 64 prompts, one completion each,
# as the recipe samples it.

# %%
g = make_generator(1)
batch_pairs = task.sample_pairs(cfg.batch_size, g,
                                task.train_pairs())  # (64, 2)
batch_prompts = task.encode_prompts(batch_pairs)  # (64, 6)
batch = generate(policy, batch_prompts, cfg.temperature,
                 generator=g)  # (64, 4)
raw = ppo.rm_reward(rm)(batch_pairs, batch_prompts, batch)  # (64,)
centred_scores = rm_minus_prompt_baseline(batch_pairs, batch_prompts,
                                          batch)  # (64,)
std_raw = raw.std(unbiased=False)
std_centred = centred_scores.std(unbiased=False)
print("std of the rm arm's scores over one batch:")
print(f"  raw                           {std_raw:.2f}")
print(f"  with the per-prompt baseline  {std_centred:.2f}")
print("after standardizing, a difference between two answers counts "
      f"{std_raw / std_centred:.1f}\n"
      "times more with the per-prompt baseline")

# %% [markdown]
# So the control changed two things at once, the noise and the step size. The fairer
# comparison is at an equal distance from the reference; the $\beta$ sweep of the next
# section supplies it.

# %% [markdown]
# ## How hard should the leash pull?
#
# Each arm ran at one $\beta$, chosen for it. What does the leash do at other strengths? The
# next cell runs both arms, seed 0, at seven values of $\beta$ from 0 (no leash) to 1, each
# for the full 25 iterations; the runs at the arms' own $\beta$ are the seed-0 runs made at
# the top and are not run again. That is twelve new runs, under a minute even on a busy
# 2-core machine, stored in `outputs/beta_sweep.json` and read back while they are still
# valid.

# %%
BETAS = [0.0, 0.02, 0.05, 0.08, 0.2, 0.5, 1.0]


def run_sweep():
    """Return both arms' runs at every beta (seed 0), reusing the two runs
    made at the top."""
    new = [(arm, 0, beta) for arm in ARMS for beta in BETAS
           if beta != BETA[arm]]
    made = dict(zip(new, experiment.run_arms(new, policy, rm, cfg,
                                             progress=PROGRESS)))
    out = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for beta in BETAS:
            log = runs[arm] if beta == BETA[arm] else made[arm, 0, beta]
            out[arm][str(beta)] = {k: log[k]
                                   for k in ("accuracy", "rm_score", "kl")}
    return {"arms": out}


sweep = load_or_run(
    OUTPUTS / "beta_sweep.json",
    {"betas": BETAS, "seed": 0, "ppo": asdict(cfg)},
    {(arm, str(BETA[arm])): runs[arm] for arm in ARMS},
    run_sweep, arms=tuple(ARMS))["arms"]
print("        rm arm                   verifier arm")
print("beta    accuracy         KL      accuracy         KL")
for beta in BETAS:
    pair = (sweep["rm"][str(beta)], sweep["verifier"][str(beta)])
    print(f"{beta:<6}" + "".join(
        f"  {log['accuracy'][0]:.3f} -> {log['accuracy'][-1]:.3f}"
        f"  {log['kl'][-1]:.3f}" for log in pair))

# %% [markdown]
# Read the KL columns first. Loosening the leash lets both arms move further from the
# reference, by a large factor between $\beta = 1$ and $\beta = 0$. Then the accuracy. The rm
# arm never ends above its start: at $\beta = 1$ it ends where it began, and the looser the
# leash, the lower it ends, almost step by step, down to 0.265 at $\beta = 0$. Wherever the
# leash lets it go, the RM does not lead it toward right answers, and the further it goes, the
# further it leads it away from them. The verifier arm ends above its start at every $\beta$,
# by a few points: most at $\beta = 0.2$ (0.412), least with no leash at all (0.375). These
# are single runs, and from one start the verifier arm's end accuracy already varies from PPO
# seed to PPO seed by about that much, so the sweep shows no clear trend in its gain with
# $\beta$, only that the gain stays above 0.
#
# The slider shows the curves behind each row. In JupyterLab it does more: it also offers
# values between the seven above, and when you release it at a $\beta$ not run yet, both arms
# are trained from scratch at that $\beta$ (seed 0), in seconds, with a progress bar;
# runs already made are kept, so going back is instant. In the book, the seven precomputed
# settings stand in.

# %% tags=["hide-input"]
LIVE_BETAS = [0.0, 0.01, 0.02, 0.05, 0.08, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]
SWEPT = [log for arm in ARMS for log in sweep[arm].values()]  # every run
ACC_LIM = (min(min(log["accuracy"]) for log in SWEPT) - 0.03,
           max(max(log["accuracy"]) for log in SWEPT) + 0.03)
KL_TOP = 1.15 * max(max(log["kl"]) for log in SWEPT)


def draw_leash(beta, found, narrow=False):
    """Return a figure of accuracy and KL per iteration for the runs in
    `found` ({arm: log}), all at this beta: side by side, or stacked for a
    phone (narrow=True)."""
    fig, (left, right) = plt.subplots(
        2 if narrow else 1, 1 if narrow else 2, constrained_layout=True,
        figsize=(3.6, 5.6) if narrow else (6.8, 3.3))
    start = runs["rm"]["accuracy"][0]
    for arm, log in found.items():
        x = np.arange(len(log["accuracy"]))
        left.plot(x, log["accuracy"], color=ARM_COLORS[arm], lw=1.8,
                  label=f"{arm} arm")
        right.plot(x, log["kl"], color=ARM_COLORS[arm], lw=1.8)
    left.axhline(start, color="grey", ls=":", lw=1.2,
                 label="start (both arms)")
    left.set_ylim(*ACC_LIM)
    left.set_ylabel("true accuracy (greedy)", fontsize=9)
    kl_top = max(KL_TOP, *(1.15 * max(log["kl"]) for log in found.values()))
    right.set_ylim(0, kl_top)
    right.set_ylabel("KL to the reference\n(nats per token)", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("PPO iteration", fontsize=9)
        ax.tick_params(labelsize=9)
    left.set_title("accuracy", fontsize=10)
    right.set_title("distance from the reference", fontsize=10)
    fig.suptitle(f"β = {beta:g}", fontsize=11)
    # the legend under the axes, where it cannot cover a curve
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center",
               ncol=2 if narrow else 3, frameon=False, fontsize=9)
    return fig


def leash_alt(beta, found):
    """Return the alt text of one frame."""
    return f"At beta = {beta:g}: " + "; ".join(
        f"{arm} arm accuracy {log['accuracy'][0]:.3f} to "
        f"{log['accuracy'][-1]:.3f}, KL {log['kl'][-1]:.3f} per token"
        for arm, log in found.items()) + "."


leash_runs = {(arm, float(b)): log
              for arm in ARMS for b, log in sweep[arm].items()}


def leash_at(beta):
    """Return {arm: log} at this beta (seed 0), training an arm not run
    yet."""
    new = [arm for arm in ARMS if (arm, beta) not in leash_runs]
    logs = experiment.run_arms([(arm, 0, beta) for arm in new], policy, rm,
                               cfg, progress=PROGRESS)
    leash_runs.update({(arm, beta): log for arm, log in zip(new, logs)})
    return {arm: leash_runs[arm, beta] for arm in ARMS}


def draw_frame(beta, narrow=False):
    """Return the slider's figure at this beta (wide, or for a phone)."""
    return draw_leash(beta, leash_at(beta), narrow)


explore(draw_frame, {"beta": LIVE_BETAS}, book_grids={"beta": BETAS},
        default={"beta": 0.5}, labels={"beta": "β (uneven steps)"},
        alt=lambda beta: leash_alt(beta, leash_at(beta)),
        continuous_update=False,
        caption="Accuracy and per-token KL to the reference per iteration, "
                "both arms, seed 0, at the β the slider selects. The slider "
                "steps through the values that were run, unevenly spaced: "
                f"{', '.join(f'{b:g}' for b in BETAS)}. Drag it right, to a "
                "tighter leash, and both arms end closer to the reference; "
                "at every β the verifier arm ends above the dotted start "
                "line, and the rm arm at or below it, further below the "
                "looser the leash.")

# %% [markdown]
# ### The per-prompt control, at an equal distance
#
# The sweep also settles the control of the previous section, which moved further from the
# reference than the batch-mean arm at the same $\beta$. The next cell finds the sweep's
# rm-arm runs (batch-mean baseline, seed 0) whose final KL lies on either side of the
# per-prompt arm's mean.

# %%
kl_centred, _ = control["per-prompt baseline"]["kl"]
by_kl = sorted((sweep["rm"][str(b)]["kl"][-1], b) for b in BETAS)
below = max((kl, b) for kl, b in by_kl if kl <= kl_centred)
above = min((kl, b) for kl, b in by_kl if kl > kl_centred)
print("rm arm's baseline   beta     KL   accuracy")
print(f"{'per-prompt':<18}{BETA['rm']:>6g}  {kl_centred:.3f}   "
      f"{pm(*control['per-prompt baseline']['accuracy'])} "
      f"(mean of {len(SEEDS)} seeds)")
for kl, b in (below, above):
    log = sweep["rm"][str(b)]
    print(f"{'batch-mean':<18}{b:>6g}  {kl:.3f}   "
          f"{log['accuracy'][0]:.3f} -> {log['accuracy'][-1]:.3f} (seed 0)")

# %% [markdown]
# At a comparable distance from the reference, none of these runs ends above its start. The
# per-prompt arm, which follows the RM's score more efficiently, ends about where the
# batch-mean run at the smaller KL does, and above the one at nearly its own KL, which fell
# to 0.307; that is one seed-0 run against a mean over five seeds, so it does not show the
# per-prompt arm doing better, only that it does no worse. The conclusion of the control
# stands, now for the right reason: the noise was slowing the optimizer down; the reward was
# pointing it the wrong way.

# %% [markdown]
# ## Does it depend on the starting checkpoint?
#
# The intervals of chapter 5 measure the spread over PPO seeds, all starting from one
# partial-SFT checkpoint, and the checkpoint may matter. The book's is SFT with seed 1,
# stopped by a fixed rule: as soon as it answers a third of the eval prompts right. Another
# seed, stopped by the same rule, would make a start just as fair, and chapter 5's intervals
# say nothing about how its result would change. This section measures that.
#
# First the starts. For SFT seeds 0 to 4, `robustness.partial_start` trains with the book's
# SFT settings and that seed, measures the greedy accuracy every 5 steps, and stops at the
# first measurement that reaches 1/3. Each start is stored beside the book's models, so
# making them costs about half a minute once on a 2-core machine; later runs read them
# back.

# %%
SFT_SEEDS = [0, 1, 2, 3, 4]
# SFT seed -> (partial policy, {'steps', 'accuracy'}), made side by side
starts = robustness.partial_starts(SFT_SEEDS, progress=PROGRESS)
book_seed = sft.SFTConfig().seed
same = all(torch.equal(a, b) for a, b in zip(
    starts[book_seed][0].state_dict().values(),
    policy.state_dict().values()))
print("SFT seed  steps  greedy accuracy")
for seed, (_, m) in starts.items():
    mark = "  <- the book's start" if seed == book_seed else ""
    print(f"{seed:>8}  {m['steps']:>5}  {m['accuracy']:>15.3f}{mark}")
print(f"SFT seed {book_seed}'s start is the book's policy, weight for "
      f"weight: {same}")

# %% [markdown]
# Then both arms from each start, with PPO seeds 0, 1 and 2, and each arm's gain in accuracy
# averaged over the three. Each start is its own run's reference, as the book's policy is in
# chapter 5; the reward model and every setting are the same. Only the gain is read, so
# each run evaluates on the eval prompts at its start and at its end, not after every
# iteration (`eval_every`, a setting of chapter 5's table): the same gains, without the
# evaluations no number reads. That is thirty runs, about a minute; the gains are stored in
# `outputs/sft_starts.json` and read back while the code, the settings and the starts are
# the same.

# %%
PPO_SEEDS = [0, 1, 2]
GAIN_CLAIM = 0.15  # chapter 5's claim: the verifier arm gains at least this


by_start = stored_starts(OUTPUTS / "sft_starts.json", starts, rm, BETA, cfg,
                         PPO_SEEDS, progress=PROGRESS)
gain_v = {k: float(np.mean(r["verifier"])) for k, r in by_start.items()}
gain_r = {k: float(np.mean(r["rm"])) for k, r in by_start.items()}
print(f"mean gain over PPO seeds {PPO_SEEDS}")
print("SFT seed  start    rm arm   verifier arm")
for seed, r in by_start.items():
    mark = "  <- the book's start" if seed == str(book_seed) else ""
    print(f"{seed:>8}  {r['start']:.3f}   {gain_r[seed]:+.3f}   "
          f"{gain_v[seed]:>+12.3f}{mark}")
n_starts = len(gain_v)
rank = sorted(gain_v, key=gain_v.get, reverse=True).index(str(book_seed))
n_big = sum(g >= GAIN_CLAIM for g in gain_v.values())
n_flat = sum(g <= 0.02 for g in gain_r.values())
n_ahead = sum(gain_v[k] > gain_r[k] for k in gain_v)
print()
print(f"verifier arm gains more than the rm arm from {n_ahead} of "
      f"{n_starts} starts")
print(f"rm arm gains at most 0.02 from {n_flat} of {n_starts} starts")
print(f"verifier arm gains at least {GAIN_CLAIM} from {n_big} of "
      f"{n_starts} starts")
print(f"verifier arm, mean gain over the starts: "
      f"{np.mean(list(gain_v.values())):+.3f}")
print(f"the book's start ranks {rank + 1} of {n_starts} by the verifier "
      "arm's gain")

# %% [markdown]
# What carries over from start to start is the direction: the verifier arm gains more than
# the rm arm, and the rm arm does not gain. The size does not carry over: the verifier arm's
# gain runs from +0.048 to +0.131. The gain of at least 0.15 that chapter 5 set out to show
# is reached from none of the five starts. The book's start is a middling one, third of five,
# its +0.063 a little below the mean over the starts, +0.074; the largest gain comes from SFT
# seed 3, the start that already answers the most sums right. With 64 samples per iteration
# and 25 iterations, how much the verifier's 0-or-1 signal can teach depends on how many of
# the policy's samples are right, and on which prompts. A single SFT run is an anecdote too.

# %% [markdown]
# ## What does a run look like from the inside?
#
# The eval curves of chapter 5 need a verifier, which real RLHF does not have. What a real run
# has is what the trainer logs about its own batches. `ppo_train` logs them under the names
# TRL's PPO trainer uses (`trl/experimental/ppo/ppo_trainer.py`, where the metrics dict is
# filled), so that the plots below read like a real run's dashboard. They show both arms'
# seed-0 runs, made at the top of the chapter.
#
# | name | what it is | what to watch for |
# | --- | --- | --- |
# | `objective/scores` | mean reward of the batch, before normalizing | It should rise. If it rises while an independent measure of quality does not, the policy is exploiting the reward. |
# | `objective/kl` | mean per-token log-ratio to the reference on the sampled tokens (k1) | A steady climb is the policy spending its leash; a jump means one update moved it far. TRL logs the sum over a completion's tokens; ours is per token. |
# | `objective/entropy` | mean per-token entropy of the sampling distribution, in nats | A fall toward 0 means the policy has stopped exploring: every sample of a prompt is the same, and the advantages vanish. |
# | `policy/clipfrac_avg` | fraction of completion tokens where the clip binds: the clipped term is the smaller one, so the token's gradient is cut off (TRL's definition, `pg_losses2 > pg_losses`) | Near 0, every update stays inside the clip band: healthy, unless the run has also stopped learning (a flat score and a flat KL). Above about 0.2, the updates are too large for the clip to keep them proximal. A ratio outside the band with the advantage pointing back inside does not count: its gradient is not cut. |
# | `policy/approxkl_avg` | $\tfrac12\,\mathrm{mean}\,(\log r)^2$ over the completion tokens, TRL's estimate of the KL between the sampling policy and the updated one (the k2 of Schulman's note) | How far one batch moved the policy; spikes come before instabilities. It is not `objective/kl`. |
# | `val/completion_length` | mean number of completion tokens, up to and including the first `;` | A drift in length is a classic sign of reward hacking; here it also tells whether the answers kept their format. TRL's PPO logs the count of end tokens in the batch (`val/num_eos_tokens`), its GRPO `completions/mean_length` (`trl/trainer/grpo_trainer.py`). |
# | `loss/policy_avg` | the PPO loss, averaged over the updates | Not a progress measure: the advantages are re-centred in every batch. Watch it only for NaN or spikes. |

# %% tags=["hide-input"]
STATS = [("objective/scores", "the reward's units"),
         ("objective/kl", "nats per token"),
         ("objective/entropy", "nats per token"),
         ("policy/clipfrac_avg", "fraction of tokens"),
         ("policy/approxkl_avg", "nats per token"),
         ("val/completion_length", "tokens"), ("loss/policy_avg", "loss")]
it = np.arange(1, cfg.iterations + 1)
# The panels: objective/scores is in each arm's own units (RM units, or
# the fraction of samples right), so each arm gets its own panel there.
PANELS = ([("objective/scores", "rm", "RM units"),
           ("objective/scores", "verifier", "fraction right")]
          + [(key, None, unit) for key, unit in STATS[1:]])


def draw_dashboard(narrow=False):
    """Return one panel per statistic (two for objective/scores, one per
    arm), both arms of the seed-0 run: three columns (legend in the free
    slot), or one column on a phone."""
    cols = 1 if narrow else 3
    rows = -(-len(PANELS) // cols)
    fig, axes = plt.subplots(
        rows, cols, squeeze=False, constrained_layout=True,
        figsize=(3.6, 1.7 * rows + 0.4) if narrow else (6.8, 2.0 * rows))
    for ax, (key, only, unit) in zip(axes.flat, PANELS):
        for arm in ARMS if only is None else (only,):
            ax.plot(it, runs[arm][key], color=ARM_COLORS[arm], lw=1.6,
                    label=f"{arm} arm")
        ax.set_title(key if only is None else f"{key}, {only} arm",
                     fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=8)
    # the x label on the lowest panel of each column
    for col in range(cols):
        last = max(k for k in range(col, len(PANELS), cols))
        axes.flat[last].set_xlabel("PPO iteration", fontsize=8)
    for ax in axes.flat[len(PANELS):]:
        ax.axis("off")
    handles = axes.flat[2].get_legend_handles_labels()  # both arms
    if narrow:
        fig.legend(*handles, loc="outside upper center", ncol=2,
                   frameon=False, fontsize=9)
    else:
        axes.flat[-1].legend(*handles, loc="center", frameon=False,
                             fontsize=9)
    return fig


show_figure(
    draw_dashboard,
    alt="Eight panels of training statistics per iteration for the "
        "seed-0 run of both arms: objective/scores of the rm arm in RM "
        "units and of the verifier arm as the fraction right, each on its "
        "own panel, then objective/kl, objective/entropy, "
        "policy/clipfrac_avg, policy/approxkl_avg, val/completion_length "
        "and loss/policy_avg for both arms.",
    caption="The training statistics of one run of each arm (seed 0), "
            "under TRL's names. objective/scores is in the reward's own "
            "units, so each arm has its own panel: RM units for the rm "
            "arm, the fraction of correct samples for the verifier arm. "
            "The verifier arm's score rises a little; the rm arm's jumps "
            "with the prompts drawn and ends a little lower. Both arms "
            "draw the same prompts at every iteration, so their entropy "
            "and length curves wiggle together. The clip fraction and the "
            "approximate KL fall to almost 0 after the first iterations, "
            "and the entropy and the completion length hardly move: "
            "nothing here tells the arm that learned sums from the one "
            "that did not.",
)
print(f"mean of iterations 1-5 -> 21-25   {'rm arm':>11}  "
      f"{'verifier arm':>16}")
for key, _ in STATS:
    print(f"{key:<24}" + "".join(
        f"{np.mean(runs[arm][key][:5]):>11.3f} -> "
        f"{np.mean(runs[arm][key][-5:]):<6.3f}" for arm in ARMS).rstrip())

# %% [markdown]
# Read the two dashboards as if there were no verifier. The verifier arm's
# `objective/scores`, the fraction of its samples that are right, rises a little. The rm
# arm's jumps from batch to batch by more than it moves over the run, and its last five
# iterations average a little lower than its first five (1.752 against 1.822): with 95% of
# the RM score's variance in a batch coming from which prompts were drawn, a batch's mean
# score says more about its prompts than about the policy. `objective/kl` grows faster for
# the arm on the lighter leash. The clip fraction and the approximate KL are largest in the
# first iterations and then fall toward 0: Adam's first steps move every weight by about the
# full learning rate, before its running averages have seen how noisy the gradients are, and
# the learning rate decays to 0 over the run. The entropy and the completion length hardly
# move: neither arm collapsed onto one answer per prompt, and neither changed the format of
# its answers. Their small jumps come at the same iterations in both arms because both arms'
# seed-0 runs draw the same prompts at every iteration: the prompts come from one generator
# seeded with the run's seed, and each iteration advances it by the same amount whatever the
# policy writes. Nothing on either dashboard says that one arm got better at sums and the other
# did not.
#
# ## What the analyses say
#
# Four conclusions, each with the numbers from this notebook that carry it.
#
# **The direction does not depend on the start; the size does.**

# %%
print(f"verifier arm ahead of the rm arm from {n_ahead} of {n_starts} "
      "starts")
print(f"verifier arm's mean gain: book's start {gain_v[str(book_seed)]:+.3f}"
      f", all {n_starts} starts {np.mean(list(gain_v.values())):+.3f}")
between = np.std(list(gain_v.values()), ddof=1)  # of the means of 3 runs
within = np.mean([np.std(r["verifier"], ddof=1) for r in by_start.values()])
print(f"std of the verifier arm's gain: between starts {between:.3f}, "
      f"between\n  PPO seeds from one start {within:.3f} (mean over starts)")

# %% [markdown]
# From every partial-SFT start made the same way, the verifier arm gained more than the rm
# arm. How much it gained varied from start to start; the book's start gains a little less
# than the average start. The gain varies more from start to start than from one PPO seed to
# another from the same start, even though each start's number is already a mean over three
# seeds. Chapter 5's intervals over PPO seeds do not cover the choice of start; a claim about
# the size of a gain needs several starts.
#
# **The prompt's share of the reward is noise a critic would remove, and it is not what held
# the rm arm back.**

# %%
per_prompt = control["per-prompt baseline"]
print(f"share of the prompt in a batch's variance: RM "
      f"{shares['rm']:.0%}, verifier {shares['verifier']:.0%}")
print("rm arm at the end, per-prompt baseline: RM score "
      f"{pm(*per_prompt['rm_score'], 2, '+')},\n  accuracy "
      f"{pm(*per_prompt['accuracy'])} (start "
      f"{summary['rm']['start']:.3f})")

# %% [markdown]
# Chapter 5's lesson 2 showed what a critic, the learned value function $V(s_t)$ of full
# PPO, would know here that the batch baseline does not: the value changes inside a
# completion, after every right or wrong digit. A critic would also remove the prompt's share
# of the noise, large for the RM. The control showed what that buys here: the rm arm follows
# the RM's score further, and its accuracy falls all the same. Removing noise changes how
# far the rm arm goes, not where. What a critic does buy is less noise per token, and
# chapter 7 measures how much, at 4 tokens and at 400: the saving grows with the length, and
# over hundreds of tokens the critic becomes load-bearing.
#
# **The leash contains damage but cannot create signal.**

# %%
for arm in ARMS:
    gains = [robustness.gain(log) for log in sweep[arm].values()]
    kls = [log["kl"][-1] for log in sweep[arm].values()]
    print(f"{arm + ' arm':<13} beta {BETAS[0]:g} to {BETAS[-1]:g}: accuracy "
          f"gain {min(gains):+.3f} to {max(gains):+.3f},\n"
          f"{'':<14}KL {min(kls):.3f} to {max(kls):.3f}")

# %% [markdown]
# Loosening $\beta$ lets the rm arm move several times further from the reference, and no
# setting turns the RM into a teacher of arithmetic: its accuracy never rises, and the looser
# the leash, the more it falls, by up to 0.095. The verifier arm gains at every $\beta$, and
# in these single runs the strength of the leash made little difference to how much. For the
# rm arm the leash limits the damage; for the verifier arm it did not hold back the gain. The
# leash decides how far a policy may go; where it goes is the reward's doing. Chapter 7 takes
# the leash off and lets the rm arm run longer.
#
# **A run's own statistics do not tell a good reward from a bad one.**

# %%
for arm in ARMS:
    scores = runs[arm]["objective/scores"]
    acc = runs[arm]["accuracy"]
    print(f"{arm + ' arm':<13} objective/scores {np.mean(scores[:5]):+.3f} "
          f"-> {np.mean(scores[-5:]):+.3f}; accuracy {acc[0]:.3f} -> "
          f"{acc[-1]:.3f}")

# %% [markdown]
# The verifier arm's batch score rises a little, in its own units; the rm arm's, dominated by
# which prompts each batch drew, ends a little lower than it began, within its jumps from
# batch to batch. The entropy, the length and the clip statistics look healthy in both. Only
# the verifier, which a real system does not have, says that one of them learned some sums
# and the other lost a few. A dashboard tells you whether the optimization is healthy;
# whether the reward is right has to be checked from outside it, with held-out judgments the
# policy was not trained on {cite}`gao2023scaling`.
#
# ## Summary
#
# - You can test a result against the choice of starting checkpoint: make other starts the
#   same way and run every arm from each. Here the verifier arm beat the rm arm from every
#   start, and the size of its gain depended on the start.
# - You can sweep the KL coefficient $\beta$ and read accuracy against distance from the
#   reference: the leash sets how far a policy goes, never which way.
# - You can split a reward's variance in a batch into the prompt's share and the answer's
#   (your `prompt_share`, exercise 6.1), and take the prompt's share out with a per-prompt
#   baseline that changes no expected gradient. Then compare at an equal KL, not at an
#   equal $\beta$, because standardizing the scores turns less noise into larger steps.
# - You can read a PPO run's training statistics under TRL's names (`objective/scores`,
#   `objective/kl`, `objective/entropy`, `policy/clipfrac_avg`, `policy/approxkl_avg`, the
#   completion length, `loss/policy_avg`), and you know what they cannot tell you: whether
#   the reward is the right one.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first, as in chapters 4 and 5.
#
# 1. **Why does a per-prompt baseline change no expected gradient?** The rm arm's control
#    subtracted $b(x)$, the RM's score of the reference's greedy answer to prompt $x$, from
#    every completion's reward. Show that this leaves the expected policy gradient unchanged.
#
# <details class="answer">
# <summary>Worked answer: a baseline that depends only on the prompt</summary>
#
# The policy gradient is $\mathbb{E}_{x}\,\mathbb{E}_{y \sim \pi(\cdot \mid x)}
# \big[(R(x, y) - b(x))\, \nabla_\theta \log \pi_\theta(y \mid x)\big]$. The part with $b$ is,
# for each prompt,
#
# $$
# \begin{aligned}
# b(x)\, \sum_y \pi_\theta(y \mid x)\, \nabla_\theta \log \pi_\theta(y \mid x)
# &= b(x)\, \sum_y \nabla_\theta \pi_\theta(y \mid x) \\
# &= b(x)\, \nabla_\theta \sum_y \pi_\theta(y \mid x) = b(x)\, \nabla_\theta 1 = 0 .
# \end{aligned}
# $$
#
# $b(x)$ may be any function of the prompt, however it was computed, as long as it does not
# depend on the sampled completion $y$: here it is the reference's greedy answer, which the
# sample does not touch. The argument holds for the reward as it is handed to the recipe.
# The recipe then standardizes the scores of each batch, dividing by their standard
# deviation, and the baseline shrinks that deviation. So the control pointed its steps the
# same way on average, and took larger ones: that is why the comparison above had to be made
# at an equal KL.
#
# </details>
#
# 2. **Which of the dashboard's statistics would have warned you about the rm arm?** Suppose
#    you had no verifier, only the seven statistics of the dashboard. Which would you watch, and what would you add?
#
# <details class="answer">
# <summary>Worked answer: what a dashboard can and cannot show</summary>
#
# None of the seven would have warned you here. `objective/scores` rose a little for the
# verifier arm; for the rm arm it jumped with the prompts each batch drew and ended a little
# lower, which reads as noise, not as a wrong reward, and the RM's score of the rm arm's
# greedy answers did rise a little (chapter 5). The KL grew slowly, as a leashed run's should;
# the entropy, the length and the clip statistics stayed in their healthy ranges. They measure
# the optimization, and the optimization worked: it raised the number it was handed. What
# they cannot measure is whether that number is the right one. For that you need a judgment
# the policy was not trained on: a held-out set labelled by people, or a second reward model
# trained on other data, scored on the policy's answers every few iterations. When its score stops rising while `objective/scores` keeps
# climbing, the policy has found the trained RM's blind spot, as chapter 7 shows with the
# leash off {cite}`gao2023scaling`.
#
# </details>
#
# 3. **Why compare at equal KL?** The per-prompt arm ended with a larger RM score and a
#    larger KL than the batch-mean arm at the same $\beta$. Why is "same $\beta$" not a fair
#    comparison here, and what would make it one without the sweep?
#
# <details class="answer">
# <summary>Worked answer: the same β is not the same leash</summary>
#
# The recipe divides each batch's scores by their standard deviation before adding the leash
# $-\beta\,\mathrm{kl}_t$. Taking out the prompt's share shrinks that standard deviation, so
# the same difference between two answers becomes a larger standardized score, while the
# leash keeps its size. Relative to the score, the leash got weaker. The fair comparison
# holds the distance from the reference fixed, which the sweep does by running the
# batch-mean arm at several $\beta$ and picking those whose KL brackets the other's. Without a
# sweep you could scale $\beta$ by the ratio of the two standard deviations, which keeps the
# leash's size relative to the score; or give both arms the adaptive controller of chapter 7
# with the same KL target, which sets $\beta$ to hold the distance.
#
# </details>
#
# 4. **More starts or more PPO seeds?** You have the budget for fifteen more pairs of runs.
#    Would you spend them on more PPO seeds from the book's start, or on more starts? What
#    does each tell you?
#
# <details class="answer">
# <summary>Worked answer: which spread you want to measure</summary>
#
# More PPO seeds from the one start shrink the interval around *that start's* gain: you learn
# the book's checkpoint better. More starts, each with a few PPO seeds, measure how the gain
# varies from checkpoint to checkpoint, and the first of the conclusions above printed that
# spread as the larger of the two: the standard deviation between starts is above the one
# between PPO seeds from a single start. If the claim is about "a partial-SFT policy made this
# way" rather than about one file on disk, spend the runs on starts. The direction of the
# result, verifier above rm, already held from every start; the size is what more starts
# would pin down.
#
# </details>
