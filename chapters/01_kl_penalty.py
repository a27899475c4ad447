# %% [markdown]
# # 1. The leash: a sampled KL penalty
#
# Reinforcement learning from human feedback (RLHF) fine-tunes a language model, the
# *policy*, to earn a high score from a *reward model* that was itself trained on human
# preferences {cite}`ziegler2019finetuning,stiennon2020summarize,ouyang2022instructgpt`.
# Every one of those systems ties the policy to a frozen copy of the model it started from,
# the *reference* (the supervised fine-tuned, or SFT, model), with a penalty on how far the
# two have drifted apart. This chapter is about that penalty: what it measures, why it is
# computed from a handful of sampled tokens instead of exactly, and how noisy that shortcut is.
#
# By the end you will have written `kl_penalty`, the function the rest of the book uses, and
# you will have measured three ways of estimating the same KL divergence against their exact
# values.
#
# ```{admonition} What you need
# :class: tip
# No earlier chapter: Python and NumPy, and what a probability distribution and an expected
# value are. A run of the whole notebook takes under ten seconds on a 2-core CPU.
# ```

# %%
import matplotlib.pyplot as plt
import numpy as np

import minirlhf
from minirlhf.course.exercises import check
from minirlhf.course.explorer import explore, show_figure
from minirlhf.palette import BLUE, GREEN, ORANGE, YELLOW  # color-blind safe
from minirlhf.studies import kl_estimators

# %% [markdown]
# ## Why a leash
#
# The reward model is a learned *proxy* for what people want. It was trained on a limited set
# of comparisons, so it is right on text that looks like its training data and can be
# arbitrarily wrong elsewhere. A policy optimized hard against it will find the elsewhere:
# outputs the reward model overrates, often repetitive or no longer fluent. The reward goes
# up while quality, as a person would judge it, goes down. This is called *reward hacking*;
# Gao et al. measured how reliably it happens as optimization pressure grows
# {cite}`gao2023scaling`.
#
# The standard remedy is to maximize the reward *minus* a price for moving away from the
# reference policy $\pi_{\mathrm{ref}}$:
#
# $$
# \max_\theta\;
# \mathbb{E}_{x \sim \mathcal{D},\; y \sim \pi_\theta(\cdot \mid x)}
# \big[\, R(x, y) \,\big]
# \;-\; \beta\, \mathrm{KL}\big(\pi_\theta(\cdot \mid x) \,\big\|\, \pi_{\mathrm{ref}}(\cdot \mid x)\big).
# $$
#
# Here $x$ is a prompt, $y$ a completion sampled from the policy, $R$ the reward model's
# score and $\beta \ge 0$ the strength of the leash. The KL term is small while the policy
# still writes the way the reference does and grows as it wanders off, so the optimizer
# only moves where the extra reward pays for the extra distance. The leash cannot make a bad
# reward model good; it limits how far the policy can go to exploit it. Chapters 5 to 7 of
# this book run that experiment with a reward model that has a known blind spot.
#
# ## Five words from reinforcement learning
#
# Training a model from a score, rather than from examples to copy, is reinforcement learning
# (RL), and this book uses a few of its words from here on. In our setting they mean:
#
# - **policy** $\pi_\theta$: the language model being trained. Given the text so far, it gives
#   every possible next token a probability.
# - **action**: one token the policy writes, $y_t$. The **state** $s_t$ is what it sees when it
#   chooses: the prompt plus the tokens written so far.
# - **episode**: one completion, from the prompt to the token that ends it.
# - **reward**: a number paid for an action. The reward model scores a whole completion, so
#   its score $R$ is paid on the last token and every other token gets 0; the leash below adds
#   a small charge on every token.
# - **return**: the sum of the rewards of an episode. The *return-to-go* $G_t$ of token $t$ sums
#   the rewards of token $t$ and of every token after it: what is still to come when the policy
#   chooses $y_t$.
#
# Training raises the probability of actions that led to a high return. Chapter 2 derives how,
# and chapter 3 sets text generation up as a full RL problem (a Markov decision process).

# %% [markdown]
# ## Why a sampled estimate
#
# A completion is a sequence of tokens, and the KL between two models over whole sequences
# splits into a sum over positions. At position $t$, with the prompt and the tokens so far as
# context $s_t$, the exact per-position divergence is a sum over the whole vocabulary $V$:
#
# $$
# \mathrm{KL}_t \;=\; \sum_{v \in V} \pi_\theta(v \mid s_t)\,
# \big[\log \pi_\theta(v \mid s_t) - \log \pi_{\mathrm{ref}}(v \mid s_t)\big].
# $$
#
# That needs both models' full distributions at every position of every completion in the
# batch: with a vocabulary of 50,000 tokens and completions hundreds of tokens long, it is a
# lot of memory for a number that is mostly used as a penalty and a diagnostic. The tokens we
# train on were *sampled from the policy*, though, and the sum above is an expectation over
# exactly that sampling. So the log-ratio of the one token we did sample,
#
# $$
# \mathrm{kl}_t \;=\; \log \pi_\theta(y_t \mid s_t) - \log \pi_{\mathrm{ref}}(y_t \mid s_t),
# $$
#
# is an unbiased estimate of $\mathrm{KL}_t$, and it needs only two numbers per token, the
# log-probs that training computes anyway.
#
# Let us see it on the task of this book: prompts are sums such as `23+45=`, the vocabulary
# is the 13 characters `0123456789+=;`, and a completion is the answer followed by `;`. The
# cell below writes down a reference and a policy for the first three positions after
# `23+45=` (a real model's distribution at each position depends on the tokens before it;
# fixing three distributions keeps the code short). The policy is the reference made more
# sure of the right answer, `68;`.

# %%
VOCAB = "0123456789+=;"


def log_softmax(z):
    """Return log-probabilities from logits along the last axis."""
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def logits_from(preferred):
    """Return logits (positions, 13): 0 for digits and ';', -4 for '+'
    and '=', then the values of `preferred`, one dict per position."""
    z = np.zeros((len(preferred), len(VOCAB)))
    z[:, VOCAB.index("+")] = z[:, VOCAB.index("=")] = -4.0
    for t, prefs in enumerate(preferred):
        for char, value in prefs.items():
            z[t, VOCAB.index(char)] = value
    return z


def show(values):
    """Return numbers as one string, 3 decimals each, sign included."""
    return " ".join(f"{v:+.3f}" for v in values)


# Log-probs of all 13 tokens at the 3 positions after "23+45=": (3, 13)
logp_ref_table = log_softmax(logits_from([
    {"6": 3.0, "5": 1.5, "7": 1.5},
    {"8": 2.5, "9": 1.5, "7": 1.5, ";": 0.5},
    {";": 3.5},
]))
logp_pol_table = log_softmax(logits_from([
    {"6": 4.0, "5": 1.5, "7": 1.5},
    {"8": 3.5, "9": 1.5, "7": 1.5, ";": 0.5},
    {";": 4.5},
]))
probs = np.exp(logp_pol_table)  # (3, 13)

# The exact KL(policy || reference) per position: a sum over 13 tokens.
exact_kl = (probs * (logp_pol_table - logp_ref_table)).sum(-1)  # (3,)

# Sample six completions; keep only the two log-probs of each token.
rng = np.random.default_rng(0)
pos = np.arange(3)
samples = []
print("completion   kl_t per token (k1)     mean")
for _ in range(6):
    tokens = [rng.choice(len(VOCAB), p=probs[t]) for t in pos]
    logp_policy = logp_pol_table[pos, tokens]  # (3,)
    logp_reference = logp_ref_table[pos, tokens]  # (3,)
    text = "".join(VOCAB[i] for i in tokens)
    samples.append((text, logp_policy, logp_reference))
    kl = logp_policy - logp_reference
    print(f"{text:<12} {show(kl)}   {kl.mean():+.3f}")
print(f"\nexact KL_t   {show(exact_kl)}   {exact_kl.mean():+.3f}")

# %% [markdown]
# Read the table row by row. A sampled token the policy likes more than the reference does
# gives a positive $\mathrm{kl}_t$; a token it likes *less* (a wrong digit the policy has
# learned to avoid but still sampled) gives a negative one. Single estimates swing far above
# and below the exact values on the last line, yet they are right on average: the next cell
# averages each position over 200,000 sampled completions.

# %%
n = 200_000
draws = np.stack(
    [rng.choice(len(VOCAB), size=n, p=probs[t]) for t in pos], axis=1
)  # (n, 3)
kl_draws = logp_pol_table[pos, draws] - logp_ref_table[pos, draws]
print(f"mean of {n:,} k1 samples   {show(kl_draws.mean(axis=0))}")
print(f"exact KL_t                   {show(exact_kl)}")
stds = " ".join(f"{v:6.3f}" for v in kl_draws.std(axis=0))  # no sign
print(f"std of one k1 sample         {stds}")

# %% [markdown]
# The averages match the exact values to within sampling error, and one sample's standard
# deviation is several times the quantity it estimates. Keep that ratio in mind; we measure it carefully in a moment.
#
# ## Exercise 1.1: `kl_penalty`
#
# Write the penalty that the rest of the book uses. It takes the log-probs of the sampled
# tokens under the policy and under the reference, one number per token, and the
# coefficient $\beta$:
#
# $$
# \mathrm{kl}_t = \texttt{logp\_policy}_t - \texttt{logp\_reference}_t,
# \qquad
# \texttt{penalty} = \beta \cdot \frac{1}{T}\sum_{t=1}^{T} \mathrm{kl}_t .
# $$
#
# **Contract.**
#
# - Return a Python `float`, rounded to 2 decimals with Python's built-in `round`. `round`
#   sends an exact half to the even neighbour and works on the binary value of the float, so
#   `round(0.125, 2)` is `0.12` and `round(0.375, 2)` is `0.38`. The checks expect exactly
#   this rule. NumPy's `np.round` follows another: it rounds `100 * x`, which for 0.405 lands
#   exactly on a tie and goes to the even digit, so `np.round(0.405, 2)` gives `0.4` where
#   `round(0.405, 2)` gives `0.41`.
# - Keep the sign. One token's $\mathrm{kl}_t$ can be negative, and so can the mean over a few
#   tokens. Do not clip at 0 and do not take absolute values: the estimate is unbiased only
#   with its negative samples.
# - No mask: the mean runs over every token you are given. Identical inputs give `0.0`.
# - Inputs may be lists or NumPy arrays; convert them with `np.asarray(x, dtype=float)`. NumPy
#   only.
#
# **Examples.** `kl_penalty([-1, -2], [-1.5, -2.5], 0.1)` returns `0.05` (each token's
# $\mathrm{kl}_t$ is 0.5); `kl_penalty([-2, -3], [-1, -1], 1.0)` returns `-1.5` (the policy
# gives its own samples *less* probability than the reference does, which happens with few
# tokens).
#
# **How it is judged.** The check cell runs your function on its cases, among them both
# examples, a single token, a negative mean, plain lists, NumPy arrays, $\beta = 0$, a
# rounding tie and 0.405, and compares each result with the expected float. When a case
# fails, its report shows that case's input, the value expected and what went wrong; when
# all pass, it only says so.
# Open the hints one at a time if you are stuck.

# %% tags=["solution"]
def kl_penalty(logp_policy, logp_reference, beta):
    """Return beta * mean(logp_policy - logp_reference), rounded to 2
    decimals, as a Python float."""
    # BEGIN SOLUTION
    logp_policy = np.asarray(logp_policy, dtype=float)
    logp_reference = np.asarray(logp_reference, dtype=float)
    kl = logp_policy - logp_reference  # k1, one value per token
    return round(float(beta * kl.mean()), 2)
    # END SOLUTION

# %% [hints] kl_penalty

# %%
check("kl_penalty", kl_penalty);

# %% [markdown]
# The package has the same function as `minirlhf.kl_penalty`, with one addition: it refuses
# bad input with a `ValueError` that names the argument (different lengths, an empty list, a
# NaN, a negative $\beta$), because a silent NaN in a penalty ruins a training run many steps
# later. The cells below use the package's version, so they run even before you have written
# yours.

# %%
print(minirlhf.kl_penalty([-1, -2], [-1.5, -2.5], 0.1))
try:
    minirlhf.kl_penalty([-1, -2], [-1.5], 0.1)
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# ## Three estimators of the same KL
#
# The per-token log-ratio is one of three estimators that Schulman compares in his note
# "Approximating KL Divergence" {cite}`schulman2020klapprox`. Getting the direction right
# matters, so here is the dictionary. The note estimates
# $\mathrm{KL}[q, p] = \mathbb{E}_{x \sim q}\big[\log q(x) - \log p(x)\big]$ from samples of
# $q$, and writes $r = p(x)/q(x)$. In RLHF the samples come from the policy, so **$q$ is the
# policy and $p$ the reference**, and with our per-token
# $\mathrm{kl} = \log \pi_\theta - \log \pi_{\mathrm{ref}} = -\log r$:
#
# | name | formula in our terms | formula in the note | never negative | unbiased |
# | --- | --- | --- | --- | --- |
# | k1 | $\mathrm{kl}$ | $-\log r$ | no | yes |
# | k2 | $\mathrm{kl}^2 / 2$ | $\tfrac12 (\log r)^2$ | yes | no |
# | k3 | $e^{-\mathrm{kl}} - 1 + \mathrm{kl}$ | $(r - 1) - \log r$ | yes | yes |
#
# k3 is k1 plus $r - 1$, a term whose mean under the policy is exactly zero
# ($\mathbb{E}_q[p/q] = \sum_x p(x) = 1$), so it adds no bias. It is negatively correlated with
# k1, so it cancels much of k1's noise, and since $\log r \le r - 1$ the sum is never
# negative. GRPO, a later variant of proximal policy optimization (PPO, the training
# algorithm chapter 2 builds; chapter 8 builds GRPO), uses k3 as its KL term, as a separate
# term of the loss rather than a charge inside the reward (chapter 2 compares the two
# places) {cite}`shao2024deepseekmath`, and so does the GRPO trainer of TRL,
# Hugging Face's library of RLHF trainers (`trl/trainer/grpo_trainer.py`); TRL's PPO trainer
# lets you choose k1 (the
# default) or k3 for the KL it puts into the reward (`kl_estimator` in
# `trl/experimental/ppo/ppo_config.py`).
#
# To measure the three we need a case where the true KL is known. The note's case: $q$ is the
# standard normal $\mathcal{N}(0, 1)$, $p = \mathcal{N}(\mu, 1)$, and
# $\mathrm{KL}[q, p] = \mu^2/2$. We take $\mu = 0.1$ (a KL of 0.005, the size of a per-token
# KL in a gently trained policy) and $\mu = 1$ (a KL of 0.5), draw ten million samples from
# $q$, and report each estimator's bias and standard deviation *divided by the true KL*, the
# Monte Carlo value with its standard error beside the exact value (derived below) and the
# note's published table.

# %%
rows = kl_estimators.study(mus=(0.1, 1.0), n=10_000_000, seed=0)
print(kl_estimators.format_study(rows))

# %% [markdown]
# What the table says:
#
# - **k1 is right on average and very noisy when the KL is small.** At $\mu = 0.1$ one
#   sample's standard deviation is twenty times the KL itself, because half of the samples are
#   negative and the positives only just outweigh them. Averaging $n$ tokens divides the
#   noise by $\sqrt{n}$, so a per-token KL of this size needs more than a thousand tokens
#   before its mean is two standard errors from zero and its sign is reliable. This is why a KL logged from a small batch jumps around, and why a
#   single completion's mean $\mathrm{kl}$ (the exercise's second example) can be negative.
# - **k3 has the same mean and, near the reference, a fraction of the noise.** Its standard
#   deviation is about 1.4 times the KL at $\mu = 0.1$, and it never goes below zero. Its lead
#   shrinks as the divergence grows: at $\mu = 1$ it is 1.695 against k1's 2.000, and a little
#   further out k1 is the quieter one (we find where below).
# - **k2 is biased, and the bias grows with the divergence.** The exact bias is $\mu^2/4$ of
#   the KL: a quarter of a percent at $\mu = 0.1$, a quarter of the whole KL at $\mu = 1$.
#   Near the reference it is as good as k3; far from it, it overstates the KL.
# - **Ten million samples barely resolve a bias of 0.0025.** k2's Monte Carlo bias at
#   $\mu = 0.1$ sits a couple of standard errors from the exact value, and so does k3's,
#   whose exact bias is 0. That is not a bias of k3: the same samples feed k2 and k3, which
#   nearly coincide there, so their sampling errors move together (the trick below uses
#   exactly that). The note's 0.002 is a simulation too. The exact column is the one to
#   trust, and the closed forms below are what make it exact.
#
# One trick sharpens the small-$\mu$ estimate a lot. k2 and k3 agree to second order in
# $\mathrm{kl}$, so their per-sample *difference* is tiny and nearly noiseless, and since k3
# is unbiased, the mean of $k2 - k3$ estimates k2's bias on its own:

# %%
ratio, se = kl_estimators.paired_difference(0.1, "k2", "k3", n=10_000_000)
exact = kl_estimators.closed_form(0.1)["k2"][0]
print(f"k2 bias / KL at mu = 0.1 from k2 - k3: {ratio:.5f} ± {se:.5f}")
print(f"k2 bias / KL at mu = 0.1, exact:       {exact:.5f}")

# %% [markdown]
# <details class="answer">
# <summary>Worked answer: the closed forms in the table</summary>
#
# With $x \sim \mathcal{N}(0,1)$ and $p = \mathcal{N}(\mu, 1)$,
# $\log r = \log p(x) - \log q(x) = \mu x - \mu^2/2$, so $\mathrm{kl} = -\log r$ is normal with
# mean $\mu^2/2$ (the true KL, which is why k1 is unbiased) and variance $\mu^2$.
#
# - **k1.** The standard deviation is $\mu$, so std / KL $= \mu / (\mu^2/2) = 2/\mu$: 20 at
#   $\mu = 0.1$, 2 at $\mu = 1$.
# - **k2.** For a normal $Y$ with mean $m$ and variance $s^2$, $\mathbb{E}[Y^2] = s^2 + m^2$
#   and $\mathrm{Var}[Y^2] = 2s^4 + 4m^2s^2$. With $Y = \log r$, $m = -\mu^2/2$, $s^2 = \mu^2$:
#   $\mathbb{E}[k_2] = \mu^2/2 + \mu^4/8$, a bias of $\mu^4/8$, that is $\mu^2/4$ of the KL;
#   and $\mathrm{Var}[k_2] = (2\mu^4 + \mu^6)/4$, so std / KL $= \sqrt{2 + \mu^2}$.
# - **k3.** $r = e^{\log r}$ is log-normal with $\mathbb{E}[r] = 1$ and
#   $\mathrm{Var}[r] = e^{\mu^2} - 1$; for a normal $Y$, $\mathrm{Cov}(e^Y, Y) = s^2\,\mathbb{E}[e^Y] = \mu^2$.
#   So $\mathrm{Var}[(r-1) - \log r] = (e^{\mu^2} - 1) + \mu^2 - 2\mu^2 = e^{\mu^2} - 1 - \mu^2$,
#   and std / KL $= \sqrt{e^{\mu^2} - 1 - \mu^2} \,/\, (\mu^2/2)$: 1.417 at $\mu = 0.1$,
#   1.695 at $\mu = 1$. For small $\mu$ it tends to $\sqrt 2$, like k2's.
#
# These are the functions `estimators.closed_form` evaluates.
#
# </details>
#
# The closed forms tell how far k3's lead reaches. k1's std / KL, $2/\mu$, falls as the
# divergence grows, while k3's rises from $\sqrt 2$, because $e^{\mu^2}$ takes over. The two are
# equal where $e^{\mu^2} - 1 - \mu^2 = \mu^2$, that is where $x = \mu^2$ solves $e^x = 1 + 2x$;
# `estimators.std_crossover` finds that root.

# %%
mu_cross = kl_estimators.std_crossover()
print(f"k3 is noisier than k1 beyond mu = {mu_cross:.3f}, "
      f"a true KL of {kl_estimators.true_kl(mu_cross):.3f}")
print(f"{'mu':>5}  {'k1 std/KL':>10}  {'k3 std/KL':>10}")
for mu in (0.1, 0.5, 1.0, mu_cross, 1.5, 2.0):
    exact = kl_estimators.closed_form(mu)
    print(f"{mu:5.3f}  {exact['k1'][1]:10.3f}  {exact['k3'][1]:10.3f}")

# %% tags=["hide-input"]
mus = np.linspace(0.05, 2.0, 400)
noise = {name: [kl_estimators.closed_form(m)[name][1] for m in mus]
         for name in ("k1", "k3")}  # std / KL of one sample, per mu


def draw_noise(narrow=False):
    """Return the figure: std / KL of one sample of k1 and k3 against mu
    (narrow: laid out for a phone)."""
    size = 9 if narrow else 10  # font size, points
    fig, ax = plt.subplots(figsize=(3.6, 3.0) if narrow else (6.5, 3.2),
                           constrained_layout=True)
    for name, color in (("k1", BLUE), ("k3", GREEN)):
        ax.plot(mus, noise[name], color=color, lw=2, label=name)
    ax.axvline(mu_cross, color="black", ls=":", lw=1.2,
               label=f"equal noise, mu = {mu_cross:.2f}")
    ax.set_xlabel("mu, the mean of p = N(mu, 1)" + ("" if narrow else
                  "; q = N(0, 1)"), fontsize=size)
    ax.set_ylabel("std of one sample / true KL", fontsize=size)
    ax.set_yscale("log")
    ax.set_yticks([1, 2, 5, 10, 20, 40], ["1", "2", "5", "10", "20", "40"])
    ax.minorticks_off()
    ax.tick_params(labelsize=size)
    if narrow:  # above the plot, clear of the dotted line
        fig.legend(frameon=False, fontsize=size, ncol=3,
                   loc="outside upper center")
    else:
        ax.legend(frameon=False, fontsize=size, loc="upper right")
    return fig


show_figure(
    draw_noise,
    alt="The standard deviation of one sample divided by the true KL, "
        "against mu, for k1 (falling as 2 / mu) and k3 (rising from the "
        f"square root of 2); the curves cross at mu = {mu_cross:.2f}.",
    caption="Noise of a single-sample estimate relative to the KL, from "
            "the closed forms, for q = N(0, 1) and p = N(mu, 1). Left of "
            "the dotted line k3 is the quieter estimator, right of it k1.",
)

# %% [markdown]
# For this pair of Gaussians the crossover sits at a true KL of 0.628 nats (printed
# above), far more than the per-token KL of a gently trained policy. Other pairs of
# distributions cross elsewhere, but the pattern is general: near the reference k3 is much the
# quieter, and it loses in the tail, where a sample with a large negative $\mathrm{kl}$ makes
# $e^{-\mathrm{kl}}$, and so k3, explode.
#
# The histograms show the same thing sample by sample. Each panel draws single-sample
# estimates divided by the true KL, so the truth sits at 1.

# %% tags=["hide-input"]
hist_rng = np.random.default_rng(1)
n_hist = 100_000  # samples per panel
spans = {0.1: (-60, 60), 1.0: (-6, 10)}  # plotted range of estimate / KL
scaled = {}  # mu -> {estimator: single-sample estimates / true KL}
for mu, span in spans.items():
    logq, logp = kl_estimators.gaussian_logps(mu, n_hist, hist_rng)
    kl_true = kl_estimators.true_kl(mu)
    scaled[mu] = {name: np.clip(k(logq, logp) / kl_true, *span)
                  for name, k in kl_estimators.ESTIMATORS.items()}


def draw_histograms(narrow=False):
    """Return the figure: a histogram of single-sample estimates / KL per
    estimator, one panel per mu (narrow: panels stacked, for a phone)."""
    size = 9 if narrow else 10  # font size, points
    fig, axes = plt.subplots(*((2, 1) if narrow else (1, 2)),
                             figsize=(3.6, 5.8) if narrow else (6.8, 3.5),
                             constrained_layout=True)
    for ax, (mu, span) in zip(axes, spans.items()):
        bins = np.linspace(*span, 121)
        colors = (BLUE, YELLOW, GREEN)
        for (name, values), color in zip(scaled[mu].items(), colors):
            ax.hist(values, bins=bins, histtype="step", lw=1.6, color=color,
                    label=name, density=True)
        ax.axvline(1.0, color="black", ls=":", lw=1.2, label="true KL")
        ax.set_title(f"p = N({mu:g}, 1), KL = {kl_estimators.true_kl(mu):g}",
                     fontsize=size)
        ax.set_xlabel("single-sample estimate / true KL", fontsize=size)
        ax.set_ylabel("density (log scale)", fontsize=size)
        ax.set_yscale("log")
        ax.tick_params(labelsize=size)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, frameon=False, fontsize=size, ncol=4,
               loc="outside upper center")  # above: clear of the curves
    return fig


show_figure(
    draw_histograms,
    alt="Histograms of single-sample KL estimates divided by the true "
        "KL, for mu = 0.1 and mu = 1. k1 spreads widely on both sides of "
        "zero. k2 and k3 are never negative: most of their samples lie "
        "near 0, and a long right tail brings their mean up to the "
        "truth. At mu = 0.1 the k2 curve hides under the k3 curve.",
    caption="Single-sample estimates of KL[q, p] divided by the true KL "
            f"(dotted line at 1), q = N(0, 1), {n_hist:,} samples per "
            "panel. k2 and k3 pile up near 0, with a tail to the right; "
            "at mu = 0.1 they nearly coincide and k3 hides k2. Values "
            "outside the plotted range are piled at its edges.",
)

# %% [markdown]
# One caution before we use these in training. The table is about the *value* of each
# estimate. Training cares about something else: the *push* an estimate gives the policy,
# its gradient, and an estimator with a good value can push the wrong way. That question
# needs the policy gradient, which chapter 2 derives, and [chapter 7](07_leash_off.ipynb)
# answers it in its worked answer "why k1 in the reward and not k3" (TRL's PPO trainer offers
# both, through `kl_estimator` in `trl/experimental/ppo/ppo_config.py`). The short answer:
# in the reward, k1 gives the right push on average and k3 does not.
#
# ## The leash in numbers: a $\beta$ slider
#
# Take the correct completion `68;` from the samples above and say the reward model scores it
# $R = 1$. RLHF implementations in the style of InstructGPT turn the penalty into a reward
# *per token*: each token is charged $-\beta\,\mathrm{kl}_t$ and the last one also receives
# $R$. The completion's total, its *shaped return*, is then
# $R - \beta \sum_t \mathrm{kl}_t$. The exercise's `kl_penalty` reports the same leash as a
# per-token average, $\beta \cdot \mathrm{mean}_t\,\mathrm{kl}_t$, the number worth logging
# because it does not grow with the length of the completion.
#
# Move $\beta$ and watch both. In JupyterLab the slider redraws live; in the book its frames
# were drawn in advance.

# %%
completion, logp_policy, logp_reference = next(
    s for s in samples if s[0] == "68;"
)
kl = logp_policy - logp_reference  # (3,) per-token k1
R = 1.0  # the reward model's score of the whole completion
print(f"{completion!r}: kl_t {show(kl)}, sum {kl.sum():.3f}, "
      f"mean {kl.mean():.3f}")
print("beta   kl_penalty   shaped return R - beta * sum(kl_t)")
for beta in (0.0, 0.1, 0.5, 1.0, 1.5):
    penalty = minirlhf.kl_penalty(logp_policy, logp_reference, beta)
    print(f"{beta:<4}   {penalty:10.2f}   {R - beta * kl.sum():10.2f}")


# %% tags=["hide-input"]
def draw_leash(beta, narrow=False):
    """Return a figure: the per-token shaped rewards at this beta, and
    the penalty and the shaped return against beta (narrow: the two
    panels stacked, for a phone)."""
    size = 9 if narrow else 10  # font size, points
    fig, (left, right) = plt.subplots(
        *((2, 1) if narrow else (1, 2)),
        figsize=(3.6, 6.2) if narrow else (6.8, 3.4))
    # Fixed margins: a constrained layout would triple the drawing time.
    if narrow:
        fig.subplots_adjust(left=0.19, right=0.97, top=0.95, bottom=0.08,
                            hspace=0.45)
    else:
        fig.subplots_adjust(left=0.12, right=0.99, top=0.91, bottom=0.15,
                            wspace=0.4)
    # Left (top on a phone): what each token is paid.
    x = np.arange(len(kl))
    score = np.where(x == len(kl) - 1, R, 0.0)
    left.bar(x, score, color=BLUE, label="reward-model score R")
    left.bar(x, -beta * kl, color=ORANGE, label="−β kl_t")
    left.scatter(x, score - beta * kl, color="black", zorder=3, s=18,
                 label="shaped reward r_t")
    left.axhline(0, color="grey", lw=0.8)
    left.set_xticks(x, [repr(c) for c in completion])
    left.set_xlabel("token of the completion", fontsize=size)
    left.set_ylabel("reward (reward-model units)", fontsize=size)
    left.set_ylim(-0.8, 1.6)  # room for the legend above the score's bar
    left.set_title(f"per-token shaped reward, β = {beta:g}", fontsize=size)
    left.legend(frameon=False, fontsize=8, loc="upper left")
    # Right (bottom on a phone): the two summaries against beta.
    betas = np.linspace(0, 1.5, 151)
    ret, pen = R - beta * kl.sum(), beta * kl.mean()
    right.plot(betas, R - betas * kl.sum(), color=BLUE,
               label="shaped return R − β Σ kl_t")
    right.plot(betas, betas * kl.mean(), color=ORANGE,
               label="penalty β · mean kl_t")
    # A drop line from the upper dot: it never crosses the legend.
    right.vlines(beta, -0.55, max(ret, pen), color="black", ls=":", lw=1)
    right.scatter([beta, beta], [ret, pen], color=[BLUE, ORANGE],
                  zorder=3)
    right.set_xlabel("β (KL coefficient)", fontsize=size)
    right.set_ylabel("reward (reward-model units)", fontsize=size)
    right.set_ylim(-0.55, 1.1)
    right.set_title(f"return {ret:.2f}, penalty {pen:.2f}", fontsize=size)
    right.legend(frameon=False, fontsize=8, loc="upper right")
    for ax in (left, right):
        ax.tick_params(labelsize=size)
    return fig


explore(
    draw_leash,
    {"beta": np.round(np.linspace(0, 1.5, 16), 2)},
    default={"beta": 0.1},
    labels={"beta": "β"},
    alt="For the completion '68;' at beta = {beta}: left, the per-token "
        "shaped rewards; right, the shaped return falling and the "
        "penalty rising linearly with beta.",
    caption="The leash on the completion '68;'. Move the β slider. First "
            "panel: what each token is paid, −β kl_t on every token and "
            "the score R on the last (dots: their sum r_t). Second panel: "
            "the shaped return and the per-token penalty against β; the "
            "dots mark the slider's β. The return falls three times as "
            "fast as the penalty rises.",
)

# %% [markdown]
# Both summaries are linear in $\beta$. The penalty rises with slope $\mathrm{mean}_t\,
# \mathrm{kl}_t$ and the return falls with slope $\sum_t \mathrm{kl}_t$, three times steeper
# for three tokens. At large $\beta$ the leash can outweigh the reward itself: the policy is
# then paid more for staying where it is than for being right.

# %% [markdown]
# Two design questions come with this leash: should it charge every token, or the completion
# once? And how should $\beta$ be chosen? Both answers lean on ideas later chapters teach (the
# policy gradient in chapter 2, a learned value function and the adaptive KL controller in
# chapter 7). Chapter 7 answers them once those are on the table: the first in its section
# "What the batch baseline left out", the second in exercise 7.1.

# %% [markdown]
# ## Summary
#
# You can now:
#
# - say why RLHF ties the policy to a frozen reference, and what $\beta$ trades: reward
#   against distance, never a bad reward model made good;
# - estimate the KL from the sampled tokens alone with your `kl_penalty` (k1), and explain why
#   one token's value, or a short completion's mean, can be negative and must keep its sign;
# - choose among k1, k2 and k3 from their bias and noise near and far from the reference, and
#   keep apart what is good for a *value* from what is good for a *gradient* (chapter 7);
# - turn the leash into per-token rewards and a shaped return, and read how both move with
#   $\beta$.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. Sample size.** Rerun the estimator table with `n=1_000_000` and with three different
# seeds. How does the standard error of the bias change, and how many samples would k1 need
# to tell a bias of 1% of the KL from zero at $\mu = 0.1$?
#
# <details class="answer">
# <summary>Worked answer: sample size</summary>
#
# The standard error of a mean falls as $1/\sqrt{n}$, so ten times fewer samples make it
# $\sqrt{10} \approx 3.2$ times larger, the same for every seed (the cell below prints it per
# seed, beside the value at ten million). The bias estimates themselves move from seed to seed
# by about one standard error, as they should: none of them is evidence of a bias in k1.
#
# For the sample count, use the exact noise: one k1 sample has std / KL $= 2/\mu = 20$ at
# $\mu = 0.1$, so the mean of $n$ samples has a standard error of $20/\sqrt{n}$ in units of the
# KL. To tell a bias of 0.01 from zero at two standard errors, $2 \times 20 / \sqrt{n} \le 0.01$,
# that is $n \ge (4000)^2$, sixteen million samples (the last line below). A per-token KL of
# that size, logged from a batch of a few thousand tokens, is mostly noise.
#
# </details>

# %% tags=["hide-input"]
print("mu = 0.1, k1: bias / KL with its standard error")
for seed in (0, 1, 2):
    bias, _, se = kl_estimators.monte_carlo(
        0.1, n=1_000_000, seed=seed)["k1"]
    print(f"  n = 1,000,000, seed {seed}:  {bias:+.4f} ± {se:.4f}")
row = next(r for r in rows if r["mu"] == 0.1 and r["estimator"] == "k1")
print(f"  n = 10,000,000, seed 0: {row['mc_bias']:+.4f} ± "
      f"{row['mc_bias_se']:.4f}")
std_ratio = kl_estimators.closed_form(0.1)["k1"][1]  # 2 / mu, exactly
needed = (2 * std_ratio / 0.01) ** 2
print(f"samples to see a 1% bias at two standard errors: {needed:,.0f}")

# %% [markdown]
# **2. Far from the reference.** Add $\mu = 2$ and $\mu = 3$ to `estimators.study` (the
# published column will read `-`). How do k2's bias and k3's standard deviation grow? Compare
# with the closed forms: what happens to $e^{\mu^2}$?
#
# <details class="answer">
# <summary>Worked answer: far from the reference</summary>
#
# k2's bias is $\mu^2/4$ of the KL: the whole KL at $\mu = 2$ and more than twice it at
# $\mu = 3$, so k2 overstates the divergence by a factor that grows without limit. k3 stays
# unbiased, but its std / KL is $\sqrt{e^{\mu^2} - 1 - \mu^2} \,/\, (\mu^2/2)$, and $e^{\mu^2}$
# explodes (the last two lines below). The table shows what that does to a simulation. For k1
# and k2 the Monte Carlo values land on the exact ones. For k3 the measured standard deviation
# falls short of the exact one, a little at $\mu = 2$ and by more than half at $\mu = 3$,
# because its variance is carried by rare samples with a large negative $\mathrm{kl}$, whose
# $e^{-\mathrm{kl}}$ is huge, and a million draws rarely contain enough of them. A
# heavy-tailed estimator *looks* quieter than it is until you take very many samples. k1's
# std / KL, $2/\mu$, keeps falling: far from the reference the plain log-ratio is the estimator
# to trust.
#
# </details>

# %% tags=["hide-input"]
print(kl_estimators.format_study(
    kl_estimators.study(mus=(2.0, 3.0), n=1_000_000, seed=0)))
print("\n".join(f"e^(mu^2) at mu = {mu:g}: {np.exp(mu ** 2):,.0f}"
                for mu in (2.0, 3.0)))

# %% [markdown]
# **3. The other direction.** Swap the roles: sample from $p$ and pass $(\log p, \log q)$ as
# (policy, reference). The mean of k1 now estimates $\mathrm{KL}[p, q]$. For two unit-variance
# normals both directions equal $\mu^2/2$; give $p$ a standard deviation of 2 (derive both KLs
# by hand first) to see each estimate follow the distribution it was sampled from.
#
# <details class="answer">
# <summary>Worked answer: the other direction</summary>
#
# For normals, $\mathrm{KL}[\mathcal{N}(m_1, s_1^2), \mathcal{N}(m_2, s_2^2)] = \log(s_2/s_1) +
# \big(s_1^2 + (m_1 - m_2)^2\big)/(2 s_2^2) - 1/2$. With $q = \mathcal{N}(0, 1)$ and
# $p = \mathcal{N}(\mu, 4)$ (standard deviation 2), and $\mu = 1$:
#
# - $\mathrm{KL}[q, p] = \log 2 + (1 + \mu^2)/8 - 1/2$;
# - $\mathrm{KL}[p, q] = -\log 2 + (4 + \mu^2)/2 - 1/2$.
#
# The cell below evaluates both and estimates each with k1 from a million samples: sampled
# from $q$, the mean of $\log q - \log p$ lands on $\mathrm{KL}[q, p]$; sampled from $p$, the
# mean of $\log p - \log q$ lands on $\mathrm{KL}[p, q]$, which here is several times larger
# (the last line). The sampler decides which KL you measure, and in RLHF the sampler is the policy:
# the leash is $\mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})$. The wide $p$ puts mass where
# the narrow $q$ has almost none, and that costs much more when $p$ is the one sampled.
#
# </details>

# %% tags=["hide-input"]
def normal_logpdf(x, mean, std):
    """Return the log-density of N(mean, std^2) at x."""
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std * np.sqrt(2 * np.pi))


mu, n_dir = 1.0, 1_000_000  # q = N(0, 1), p = N(mu, 2^2)
dir_rng = np.random.default_rng(0)
x_q = dir_rng.normal(0.0, 1.0, n_dir)  # samples of q
x_p = dir_rng.normal(mu, 2.0, n_dir)  # samples of p
kl_qp = np.log(2) + (1 + mu ** 2) / 8 - 0.5
kl_pq = -np.log(2) + (4 + mu ** 2) / 2 - 0.5
est_qp = kl_estimators.k1(normal_logpdf(x_q, 0, 1),
                          normal_logpdf(x_q, mu, 2))
est_pq = kl_estimators.k1(normal_logpdf(x_p, mu, 2),
                          normal_logpdf(x_p, 0, 1))
print(f"KL[q, p]: exact {kl_qp:.4f}, k1 on samples of q {est_qp.mean():.4f}")
print(f"KL[p, q]: exact {kl_pq:.4f}, k1 on samples of p {est_pq.mean():.4f}")
print(f"KL[p, q] / KL[q, p] = {kl_pq / kl_qp:.2f}")

# %% [markdown]
# **4. Paired estimates.** Why is the standard error of the mean of $k2 - k3$ so much smaller
# than that of k2 at $\mu = 0.1$, and why does the trick lose its edge at $\mu = 1$? Expand
# both in powers of $\mathrm{kl}$.
#
# <details class="answer">
# <summary>Worked answer: paired estimates</summary>
#
# Write $x = \mathrm{kl}$. Then $k_2 = x^2/2$ and
# $k_3 = e^{-x} - 1 + x = x^2/2 - x^3/6 + x^4/24 - \dots$, so
#
# $$
# k_2 - k_3 = \frac{x^3}{6} - \frac{x^4}{24} + \dots
# $$
#
# The $x^2/2$ that carries nearly all of k2's noise cancels sample by sample, and what is left
# is $x/3$ times smaller than what cancelled. At $\mu = 0.1$ a typical $x$ is about $0.1$ (its
# standard deviation is $\mu$), so the difference is a small fraction of k2, and so is its
# spread. At $\mu = 1$ a typical $x$ is about 1: the leftover terms are as large as the terms
# that cancelled, and the difference is nearly as noisy as k2 itself. The cell below measures the three standard deviations, relative to
# the KL, at both values of $\mu$.
#
# </details>

# %% tags=["hide-input"]
pair_rng = np.random.default_rng(0)
print(f"{'':<8}{'std / KL of one sample':>30}")
print(f"{'mu':<8}{'k2':>10}{'k3':>10}{'k2 - k3':>10}")
for mu in (0.1, 1.0):
    logq, logp = kl_estimators.gaussian_logps(mu, 1_000_000, pair_rng)
    a2, a3 = kl_estimators.k2(logq, logp), kl_estimators.k3(logq, logp)
    kl_true = kl_estimators.true_kl(mu)
    print(f"{mu:<8g}" + "".join(f"{v.std() / kl_true:10.4f}"
                                for v in (a2, a3, a2 - a3)))

# %% [markdown]
# **5. Where the leash wins.** With the slider, find the $\beta$ at which the shaped return of
# `68;` reaches zero, then compute it from the printed $\sum_t \mathrm{kl}_t$. What does a
# policy learn from a correct answer whose shaped return is negative?
#
# <details class="answer">
# <summary>Worked answer: where the leash wins</summary>
#
# The shaped return $R - \beta \sum_t \mathrm{kl}_t$ is zero at $\beta = R / \sum_t
# \mathrm{kl}_t$, with $R = 1$ and the sum printed by the slider's cell; the cell below divides.
# Above that $\beta$ the correct answer's return is negative.
#
# What the policy learns from it depends on what the return is compared with. Chapter 2 shows
# that a training step pushes up completions whose return is above a *baseline* (roughly, what
# the policy usually gets) and pushes down those below. A negative return is then not a
# punishment for being right; it says that this correct answer was bought with more distance
# from the reference than it was worth. If the other completions of the batch score lower
# still, `68;` is still raised; if the leash charges it more than they lose, the policy learns
# to give the correct answer less often, or to give it in a way the reference finds more
# likely. A $\beta$ that large makes staying put the best policy: the leash has won.
#
# </details>

# %% tags=["hide-input"]
print(f"sum of kl_t for '68;': {kl.sum():.3f}\nthe shaped return is zero "
      f"at beta = R / sum = {R / kl.sum():.3f}")

# %% [markdown]
# **6. A mask.** Real batches pad completions to a common length. Add a `mask` argument to your
# `kl_penalty` (1 for real tokens, 0 for padding) and make the mean run over real tokens only.
# Which of the check cases would you change, and which new ones would you add?
#
# <details class="answer">
# <summary>Worked answer: a mask</summary>
#
# The mean becomes a weighted one, $\beta \sum_t m_t\,\mathrm{kl}_t / \sum_t m_t$:
#
# ```python
# def kl_penalty_masked(logp_policy, logp_reference, beta, mask):
#     kl = (np.asarray(logp_policy, dtype=float)
#           - np.asarray(logp_reference, dtype=float))
#     mask = np.asarray(mask, dtype=float)
#     return round(float(beta * (kl * mask).sum() / mask.sum()), 2)
# ```
#
# No existing case needs to change if the mask defaults to all ones: with every $m_t = 1$ the
# weighted mean is the plain one. New cases should catch what a mask can get wrong. A padded
# token with a large log-ratio must not move the result (the cell below runs one such case,
# masked and unmasked); the mean must divide by the number of real tokens, not by the length
# (a row with one real token of three); the mask may arrive as integers, floats or booleans;
# and a mask with no 1 in it has no mean, so it should raise a `ValueError` rather than return
# NaN. Chapter 3 builds exactly this mask for our completions, and every loss and statistic
# of the book uses it.
#
# </details>

# %% tags=["hide-input"]
def kl_penalty_masked(logp_policy, logp_reference, beta, mask):
    """Return beta * the mean of kl over the tokens where mask is 1."""
    kl = (np.asarray(logp_policy, dtype=float)
          - np.asarray(logp_reference, dtype=float))
    mask = np.asarray(mask, dtype=float)
    return round(float(beta * (kl * mask).sum() / mask.sum()), 2)


# two real tokens with kl 0.5, then a padding token with kl -9
padded = ([-1.0, -2.0, -9.0], [-1.5, -2.5, 0.0], 0.1)
print("masked  ", kl_penalty_masked(*padded, mask=[1, 1, 0]))
print("unmasked", minirlhf.kl_penalty(*padded))
