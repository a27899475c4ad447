# %% [markdown]
# # 2. The PPO-RLHF objective
#
# Chapter 1 built the leash. This chapter ties it to the optimizer. The recipe of
# InstructGPT {cite}`ouyang2022instructgpt` (and of Ziegler et al. and Stiennon et al. before
# it {cite}`ziegler2019finetuning,stiennon2020summarize`) has two moves: fold the KL penalty
# into the reward, then hand that *shaped* reward to the ordinary clipped objective of
# proximal policy optimization, PPO {cite}`schulman2017ppo`. Nothing in the second move
# knows it is dealing with text. (InstructGPT's final models add a third move that we leave
# out: they mix gradients of the pretraining loss into the update, a variant the paper calls
# PPO-ptx.)
#
# You will first derive the gradient that all of this rests on, the policy gradient, on a
# four-armed bandit, and write `reinforce_loss`, the loss that follows it, and train the bandit
# with it. Then you will write `ppo_rlhf_objective`, the number a PPO-RLHF update climbs, see
# where its clipping cuts the gradient off and why, move $\epsilon$ and $\beta$ over a small
# batch, and look at one bug that is easy to make: charging the KL twice.
#
# ```{admonition} What you need
# :class: tip
# Chapter 1 (the leash, and its five words from reinforcement learning), PyTorch's autograd,
# and what an expected value is. No more reinforcement learning than that: the policy gradient
# is derived from scratch in the first section. A first run of the whole notebook takes under
# 10 seconds on a 2-core CPU.
# ```

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

import minirlhf
from minirlhf import pg
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import check, get
from minirlhf.course.explorer import explore, show_figure
from minirlhf.palette import BLUE, GREEN, ORANGE, PINK  # color-blind safe
from minirlhf.studies import double_count, kl_estimators

torch.set_num_threads(1)  # one thread: runs are bit-identical

# %% [markdown]
# ## The policy gradient, derived
#
# Everything PPO does rests on one identity: how to take the gradient of an *expected* reward
# when the expectation is over the policy's own samples. We derive it on the smallest problem
# that has it, a *bandit*: the policy picks one of four actions and gets that action's reward,
# nothing more. A language model fits the same picture: its action is a whole completion, whose
# log-prob is the sum of its tokens' log-probs. The bandit's policy is a softmax over four
# logits $\theta$, $\pi_\theta(y) = \mathrm{softmax}(\theta)_y$, and it starts out preferring
# the worst action.

# %%
R = torch.tensor([0.0, 0.2, 0.5, 1.0])  # the reward of each action, (4,)
theta0 = torch.tensor([1.5, 1.0, 0.5, 0.0])  # the starting logits, (4,)


def expected_reward(theta):
    """Return E_{y ~ softmax(theta)}[R(y)], exactly: sum_y pi(y) R(y)."""
    return (torch.softmax(theta, 0) * R).sum()


def fmt(values):
    """Return a vector as text, each entry rounded to 4 decimals."""
    return "  ".join(f"{round(v, 4) + 0.0:+.4f}" for v in values.tolist())


print("pi(y)    ", fmt(torch.softmax(theta0, 0)))
print(f"E[R] = {expected_reward(theta0).item():.4f}")

# %% [markdown]
# ### The log-derivative trick
#
# We want $\nabla_\theta\, \mathbb{E}_{y \sim \pi_\theta}[R(y)]$, the direction in which
# changing $\theta$ raises the expected reward. Here the expectation is a sum of four terms and
# autograd could differentiate it directly, but for a language model the sum runs over every
# possible completion, far too many to enumerate. All we can do is sample. The trick is that
# $\nabla_\theta \pi_\theta(y) = \pi_\theta(y)\, \nabla_\theta \log \pi_\theta(y)$ (the chain
# rule for the logarithm, read backwards), so
#
# $$
# \begin{aligned}
# \nabla_\theta\, \mathbb{E}_{y \sim \pi_\theta}[R(y)]
# &= \sum_y \nabla_\theta \pi_\theta(y)\, R(y)
#  = \sum_y \pi_\theta(y)\, R(y)\, \nabla_\theta \log \pi_\theta(y) \\
# &= \mathbb{E}_{y \sim \pi_\theta}\big[R(y)\, \nabla_\theta \log \pi_\theta(y)\big].
# \end{aligned}
# $$
#
# The gradient of an expectation has become the expectation of something we can compute for
# each sample: its reward times the gradient of its own log-prob. The reward is never
# differentiated; it only weighs. That is why a reward model's score, or a verifier's 0 or 1,
# can train a policy. The cell checks the identity: the exact gradient, by autograd of
# $\sum_y \pi_\theta(y) R(y)$, against the average of $R(y_i) \nabla_\theta \log
# \pi_\theta(y_i)$ over sampled actions.

# %%
theta = theta0.clone().requires_grad_(True)
(exact,) = torch.autograd.grad(expected_reward(theta), theta)

gen = torch.Generator().manual_seed(0)
n = 100_000
y = torch.multinomial(torch.softmax(theta0, 0), n, replacement=True,
                      generator=gen)  # (n,) sampled actions
logp = torch.log_softmax(theta, 0)[y]  # (n,) log pi(y_i), with gradient
(sampled,) = torch.autograd.grad((R[y] * logp).mean(), theta)
print("exact gradient ", fmt(exact))
print("sample average ", fmt(sampled), f"  (n = {n:,})")

# %% [markdown]
# The two agree up to the noise of a sample average: lower the most likely action, which pays
# nothing, and raise the best one.
#
# ### REINFORCE
#
# Averaged over a batch of $N$ samples, the estimate is the gradient of
# $\frac{1}{N}\sum_i R(y_i) \log \pi_\theta(y_i)$ with the rewards held constant. An optimizer
# minimizes, so the loss is its negative,
#
# $$
# L(\theta) = -\frac{1}{N}\sum_{i=1}^{N} R(y_i)\, \log \pi_\theta(y_i),
# $$
#
# and a gradient step on $L$ is a step up the expected reward. This is REINFORCE, Williams's
# algorithm of 1992 {cite}`williams1992reinforce`. The loss's *value* means nothing (it is
# not the expected reward, and it changes meaning with every new batch); only its gradient
# does.
#
# ### A baseline: the same gradient, less noise
#
# Subtract any number $b$ from every reward. The gradient's expectation does not change,
# because the log-prob gradient averages to zero under the policy:
#
# $$
# \mathbb{E}_{y \sim \pi_\theta}\big[\nabla_\theta \log \pi_\theta(y)\big]
# = \sum_y \nabla_\theta \pi_\theta(y) = \nabla_\theta \sum_y \pi_\theta(y) = \nabla_\theta 1 = 0,
# $$
#
# so $\mathbb{E}[(R(y) - b)\, \nabla_\theta \log \pi_\theta(y)]$ is still the policy gradient,
# as long as $b$ does not depend on the sampled actions. The first line below checks the zero
# exactly, with the sum over the four actions.
#
# What the baseline changes is the noise. Without it, every reward here is at least 0, so every
# sampled action is pushed up, and the estimate depends on large pushes that cancel only on
# average. With $b$ near the expected reward, better-than-usual actions are pushed up and
# worse ones down. The cell draws 2,000 batches of 8 actions and measures, for three baselines,
# how far each batch's estimate lies from the exact gradient: the mean squared distance (the
# variance, summed over the four logits) and the error of the average over all batches (the
# bias, which should be sampling noise only). It uses the package's `pg.reinforce_loss`, the
# loss of the exercise below.

# %%
pi = torch.softmax(theta, 0)
(score_mean,) = torch.autograd.grad(
    (pi.detach() * torch.log_softmax(theta, 0)).sum(), theta)
print("sum_y pi(y) grad log pi(y) =", fmt(score_mean))

value = expected_reward(theta0).item()
gen = torch.Generator().manual_seed(1)
ys = torch.multinomial(torch.softmax(theta0, 0), 8 * 2000,
                       replacement=True, generator=gen).view(2000, 8)
print(f"\n{'baseline b':<22}{'variance':>9}{'vs b = 0':>10}{'bias':>8}")
variances = {}
for name, b in (("0", 0.0), (f"E[R] = {value:.2f}", value),
                ("1 (the best reward)", 1.0)):
    estimates = []
    for y in ys:  # one batch of 8 actions
        loss = pg.reinforce_loss(torch.log_softmax(theta, 0)[y], R[y], b)
        estimates.append(-torch.autograd.grad(loss, theta)[0])
    estimates = torch.stack(estimates)  # (2000, 4)
    variance = ((estimates - exact) ** 2).sum(1).mean().item()
    bias = (estimates.mean(0) - exact).norm().item()
    variances[name] = variance
    print(f"{name:<22}{variance:9.4f}{variance / variances['0']:10.2f}"
          f"{bias:8.4f}")

# %% [markdown]
# All three averages land on the exact gradient, up to the sampling noise of 2,000 batches:
# the baseline leaves the gradient unbiased, whatever its value. The spread is another matter
# (the column "vs b = 0"). A baseline at the expected reward cuts the variance; a baseline far
# from the typical reward (1, the best reward, which nearly every action falls short of) makes
# the estimate noisier than none. A good baseline predicts the reward. In chapter 5, where a
# completion is a sequence of tokens, it is a number per token position: the batch's mean of
# the return-to-go at that position (chapter 1's rewards from that token to the end); in full
# PPO it is a learned *value function* (chapter 7). The weight $R(y) - b$ is the simplest
# *advantage*: how much better than expected the action turned out.
#
# ### Exercise 2.1: `reinforce_loss`
#
# Write `reinforce_loss(logp, rewards, baseline)`.
#
# **Contract.** `logp` is a torch tensor of shape $(N,)$: the log-probs of $N$ sampled actions,
# carrying their gradient. `rewards` is a tensor of shape $(N,)$ and `baseline` one number.
# Return the loss
#
# $$
# L = -\frac{1}{N}\sum_{i=1}^{N} (\texttt{rewards}_i - \texttt{baseline})\, \texttt{logp}_i
# $$
#
# as a 0-d torch tensor (not a Python float: the tensor carries the gradient that training
# needs).
#
# **Examples.** `logp=tensor([-1.0, -2.0])`, `rewards=tensor([1.0, 0.0])`, `baseline=0.0`
# gives `tensor(0.5)`: $-(1 \times -1 + 0 \times -2) / 2$. The same with `baseline=0.5` gives
# `tensor(-0.25)`: the weights are $0.5$ and $-0.5$, and $-(0.5 \times -1 + -0.5 \times -2)
# / 2 = -0.25$.
#
# **How it is judged.** The check runs your function on the cases in its report (both
# examples, one sample, a negative baseline, negative rewards, every reward equal to the
# baseline, and a batch where a sum and a mean differ) and checks that the result carries
# the gradient of `logp`: it differentiates your loss and compares the gradient with the
# package's, so a loss computed under `torch.no_grad()` or rebuilt from `.item()` fails even
# with the right value. Every expected value was worked out by hand.

# %% tags=["solution"]
def reinforce_loss(logp, rewards, baseline):
    """Return -mean((rewards - baseline) * logp), a 0-d tensor."""
    # BEGIN SOLUTION
    return -((rewards - baseline) * logp).mean()
    # END SOLUTION

# %% [hints] reinforce_loss

# %%
check("reinforce_loss", reinforce_loss);

# %% [markdown]
# ### Your loss trains the bandit
#
# The loop below is REINFORCE from start to end: sample 16 actions from the current policy,
# score them, take one gradient step on the loss, repeat. The baseline of each step is the
# previous batch's mean reward, a number that does not depend on the actions it weighs. The
# cell hands the loop your `reinforce_loss` when it passes every check; otherwise the
# package's `minirlhf.pg.reinforce_loss`, and it says which.

# %%
def train_bandit(loss_fn, steps=60, n=16, lr=1.0, seed=0):
    """Train the bandit's logits from theta0 with loss_fn; return the
    logits and the exact expected reward before and after every step."""
    gen = torch.Generator().manual_seed(seed)
    theta = theta0.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([theta], lr=lr)
    baseline, curve = 0.0, [expected_reward(theta).item()]
    for _ in range(steps):
        pi = torch.softmax(theta.detach(), 0)  # (4,)
        y = torch.multinomial(pi, n, replacement=True, generator=gen)
        logp = torch.log_softmax(theta, 0)[y]  # (n,)
        loss = loss_fn(logp, R[y], baseline)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        baseline = R[y].mean().item()  # the next step's baseline
        curve.append(expected_reward(theta).item())
    return theta.detach(), curve


verdict = run_cases(reinforce_loss, get("reinforce_loss"))
if verdict.passed:
    loss_fn = reinforce_loss
    print("Your reinforce_loss passes every check: it trains the bandit.")
else:
    loss_fn = pg.reinforce_loss
    n_checks = len(verdict.results)
    why = ("is not written yet" if verdict.not_implemented
           else f"passes {verdict.n_passed} of {n_checks} checks")
    print(f"Your reinforce_loss {why},\nso the run below uses "
          "minirlhf.pg.reinforce_loss.\nWrite it, run its check, then "
          "run this cell again: yours will train it.")
theta, curve = train_bandit(loss_fn)
print("\nstep   E[R]")
for step in range(0, len(curve), 10):
    print(f"{step:4d}   {curve[step]:.3f}")
print("pi(y) after", fmt(torch.softmax(theta, 0)))

# %% [markdown]
# The bandit's expected reward climbs toward the best action's, and the policy ends up on that
# action.
#
# ## From the policy gradient to the clipped surrogate
#
# The loop above spends each batch on a single gradient step. For a language model, sampling
# is the expensive part (it generates text token by token), so PPO reuses every batch for
# several steps. It alternates two phases. It *samples* a batch of completions with the
# current policy, which from then on is called $\pi_{\text{old}}$ and kept fixed, and it
# *updates* the policy $\pi_\theta$ with several gradient steps on that same batch. The
# sampling phase is called the *rollout*: the policy rolls out completions, and their
# log-probs and rewards are recorded for the update. After the
# first step the batch was sampled by a policy slightly different from the one being trained,
# and the *probability ratio* corrects for that, token by token ($s_i$ is what the policy saw
# before choosing $y_i$: for a token, the text before it; the bandit has no such context):
#
# $$
# \mathrm{ratio}_i = \frac{\pi_\theta(y_i \mid s_i)}{\pi_{\text{old}}(y_i \mid s_i)}
# = \exp\big(\texttt{new\_logp}_i - \texttt{old\_logp}_i\big).
# $$
#
# Reweighting by the ratio turns samples of one policy into an estimate for another
# (*importance sampling*): $\mathbb{E}_{y \sim \pi_{\text{old}}}[\mathrm{ratio}(y)\, R(y)] =
# \sum_y \pi_{\text{old}}(y)\, \frac{\pi_\theta(y)}{\pi_{\text{old}}(y)}\, R(y) =
# \mathbb{E}_{y \sim \pi_\theta}[R(y)]$. And since $\nabla_\theta\, \mathrm{ratio}_i =
# \mathrm{ratio}_i\, \nabla_\theta \log \pi_\theta(y_i)$, at $\theta = \theta_{\text{old}}$, where
# every ratio is 1, the gradient of the *surrogate* $\frac{1}{N}\sum_i \mathrm{ratio}_i\, A_i$ is
# the REINFORCE estimate above, with the advantage $A_i$ in place of $R(y_i) - b$. The cell
# checks this on the bandit's 16,000 sampled actions, with $A = R - \mathbb{E}[R]$. Then it
# moves $\theta$ away from $\theta_{\text{old}}$ along a fixed direction (toward the best
# action) and, for each step, compares the reweighted average of $R$ over batches of 8 old
# samples with the exact $\mathbb{E}_{\pi_\theta}[R]$.

# %%
theta_old = theta0  # the policy that sampled ys
y = ys.flatten()  # the 16,000 actions above, drawn from pi_old
old_logp = torch.log_softmax(theta_old, 0)[y]  # (16000,)
adv = R[y] - value  # the advantage: reward minus baseline
theta = theta_old.clone().requires_grad_(True)
ratio = torch.exp(torch.log_softmax(theta, 0)[y] - old_logp)  # all 1
(from_ratio,) = torch.autograd.grad((ratio * adv).mean(), theta)
loss = pg.reinforce_loss(torch.log_softmax(theta, 0)[y], R[y], value)
(from_reinforce,) = torch.autograd.grad(-loss, theta)
print("grad of mean(ratio * A)  ", fmt(from_ratio))
print("minus grad of REINFORCE  ", fmt(from_reinforce))

direction = torch.tensor([-1.0, 0.0, 0.0, 1.0])  # toward the best action
pi_old = torch.softmax(theta_old, 0)
print(f"\n{'step':>4}{'largest':>9}{'exact':>8}{'reweighted':>12}"
      f"{'spread':>8}")
print(f"{'':>4}{'ratio':>9}{'E[R]':>8}{'average':>12}{'(std)':>8}")
for step in (0.0, 0.5, 1.0, 2.0, 3.0):
    theta_new = theta_old + step * direction
    ratios = torch.softmax(theta_new, 0)[ys] / pi_old[ys]  # (2000, 8)
    estimates = (ratios * R[ys]).mean(1)  # one per batch of 8, (2000,)
    print(f"{step:4.1f}{ratios.max().item():9.2f}"
          f"{expected_reward(theta_new).item():8.3f}"
          f"{estimates.mean().item():12.3f}{estimates.std().item():8.3f}")

# %% [markdown]
# The two gradients agree. The reweighted averages stay on the exact values, so the estimate
# is unbiased at every step, but their spread grows as $\pi_\theta$ leaves $\pi_{\text{old}}$,
# driven by the few samples whose ratio is large: an update that trusts the surrogate far from
# $\theta_{\text{old}}$ steers by noise. Maximized without limit, the surrogate invites exactly
# that: a few lucky samples with large advantages would push their ratios far from 1, on the
# evidence of one batch. PPO {cite}`schulman2017ppo` therefore takes the smaller of the
# surrogate and a copy whose ratio is clipped to $[1 - \epsilon, 1 + \epsilon]$:
#
# $$
# J = \frac{1}{N}\sum_{i=1}^{N}
# \min\Big(\mathrm{ratio}_i\,A_i,\;\operatorname{clip}(\mathrm{ratio}_i,\,1-\epsilon,\,1+\epsilon)\,A_i\Big).
# $$
#
# The minimum makes $J$ a pessimistic estimate. Once a token's ratio has moved beyond the band
# *in the direction its advantage rewards* (up for $A > 0$, down for $A < 0$), its term is
# flat: its gradient is zero, and the update has no reason to push it further. If the ratio
# has moved the *other* way, the unclipped term is the smaller one and is kept, so the
# gradient still pulls the token back. We draw this below.
#
# ## The objective of this book
#
# RLHF adds the leash of chapter 1 to the reward of every token:
#
# $$
# \mathrm{kl}_i = \texttt{new\_logp}_i - \texttt{ref\_logp}_i, \qquad
# A_i = \texttt{rewards}_i - \beta\, \mathrm{kl}_i ,
# $$
#
# and $J$ is the clipped surrogate above with these $A_i$. The training loss is $-J$.
#
# ```{admonition} Two simplifications, stated plainly
# :class: note
# This box says where the objective of this book is simpler than a real trainer's; you can
# skip it on a first reading, and exercise 3 comes back to the second point.
#
# - **The shaped reward is the advantage.** There is no value baseline and no generalized
#   advantage estimation {cite}`schulman2016gae`: $A_i$ is the shaped reward itself. Chapter
#   5 subtracts a batch-mean baseline; chapter 7 shows what a learned value function adds.
# - **The KL uses the current policy.** Here $\mathrm{kl}_i$ is computed from `new_logp`, so it
#   changes as $\theta$ changes. Real implementations compute the shaped reward *once*, at
#   rollout time, from the sampling policy's log-probs, and treat it as a constant during the
#   update {cite}`huang2024nimplementation` (TRL's PPO trainer does so in
#   `trl/experimental/ppo/ppo_trainer.py`). At the first update step the two have the same
#   *value*, because `new_logp` equals `old_logp` there, but not the same gradient:
#   differentiating $\mathrm{kl}_i$ through `new_logp` lowers each token's
#   $\partial J / \partial\, \texttt{new\_logp}_i$ by $\beta / N$ at that step. The extra term
#   averages to zero over tokens sampled from the policy, but not in one batch, and after the
#   first step the two versions differ on average as well (exercise 3). The cell below shows
#   the first step on one token.
# ```

# %%
def first_step_on_one_token(logp, reward, beta, kl_follows_new):
    """Return (J, dJ / d new_logp) for one token at the first update step
    (new = old = ref = logp), with kl from new_logp or held constant."""
    new_logp = torch.tensor([logp], requires_grad=True)
    old_logp = ref_logp = torch.tensor([logp])
    kl = (new_logp if kl_follows_new else old_logp) - ref_logp
    J = (torch.exp(new_logp - old_logp) * (reward - beta * kl)).mean()
    (grad,) = torch.autograd.grad(J, new_logp)
    return J.item(), grad.item()


for kl_follows_new, name in ((True, "kl from new_logp"),
                             (False, "kl held constant")):
    J, grad = first_step_on_one_token(-2.0, reward=1.0, beta=0.1,
                                      kl_follows_new=kl_follows_new)
    print(f"{name:<17} J = {J:.2f}   dJ / d new_logp = {grad:.2f}")

# %% [markdown]
# The same $J$, and a gradient lower by $\beta$ when the KL follows `new_logp` (one token, so
# $N = 1$).
#
# ## Exercise 2.2: `ppo_rlhf_objective`
#
# Write `ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon, beta)`. All four
# sequences hold one number per token; `epsilon` is the clip range and `beta` the KL
# coefficient.
#
# **`'policy_loss'` is not negated here.** Unlike exercise 2.1's loss, every entry of this
# dict is a quantity to *maximize*; the section after the check says why the name keeps the
# word "loss".
#
# **Contract.** Return a dict of three Python floats, each rounded to 2 decimals with Python's
# `round` (halves to even, on the binary value, as in chapter 1):
#
# - `'objective'`: $J$, the number to *maximize*;
# - `'policy_loss'`: the clipped-surrogate term, not negated. Here it equals `'objective'`,
#   because the KL already sits inside the advantage;
# - `'kl_penalty'`: $\beta \cdot \mathrm{mean}_i\,\mathrm{kl}_i$, reported for monitoring only.
#   Never subtract it from $J$ again.
#
# Inputs may be lists or arrays; NumPy only. Keep the sign of every $\mathrm{kl}_i$, as in
# chapter 1.
#
# **Examples.**
# `old=[-2.0], new=[-1.8], ref=[-2.0], rewards=[1.0], epsilon=0.2, beta=0.1` gives
# `{'objective': 1.18, 'policy_loss': 1.18, 'kl_penalty': 0.02}`: the ratio $e^{0.2} \approx
# 1.221$ is clipped to 1.2, $\mathrm{kl} = 0.2$, $A = 0.98$ and $J = 1.2 \times 0.98 = 1.176$.
# With `old = new = ref = [-1.0]` and `rewards=[1.0]` the answer is
# `{'objective': 1.0, 'policy_loss': 1.0, 'kl_penalty': 0.0}`.
#
# **How it is judged.** The check runs your function on the cases in its report: both
# examples, negative advantages, ratios clipped from above and from below, $\beta = 0$, a
# mixed batch, a KL large enough to turn a positive reward into a negative advantage,
# $J = 0.405$, which Python's `round` gives as 0.41 (chapter 1), a batch where the mean of the
# token-by-token minimum differs from the smaller of the two terms' means, and inputs given as
# lists of ints with a fractional penalty (an advantage kept in an int array would be
# truncated). Every expected value was worked out by hand.

# %% tags=["solution"]
def ppo_rlhf_objective(old_logp, new_logp, ref_logp, rewards, epsilon,
                       beta):
    """Return the KL-shaped clipped surrogate and its parts, as Python
    floats rounded to 2 decimals."""
    # BEGIN SOLUTION
    old_logp, new_logp, ref_logp, rewards = (
        np.asarray(x, dtype=float)
        for x in (old_logp, new_logp, ref_logp, rewards)
    )
    ratio = np.exp(new_logp - old_logp)
    kl = new_logp - ref_logp
    adv = rewards - beta * kl  # the shaped reward, used as the advantage
    clipped = np.clip(ratio, 1 - epsilon, 1 + epsilon)
    J = np.minimum(ratio * adv, clipped * adv).mean()
    return {"objective": round(float(J), 2),
            "policy_loss": round(float(J), 2),
            "kl_penalty": round(float(beta * kl.mean()), 2)}
    # END SOLUTION

# %% [hints] ppo_rlhf_objective

# %%
check("ppo_rlhf_objective", ppo_rlhf_objective);

# %% [markdown]
# **Why `'policy_loss'` equals `'objective'`, and how it relates to a loss that is minimized.**
# A trainer can put the leash in one of two places (the section "The KL counted twice" below
# compares them). With the KL as a separate loss term, the objective is the clipped surrogate
# *minus* the penalty, and the surrogate alone, the part that comes from the policy's ratios,
# is what is reported as the policy term. With the KL inside the advantage, as here, there is
# nothing left to subtract: the surrogate *is* the whole objective, and the two entries are
# the same number. The contract keeps both names so that the difference between the two
# layouts stays visible, and a reader who sees them differ knows the KL was counted outside
# the advantage. Despite the word "loss", both are quantities to *maximize*.
#
# An optimizer minimizes, so training uses the negative, $-J$. Chapter 5's `ppo_token_loss` is
# that negative on a real batch: minus the mean, over the completion tokens the mask keeps,
# of $\min(\mathrm{ratio}_t A_t,\ \operatorname{clip}(\mathrm{ratio}_t)\, A_t)$. It takes the
# advantages ready-made: the leash has already been moved into them by
# `kl_shaped_advantages`, as per-token rewards $-\beta\,\mathrm{kl}_t$ computed once at
# rollout, summed with the score into returns-to-go, minus a baseline. So, given the same
# advantages, `ppo_token_loss` is minus this exercise's `'policy_loss'` (before rounding), and
# `'kl_penalty'` enters neither; the second cell below shows it on the first example.
#
# The package's `minirlhf.ppo_rlhf_objective` follows the same contract and also rejects bad
# input by name: lists of different lengths, an empty batch, a NaN, $\epsilon$ outside
# $(0, 1)$ or a negative $\beta$. The cells below use it, so they run before your version
# exists.

# %%
example = dict(old_logp=[-2.0], new_logp=[-1.8], ref_logp=[-2.0],
               rewards=[1.0])
print(minirlhf.ppo_rlhf_objective(**example, epsilon=0.2, beta=0.1))
try:
    minirlhf.ppo_rlhf_objective(**example, epsilon=1.5, beta=0.1)
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# The same first example through chapter 5's loss. The advantage is worked out by hand here,
# the shaped reward $1 - 0.1 \times 0.2 = 0.98$, and the mask keeps the one token:

# %%
from minirlhf.leashes.reward import ppo_token_loss

A = torch.tensor([[1.0 - 0.1 * 0.2]])  # reward - beta * kl, (1, 1)
loss = ppo_token_loss(new_logp=torch.tensor([[-1.8]]),
                      old_logp=torch.tensor([[-2.0]]), advantages=A,
                      mask=torch.ones(1, 1), epsilon=0.2)
print(f"ppo_token_loss = {loss.item():.4f}; minus the objective: "
      f"{-1.2 * 0.98:.4f}")

# %% [markdown]
# ## Where the gradient is cut off
#
# Fix one token and vary its ratio. For $A > 0$ the clipped surrogate rises with the ratio
# until $1 + \epsilon$ and is flat beyond; for $A < 0$ it is flat below $1 - \epsilon$. The
# flat stretches, shaded below, are where the update gets no gradient from this token.

# %% tags=["hide-input"]
epsilon = 0.2
ratios = np.linspace(0.0, 2.0, 401)
flats = ((1 + epsilon, 2.0), (0.0, 1 - epsilon))  # zero gradient there


def draw_clip(narrow=False):
    """Return the figure: one token's clipped surrogate against its ratio,
    for A = +1 and A = -1 (narrow: panels stacked, for a phone)."""
    size = 9 if narrow else 10  # font size, points
    fig, axes = plt.subplots(*((2, 1) if narrow else (1, 2)),
                             figsize=(3.6, 5.8) if narrow else (6.8, 3.6),
                             sharex=True, constrained_layout=True)
    for ax, adv, flat in zip(axes, (1.0, -1.0), flats):
        unclipped = ratios * adv
        clipped = np.clip(ratios, 1 - epsilon, 1 + epsilon) * adv
        ax.axvspan(*flat, color=PINK, alpha=0.18, lw=0,
                   label="flat: zero gradient")
        ax.plot(ratios, unclipped, color="grey", ls="--", lw=1.2,
                label="ratio · A (unclipped)")
        ax.plot(ratios, np.minimum(unclipped, clipped), color=BLUE,
                lw=2.2, label="min(ratio · A, clip(ratio) · A)")
        for edge in (1 - epsilon, 1 + epsilon):
            ax.axvline(edge, color="black", ls=":", lw=1)
        ax.set_title(f"A = {adv:+g}, ε = {epsilon:g}", fontsize=size)
        ax.tick_params(labelsize=size, labelbottom=True)
    # Side by side the panels share a y label; stacked, an x label.
    for ax in axes if narrow else axes[:1]:
        ax.set_ylabel("surrogate term (advantage units)", fontsize=size)
    for ax in axes[1:] if narrow else axes:
        ax.set_xlabel(r"probability ratio $\pi_\theta / \pi_{old}$",
                      fontsize=size)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, frameon=False, fontsize=size,
               ncol=1 if narrow else 3, loc="outside upper center")
    return fig


show_figure(
    draw_clip,
    alt="Two panels of the clipped surrogate against the ratio. For "
        "A = +1 it rises along ratio times A until 1.2 and is flat "
        "after; for A = -1 it is flat below 0.8 and follows ratio times "
        "A above. The flat regions are shaded.",
    caption="The clipped surrogate of one token against its probability "
            "ratio, for a positive and a negative advantage. Shaded: the "
            "ratio has moved past the band in the direction the "
            "advantage rewards, so the term is flat: no gradient.",
)

# %% [markdown]
# The same thing in numbers: automatic differentiation of the clipped term with respect to
# the ratio, at a few ratios on each side of the band, with $\epsilon = 0.2$ and
# $A = \pm 1$.

# %%
epsilon = 0.2  # the clip range, as in the figure
ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5] * 2, requires_grad=True)
adv = torch.tensor([1.0] * 5 + [-1.0] * 5)  # A = +1, then A = -1
clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
surrogate = torch.min(ratio * adv, clipped * adv)  # (10,)
surrogate.sum().backward()
print("  A   ratio   term   d term / d ratio")
rows = zip(adv.tolist(), ratio.tolist(), surrogate.tolist(),
           ratio.grad.tolist())
for a, r, term, grad in rows:
    print(f"{a:+3.0f}   {r:5.2f}  {term:+.2f}   {grad:+.1f}")

# %% [markdown]
# For $A = +1$ the gradient is 1 up to the band's upper edge and 0 beyond it. A ratio of 0.5
# (the update has made a good token *less* likely) still gets the full gradient, pulling it
# back up. For $A = -1$ it is the mirror image. Clipping only ever removes the incentive to
# move further in the direction the advantage already likes; it never blocks a correction.
#
# The mirror image is not a perfect one. For $A > 0$ a token's term can never exceed
# $(1 + \epsilon)A$. For $A < 0$ and a ratio above $1 + \epsilon$ the minimum keeps the
# unclipped $\mathrm{ratio} \cdot A$, which has no floor: it falls without limit as the ratio
# grows, and its gradient with respect to the token's log-prob, $\mathrm{ratio} \cdot A$, grows
# with it. A bad token whose probability has jumped far above the sampling policy's can
# then outweigh the rest of the batch. That happens after many steps on one batch, or in
# *asynchronous* training, where sampling and updating run side by side and the samples come
# from a *stale* policy, one or more updates behind the policy being trained. *Dual-clip*
# PPO {cite}`ye2020dualclip` adds the missing floor: for $A < 0$ the term is $\max\big(\min(\mathrm{ratio}\,A,\ \operatorname{clip}(\mathrm{ratio})\,A),\ c\,A\big)$
# with a constant $c > 1$ ($c = 3$ in the paper), flat with zero gradient once the ratio passes
# $c$. TRL's PPO trainer has no such floor (`trl/experimental/ppo/ppo_trainer.py` takes the
# larger of the two losses, `torch.max(pg_losses, pg_losses2)`, and nothing else). Its GRPO
# trainer has an option with the same effect: `delta` in `trl/trainer/grpo_config.py`
# ("two-sided clipping") caps the unclipped ratio at $\delta$ before the minimum, which for
# $A < 0$ and $\delta > 1 + \epsilon$ is the floor $\delta A$.
#
# ## Sliders: $\epsilon$ and $\beta$ over a small batch
#
# Six tokens, each with the reward credited to it (in a real batch most tokens get 0 and the
# last token of each completion carries the score). The update has already moved the policy:
# `new_logp` differs from `old_logp`.

# %%
# How far the update moved each token (new - old), and how far the policy
# is from the reference (new - ref): one number per token, (6,) each.
log_ratio = np.array([0.30, 0.10, -0.05, -0.35, 0.25, 0.15])
kl = np.array([0.40, 0.80, -0.20, 0.30, 1.20, 0.05])
rewards = np.array([1.0, 0.3, -0.5, -1.0, 0.2, 0.6])
old_logp = np.array([-1.20, -0.80, -2.10, -1.50, -0.60, -1.90])
new_logp = old_logp + log_ratio
ref_logp = new_logp - kl
STATES = ("in band", "CLIPPED", "outside, kept")


def clipped_surrogate(ratio, adv, epsilon):
    """Return the per-token terms min(ratio * adv, clip(ratio) * adv)."""
    return np.minimum(ratio * adv,
                      np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv)


def token_table(epsilon, beta):
    """Return per-token arrays ratio, kl, adv, term, state, and J, for the
    batch above, unrounded. state: 0 inside the band, 1 clipped (flat,
    zero gradient), 2 outside the band but unclipped (pulled back)."""
    ratio = np.exp(log_ratio)
    adv = rewards - beta * kl  # the shaped advantage
    term = clipped_surrogate(ratio, adv, epsilon)
    above, below = ratio > 1 + epsilon, ratio < 1 - epsilon
    flat = (above & (adv > 0)) | (below & (adv < 0))
    state = np.where(flat, 1, np.where(above | below, 2, 0))
    return ratio, kl, adv, term, state, term.mean()


def print_table(epsilon, beta):
    """Print the per-token table and J at these settings."""
    ratio, kl, adv, term, state, J = token_table(epsilon, beta)
    print(f"epsilon = {epsilon}, beta = {beta}")
    print("token  ratio     kl  reward  shaped A    term  state")
    for i in range(len(ratio)):
        print(f"{i:>5}  {ratio[i]:5.3f}  {kl[i]:+.2f}   {rewards[i]:+.2f}"
              f"    {adv[i]:+.3f}  {term[i]:+.3f}  {STATES[state[i]]}")
    out = minirlhf.ppo_rlhf_objective(old_logp, new_logp, ref_logp,
                                      rewards, epsilon, beta)
    print(f"J = {J:.4f}; the package returns {out['objective']}"
          f" (kl_penalty {out['kl_penalty']})")


print_table(epsilon=0.2, beta=0.1)

# %% [markdown]
# Tokens 0 and 4 have positive advantages, and the update has already raised their ratios past
# $1 + \epsilon$: clipped and flat. Token 3 has a negative advantage and its ratio has fallen
# below $1 - \epsilon$: also flat. Now move the sliders. A small $\epsilon$ clips almost everything that moved; a large
# $\beta$ can turn token 4's small positive reward into a negative shaped advantage, and the
# same ratio that was *clipped* becomes *outside, kept*: the update now pulls that token
# back down, because the leash has made it a bad token.

# %% tags=["hide-input"]
STATE_COLORS = (BLUE, PINK, ORANGE)


def draw_batch(eps, beta, narrow=False):
    """Return a figure of the batch at clip range eps and KL coefficient
    beta: the ratios against the clip band, and the rewards, shaped
    advantages and surrogate terms (narrow: laid out for a phone)."""
    ratio, kl, adv, term, state, J = token_table(eps, beta)
    x = np.arange(len(ratio))
    size = 9 if narrow else 10  # font size, points
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(3.6, 6.6) if narrow else (6.8, 5.0), sharex=True)
    # Fixed margins: a constrained layout would triple the drawing time.
    # The legends sit above each panel, clear of the bars.
    if narrow:
        fig.subplots_adjust(left=0.19, right=0.97, top=0.83, bottom=0.07,
                            hspace=0.6)
    else:
        fig.subplots_adjust(left=0.11, right=0.99, top=0.87, bottom=0.06,
                            hspace=0.3)
    # Top: each ratio as a bar from 1, colored by its state.
    top.axhspan(1 - eps, 1 + eps, color=GREEN, alpha=0.15, lw=0,
                label="clip band 1 ± ε")
    colors = [STATE_COLORS[s] for s in state]
    top.bar(x, ratio - 1, bottom=1, color=colors, width=0.6)
    for s, name in enumerate(STATES):  # legend entries only
        top.bar([0], [0], bottom=1, color=STATE_COLORS[s], label=name)
    top.axhline(1, color="grey", lw=0.8)
    top.set_ylim(0.45, 1.65)
    top.set_ylabel(r"ratio $\pi_\theta / \pi_{old}$", fontsize=size)
    top.legend(frameon=False, fontsize=size, ncol=2 if narrow else 4,
               loc="lower center", bbox_to_anchor=(0.5, 1.0))
    n_clipped = int((state == 1).sum())
    fig.suptitle(f"ε = {eps:g}, β = {beta:g}:  J = {J:+.3f}"
                 + ("\n" if narrow else ",  ")
                 + f"{n_clipped} of {len(ratio)} tokens clipped",
                 fontsize=size + 1, y=0.99)
    # Bottom: reward, shaped advantage and the surrogate term per token.
    bottom.bar(x - 0.17, rewards, width=0.32, color="lightgrey",
               edgecolor="grey", label="reward")
    bottom.bar(x + 0.17, adv, width=0.32, color=BLUE,
               label="shaped A = reward − β kl")
    bottom.scatter(x, term, color="black", zorder=3, s=22,
                   label="surrogate term")
    bottom.axhline(0, color="grey", lw=0.8)
    bottom.set_ylim(-2.3, 1.6)
    bottom.set_ylabel("advantage units", fontsize=size)
    bottom.set_xticks(x, [str(i) if narrow else f"token {i}" for i in x])
    if narrow:
        bottom.set_xlabel("token", fontsize=size)
    bottom.legend(frameon=False, fontsize=size, ncol=1 if narrow else 3,
                  loc="lower center", bbox_to_anchor=(0.5, 1.0))
    for ax in (top, bottom):
        ax.tick_params(labelsize=size)
    return fig


explore(
    draw_batch,
    {"eps": [0.05, 0.1, 0.2, 0.3, 0.5],
     "beta": [0.0, 0.1, 0.2, 0.5, 1.0]},
    default={"eps": 0.2, "beta": 0.1},
    labels={"eps": "ε", "beta": "β"},
    alt="Batch of six tokens at epsilon = {eps}, beta = {beta}: top, "
        "each token's ratio against the clip band, colored by whether "
        "it is clipped; bottom, rewards, shaped advantages and surrogate "
        "terms.",
    caption="The six-token batch. Move the ε and β sliders. Upper panel: "
            "each token's probability ratio as a bar from 1, against the "
            "clip band (green), colored by its state. Lower panel: each "
            "token's reward, its shaped advantage and its surrogate term "
            "(dots). A smaller ε clips more tokens; a larger β lowers the "
            "shaped advantage of every token with kl > 0 and can turn a "
            "clipped token into one outside the band but kept.",
)

# %% [markdown]
# ## The KL counted twice
#
# There are two sound ways to add the leash, and one unsound one.
#
# 1. **In the reward** (InstructGPT, TRL's PPO trainer, this book):
#    $A_i = r_i - \beta\,\mathrm{kl}_i$ and $J$ is the clipped surrogate. The dict's
#    `'kl_penalty'` is only a log line. TRL computes `non_score_reward = -kl_coef * kl` per token
#    at rollout time (`trl/experimental/ppo/ppo_trainer.py`).
# 2. **As a separate loss term** (GRPO {cite}`shao2024deepseekmath`): the advantage comes from
#    the reward alone, and $\beta$ times the mean k3 estimate of chapter 1 is subtracted from the
#    clipped surrogate. TRL's GRPO trainer adds `beta * per_token_kl`, a k3, to each token's
#    loss (`trl/trainer/grpo_trainer.py`); since release 1.12.0 it first multiplies that k3 by
#    the ratio $\pi_\theta/\pi_{\text{old}}$ by default, which changes its gradient (the page
#    *From toy to real* says how).
# 3. **Both** (a bug): the KL is put into the advantage *and* `'kl_penalty'` is subtracted again.
#
# At the first update step the ratio is 1 and nothing is clipped, so each objective is just the
# mean of its terms. The cell computes the value of all three on our batch, at that point and
# after the update.

# %%
def J_kl_in_reward(old, new, ref, r, epsilon, beta):
    """Return J with the KL inside the advantage (this book)."""
    adv = r - beta * (new - ref)
    return clipped_surrogate(np.exp(new - old), adv, epsilon).mean()


def J_kl_as_loss_term(old, new, ref, r, epsilon, beta):
    """Return J with the reward as the advantage and beta * mean(k3)
    subtracted (GRPO style)."""
    J = clipped_surrogate(np.exp(new - old), r, epsilon).mean()
    return J - beta * kl_estimators.k3(new, ref).mean()


def J_counted_twice(old, new, ref, r, epsilon, beta):
    """Return the bug: the KL inside the advantage, subtracted again."""
    J = J_kl_in_reward(old, new, ref, r, epsilon, beta)
    return J - beta * (new - ref).mean()


eps, beta = 0.2, 0.1
k1_mean = (new_logp - ref_logp).mean()
k3_mean = kl_estimators.k3(new_logp, ref_logp).mean()
print(f"mean reward {rewards.mean():.4f}, mean k1 {k1_mean:.4f}, "
      f"mean k3 {k3_mean:.4f}")
versions = (("1. KL in the reward", J_kl_in_reward, beta),
            ("2. KL as a k3 loss term", J_kl_as_loss_term, beta),
            ("3. both (the bug)", J_counted_twice, beta),
            ("   version 1, 2 * beta", J_kl_in_reward, 2 * beta))
first_step = (new_logp, new_logp, ref_logp, rewards)  # old = new: ratio 1
after = (old_logp, new_logp, ref_logp, rewards)  # after the update
print(f"{'value of J':<26}{'first step':>11}{'after':>9}")
for name, J, b in versions:
    print(f"{name:<26}{J(*first_step, eps, b):11.4f}"
          f"{J(*after, eps, b):9.4f}")

# %% [markdown]
# Versions 1 and 2 differ here because k1 and k3 agree only *on average* over tokens sampled
# from the policy, not token by token, and six hand-picked tokens are no sample. Both are
# honest, though: one leash of strength $\beta$. The *value* of version 3 equals version 1's
# with $2\beta$ at the first step of every update (and stays close to it after), while the
# configuration still says $\beta$.
#
# The gradient, which is what moves the policy, tells another story. The extra term
# $-\beta\,\mathrm{mean}_i(\texttt{new\_logp}_i - \texttt{ref\_logp}_i)$ has the gradient
# $-\beta\,\mathrm{mean}_i \nabla\log\pi_\theta(y_i)$: it lowers the log-prob of every sampled
# token by the same weight, good token or bad. At ratio 1 that is exactly what subtracting
# $\beta$ from every advantage would do, a shift of the baseline, and a baseline changes nothing
# on average, because $\mathbb{E}_{y \sim \pi_\theta}[\nabla\log\pi_\theta(y)] = 0$. After the
# first step the tokens still come from $\pi_{\text{old}}$, and the average becomes
# $-\beta \sum_y \pi_{\text{old}}(y)\,\nabla\log\pi_\theta(y) = \beta\,\nabla\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_\theta)$:
# a push *away from the sampling policy*, not toward the reference.
#
# In short, we will measure each version's pull toward the reference as a length and an
# angle, and compare them. To see this without sampling noise, `double_count` (in
# `minirlhf.studies`) takes a policy over five tokens at one position,
# $\pi_\theta = \mathrm{softmax}(\theta)$, a reference and a reward per token, and replaces
# every batch average over $y \sim \pi_{\text{old}}$ by the exact sum over the five tokens
# weighted by $\pi_{\text{old}}(y)$; torch then differentiates each version's *expected*
# objective exactly. While no ratio leaves the clip band, the reward's
# share of the gradient is the same in every version, the gradient of
# $\mathbb{E}_{\pi_\theta}[r]$ (because $\pi_{\text{old}} \cdot \mathrm{ratio} = \pi_\theta$), so
# the table shows the rest, each version's *leash*: its size in units of
# $\beta\,\|\nabla\mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})\|$, the pull the setting asks
# for, and its cosine with $-\nabla\mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})$, the
# direction toward the reference. Both at the first step ($\theta = \theta_{\text{old}}$) and
# after one gradient step on version 1.

# %%
result = double_count.study(
    logits_ref=[2.0, 1.0, 0.0, -1.0, 0.5],  # pi_ref = softmax(logits_ref)
    theta_old=[2.5, 0.4, 0.3, -1.2, 0.9],  # the policy that sampled
    reward=[1.0, 0.0, 0.5, 0.0, 0.8],  # one reward per token
    beta=0.5,
    lr=1.0,  # the size of the one update step
)
print(double_count.format_study(result))

# %% [markdown]
# The update keeps every ratio inside the clip band (0.93 to 1.03), so the reward's share of the
# gradient is the same in every row and the rows compare leashes alone.
#
# - **At the first step the bug is version 1 at $\beta$, not at $2\beta$.** Its leash has size
#   1.00, like version 1's. Doubling $\beta$ in the reward doubles the pull (2.00); a second copy
#   subtracted from $J$ adds nothing, and its extra term is exactly zero.
# - **After one update the extra term points away from $\pi_{\text{old}}$** (cosine +1.00 with
#   $\nabla\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_\theta)$). Whether that helps the leash depends
#   on where the update went. Here it points against the reference (cosine -0.89 with the pull
#   toward it), and the bug's leash comes out *weaker* than the honest one (0.87). The term is
#   zero at $\pi_{\text{old}}$ and grows as $\pi_\theta$ moves away from it, so every further
#   step on the same batch adds to it.
# - **A double count that does strengthen the leash** is a k3 loss term on top of the KL in the
#   reward. At the first step the k3 term's expected gradient is exactly
#   $-\beta\,\nabla\mathrm{KL}(\pi_{\mathrm{ref}} \,\|\, \pi_\theta)$ (size 1.00 and cosine +1.00
#   in the last lines): the gradient of the KL in the *other* direction, which also pulls
#   toward the reference, here 1.42 times as hard as the leash's own. Together the two pull
#   with 2.42. After the update the samples still come from $\pi_{\text{old}}$ and nothing
#   reweights them, so the k3 term is only close to that gradient (1.05). The two directions
#   have names. In RLHF usage the leash's $\mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})$,
#   with the policy being trained first, is the *reverse* KL, and
#   $\mathrm{KL}(\pi_{\mathrm{ref}} \,\|\, \pi_\theta)$ is the *forward* KL, the one that
#   supervised fine-tuning on the reference's samples would minimize. TRL uses the same
#   names: its DPO trainer's default leash, standard DPO's, is `"reverse_kl"`, and
#   `"forward_kl"` is an option (`f_divergence_type` in `trl/trainer/dpo_config.py`).
#
# So the bug does not double $\beta$, and nothing crashes: the logged objective counts the
# penalty twice, while the update feels it once, plus a push away from the policy that sampled
# the batch. That is why the exercise returns `'kl_penalty'` separately and
# says *for monitoring only*.
#
# ## Two questions, worked
#
# The first question this chapter's objective raises, why a *critic* (a learned value
# function that predicts each token's return) and GAE (generalized advantage estimation,
# which turns the critic's predictions into advantages) can handle a KL-shaped reward while
# the separate-term version cannot, needs both; chapter 7 builds them and answers it in its
# section "What the batch baseline left out". The second needs only the statistics a run
# logs.
#
# **Which statistics catch reward hacking?** *Reward hacking* is chapter 1's failure with a
# name: the policy raises the reward model's score by means the reward model overrates,
# while the quality a person would judge stays flat or falls. A trainer logs many numbers
# per iteration. Before opening the answer, name three you would plot to catch it early, and
# say what each would do while the policy hacks.
#
# <details class="answer">
# <summary>Worked answer: which statistics catch reward hacking?</summary>
#
# The score itself cannot reveal hacking, so watch the quantities that move *with* it, each
# on its own plot and per iteration (in brackets, the names TRL's PPO trainer logs them under
# in `trl/experimental/ppo/ppo_trainer.py`):
#
# - **Mean KL to the reference** (`objective/kl`). A steady climb, or a jump, means the policy is
#   leaving the region where the reward model was trained. A KL that keeps growing while the
#   reward flattens is a classic sign.
# - **Mean reward** (`objective/scores`) next to a measure the policy cannot game: a held-out
#   check, human spot checks, or in this book the exact verifier. Reward up while true quality
#   is flat or down is the definition of hacking; chapter 7 shows it happen.
# - **Response length.** Reward models often like longer answers (or a policy learns to end
#   early to dodge a penalty); a drift in mean length, or many completions hitting the maximum
#   without an end token (`val/num_eos_tokens` counts the end tokens), is a cheap early warning.
# - **Clip fraction** (`policy/clipfrac_avg`). A high fraction of clipped tokens means each
#   update moves the policy further than the clip range is meant to allow; a sudden rise often comes
#   with a collapse onto a few exploit strings.
# - **Entropy** (`objective/entropy`). A policy that has found an exploit becomes sure of it:
#   entropy falls and samples look alike. Read the samples.
#
# None of them proves hacking alone; together, and with a few samples read by a person every
# so often, they catch most of it.
#
# </details>
#
# ## Summary
#
# You can now:
#
# - derive the policy gradient with the log-derivative trick, write REINFORCE as a loss
#   (your `reinforce_loss`), and say why a baseline leaves it unbiased and can cut its noise;
# - explain the probability ratio and why PPO clips it, and read off where a token's clipped
#   term is flat (no gradient) and where it still pulls the token back;
# - compute the PPO-RLHF objective with the leash inside the advantage (your
#   `ppo_rlhf_objective`), and relate it to the loss a trainer minimizes;
# - put the KL in the reward *or* in the loss, and recognize the bug of doing both: its logged
#   value doubles, its pull toward the reference does not;
# - name the statistics that catch reward hacking, and the names TRL logs them under.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. Extreme clip ranges.** Set $\epsilon = 0.01$ and $\epsilon = 0.9$ in `print_table`. Which
# tokens are clipped at each, and what does $J$ approach as $\epsilon \to 0$? Explain with the
# formula.
#
# <details class="answer">
# <summary>Worked answer: extreme clip ranges</summary>
#
# With $\epsilon = 0.01$ every token whose ratio moved at all has left the band. In this batch
# each moved in the direction its advantage rewards, so all six are clipped (flat); a token
# that had moved the other way would be kept unclipped. With $\epsilon = 0.9$ the band $[0.1, 1.9]$ holds every ratio of
# the batch, nothing is clipped, and $J$ is the plain surrogate $\mathrm{mean}_i\,
# \mathrm{ratio}_i A_i$. The cell below prints the states at both settings ($\beta = 0.1$).
#
# As $\epsilon \to 0$, $\operatorname{clip}(\mathrm{ratio}_i) \to 1$, so each term tends to
# $\min(\mathrm{ratio}_i A_i,\ A_i)$ and $J$ to $\mathrm{mean}_i \min(\mathrm{ratio}_i A_i, A_i)$
# (the last line). Every move the update made that raised a term is ignored, every move that
# lowered one is counted: $J \le \mathrm{mean}_i A_i$, its value at ratio 1. Here every move
# raised its term, so each minimum is $A_i$ and the limit is exactly $\mathrm{mean}_i A_i$.
# PPO with $\epsilon = 0$ cannot gain from leaving $\pi_{\text{old}}$ at all.
#
# </details>

# %% tags=["hide-input"]
for eps in (0.01, 0.9):
    *_, state, J = token_table(eps, 0.1)
    print(f"epsilon = {eps}: J = {J:+.4f}; states of tokens 0 to 5:\n  "
          + ", ".join(STATES[s] for s in state))
_, _, adv_lim, _, _, _ = token_table(0.2, 0.1)
limit = np.minimum(np.exp(log_ratio) * adv_lim, adv_lim).mean()
print(f"limit as epsilon -> 0: mean(min(ratio * A, A)) = {limit:+.4f}; "
      f"mean(A) = {adv_lim.mean():+.4f}")

# %% [markdown]
# **2. Gradients per token.** Rewrite `token_table` in torch, make `new_logp` a tensor with
# `requires_grad=True`, and compute $\partial J / \partial\, \texttt{new\_logp}_i$. Check that
# the tokens marked CLIPPED get exactly zero from the surrogate. With `kl` computed from
# `new_logp`, what gradient do they still get, and from where?
#
# <details class="answer">
# <summary>Worked answer: gradients per token</summary>
#
# The cell below does it at $\epsilon = 0.2$, $\beta = 0.1$, once with the advantages held
# fixed (the surrogate alone) and once with $\mathrm{kl}_i$ following `new_logp`. With fixed
# advantages the clipped tokens' gradient is exactly zero, as the figure of the clipped
# surrogate promised. With $\mathrm{kl}_i = \texttt{new\_logp}_i - \texttt{ref\_logp}_i$, a
# clipped token's term is $(1 \pm \epsilon)(r_i - \beta\,\mathrm{kl}_i)/N$, whose derivative is
# $-(1 \pm \epsilon)\,\beta / N$: not zero. It comes from the leash, not the surrogate: the
# advantage itself depends on the token's log-prob, and lowering that log-prob lowers its
# KL. Real code computes the KL once at rollout (exercise 3), and then this gradient is gone.
#
# </details>

# %% tags=["hide-input"]
def torch_terms(new, kl_follows_new, eps=0.2, beta=0.1):
    """Return J of the six-token batch, computed in torch."""
    old, ref = torch.tensor(old_logp), torch.tensor(ref_logp)
    kl_i = (new if kl_follows_new else new.detach()) - ref
    adv_i = torch.tensor(rewards) - beta * kl_i
    ratio_i = torch.exp(new - old)
    return torch.minimum(ratio_i * adv_i,
                         ratio_i.clamp(1 - eps, 1 + eps) * adv_i).mean()


*_, state, _ = token_table(0.2, 0.1)
print("token  state          dJ/dnew, A fixed   dJ/dnew, kl follows new")
grads = []
for follows in (False, True):
    new = torch.tensor(new_logp, requires_grad=True)
    grads.append(torch.autograd.grad(torch_terms(new, follows), new)[0])
for i, s in enumerate(state):
    print(f"{i:>5}  {STATES[s]:<13}  {grads[0][i].item():+16.4f}"
          f"   {grads[1][i].item():+22.4f}")
print(f"-(1 + eps) * beta / N = {-(1.2) * 0.1 / 6:+.4f}; "
      f"-(1 - eps) * beta / N = {-(0.8) * 0.1 / 6:+.4f}")

# %% [markdown]
# **3. The KL as a constant.** Real code computes the shaped reward from the *sampling* policy.
# Replace `new - ref` by `old - ref` in the advantage and compare $J$ and its gradients with
# the version above at the first update step and after it. Then compare their *expected*
# gradients with `double_count.objectives` (`"kl in reward"` against `"kl fixed at rollout"`):
# which one equals the gradient of $\mathbb{E}[r] - \beta\,\mathrm{KL}(\pi_\theta \,\|\,
# \pi_{\mathrm{ref}})$ after an update, and why?
#
# <details class="answer">
# <summary>Worked answer: the KL as a constant</summary>
#
# The first cell below does both on the six-token batch. At the first step `new` equals
# `old`, so the two versions have the same $J$, 0.05750, and their gradients differ by
# $\beta/N$ on every token (the admonition "Two simplifications"). After the update the
# values differ too. While no token's term changes branch between the two versions, token
# $i$'s term moves by $\beta\,c_i(\texttt{new}_i - \texttt{old}_i)/N$, where $c_i$ is its ratio,
# or its clipped ratio where the clip binds. Clipped tokens count too: their term
# $\operatorname{clip}(\mathrm{ratio}_i)\,A_i$ is flat in the ratio but still holds the KL inside
# $A_i$. Here the fixed version's $J$ is higher by 0.01029, exactly that sum over all six
# tokens. The gradients after the update differ too. On the three clipped tokens the fixed
# version's is exactly 0 (exercise 2), so they differ by $c_i\,\beta/N$, the KL's own pull.
# On a token whose term is not clipped they differ by $c_i\,\beta\,(1 + \texttt{new}_i -
# \texttt{old}_i)/N$: the same pull, plus the ratio's slope times the shift of $A_i$ above. The
# last two columns of the table print the difference and this prediction.
#
# In expectation, while no ratio leaves the band, the expected objective is
# $\sum_y \pi_{\text{old}}(y)\,\mathrm{ratio}(y)\,A(y) = \sum_y \pi_\theta(y)\,A(y)$. With
# $\mathrm{kl}$ following $\theta$ this is $\mathbb{E}_{\pi_\theta}[r] - \beta\,
# \mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})$ *exactly*, so `"kl in reward"` has the true
# gradient at every $\theta$ inside the band. With the KL fixed at rollout it is
# $\mathbb{E}_{\pi_\theta}[r] - \beta\sum_y \pi_\theta(y)(\log\pi_{\text{old}} - \log\pi_{\mathrm{ref}})$,
# which differs from the true objective by $\beta\,\mathrm{KL}(\pi_\theta \,\|\, \pi_{\text{old}})$:
# zero, with zero gradient, at $\theta_{\text{old}}$, and growing as the update moves away.
# The second cell below measures both on `double_count.study`'s five-token example (the same
# inputs, after its one update step): the `"kl in reward"` gradient matches the true one, the fixed
# one differs by a little. The clip keeps $\pi_\theta$ near $\pi_{\text{old}}$, which is why the
# cheaper constant is good enough in practice.
#
# </details>

# %% tags=["hide-input"]
def J_both_ways(old, kl_follows_new, eps=0.2, beta=0.1):
    """Return (J, dJ / d new_logp) of the six-token batch sampled by old,
    with the KL from new_logp or fixed at the rollout's old - ref."""
    new = torch.tensor(new_logp, requires_grad=True)
    old, ref = torch.tensor(old), torch.tensor(ref_logp)
    kl_i = (new if kl_follows_new else old) - ref
    adv_i = torch.tensor(rewards) - beta * kl_i
    ratio_i = torch.exp(new - old)
    J = torch.minimum(ratio_i * adv_i,
                      ratio_i.clamp(1 - eps, 1 + eps) * adv_i).mean()
    return J.item(), torch.autograd.grad(J, new)[0]


print("step     J, kl from new   J, kl fixed   fixed - new")
q3_grads = {}
for step, old in (("first", new_logp), ("after", old_logp)):
    J_new, q3_grads[step, "new"] = J_both_ways(old, True)
    J_fix, q3_grads[step, "fixed"] = J_both_ways(old, False)
    print(f"{step:<6}{J_new:16.5f}{J_fix:14.5f}{J_fix - J_new:14.5f}")
# The shift while no term changes branch: beta / N * sum c_i (new - old),
# c_i the ratio, or the clipped ratio where the clip binds.
*_, state, _ = token_table(0.2, 0.1)
ratio = np.exp(log_ratio)
c_i = np.where(state == 1, np.clip(ratio, 0.8, 1.2), ratio)
print(f"beta / N * sum_i c_i (new_i - old_i) = "
      f"{0.1 / 6 * (c_i * log_ratio).sum():.5f}")
# After the update, fixed - new per token: beta / N * c_i inside the clip,
# beta / N * c_i * (1 + new_i - old_i) inside the band.
predicted = 0.1 / 6 * c_i * np.where(state == 1, 1.0, 1.0 + log_ratio)
print("\ndJ / d new_logp   first step           after the update")
print("token      kl from new   fixed    kl from new   fixed"
      "   fixed-new  predicted")
for i in range(6):
    g = [q3_grads[s, k][i].item() for s in ("first", "after")
         for k in ("new", "fixed")]
    print(f"{i:>5}   {g[0]:+14.4f}{g[1]:+8.4f}{g[2]:+15.4f}{g[3]:+8.4f}"
          f"{g[3] - g[2]:+12.4f}{predicted[i]:+11.4f}")


# %% tags=["hide-input"]
setting = dict(logits_ref=[2.0, 1.0, 0.0, -1.0, 0.5],
               theta_old=[2.5, 0.4, 0.3, -1.2, 0.9],
               reward=[1.0, 0.0, 0.5, 0.0, 0.8], beta=0.5)
theta_up = double_count.update(**setting, lr=1.0).requires_grad_(True)
expected = double_count.gradients(
    double_count.objectives(theta_up, **setting), theta_up)
print("after one update, expected gradients (5 logits), and the size of"
      " their\ndifference from the true gradient")
for name in ("true", "kl in reward", "kl fixed at rollout"):
    gap = (expected[name] - expected["true"]).norm().item()
    print(f"{name:<20}" + " ".join(f"{v:+.4f}" for v in expected[name])
          + f"  {gap:.4f}")

# %% [markdown]
# **4. k3 in the reward.** Use `estimators.k3(new, ref)` instead of `new - ref` in the shaped
# advantage. For which tokens of the batch does the advantage change most, and why?
#
# <details class="answer">
# <summary>Worked answer: k3 in the reward</summary>
#
# The change in token $i$'s advantage is $-\beta\,(k_3 - k_1) = -\beta\,(e^{-\mathrm{kl}_i} - 1)$.
# It is largest for the tokens with the largest $|\mathrm{kl}_i|$, and lopsided: for
# $\mathrm{kl}_i > 0$ the term is negative and at most 1 in size, so k3 charges *less* than k1;
# for $\mathrm{kl}_i < 0$ it grows exponentially, and k3 charges a token the policy likes less
# than the reference does, where k1 paid it. In our batch that is token 4
# ($\mathrm{kl} = 1.2$, the largest change) and token 2 (the one negative $\mathrm{kl}$, which
# turns from a bonus into a charge); the cell below prints both advantages. Chapter 7 shows that
# k3 as a reward also pushes the wrong way on average.
#
# </details>

# %% tags=["hide-input"]
adv_k1 = rewards - 0.1 * (new_logp - ref_logp)
adv_k3 = rewards - 0.1 * kl_estimators.k3(new_logp, ref_logp)
print("token     kl   A with k1   A with k3   change   (beta = 0.1)")
for i, (k, a1, a3) in enumerate(zip(kl, adv_k1, adv_k3)):
    print(f"{i:>5}  {k:+.2f}   {a1:+9.4f}   {a3:+9.4f}  {a3 - a1:+7.4f}")

# %% [markdown]
# **5. The double count in general.** Show that at ratio 1 the bug's *value* equals version
# 1's with $2\beta$ for any batch, while its gradient with respect to each `new_logp` equals
# version 1's at $\beta$ minus $\beta / N$. Then prove
# $\sum_y \pi_{\text{old}}(y)\,\nabla\log\pi_\theta(y) = -\nabla\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_\theta)$,
# and rerun `double_count.study` with other rewards and a larger `lr`: when does the extra
# term strengthen the leash, and when does it weaken it? (Watch the printed ratios: once one
# leaves the clip band, the reward's share of the gradient differs between versions.)
#
# <details class="answer">
# <summary>Worked answer: the double count in general</summary>
#
# At ratio 1 nothing is clipped and version 1 is $J_1(\beta) = \frac1N\sum_i (r_i -
# \beta\,\mathrm{kl}_i)$. The bug is $J_1(\beta) - \frac{\beta}{N}\sum_i \mathrm{kl}_i = \frac1N
# \sum_i (r_i - 2\beta\,\mathrm{kl}_i) = J_1(2\beta)$, whatever the batch. Its gradient with
# respect to $\texttt{new\_logp}_i$ is version 1's plus the derivative of
# $-\frac{\beta}{N}\sum_j \mathrm{kl}_j$, which is $-\beta/N$, because
# $\partial\,\mathrm{kl}_i / \partial\,\texttt{new\_logp}_i = 1$.
#
# For the identity: $\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_\theta) = \sum_y \pi_{\text{old}}(y)
# \log\pi_{\text{old}}(y) - \sum_y \pi_{\text{old}}(y)\log\pi_\theta(y)$, and only the second sum
# depends on $\theta$, so its gradient is $-\sum_y \pi_{\text{old}}(y)\,\nabla\log\pi_\theta(y)$.
#
# So the extra term pushes along $+\beta\,\nabla\mathrm{KL}(\pi_{\text{old}} \,\|\, \pi_\theta)$,
# away from the sampling policy. Whether that strengthens or weakens the leash depends on
# where the update went: if it moved toward the reference, moving further from
# $\pi_{\text{old}}$ is moving toward the reference too, and the bug's leash comes out
# stronger; if the reward pulled the update away from the reference, as in the chapter's
# example (cosine $-0.89$), it comes out weaker. A larger `lr` makes the term larger, since it
# grows with the distance from $\pi_{\text{old}}$, until ratios leave the band and the
# comparison stops being about leashes alone.
#
# </details>
#
# **6. A negative advantage, a rising ratio.** For $A = -1$, compute a token's term and its
# gradient with respect to `new_logp` at ratios 1.5, 2.5, 3.5 and 10. How large a share of a batch's
# gradient can that one token take? Add the dual-clip floor $\max(\text{term},\, c\,A)$ for
# $A < 0$, with $c = 3$, to `clipped_surrogate`, and check that the gradient is unchanged below
# ratio $c$ and zero above it.
#
# <details class="answer">
# <summary>Worked answer: a negative advantage, a rising ratio</summary>
#
# For $A < 0$ and a ratio above $1 + \epsilon$ the minimum keeps $\mathrm{ratio}\cdot A$, and
# since $\partial\,\mathrm{ratio} / \partial\,\texttt{new\_logp} = \mathrm{ratio}$, the gradient
# of the term is $\mathrm{ratio}\cdot A$: $-1.5$, $-2.5$, $-3.5$ and $-10$ at the four ratios
# (the cell below). A token in the band contributes at most about $(1 + \epsilon)|A|$, so one token at
# ratio 10 pulls as hard as about eight ordinary tokens with the same $|A|$, and its share grows
# without limit as its ratio does. With the dual-clip floor the term becomes
# $\max(\mathrm{ratio}\cdot A,\ 3A)$: unchanged (with the same gradient) while the ratio is below
# 3, and flat at $3A = -3$, with zero gradient, above 3. The cell tests ratios on either side
# of $c$, not $c$ itself: exactly at the corner the two branches of the maximum tie, and which
# gradient autograd returns there depends on the last bit of the ratio.
#
# </details>

# %% tags=["hide-input"]
def dual_clipped_surrogate(ratio, adv, epsilon, c=3.0):
    """Return the clipped terms, with the floor c * adv where adv < 0."""
    term = torch.minimum(ratio * adv, ratio.clamp(1 - epsilon, 1 + epsilon)
                         * adv)
    return torch.where(adv < 0, torch.maximum(term, c * adv), term)


print("ratio   term   d/d new_logp   dual-clip term   d/d new_logp")
for r in (1.5, 2.5, 3.5, 10.0):
    new = torch.tensor(np.log(r), requires_grad=True)  # old_logp = 0
    adv_neg = torch.tensor(-1.0)
    plain = torch.minimum(torch.exp(new) * adv_neg,
                          torch.exp(new).clamp(0.8, 1.2) * adv_neg)
    dual = dual_clipped_surrogate(torch.exp(new), adv_neg, 0.2)
    (g_plain,) = torch.autograd.grad(plain, new)
    (g_dual,) = torch.autograd.grad(dual, new)
    print(f"{r:5.1f}  {plain.item():+5.1f}  {g_plain.item():+13.2f}"
          f"  {dual.item():+15.1f}  {g_dual.item():+13.2f}")
