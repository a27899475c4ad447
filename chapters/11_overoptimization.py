# %% [markdown]
# # 11. How far to push, measured exactly
#
# Chapter 7 took the leash off and watched the policy exploit the reward model's blind spot:
# the RM's score crept up while the true accuracy fell. Gao et al. {cite}`gao2023scaling`
# measured the same thing at scale and drew it as a curve. As a policy moves away from where it
# started, the proxy RM's score keeps rising, while the "gold" score (a larger RM standing in for
# the truth) first rises, peaks, and falls. They found the curve for two ways of optimizing,
# best-of-$n$ sampling and RL, and fitted it with simple functions of the distance travelled.
#
# At their scale two of the curve's ingredients are estimates: the gold reward is another
# network, and the distance, a KL between the distributions over whole answers, is sampled. At
# ours both are exact. The gold reward is the verifier, which cannot be wrong, and an answer is
# at most four tokens, so the policy's **whole distribution over answers** can be written down
# for every prompt. This chapter does that, and with it separates three things that no run at
# scale can pull apart: what the proxy allows, what the optimizer finds, and the yardstick:
#
# 1. **The whole distribution**: every answer the policy can give, with its probability, and
#    from it the exact KL, the exact gold reward and the exact proxy reward.
# 2. **Best-of-$n$, exactly**: you write the law of the best of $n$ samples, the usual
#    formula for its KL, and the exact KL; your functions then measure best-of-$n$ for $n$ from 1
#    to 4,096, at no training cost.
# 3. **The optimum and the ceiling**, with no training either: the policy that the KL-regularized
#    objective is maximized by, for every strength of the leash, and the least KL at which any
#    policy can reach a given gold.
# 4. **RL that climbs**: four optimizers against the same proxy, each first checked to raise
#    the number it is handed, then read against the optimum at equal KL; DPO on the pairs the
#    proxy learnt from; and every method on one axis, with Gao et al.'s fitted forms.
# 5. **How the proxy's quality moves the peak**: five more proxies, trained on 200 to 12,800
#    pairs, and one with near-misses among its rejected answers; then proxies made as Gao et
#    al. made theirs, from the policy's own answers, at three sizes and three seeds each, with
#    best-of-$n$, the optimum and RL against them, and DPO on their pairs.
# 6. **The KL estimators against the truth**: chapter 1's k1 and k3, summed over the tokens of
#    sampled answers as a run computes them, beside the exact KL of the same policies.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1, 4, 5, 6, 7 and 9: the estimators k1 and k3, the reward model and its blind
# spot, the PPO loop, the per-prompt baseline, the leash taken off, and DPO. A first run of the
# notebook trains 20 small reward models (19 after chapter 7, whose exercise 1 makes the
# near-miss one) and makes its runs side by side, one per CPU core:
# curves that need no training for 21 proxies, eighteen RL runs and nine DPO runs, each
# policy enumerated exactly at every point it is read, with a progress bar in JupyterLab. They
# are stored in `outputs/ch11_overoptimization.json`. That takes about nine and a half
# minutes on a 2-core CPU, the longest first run of the book: the twenty proxies take nearly
# three of them, the runs side by side the rest. Later runs read the runs back and take about
# a minute (one PPO run is made again in the last section, and its KL estimators computed
# exactly).
# ```

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from minirlhf import exact, ppo, store, task
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import check, get
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.course.runs import load_or_run
from minirlhf.model import (completion_logits, completion_mask, generate,
                            make_generator)
# the Okabe-Ito colors, safe for color blindness
from minirlhf.palette import (BLACK, BLUE, GRAY, GREEN, ORANGE, PINK, SKY,
                              YELLOW)
from minirlhf.paths import OUTPUTS
from minirlhf.stats import mean_ci95, pm, print_claims
from minirlhf.studies import dpo_overopt, frontier, gao, kl_exact
from minirlhf.studies import onpolicy_proxies as onpolicy
from minirlhf.studies import overoptimization as overopt

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or under nbval.
PROGRESS = someone_watching()
# 9-pt text: figures are drawn 6.8 in wide for the page, 3.6 in for a phone
plt.rcParams["font.size"] = 9

policy, sft_metrics = store.load_sft(progress=PROGRESS)
rm, rm_metrics = store.load_rm(progress=PROGRESS)
pairs = overopt.eval_pairs()  # the first 100 of the 400 eval sums
prompts = task.encode_prompts(pairs)
print(f"partial-SFT policy: greedy accuracy {sft_metrics['accuracy']:.3f}")
print(f"reward model (the proxy): pair accuracy "
      f"{rm_metrics['pair_accuracy']:.3f}, near-miss accuracy "
      f"{rm_metrics['near_miss_accuracy']:.3f}")
print(f"{len(pairs)} prompts, answers sampled at temperature "
      f"{overopt.TEMPERATURE}")

# %% [markdown]
# ## The whole distribution
#
# An answer is at most four tokens from a vocabulary of 13, and it ends at its first `;`. So a
# prompt has at most $1 + 12 + 12^2 + 12^3 + 12^4 = 22{,}621$ possible answers, and the
# probability the policy gives each is the product of its tokens' probabilities at the sampling
# temperature. `minirlhf.exact.enumerate_completions` expands every prefix, level by level, until
# it ends in `;` or reaches four tokens. Most of the 22,621 are absurdly unlikely, so a prefix
# whose probability falls below a threshold (`min_prob`) is not expanded. Its probability is not
# lost: it is kept per prompt as the **pruned mass**, and every number computed from the
# distribution comes with bounds that hold whatever those pruned answers are.
#
# With the answers and their probabilities in hand, the quantities a run can only estimate are
# sums. For the policy $\pi$, the reference $\pi_{\mathrm{ref}}$, the verifier $g$ and the proxy
# RM $r$, on one prompt:
#
# $$
# \begin{aligned}
# \mathrm{KL}(\pi \,\|\, \pi_{\mathrm{ref}}) &= \sum_y \pi(y) \log\frac{\pi(y)}{\pi_{\mathrm{ref}}(y)},\\
# \text{gold} &= \sum_y \pi(y)\, g(y),\\
# \text{proxy} &= \sum_y \pi(y)\, r(y).
# \end{aligned}
# $$
#
# This KL is over **whole answers** (the *sequence-level* KL), the distance Gao et al. use. It
# is not the per-token KL of chapters 5 to 7, which `evaluate` computed on the greedy answers
# only; the last section puts the two side by side. Every number below is a mean over the 100
# prompts (why not all 400: each RL evaluation below enumerates its policy afresh, 13 times in
# each of 12 runs). One pruning threshold, $10^{-8}$, serves the whole chapter. The cell
# enumerates the partial-SFT policy and checks the enumeration against plain sampling: the
# verifier's accuracy on 64 sampled answers a prompt must land near the exact value.

# %%
MIN_PROB = overopt.MIN_PROB  # prune answers less likely than this: 1e-8
comps = exact.enumerate_completions(policy, prompts, overopt.TEMPERATURE,
                                    MIN_PROB)
gold = exact.gold_rewards(comps, pairs)  # (N,): 1 if right, else 0
proxy = exact.proxy_rewards(comps, rm)  # (N,): the RM's score
gold_sft = exact.expected_gold(comps, pairs)
proxy_sft = exact.expected_proxy(comps, rm)
counts = comps.counts()
print(f"answers enumerated: {len(comps.tokens):,} in all, "
      f"{counts.min()} to {counts.max()} a prompt")
print(f"largest pruned mass of a prompt: {comps.pruned.max():.1e}")
print(f"exact gold (verifier accuracy of a sampled answer): "
      f"{gold_sft.value.mean():.4f}")
print(f"exact proxy (RM score of a sampled answer): "
      f"{proxy_sft.value.mean():+.4f}")
print(f"  bounds from the pruned mass: gold in "
      f"[{gold_sft.lower.mean():.4f}, {gold_sft.upper.mean():.4f}],\n"
      f"  proxy in [{proxy_sft.lower.mean():+.4f}, "
      f"{proxy_sft.upper.mean():+.4f}]")
# The check: sample 64 answers of each prompt and verify them.
many = prompts.repeat_interleave(64, 0)
sampled = generate(policy, many, overopt.TEMPERATURE,
                   generator=make_generator(0))
hits = task.batch_verify(pairs.repeat_interleave(64, 0), sampled)
per_prompt = hits.double().view(len(pairs), 64).mean(1)
m, half = mean_ci95(per_prompt - comps.per_prompt(gold * comps.probs))
print(f"sampled minus exact, 64 answers a prompt: {m:+.4f}\n"
      f"  (95% interval {m - half:+.4f} to {m + half:+.4f})")
print_claims([("the interval holds 0: sampling agrees with the enumeration",
               m - half <= 0 <= m + half)])

# %% [markdown]
# The partial-SFT policy spreads its probability over a few hundred answers a prompt, and fewer
# than one in four of its sampled answers is right. (Its greedy answer is right more often, as
# chapter 3 measured: greedy decoding picks the likeliest answer, which is the right one more
# often than a sample is.) The pruned mass is too small to move any printed digit, and the
# sampled accuracy agrees with the exact one.
#
# ## Best-of-$n$, exactly
#
# Best-of-$n$ is the simplest way to optimize against a reward model, and a strong one: draw
# $n$ answers from the policy, score each with the proxy, and keep the best. No weight changes.
# It is a policy all the same, with its own distribution over answers, and at our scale we can
# write that distribution down.
#
# Rank one prompt's answers by their proxy score, and let $F(v)$ be the probability that a
# sample from $\pi$ scores at most $v$. The best of $n$ independent samples scores at most $v$
# only if all $n$ do, which happens with probability $F(v)^n$. So the best of $n$ has the score
# $v$ with probability
#
# $$
# P_n(v) = F(v)^n - F(v^-)^n,
# $$
#
# where $F(v^-)$ is the probability of scoring strictly less than $v$. When several answers
# share the score $v$ (a tie), the best of $n$ is one of them, and which one is decided by the
# tie rule. Ours: among the draws that share the top score, the winner is chosen uniformly at
# random (taking the first of them comes to the same). Those draws are independent draws from
# $\pi$ restricted to the tied answers, so the winner is too, and within a tie $P_n$ splits in
# proportion to $\pi$: $P_n(y) = P_n(v)\, \pi(y) / \pi(\text{answers scoring } v)$. (Choosing
# uniformly among the tied *answers* instead would give another law.) When no scores tie, this
# is $P_n(y) = F(y)^n - F(y^-)^n$.
#
# ## Exercise 11.1: `best_of_n_probs`
#
# **Contract.** `best_of_n_probs(probs, proxy, n)` takes the probabilities of one prompt's
# answers under the policy, shape `(K,)`, non-negative and summing to 1, their proxy scores,
# shape `(K,)`, and a whole number $n \ge 1$, as lists or NumPy arrays. It returns $P_n$, the
# probability that the best of $n$ independent samples is each answer, as a NumPy float array
# of shape `(K,)`. Ties in the proxy are broken uniformly at random. NumPy only.
#
# **Examples.** `best_of_n_probs([0.5, 0.3, 0.2], [1, 2, 3], 2)` returns
# `array([0.25, 0.39, 0.36])`: the lowest-ranked answer wins only when both samples are it,
# $0.5^2$; the middle one when both score at most 2 but not both 1, $0.8^2 - 0.5^2$; the best
# one otherwise, $1 - 0.8^2$. With the ranks reversed, `best_of_n_probs([0.2, 0.3, 0.5], [3, 2,
# 1], 2)` returns `array([0.36, 0.39, 0.25])`. A tie:
# `best_of_n_probs([0.5, 0.25, 0.25], [0, 1, 1], 2)` returns `array([0.25, 0.375, 0.375])`.
#
# **How it is judged.** Cases worked by hand, compared within $10^{-9}$: the examples, $n = 1$,
# $n = 10$ (an answer that needs ten decimals), a large $n$, ties in several places, all answers
# tied, an answer of probability 0, and lists as inputs; then 100 random inputs against the
# package's solution.

# %% tags=["solution"]
def best_of_n_probs(probs, proxy, n):
    """Return P_n, the law of the best of n samples ranked by proxy (ties
    broken uniformly at random), as a NumPy array shaped like probs."""
    # BEGIN SOLUTION
    probs = np.asarray(probs, dtype=float)  # (K,)
    proxy = np.asarray(proxy, dtype=float)  # (K,)
    values, block = np.unique(proxy, return_inverse=True)  # ascending
    mass = np.bincount(block, weights=probs, minlength=len(values))
    upper = np.minimum(np.cumsum(mass), 1.0)  # F(v)
    lower = upper - mass  # F(v^-)
    block_prob = upper ** n - np.clip(lower, 0.0, 1.0) ** n
    share = np.divide(probs, mass[block], out=np.zeros_like(probs),
                      where=mass[block] > 0)
    return block_prob[block] * share
    # END SOLUTION

# %% [hints] best_of_n_probs

# %%
check("best_of_n_probs", best_of_n_probs);

# %% [markdown]
# ## Exercise 11.2: `best_of_n_kl_bound`
#
# How far does best-of-$n$ move from $\pi$? If the score has a continuous distribution under
# $\pi$ (no answer carries probability of its own: an *atomless* distribution), $P_n$ depends
# on an answer only through its rank $u = F(y)$, with density $n u^{n-1}$ against $\pi$, and
# the KL is
#
# $$
# \mathrm{KL}(P_n \,\|\, \pi) = \int_0^1 n u^{n-1} \log(n u^{n-1})\, du = \log n - \frac{n-1}{n}.
# $$
#
# Stiennon et al. {cite}`stiennon2020summarize` use this formula for their best-of-$n$
# policies, and Gao et al. {cite}`gao2023scaling` use it as the KL axis of every best-of-$n$
# curve they draw. Beirami et al. {cite}`beirami2024bon` show that the formula is not the KL of
# best-of-$n$ in general but only an **upper bound** on it, and study when the gap is large. The
# derivation needs the atomless distribution; ours has atoms, every answer with a probability
# of its own, even where no two scores tie. Then an answer $y$ gets
# $P_n(y) = \int_{F(y^-)}^{F(y)} n u^{n-1}\, du$, the continuous density lumped over its own
# stretch of ranks, and lumping can only lower a KL. Exercise 11.4 measures by how much.
#
# **Contract.** `best_of_n_kl_bound(n)` returns $\log n - (n-1)/n$ in nats, as a Python float,
# for a whole number $n \ge 1$.
#
# **Examples.** `best_of_n_kl_bound(1)` returns `0.0`; `best_of_n_kl_bound(2)` returns
# `0.1931...` ($\log 2 - 1/2$).
#
# **How it is judged.** Cases worked by hand, within $10^{-9}$, from $n = 1$ to $n = 4096$; then
# 100 random $n$ up to a million.

# %% tags=["solution"]
def best_of_n_kl_bound(n):
    """Return log(n) - (n - 1) / n, the KL of best-of-n for a continuous
    score, in nats, as a Python float."""
    # BEGIN SOLUTION
    return float(np.log(n) - (n - 1) / n)
    # END SOLUTION

# %% [hints] best_of_n_kl_bound

# %%
check("best_of_n_kl_bound", best_of_n_kl_bound);

# %% [markdown]
# ## Exercise 11.3: `sequence_kl`
#
# The exact KL needs no formula at all once the distribution is written down: it is the sum of
# the first display above. You write it, and the next cell uses it, with your `best_of_n_probs`,
# to measure best-of-$n$.
#
# **Contract.** `sequence_kl(logp, ref_logp)` takes the log-probabilities of the same answers of
# one prompt under the policy and the reference, shape `(K,)`, or `(M, K)` for $M$ policies at
# once (one per row), as lists or NumPy arrays. It returns
# $\sum_y \pi(y) (\log \pi(y) - \log \pi_{\mathrm{ref}}(y))$ along the last axis, with
# $\pi(y) = e^{\log \pi(y)}$: a Python float for `(K,)`, a NumPy array `(M,)` for `(M, K)`. An
# answer the policy never gives has `logp = -inf` and adds 0, whatever the reference gives it.
# Neither's probabilities need sum to 1 (other answers may have been pruned): $\pi(y)$ is
# $e^{\log \pi(y)}$ as given, never renormalized.
#
# **Examples.** `sequence_kl(np.log([0.5, 0.5]), np.log([0.25, 0.75]))` returns
# $\tfrac12 \log 2 + \tfrac12 \log \tfrac23 = 0.1438...$; `sequence_kl([0.0, -np.inf],
# np.log([0.5, 0.5]))` returns $\log 2 = 0.6931...$.
#
# **How it is judged.** Cases worked by hand, within $10^{-9}$: the examples, equal
# distributions, answers of probability 0 under either, a policy or a reference whose
# probabilities do not sum to 1, several rows at once, and lists; then 100 random inputs.

# %% tags=["solution"]
def sequence_kl(logp, ref_logp):
    """Return sum_y pi(y) (log pi(y) - log ref(y)) along the last axis: a
    float for (K,), a NumPy array for (M, K)."""
    # BEGIN SOLUTION
    logp = np.asarray(logp, dtype=float)
    ref_logp = np.asarray(ref_logp, dtype=float)
    given = logp > -np.inf  # answers the policy never gives add 0
    diff = np.subtract(logp, ref_logp, out=np.zeros_like(logp), where=given)
    total = (np.exp(logp) * diff).sum(axis=-1)
    return float(total) if logp.ndim == 1 else total
    # END SOLUTION

# %% [hints] sequence_kl

# %%
check("sequence_kl", sequence_kl);

# %% [markdown]
# ## Your functions measure best-of-$n$
#
# The cell below measures best-of-$n$ against chapter 4's RM with your three functions, when
# they pass their checks (otherwise with the package's, and it says so). For each prompt it takes
# the enumerated answers with their probabilities and proxy scores, adds the pruned mass as one
# more answer that ranks below all the others (it wins only when all $n$ samples fall in it),
# computes $P_n$ with `best_of_n_probs`, and then $\mathrm{KL}(P_n \,\|\, \pi)$ with `sequence_kl`,
# for 44 values of $n$ from 1 to 4,096. Then it sets the mean over the prompts beside the
# analytic value of exercise 11.2, and beside the package's own computation of the same KL,
# which the curves below are drawn from.

# %%
NS = [int(n) for n in np.unique(np.round(np.logspace(0, 12, 49, base=2)))]
mine = {"best_of_n_probs": (best_of_n_probs, gao.best_of_n_probs),
        "best_of_n_kl_bound": (best_of_n_kl_bound, gao.best_of_n_kl_bound),
        "sequence_kl": (sequence_kl, gao.sequence_kl)}
use = {}
for name, (yours, package_fn) in mine.items():
    verdict = run_cases(yours, get(name))
    use[name] = yours if verdict.passed else package_fn
    print(f"{name}: yours" if verdict.passed else
          f"{name}: yours is not written yet or fails a check, so the "
          f"package's minirlhf.studies.gao.{name} is used")
bon_kl = np.zeros(len(NS))
for i, span in enumerate(comps.spans()):
    p = np.append(comps.probs[span].numpy(), comps.pruned[i].item())
    score = proxy[span].numpy()
    score = np.append(score, score.min() - 1.0)  # the pruned: ranked last
    p_n = np.stack([use["best_of_n_probs"](p, score, n) for n in NS])
    ref = np.broadcast_to(p, p_n.shape)  # pi, once per n: (len(NS), K)
    with np.errstate(divide="ignore"):  # log 0 = -inf: P_n gives it nothing
        bon_kl += use["sequence_kl"](np.log(p_n), np.log(ref)) / len(pairs)
bound = np.array([use["best_of_n_kl_bound"](n) for n in NS])
print("   n   exact KL   log n - (n-1)/n   exact / analytic")
for n in (2, 4, 16, 64, 256, 1024, 4096):
    i = NS.index(n)
    print(f"{n:>4}   {bon_kl[i]:>8.3f}   {bound[i]:>15.3f}   "
          f"{bon_kl[i] / bound[i]:>16.2f}")

# %% [markdown]
# For $n = 2$ the exact KL is already below the formula (0.91 of it), and the gap widens with
# $n$: at $n = 4096$ the exact KL is 0.78 of what the formula says. The cause is the atoms:
#
# - **Atoms.** Every answer carries probability of its own, so best-of-$n$ can only move whole
#   answers up or down, and the KL of the lumped law is below the formula's (exercise 11.4 shows
#   it on two answers). Ties are not the cause here: the RM scores distinct answers differently,
#   and the only tie in the computation is the pruned mass, merged into one outcome. A tie would
#   only merge atoms into larger ones.
# - **A finite top**, which follows from the atoms. However large $n$ is, best-of-$n$ can do no
#   better than put all its mass on the top-scoring answer $y^*$, so its KL can never exceed
#   $\log(1/\pi(y^*))$. The formula grows like $\log n$ forever.

# %% [markdown]
# The same atoms shape a second number that Beirami et al. bound {cite}`beirami2024bon`:
# best-of-$n$'s *win rate* against the policy it started from, the chance that its answer scores
# above a fresh sample's (a tie counted half), which their abstract bounds by $n/(n+1)$. With
# no atoms it is exactly $n/(n+1)$: the best of $n$ loses to one more independent draw only
# when that draw is the best of all $n+1$, a chance of $1/(n+1)$. With atoms the sample can be
# the very answer best-of-$n$ chose, a tie, and the win rate falls below the bound. The package
# computes it exactly from the same enumeration, with bounds for the pruned mass
# (`exact.best_of_n_win_rate`).

# %%
rates = [exact.best_of_n_win_rate(comps.probs[span], proxy[span],
                                  torch.tensor(NS), comps.pruned[i].item())
         for i, span in enumerate(comps.spans())]
win, win_lo, win_hi = (torch.stack([r[k] for r in rates]).mean(0).numpy()
                       for k in ("win_rate", "lower", "upper"))
print("   n   win rate   its bounds         n/(n+1)   gap")
for n in (1, 2, 4, 16, 64, 256, 1024, 4096):
    i = NS.index(n)
    print(f"{n:>4}   {win[i]:>8.4f}   [{win_lo[i]:.4f}, {win_hi[i]:.4f}]   "
          f"{n / (n + 1):>7.4f}   {n / (n + 1) - win[i]:.4f}")
print_claims([("the win rate is at most n/(n+1) at every n, bounds too",
               bool(np.all(win_hi <= np.array(NS)
                                        / (np.array(NS) + 1) + 1e-12)))])

# %% [markdown]
# ## Exercise 11.4: `best_of_n_kl`
#
# Exercise 11.2's formula needs a score distribution without atoms, where no answer carries
# probability of its own. Ties are not what breaks it. A policy over a finite set of answers
# has atoms even when every score is distinct, because each answer is an atom. Take two answers
# of probability $\tfrac12$ with distinct scores. The best of two is the higher one unless both
# draws are the lower one, so $P_2 = (0.25, 0.75)$ and
#
# $$
# \mathrm{KL}(P_2 \,\|\, \pi) = 0.25 \log 0.5 + 0.75 \log 1.5 = 0.1308...
# \;<\; \log 2 - \tfrac12 = 0.1931...
# $$
#
# In general an answer $y$ gets the continuous law's density $n u^{n-1}$ summed over its own
# stretch of ranks, from $F(y^-)$ to $F(y)$. Lumping two laws in the same way can only lower
# the KL between them (the data-processing inequality). So for any discrete $\pi$ the formula
# is an upper bound. The bound is met only at $n = 1$, and the KL approaches it from below as
# the atoms shrink. A tie merges several answers into one atom, and best-of-$n$ moves no mass
# inside an atom. A tie can therefore only lower the KL further. It is not what makes the gap.
#
# **Contract.** `best_of_n_kl(probs, proxy, n)` takes the same inputs as `best_of_n_probs`:
# the probabilities of one prompt's answers under the policy, shape `(K,)`, non-negative and
# summing to 1; their proxy scores, shape `(K,)`; and a whole number $n \ge 1$. The inputs may
# be lists or NumPy arrays. It returns the exact
# $\mathrm{KL}(P_n \,\|\, \pi) = \sum_y P_n(y) \log(P_n(y) / \pi(y))$ in nats, as a Python
# float. Here $P_n$ is the law of exercise 11.1, with ties broken uniformly at random, and $\pi$
# is `probs`. An answer with $P_n(y) = 0$ adds 0. Your `best_of_n_probs` may do part of the
# work. NumPy only.
#
# **Examples.** `best_of_n_kl([0.5, 0.5], [0, 1], 2)` returns
# $0.25 \log 0.5 + 0.75 \log 1.5 = 0.1308...$, below `best_of_n_kl_bound(2)`, which is
# $0.1931...$. `best_of_n_kl([0.5, 0.3, 0.2], [1, 2, 3], 1)` returns `0.0`, because best-of-1 is
# the policy. With all scores tied, `best_of_n_kl([0.2, 0.3, 0.5], [1, 1, 1], 5)` returns `0.0`.
#
# **How it is judged.** Cases worked by hand, compared within $10^{-9}$: the examples, $n = 3$
# on the same two answers, a tie that makes two answers one atom, an answer of probability 0,
# $n = 1000$ (the KL stops at $\log 5$, against the formula's $\log 1000 - 0.999$), 40 equal
# atoms with distinct scores at $n = 2$ ($3.1 \times 10^{-4}$ below the formula), and lists as
# inputs. Then 100 random inputs are checked against the package's solution.

# %% tags=["solution"]
def best_of_n_kl(probs, proxy, n):
    """Return KL(P_n || pi) in nats, as a Python float: best-of-n's exact
    law against the policy, tied answers merged into one atom."""
    # BEGIN SOLUTION
    probs = np.asarray(probs, dtype=float)  # (K,)
    proxy = np.asarray(proxy, dtype=float)  # (K,)
    values, block = np.unique(proxy, return_inverse=True)  # ascending
    mass = np.bincount(block, weights=probs, minlength=len(values))
    upper = np.minimum(np.cumsum(mass), 1.0)  # F(v)
    lower = np.clip(upper - mass, 0.0, 1.0)  # F(v^-)
    won = upper ** n - lower ** n  # P_n of each atom
    # within an atom P_n(y) / pi(y) = won / mass: sum over the atoms
    kept = won > 0  # an atom that never wins adds 0
    return float((won[kept] * np.log(won[kept] / mass[kept])).sum())
    # END SOLUTION

# %% [hints] best_of_n_kl

# %%
check("best_of_n_kl", best_of_n_kl);

# %% [markdown]
# Gao et al.'s best-of-$n$ curves are drawn against the formula. On ours the two axes differ,
# and the rest of the chapter uses the exact one. First, check that your functions measured
# what the package measures, and read the study's runs.

# %%
# the tilts' betas, 100 down to 0.05; the RL runs and where they are read
BETAS = [float(b) for b in np.round(np.geomspace(100, 0.05, 45), 6)]
SEEDS = (0, 1, 2)
AT = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
LENGTH = {"rloo": 64, "ppo-prompt-baseline": 64, "rloo-verifier": 64,
          "ppo-chapter-5": 40}  # iterations of each optimizer's runs
PROXY_NAMES = ("book", *overopt.PROXIES)
jobs = [{"kind": "exact", "proxy": p, "ns": NS, "betas": BETAS}
        for p in PROXY_NAMES]
# the optimum again with nothing pruned, on the first 10 prompts
jobs.append({"kind": "check", "proxy": "book", "prompts": 10,
             "betas": BETAS})
for name, length in LENGTH.items():
    at = [a for a in AT if a < length] + [length]
    jobs += [{"kind": "rl", "optimizer": name, "proxy": "book", "seed": s,
              "iterations": length, "at": at, "samples": 4}
             for s in SEEDS]
# DPO, chapter 9's beta, three passes over the pairs (its section)
jobs += [{"kind": "dpo", **job}
         for job in dpo_overopt.study_jobs(betas=(1.25,), seeds=SEEDS)]
# proxies trained on the policy's own answers, and on the book's pairs,
# three seeds each (the section "Proxies made as Gao et al. made theirs")
jobs += [{"kind": "exact", "data": kind, "pairs": size, "seed": s,
          "ns": NS, "betas": BETAS}
         for kind in onpolicy.KINDS for size in onpolicy.SIZES
         for s in onpolicy.SEEDS if (kind, s) != ("off-policy", 0)]
# RL against the largest on-policy proxies, run s against the proxy of seed s
jobs += [{"kind": "rl", "optimizer": name, "data": "on-policy",
          "pairs": max(onpolicy.SIZES), "rm_seed": s, "seed": s,
          "iterations": 64, "at": AT, "samples": 4}
         for name in ("rloo", "ppo-prompt-baseline") for s in SEEDS]
# DPO on the on-policy pairs of each size, chapter 9's beta and the
# paper's 0.1, three passes, seed 0 (the section's end)
DPO_MADE_BETAS = (1.25, 0.1)
jobs += [{"kind": "dpo", **job}
         for job in dpo_overopt.study_jobs(betas=DPO_MADE_BETAS, seeds=(0,),
                                           data="on-policy")]
study = load_or_run(
    OUTPUTS / "ch11_overoptimization.json",
    {"jobs": jobs, "study": [overopt.study_code(), dpo_overopt.study_code(),
                             onpolicy.study_code()]}, {},
    lambda: {"results": overopt.run_study(jobs, progress=PROGRESS)}, arms=())
curves, rl, dpo_runs, made, rl_made, dpo_made = {}, {}, [], {}, {}, {}
for job, result in zip(jobs, study["results"]):
    if job["kind"] == "dpo" and "data" in job:
        dpo_made[job["beta"], job["pairs"]] = result
    elif job["kind"] == "rl" and "data" in job:
        rl_made.setdefault(job["optimizer"], []).append(result)
    elif job["kind"] == "exact" and "data" in job:
        made[job["data"], job["pairs"], job["seed"]] = result
    elif job["kind"] == "exact":
        curves[job["proxy"]] = result
    elif job["kind"] == "check":
        unpruned = result
    elif job["kind"] == "dpo":
        dpo_runs.append(result)
    else:
        rl.setdefault(job["optimizer"], []).append(result)
bon = {name: c["bon"] for name, c in curves.items()}
gap = np.abs(bon_kl - np.array(bon["book"]["kl"])).max()
print_claims([("your best-of-n KL is the package's, within 1e-9 at every n",
               gap <= 1e-9)])
print(f"{len(curves) + len(made)} proxies measured without training; "
      f"{sum(map(len, rl.values()))} RL runs against chapter 4's RM,\n"
      f"{sum(map(len, rl_made.values()))} against proxies of the policy's "
      f"own answers;\n{len(dpo_runs)} DPO runs on the book's pairs, "
      f"{len(dpo_made)} on the policy's own")

# %% [markdown]
# ## Best-of-$n$ against the proxy
#
# Now the gold and the proxy. The figure draws best-of-$n$ against chapter 4's RM for every
# $n$: the proxy's score, which best-of-$n$ raises by construction, and the gold, the verifier's
# accuracy, which is what we wanted raised.

# %%
def curve_of(name):
    """Return a best-of-n curve as arrays; a KL is >= 0 (at n = 1 rounding
    leaves about 1e-17 of either sign)."""
    c = {k: np.array(v) for k, v in bon[name].items() if k != "per_prompt"}
    c["kl"] = c["kl"].clip(min=0.0)
    return c


book = curve_of("book")
top = gao.peak(book["kl"], book["gold"])
print("   n   exact KL, its bounds     gold (verifier)    proxy (RM)")
for n in (1, 2, 3, 4, 8, 16, 64, 256, 1024, 4096):
    i = NS.index(n)
    print(f"{n:>4}   {book['kl'][i]:>6.3f} [{book['kl_lower'][i]:.3f}, "
          f"{book['kl_upper'][i]:.3f}]   {book['gold'][i]:.4f} ± "
          f"{book['escape'][i]:.4f}   {book['proxy'][i]:>+8.3f}")
print(f"gold peaks at n = {NS[top['index']]}: {top['gold']:.4f} "
      f"({top['gain']:+.4f} over n = 1), KL {top['kl']:.3f}, "
      f"sqrt(KL) {top['sqrt_kl']:.3f}")
print(f"largest effect of the pruned mass on gold at any n: "
      f"{book['escape'].max():.1e}")


# %% tags=["hide-input"]
def draw_bon(narrow=False):
    """Return best-of-n's gold and proxy against n, one panel each."""
    fig, axes = plt.subplots(2 if narrow else 1, 1 if narrow else 2,
                             figsize=(3.6, 5.0) if narrow else (6.8, 2.8),
                             layout="constrained", sharex=True)
    for ax, key, color, label in (
            (axes[0], "gold", BLUE, "gold: verifier accuracy"),
            (axes[1], "proxy", ORANGE, "proxy: RM score")):
        ax.plot(NS, book[key], color=color, marker="o", ms=3)
        ax.set_xscale("log", base=2)
        ax.set_ylabel(label)
        ax.set_xlabel("n (best of n samples)")
    axes[0].axvline(NS[top["index"]], color="grey", lw=0.8, ls=":")
    return fig


show_figure(
    draw_bon,
    alt="Two line plots against n on a log scale from 1 to 4096. Gold: "
        "rises from n = 1 to a peak at small n, then falls steadily to a "
        "small fraction of its start. Proxy: rises steadily with n.",
    caption="Best-of-n against chapter 4's RM, exactly: the proxy's score "
            "rises with n, as it must; the verifier's accuracy rises for "
            "the first few n and then falls far below where it started. "
            "The dotted line marks the gold peak.",
)

# %% [markdown]
# The proxy rises with every $n$, and the gold does not follow it far. The best of two or
# three samples is right more often than one sample, and from there on every doubling of $n$
# makes it worse: at $n = 4096$ the best answer is right about a quarter as often as a plain
# sample. This is over-optimization with no training at all, and with the truth measured
# exactly. With $n$ in the thousands, best-of-$n$ returns the answer the RM scores highest
# among those it is likely to draw, and for most prompts that answer is wrong; the RM's
# favourite over *all* answers is, for most prompts, too unlikely to be drawn even then
# (exercise 1 counts them).
#
# The table's bounds say what the pruning leaves open. Answers less likely than $10^{-8}$ are
# never enumerated; they could score anything and rank anywhere, and the bounds hold wherever
# they do (`exact.best_of_n_stats` gives the argument). Best-of-$n$ rarely draws one, but at
# $n = 4096$ it does with probability 0.0028 on average over the prompts, so there the gold is
# known to within ± 0.0028 and the KL lies between 5.679 and 5.721: of 5.697, only the first
# decimal is certain. Up to $n = 64$ the bounds are inside the printed digits.
#
# ## The optimum, and the ceiling
#
# Best-of-$n$ is one way to trade KL for proxy score. Is there a better one? For a leash of
# strength $\beta$, the policy that maximizes the KL-regularized objective of chapter 2,
#
# $$
# \mathbb{E}_{y \sim \pi}[r(y)] - \beta\, \mathrm{KL}(\pi \,\|\, \pi_{\mathrm{ref}}),
# $$
#
# is known in closed form: the reference **tilted** by the reward,
#
# $$
# \begin{aligned}
# \pi_\beta(y) &= \frac{\pi_{\mathrm{ref}}(y)\, e^{r(y)/\beta}}{Z}, \qquad
# Z = \sum_y \pi_{\mathrm{ref}}(y)\, e^{r(y)/\beta},\\
# \mathrm{KL}(\pi_\beta \,\|\, \pi_{\mathrm{ref}}) &= \frac{\mathbb{E}_{\pi_\beta}[r]}{\beta} - \log Z
# \end{aligned}
# $$
#
# (Korbak et al. {cite}`korbak2022rl`; DPO's derivation starts from it, chapter 9
# {cite}`rafailov2023dpo`). It is where RL with a leash on the whole answer's KL ends up if it
# optimizes perfectly. No policy has a higher proxy score at its KL (one that had would score
# higher on the objective), so it is the **proxy frontier**: the most proxy that any method can
# buy with a given KL. On the enumeration it is a weighted sum, per prompt, for every $\beta$ at
# once (`minirlhf.tilted.tilted_stats`).
#
# Tilt by the verifier instead of the RM and you get the **gold ceiling**. On a prompt whose
# answers are right with probability $p$, raising that to $G$ costs at least the KL between two
# coins, $G \log\frac{G}{p} + (1-G)\log\frac{1-G}{1-p}$, and the verifier's tilt pays exactly
# that (the book's tests check it); with one $\beta$ for all prompts it is the least mean KL
# for a mean gold. No method, handed any proxy, gets above it.
#
# Yang et al. {cite}`yang2024asymptotics` prove that best-of-$n$ and the tilted optimum become
# the same as answers grow long (for a model that draws its tokens independently and a reward
# that adds over them). Ours are four tokens long, and the cell puts the two side by side. The
# table reads the optimum at every fourth $\beta$: its gold gain over the start with bounds
# that hold whatever the pruned answers are, its proxy gain, the largest share of the tilted law
# the pruned answers could take, and the ceiling's gold gain at the same KL.

# %%
tilt = {k: np.array(v) for k, v in curves["book"]["tilt"].items()
        if k != "per_prompt"}
g0, p0 = book["gold"][0], book["proxy"][0]  # the policy's own: n = 1
# per prompt, (M, P): the optimum, the ceiling and best-of-n
tp, cp, bp = (frontier.curve_arrays(curves["book"][k])
              for k in ("tilt", "ceiling", "bon"))
P = len(pairs)


def at(c, key, kl, p=slice(None)):
    """Return curve c's `key`, averaged over the prompts p, read at the
    mean KLs kl (NaN outside the curve)."""
    return frontier.at_kl(c["kl"][:, p].mean(1), c[key][:, p].mean(1), kl)


print("  beta  sqrt(KL)  gold gain  its bounds           proxy gain  "
      "ceiling")
for i in range(0, len(BETAS), 4):
    lo, hi = tilt["gold_lower"][i] - g0, tilt["gold_upper"][i] - g0
    ceiling_gain = at(cp, "gold", [tilt["kl"][i]])[0] - g0
    ceiling_gain = ("beyond" if np.isnan(ceiling_gain)
                    else f"{ceiling_gain:+.3f}")
    print(f"{BETAS[i]:>6.3g}  {np.sqrt(tilt['kl'][i]):>8.3f}  "
          f"{tilt['gold'][i] - g0:>+9.4f}  [{lo:+.4f}, {hi:+.4f}]  "
          f"{tilt['proxy'][i] - p0:>+10.3f}  {ceiling_gain:>7}")
# where the bounds are wide: the same with nothing pruned, 10 prompts
moved = np.maximum(np.array(unpruned["gold"]) / 1e-4,
                   np.array(unpruned["kl"]) / 1e-3)
last = int(np.flatnonzero(moved <= 1)[-1])  # all betas before it too
TILT_END = last + 1  # the optimum is drawn and read down to BETAS[last]
print(f"nothing pruned, first {unpruned['prompts']} prompts: down to "
      f"beta {BETAS[last]:.3g} (sqrt(KL) {np.sqrt(tilt['kl'][last]):.2f})"
      f"\n  gold moves by at most {max(unpruned['gold'][:last + 1]):.0e}, "
      f"KL by {max(unpruned['kl'][:last + 1]):.0e};\n  at beta "
      f"{BETAS[-1]:.3g} gold by {unpruned['gold'][-1]:.0e}, KL by "
      f"{unpruned['kl'][-1]:.2f}")
assert np.all(moved[:last + 1] <= 1)


def optimum_peak(p, r):
    """The optimum's best gold gain over the start, and where: sqrt(KL);
    then best-of-n's best gain."""
    gain = tp["gold"][:, p].mean(1) - bp["gold"][0, p].mean()
    i = int(gain.argmax())
    bon_gain = bp["gold"][:, p].mean(1) - bp["gold"][0, p].mean()
    return [gain[i], np.sqrt(tp["kl"][:, p].mean(1)[i]), bon_gain.max()]


def bon_minus_optimum(p, r):
    """Best-of-n minus the optimum at best-of-n's KL: gold, then proxy
    (NaN past the optimum's largest KL)."""
    kl = bp["kl"][:, p].mean(1)
    return np.concatenate([
        bp["gold"][:, p].mean(1) - at(tp, "gold", kl, p),
        bp["proxy"][:, p].mean(1) - at(tp, "proxy", kl, p)])


(t_gain, t_d, _), t_lo, t_hi = frontier.bootstrap(optimum_peak, P)
print(f"\nthe optimum's gold peaks at sqrt(KL) {t_d:.3f}: {t_gain:+.4f}\n"
      f"  (95% interval over prompts {t_lo[0]:+.4f} to {t_hi[0]:+.4f})")
ceiling_there = at(cp, "gold", [t_d ** 2])[0] - g0
print(f"  the ceiling there: {ceiling_there:+.4f} "
      f"({ceiling_there / t_gain:.0f} times as much)")
diff, d_lo, d_hi = frontier.bootstrap(bon_minus_optimum, P)
print("best-of-n minus the optimum at best-of-n's KL")
print("   n  sqrt(KL)  gold (95% interval)           proxy")
for n in (2, 4, 8, 64):
    i, j = NS.index(n), len(NS) + NS.index(n)
    print(f"{n:>4}  {np.sqrt(book['kl'][i]):>8.3f}  {diff[i]:+.4f} "
          f"[{d_lo[i]:+.4f}, {d_hi[i]:+.4f}]    {diff[j]:+.3f}")
proxy_diff = diff[len(NS) + 1:]  # n >= 2, within the optimum's range
in_range = np.isfinite(proxy_diff)
print(f"best-of-n's peak, n = {NS[top['index']]}: {top['gain']:+.4f} "
      f"(95% interval {t_lo[2]:+.4f} to {t_hi[2]:+.4f}),\n  against "
      f"the ceiling at its KL: {at(cp, 'gold', [top['kl']])[0] - g0:+.4f}")
i2 = NS.index(2)
print_claims([
    ("the optimum's gold peak is above the start (interval)", t_lo[0] > 0),
    ("best-of-2 has more gold than the optimum at its KL (interval)",
     d_lo[i2] > 0),
    (f"the optimum has more proxy than best-of-n, n = 2 to "
     f"{np.array(NS[1:])[in_range][-1]:,}",
     bool(np.all(proxy_diff[in_range] < 0))),
])

# %% [markdown]
# Three things to read here. First, the optimum itself barely gains gold against this RM: a
# few thousandths at most, near $\sqrt{\mathrm{KL}} = 0.3$, after which it loses gold while its
# proxy climbs on. What a method can gain against this proxy is bounded by that, and the
# ceiling shows how little of the achievable it is: at the same KL the verifier's tilt gains
# 21 times as much. The proxy is the problem, not any optimizer.
#
# Second, best-of-$n$ is not the optimum here, and it gains *more* gold than the optimum at
# its own KL, with less proxy. There is no contradiction: the optimum maximizes the proxy, not
# the gold, and best-of-$n$, which reads only the order of the RM's scores and not their
# sizes, exploits the RM's largest margins less. Yang et al.'s equivalence is a statement about
# long answers; on four tokens the two differ in both numbers.
#
# Third, the bounds. Up to $\sqrt{\mathrm{KL}} \approx 0.2$ they pin the optimum to the
# printed digits; past 0.3 they open wide. The only bound we have on a pruned answer's score is
# the one read from the RM's last layer (`exact.score_range`), and an answer scored near its top
# could take over a tilted law with a small $\beta$, however unlikely it was. So the cell also
# scores every one of the 22,621 answers of the first ten prompts. Down to $\beta$ = 0.119
# ($\sqrt{\mathrm{KL}}$ = 1.67) the pruned answers move nothing that the tables print. Below it
# they do, and that is over-optimization too: at $\beta$ = 0.05 the optimum's KL moves by
# 0.73 nats, because answers the policy gives less than one chance in $10^8$, which the RM
# happens to score highly, take part of the tilted law. The figure below draws the optimum only
# down to $\beta$ = 0.119.
#
# ## RL that climbs
#
# Now the optimizers that change weights. Before reading any gold curve, one check: **does the
# optimizer raise the number it is handed?** A run that spends KL without raising its proxy
# tells nothing about over-optimization; it only drifts. Four optimizers, each run with the
# leash off ($\beta = 0$, so each travels out along the KL axis as it trains), three seeds
# each:
#
# - **PPO, chapter 5's recipe**, against chapter 4's RM: 64 answers a batch, one per prompt,
#   the score standardized over the batch, a learning rate of $2 \times 10^{-4}$ decayed to 0
#   over 40 iterations (chapter 7's unleashed run).
# - **PPO with a per-prompt baseline**: chapter 6's control, the RM's score minus its score of
#   the reference's greedy answer to the same prompt. Chapter 6 measured that 95% of the RM
#   score's variance in a batch is the prompt's; this takes it out of the advantage.
# - **RLOO** {cite}`ahmadian2024rloo` with 8 answers a prompt (chapter 8): each answer's score
#   against the mean of the other seven, the prompt taken out the same way.
# - **RLOO against the verifier**: the same optimizer handed the truth instead of the RM, to
#   show how much of the gold ceiling this optimizer reaches when the proxy is not the problem.
#
# The last three draw 256 answers a batch and keep a constant learning rate of
# $5 \times 10^{-5}$: with chapter 5's rate, Adam's first steps move every weight by about the
# full rate whatever the signal (chapter 6), and its decay to 0 caps how far a run goes. Each
# run is enumerated exactly at iterations 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48 and 64 (chapter
# 5's recipe at 40 in place of 48 and 64), densest where a curve bends. Every interval below
# is a bootstrap over the 100 prompts and the three seeds, one draw shared by every curve a
# comparison reads. First the proxy.

# %%
NAME = {"ppo-chapter-5": "PPO, chapter 5", "ppo-prompt-baseline":
        "PPO, per-prompt", "rloo": "RLOO", "rloo-verifier":
        "RLOO, verifier"}
R = {name: frontier.rl_arrays(runs) for name, runs in rl.items()}
ITS = {name: runs[0]["iteration"] for name, runs in rl.items()}


def rl_mean(name, key, p, r):
    """Return the mean curve of `key` over the runs r and prompts p (E,)."""
    return R[name][key][r][:, :, p].mean((0, 2))


def read_run(name):
    """Return a statistic of one optimizer's mean curve: at each
    evaluation sqrt(KL), proxy gain, gold gain, the share of the
    optimum's proxy gain at that KL, gold minus the optimum's, and gold
    minus best-of-n's at that KL."""
    def stat(p, r):  # (6, E)
        kl = rl_mean(name, "kl", p, r)
        gain = {k: rl_mean(name, k, p, r) - rl_mean(name, k, p, r)[0]
                for k in ("proxy", "gold")}
        best = {k: at(tp, k, kl, p) - bp[k][0, p].mean()
                for k in ("proxy", "gold")}
        with np.errstate(invalid="ignore", divide="ignore"):
            share = gain["proxy"] / best["proxy"]
        bon_gold = at(bp, "gold", kl, p) - bp["gold"][0, p].mean()
        return np.stack([np.sqrt(kl), gain["proxy"], gain["gold"], share,
                         gain["gold"] - best["gold"],
                         gain["gold"] - bon_gold])
    return frontier.bootstrap(stat, P, len(SEEDS))


read = {name: read_run(name) for name in LENGTH}
print("proxy gain over the start (95% interval), and the share of the")
print("optimum's gain at the same KL")
print("optimizer        it.  sqrt(KL)  proxy gain                  share")
for name in LENGTH:
    (v, lo, hi), its = read[name], ITS[name]
    for e in (1, its.index(8), len(its) - 1):
        print(f"{NAME[name]:<16} {its[e]:>3}  {v[0, e]:>8.3f}  "
              f"{v[1, e]:>+7.3f} [{lo[1, e]:+.3f}, {hi[1, e]:+.3f}]"
              f"{'':>6}{v[3, e]:>5.2f}")
climbs = {name: bool(np.all(read[name][1][1, 1:] > 0)) for name in LENGTH}
runs = [run for runs_of in rl.values() for run in runs_of]
widest = {k: max(max(u - lo for u, lo in zip(run[f"{k}_upper"],
                                             run[f"{k}_lower"]))
                 for run in runs) for k in ("kl", "gold", "proxy")}
print(f"every evaluation of the {len(runs)} runs: pruned mass at most "
      f"{max(max(run['pruned']) for run in runs):.1e};\n  widest bounds: "
      f"KL {widest['kl']:.1e}, gold {widest['gold']:.1e}, proxy "
      f"{widest['proxy']:.1e}")
print_claims([
    ("PPO, per-prompt: the proxy rises at every evaluation",
     climbs["ppo-prompt-baseline"]),
    ("RLOO: the proxy rises at every evaluation", climbs["rloo"]),
    ("chapter 5's recipe: the proxy's interval always holds 0",
     bool(np.all((read["ppo-chapter-5"][1][1, 1:] <= 0)
                              & (read["ppo-chapter-5"][2][1, 1:] >= 0)))),
])

# %% [markdown]
# Chapter 5's recipe fails the check: its proxy's interval holds the start at every
# evaluation, while it travels as far as the others. Whatever its gold does, it is not
# over-optimization; it is drift. The two runs with a baseline per prompt pass: their proxy
# rises from the first iteration on and keeps rising, each step buying a larger share of what
# the optimum buys with the same KL, though neither gets past about half of it. (The pruned
# mass of every evaluation is printed too, with the widest bounds it allows: too small to move
# any digit the tables print.) Now the gold.

# %%
print("gold gain over the start (95% interval), best and last evaluation")
print("optimizer           it.  sqrt(KL)  gold gain                  "
      "vs optimum")
for name in LENGTH:
    v, lo, hi = read[name]
    best = 1 + int(np.argmax(v[2, 1:]))
    for label, e in (("best", best), ("end", v.shape[1] - 1)):
        print(f"{NAME[name]:<16}{label:>5} {ITS[name][e]:>3}  "
              f"{v[0, e]:>8.3f}  {v[2, e]:>+8.4f} [{lo[2, e]:+.4f}, "
              f"{hi[2, e]:+.4f}]  {v[4, e]:>+8.4f}")
oracle = read["rloo-verifier"][0]
reach = oracle[2, -1] / (at(cp, "gold", [oracle[0, -1] ** 2])[0] - g0)
print(f"RLOO against the verifier reaches {reach:.0%} of the ceiling's "
      f"gain at its last KL")
print("gold minus best-of-n's at the same KL, at the last evaluation")
for name in ("rloo", "ppo-prompt-baseline"):
    v, lo, hi = read[name]
    print(f"  {NAME[name]:<16} {v[5, -1]:+.4f} [{lo[5, -1]:+.4f}, "
          f"{hi[5, -1]:+.4f}]")


def holds_0(name, key, evals):
    """Whether the interval of row `key` holds 0 at the evaluations."""
    _, lo, hi = read[name]
    return bool(np.all((lo[key, evals] <= 0) & (hi[key, evals] >= 0)))


def best_of(name):
    return 1 + int(np.argmax(read[name][0][2, 1:]))


ends_lower = {n: bool(read[n][2][2, -1] < 0) for n in LENGTH}
print_claims([
    ("RLOO: the interval of its best gold gain holds 0",
     holds_0("rloo", 2, [best_of("rloo")])),
    ("PPO, per-prompt: the interval of its best gold gain holds 0",
     holds_0("ppo-prompt-baseline", 2, [best_of("ppo-prompt-baseline")])),
    ("both end below the start in gold (interval)",
     ends_lower["rloo"] and ends_lower["ppo-prompt-baseline"]),
    ("both: the optimum's gold at equal KL, but at the last point",
     holds_0("rloo", 4, range(1, len(ITS["rloo"]) - 1))
     and holds_0("ppo-prompt-baseline", 4,
                 range(1, len(ITS["ppo-prompt-baseline"]) - 1))),
    ("chapter 5's recipe: below the start in gold from iteration 1",
     bool(np.all(read["ppo-chapter-5"][2][2, 1:] < 0))),
    ("RLOO, verifier: above the start in gold from iteration 2",
     bool(np.all(read["rloo-verifier"][1][2, 2:] > 0))),
    ("at their last KL both have less gold than best-of-n (interval)",
     bool(read["rloo"][2][5, -1] < 0
          and read["ppo-prompt-baseline"][2][5, -1] < 0)),
])


# %% [markdown]
# The optimizers that climb the proxy do what the optimum does with the gold: a few thousandths
# gained near $\sqrt{\mathrm{KL}} = 0.3$, too little for three seeds to tell from 0, then a loss
# that grows with the distance. At every evaluation but the last their gold is within its
# interval of the optimum's at the same KL, although they buy only part of its proxy: against
# this RM, optimizing well or badly makes little difference to the gold, because even the best
# optimization has almost nothing to find. Chapter 5's recipe loses gold from its first step,
# and now we can say why: it does not optimize the proxy at all, it drifts. That is the lesson
# of this section for any Goodhart curve: **check that the optimizer moves the proxy before
# reading the gold**. The oracle shows the other side: the same RLOO handed the verifier climbs
# steadily in gold, though still far below the ceiling at its KL.
#
# ## DPO on the same pairs
#
# DPO (chapter 9) has no proxy to climb: it learns from the pairs themselves, the same 12,800
# that chapter 4's RM learnt from. Rafailov et al. {cite}`rafailov2024scaling` find that DPO and
# its kin over-optimize all the same: past some KL the true quality falls as training goes on,
# often before one pass over the data is complete. The study's cell above made these runs too,
# beside the others: chapter 9's DPO ($\beta = 1.25$) from the same start, three seeds, for
# three passes over the pairs (600 steps of 64 pairs), with a constant learning rate (chapter
# 9's initial $10^{-4}$, so that the first $k$ steps of the run are a run of $k$ steps), the
# policy enumerated exactly at steps 1, 2, 4, 8 and on, and at every quarter of a pass. The
# cell below reads them.

# %%
R["dpo"], ITS["dpo"] = frontier.rl_arrays(dpo_runs), dpo_runs[0]["step"]
NAME["dpo"] = "DPO, beta 1.25"
read["dpo"] = read_run("dpo")
v, lo, hi = read["dpo"]
passes = dpo_runs[0]["epoch"]
print("DPO: gold gain over the start (95% interval), beside the optimum's")
print("step  pass  sqrt(KL)  gold gain                  vs optimum  proxy")
for e, step in enumerate(ITS["dpo"]):
    if step in (8, 32, 50, 100, 150, 200, 400, 600):
        print(f"{step:>4}  {passes[e]:>4.2f}  {v[0, e]:>8.3f}  "
              f"{v[2, e]:>+8.4f} [{lo[2, e]:+.4f}, {hi[2, e]:+.4f}]  "
              f"{v[4, e]:>+10.4f}  {v[1, e]:>+6.3f}")
first = [e for e, step in enumerate(ITS["dpo"]) if 0 < step <= 200]
print_claims([
    ("DPO: above the start in gold at every evaluation from step 8",
     all(lo[2, e] > 0 for e, k in enumerate(ITS["dpo"]) if k >= 8)),
    ("DPO: its best gold of the first pass is at the pass's end",
     first[int(np.argmax(v[2, first]))] == ITS["dpo"].index(200)),
    ("DPO: more gold than the optimum at its last KL",
     bool(lo[4, -1] > 0)),
])


# %% tags=["hide-input"]
STYLE = {"ppo-chapter-5": (YELLOW, "s"), "ppo-prompt-baseline": (BLUE, "^"),
         "rloo": (ORANGE, "o"), "rloo-verifier": (GREEN, "D"),
         "dpo": (PINK, "v")}


def draw_frontier(narrow=False):
    """Return gold gain and proxy gain against sqrt(KL): the ceiling, the
    optimum, best-of-n and the four optimizers' mean curves."""
    fig, axes = plt.subplots(2 if narrow else 1, 1 if narrow else 2,
                             figsize=(3.6, 5.6) if narrow else (6.8, 3.2),
                             layout="constrained", sharex=True)
    d_opt, d_bon = np.sqrt(tilt["kl"]), np.sqrt(book["kl"])
    ceiling_kl = np.array(curves["book"]["ceiling"]["kl"])
    ceiling_gold = np.array(curves["book"]["ceiling"]["gold"])
    axes[0].plot(np.sqrt(ceiling_kl), ceiling_gold - g0, color="grey",
                 lw=1.2, ls="--", label="ceiling (verifier's tilt)")
    exact_part = slice(0, last + 1)  # the betas checked with nothing pruned
    for ax, key, base in ((axes[0], "gold", g0), (axes[1], "proxy", p0)):
        ax.plot(d_opt[exact_part], tilt[key][exact_part] - base,
                color="black", lw=1.5,
                label="optimum (RM's tilt)" if key == "gold" else None)
        ax.plot(d_bon, book[key] - base, color="black", lw=1.0, ls=":",
                label="best-of-n" if key == "gold" else None)
        for name in STYLE:
            color, marker = STYLE[name]
            v = read[name][0]
            ax.plot(v[0], v[1 if key == "proxy" else 2], color=color,
                    marker=marker, ms=3, lw=1.0,
                    label=NAME[name] if key == "gold" else None)
        ax.axhline(0, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("√KL to the start (√nats, whole answers)")
        ax.set_xlim(0, 1.3)
    axes[0].set_ylim(-0.1, 0.14)
    axes[1].set_ylim(-0.05, 0.8)
    axes[0].set_ylabel("gold gain over the start")
    axes[1].set_ylabel("proxy gain over the start")
    # the legend in the proxy panel's empty upper left, clear of every line
    axes[1].legend(*axes[0].get_legend_handles_labels(), frameon=False,
                   fontsize=7, loc="upper left")
    return fig


show_figure(
    draw_frontier,
    alt="Two panels against the square root of the exact KL, up to 1.3. "
        "Gold gain: the ceiling rises steeply off the top; the optimum and "
        "best-of-n rise a little, peak below 0.45 and fall; RLOO and PPO "
        "with a per-prompt baseline follow the optimum closely and fall; "
        "chapter 5's PPO falls from its first point; RLOO against the "
        "verifier rises steadily. Proxy gain: the optimum rises fastest, "
        "best-of-n next, RLOO and the per-prompt PPO rise at about half "
        "the optimum's rate, chapter 5's PPO and the verifier's RLOO "
        "barely rise. DPO rises in gold above every other method but "
        "the ceiling, and barely in proxy.",
    caption="Every method on one axis, against chapter 4's RM, exactly: "
            "the gold ceiling (no policy gets above it), the optimum "
            "(the most proxy for a KL), best-of-n, and the mean of three "
            "runs of each optimizer and of DPO. The optimizers that climb "
            "the proxy follow the optimum's gold; chapter 5's, which does "
            "not climb it, only drifts; DPO, which learns from the pairs "
            "instead of the RM, climbs in gold.",
)

# %% [markdown]
# DPO does not over-optimize here, and it gains more gold at each KL than any method in the
# figure but the ceiling. Its gold is above the start from step 8 on, the best point of its first
# pass is that pass's end, and the second and third passes add more (+0.0837 after one pass,
# +0.1174 after three, at $\sqrt{\mathrm{KL}}$ = 0.516), while the RM's score, which it never
# sees, barely moves. The reason is in the pairs: their chosen answer is always right and their
# rejected one always wrong, so the preferences DPO fits never disagree with the gold, and
# pushing them further only pushes the truth. Rafailov et al.'s preferences are human or
# model judgements that their gold judge does not always share; pairs of that kind (a share of
# them flipped, say) are one thing that could let DPO's curve turn over here. A looser leash is
# another: the section on proxies made from the policy's own answers runs DPO at $\beta$ = 0.1. The same pairs taught the RM
# far less (chapter 9 made the same comparison at matched KL): the proxy is a lossy summary of
# its data, and every method that optimizes the proxy inherits its losses.
#
# ## Gao et al.'s forms
#
# Gao et al. draw every run against $d = \sqrt{\mathrm{KL}}$ (chapter 7 explained the square
# root), and fit the gold gain over the start with one form for each method
# {cite}`gao2023scaling`:
#
# $$
# R_{\text{bon}}(d) = d\,(\alpha_{\text{bon}} - \beta_{\text{bon}}\, d),
# \qquad
# R_{\text{RL}}(d) = d\,(\alpha_{\text{RL}} - \beta_{\text{RL}} \log d).
# $$
#
# (Their $\beta$s are fitted constants, not the leash.) Both forms are linear in $\alpha$ and
# $\beta$, so a least-squares fit is one line of linear algebra (`gao.fit_gao`). Two cautions
# before reading any fit. RL's form rises from the start with an unbounded slope whenever
# $\beta_{\text{RL}} > 0$ (its slope, $\alpha - \beta \log d - \beta$, grows without limit as
# $d \to 0$), so a fitted rise near the start comes from the form, not from the data. And Gao et
# al. fit best-of-$n$ against the analytic KL, $\log n - (n-1)/n$; we fit it against both. The
# cell fits every curve up to $d = 1.3$, where the RL runs end (for RL, the mean curve of the
# three seeds), and gives each coefficient a 95% interval by refitting on bootstrap draws of the
# prompts and seeds.

# %%
D_MAX = 1.3  # fit every curve up to where the RL runs end


def gains(c, p):
    """Return a no-training curve's (kl, gold gain), averaged over p."""
    kl = c["kl"][:, p].mean(1)
    return kl, c["gold"][:, p].mean(1) - bp["gold"][0, p].mean()


def analytic_gains(p):
    return np.array(bon["book"]["analytic"]), gains(bp, p)[1]


def rl_gains(name):
    def data(p, r):
        g = rl_mean(name, "gold", p, r)
        return rl_mean(name, "kl", p, r), g - g[0]
    return data


FITS = {"best-of-n, exact KL": ("bon", lambda p, r: gains(bp, p)),
        "best-of-n, analytic": ("bon", lambda p, r: analytic_gains(p)),
        "optimum": ("rl", lambda p, r: gains(tp, p)),
        "RLOO": ("rl", rl_gains("rloo")),
        "PPO, per-prompt": ("rl", rl_gains("ppo-prompt-baseline"))}


def fit_stat(form, data):
    def stat(p, r):
        kl, gain = data(p, r)
        near = (gains(bp, p)[0] if form == "bon" else kl) <= D_MAX ** 2
        fit = gao.fit_gao(kl[near], gain[near], form)
        return [fit["alpha"], fit["beta"], fit["r2"]]
    return stat


print("fit                  alpha                    beta"
      "                      R^2")
fits = {}
for label, (form, data) in FITS.items():
    v, lo, hi = frontier.bootstrap(fit_stat(form, data), P, len(SEEDS),
                                   reps=500)
    fits[label] = v
    print(f"{label:<20} {v[0]:>+6.3f} [{lo[0]:+.3f}, {hi[0]:+.3f}]  "
          f"{v[1]:>+6.3f} [{lo[1]:+.3f}, {hi[1]:+.3f}]  {v[2]:>5.2f}")
print(f"measured gold peaks: best-of-n at d = {top['sqrt_kl']:.3f} "
      f"({top['gain']:+.4f}),\n  the optimum at d = {t_d:.3f} "
      f"({t_gain:+.4f})")
for label in ("best-of-n, exact KL", "optimum"):
    a, b = fits[label][:2]
    form = FITS[label][0]
    d_top = a / (2 * b) if form == "bon" else np.exp(a / b - 1)
    gain_top = d_top * (a - b * (d_top if form == "bon" else np.log(d_top)))
    print(f"  {label}'s fitted form peaks at d = {d_top:.3f} "
          f"({gain_top:+.4f})")

# %% [markdown]
# The forms fit, and say little the curves do not. Best-of-$n$'s fits its curve closely up to
# $d = 1.3$ on either KL axis ($R^2$ near 1 with only the first eight or so values of $n$ in
# range), and its fitted peak lands near the measured one; the analytic axis, which stretches
# the KL, lowers both coefficients a little, within their intervals. For the optimum and the
# two optimizers that climb, the fits give $\alpha_{\text{RL}}$ at or below 0 and
# $\beta_{\text{RL}} > 0$: a form that rises for a short stretch and then falls. Whether the rise
# is there is a question for the measured curves above, not for the fit, since the form must
# rise at the start. What the coefficients do show is that the optimum and the two optimizers
# fall alike: their intervals overlap.
#
# Gao et al. find RL slower than best-of-$n$ as a function of the KL, both to gain gold and to
# lose it, and read that as a sign that the KL is a poor yardstick for comparing methods
# {cite}`gao2023scaling`. Here, at their last evaluation, the two climbing optimizers have less
# gold than best-of-$n$ at the same KL, but the intervals hold 0 (the claim above does not
# hold): with three seeds this toy cannot order them. One asymmetry belongs in any such
# comparison: best-of-$n$ and the optimum choose among the evaluation prompts' own answers,
# while RL trains on the training prompts and is measured on the evaluation prompts, so part of
# any gap between them is generalization.
#
# ## How the proxy's quality moves the peak
#
# Gao et al. trained proxy RMs of several sizes and on several amounts of data, and found that a
# better proxy puts the gold peak higher and further out. Our RMs are all one size; what we can
# vary is the data. Five more proxies, trained like chapter 4's RM (100 steps of 128 pairs) on
# fixed sets of the book's pairs: the first 200, 800, 3,200 and 12,800 of them (each pair seen
# many times in the smaller sets), and 12,800 pairs of which half have a near-miss as the rejected
# answer (with 400 steps: chapter 4 showed that with 100 such an RM has not yet learned even what
# the book's RM knows). Each gets a best-of-$n$ curve and its optimum's, from the same
# enumeration of the policy; the RL runs above are against chapter 4's RM only (the next
# section runs RL against proxies of another kind).

# %%
print("             the proxy's accuracy   best-of-n's gold peak")
print("proxy        pairs    near-misses   gold       n   sqrt(KL)")
for name in PROXY_NAMES:
    report = (rm_metrics if name == "book"
              else overopt.load_proxy(name, PROGRESS)[1])
    t = gao.peak(curve_of(name)["kl"], bon[name]["gold"])
    print(f"{name:<12} {report['pair_accuracy']:.3f}    "
          f"{report['near_miss_accuracy']:>11.3f}   {t['gold']:.4f}  "
          f"{NS[t['index']]:>4}   {t['sqrt_kl']:>8.3f}")
print("\nthe optimum's gold peak (the RM's tilt): gain, sqrt(KL)")
for name in PROXY_NAMES:
    c = curves[name]["tilt"]
    gain = np.array(c["gold"]) - g0
    i = int(gain.argmax())
    print(f"{name:<12} {gain[i]:>+8.4f}  {np.sqrt(c['kl'][i]):.3f}")
peaks = {n: gao.peak(curve_of(n)["kl"], bon[n]["gold"])["gold"]
         for n in PROXY_NAMES}
sizes = ("200", "800", "3200", "12800")


def ranks(x):
    return np.argsort(np.argsort(x))


def spearman(x, y):
    """Return the rank correlation of x and y (no ties among them)."""
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


near_miss = {n: (rm_metrics if n == "book" else
                 overopt.load_proxy(n, PROGRESS)[1])["near_miss_accuracy"]
             for n in PROXY_NAMES}
peak_of = [peaks[n] for n in sizes]
rho_size = spearman([200, 800, 3200, 12800], peak_of)
rho_near = spearman([near_miss[n] for n in sizes], peak_of)
rho_all = spearman([near_miss[n] for n in PROXY_NAMES],
                   [peaks[n] for n in PROXY_NAMES])
print(f"\nrank correlation with the best-of-n peak, the four sized "
      f"proxies:\n  size {rho_size:+.1f}, near-miss accuracy "
      f"{rho_near:+.1f}; all six, near-miss accuracy {rho_all:+.2f}")
print_claims([
    ("the best-of-n peak rises with every step up in pairs",
     all(peaks[a] < peaks[b] for a, b in zip(sizes, sizes[1:]))),
    ("the near-miss proxy has the highest best-of-n peak",
     max(peaks, key=peaks.get) == "near-miss"),
    ("the near-miss proxy's peak is at a larger n than the book RM's",
     gao.peak(curve_of("near-miss")["kl"], bon["near-miss"]["gold"])["index"]
     > top["index"]),
])


# %% tags=["hide-input"]
def draw_proxies(narrow=False):
    """Return best-of-n's gold against sqrt(KL) for every proxy."""
    fig, ax = plt.subplots(figsize=(3.6, 3.0) if narrow else (6.8, 3.0),
                           layout="constrained")
    colors = dict(zip(PROXY_NAMES, ("black", SKY, GREEN, YELLOW, PINK,
                                    ORANGE)))
    for name in PROXY_NAMES:
        label = ("chapter 4's RM" if name == "book"
                 else "near-miss pairs" if name == "near-miss"
                 else f"{int(name):,} pairs")
        wide = name in ("book", "near-miss")
        ax.plot(np.sqrt(curve_of(name)["kl"]), bon[name]["gold"],
                color=colors[name], lw=1.5 if wide else 1.0, label=label)
    ax.set_xlabel("√KL to the start (√nats, whole answers)")
    ax.set_ylabel("gold: verifier accuracy\nof best-of-n")
    ax.legend(frameon=False, fontsize=7)
    return fig


show_figure(
    draw_proxies,
    alt="Six best-of-n gold curves against the square root of the exact KL, "
        "one per proxy. All start at the same gold; each rises a little and "
        "falls. The near-miss proxy's curve peaks highest and furthest out; "
        "the curves of the proxies trained on 200 to 12,800 pairs peak low "
        "and are not in the order of their data.",
    caption="Best-of-n's gold against distance for six proxies. The proxy "
            "with near-misses in its data peaks highest and furthest out, "
            "as Gao et al.'s better proxies do; more pairs of the book's "
            "kind do not, in this toy, make a better proxy in any steady "
            "way.",
)

# %% [markdown]
# Read the table proxy by proxy. The proxy with near-misses in its data knows the truth from its
# neighbours best (its near-miss accuracy, 0.667, is the table's highest), and its best-of-$n$
# curve climbs furthest: its peak is the highest, 0.2898 against the start's 0.2206, and lies
# furthest out, at $n$ = 4 and $\sqrt{\mathrm{KL}}$ = 0.758. Its optimum gains far more than any
# other proxy's, +0.0777 against the book RM's +0.0084. That is Gao et al.'s pattern, a better
# proxy peaking higher and later. But this proxy differs from the book's in two things at once,
# its data and its steps (400 against 100), so the table cannot say which of the two did it.
#
# More pairs of the book's kind do not show the pattern in any steady way: the peaks of the 200-
# to 12,800-pair proxies do not rise with every step up in data (the claim above does not
# hold). Among those four, the peak follows the near-miss accuracy (rank correlation +0.8) more
# closely than the size (+0.4), and over all six proxies the near-miss accuracy's correlation is
# +0.77; with four or six proxies that is suggestive only. Two more reasons to read no law into
# the sizes: there is one RM per size, so the table cannot tell the data from the luck of one
# training run, and the "12800" proxy is nearly chapter 4's RM trained again (the same pairs and
# the same first weights; it differs in drawing its batches with replacement), so the two
# differ only by training noise: a best-of-$n$ peak of 0.2545 against 0.2475, of the size of the
# whole sweep's range. What the rejected answers of these sets are, random numbers rather than
# the policy's own near-misses, is the likelier story, and the next step is proxies trained as
# Gao et al. trained theirs, on the policy's own answers.

# %% [markdown]
# ## Proxies made as Gao et al. made theirs
#
# Gao et al. did not train their proxies on pairs like ours. Theirs learnt from comparisons of
# the initial policy's own answers, labelled by the gold RM {cite}`gao2023scaling`: the proxy
# learns to tell apart the very answers that best-of-$n$ and RL will choose among. Ours learnt
# from a right answer against a random wrong number, answers the policy rarely gives. So the
# cell trains proxies the first way (`onpolicy_proxies`): for prompts drawn from the training
# set, two answers of the SFT policy at temperature 0.7; when exactly one is right, a pair, the
# right one chosen. (When both are right or both wrong, the 0/1 verifier has no preference to
# give, and the prompt is skipped.) Three sizes, 800, 3,200 and 12,800 such pairs, each the
# beginning of the next, and three seeds of each (the first weights and the order of the
# batches). Each proxy sees each of its pairs 8 times, in steps of 256 pairs: 25, 100 and 400
# steps for the three sizes, so a larger set also gets more steps. Trained much longer, a small
# set is learnt by heart and no better for it, and the weights come out different under
# torch's other kernel set, so this chapter's digits would depend on the CPU; the module's
# notes give what was measured. As the contrast, the book's kind of proxy at the same
# sizes, trained as above (100 steps of 128 pairs), also with three seeds (seed 0 is the proxy
# of the last section). Each proxy is read as chapter 4's RM was: best-of-$n$, the optimum and
# the ceiling, from one enumeration of the policy. The table gives each proxy's accuracy on
# held-out pairs of both kinds (the policy's own answers to the evaluation prompts, and the
# book's near-misses), and the peak of each curve's gold with a 95% interval over prompts and
# seeds.

# %%
KINDS, SIZES, RM_SEEDS = onpolicy.KINDS, onpolicy.SIZES, onpolicy.SEEDS
SURE = 0.01  # the optimum is read where its gold's bounds are this narrow


for size in SIZES:  # the last section's proxies are the seed 0 of their kind
    made["off-policy", size, 0] = {
        **curves[str(size)],
        "rm": onpolicy.job_proxy("off-policy", size, 0)[1]}

arrays = {(k, n, s): {m: frontier.curve_arrays(made[k, n, s][m])
                      for m in ("bon", "tilt")}
          for k in KINDS for n in SIZES for s in RM_SEEDS}
reports = {key: made[key]["rm"] for key in arrays}


def sure_end(key):
    """How many betas of a proxy's optimum to read: down to 0.119 and
    while the gold's bounds are at most SURE wide."""
    t = made[key]["tilt"]
    width = np.array(t["gold_upper"]) - np.array(t["gold_lower"])
    return min(TILT_END, int(np.argmax(width > SURE)) if np.any(
        width > SURE) else len(width))


END = {key: {"bon": len(NS), "tilt": sure_end(key)} for key in arrays}


def peak_of(key, method, p):
    """One proxy's gold peak on prompts p: gain over the start, sqrt(KL),
    and the fall from the peak to the curve's last point read."""
    a, end = arrays[key][method], END[key][method]
    gold = a["gold"][:end, p].mean(1)
    i = int(gold.argmax())
    return [gold[i] - bp["gold"][0, p].mean(),
            np.sqrt(max(a["kl"][i, p].mean(), 0.0)), gold[i] - gold[-1]]


def peaks_stat(p, r):
    """For every kind, size and method: the seeds' mean of peak_of."""
    return np.concatenate([
        np.mean([peak_of((k, n, RM_SEEDS[j]), m, p) for j in r], axis=0)
        for k in KINDS for n in SIZES for m in ("bon", "tilt")])


pk, pk_lo, pk_hi = frontier.bootstrap(peaks_stat, P, len(RM_SEEDS),
                                      reps=500)
ROWS = [(k, n, m) for k in KINDS for n in SIZES for m in ("bon", "tilt")]
SHORT = {"on-policy": "on", "off-policy": "off"}


def row(k, n, m):
    return 3 * ROWS.index((k, n, m))


print(f"on-policy proxies: {onpolicy.EPOCHS} passes over the pairs, "
      f"{onpolicy.BATCH_SIZE} pairs a step:\n  "
      + ", ".join(f"{onpolicy.train_steps(n)} steps ({n:,} pairs)"
                  for n in SIZES))
print("held-out accuracy, mean of the seeds: on the policy's own answers "
      "to the\neval prompts, and on the book's near-misses")
print("proxy         own  near-miss")
for k in KINDS:
    for n in SIZES:
        own, near = (np.mean([reports[k, n, s][name] for s in RM_SEEDS])
                     for name in ("onpolicy_accuracy", "near_miss_accuracy"))
        print(f"{SHORT[k]:<3} {n:>6,}  {own:.3f}  {near:.3f}")
print("\nthe gold peak: gain over the start (95% interval), and sqrt(KL)")
print("proxy       best-of-n                   optimum")
for k in KINDS:
    for n in SIZES:
        b, t = row(k, n, "bon"), row(k, n, "tilt")
        print(f"{SHORT[k]:<3} {n:>6,}  "
              f"{pk[b]:+.3f} [{pk_lo[b]:+.3f}, {pk_hi[b]:+.3f}]  "
              f"{pk[b + 1]:.2f}  "
              f"{pk[t]:+.3f} [{pk_lo[t]:+.3f}, {pk_hi[t]:+.3f}]  "
              f"{pk[t + 1]:.2f}")
smallest = {(k, n): max(BETAS[END[k, n, s]["tilt"] - 1] for s in RM_SEEDS)
            for k in KINDS for n in SIZES}
print(f"the optimum is read down to the beta where its gold's bounds pass "
      f"{SURE}:")
for k in KINDS:
    print(f"  {k}: " + ", ".join(f"{smallest[k, n]:.3g} ({n:,} pairs)"
                                 for n in SIZES))


def on_minus_off(p, r):
    """On-policy minus off-policy, best-of-n's peak gain, per size; then
    each on-policy step up in pairs."""
    s = peaks_stat(p, r)
    on = [s[row("on-policy", n, "bon")] for n in SIZES]
    off = [s[row("off-policy", n, "bon")] for n in SIZES]
    return [a - b for a, b in zip(on, off)] + list(np.diff(on))


d_v, d_lo, d_hi = frontier.bootstrap(on_minus_off, P, len(RM_SEEDS),
                                     reps=500)
print("\nbest-of-n's peak gain, on-policy minus off-policy (95% interval)")
for j, n in enumerate(SIZES):
    print(f"  {n:>6,} pairs  {d_v[j]:+.3f} [{d_lo[j]:+.3f}, {d_hi[j]:+.3f}]")
print("on-policy, each step up in pairs")
steps_up = list(zip(SIZES, SIZES[1:]))
for j, (a, b) in enumerate(steps_up):
    v = len(SIZES) + j
    print(f"  {a:>6,} -> {b:,}  {d_v[v]:+.3f} [{d_lo[v]:+.3f}, "
          f"{d_hi[v]:+.3f}]")
claims = [(f"{n:,} pairs: the on-policy best-of-n peak is the higher",
           d_lo[j] > 0) for j, n in enumerate(SIZES)]
claims += [(f"on-policy, {a:,} -> {b:,} pairs raises best-of-n's peak",
            d_lo[len(SIZES) + j] > 0) for j, (a, b) in enumerate(steps_up)]
for n in SIZES[1:]:
    b, t = row("on-policy", n, "bon"), row("on-policy", n, "tilt")
    claims += [(f"on-policy, {n:,}: best-of-n's gold falls after its peak",
                pk_lo[b + 2] > 0),
               (f"on-policy, {n:,}: the optimum's gold falls after its peak",
                pk_lo[t + 2] > 0)]
top_on = row("on-policy", SIZES[-1], "bon")
ceiling_on = at(cp, "gold", [pk[top_on + 1] ** 2])[0] - g0
book_share = top["gain"] / (at(cp, "gold", [top["kl"]])[0] - g0)
print(f"\nthe ceiling at the best-of-n peak of the {SIZES[-1]:,}-pair "
      f"on-policy\nproxies: {ceiling_on:+.3f}; best-of-n reaches "
      f"{pk[top_on] / ceiling_on:.0%} of it (chapter 4's RM: "
      f"{book_share:.0%})")
print("\neach claim reads its 95% interval over prompts and seeds")
print_claims(claims)


# %% [markdown]
# And RL? The study also ran the two optimizers that climbed chapter 4's RM, RLOO and PPO with a
# per-prompt baseline, against the 12,800-pair on-policy proxies: three runs each, run $s$
# against the proxy of seed $s$, with the same settings and the same exact evaluations as
# before. First the check that they move the proxy; then their gold, against best-of-$n$ on the
# same proxies at the same KL.

# %%
BIG = [("on-policy", SIZES[-1], s) for s in RM_SEEDS]
RM_R = {name: frontier.rl_arrays(runs) for name, runs in rl_made.items()}
RM_ITS = rl_made["rloo"][0]["iteration"]


def read_made(name):
    """At each evaluation: sqrt(KL), proxy gain, gold gain, gold minus
    best-of-n's on the same proxies at that KL; then the best gold gain
    and its fall to the last evaluation."""
    def stat(p, r):
        mean = {k: RM_R[name][k][r][:, :, p].mean((0, 2))
                for k in ("kl", "proxy", "gold")}
        gold = mean["gold"] - mean["gold"][0]
        bon_gold = np.mean([frontier.at_kl(
            arrays[BIG[j]]["bon"]["kl"][:, p].mean(1),
            arrays[BIG[j]]["bon"]["gold"][:, p].mean(1), mean["kl"])
            for j in r], axis=0)
        opt_gold = np.mean([frontier.at_kl(
            arrays[BIG[j]]["tilt"]["kl"][:END[BIG[j]]["tilt"], p].mean(1),
            arrays[BIG[j]]["tilt"]["gold"][:END[BIG[j]]["tilt"], p].mean(1),
            mean["kl"]) for j in r], axis=0)
        rows = np.stack([np.sqrt(mean["kl"]),
                         mean["proxy"] - mean["proxy"][0], gold,
                         mean["gold"] - bon_gold, mean["gold"] - opt_gold])
        return np.concatenate([rows.ravel(), [gold.max(),
                                              gold.max() - gold[-1]]])
    v, lo, hi = frontier.bootstrap(stat, P, len(SEEDS), reps=500)
    e = len(RM_ITS)
    return (v[:-2].reshape(5, e), lo[:-2].reshape(5, e),
            hi[:-2].reshape(5, e), (v[-2:], lo[-2:], hi[-2:]))


read_big = {name: read_made(name) for name in rl_made}


def ival(name, k, e):
    """Row k of read_made(name) at evaluation e: the value and its 95%
    interval."""
    v, lo, hi, _ = read_big[name]
    return f"{v[k, e]:+.3f} [{lo[k, e]:+.3f}, {hi[k, e]:+.3f}]"


print("against the 12,800-pair on-policy proxies: gain over the start "
      "(95%)")
print("optimizer        it. sqrt(KL)  proxy gain              gold gain")
for name in rl_made:
    v = read_big[name][0]
    for e, it in enumerate(RM_ITS):
        if it in (1, 4, 16, 32, 64):
            print(f"{NAME[name]:<15} {it:>3} {v[0, e]:>8.3f}  "
                  f"{ival(name, 1, e)} {ival(name, 2, e)}")
print("\ngold minus best-of-n's and the optimum's on the same proxies at "
      "the same KL")
print("optimizer        it.  vs best-of-n              vs the optimum")
for name in rl_made:
    v = read_big[name][0]
    for e, it in enumerate(RM_ITS):
        if it in (4, 16, 32, 64):
            vs_opt = ("beyond its bounds" if np.isnan(v[4, e])
                      else ival(name, 4, e))
            print(f"{NAME[name]:<15} {it:>4}  {ival(name, 3, e)}  {vs_opt}")
claims = []
for name in rl_made:
    v, lo, hi, (pv, plo, phi) = read_big[name]
    print(f"{NAME[name]}: best gold gain {pv[0]:+.3f} [{plo[0]:+.3f}, "
          f"{phi[0]:+.3f}],\n  then falls by {pv[1]:+.3f} [{plo[1]:+.3f}, "
          f"{phi[1]:+.3f}]")
    claims += [(f"{NAME[name]}: the proxy rises at every evaluation",
                bool(np.all(lo[1, 1:] > 0))),
               (f"{NAME[name]}: its best gold is above the start",
                plo[0] > 0),
               (f"{NAME[name]}: its gold falls after its best", plo[1] > 0)]
print_claims(claims)


# %% [markdown]
# Both move the proxy, though not at once. At the first evaluation neither rise is clear of 0
# (RLOO's interval reaches -0.000, PPO's -0.003), and PPO's is not yet at iteration 4 either;
# from iteration 16 on both are well above the start, and they reach +0.789 and +0.756 by
# iteration 64. Their gold does not follow. RLOO's best gold gain is +0.011 [+0.002, +0.024],
# PPO's +0.009 [+0.001, +0.024]; then both fall, by +0.050 and +0.061, and PPO ends below the
# start, -0.052 [-0.096, -0.008]. Against the very proxies that carry best-of-$n$ to +0.232,
# RL is 0.033 and 0.039 below best-of-$n$ at the same KL by iteration 4, and 0.239 and 0.231
# below it at the end; where the optimum's bounds reach, it is as far below the optimum (0.103
# and 0.125 at iteration 16). So the optimizers we checked to climb find, in the same
# distance, policies that a good proxy overrates: the rise Gao et al. draw for RL is there, but
# it is a hundredth of gold at most, and RL's gold falls where best-of-$n$'s still rises, while
# Gao et al. found RL the slower of the two to gain gold and to lose it.
# One likely reason, not tested here: best-of-$n$ and the optimum only reweight the answers
# the policy already gives on each prompt, the answers these proxies were trained on, while a
# gradient step moves every prompt's answers at once, towards whatever the proxy rewards on
# the training prompts, wherever that leads.
#
# And DPO, which needs no proxy? The last DPO section trained it on the book's pairs, whose
# rejected answers are random wrong numbers. The study also ran chapter 9's DPO on each size
# of the policy's own pairs, the very pairs each on-policy proxy learnt from, for three passes
# as before: at chapter 9's $\beta$ = 1.25, and at 0.1, the paper's usual value and the
# default of TRL's `DPOConfig` (`trl/trainer/dpo_config.py` in TRL 1.12.0). One run of each
# (seed 0), so the intervals below are over the prompts only and say nothing of another seed.
# Each run's gold is set beside best-of-$n$'s against the proxy of the same pairs and seed, at
# the same KL.

# %%
LOOSE, TIGHT = min(DPO_MADE_BETAS), max(DPO_MADE_BETAS)


def read_dpo_made(key):
    """One DPO run on the policy's own pairs: at each evaluation sqrt(KL),
    gold gain, and gold minus best-of-n's against the proxy of the same
    pairs (seed 0) at that KL; then its best gold gain, the fall from it
    to the end, and the gold gained from the first pass's end to the
    last."""
    run, size = dpo_made[key], key[1]
    a = frontier.rl_arrays([run])
    end1 = run["step"].index(run["steps_per_epoch"])
    b = arrays["on-policy", size, 0]["bon"]

    def stat(p, r):
        kl = a["kl"][0][:, p].mean(1)
        gain = a["gold"][0][:, p].mean(1) - a["gold"][0][0, p].mean()
        bon_gain = frontier.at_kl(b["kl"][:, p].mean(1), b["gold"][:, p]
                                  .mean(1), kl) - b["gold"][0, p].mean()
        return np.concatenate([np.sqrt(kl), gain, gain - bon_gain,
                               [gain.max(), gain.max() - gain[-1],
                                gain[-1] - gain[end1]]])
    v, lo, hi = frontier.bootstrap(stat, P, 1, reps=500)
    e = len(run["step"])
    return {"rows": [x[:3 * e].reshape(3, e) for x in (v, lo, hi)],
            "end": [x[3 * e:] for x in (v, lo, hi)]}


read_dm = {key: read_dpo_made(key) for key in dpo_made}


def dm_ival(x, k, e=None):
    """A value of read_dpo_made and its 95% interval: row k at evaluation
    e, or summary k when e is None."""
    part = [r[k, e] for r in x["rows"]] if e is not None else [
        r[k] for r in x["end"]]
    return f"{part[0]:+.3f} [{part[1]:+.3f}, {part[2]:+.3f}]"


last_gold = {key: np.array(run["per_prompt"][-1]["gold"])
             for key, run in dpo_made.items()}  # (P,) at the run's end


def loose_minus_tight(p, r):
    """Per size: the loose beta's gold at its end minus the tight one's."""
    return [last_gold[LOOSE, n][p].mean() - last_gold[TIGHT, n][p].mean()
            for n in SIZES]


print("DPO on the policy's own pairs, seed 0 (95% intervals over prompts)")
print("beta  pairs  best gold gain          sqrt(KL) pass  then falls by")
claims = []
for (beta, size), x in read_dm.items():
    v, run = x["rows"][0], dpo_made[beta, size]
    i = int(np.argmax(v[1]))
    print(f"{beta:<5g} {size:>6,}  {dm_ival(x, 0)}  {v[0, i]:>6.2f} "
          f"{run['epoch'][i]:>5.2f}  {dm_ival(x, 1)}")
    if beta == LOOSE:
        claims.append((f"beta {beta:g}, {size:,} pairs: gold falls after "
                       "its best", x["end"][1][1] > 0))
print(f"\nbeta {TIGHT:g}: the gold gained from the first pass's end to the "
      "third's, and\ngold minus best-of-n's against the proxy of the same "
      "pairs, at the\nrun's last KL")
for size in SIZES:
    x = read_dm[TIGHT, size]
    print(f"{size:>6,} pairs  {dm_ival(x, 2)}  {dm_ival(x, 2, -1)}")
    claims += [(f"beta {TIGHT:g}, {size:,} pairs: gold still rising in "
                "passes 2 and 3", x["end"][1][2] > 0),
               (f"beta {TIGHT:g}, {size:,} pairs: more gold than best-of-n "
                "at its end", x["rows"][1][2, -1] > 0)]
d_v, d_lo, d_hi = frontier.bootstrap(loose_minus_tight, P, 1, reps=500)
print(f"\nat the end of three passes, beta {LOOSE:g} against {TIGHT:g}: "
      "sqrt(KL), and the\ngold difference")
for j, size in enumerate(SIZES):
    kl = [read_dm[b, size]["rows"][0][0, -1] for b in (LOOSE, TIGHT)]
    print(f"{size:>6,} pairs  sqrt(KL) {kl[0]:.2f} against {kl[1]:.2f}  "
          f"gold {d_v[j]:+.3f} [{d_lo[j]:+.3f}, {d_hi[j]:+.3f}]")
    claims.append((f"{size:,} pairs: beta {LOOSE:g} ends further out with "
                   "less gold", kl[0] > kl[1] and d_hi[j] < 0))
print_claims(claims)

# %% tags=["hide-input"]
def mean_curve(kind, size, method):
    """The seeds' mean gold and sqrt(KL) at each n or beta."""
    end = min(END[kind, size, s][method] for s in RM_SEEDS)
    a = [arrays[kind, size, s][method] for s in RM_SEEDS]
    kl = np.mean([x["kl"][:end].mean(1) for x in a], axis=0)
    return np.sqrt(kl.clip(min=0)), np.mean([x["gold"][:end].mean(1)
                                             for x in a], axis=0)


def draw_made(narrow=False):
    """Best-of-n's, the optimum's and RL's gold against sqrt(KL) for the
    proxies of both kinds, and DPO's on the same pairs, beside the
    ceiling."""
    fig, axes = plt.subplots(3 if narrow else 1, 1 if narrow else 3,
                             figsize=(3.6, 8.0) if narrow else (7.2, 2.8),
                             sharey=True, layout="constrained")
    colors = dict(zip(SIZES, (SKY, GREEN, ORANGE)))
    ceiling_d = np.sqrt(np.array(curves["book"]["ceiling"]["kl"]))
    titles = ("best-of-n", "the optimum, and RL", "DPO on the same pairs")
    for ax, method, title in zip(axes, ("bon", "tilt", "dpo"), titles):
        keep = ceiling_d <= 2.6
        ax.plot(ceiling_d[keep],
                np.array(curves["book"]["ceiling"]["gold"])[keep],
                color=GRAY, lw=1.0, label="ceiling")
        if method == "dpo":  # one run of each beta on each size's pairs,
            # colored by size as in the first panel
            style = dict(zip(DPO_MADE_BETAS, ("-", ":")))
            for (beta, n), run in dpo_made.items():
                ax.plot(np.sqrt(np.clip(run["kl"], 0, None)), run["gold"],
                        style[beta], color=colors[n], lw=1.2)
            ax.legend(handles=[plt.Line2D([], [], ls=style[b], color=BLACK,
                                          lw=1.2, label=f"DPO, beta {b:g}")
                               for b in DPO_MADE_BETAS],
                      frameon=False, fontsize=7)
        for n in SIZES if method != "dpo" else ():
            for kind, style in (("on-policy", "-"), ("off-policy", "--")):
                d, g = mean_curve(kind, n, method)
                ax.plot(d, g, style, color=colors[n], lw=1.2,
                        label=f"{kind}, {n:,}")
        if method == "tilt":  # RL against the 12,800-pair proxies
            for name in ("rloo", "ppo-prompt-baseline"):
                ax.plot(np.sqrt(RM_R[name]["kl"].mean((0, 2))),
                        RM_R[name]["gold"].mean((0, 2)), "-",
                        marker=STYLE[name][1], ms=3, color=BLACK, lw=0.8,
                        label=f"{NAME[name]}, on-policy 12,800")
            ax.legend(handles=ax.get_lines()[-2:], frameon=False,
                      fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("√KL to the start (√nats)")
    axes[0].set_ylabel("gold: verifier accuracy")
    axes[0].legend(frameon=False, fontsize=7)
    return fig


show_figure(
    draw_made,
    alt="Three panels, best-of-n, the optimum and DPO, each with gold "
        "against the square root of the exact KL, beside the gray gold "
        "ceiling. The first two draw proxies trained on 800, 3,200 and "
        "12,800 pairs of the policy's own answers (solid) and of the "
        "book's pairs (dashed). In the best-of-n panel the solid curve of "
        "the largest size rises far above all the others, peaks near one, "
        "and falls; the rest peak low. "
        "In the second panel the optimum's curves stop where the bounds "
        "open, the largest on-policy size still rising, while RLOO and "
        "PPO against the 12,800-pair on-policy proxies, drawn in black with "
        "markers, barely leave the start's gold and then sink below it. "
        "The third panel draws DPO trained on the same three sets of the "
        "policy's own pairs, at beta 1.25 (solid) and 0.1 (dotted): the "
        "solid curves climb all the way, the 12,800-pair one to about 0.45 "
        "near 0.84; the dotted ones go much further out and stay near the "
        "start's gold.",
    caption="Gold against distance for proxies of both kinds and three "
            "sizes, each curve the mean of three seeds at each n or beta; "
            "the optimum drawn only where its gold's bounds are narrow. "
            "With 12,800 pairs, proxies trained on the policy's own "
            "answers (solid) give best-of-n and the optimum far more gold "
            "than the book's kind at the same size (dashed) or fewer pairs "
            "of their own kind; RL against "
            "the best of them (black, three runs each) gains almost none. "
            "DPO on the same pairs (one run each) is drawn at two betas.",
)

# %% [markdown]
# Read the tables from the top. Trained on 800 or 3,200 of the policy's own pairs, a proxy is
# no better than the book's kind: it ranks the policy's held-out pairs right 0.557 and 0.621
# of the time, and best-of-$n$'s peak gains +0.020 and +0.039 in gold, where the book's kind
# gains +0.026 and +0.032 (each difference's interval holds 0). At 12,800 pairs the two kinds
# part. The on-policy proxies rank 0.851 of the held-out pairs right, and best-of-$n$ against
# them climbs to +0.232 [+0.154, +0.312] in gold, near $\sqrt{\mathrm{KL}} = 1$, where the
# book's kind of proxy gains +0.023 at the same size: +0.208 [+0.131, +0.284] more. The
# optimum climbs with it, to +0.181. Against these proxies best-of-$n$ reaches 39% of the
# ceiling at its KL, where against chapter 4's RM it reached 11%. And the fall is there: past
# its peak, best-of-$n$'s gold falls (the interval says so). This is Gao et al.'s curve at
# last, and what made it was the data: a proxy that has seen enough of the answers the policy
# actually gives can guide a choice among them a long way before it is fooled.
#
# The optimum's fall is not shown, and the reason is the bounds. For these proxies the bounds
# of the tilt open at larger $\beta$ than for chapter 4's RM: the cell reads each optimum only
# while its gold is pinned to within 0.01, down to $\beta$ = 1.88 for the 12,800-pair proxies,
# and that range ends near the peak. Whether the optimum then falls, as best-of-$n$ does,
# these bounds cannot tell. (For the smaller proxies it is read further, down to 0.667 and
# 0.793, and at 3,200 pairs it does fall after its peak, by a little.)
#
# How much data is enough? Here, 3,200 pairs were not: 800 to 3,200 pairs raises best-of-$n$'s
# peak by +0.018, an interval that holds 0, and 3,200 to 12,800 by +0.193 [+0.106, +0.272].
# Each proxy sees its pairs 8 times, so the 3,200-pair ones also had a quarter of the steps;
# this recipe cannot tell more pairs from more steps, only that the two together make a proxy
# worth optimizing (the module's notes: the 800-pair proxy trained for 1,000 steps, until it
# had learnt its pairs by heart, was no better). More data of the wrong kind does not help at
# all: the book's proxies rank the policy's own pairs right 0.580, 0.572 and 0.571 of the time
# at the three sizes. Their pairs teach what a right sum is against random wrong numbers, which
# the policy rarely writes; the policy's own mistakes are near-misses, and those the book's
# kind of proxy never learns to rank, however many of its pairs it sees.
#
# DPO on the same pairs, in the third panel, needs no proxy. At chapter 9's $\beta$ = 1.25 its
# gold is highest at the run's end at every size, and still rising in the second and third
# passes (each interval above 0): it reaches +0.232 [+0.195, +0.264] with 12,800 pairs at
# $\sqrt{\mathrm{KL}}$ = 0.84, no different, within the interval, from what best-of-$n$ finds
# against the proxy of the same pairs at that KL (the difference is -0.027 [-0.071, +0.023]).
# With fewer pairs it does better than that proxy: +0.029 [+0.005, +0.056] more gold than
# best-of-$n$ at its last KL with 800 pairs, and +0.068 [+0.033, +0.104] with 3,200, the sizes
# at which a proxy learnt little: with few pairs, learning from them directly lost less than
# first summing them up in a reward model. At $\beta$ = 0.1 the leash is loose and DPO runs far
# out: after three passes $\sqrt{\mathrm{KL}}$ is 0.93, 1.41 and 1.86, against 0.45, 0.62 and
# 0.84 at $\beta$ = 1.25, with less gold at every size (-0.065, -0.105 and -0.216, each interval
# below 0). With 800 pairs its gold peaks within the first pass (at 0.48 of it, +0.016 [+0.005,
# +0.033]) and then falls by +0.037 [+0.011, +0.066]: over-optimization with no proxy at all, as
# Rafailov et al. found for DPO, and on preferences the gold never contradicts. With 3,200 and
# 12,800 pairs no fall from its best is clear of the noise. These are single runs (seed 0),
# their intervals over the prompts only.
#
# Gao et al.'s forms fitted to each on-policy proxy's curves, on the whole of each curve
# (best-of-$n$ to $n$ = 4,096, the optimum down to the same $\beta$ as above), once per seed,
# the coefficients averaged over the three seeds, with 95% intervals over prompts and seeds:

# %%
def made_fit(kind, size, method, axis):
    """Gao et al.'s form fitted to each seed's curve of one proxy: the
    seeds' mean alpha, beta and R^2."""
    def stat(p, r):
        out = []
        for j in r:
            a = arrays[kind, size, RM_SEEDS[j]][method]
            end = END[kind, size, RM_SEEDS[j]][method]
            kl = (np.array(bon["book"]["analytic"]) if axis == "analytic"
                  else a["kl"][:end, p].mean(1))
            gain = a["gold"][:end, p].mean(1) - bp["gold"][0, p].mean()
            fit = gao.fit_gao(kl, gain, "bon" if method == "bon" else "rl")
            out.append([fit["alpha"], fit["beta"], fit["r2"]])
        return np.mean(out, axis=0)
    return stat


MADE_FITS = {"bon, exact": ("bon", "exact"),
             "bon, analytic": ("bon", "analytic"),
             "optimum": ("tilt", "exact")}
made_fits = {}
print("fit           pairs  alpha                  beta"
      "                   R^2")
for label, (method, axis) in MADE_FITS.items():
    for n in SIZES:
        v, lo, hi = frontier.bootstrap(
            made_fit("on-policy", n, method, axis), P, len(RM_SEEDS),
            reps=300)
        made_fits[label, n] = (v, lo, hi)
        print(f"{label:<13} {n:>6,} {v[0]:+.3f} [{lo[0]:+.3f}, "
              f"{hi[0]:+.3f}] {v[1]:+.3f} [{lo[1]:+.3f}, {hi[1]:+.3f}] "
              f"{v[2]:.2f}")
print("best-of-n's fitted form peaks at d = alpha / (2 beta); measured:")
for n in SIZES:
    a, b = made_fits["bon, exact", n][0][:2]
    print(f"  {n:>6,} pairs  fitted {a / (2 * b):.2f}, measured "
          f"{pk[row('on-policy', n, 'bon') + 1]:.2f}")

# %% [markdown]
# The fitted coefficients follow the data. Best-of-$n$'s $\alpha$ is near 0 at 800 and 3,200
# pairs (-0.001 and +0.013, each interval holding 0) and +0.349 [+0.192, +0.489] at 12,800,
# its $\beta$ 0.034, 0.042 and 0.183; the analytic axis, which stretches the KL, gives the same
# order a little lower. At 12,800 pairs the fitted peak, $d$ = 0.95, is close to the measured
# 1.00; on the two smaller sets the curve is nearly flat, and the fit's peak ($d$ = -0.02 and
# 0.15) says nothing. Three sizes, one of which works, give an order, not a scaling law. The
# optimum's form is fitted only where its bounds are narrow, where it is still rising: its
# $\beta$ at 12,800 pairs, +0.014, has an interval that holds 0.
#
# ## The KL estimators against the truth
#
# A run never sees the exact KL; it estimates it from the answers it samples. Chapter 1 defined
# k1 ($\log \pi - \log \pi_{\mathrm{ref}}$ of the sampled token) and k3 ($r - 1 - \log r$ with
# $r = \pi_{\mathrm{ref}} / \pi$). Summed over an answer's tokens, both are unbiased estimates of
# the sequence KL. The KL of whole answers is the expected sum over positions of the per-token
# KL given the prefix (the chain rule), and at each position both are unbiased for that
# per-token KL: for k1 by definition, and for k3 because the expected ratio is
# $\mathbb{E}_\pi[r] = \sum_v \pi(v)\, \pi_{\mathrm{ref}}(v) / \pi(v) = 1$ (chapter 1).
#
# At every evaluation of the runs, four answers of each prompt were sampled from the policy of
# that moment, 400 in all, and both sums computed as a run computes them. The table compares
# their means with the exact KL of the same policy, and gives the standard deviation of one
# answer's sum relative to the KL (a batch of 64 answers has an eighth of it). Last, the per-token
# number the earlier chapters printed, the exact KL per token of the greedy answers as
# `evaluate` computes it, here on the same 100 prompts.
#
# The table takes every evaluation of the twelve runs above, the starts left out.

# %%
rows = [run for runs in rl.values() for run in runs]
exact_kl = np.concatenate([r["kl"] for r in rows])
moved = exact_kl > 1e-12  # leave out the starts, where every KL is 0
truth = exact_kl[moved]
est = {k: np.concatenate([r[k] for r in rows])[moved]
       for k in ("k1", "k3", "k1_sd", "k3_sd")}
print(f"{moved.sum()} evaluations of {len(rows)} runs; exact KL from "
      f"{truth.min():.3f} to {truth.max():.3f} nats")
print("the error of a mean of 400 answers' sums, and the sd of one sum")
print("           mean error   95% interval         median     sd / KL")
for name in ("k1", "k3"):
    err = est[name] - truth
    m, half = mean_ci95(err)
    sd = np.median(est[name + "_sd"] / truth)
    print(f"{name} summed  {m:>+10.4f}   [{m - half:+.4f}, {m + half:+.4f}]"
          f"   {np.median(err):>+8.4f}   {sd:>7.2f}")
print("(medians over the evaluations)")
per_token_greedy = np.concatenate([r["greedy_kl"] for r in rows])[moved]
ratio = np.median(per_token_greedy / truth)
print(f"the per-token KL of the greedy answers (as evaluate computes it)\n"
      f"  / the exact sequence KL: {ratio:.2f} (median)")
err1, err3 = est["k1"] - truth, est["k3"] - truth
print_claims([
    ("k1 summed: the interval of the mean error holds 0",
     abs(err1.mean()) <= mean_ci95(err1)[1]),
    ("k3 summed: the interval of the mean error holds 0",
     abs(err3.mean()) <= mean_ci95(err3)[1]),
])

# %% [markdown]
# Over the 141 evaluations of the twelve runs both sums' mean errors are within their
# intervals of 0, as the proof says they must be. Their medians are not alike: k1's median error
# is +0.0016 and k3's -0.0004. That is the shape of k3's errors. An unbiased estimator can read low on
# most batches if it now and then reads very high, and k3 is built that way. A token the
# trained policy has learned to avoid but the reference still likes has a large ratio
# $r = \pi_{\mathrm{ref}} / \pi$, so when it is drawn its k3 is large. Its share of the
# expectation, $\pi \cdot r = \pi_{\mathrm{ref}}$, is the reference's probability of that token,
# however rarely the policy draws it, and a batch that draws no such token reads low. The sd/KL
# column makes k3's sum look the less noisy one on a typical evaluation, but a sample's spread
# misses exactly those rare large values, so it cannot say which sum is noisier.
#
# The enumeration says it, with no sampling at all. The cell below reruns chapter 5's recipe
# unleashed (seed 0; its exact KL at the end must be the stored run's) and computes, for the
# trained policy, each sum's expected value and standard deviation exactly
# (`minirlhf.studies.kl_exact`), and the chance that a batch's mean reads below the truth, from
# 20,000 batches drawn from the exact law. Then it walks the straight line of weights from the
# start to the trained policy, computing both variances on the way, and takes the earlier
# chapters' per-token number apart.

# %%
cfg = ppo.PPOConfig(iterations=LENGTH["ppo-chapter-5"], seed=0,
                    eval_every=LENGTH["ppo-chapter-5"])
trained, _ = ppo.ppo_train(policy, policy, ppo.rm_reward(rm), 0.0, cfg,
                           rm=rm, progress=PROGRESS,
                           desc="PPO, chapter 5's recipe, beta 0, seed 0")
again = overopt.exact_point(trained, policy, rm, pairs)
stored_kl = rl["ppo-chapter-5"][0]["kl"][-1]
print_claims([("the rerun's exact KL is the stored run's (within 1e-9)",
               abs(again["kl"] - stored_kl) < 1e-9)])
print(f"exact sequence KL of the trained policy: {again['kl']:.4f} nats")
# exactly, from the enumeration: each sum's mean and spread, and the
# chance that a batch's mean reads below the truth (20,000 batches
# drawn from the exact law; 400 = 4 answers of each prompt, as above,
# 64 = a rollout's prompts drawn from the 100)
measured = kl_exact.measure(trained, policy, prompts, reps=20_000)
print("exactly, the trained policy          k1 sum     k3 sum")
print(f"expected value                    {measured['k1_mean']:>9.4f}  "
      f"{measured['k3_mean']:>9.4f}")
print(f"sd of one answer's sum            {measured['k1_sd']:>9.3f}  "
      f"{measured['k3_sd']:>9.3f}")
for b, r in measured["batches"].items():
    half = max(r["k1"]["half_width"], r["k3"]["half_width"])
    print(f"a batch of {b:>3} reads below the KL  "
          f"{r['k1']['below']:>8.1%}  {r['k3']['below']:>9.1%}"
          f"   (within {half:.1%})")
# along the straight line of weights from the start to the trained
# policy: where does k3's sum become the noisier?
path = kl_exact.estimator_variances(
    [kl_exact.blend(policy, trained, a) for a in (0.25, 0.5, 0.75, 1.0)],
    policy, prompts)
print("along the line from the start:  KL      var k1 sum   var k3 sum")
for kl_p, v1, v3 in zip(path["kl"], path["k1_var"], path["k3_var"]):
    print(f"{'':<31} {kl_p:.3f}   {v1:>10.3f}   {v3:>10.3f}")
split = measured["length"]
print(f"an answer's expected length: {split['mean_length']:.3f} tokens")
print(f"evaluate's per-token KL of the greedy answers / sequence KL: "
      f"{split['greedy_over_kl']:.3f}\n  = 1 / length "
      f"({split['one_over_length']:.3f}) x greedy against sampled per "
      f"token ({split['greedy_over_sampled']:.3f})")
below = {k: measured["batches"][400][k]["below"] for k in ("k1", "k3")}
print_claims([
    # within 1e-5: the pruned answers, about 1e-6 of the mass, add the rest
    ("both sums' expected values are the exact KL (within 1e-5)",
     max(abs(measured[f"{k}_mean"] - again["kl"]) for k in ("k1", "k3"))
     < 1e-5),
    ("k3 reads low on more batches of 400 than k1",
     below["k3"] > below["k1"]),
    ("k3's sum is the noisier one for the trained policy",
     measured["k3_sd"] > measured["k1_sd"]),
    ("k3's sum is the less noisy one nearest the start",
     path["k3_var"][0] < path["k1_var"][0]),
])

# %% [markdown]
# Both expected values are the exact KL to the fifth decimal (the pruned answers, a millionth
# of the mass, hold the rest): both sums are unbiased, shown exactly rather than by sampling. k1 reads below the truth on about half the batches, as an estimator
# whose errors are spread evenly does; k3 on about three in five, with 64 answers as with 400.
# And the exact spread reverses what the samples suggested: for the trained policy k3's sum is
# the noisier one (an sd of 2.064 against 1.283), because the rare large values that a sample seldom
# contains carry most of its variance. Along the line from the start, k3's variance is far below
# k1's near the start, and overtakes it on the way to the trained policy's KL. k3's small
# variance is a property of policies near their reference, not of k3.
#
# The book's runs log k1 (`objective/kl`), but a number a reader meets elsewhere is built from
# k3: TRL's `GRPOTrainer` logs as `kl` the mean of the per-token k3 over the batch's tokens
# (`trl/trainer/grpo_trainer.py` in TRL 1.12.0, whenever its `beta` is not 0). That is a
# per-token mean, not a sum over an answer, but it is skewed the same way: low on most batches,
# now and then much too high.
#
# The per-token number of the earlier chapters is another matter: it is not an estimate of the
# sequence KL at all. `evaluate`'s KL per token of the greedy answers is 0.289 of the sequence
# KL here, and nearly all of that is the division by length: an answer averages 3.517 tokens,
# and per token the greedy answers' KL is close to the sampled answers' (the factor 1.016).
# Chapter 7 said its distance was "not quite" Gao et al.'s; this is by how much, and why.
#
# ## Summary
#
# You can now:
#
# - write a small policy's whole distribution over answers, with the pruned mass as a bound, and
#   compute from it the exact sequence KL, gold reward and proxy reward;
# - write the exact law of best-of-$n$ (your `best_of_n_probs`), including its ties, and its
#   exact KL (your `sequence_kl` and `best_of_n_kl`), and say why the usual $\log n - (n-1)/n$ (your
#   `best_of_n_kl_bound`) is only an upper bound for a discrete policy: its atoms, every answer
#   with a probability of its own, and the finite top they imply;
# - compute the KL-regularized optimum and the gold ceiling exactly, and read every method
#   against them: against chapter 4's RM even the optimum gains only a few thousandths of gold
#   before losing it, far below what the ceiling allows at the same KL;
# - check that an optimizer moves the proxy before reading its gold: chapter 5's recipe does
#   not, and only drifts; with a baseline per prompt, PPO and RLOO climb the proxy and follow
#   the optimum's gold, within their intervals, until far out;
# - fit Gao et al.'s forms and say what a fit can and cannot show (RL's form must rise at the
#   start);
# - say what makes a proxy worth optimizing: enough pairs of the policy's own answers, as Gao
#   et al. made theirs. With 12,800 of them, best-of-$n$ and the optimum climb far in gold and
#   best-of-$n$ peaks near $\sqrt{\mathrm{KL}} = 1$ and then falls; with 3,200 or fewer, and
#   with the book's kind of pairs at every size, they stay low. And say why a proxy good for
#   choosing is not yet good for training: RL against the best of them climbs the proxy and
#   barely moves the gold, while DPO on the same pairs, with no proxy, gains at chapter 9's
#   $\beta$ as much gold as best-of-$n$ within the interval, and more with fewer pairs; at
#   $\beta$ = 0.1 it runs far out for less, its gold falling after its peak with 800 pairs;
# - say what a run's KL numbers are: k1 and k3 summed over sampled tokens are both unbiased for
#   the sequence KL, k1's errors are spread evenly and k3's are skewed (low on most batches, now
#   and then far too high), and the per-token numbers of chapters 5 to 7 measure something else.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. The top of best-of-$n$.** As $n \to \infty$, where does best-of-$n$'s KL go for one
# prompt? Compute the limit for the 100 prompts and compare it with the KL at $n = 4096$.
#
# <details class="answer">
# <summary>Worked answer: the top of best-of-n</summary>
#
# As $n$ grows, $P_n$ puts all its mass on the block of answers with the highest proxy score,
# in proportion to $\pi$ within it. The KL tends to $\log(1/\pi(\text{top block}))$: finite, where
# the formula grows like $\log n$ forever. The cell computes the limit per prompt from the
# enumerated answers, and that makes each limit a lower bound: a pruned answer, less likely than
# $10^{-8}$, was never scored and may score above the enumerated favourite, and then the true
# limit is larger. The limits average 12.415 nats, more than twice the exact KL at
# $n = 4096$ (5.697), and only 16 of the 100 prompts are within 0.01 nats of theirs:
# where the top answer is very unlikely under $\pi$, 4,096 samples rarely contain it. For
# 33 prompts the enumerated favourite lies within a factor of 10 of the threshold, so
# the threshold, not the RM, sets their limit (the largest, 18.417 nats, is
# $\log(1/\pi)$ of an answer just above $10^{-8}$). So the formula is not merely a little high:
# for $n$ past a prompt's $1/\pi(\text{top block})$ it keeps rising while the truth stops.
#
# </details>

# %% tags=["hide-input"]
limit = np.zeros(len(pairs))
for i, span in enumerate(comps.spans()):
    score, p = proxy[span], comps.probs[span]
    limit[i] = -np.log(p[score == score.max()].sum().item())
at_4096 = exact.best_of_n_table(comps, proxy, [4096])
kl_4096 = at_4096["kl"][0].numpy()
print(f"limit of the exact KL as n grows, mean over prompts: "
      f"{limit.mean():.3f} nats")
print(f"exact KL at n = 4096: {kl_4096.mean():.3f} nats, within "
      f"[{at_4096['kl_lower'].mean():.3f}, {at_4096['kl_upper'].mean():.3f}]"
      f" wherever\nthe pruned answers rank; "
      f"log 4096 - 4095/4096 = {bound[-1]:.3f}")
print(f"prompts within 0.01 nats of their limit at n = 4096: "
      f"{int((limit - kl_4096 <= 0.01).sum())} of {len(pairs)}")
print(f"largest limit of a prompt: {limit.max():.3f} nats")
print(f"prompts whose favourite is within a factor of 10 of the "
      f"threshold: {int((limit > -np.log(10 * MIN_PROB)).sum())}")

# %% [markdown]
# **2. A leash for best-of-$n$.** Best-of-$n$ has no $\beta$, but $n$ sets its KL. Which $n$ would
# you choose against chapter 4's RM, knowing only the proxy (not the gold)? What does the table
# of the proxy sweep say about choosing it?
#
# <details class="answer">
# <summary>Worked answer: a leash for best-of-n</summary>
#
# The proxy alone cannot say: it rises with every $n$, so by its own account larger is always
# better. The gold peak sits at small $n$ for every proxy in the table, a KL of well under one
# nat. In practice one holds out a little gold data, or a second and better RM, to find the
# peak, and stops at it or just before: near its top the curve is flat, and beyond it the fall
# is long. The cell prints, for chapter 4's RM, the
# gold at $n$ from 1 to 8 and how much the proxy gains there.
#
# </details>

# %% tags=["hide-input"]
for n in (1, 2, 3, 4, 5, 6, 7, 8):
    i = NS.index(n)
    print(f"n = {n}: gold {book['gold'][i]:.4f}, proxy "
          f"{book['proxy'][i]:+.3f}, KL {book['kl'][i]:.3f}")
