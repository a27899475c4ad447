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
# for every prompt. This chapter does that, and draws Gao et al.'s curves with no sampling
# noise on either axis:
#
# 1. **The whole distribution**: every answer the policy can give, with its probability, and
#    from it the exact KL, the exact gold reward and the exact proxy reward.
# 2. **Best-of-$n$, exactly**: you write the law of the best of $n$ samples, the usual
#    formula for its KL, and the exact KL; your functions then measure best-of-$n$ for $n$ from 1
#    to 4,096, at no training cost.
# 3. **RL against the same proxy**, at three strengths of the leash, and both methods on one
#    axis, with Gao et al.'s fitted forms.
# 4. **How the proxy's quality moves the peak**: five more proxies, trained on 200 to 12,800
#    pairs, and one with near-misses among its rejected answers.
# 5. **The KL estimators against the truth**: chapter 1's k1 and k3, summed over the tokens of
#    sampled answers as a run computes them, beside the exact KL of the same policies.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1, 4, 5 and 7: the estimators k1 and k3, the reward model and its blind spot, the
# PPO loop, and the leash taken off. A first run of the notebook trains five small reward
# models and makes 30 runs side by side, one per CPU core (six best-of-$n$ curves, and 24 PPO
# runs whose policy is enumerated exactly six times each), with a progress bar in JupyterLab,
# and stores them in `outputs/ch11_overoptimization.json`. That takes about eight
# minutes on a 2-core CPU, most of it in the enumerations; later runs read the runs back and
# take under a minute and a half (one PPO run is made again, and 200 batches of answers drawn,
# in the last section).
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
from minirlhf.palette import BLUE, GREEN, ORANGE, PINK, SKY, YELLOW
from minirlhf.paths import OUTPUTS
from minirlhf.stats import mean_ci95, pm, print_claims
from minirlhf.studies import gao
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
# prompts. The cell enumerates the partial-SFT policy and checks the enumeration against plain
# sampling: the verifier's accuracy on 64 sampled answers a prompt must land near the exact value.

# %%
MIN_PROB = 1e-8  # prune answers less likely than this
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
# tie rule. We break ties uniformly at random, so within a tie $P_n$ splits in proportion to
# $\pi$: $P_n(y) = P_n(v)\, \pi(y) / \pi(\text{answers scoring } v)$. When no scores tie, this is
# $P_n(y) = F(y)^n - F(y^-)^n$.
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
# a large $n$, ties in several places, all answers tied, an answer of probability 0, and lists
# as inputs; then 100 random inputs against the package's solution.

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
# How far does best-of-$n$ move from $\pi$? If no two answers ever tie (a continuous score),
# $P_n$ depends on an answer only through its rank $u = F(y)$, with density $n u^{n-1}$ against
# $\pi$, and the KL is
#
# $$
# \mathrm{KL}(P_n \,\|\, \pi) = \int_0^1 n u^{n-1} \log(n u^{n-1})\, du = \log n - \frac{n-1}{n}.
# $$
#
# Stiennon et al. {cite}`stiennon2020summarize` use this formula for their best-of-$n$
# policies, and Gao et al. {cite}`gao2023scaling` use it as the KL axis of every best-of-$n$
# curve they draw. Beirami et al. {cite}`beirami2024bon` show that the formula is not the KL of
# best-of-$n$ in general but only an **upper bound** on it, and study when the gap is large; the
# derivation above needs every answer to have a rank of its own, which a distribution over a
# finite set of answers with tied scores, such as ours, does not give.
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
# The reference's probabilities need not sum to 1 (its other answers may have been pruned).
#
# **Examples.** `sequence_kl(np.log([0.5, 0.5]), np.log([0.25, 0.75]))` returns
# $\tfrac12 \log 2 + \tfrac12 \log \tfrac23 = 0.1438...$; `sequence_kl([0.0, -np.inf],
# np.log([0.5, 0.5]))` returns $\log 2 = 0.6931...$.
#
# **How it is judged.** Cases worked by hand, within $10^{-9}$: the examples, equal
# distributions, answers of probability 0 under either, a reference whose probabilities do not
# sum to 1, several rows at once, and lists; then 100 random inputs.

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
# $n$: at $n = 4096$ the exact KL is 0.78 of what the formula says. Two things make a discrete
# policy's best-of-$n$ move less than a continuous one's:
#
# - **Ties.** Answers that share a proxy score form one block, and best-of-$n$ cannot move mass
#   inside a block: within it, $P_n$ stays in proportion to $\pi$. The formula assumes every
#   answer has a rank of its own.
# - **A finite top.** However large $n$ is, best-of-$n$ can do no better than put all its mass on
#   the top-scoring answer $y^*$, so its KL can never exceed $\log(1/\pi(y^*))$. The formula
#   grows like $\log n$ forever.
#
# Gao et al.'s best-of-$n$ curves are drawn against the formula. On ours the two axes differ,
# and the rest of the chapter uses the exact one. First, check that your functions measured
# what the package measures, and read the study's runs.

# %%
BETAS = (0.0, 0.05, 0.5)  # the leash's strength in the RL runs
SEEDS = (0, 1, 2)
RL = {"iterations": 40, "at": [0, 5, 10, 20, 30, 40], "samples": 4}
PROXY_NAMES = ("book", *overopt.PROXIES)
jobs = [{"kind": "bon", "proxy": p, "ns": NS} for p in PROXY_NAMES]
jobs += [{"kind": "rl", "proxy": "book", "beta": b, "seed": s, **RL}
         for b in BETAS for s in SEEDS]
jobs += [{"kind": "rl", "proxy": p, "beta": 0.0, "seed": s, **RL}
         for p in overopt.PROXIES for s in SEEDS]
study = load_or_run(
    OUTPUTS / "ch11_overoptimization.json",
    {"jobs": jobs, "study": overopt.study_code()}, {},
    lambda: {"results": overopt.run_study(jobs, progress=PROGRESS)}, arms=())
bon, rl = {}, {}
for job, result in zip(jobs, study["results"]):
    if job["kind"] == "bon":
        bon[job["proxy"]] = result
    else:
        rl[job["proxy"], job["beta"], job["seed"]] = result
gap = np.abs(bon_kl - np.array(bon["book"]["kl"])).max()
print_claims([("your best-of-n KL is the package's, within 1e-9 at every n",
               gap <= 1e-9)])
print(f"{len(bon)} best-of-n curves, {len(rl)} PPO runs")

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
    c = {k: np.array(v) for k, v in bon[name].items() if k != "pruned"}
    c["kl"] = c["kl"].clip(min=0.0)
    return c


book = curve_of("book")
top = gao.peak(book["kl"], book["gold"])
print("   n   exact KL   gold (verifier)   proxy (RM)")
for n in (1, 2, 3, 4, 8, 16, 64, 256, 1024, 4096):
    i = NS.index(n)
    print(f"{n:>4}   {book['kl'][i]:>8.3f}   {book['gold'][i]:>15.4f}   "
          f"{book['proxy'][i]:>+10.3f}")
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
# exactly. With $n$ in the thousands, best-of-$n$ nearly always returns the answer the RM scores
# highest among those the policy gives, and for most prompts that answer is wrong.
#
# ## RL against the same proxy
#
# Now the other optimizer: chapter 5's PPO loop, paid by the same RM, at three strengths of the
# leash, $\beta \in \{0, 0.05, 0.5\}$ ($\beta = 0.5$ is chapter 5's; $\beta = 0$ is chapter 7's run
# with the leash off), with three seeds each, for 40 iterations. At iterations 5, 10, 20, 30 and
# 40 the run stops for a moment and the policy is enumerated: the exact gold, proxy and sequence
# KL to the start. The table gives the start, the end, and the best gold of the mean curve, each
# a mean over the seeds with its 95% interval.

# %%
def rl_curve(proxy_name, beta, key):
    """Return the measurements of `key` at every evaluation: (seeds, n)."""
    return np.array([rl[proxy_name, beta, s][key] for s in SEEDS])


ITS = np.array(rl["book", 0.0, 0]["iteration"])
print(f"evaluated at iterations {', '.join(map(str, ITS))}")
print("beta   iteration   gold               proxy              "
      "KL (nats)")
for beta in BETAS:
    g, p, k = (rl_curve("book", beta, key)
               for key in ("gold", "proxy", "kl"))
    best = int(g.mean(0).argmax())
    for label, j in (("0", 0), (str(ITS[-1]), -1),
                     (f"{ITS[best]} (best)", best)):
        print(f"{beta:<6} {label:<11} {pm(*mean_ci95(g[:, j]), 4):<18} "
              f"{pm(*mean_ci95(p[:, j]), 3, '+'):<18} "
              f"{pm(*mean_ci95(k[:, j]), 3)}")
falls = [rl_curve("book", b, "gold")[:, -1].max()
         < rl_curve("book", b, "gold")[:, 0].min() for b in (0.0, 0.05)]
print_claims([
    ("beta = 0: every seed ends below the start in gold", falls[0]),
    ("beta = 0.05: every seed ends below the start in gold", falls[1]),
    ("beta = 0: the proxy ends higher than it started (mean)",
     rl_curve("book", 0.0, "proxy")[:, -1].mean()
     > rl_curve("book", 0.0, "proxy")[:, 0].mean()),
])

# %% [markdown]
# PPO finds no rising half of the curve against this RM. With the leash off, the best gold of the
# mean curve is the start itself, and every seed ends below it (0.1627 ± 0.0616 against
# 0.2206), while the proxy's score edges up (from +1.676 to +1.727 ± 0.099). The light leash
# does the same, and every seed ends below the start too. The strong one holds the KL near a
# tenth of a nat (0.102 ± 0.055) and the gold within noise of the start (0.2242 ± 0.0189).
# This is chapter 7's finding, now with the sampled answers measured exactly instead of the
# greedy ones. The distance an unleashed run travels varies a great deal from seed to seed
# (0.806 ± 0.716 nats at the end): with no leash, nothing but the learning rate's decay holds
# the walk, and the next figure puts every run at the distance it reached.
#
# ## Gold against $\sqrt{\mathrm{KL}}$: both methods on one axis
#
# Gao et al. draw every run against $d = \sqrt{\mathrm{KL}}$, the square root of the KL from the
# initial policy (chapter 7 explained the square root), and fit the gold gain over the start,
# $R(d)$, with one form for each method {cite}`gao2023scaling`:
#
# $$
# R_{\text{bon}}(d) = d\,(\alpha_{\text{bon}} - \beta_{\text{bon}}\, d),
# \qquad
# R_{\text{RL}}(d) = d\,(\alpha_{\text{RL}} - \beta_{\text{RL}} \log d).
# $$
#
# (Their $\beta$s are fitted constants, not the leash.) Both forms are linear in $\alpha$ and
# $\beta$, so a least-squares fit is one line of linear algebra (`gao.fit_gao`). The cell fits
# best-of-$n$'s curve, and every evaluation of every RL run against this RM pooled (the three
# leashes together, as Gao et al. pool their runs along the KL axis), and prints how well each
# fits: the root-mean-square error, and $R^2$, the share of the variance of the gain it explains.

# %%
bon_fit = gao.fit_gao(book["kl"], book["gold"] - book["gold"][0], "bon")
rl_kl = np.concatenate([rl_curve("book", b, "kl").ravel() for b in BETAS])
rl_gold = [rl_curve("book", b, "gold") for b in BETAS]
rl_gain = np.concatenate([(g - g[:, :1]).ravel() for g in rl_gold])
rl_fit = gao.fit_gao(rl_kl, rl_gain, "rl")
print("fit          alpha      beta     RMSE     R^2   points   peak at d")
for name, fit in (("best-of-n", bon_fit), ("RL", rl_fit)):
    where = "none" if fit["peak_d"] is None else f"{fit['peak_d']:.3f}"
    print(f"{name:<10} {fit['alpha']:>+7.3f}  {fit['beta']:>+7.3f}  "
          f"{fit['rmse']:>7.4f}  {fit['r2']:>6.3f}   {fit['n']:>6}   "
          f"{where}")
print(f"best-of-n's measured peak: d = {top['sqrt_kl']:.3f}, "
      f"gain {top['gain']:+.4f}")
fitted_top = bon_fit["peak_d"] * (bon_fit["alpha"]
                                  - bon_fit["beta"] * bon_fit["peak_d"])
print(f"the fitted curve's peak:    d = {bon_fit['peak_d']:.3f}, "
      f"gain {fitted_top:+.4f}")
print(f"the RL evaluations' distances: d from "
      f"{np.sqrt(rl_kl[rl_kl > 1e-12]).min():.3f} to "
      f"{np.sqrt(rl_kl.max()):.3f}")
# Best-of-n and RL at equal distance: each RL evaluation against the
# best-of-n curve read at the same KL, averaged run by run (the
# evaluations of one run are not independent), then over the 9 runs
order = np.argsort(book["kl"])
gain_bon = (book["gold"] - book["gold"][0])[order]
per_run = []
for beta in BETAS:
    for seed in SEEDS:
        k = np.array(rl["book", beta, seed]["kl"][1:])
        g = np.array(rl["book", beta, seed]["gold"])
        per_run.append(np.mean(g[1:] - g[0]
                               - np.interp(k, book["kl"][order], gain_bon)))
m, half = mean_ci95(per_run)
print(f"RL minus best-of-n in gold gain, mean of {len(per_run)} runs\n"
      f"  at the same KL:         {m:+.4f} "
      f"(95% interval {m - half:+.4f} to {m + half:+.4f})")
# The same at equal proxy gain: best-of-n's gold read at the RL
# evaluation's proxy gain (best-of-n's proxy rises with n)
proxy_bon = book["proxy"] - book["proxy"][0]
per_run = []
for beta in BETAS:
    for seed in SEEDS:
        p = np.array(rl["book", beta, seed]["proxy"])
        g = np.array(rl["book", beta, seed]["gold"])
        per_run.append(np.mean(g[1:] - g[0] - np.interp(
            p[1:] - p[0], proxy_bon, book["gold"] - book["gold"][0])))
m, half = mean_ci95(per_run)
print(f"  at the same proxy gain: {m:+.4f} "
      f"(95% interval {m - half:+.4f} to {m + half:+.4f})")


# %% tags=["hide-input"]
def draw_gao(narrow=False):
    """Return gold gain and proxy against sqrt(KL): best-of-n, the RL
    runs, the fits."""
    fig, axes = plt.subplots(2 if narrow else 1, 1 if narrow else 2,
                             figsize=(3.6, 5.4) if narrow else (6.8, 3.0),
                             layout="constrained", sharex=True)
    d = np.sqrt(book["kl"])
    axes[0].plot(d, book["gold"] - book["gold"][0], color="black", lw=1.5,
                 label="best-of-n")
    axes[1].plot(d, book["proxy"] - book["proxy"][0], color="black", lw=1.5)
    grid = np.linspace(1e-3, d.max(), 200)
    axes[0].plot(grid, grid * (bon_fit["alpha"] - bon_fit["beta"] * grid),
                 color="black", lw=0.8, ls="--", label="fit, best-of-n")
    rl_d = np.linspace(1e-3, np.sqrt(rl_kl.max()), 200)
    rl_curve_fit = rl_d * (rl_fit["alpha"] - rl_fit["beta"] * np.log(rl_d))
    axes[0].plot(rl_d, rl_curve_fit, color=ORANGE, lw=0.8, ls="--",
                 label="fit, RL")
    for beta, color, marker in zip(BETAS, (ORANGE, YELLOW, BLUE), "os^"):
        k = rl_curve("book", beta, "kl")
        for ax, key in ((axes[0], "gold"), (axes[1], "proxy")):
            v = rl_curve("book", beta, key)
            ax.scatter(np.sqrt(k), v - v[:, :1], s=12, color=color,
                       marker=marker, lw=0, alpha=0.8,
                       label=f"RL, β = {beta:g}" if key == "gold" else None)
    for ax in axes:
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("√KL to the start (√nats, whole answers)")
    axes[0].set_ylabel("gold gain over the start")
    axes[1].set_ylabel("proxy gain over the start")
    axes[0].legend(frameon=False, fontsize=7, loc="lower left")
    return fig


show_figure(
    draw_gao,
    alt="Two panels against the square root of the exact KL. Gold gain: the "
        "best-of-n curve rises a little, peaks at a small distance and "
        "falls; the beta = 0.5 runs scatter about 0 near the start, the "
        "others fall with distance, below the best-of-n curve. Proxy gain: "
        "the best-of-n curve rises steeply; the RL runs rise only a "
        "little.",
    caption="Gao et al.'s figure, measured exactly: best-of-n for every n "
            "(black) and every evaluation of nine PPO runs (colors) against "
            "the same RM, with the fitted forms (dashed). Best-of-n gains "
            "gold for a short distance, then loses it. The strongly leashed "
            "runs scatter about the start; every run that went further lost "
            "gold, and at the same distance RL has less gold and far less "
            "proxy than best-of-n.",
)

# %% [markdown]
# Best-of-$n$'s form explains most of the variance of its curve ($R^2$ = 0.929), because it
# follows the long fall. It misses the top: the fitted curve peaks at $d$ = 0.189 with a gain of
# +0.0014, where the measured one peaks at $d$ = 0.420 with +0.0269. Our rise is short and steep
# (two samples give the whole gain) and the fall long and slow, and a parabola in $d$ cannot be
# both. RL's form fits RL's points less well ($R^2$ = 0.839) and says less: its peak at
# $d$ = 0.103 lies below the nearest RL evaluation ($d$ = 0.287), a bump the form extrapolates
# where no run was measured. The measured points say only this: the strongly leashed runs
# scatter about the start, a few a little above it, and every run that went further lost gold.
#
# At the same KL, RL has less gold than best-of-$n$ (the first interval, well below 0). Gao et
# al. report the same ordering at scale: as a function of the KL, RL is slower than best-of-$n$
# at both optimization and over-optimization, which they read as a sign that the KL is a poor
# yardstick for comparing methods {cite}`gao2023scaling`. They also found that the relation
# between the proxy and the gold score is about the same for both methods. Here it is not (the
# second interval): at the same gain in proxy score, RL has less gold than best-of-$n$ too.
# Best-of-$n$ moves probability only toward answers the proxy ranks higher, and an answer the RM
# ranks higher is, among the policy's likely answers, right somewhat more often. PPO's updates
# come from 64 sampled answers, scored by an RM that barely separates the truth from its near
# neighbours, and standardized within the batch: much of what a step changes is noise, which
# costs KL and gold without buying proxy.
#
# ## How the proxy's quality moves the peak
#
# Gao et al. trained proxy RMs of several sizes and on several amounts of data, and found that a
# better proxy puts the gold peak higher and further out. Our RMs are all one size; what we can
# vary is the data. Five more proxies, trained like chapter 4's RM (100 steps of 128 pairs) on
# fixed sets of the book's pairs: the first 200, 800, 3,200 and 12,800 of them (each pair seen
# many times in the smaller sets), and 12,800 pairs of which half have a near-miss as the rejected
# answer (with 400 steps: chapter 4 showed that with 100 such an RM has not yet learned even what
# the book's RM knows). Each gets a best-of-$n$ curve, and three PPO runs with the leash off.

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
print("\nPPO, beta = 0, 3 seeds: gold")
print("proxy        start    best of the mean (iteration)   at 40")
for name in PROXY_NAMES:
    g = rl_curve(name, 0.0, "gold")
    best = int(g.mean(0).argmax())
    # two decimals at 40: the digits after them depend on the CPU's kernels
    # for the near-miss proxy's runs (see the estimators' section)
    print(f"{name:<12} {g[:, 0].mean():.4f}   {g.mean(0)[best]:.4f} "
          f"({ITS[best]:>2}){'':>19}{pm(*mean_ci95(g[:, -1]), 2)}")
peaks = {n: gao.peak(curve_of(n)["kl"], bon[n]["gold"])["gold"]
         for n in PROXY_NAMES}
sizes = ("200", "800", "3200", "12800")
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
# furthest out, at $n$ = 4 and $\sqrt{\mathrm{KL}}$ = 0.758. That is Gao et al.'s pattern, a better
# proxy peaking higher and later. More pairs of the book's kind do not do the same here: the
# peaks of the 200- to 12,800-pair proxies do not rise with the data (the claim above does not
# hold), and they follow the proxies' near-miss accuracy no better than their size. The
# rejected answers of these sets are garbage, and the policy's likely answers are not: what
# matters near the policy is what a proxy knows of near-misses, and these sets teach it little
# and unevenly. Gao et al.'s smallest proxies also trained on far fewer comparisons than their
# largest; one RM per data size, as here, cannot separate the data from the luck of one training
# seed.
#
# With the leash off, PPO finds no rising phase against any of the six proxies: the best gold of
# each mean curve is the start, and every mean ends below it. Even the near-miss proxy, whose
# best-of-$n$ gains the most, does not lead PPO uphill in 40 iterations. Best-of-$n$ only needs
# the proxy to *rank* the policy's own likely answers well at the top; PPO needs the proxy's
# score to be a slope it can climb from noisy batches, and near the truth these proxies are too
# flat for that.
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
# number the earlier chapters printed, `evaluate`'s exact KL per token of the greedy answers.
#
# The table takes 21 of the 24 runs: all but the three against the near-miss proxy. That proxy
# trains four times as long as the others, and on another CPU (torch's other set of kernels,
# which round a few operations differently) its scores come out different in the sixth decimal.
# An unleashed run magnifies such a difference: by iteration 40 one of those runs is a few
# hundredths of a nat away from its twin. Every other number of this chapter is the same to
# the last printed digit on either kernel set (the book's tests check it), and with those three
# runs in, this table's last digit would not be. For the same reason the proxy table above
# prints the runs' ends with two decimals.

# %%
# every run but those against the near-miss proxy (see the text above)
rows = [run for (name, _, _), run in rl.items() if name != "near-miss"]
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
def at_measures(r, key):
    """Return the run's logged `key` at each iteration of r["iteration"]
    (the run evaluates every few iterations; eval_iterations says which)."""
    where = r["log"]["eval_iterations"]
    return np.array([r["log"][key][where.index(i)] for i in r["iteration"]])


per_token_greedy = np.concatenate(
    [at_measures(r, "kl") for r in rows])[moved]
print(f"evaluate's per-token KL of the greedy answers / exact sequence "
      f"KL:\n  {np.median(per_token_greedy / truth):.2f} (median)")
err1, err3 = est["k1"] - truth, est["k3"] - truth
print_claims([
    ("k1 summed: the interval of the mean error holds 0",
     abs(err1.mean()) <= mean_ci95(err1)[1]),
    ("k3 summed: the interval of the mean error holds 0",
     abs(err3.mean()) <= mean_ci95(err3)[1]),
    ("k3's sum is less noisy than k1's (median sd)",
     np.median(est["k3_sd"]) < np.median(est["k1_sd"])),
])

# %% [markdown]
# k1's sum passes: its mean error is within its interval of 0. k3's does not: over the 105
# evaluations its mean error is below 0 with an interval that excludes 0, and so is its median
# error, although the proof above says it is unbiased. Both can be true. An unbiased estimator
# can be right on average and low almost every time, if it is now and then very high; and k3
# is built that way. A token that the trained policy has learned to avoid but the reference
# still likes has a large ratio $r = \pi_{\mathrm{ref}} / \pi$, so when it is drawn its k3 is
# large. Its share of the expectation, $\pi \cdot r = \pi_{\mathrm{ref}}$, is the reference's
# probability of that token, however rarely the policy draws it. A batch that happens not to
# draw such tokens reads low by about that probability, and most batches do not draw them.
#
# The cell below checks this on one policy. It reruns the first unleashed run (seed 0; its
# exact KL at the end must be the stored run's, to the last digit), then draws 200 batches of
# 400 answers from the trained policy and sums k1 and k3 on each, as above. It also computes,
# exactly from the enumeration, how much of the expected k3 sum comes from tokens that a batch
# of 400 answers is unlikely to draw even once (policy probability below 1/400).

# %%
cfg = ppo.PPOConfig(iterations=RL["iterations"], seed=0)
trained, _ = ppo.ppo_train(policy, policy, ppo.rm_reward(rm), 0.0, cfg,
                           rm=rm, progress=PROGRESS,
                           desc="PPO, beta 0, seed 0")
again = overopt.exact_point(trained, policy, rm, pairs)
stored_kl = rl["book", 0.0, 0]["kl"][-1]
print_claims([("the rerun's exact KL is the stored run's, to the last digit",
               again["kl"] == stored_kl)])
print(f"exact sequence KL of the trained policy: {again['kl']:.4f} nats")
# 200 batches of 400 answers (4 of each prompt): k1 and k3 sums
batches = [overopt.sampled_kl(trained, policy, prompts, 4, seed=10_000 + b)
           for b in range(200)]
print("200 batches   mean error   95% interval         median   "
      "below the truth")
for name in ("k1", "k3"):
    e = np.array([b[name] for b in batches]) - again["kl"]
    m, half = mean_ci95(e)
    print(f"{name} summed   {m:>+10.4f}   [{m - half:+.4f}, {m + half:+.4f}]"
          f"   {np.median(e):+.4f}   {np.mean(e < 0):>15.0%}")
# Exactly: the expected k3 sum is the sum over positions of
# sum_v ref(v | prefix) - 1 + KL_t(prefix); the part from tokens the
# policy gives less than 1/400 is sum_v ref(v) over those tokens
tail_comps = exact.enumerate_completions(trained, prompts,
                                         overopt.TEMPERATURE, 1e-8)
rows_t = tail_comps.prompts[tail_comps.prompt_index]
with torch.no_grad():  # the next-token distributions at each prefix
    p_pi, p_ref = (
        torch.softmax(completion_logits(model, rows_t, tail_comps.tokens)
                      / overopt.TEMPERATURE, -1)  # (N, 4, 13)
        for model in (trained, policy))
# (N, 4): the reference's mass on tokens the policy gives under 1/400
rare = (p_ref * (p_pi < 1 / 400)).sum(-1)
at_prefix = completion_mask(tail_comps.tokens).double()  # positions reached
tail = (tail_comps.probs[:, None] * rare * at_prefix).sum() / len(pairs)
print(f"expected k3 sum from tokens the policy gives under 1/400: "
      f"{tail.item():.4f} nats")

# %% [markdown]
# The rerun lands on the stored run exactly, and on this policy the two estimators behave as the
# argument says. Over 200 batches both means are within their intervals of the exact KL: both
# are unbiased. But k3's median batch reads low, and most batches read below the truth, while
# k1's errors are spread evenly about 0 (half the batches below the truth, against 62% for k3).
# The part of k3's expected sum that comes from tokens a batch of 400 rarely draws, 0.0270 nats,
# is of the size of k3's median shortfall, 0.0182. So the low reading of k3
# in the table above is real for the batches a run sees, and it is not a bias in expectation: it
# is a skew. Runs of chapters 5 to 8 that log k3 on a batch (as GRPO's loss term uses it) read
# their KL a little low most of the time, and now and then much too high. k1's sum is noisier on
# a typical batch but not skewed this way.
#
# The per-token number is another matter: it is not an estimate of the sequence KL at all.
# `evaluate`'s KL per token of the greedy answers is about a quarter of the KL of whole sampled
# answers, a different quantity on a different set of answers. Chapter 7 said its distance was
# "not quite" Gao et al.'s; this is by how much. Their shapes over a run agree and their values
# do not, so a KL budget stated in one cannot be read in the other.
#
# ## Summary
#
# You can now:
#
# - write a small policy's whole distribution over answers, with the pruned mass as a bound, and
#   compute from it the exact sequence KL, gold reward and proxy reward;
# - write the exact law of best-of-$n$ (your `best_of_n_probs`), including its ties, and its
#   exact KL (your `sequence_kl`), and say why the usual $\log n - (n-1)/n$ (your
#   `best_of_n_kl_bound`) is only an upper bound for a discrete policy: ties and a finite top;
# - draw Gao et al.'s over-optimization curves exactly, for best-of-$n$ and RL against the same
#   proxy, fit their forms, and read them at equal KL: here best-of-$n$ gains gold for a short
#   distance and then loses it, and PPO against the same RM loses gold from the start;
# - say what a better proxy does: the one that knows near-misses peaks higher and later, and
#   more pairs of the book's kind, in this toy, do not make a better proxy;
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
# the formula grows like $\log n$ forever. The cell computes the limit per prompt. It averages
# 12.415 nats, more than twice the exact KL at $n = 4096$ (5.697), and only 16 of the 100 prompts
# are within 0.01 nats of theirs: where the top answer is very unlikely under $\pi$ (the largest
# limit is 18.417 nats: an answer drawn about once in a hundred million samples), 4,096 samples
# rarely contain it. So the
# formula is not merely a little high: for $n$ past a prompt's $1/\pi(\text{top block})$ it keeps
# rising while the truth stops.
#
# </details>

# %% tags=["hide-input"]
limit = np.zeros(len(pairs))
for i, span in enumerate(comps.spans()):
    score, p = proxy[span], comps.probs[span]
    limit[i] = -np.log(p[score == score.max()].sum().item())
kl_4096 = exact.best_of_n_table(comps, proxy, [4096])["kl"][0].numpy()
print(f"limit of the exact KL as n grows, mean over prompts: "
      f"{limit.mean():.3f} nats")
print(f"exact KL at n = 4096: {kl_4096.mean():.3f} nats; "
      f"log 4096 - 4095/4096 = {bound[-1]:.3f}")
print(f"prompts within 0.01 nats of their limit at n = 4096: "
      f"{int((limit - kl_4096 <= 0.01).sum())} of {len(pairs)}")
print(f"largest limit of a prompt: {limit.max():.3f} nats")

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
# nat, and past it gold falls faster than the proxy rises. In practice one holds out a little
# gold data, or a second and better RM, to find the peak, and stops well before it: the peak is
# flat near its top and the fall beyond it is steep. The cell prints, for chapter 4's RM, the
# gold at $n$ from 1 to 8 and how much the proxy gains there.
#
# </details>

# %% tags=["hide-input"]
for n in (1, 2, 3, 4, 5, 6, 7, 8):
    i = NS.index(n)
    print(f"n = {n}: gold {book['gold'][i]:.4f}, proxy "
          f"{book['proxy'][i]:+.3f}, KL {book['kl'][i]:.3f}")
