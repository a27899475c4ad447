# %% [markdown]
# # 5. The two-arm experiment: RLHF on sums
#
# Everything is in place: a policy that adds correctly about a third of the time (chapter 3),
# a reward model that tells garbage from the truth but not a near-miss from it (chapter 4),
# a verifier that cannot be fooled, the KL leash (chapter 1) and the clipped objective
# (chapter 2). This chapter puts them together into the loop that InstructGPT made famous
# {cite}`ouyang2022instructgpt` and runs it twice, from the same starting policy, with the
# same frozen reference. The two runs, the *arms* of the experiment, differ in where the
# reward comes from, and in the strength of the leash that suits it. That is two differences
# at once: this chapter compares the arms as they are run, and chapter 6 ("Is the result
# robust?") runs both arms over a sweep of $\beta$ to tell the reward's share from the leash's.
#
# | arm | reward | $\beta$ |
# | --- | --- | --- |
# | rm | the reward model's score | 0.5, a strong leash |
# | verifier | the exact checker: 1 if the sum is right, else 0 | 0.08, a light leash that guards the answer format |
#
# You will write the two pieces that drive both runs (the advantages, with the leash inside
# the reward, and the loss), read the whole training loop stage by stage in the package's
# own code, repeat the experiment over several seeds, and read from the curves what the
# optimizer did with each reward. The short version: handed the truth, it raised the truth;
# handed the reward model's score, it raised that score no more than the arm that never saw
# it, and the chapters after this one show why.
#
# ```{admonition} What you need
# :class: tip
# Chapter 1 (the KL leash), chapter 2 (the clipped surrogate), chapter 3 (the policy, the
# language model as an MDP) and chapter 4 (the reward model and its blind spot). The first
# run of this notebook trains the policy and the reward model if they are not on disk yet,
# then makes the experiment and the runs of the worked answers, side by side on the
# computer's cores: about a minute on a machine with two cores, less with more to spare.
# Later runs read the stored runs back and take about fifteen seconds.
# ```

# %%
import copy
from dataclasses import asdict, fields

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirlhf import experiment, ppo, store, task
from minirlhf.arms import DEFAULT_BETA
from minirlhf.course.cases import run_cases
from minirlhf.course.drive import guard, preflight
from minirlhf.course.exercises import check, get
from minirlhf.course.explorer import explore, show_figure
from minirlhf.course.frontend import building_book, someone_watching
from minirlhf.course.runs import (load_or_run, same_curves, stored_arms,
                                  stored_experiment)
from minirlhf.course.settings import settings_table
from minirlhf.course.source import Source
from minirlhf.estimators import batch as batch_estimator
from minirlhf.leashes import reward as reward_leash
from minirlhf.model import (completion_logprobs, completion_mask, generate,
                            make_generator, n_params, reward_scores)
from minirlhf.palette import ARM_COLORS  # one color per arm, in every figure
from minirlhf.parallel import map_runs
from minirlhf.paths import OUTPUTS
from minirlhf.plots import plot_curves
from minirlhf.reward_model import bradley_terry_loss
from minirlhf.stats import mean_ci95, pm, print_claims

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or under nbval.
PROGRESS = someone_watching()

# %% [markdown]
# ## RLHF is PPO with text as the environment
#
# Proximal policy optimization {cite}`schulman2017ppo` was written for agents that act in an
# environment and collect rewards. RLHF uses it unchanged; only the environment is new.
#
# | reinforcement learning | here |
# | --- | --- |
# | state $s_t$ | the prompt and the tokens written so far: `23+45=6` |
# | action $a_t$ | the next token, one of the 13 characters `0123456789+=;` |
# | policy $\pi_\theta(a_t \mid s_t)$ | the language model's next-token distribution |
# | transition | append the token: deterministic, no dynamics to learn |
# | episode | one completion, at most 4 tokens, ending at `;` |
# | reward | 0 on every token but the last, where the whole text is scored |
#
# A *rollout* is the language model writing: sample a completion for each prompt of a batch
# and keep, for every token, its log-probability under the policy that sampled it. The cell
# below does one small rollout from the partial-SFT policy at the temperature the experiment
# samples at, and scores each completion both ways. Each completion is 4 tokens long; the
# mask marks the tokens up to and including the first `;`, the only ones that count, as in
# the SFT loss of chapter 3.

# %%
models = store.load_all(progress=PROGRESS)
policy, rm = models["policy"], models["rm"]
reference = policy  # ppo_train trains a copy: this one stays frozen
cfg = ppo.PPOConfig()

g = make_generator(0)
pairs = task.sample_pairs(8, g, task.train_pairs())  # (8, 2)
prompts = task.encode_prompts(pairs)  # (8, 6)
completions = generate(policy, prompts, cfg.temperature,
                       generator=g)  # (8, 4)
mask = completion_mask(completions)  # (8, 4)
with torch.no_grad():
    logp = completion_logprobs(policy, prompts, completions,
                               cfg.temperature)  # (8, 4)
rm_score = ppo.rm_reward(rm)(pairs, prompts, completions)  # (8,)
verified = ppo.verifier_reward(pairs, prompts, completions)  # (8,)
kinds = task.batch_kinds(pairs, completions)

print("prompt  tokens mask  log-probs of the kept tokens   RM  right  kind")
for i in range(len(pairs)):
    a, b = pairs[i].tolist()
    tokens = "".join(task.VOCAB[t] for t in completions[i].tolist())
    bits = "".join(str(int(m)) for m in mask[i].tolist())
    kept = int(mask[i].sum())
    lp = " ".join(f"{v:+.2f}" for v in logp[i, :kept].tolist())
    print(f"{task.format_prompt(a, b):<7} {tokens:<6} {bits}  {lp:<24}"
          f"{rm_score[i]:+6.2f}  {verified[i]:>4.0f}   {kinds[i]}")

# %% [markdown]
# Neither reward says anything about the tokens one by one: the reward arrives once, at the
# end of the episode, and the algorithm has to share it out. The verifier's column is 1
# exactly where the kind says `correct`. The RM's column is harder to read: its scores swing
# by whole units from one prompt to the next, right answer or not. We will come back to
# that.
#
# ## The recipe
#
# One call, `ppo.ppo_train(policy, reference, reward_fn, beta, config)`, runs either arm.
# Each of its iterations does what every RLHF trainer does, at toy scale:
#
# 1. **Rollout.** Sample one completion for each of 64 training prompts at temperature 0.7
#    and keep each token's log-prob under the sampling policy, `old_logp`, and under the
#    frozen reference, `ref_logp`.
# 2. **Score.** One number per completion, at its end: the RM's score or the verifier's 1 or
#    0, standardized over the batch and clipped,
#    $z = \mathrm{clip}\big((s - \bar s)/(\sigma_s + 10^{-4}), -3, 3\big)$.
# 3. **The leash, in the reward.** Per token,
#    $\mathrm{kl}_t = \mathrm{clamp}(\texttt{old\_logp}_t - \texttt{ref\_logp}_t, -10, 10)$,
#    computed once from the policy that sampled. Each completion token earns the reward
#    $r_t = -\beta\,\mathrm{kl}_t$, and the last one earns $z$ on top.
# 4. **Advantages.** The return from each token to the end, $G_t = r_t + r_{t+1} + \dots$, minus
#    a baseline: the batch mean of $G_t$ over the completions that reach position $t$.
# 5. **Update.** Two gradient steps on the clipped surrogate of chapter 2, averaged over the
#    completion tokens only (the mask), then throw the batch away and sample a new one.
# 6. **Evaluate.** Greedy answers to the 400 fixed evaluation prompts: the true accuracy (the
#    verifier), the RM's mean score of those answers (the proxy the rm arm optimizes), and the
#    per-token KL from the policy to the reference.
#
# **What kind of algorithm this is.** There is no critic here, no learned value function
# that predicts each token's return: the baseline is a batch mean. That makes the loop
# clipped policy gradient with a batch baseline, closer to REINFORCE with a baseline
# {cite}`williams1992reinforce`, to RLOO {cite}`ahmadian2024rloo` (REINFORCE leave-one-out,
# which samples several completions of a prompt and compares each with the mean of the
# others) and to GRPO {cite}`shao2024deepseekmath` (chapter 8) than to the PPO of
# InstructGPT {cite}`ouyang2022instructgpt`. Full PPO-RLHF adds the critic: a *value head*
# trained alongside the policy with a loss of its own, whose predictions GAE turns into
# advantages. Chapter 7 builds it and measures what it would buy here; this chapter does not
# need it. Everything else, the rollout, the leash in the per-token reward, the clipped
# surrogate and the mask, is the same as in full PPO.
#
# Every setting lives in one dataclass, `ppo.PPOConfig`; its defaults are the recipe, and
# the arms pass their own $\beta$ next to it. The table below is read from the package's
# source rather than retyped: each setting's name and default as written in the class,
# and the docstring under it, which says what the setting does and what TRL calls it. It is
# long, a glossary to come back to: the book's page keeps it folded behind a button, and in
# JupyterLab you can fold it by clicking the bar to the left of the output. It names a few
# things the chapter explains further down or later: *whitening* the advantages (subtracting
# their mean and dividing by their standard deviation over the batch, in the box after the
# table), the adaptive leash's `kl_target` (chapter 7) and the group estimators of GRPO
# (chapter 8).

# %% tags=["hide-input", "hide-output"]
print(settings_table(ppo.PPOConfig))

# %% [markdown]
# ```{admonition} Where the KL goes, and why it is counted once
# :class: important
# The KL enters as a **per-token reward**, as in InstructGPT {cite}`ouyang2022instructgpt` and
# in TRL's PPO trainer (`trl/experimental/ppo/ppo_trainer.py`: `non_score_reward = -kl_coef *
# kl`, with the score added at the end of the response, one position past its last token
# when there is room), and the loss has **no separate KL term**.
# Because each token's advantage is built from the return that follows it, a token pays for
# its own divergence *and* for the divergence of the tokens it leads to: a first digit that
# steers the answer where the policy and the reference disagree is charged for what comes
# after it. Because $\mathrm{kl}_t$ is computed from `old_logp`, the policy that sampled, it is
# a constant during the two updates, like the rest of the advantage, and is never
# differentiated itself. GRPO puts its leash (k3) into the loss instead
# {cite}`shao2024deepseekmath`; `PPOConfig(kl_placement="loss")` does that here. Doing both
# would charge the leash twice (chapter 2 showed what that does).
#
# One detail of this recipe is ours: the *score* is standardized before the leash is added.
# So $\beta$ is measured in units of a standardized score, whatever the reward's own scale,
# RM units or 0-or-1, and the two arms' $\beta$ can be compared directly. Ziegler et al.
# normalize their reward model once, before RL, so that its scores on the starting policy's
# samples have mean 0 and variance 1 {cite}`ziegler2019finetuning`; we do the same per batch.
# TRL adds the raw score instead, so its `kl_coef` (default 0.05) is in the reward model's
# units and is not comparable with our $\beta$; it then whitens the advantages (subtracts
# their mean and divides by their standard deviation over the batch), which we do not.
# ```
#
# Standardizing is what lets one recipe serve both rewards. The RM scores in its own units,
# spread over several of them; the verifier pays 0 or 1. After subtracting the batch mean and
# dividing by the batch's standard deviation, both give scores of mean 0 and spread 1.
# The $10^{-4}$ added to the standard deviation turns a batch of equal rewards into
# scores of 0 instead of 0/0, and the clip at $\pm 3$ guards against a batch in which one
# completion sits far from all the others: with 0-or-1 rewards and a fraction $p$ of right
# answers, a right answer's standardized score is $(1 - p)/\sqrt{p(1 - p)}$, above 3 once $p$
# falls below one in ten. The first batch of each arm:

# %%
g = make_generator(1)
batch_pairs = task.sample_pairs(cfg.batch_size, g,
                                task.train_pairs())  # (64, 2)
batch_prompts = task.encode_prompts(batch_pairs)  # (64, 6)
batch = generate(policy, batch_prompts, cfg.temperature,
                 generator=g)  # (64, 4)
batch_std = {}  # the spread of each reward on this batch
print(f"{'score':<9} {'mean':>6}  {'std':>5}  {'min':>6}  {'max':>6}  "
      f"{'z min':>5}  {'z max':>5}  clipped")
for name, reward_fn in (("rm", ppo.rm_reward(rm)),
                        ("verifier", ppo.verifier_reward)):
    r = reward_fn(batch_pairs, batch_prompts, batch).double()  # (64,)
    z = batch_estimator.standardized_scores(
        r, cfg.adv_clip, cfg.adv_eps)  # (64,)
    n_clipped = int((z.abs() == cfg.adv_clip).sum())
    batch_std[name] = r.std(unbiased=False).item()
    print(f"{name:<9} {r.mean():+.3f}  {r.std(unbiased=False):.3f}  "
          f"{r.min():+.3f}  {r.max():+.3f}  {z.min():+.2f}  {z.max():+.2f}"
          f"  {n_clipped:>2} of 64")

# %% [markdown]
# ## Exercise 5.1: `kl_shaped_advantages`
#
# Write the step that turns one score per completion into one advantage per token, with the
# leash inside the reward: steps 3 and 4 of the recipe. For completion $b$ and token $t$,
# with mask $m_{b,t}$ and $L_b$ the index of the completion's last kept token:
#
# $$
# \begin{aligned}
# \mathrm{kl}_{b,t} &= \mathrm{clamp}(\texttt{old\_logp}_{b,t} - \texttt{ref\_logp}_{b,t},\, -c,\, c),\\
# r_{b,t} &= -\beta\, \mathrm{kl}_{b,t}\, m_{b,t} + [t = L_b]\; z_b ,\\
# G_{b,t} &= \textstyle\sum_{t' \ge t} r_{b,t'},\\
# \bar G_t &= \textstyle\sum_{b'} m_{b',t}\, G_{b',t} \big/ \sum_{b'} m_{b',t},\\
# A_{b,t} &= m_{b,t}\,\big(G_{b,t} - \bar G_t\big).
# \end{aligned}
# $$
#
# **Contract.** `kl_shaped_advantages(scores, old_logp, ref_logp, mask, beta, kl_clamp=10.0)`:
#
# - `scores` has shape (B,): $z_b$, the standardized score of each completion. `old_logp`,
#   `ref_logp` and `mask` are float tensors of shape (B, T): the log-probs of the sampled
#   tokens under the policy that sampled them and under the reference, and 1 for a completion
#   token, 0 for what follows the first `;`. Each row of the mask keeps a prefix of at least
#   one token.
# - The KL uses `old_logp`, the policy that sampled: it is part of the reward, fixed when the
#   batch was drawn. Keep its sign, and clamp it to $[-c, c]$ with $c$ = `kl_clamp`.
# - The baseline of position $t$ is the mean of $G_{\cdot,t}$ over the completions that reach
#   $t$; the advantage of a token the mask drops is 0.
# - Return a float tensor of shape (B, T). Do not change the inputs in place.
#
# **Examples.** Two completions of three tokens, scores 1 and 0, $\beta = 0.5$; the first has
# $\mathrm{kl} = (0.1, 0.2, 0.3)$, the second none. The first earns $r = (-0.05, -0.1, 1 - 0.15)$
# and so $G = (0.70, 0.75, 0.85)$: its first token carries the cost of all three tokens'
# divergence. The second has $G = (0, 0, 0)$. The baselines are $(0.35, 0.375, 0.425)$, and the
# advantages are $\pm$ those.
#
# **How it is judged.** Thirteen cases worked by hand, listed in the check's report: no
# divergence (the score reaches every token), the example above, a shorter completion, a
# baseline over the rows that reach a position, a runaway log-ratio clamped from above and a
# dropped token's clamped from below, `kl_clamp` as an argument, a negative KL, a padding token
# whose KL must not count, a batch of one, three rows whose baselines differ by position,
# scores at an offset of $10^8$ (an RM's level is arbitrary: the baseline must take it away
# with no digit lost), and a position no completion reaches. The result must be a
# (B, T) tensor within $10^{-4}$ of the values worked by hand.

# %% tags=["solution"]
def kl_shaped_advantages(scores, old_logp, ref_logp, mask, beta,
                         kl_clamp=10.0):
    """Return the advantages (B, T): the leash -beta * kl as a per-token
    reward, the score on the last kept token, returns-to-go, minus the
    batch mean of the returns at each position."""
    # BEGIN SOLUTION
    kl = (old_logp - ref_logp).clamp(-kl_clamp, kl_clamp)  # (B, T), fixed
    rewards = -beta * kl * mask  # (B, T): the leash, token by token
    last = mask.sum(1).long() - 1  # (B,): each completion's last kept token
    rewards[torch.arange(len(scores)), last] += scores  # score at the end
    returns = rewards.flip(1).cumsum(1).flip(1) * mask  # (B, T): G_t
    baseline = returns.sum(0) / mask.sum(0).clamp(min=1)  # (T,)
    return (returns - baseline) * mask
    # END SOLUTION

# %% [hints] kl_shaped_advantages

# %%
check("kl_shaped_advantages", kl_shaped_advantages);

# %% [markdown]
# ## Exercise 5.2: `ppo_token_loss`
#
# Write the loss that the two gradient steps of each iteration minimise. It is chapter 2's
# clipped surrogate grown up: tensors instead of lists, a batch of completions with a mask
# instead of a flat list of tokens. The leash is already inside the advantages, so the loss
# has no KL term:
#
# $$
# \mathrm{ratio}_{b,t} = e^{\,\texttt{new\_logp}_{b,t} - \texttt{old\_logp}_{b,t}},
# $$
#
# $$
# \mathcal{L} = -\frac{1}{\sum_{b,t} m_{b,t}} \sum_{b,t} m_{b,t}\,
# \min\!\big(\mathrm{ratio}_{b,t} A_{b,t},\;
# \mathrm{clip}(\mathrm{ratio}_{b,t}, 1-\epsilon, 1+\epsilon)\, A_{b,t}\big).
# $$
#
# **Contract.** `ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon=0.2)`:
#
# - All four are float tensors of shape (B, T): the log-probs of the sampled tokens under the
#   policy being trained (with gradient) and under the policy that sampled them, the
#   advantages of exercise 5.1, and the mask.
# - Return the loss to *minimise*, a 0-d torch tensor that can be backpropagated (no
#   `.item()`): minus the mean of the clipped surrogate over the tokens whose mask is 1.
#   Tokens with mask 0 must not count, in the sum or in the count.
# - Do not change the inputs in place.
#
# **Examples.** With new = old (ratio 1), the loss is minus the mean advantage over the kept
# tokens. One token with advantage 1 whose ratio rose to $e^{0.5} = 1.65$: the clip caps it at
# $1 + \epsilon = 1.2$, and the loss is $-1.2$.
#
# **How it is judged.** Eleven cases worked by hand, listed in the check's report: the
# on-policy case, a padding token with a wild ratio that must not count, the ratio clipped
# above with $A > 0$ and below with $A < 0$, a fallen ratio with $A > 0$ left unclipped, a
# rising ratio with $A < 0$ left unclipped, a mean over tokens rather than of row means,
# advantages that differ token by token, `epsilon` as an argument, a zero advantage, and a
# batch where the mean of the token-by-token minimum differs from the smaller of the two
# terms' means. The result must be a
# 0-d tensor within $10^{-4}$ of the value worked by hand, whose gradient with respect to
# `new_logp` is the package's.

# %% tags=["solution"]
def ppo_token_loss(new_logp, old_logp, advantages, mask, epsilon=0.2):
    """Return the clipped-surrogate loss to minimise, a 0-d tensor: minus
    the mean over masked tokens of min(ratio * A, clip(ratio) * A)."""
    # BEGIN SOLUTION
    ratio = torch.exp(new_logp - old_logp)  # (B, T)
    clipped = ratio.clamp(1 - epsilon, 1 + epsilon)  # (B, T)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    return -(surrogate * mask).sum() / mask.sum()
    # END SOLUTION

# %% [hints] ppo_token_loss

# %%
check("ppo_token_loss", ppo_token_loss);

# %% [markdown]
# ## Your functions drive the run
#
# `ppo_train` takes both as arguments, `advantage_fn` and `loss_fn`, with exactly the
# signatures of the exercises. The next cell hands it yours when they pass every check and
# then give the package's answer (and, for the loss, its gradient) on one batch of the runs'
# size, 64 completions; otherwise the package's own versions,
# `minirlhf.estimators.batch.kl_shaped_advantages` and
# `minirlhf.leashes.reward.ppo_token_loss`, and it says which and why. During the runs each
# of your results is checked again (a finite tensor, and a loss with a gradient): a bad one
# stops the run with a line that names your function.

# %%
mine = {
    "kl_shaped_advantages": (kl_shaped_advantages,
                             batch_estimator.kl_shaped_advantages),
    "ppo_token_loss": (ppo_token_loss, reward_leash.ppo_token_loss),
}
drive = {}
for name, (yours, package_fn) in mine.items():
    verdict = run_cases(yours, get(name))
    refused = preflight(name, yours) if verdict.passed else ""
    where = f"{package_fn.__module__}.{name}"  # the package's own
    if verdict.passed and not refused:
        drive[name] = guard(name, yours)
        print(f"Your {name} passes every check: it drives the runs below.")
    elif refused:
        drive[name] = package_fn
        print(f"{refused}\nThe runs below use {where}.")
    else:
        drive[name] = package_fn
        n_checks = len(verdict.results)
        why = ("is not written yet" if verdict.not_implemented
               else f"passes {verdict.n_passed} of {n_checks} checks")
        print(f"Your {name} {why},\nso the runs below use the package's\n"
              f"{where}.\nWrite it, run its check, then run the "
              "notebook from here again:\nyours will drive the runs.")
advantage_fn = drive["kl_shaped_advantages"]
loss_fn = drive["ppo_token_loss"]

# %% [markdown]
# ## The loop, stage by stage
#
# `ppo_train` is the whole training loop, and it is short because each stage of an iteration
# is a function of its own in `minirlhf/ppo.py`. This section shows each stage as the
# package's own source, read from the package when the cell runs (so the page cannot drift
# from the code that made the runs), each followed by the stage run once on a real batch.
# Your two functions sit inside two of the stages: `score_and_advantages` calls your
# `kl_shaped_advantages` (exercise 5.1) through its argument `advantage_fn`, and
# `ppo_update` calls your `ppo_token_loss` (exercise 5.2) through `loss_fn`. The cell above
# chose them, and every run of this chapter passes them in.
#
# Three things in the source below are there for later methods. GRPO, which chapter 8 builds,
# samples several completions of each prompt and compares each with its own group:
# `group_size` says how many (1 here). `advantages` names the advantage estimator, which a
# table in `minirlhf/estimators/` looks up: chapter 5's is `"batch"`, and each later one is a
# module of that folder. And a rollout carries `extras`, whatever data an estimator needs
# beyond the fields below (chapter 5's needs none), so that a new estimator leaves this
# chapter's code as it is.
#
# First the loop itself. Steps 1 to 6 in its comments are the recipe's; step 7, which moves
# $\beta$ toward a target, is chapter 7's adaptive leash and is off here. The rest is
# bookkeeping: a copy of the policy to train, one random generator for the prompts and the
# samples, Adam, the log, and a progress bar.

# %%
Source(ppo.ppo_train)

# %% [markdown]
# ### 1. Rollout
#
# A rollout returns one batch as a small dataclass, so that the later stages take one
# argument instead of seven. Every tensor in it is fixed once the batch is drawn: the update
# differentiates only the new log-probs it computes itself.

# %%
Source(ppo.Rollout)

# %% [markdown]
# `rollout` draws the prompts, lets the policy write, and scores each sampled token twice:
# its log-probability under the policy that sampled it (`old_logp`, the denominator of every
# ratio in the update) and under the frozen reference (`ref_logp`, for the leash). It runs
# under `torch.no_grad()`: nothing here is trained.

# %%
Source(ppo.rollout)

# %% [markdown]
# Run on its own, with four prompts (a small `PPOConfig`, the recipe's other settings):

# %%
small = ppo.PPOConfig(batch_size=4)
stage_batch = ppo.rollout(policy, reference, task.train_pairs(), small,
                          make_generator(0))
for field in fields(stage_batch):
    value = getattr(stage_batch, field.name)
    if isinstance(value, dict):  # extras: what a later estimator needs
        print(f"{field.name:<12}{value}")
        continue
    print(f"{field.name:<12}{str(tuple(value.shape)):<9}"
          f"first row {np.round(value[0].tolist(), 2).tolist()}")
a, b = stage_batch.pairs[0].tolist()
text = "".join(task.VOCAB[t] for t in stage_batch.completions[0].tolist())
print(f"first row as text: {task.format_prompt(a, b)}{text}")

# %% [markdown]
# The first row's completion is four token ids (`;` is id 12, and it also pads the prompt on
# the left); the mask keeps the tokens up to and including the first `;`. Here the policy *is* the reference, as at the start of every
# run, so `old_logp` and `ref_logp` agree and every $\mathrm{kl}_t$ is 0.
#
# ### 2-4. Score, leash and advantages
#
# One score per completion from the reward function, then the advantages, made by the
# estimator that `cfg.advantages` names with its own function, or with `advantage_fn` when
# one is given: this is where exercise 5.1 plugs in.

# %%
Source(ppo.score_and_advantages)

# %% [markdown]
# Chapter 5's estimator, `"batch"`, standardizes the scores over the batch and hands them to
# `fn`: the package's `kl_shaped_advantages`, or yours, which `ppo_train` passes as
# `advantage_fn`. With the leash in the loss instead (`kl_placement="loss"`, GRPO's
# placement), the advantages get $\beta = 0$ and `ppo_update` adds the leash.

# %%
Source(batch_estimator.leashed_advantages)

# %% [markdown]
# On the batch above, with the rm arm's reward and $\beta$, and the `advantage_fn` this
# notebook drives its runs with:

# %%
beta_rm = DEFAULT_BETA["rm"]
stage_rewards, stage_adv = ppo.score_and_advantages(
    stage_batch, ppo.rm_reward(rm), beta_rm, small, advantage_fn)
print("RM score    ", np.round(stage_rewards.tolist(), 2).tolist())
for i in range(len(stage_adv)):
    print(f"advantages {i}", np.round(stage_adv[i].tolist(), 2).tolist())

# %% [markdown]
# With no divergence yet, each completion's kept tokens all carry its standardized score
# minus the batch baseline of their position; the tokens past the `;` carry 0. The first row
# is the raw score, in the reward model's units; only its standardized version, $z$, enters
# the advantages, so the two rows are on different scales.
#
# ### 5. The update
#
# Two gradient steps on the same batch, each through your loss (exercise 5.2, `loss_fn`),
# with the gradient norm clipped before Adam's step. Which loss depends on where the leash
# acts: `leashes.get(cfg.kl_placement)` holds the package's function and how the update
# calls it. With the leash in the reward, as here, that call is
# `fn(new_logp, batch.old_logp, adv, batch.mask, cfg.epsilon)`, your `ppo_token_loss` with
# the exercise's signature. After each step it records two numbers
# under TRL's names: `policy/clipfrac_avg`, the fraction of completion tokens whose gradient
# the clip cut off, and `policy/approxkl_avg`, half the mean squared log-ratio of the new
# policy to the one that sampled, chapter 1's k2 estimate of how far the update moved it.

# %%
Source(ppo.ppo_update)

# %% [markdown]
# Run on the batch above, on a copy of the policy (the one this chapter starts from must
# stay as it is):

# %%
stage_policy = copy.deepcopy(policy).train()
stage_opt = torch.optim.Adam(stage_policy.parameters(), lr=small.lr)
stage_stats = ppo.ppo_update(stage_policy, stage_opt, stage_batch, stage_adv,
                             beta_rm, small, loss_fn)
for name, value in stage_stats.items():
    print(f"{name:<22}{value:+.6f}")

# %% [markdown]
# The first step starts with every ratio at exactly 1, so nothing is clipped; the second
# starts from wherever the first left the policy. The loss is averaged over the two steps.
#
# ### 6. Logging and evaluation
#
# `batch_metrics` turns the batch and the update's statistics into the numbers a real
# trainer logs per iteration (the table of training statistics in chapter 6 says what each
# shows). Then `evaluate` (`minirlhf.evaluation`) answers the 400 fixed evaluation prompts
# greedily and returns the three curves the figures below draw: true accuracy, the RM's
# score, and the exact KL to the reference.

# %%
Source(ppo.batch_metrics)

# %%
for name, value in ppo.batch_metrics(stage_batch, stage_rewards, stage_stats,
                                     beta_rm).items():
    print(f"{name:<24}{value:+.4f}")

# %% [markdown]
# Now the two arms, seed 0, 25 iterations each, with those functions. The next cell trains
# both runs every time it runs (they are not stored), about five seconds on every run of
# the notebook; in JupyterLab it shows a progress bar. Nothing else differs between
# them but the reward function and $\beta$; `rm` is passed to both only so that the RM's
# score of the greedy answers can be logged. The two runs share nothing, so
# `map_runs(run, items)` (from `minirlhf.parallel`) makes them side by side, one worker process
# per core, and returns what `[run(item) for item in items]` would: the same logs, to the last
# digit, in the same order.

# %%
ARMS = {"rm": (ppo.rm_reward(rm), DEFAULT_BETA["rm"]),
        "verifier": (ppo.verifier_reward, DEFAULT_BETA["verifier"])}


def seed0_run(arm):
    """Return the log of one arm's run, seed 0, with your functions."""
    reward_fn, beta = ARMS[arm]
    _, log = ppo.ppo_train(
        policy, reference, reward_fn, beta, ppo.PPOConfig(seed=0), rm=rm,
        loss_fn=loss_fn, advantage_fn=advantage_fn, progress=PROGRESS,
        desc=f"{arm} arm, seed 0")
    return log


runs = dict(zip(ARMS, map_runs(seed0_run, ARMS, progress=PROGRESS)))
print("arm (beta)        true accuracy     RM score of greedy"
      "   KL per token")
for arm, log in runs.items():
    print(f"{arm + f' ({ARMS[arm][1]:g})':<16}"
          f"{log['accuracy'][0]:.3f} -> {log['accuracy'][-1]:.3f}"
          f"    {log['rm_score'][0]:+.2f} -> {log['rm_score'][-1]:+.2f}"
          f"      {log['kl'][-1]:.3f}")

# %% [markdown]
# A single run of each arm is an anecdote: sampling noise alone could open or close a gap of
# a few points. The experiment repeats both arms over several seeds (each seed draws other
# training prompts and other samples; the starting policy and the reference are the same).
#
# ## Two arms, five seeds
#
# `minirlhf.experiment` runs both arms for seeds 0 to 4 from the same starting policy;
# `python -m minirlhf.commands.experiment` does the same from a terminal. The next cell reads
# the results from `outputs/results.json` when they were made by the package's current code
# with these settings and from the same starting policy, and otherwise runs the experiment
# now (ten runs of 25 iterations, side by side on the computer's cores) and writes them
# there, with the three figures (`minirlhf.course.runs.stored_experiment` does that;
# chapter 6 reads the same file through it, and `load_or_run` does the same bookkeeping for
# every other stored run).
#
# The experiment uses the package's own functions, and its seed 0 is the pair of runs above. The
# last line of the cell says whether the two agree to the last digit. They do when your
# functions compute what the package's compute, operation for operation. Functions that are
# right but round differently (the ratio as `new_logp.exp() / old_logp.exp()`, say) give
# curves that differ in their last digits: every sample depends on all the updates before
# it, so a difference, once made, is carried along.

# %%
SEEDS = [0, 1, 2, 3, 4]
BETA = {arm: beta for arm, (_, beta) in ARMS.items()}


results = stored_experiment(SEEDS, cfg, BETA,
                            {(arm, "0"): runs[arm] for arm in ARMS},
                            progress=PROGRESS)
logs = {arm: [results["arms"][arm][str(s)] for s in SEEDS] for arm in ARMS}
curves = {arm: {key: np.array([log[key] for log in logs[arm]])  # (5, 26)
                for key in ("accuracy", "rm_score", "kl")} for arm in ARMS}
print("Seed 0 of the experiment and the runs above agree to the last digit:",
      all(same_curves(logs[arm][0], runs[arm]) for arm in ARMS))

# %% [markdown]
# Before the figures, three yardsticks for the RM's scale, which means nothing by itself
# (chapter 4): its mean score of the 400 evaluation prompts answered all correctly, all with
# a near-miss, and all with garbage.

# %%
eval_pairs = task.eval_pairs()  # (400, 2)
eval_prompts = task.encode_prompts(eval_pairs)  # (400, 6)
g = make_generator(0)
sheets = {
    "every answer correct": task.correct_completions(eval_pairs),
    "every answer a near-miss": task.wrong_answers(eval_pairs, "near_miss",
                                                   g),
    "every answer garbage": task.wrong_answers(eval_pairs, "random", g),
}
with torch.no_grad():
    yardstick = {name: reward_scores(rm, eval_prompts, c).mean().item()
                 for name, c in sheets.items()}  # (400, 4) answers each
for name, score in yardstick.items():
    print(f"mean RM score, {name:<26} {score:+.2f}")

# %% [markdown]
# The three figures: for each arm the mean over the five seeds, with a band that spans the
# 95% interval of that mean; on the first, the original run (one seed; see "Ours beside the
# original run" below) as open markers at its start and end, and on the second the first two
# yardsticks.

# %% tags=["hide-input"]
FIGURES = {  # key: (y label, title, the y label on a phone)
    "accuracy": ("true accuracy\n(greedy, 400 eval prompts)",
                 "What the verifier says", "true accuracy (greedy)"),
    "rm_score": ("RM score of the greedy answers\n(reward-model units)",
                 "What the reward model says", "RM score (RM units)"),
    "kl": ("KL to the reference\n(nats per token)", "How far each arm moved",
           "KL (nats per token)"),
}


def draw_metric(key, narrow=False):
    """Return a figure of `key` per iteration: both arms, mean over seeds
    with its 95% interval as a band; narrow=True lays it out for a phone."""
    ylabel, title, short = FIGURES[key]
    fig, ax = plt.subplots(figsize=(3.6, 4.3) if narrow else (6.8, 3.7),
                           constrained_layout=True)
    plot_curves(results, key, short if narrow else ylabel, title, ax=ax)
    if key == "accuracy":
        for arm in ARMS:
            original = experiment.ORIGINAL[arm]
            ax.plot([0, cfg.iterations],
                    [original["start"], original["end"]],
                    ls="none", marker="o", mfc="white", mec=ARM_COLORS[arm],
                    ms=8, mew=1.6, label=f"original run, {arm} arm")
    if key == "rm_score":
        names = list(yardstick)[:2]  # all correct, all near-misses
        for name, ls in zip(names, ("--", ":")):
            ax.axhline(yardstick[name], color="black", lw=1, ls=ls,
                       label=f"RM score of {name}")
    # the legend under the axes, where it cannot cover a curve
    ax.get_legend().remove()
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center",
               ncol=1 if narrow else 2, frameon=False, fontsize=8)
    return fig


def end_text(arm, key, digits=3):
    """Return 'start -> end' of the seed means of one arm and metric."""
    c = curves[arm][key].mean(0)
    return (f"{c[0]:.{digits}f} at the start to {c[-1]:.{digits}f} "
            f"after {cfg.iterations} iterations")


BAND = f"mean over {len(SEEDS)} seeds, band: 95% interval of the mean"
show_figure(
    lambda narrow=False: draw_metric("accuracy", narrow),
    alt=f"True accuracy per PPO iteration, mean over {len(SEEDS)} seeds. "
        f"Verifier arm: from {end_text('verifier', 'accuracy')}. RM arm: "
        f"from {end_text('rm', 'accuracy')}.",
    caption="True accuracy of the greedy answers on the 400 evaluation "
            f"prompts ({BAND}; open markers: the original run). The "
            "verifier arm climbs away from the common start; the rm arm "
            "ends a little below it.",
)
show_figure(
    lambda narrow=False: draw_metric("rm_score", narrow),
    alt=f"Mean RM score of the greedy answers per iteration. Verifier arm: "
        f"from {end_text('verifier', 'rm_score', 2)}. RM arm: from "
        f"{end_text('rm', 'rm_score', 2)}. For comparison, every answer "
        f"correct scores {yardstick['every answer correct']:.2f} and every "
        f"answer a near-miss {yardstick['every answer a near-miss']:.2f}.",
    caption="The reward model's mean score of the same greedy answers, the "
            f"proxy the rm arm is trained on ({BAND}). By the end, the two "
            "arms' answers score alike although the verifier arm's are "
            "right more often: by the RM's measure, the worse policy looks "
            "as good as the better one.",
)
show_figure(
    lambda narrow=False: draw_metric("kl", narrow),
    alt=f"Per-token KL from the policy to the reference per iteration. "
        f"Verifier arm: from {end_text('verifier', 'kl')}. RM arm: from "
        f"{end_text('rm', 'kl')}.",
    caption="Exact KL(policy || reference) per completion token of the "
            f"greedy answers, at the sampling temperature ({BAND}). The "
            "verifier arm, on the lighter leash, moves further from the "
            "reference than the rm arm.",
)

# %% [markdown]
# One shape in the KL figure needs a word. The rm arm's KL climbs for about the first two
# thirds of the run and then falls back a little, where the verifier arm's levels off. The
# recipe decays the learning rate linearly to 0 over the run (`anneal_lr` in the table of
# settings), so the late updates are small, and the reward model's push, which was never
# strong for this arm, weakens with them; the leash charges every sampled token for its
# divergence at every iteration, and with less push against it, it pulls the policy back a
# little toward the reference. That is our reading of the curve, not a measurement.
#
# ## Ours beside the original run
#
# This book rebuilds the experiment of an earlier project, which published one run of each
# arm. We call its numbers *the original run*, never "the reference": in this book the
# reference is the frozen policy that the KL is measured to. The table sets the two side by
# side: ours as the mean over the five seeds with its 95% interval (Student's $t$ with 4
# degrees of freedom), the original as its single run.

# %%
summary = experiment.summarize(results)
orig = experiment.ORIGINAL


side_by_side = [("true accuracy at the start",
                 f"{summary['rm']['start']:.3f}",
                 f"{orig['sft_accuracy']:.3f}")]
for arm in ARMS:
    s = summary[arm]
    side_by_side += [
        (f"{arm} arm, true accuracy at the end", pm(s["end"], s["end_ci"]),
         f"{orig[arm]['end']:.3f}"),
        (f"{arm} arm, gain over the start",
         pm(s["gain"], s["gain_ci"], 3, "+"),
         f"{orig[arm]['end'] - orig[arm]['start']:+.3f}"),
        (f"{arm} arm, RM score at the end",
         pm(s["rm_score_end"], s["rm_score_end_ci"], 2, "+"),
         f"about {orig[arm]['rm_score']:+.1f}"),
        (f"{arm} arm, KL per token at the end",
         pm(s["kl_end"], s["kl_end_ci"]),
         orig[arm]["kl"])]
print(f"{'':<39}{'ours, 5 seeds':>16}   {'original run':>12}")
for label, ours, theirs in side_by_side:
    print(f"{label:<39}{ours:>16}   {theirs:>12}")
print()
for arm in ARMS:
    s = summary[arm]
    theirs = orig[arm]["end"] - orig[arm]["start"]
    inside = abs(theirs - s["gain"]) <= s["gain_ci"]
    print(f"the original's {arm} arm gain lies inside our interval: "
          f"{'yes' if inside else 'no'}")

# %% [markdown]
# The shape is the same: the verifier arm gains, the rm arm ends a little below its start,
# and the rm arm stays closer to the reference. Two things differ, the size of the gains and
# the level of the RM's score, and the start, although its accuracy is the same, needs a word.
#
# **The start.** Both runs begin from a partial-SFT policy, a language model trained on
# correct sums and stopped early on purpose, but not from the same one. The original's
# checkpoint is not available, and all that is known of it is its accuracy; ours (chapter
# 3's, stopped after 140 steps by the book's own rule) happens to score the same, 0.360. The
# same share of right answers does not make the same policy: two checkpoints can get
# different sums right, make different near-misses and be more or less sure of each digit.
# At that point of training the learning curve is steep (chapter 3), so a few steps more or
# fewer would already have given another start. That is why the gains, each measured from
# its own start, are the fairer comparison.
#
# **The gains.** The original's changes are larger than ours in both arms, and fall outside
# our intervals (the last two lines). The rm arm loses less here than the original's -0.062.
# The verifier arm still gains, and its interval stays clear of 0, but +0.066 is less than a
# third of the original's +0.223 (it is also less than half of what an earlier,
# single-precision run of this book gained from its own start). That is no contradiction.
# Our intervals cover PPO's seeds from our one checkpoint; they say nothing about another
# checkpoint, and how large a gain is depends on the start, not only on its accuracy:
# chapter 6 trains other partial-SFT starts the same way and measures by how much. A single
# run from another start may land outside them.
#
# **The recipe or the start?** The original's text states its recipe in a few lines, and ours
# departs from it in two places (the chapter's recipe, above): we put the leash in the reward
# and give each token the return that follows it, against the batch mean of its position;
# the original gave every token of a completion the same standardized score,
# $\text{clip}((r - \bar r)/(\sigma + 10^{-4}), \pm 3)$, and added the leash per token to the
# loss, with the log-ratio clamped. Which leash term it used the text does not say; we take
# chapter 1's k3, the term that exercise 3 below also puts in the loss (and chapter 8's GRPO
# uses), at the same $\beta$ as ours. Two updates per batch and temperature 0.7 are the same in both. The next
# cell runs that recipe as written (the arms `original-rm` and `original-verifier`, with the
# estimator `broadcast`) from our start, over the same five seeds, and sets its gains beside
# ours and the original's.

# %%
recipe = stored_arms(OUTPUTS / "original_recipe.json", SEEDS,
                     ("original-rm", "original-verifier"), cfg,
                     progress=PROGRESS)


def gains(logs):
    return np.array([log["accuracy"][-1] - log["accuracy"][0]
                     for log in logs])


print(f"{'accuracy gain over the start':<30}{'our recipe':>16}"
      f"{'its recipe':>16}{'original run':>14}")
for arm in ARMS:
    ours = gains(logs[arm])
    theirs = gains([recipe["arms"][f"original-{arm}"][str(s)]
                    for s in SEEDS])
    print(f"{arm + ' arm, 5 seeds':<30}"
          f"{pm(*mean_ci95(ours), 3, '+'):>16}"
          f"{pm(*mean_ci95(theirs), 3, '+'):>16}"
          f"{orig[arm]['end'] - orig[arm]['start']:>+14.3f}")
    diff = mean_ci95(theirs - ours)
    print(f"{'  its recipe - ours, by seed':<30}{pm(*diff, 3, '+'):>32}")
    kl = mean_ci95([recipe["arms"][f"original-{arm}"][str(s)]["kl"][-1]
                    for s in SEEDS])
    print(f"{'  its recipe, KL at the end':<30}{pm(*kl):>32}")

# %% [markdown]
# From our start, the original's recipe gains what ours gains: +0.065 ± 0.023 in the
# verifier arm against our +0.066 ± 0.035, a difference of -0.001 ± 0.020 seed by seed, and
# in the rm arm -0.009 ± 0.039 against our -0.026 ± 0.025 (+0.016 ± 0.019 seed by seed), at
# a KL at the end close to ours (the table above). So the recipe, as far as its text pins it
# down, does not explain the original's larger changes: its +0.223 and -0.062 lie outside the
# intervals of its own recipe run from our start too. What remains is what the text does not
# pin down: the start above all (a checkpoint with the same accuracy is not the same policy;
# chapter 6 measures how far a gain moves from one partial-SFT start to another), and the
# details it leaves unsaid, such as which estimator its leash term used. This is a null of
# five seeds from one start, not a proof that the two recipes are the same everywhere.
#
# **The RM's score.** The reward model is trained with the Bradley-Terry loss of chapter 4,
# $-\log\sigma(r_\text{chosen} - r_\text{rejected})$, which sees only *differences* of scores.
# Add the same constant to every score and the loss, and so its gradient, does not change.
# The cell below checks it on our reward model's own scores of the 400 evaluation prompts
# answered correctly (chosen) and with garbage (rejected):

# %%
with torch.no_grad():
    chosen = reward_scores(rm, eval_prompts, sheets["every answer correct"])
    rejected = reward_scores(rm, eval_prompts,
                             sheets["every answer garbage"])  # (400,) each
for shift in (0.0, 0.5, -1.7, 10.0):
    loss = bradley_terry_loss(chosen + shift, rejected + shift).item()
    print(f"every score {shift:+5.1f}:  Bradley-Terry loss {loss:.6f}")

# %% [markdown]
# So the level of an RM's scores is arbitrary: two reward models trained the same way on the
# same kind of pairs can sit a constant apart, and "+2.2 against +1.73" compares two
# arbitrary offsets. What has a meaning is where a score sits relative to the RM's *own*
# yardsticks. On our RM, with 0% for the score of all-garbage answers and 100% for all-correct
# ones:

# %%
low = yardstick["every answer garbage"]
span = yardstick["every answer correct"] - low


def on_the_scale(score):
    """Return where an RM score sits from all garbage (0%) to all correct
    (100%)."""
    return (score - low) / span


print(f"{'':<30}{'RM score':>9}   garbage = 0%, correct = 100%")
for name, score in yardstick.items():
    print(f"{name:<30}{score:>+9.2f}   {on_the_scale(score):>6.0%}")
for arm in ARMS:
    for when, key in (("start", "rm_score_start"), ("end", "rm_score_end")):
        score = summary[arm][key]
        print(f"{arm + ' arm, ' + when:<30}{score:>+9.2f}   "
              f"{on_the_scale(score):>6.0%}")

# %% [markdown]
# On that scale both arms' answers sit with the all-correct and all-near-miss sheets, from
# the start to the end, far from garbage: the RM is saturated on what this policy writes.
# That is the original's observation too (its arms scored about the same, about +2.2, from
# start to end); its yardsticks were not published, so its level cannot be placed on this
# scale, and it need not be.

# %% [markdown]
# ## Is the gap real?
#
# Each seed gives one pair of runs that share their prompts' seed, so the fair comparison is
# the difference within each seed, with an interval over seeds. The same for the gain of
# each arm over its own start, and for the RM's verdict on the two arms at the end.
#
# What these intervals cover: PPO's seeds (which prompts are drawn, which completions are
# sampled), all from one SFT checkpoint and one reward model. They say nothing about how the
# result would change from another partial-SFT start; chapter 6, "Is the result robust?"
# (`06_robustness.ipynb`), trains other starts and measures that.

# %%
acc = {arm: curves[arm]["accuracy"] for arm in ARMS}  # (5, 26) each
acc_end = {arm: acc[arm][:, -1] for arm in ARMS}  # (5,) each
rm_end = {arm: curves[arm]["rm_score"][:, -1] for arm in ARMS}
tests = {
    "verifier arm, gain over its start":
        acc["verifier"][:, -1] - acc["verifier"][:, 0],
    "rm arm, gain over its start": acc["rm"][:, -1] - acc["rm"][:, 0],
    "end accuracy, verifier - rm": acc_end["verifier"] - acc_end["rm"],
    "end RM score, verifier - rm": rm_end["verifier"] - rm_end["rm"],
}
print(f"{'difference':<36}{'mean':>8}   95% interval     0 inside?")
gap = {}
for name, d in tests.items():
    mean, half = mean_ci95(d)
    gap[name] = (mean, half)
    print(f"{name:<36}{mean:>+8.3f}   "
          f"[{mean - half:+.3f}, {mean + half:+.3f}]"
          f"   {'yes' if abs(mean) <= half else 'no'}")

# %% [markdown]
# What the experiment was designed to show, checked against the numbers above (a claim that
# does not hold is printed as such, not hidden):

# %%
acc_gap, acc_half = gap["end accuracy, verifier - rm"]
rm_gap = gap["end RM score, verifier - rm"][0]
rm_range = (yardstick["every answer correct"]
            - yardstick["every answer garbage"])
kl_end_rm = summary["rm"]["kl_end"]
kl_end_ver = summary["verifier"]["kl_end"]
claims = [
    ("verifier arm gains at least 0.15",
     summary["verifier"]["gain"], summary["verifier"]["gain"] >= 0.15),
    ("rm arm gains at most 0.02",
     summary["rm"]["gain"], summary["rm"]["gain"] <= 0.02),
    ("verifier arm ends above rm arm (interval excludes 0)",
     acc_gap, acc_gap > acc_half),
    ("RM scores arms alike: |gap| < (correct - garbage) / 10",
     rm_gap, abs(rm_gap) < 0.1 * rm_range),
    ("rm arm's KL ends below verifier arm's",
     kl_end_rm - kl_end_ver, kl_end_rm < kl_end_ver),
]
print_claims(claims)

# %% [markdown]
# Four of the five claims hold; the first does not. The verifier arm gains +0.066, and its
# whole interval, [+0.031, +0.100], lies below the 0.15 the claim asks for, a bar well under
# the original's +0.223. From this start, in 25 iterations, the verifier arm gains clearly,
# but much less than that. The claim stays as it was written: a bar moved after the run
# would check nothing. The rest of the design stands: the verifier arm ends above the rm arm,
# the rm arm gains nothing (its interval, [-0.051, -0.001], lies just below 0: a small
# loss), the RM scores the two arms alike, and the rm arm ends nearer the reference.
#
# ## What the experiment says
#
# Five lessons, each with the numbers from this notebook that carry it. Three of them also
# rest on analyses that chapter 6, "Is the result robust?" (`06_robustness.ipynb`), makes;
# there they get a pointer, not numbers.
#
# **1. RLHF is PPO with text as the environment.** Nothing in the loop is specific to
# language except the environment: an episode is a completion, an action a token, and the
# only reward arrives at the end. The rollout, the advantage, the clipped ratio and the leash
# are the PPO of any other task {cite}`schulman2017ppo`; what RLHF adds is where the reward
# comes from and the KL to a frozen reference {cite}`ziegler2019finetuning`. One iteration
# of the seed-0 runs above, in numbers:

# %%
length = np.mean([np.mean(runs[arm]["val/completion_length"])
                  for arm in ARMS])
print(f"episodes per iteration    {cfg.batch_size}")
print(f"tokens per episode        {length:.2f} on average")
print(f"actions per iteration     {cfg.batch_size * length:.0f}")
print(f"rewards per iteration     {cfg.batch_size}, one per episode")

# %% [markdown]
# **2. The value head is PPO's heaviest part, and here a batch baseline can stand in for it.**
# Full PPO learns a critic $V(s_t)$, in InstructGPT a network as large as the reward model,
# trained alongside the policy, with GAE to turn its predictions into per-token advantages
# {cite}`ouyang2022instructgpt,schulman2016gae`. Even at 4 tokens it would have work to do,
# because the value changes *inside* a completion. With the verifier's reward, $V(s_t)$ is
# the chance that the policy, sampling at 0.7, completes the right answer from state $s_t$:

# %%
truth = task.correct_completions(eval_pairs)  # (400, 4)
with torch.no_grad():
    lp = completion_logprobs(policy, eval_prompts, truth,
                             cfg.temperature)  # (400, 4)
lp = lp * completion_mask(truth)
v_start = lp.sum(1).exp()  # V(s_0): the whole right answer
v_first = lp[:, 1:].sum(1).exp()  # V(s_1) after the right first digit
print(f"a critic the size of the policy: {n_params(policy):,} parameters")
print("the verifier's value, mean over the 400 eval prompts:")
print(f"  before the first digit    V(s_0) = {v_start.mean():.2f}")
print(f"  after a right first digit V(s_1) = {v_first.mean():.2f}")
print("  after a wrong first digit V(s_1) = 0")

# %% [markdown]
# A critic would credit or blame the digit that moved the value; the batch baseline gives
# every token of a completion the same share of the score, and knows only the position, not
# the state. What a critic buys is less noise per token, and chapter 7 measures how much, at
# 4 tokens and at 400: the saving grows with the length, and over hundreds of tokens the
# critic becomes load-bearing. How much of the reward's spread the prompt alone explains,
# and what a baseline per prompt changes: chapter 6.
#
# **3. The optimizer climbs only the part of a number it can read.** The verifier arm, handed
# the truth, raised the truth. The rm arm, handed the RM's score, raised that score a little,
# and its accuracy fell; but the verifier arm, which never saw the RM, raised the RM's score
# of its answers as much (the lines below, and lesson 4). So this run does not show PPO
# pushing the RM's score up: in a batch of 64 different prompts, much of the spread of that
# score is the prompt's, not the answer's, and a batch baseline leaves the policy little of
# the RM's signal to climb. Chapter 6 measures that share and gives PPO the same RM with a
# baseline per prompt: it then raises the RM's score past both arms here. Nor does it show
# that the preference pairs are worthless: chapter 9 turns the same pairs into accuracy,
# with DPO and with plain SFT on their chosen answers. The algorithm and every setting but
# the leash were the same in both arms; whether the leash, rather than the reward, could
# account for the difference is lesson 5's question.

# %%
for arm in ARMS:
    s = summary[arm]
    print(f"{arm + ' arm':<13}RM score {s['rm_score_start']:+.2f} -> "
          f"{pm(s['rm_score_end'], s['rm_score_end_ci'], 2, '+')},  "
          f"accuracy gain {pm(s['gain'], s['gain_ci'], 3, '+')}")

# %% [markdown]
# Whether the RM's number, read cleanly (a baseline per prompt, which removes the prompt's
# share of the noise), teaches the arithmetic it failed to teach here is chapter 6's control
# experiment.
#
# **4. A saturated proxy looks like success.** Judged by the RM, the two arms are equally
# good: their answers score alike at the end (the interval of the difference holds 0),
# although the verifier arm is right clearly more often. The gap in RM score is a sliver of
# the RM's range from garbage to correct, and both arms sit by the all-correct sheet: the RM
# can no longer tell a better policy from a worse one. In both arms its score went up. In a
# real system there is no verifier, and the RM's score going up is exactly what the dashboard
# would show, for the worse policy as for the better one {cite}`gao2023scaling`.

# %%
d_rm, h_rm = gap["end RM score, verifier - rm"]
d_acc, h_acc = gap["end accuracy, verifier - rm"]
print("verifier arm - rm arm, at the end (mean and 95% interval):")
print(f"  true accuracy {d_acc:+.3f} "
      f"[{d_acc - h_acc:+.3f}, {d_acc + h_acc:+.3f}]")
print(f"  RM score      {d_rm:+.3f} "
      f"[{d_rm - h_rm:+.3f}, {d_rm + h_rm:+.3f}]")
print(f"  RM score gap as a share of garbage-to-correct: {d_rm / span:+.1%}")

# %% [markdown]
# **5. The leash contains damage but cannot create signal.** On its strong leash the rm arm
# barely left the reference, and it did not gain; the verifier arm, on a light one, spent its
# freedom on accuracy:

# %%
for arm in ARMS:
    s = summary[arm]
    print(f"{arm + ' arm':<13}beta {BETA[arm]:<5g} KL at the end "
          f"{pm(s['kl_end'], s['kl_end_ci'])},  accuracy gain "
          f"{s['gain']:+.3f}")

# %% [markdown]
# Two settings cannot show that no $\beta$ turns the RM into a teacher of arithmetic. The
# sweep over $\beta$ that does, for both arms, is in chapter 6: the leash decides how far a
# policy may go; where it goes is the reward's doing. Chapter 7 then takes the leash off and
# lets the rm arm run longer.
#
# ## Summary
#
# You can now:
#
# - read a complete PPO-RLHF training loop, stage by stage, in the package's own code: the
#   rollout with its two sets of log-probs, the score standardized over the batch, the leash
#   as a per-token reward inside the advantages (your `kl_shaped_advantages`), the clipped
#   update over the completion tokens (your `ppo_token_loss`), and the statistics a trainer
#   logs;
# - plug your own functions into `ppo_train` and get the very runs the package makes, to the
#   last digit when they compute the same operations;
# - run a two-arm RL experiment over seeds and judge a gap by the interval of the
#   within-seed differences, not by one run;
# - tell what a reward model's score means (a level that is arbitrary, a position between
#   yardsticks that is not) and spot a saturated proxy: handed the verifier, PPO raised the
#   accuracy; handed the RM, it raised the RM's score no more than the verifier arm did, while
#   the accuracy fell (chapters 6 and 9 show where the RM's signal was lost);
# - compare your run with a published one by what can be compared: gains from each start,
#   scores on each RM's own scale.
#
# The intervals here cover PPO's seeds from one SFT checkpoint. Chapter 6 asks whether the
# result survives other starts, another baseline and other leashes.

# %% [markdown]
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first. The answers that need
# new runs take them from the hidden cell below: five runs of 25 iterations, seed 0, stored
# in `outputs/ch05_exercises.json` like the experiment's.

# %% tags=["hide-input"]
def exercise_runs():
    """Return the runs the worked answers use, each seed 0, 25 iterations."""
    rm_fn = ppo.rm_reward(rm)

    def mixed(pairs, prompts, completions):
        return (0.5 * rm_fn(pairs, prompts, completions)
                + 0.5 * ppo.verifier_reward(pairs, prompts, completions))

    plan = {  # name: (reward, beta, settings that differ from the recipe)
        "verifier, lr 1e-3": (ppo.verifier_reward, BETA["verifier"],
                              {"lr": 1e-3}),
        "verifier, lr 5e-5": (ppo.verifier_reward, BETA["verifier"],
                              {"lr": 5e-5}),
        "rm, leash in the loss": (rm_fn, BETA["rm"],
                                  {"kl_placement": "loss"}),
        "verifier, leash in the loss": (ppo.verifier_reward,
                                        BETA["verifier"],
                                        {"kl_placement": "loss"}),
        "mixed reward": (mixed, BETA["verifier"], {}),
    }

    def run(name):
        reward_fn, beta, changes = plan[name]
        _, log = ppo.ppo_train(
            policy, reference, reward_fn, beta,
            ppo.PPOConfig(seed=0, **changes), rm=rm, progress=PROGRESS,
            desc=name)
        return {"0": log}

    return {"arms": dict(zip(plan, map_runs(run, plan, progress=PROGRESS)))}


extra = load_or_run(OUTPUTS / "ch05_exercises.json",
                    {"iterations": cfg.iterations, "beta": BETA,
                     "ppo": asdict(cfg), "runs": 5}, {}, exercise_runs,
                    arms=())
extra = {name: seeds["0"] for name, seeds in extra["arms"].items()}
seed0 = {arm: logs[arm][0] for arm in ARMS}  # the recipe's runs, seed 0
print("Runs for the worked answers, seed 0 each:")
for name in extra:
    print(f"  {name}")

# %% [markdown]
# **1. More seeds, fewer seeds.** With seeds 0 to 9 (set `SEEDS = list(range(10))` and run
# the section "Two arms, five seeds" again), would the half-width of each interval shrink by
# $1/\sqrt{2}$? And which of the claims above would you still trust with only 2 seeds?
#
# <details class="answer">
# <summary>Worked answer: more seeds, fewer seeds</summary>
#
# It shrinks by more than that: to 0.576 of its width, where $1/\sqrt{2}$ would leave 0.707.
# The half-width is $t_{n-1}\, s / \sqrt{n}$: doubling the seeds divides $\sqrt{n}$'s part by
# $\sqrt{2}$, and Student's $t$ for 9 degrees of freedom is also smaller than for 4, so for
# the same spread $s$ the interval shrinks by the factor the cell below prints (the spread
# itself will come out a little different with new seeds).
# The other way, 2 seeds leave one degree of freedom, where $t$ is huge: for the same spread
# every interval grows several times wider. The cell recomputes the within-seed differences
# from seeds 0 and 1 only, and every interval now contains 0, even the verifier arm's lead
# over the rm arm, which five seeds put clear of it. With two seeds none of the claims that
# rest on an interval can be made; the means alone look much as they do with five (the RM
# score's gap, near 0 either way, even changes sign).
#
# </details>

# %% tags=["hide-input"]
def half_width_per_spread(n):
    """Return the 95% half-width of a mean of n values with spread 1."""
    x = np.arange(n, dtype=float)
    return mean_ci95(x)[1] / x.std(ddof=1)


print(f"half-width, 10 seeds / 5 seeds: "
      f"{half_width_per_spread(10) / half_width_per_spread(5):.3f}"
      f"   (1/sqrt(2) = {1 / np.sqrt(2):.3f})")
print(f"half-width, 2 seeds / 5 seeds:  "
      f"{half_width_per_spread(2) / half_width_per_spread(5):.1f}")
print(f"\n{'seeds 0 and 1 only':<36}{'mean':>8}   95% interval"
      "        0 inside?")
for name, d in tests.items():
    mean, half = mean_ci95(d[:2])
    print(f"{name:<36}{mean:>+8.3f}   "
          f"[{mean - half:+.3f}, {mean + half:+.3f}]"
          f"   {'yes' if abs(mean) <= half else 'no'}")

# %% [markdown]
# **2. The learning rate.** Train the verifier arm with `PPOConfig(lr=1e-3)` and with
# `lr=5e-5` (the recipe's is `2e-4`), seed 0. Watch `policy/clipfrac_avg` and
# `policy/approxkl_avg` in the first iterations. At which setting does the clip do the most
# work, and what happens to the accuracy?
#
# <details class="answer">
# <summary>Worked answer: the learning rate</summary>
#
# At `1e-3` each step moves the policy far from the one that sampled: the approximate KL of
# the first iteration is many times the recipe's, and the clip binds on a good share of the
# tokens, so it is doing most of the work of keeping the update near the samples. The policy
# also ends much further from the reference, and below the recipe's accuracy: big noisy steps
# undo some of what they teach. At `5e-5` the ratio hardly leaves 1 and the clip almost never
# binds; the policy learns, only more slowly, and ends a little below the recipe's. The clip
# is a guard rail for a learning rate at the edge, not a substitute for choosing one.
#
# These are single runs, seed 0 each, and the accuracies need that caveat. The recipe's
# 0.398 and the slow run's 0.390 lie much closer together than the verifier arm's five-seed
# half-width, 0.035 (the table of exercise 3), so "a little below" is no finding; only the
# fast run's 0.325 falls further below the recipe than that half-width, and it too rests on
# one seed. The clip and KL statistics of the first iterations differ by large factors, and
# those are what the question asks about.
#
# </details>

# %% tags=["hide-input"]
lr_runs = {"1e-3": extra["verifier, lr 1e-3"],
           "2e-4 (recipe)": seed0["verifier"],
           "5e-5": extra["verifier, lr 5e-5"]}
print(f"{'lr':<15}{'clipfrac, it. 1-3':<21}{'approxkl, it. 1':<17}"
      f"{'accuracy end':<14}KL end")
for lr, log in lr_runs.items():
    clip = " ".join(f"{c:.3f}" for c in log["policy/clipfrac_avg"][:3])
    print(f"{lr:<15}{clip:<21}{log['policy/approxkl_avg'][0]:<17.4f}"
          f"{log['accuracy'][-1]:<14.3f}{log['kl'][-1]:.3f}")

# %% [markdown]
# **3. The leash in the loss instead.** Run both arms, seed 0, with
# `PPOConfig(kl_placement="loss")`: the advantages come from the score alone and
# $\beta \cdot \mathrm{mean}_t\, k_3$, computed from `new_logp`, is added to the loss (GRPO's
# choice, chapter 1; `minirlhf.leashes.loss.k3_loss_term`). How do the final KL and the
# accuracy compare with the leash in the reward? Is the difference larger than the spread
# between seeds?
#
# <details class="answer">
# <summary>Worked answer: the leash in the loss</summary>
#
# At these $\beta$ and 25 iterations the two placements end close to each other in both
# arms: the same order (the verifier arm further from the reference and more accurate), KL
# and accuracy a little apart. Set beside the 95% half-widths that five seeds of the reward
# placement give (last column), the verifier arm's differences are smaller; the rm arm's KL
# differs by about its half-width, and its accuracy, a little higher with the leash in the
# loss, by a little more. That is still no evidence: the half-width is for a mean of five
# seeds, and two single runs differ by about that much by chance alone. One seed cannot tell
# the placements apart. The placements differ in *what* a token is charged for: in the
# reward, a token pays for the divergence of the tokens it leads to; in the loss, each token
# pays for its own k3, measured on the current policy. At 4 tokens and a small KL there is
# little to tell them apart; doing both at once would charge twice (chapter 2).
#
# </details>

# %% tags=["hide-input"]
print(f"{'arm':<10}{'placement':<11}{'accuracy end':>13}{'KL end':>9}"
      f"{'5-seed half-width (acc, KL)':>30}")
for arm in ARMS:
    s = summary[arm]
    for where, log in (("reward", seed0[arm]),
                       ("loss", extra[f"{arm}, leash in the loss"])):
        width = (f"{s['end_ci']:.3f}, {s['kl_end_ci']:.3f}"
                 if where == "reward" else "")
        print(f"{arm:<10}{where:<11}{log['accuracy'][-1]:>13.3f}"
              f"{log['kl'][-1]:>9.3f}{width:>30}")

# %% [markdown]
# **4. No standardization.** Give the raw score to the advantages instead of $z$ (copy
# `leashed_advantages`, shown above, and drop the line that standardizes). For which arm does
# the meaning of $\beta$ change, and by how much? Use the spreads of the first batch printed
# in the section "The recipe". This is TRL's choice; it then whitens the advantages.
#
# <details class="answer">
# <summary>Worked answer: no standardization</summary>
#
# For both, in opposite directions. The advantage adds the score to $-\beta$ times the
# divergence; with $z$ the score has spread 1, with the raw score it has the reward's own
# spread $\sigma$. Dividing everything by $\sigma$ shows that the raw score with $\beta$ acts
# like the standardized score with $\beta / \sigma$. The RM's scores spread over several
# units, so its arm's leash becomes several times weaker; the verifier's 0-or-1 rewards spread
# less than 1, so its leash becomes stronger (the cell below). On this batch the two leashes
# would even trade places, the verifier arm's becoming a little the stronger, and the
# light-versus-strong design of the experiment would be gone. TRL's `kl_coef` is therefore
# in the reward model's units and cannot be carried from one reward to another.
#
# </details>

# %% tags=["hide-input"]
print(f"{'arm':<10}{'beta':>6}{'spread of the scores':>22}"
      f"{'acts like beta':>16}")
for arm in ARMS:
    print(f"{arm:<10}{BETA[arm]:>6g}{batch_std[arm]:>22.3f}"
          f"{BETA[arm] / batch_std[arm]:>16.3f}")

# %% [markdown]
# **5. Where did the answers go?** `ppo_train`'s log holds `kinds`: the fraction of greedy
# answers that are correct, near-misses, other wrong numbers or malformed, per iteration.
# Compare the start and the end of both arms, mean over the five seeds. Does the rm arm trade
# correct answers for near-misses, which the RM cannot tell apart?
#
# <details class="answer">
# <summary>Worked answer: where the answers went</summary>
#
# A little, in 25 iterations on its strong leash: the rm arm's share of correct answers falls
# by about as much as its share of near-misses rises, and the other kinds stay where they
# were. That small trade is the whole of the rm arm's loss of accuracy. The verifier arm goes
# the other way: it turns near-misses, and a few other wrong answers, into correct ones, and
# no answer loses its format. The trade in earnest needs the leash off and more iterations:
# chapter 7 shows it.
#
# </details>

# %% tags=["hide-input"]
print(f"{'kind':<13}" + "".join(f"{arm + ' arm, start -> end':>28}"
                               for arm in ARMS))
for kind in task.KINDS:
    row = ""
    for arm in ARMS:
        frac = np.array([log["kinds"][kind] for log in logs[arm]]).mean(0)
        row += f"{frac[0]:>19.3f} -> {frac[-1]:.3f}"
    print(f"{kind:<13}{row}")

# %% [markdown]
# **6. A mixed reward.** Hand the optimizer `0.5 * rm + 0.5 * verifier` (write the
# `reward_fn`), with the verifier arm's $\beta$ = 0.08, seed 0. Predict from the lessons
# above where its accuracy ends, then run it.
#
# <details class="answer">
# <summary>Worked answer: a mixed reward</summary>
#
# Nowhere near halfway to the verifier arm: on seed 0 the mixed reward does no better than
# the rm arm, and ends even a little below it and below the start (one seed: a gap this small
# may be noise). The mix is standardized as one
# score, and its spread is mostly the RM's: half the RM's spread is several times half the
# verifier's (the last line below, from the first batch of the recipe section), so the
# ranking of the completions within a batch, which is all the advantages see, is mostly the
# RM's. A weight of one half is not half of the signal; what counts is each part's spread.
#
# </details>

# %% tags=["hide-input"]
for name, log in (("verifier arm", seed0["verifier"]),
                  ("mixed reward", extra["mixed reward"]),
                  ("rm arm", seed0["rm"])):
    print(f"{name:<14}accuracy {log['accuracy'][0]:.3f} -> "
          f"{log['accuracy'][-1]:.3f}")
print(f"spread of 0.5 * RM score {0.5 * batch_std['rm']:.2f}, "
      f"of 0.5 * verifier {0.5 * batch_std['verifier']:.2f}")

# %% [markdown]
# **7. Without the clamp.** Take a batch of two completions of two tokens, scores $+1$ and
# $-1$, $\beta = 0.5$, every `old_logp` $-1$, and let the reference give the first
# completion's second token a log-probability of $-40$ (every other `ref_logp` $-1$). What
# does that token do to the advantages with `kl_clamp=1e9`, and with the recipe's 10?
#
# <details class="answer">
# <summary>Worked answer: without the clamp</summary>
#
# Its $\mathrm{kl}_t$ is 39, so it earns the reward $-0.5 \times 39$, which flows back into
# the return of the first token too. Unclamped, that one token dwarfs the score: the first
# completion's advantages go deeply negative, the second's (which did nothing) turn positive
# through the shared baseline, and the update would mostly be about that token. Clamped at
# 10, it still costs a lot, but a bounded amount; the same bound keeps $e^{\mathrm{kl}}$ in
# the k3 term finite when the leash is in the loss.
#
# </details>

# %% tags=["hide-input"]
scores = torch.tensor([1.0, -1.0])
old_logp = torch.full((2, 2), -1.0)
ref_logp = torch.tensor([[-1.0, -40.0], [-1.0, -1.0]])
two_mask = torch.ones(2, 2)
for clamp in (1e9, 10.0):
    adv = batch_estimator.kl_shaped_advantages(scores, old_logp, ref_logp,
                                               two_mask, 0.5, clamp)
    print(f"kl_clamp {clamp:g}:  advantages {adv.tolist()}")
