# %% [markdown]
# # 5. The two-arm experiment: RLHF on sums
#
# Everything is in place: a policy that adds correctly about a third of the time (chapter 3),
# a reward model that tells garbage from the truth but not a near-miss from it (chapter 4),
# a verifier that cannot be fooled, the KL leash (chapter 1) and the clipped objective
# (chapter 2). This chapter puts them together into the loop that InstructGPT made famous
# {cite}`ouyang2022instructgpt` and runs it twice, from the same starting policy, with the
# same frozen reference. The two runs, the *arms* of the experiment, differ in where the
# reward comes from, and in the strength of the leash that suits it.
#
# | arm | reward | $\beta$ |
# | --- | --- | --- |
# | rm | the reward model's score | 0.5, a strong leash |
# | verifier | the exact checker: 1 if the sum is right, else 0 | 0.08, a light leash that guards the answer format |
#
# You will write the two pieces that drive both runs (the advantages, with the leash inside
# the reward, and the loss), repeat the experiment over several seeds, and read from the
# curves what the optimizer did with each reward. The short version: it
# maximized the number it was handed.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1 to 4. The first run of this notebook trains the policy and the reward model if
# they are not on disk yet (a few seconds each), then the experiment and a sweep over the
# leash (a minute or two); later runs read them back and take about twenty seconds.
# ```

# %%
import ast
import inspect
import json
import re
import textwrap
from dataclasses import asdict, fields

import matplotlib.pyplot as plt
import numpy as np
import torch

from minirlhf import experiment, ppo, sft, store, task
from minirlhf.course.cases import run_cases
from minirlhf.course.exercises import check, get
from minirlhf.course.explorer import explore, show_figure
from minirlhf.course.frontend import building_book, someone_watching
from minirlhf.course.runs import load_or_run, same_curves
from minirlhf.model import (completion_logprobs, completion_mask, generate,
                            make_generator, n_params, reward_scores)
from minirlhf.palette import ARM_COLORS  # one color per arm, in every figure
from minirlhf.paths import OUTPUTS

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
# **What kind of algorithm this is.** There is no critic here: the baseline is a batch mean,
# not a learned value function. That makes the loop clipped policy gradient with a batch
# baseline, closer to REINFORCE with a baseline {cite}`williams1992reinforce`, to RLOO
# {cite}`ahmadian2024rloo` and to GRPO {cite}`shao2024deepseekmath` than to the PPO of
# InstructGPT {cite}`ouyang2022instructgpt`. Full PPO-RLHF adds three things (TRL's
# `trl/experimental/ppo/ppo_trainer.py` has all three): a *value head* that predicts, for every
# token, the return still to come; a *value loss* that trains it on the returns, weighted by
# `vf_coef` (0.1 in TRL); and *value clipping*, which takes the larger of two squared
# errors, that of the new prediction and that of the new prediction clamped to within
# `cliprange_value` (0.2) of the old one, so that a prediction gains nothing by moving further,
# as the ratio clip does for the policy. The
# advantages then come from the critic's predictions through GAE (chapter 7) instead of from
# a batch mean. Everything else, the rollout, the leash in the per-token reward, the clipped
# surrogate and the mask, is the same as here.
#
# Every setting lives in one dataclass, `ppo.PPOConfig`; its defaults are the recipe, and
# the arms pass their own $\beta$ next to it. The table below is read from the package's
# source rather than retyped: each setting's name and default as written in the class,
# and the docstring under it, which says what the setting does and what TRL calls it.

# %% tags=["hide-input"]
def settings_table(cls, name_w=18, default_w=10, width=77):
    """Return a dataclass's docstring and a text table of its fields (name,
    default, docstring), each read from the class's source."""
    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]  # the class statement

    def wrap(text, w):
        text = " ".join(text.replace("``", "`").split())
        # no line break inside `code` or [an interval]: non-breaking spaces
        text = re.sub(r"`[^`]*`|\[[^]]*\]",
                      lambda m: m.group().replace(" ", "\xa0"), text)
        return [line.replace("\xa0", " ") for line in
                textwrap.wrap(text, w, break_on_hyphens=False)]

    lines = []
    for text in ast.get_docstring(node).split("\n\n"):
        if not text.startswith("Defined in chapter"):
            lines += wrap(text, width) + [""]
    doc_w = width - name_w - default_w
    lines.append(f"{'setting':<{name_w}}{'default':<{default_w}}"
                 "what it does; TRL's counterpart")
    lines.append(f"{'-' * (name_w - 1)} {'-' * (default_w - 1)} "
                 f"{'-' * doc_w}")
    names, body = [], node.body
    for stmt, after in zip(body, body[1:] + [None]):
        if not isinstance(stmt, ast.AnnAssign):
            continue
        name = stmt.target.id
        default = ast.get_source_segment(source, stmt.value)
        has_doc = (isinstance(after, ast.Expr)
                   and isinstance(after.value, ast.Constant)
                   and isinstance(after.value.value, str))
        assert has_doc, f"{name} has no docstring"
        doc = wrap(after.value.value, doc_w)
        names.append(name)
        lines.append(f"{name:<{name_w}}{default:<{default_w}}{doc[0]}")
        lines += [" " * (name_w + default_w) + more for more in doc[1:]]
        lines.append("")
    assert names == [f.name for f in fields(cls)], names  # one row per field
    return "\n".join(lines).rstrip()


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
print(f"{'score':<9} {'mean':>6}  {'std':>5}  {'min':>6}  {'max':>6}  "
      f"{'z min':>5}  {'z max':>5}  clipped")
for name, reward_fn in (("rm", ppo.rm_reward(rm)),
                        ("verifier", ppo.verifier_reward)):
    r = reward_fn(batch_pairs, batch_prompts, batch).float()  # (64,)
    z = ppo.standardized_scores(r, cfg.adv_clip, cfg.adv_eps)  # (64,)
    n_clipped = int((z.abs() == cfg.adv_clip).sum())
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
# **How it is judged.** Ten cases worked by hand, listed in the check's report: no divergence
# (the score reaches every token), the example above, a shorter completion, a baseline over
# the rows that reach a position, a runaway log-ratio clamped, `kl_clamp` as an argument, a
# negative KL, a padding token whose KL must not count, a batch of one, and three rows whose
# baselines differ by position. The result must be a (B, T) tensor within $10^{-4}$ of the
# values worked by hand.

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
# **How it is judged.** Ten cases worked by hand, listed in the check's report: the on-policy
# case, a padding token with a wild ratio that must not count, the ratio clipped above with
# $A > 0$ and below with $A < 0$, a fallen ratio with $A > 0$ left unclipped, a rising ratio
# with $A < 0$ left unclipped, a mean over tokens rather than of row means, advantages that
# differ token by token, `epsilon` as an argument, and a zero advantage. The result must be a
# 0-d tensor within $10^{-4}$ of the value worked by hand.

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
# signatures of the exercises. The next cell hands it yours when they pass every check;
# otherwise the package's references, `minirlhf.ppo.kl_shaped_advantages` and
# `minirlhf.ppo.ppo_token_loss`, and it says which.

# %%
mine = {
    "kl_shaped_advantages": (kl_shaped_advantages, ppo.kl_shaped_advantages),
    "ppo_token_loss": (ppo_token_loss, ppo.ppo_token_loss),
}
drive = {}
for name, (yours, reference_fn) in mine.items():
    verdict = run_cases(yours, get(name))
    if verdict.passed:
        drive[name] = yours
        print(f"Your {name} passes every check: it drives the runs below.")
    else:
        drive[name] = reference_fn
        n_checks = len(verdict.results)
        why = ("is not written yet" if verdict.not_implemented
               else f"passes {verdict.n_passed} of {n_checks} checks")
        print(f"Your {name} {why},\nso the runs below use the package's "
              f"minirlhf.ppo.{name}.\nWrite it, run its check, then run the "
              "notebook from here again:\nyours will drive the runs.")
advantage_fn = drive["kl_shaped_advantages"]
loss_fn = drive["ppo_token_loss"]

# %% [markdown]
# Now the two arms, seed 0, 25 iterations each, with those functions. Nothing else differs between
# them but the reward function and $\beta$; `rm` is passed to both only so that the RM's
# score of the greedy answers can be logged.

# %%
ARMS = {"rm": (ppo.rm_reward(rm), experiment.DEFAULT_BETA["rm"]),
        "verifier": (ppo.verifier_reward,
                     experiment.DEFAULT_BETA["verifier"])}
runs = {}
for arm, (reward_fn, beta) in ARMS.items():
    _, runs[arm] = ppo.ppo_train(
        policy, reference, reward_fn, beta, ppo.PPOConfig(seed=0), rm=rm,
        loss_fn=loss_fn, advantage_fn=advantage_fn, progress=PROGRESS,
        desc=f"{arm} arm, seed 0")
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
# `python -m minirlhf.experiment` does the same from a terminal. The next cell reads the
# results from `outputs/results.json` when they were made by the package's current code
# with these settings and from the same starting policy, and otherwise runs the experiment
# now (under a minute) and writes them there, with the three figures
# (`minirlhf.course.runs.load_or_run` does that bookkeeping for every stored run of this chapter).
#
# The experiment uses the reference functions, and its seed 0 is the pair of runs above. The
# last line of the cell says whether the two agree to the last digit. They do when your
# functions compute what the references compute, operation for operation. Functions that are
# right but round differently (the ratio as `new_logp.exp() / old_logp.exp()`, say) give
# curves that differ in their last digits: every sample depends on all the updates before
# it, so a difference, once made, is carried along.

# %%
SEEDS = [0, 1, 2, 3, 4]
BETA = {arm: beta for arm, (_, beta) in ARMS.items()}


def run_experiment():
    """Return the results of both arms for every seed, laid out as
    `python -m minirlhf.experiment` writes them (it also draws the
    figures)."""
    done = experiment.run_experiment(SEEDS, cfg.iterations, BETA["rm"],
                                     BETA["verifier"], cfg,
                                     progress=PROGRESS)
    experiment.write_outputs(done, OUTPUTS)
    return json.loads((OUTPUTS / "results.json").read_text())


results = load_or_run(
    OUTPUTS / "results.json",
    {"seeds": SEEDS, "iterations": cfg.iterations, "beta": BETA,
     "ppo": asdict(cfg)},
    {(arm, "0"): runs[arm] for arm in ARMS}, run_experiment)
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
# 95% interval of that mean; on the first, the book's reference run (one seed) as open
# markers at its start and end, and on the second the first two yardsticks.

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
    experiment.plot_curves(results, key, short if narrow else ylabel, title,
                           ax=ax)
    if key == "accuracy":
        for arm in ARMS:
            ref = experiment.REFERENCE[arm]
            ax.plot([0, cfg.iterations], [ref["start"], ref["end"]],
                    ls="none", marker="o", mfc="white", mec=ARM_COLORS[arm],
                    ms=8, mew=1.6, label=f"reference run, {arm} arm")
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
            f"prompts ({BAND}; open markers: the book's reference run). The "
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
            f"proxy the rm arm is trained on ({BAND}). By the end, the rm "
            "arm's answers score higher than the verifier arm's although "
            "fewer are right: by the RM's measure, the worse policy looks "
            "the better one.",
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
# The table puts numbers on the figures, beside the book's reference run. Ours are means
# over five seeds with a 95% interval (Student's $t$ with 4 degrees of freedom); the
# reference is a single run, from a policy whose start differed a little from ours.

# %%
summary = experiment.summarize(results)


def pm(mean, half, digits=3, sign=""):
    """Return 'mean ± half' as text (sign="+" always prints the sign)."""
    return f"{mean:{sign}.{digits}f} ± {half:.{digits}f}"


W = 34  # width of the row labels
print(f"{'':<{W}}{'start':>7}{'end, ours':>17}     reference run")
for arm in ARMS:
    s, ref = summary[arm], experiment.REFERENCE[arm]
    print(f"{arm + ' arm, true accuracy':<{W}}{s['start']:>7.3f}"
          f"{pm(s['end'], s['end_ci']):>17}     "
          f"{ref['start']:.3f} -> {ref['end']:.3f}")
for arm in ARMS:
    s, ref = summary[arm], experiment.REFERENCE[arm]
    end = pm(s["rm_score_end"], s["rm_score_end_ci"], 2, "+")
    print(f"{arm + ' arm, RM score of greedy':<{W}}"
          f"{s['rm_score_start']:>+7.2f}{end:>17}     "
          f"about {ref['rm_score']:+.1f}")
for arm in ARMS:
    s, ref = summary[arm], experiment.REFERENCE[arm]
    print(f"{arm + ' arm, KL per token':<{W}}{0:>7.3f}"
          f"{pm(s['kl_end'], s['kl_end_ci']):>17}     {ref['kl']}")

# %% [markdown]
# **Is the gap real?** Each seed gives one pair of runs that share their prompts' seed, so
# the fair comparison is the difference within each seed, with an interval over seeds. The
# same for the gain of each arm over its own start, and for the RM's verdict on the two
# arms at the end.

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
    mean, half = experiment.mean_ci95(d)
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
for text, value, holds in claims:
    verdict = "holds" if holds else "DOES NOT HOLD"
    print(f"{verdict:<15}{text:<56}{value:+.3f}")

# %% [markdown]
# One caution about what these intervals cover. They measure the spread over PPO seeds, all
# starting from one partial-SFT checkpoint, and the checkpoint matters. The book's was
# picked among partial-SFT runs with other seeds, each stopped as soon as it answered a
# third of the prompts right, as one from which this recipe gains clearly. That is a choice
# made after seeing outcomes, so the next cell measures what it hides: it makes the other
# starts the same way (SFT seeds 0 to 4, each stopped at the first multiple of 5 steps where
# greedy accuracy reaches 1/3) and runs both arms from each with PPO seeds 0, 1 and 2,
# averaging each arm's gain over the three. The results are stored in
# `outputs/sft_starts.json` and recomputed when the code changes (about a minute).

# %%
SFT_SEEDS = [0, 1, 2, 3, 4]
PPO_SEEDS = [0, 1, 2]


def partial_policy(seed):
    """Return (policy, steps): SFT with `seed`, stopped at the first
    multiple of 5 steps whose greedy eval accuracy is at least 1/3 (at most
    300 steps)."""
    _, curve = sft.train_sft(sft.SFTConfig(seed=seed, steps=300),
                             eval_every=5, progress=PROGRESS)
    steps = next(s for s, a in zip(curve["steps"], curve["accuracy"])
                 if a >= 1 / 3)
    policy_s, _ = sft.train_sft(sft.SFTConfig(seed=seed, steps=steps),
                                progress=PROGRESS)
    return policy_s, steps


def arm_gain(arm, start, seed):
    """Return an arm's accuracy at the end minus at the start, from the
    partial policy `start`, with PPO seed `seed`."""
    _, log = experiment.run_arm(arm, start, rm, seed, BETA[arm], cfg,
                                progress=PROGRESS)
    return log["accuracy"][-1] - log["accuracy"][0]


def run_starts():
    """Return {'arms': {sft_seed: {'steps', 'start', 'rm', 'verifier'}}}:
    each arm's gain in accuracy from that SFT seed's partial policy, per PPO
    seed."""
    out = {}
    for seed in SFT_SEEDS:
        start, steps = partial_policy(seed)
        row = {"steps": steps, "start": sft.greedy_accuracy(start)}
        for arm in ARMS:
            row[arm] = [arm_gain(arm, start, s) for s in PPO_SEEDS]
        out[str(seed)] = row
    return {"arms": out}


by_start = load_or_run(
    OUTPUTS / "sft_starts.json",
    {"sft_seeds": SFT_SEEDS, "ppo_seeds": PPO_SEEDS, "beta": BETA,
     "ppo": asdict(cfg)},
    {}, run_starts)["arms"]
book_seed = str(sft.SFTConfig().seed)
print(f"mean gain over PPO seeds {PPO_SEEDS}")
print("SFT seed  steps  start   rm arm   verifier arm")
for seed, r in by_start.items():
    mark = "  <- the book's start" if seed == book_seed else ""
    print(f"{seed:>8}  {r['steps']:>5}  {r['start']:.3f}  "
          f"{np.mean(r['rm']):+.3f}   {np.mean(r['verifier']):+.3f}{mark}")
gain_v = {k: float(np.mean(r["verifier"])) for k, r in by_start.items()}
gain_r = {k: float(np.mean(r["rm"])) for k, r in by_start.items()}
n_starts = len(gain_v)
rank = sorted(gain_v, key=gain_v.get, reverse=True).index(book_seed) + 1
n_big = sum(g >= 0.15 for g in gain_v.values())
n_flat = sum(g <= 0.02 for g in gain_r.values())
n_ahead = sum(gain_v[k] > gain_r[k] for k in gain_v)
print()
print(f"verifier arm gains at least 0.15 from {n_big} of {n_starts} starts")
print(f"verifier arm, mean gain over the starts: "
      f"{np.mean(list(gain_v.values())):+.3f}")
print(f"the book's start ranks {rank} of {n_starts} by the verifier arm's "
      "gain")
print(f"rm arm gains at most 0.02 from {n_flat} of {n_starts} starts")
print(f"verifier arm gains more than the rm arm from {n_ahead} of "
      f"{n_starts} starts")

# %% [markdown]
# Read the five lines under the table before the chapter's claims. What carries over from
# start to start is the direction: the verifier arm gains more than the rm arm, and the rm
# arm does not gain. The size does not: "at least 0.15" holds for the book's start, which was chosen
# as one that gains clearly, and the mean over starts is the fairer number for a partial
# policy in general. With 64 samples per iteration and 25 iterations, how much the
# verifier's 0-or-1 signal can teach depends on how many of the policy's samples are right,
# and on which prompts. A single SFT run is an anecdote too.
#
# ## Is it the reward, or the noise?
#
# A careful reader should object at this point. The batch-mean baseline compares each
# completion with the whole batch, whatever its prompt, but the Bradley–Terry loss of
# chapter 4 only ever saw margins between two answers to the *same* prompt: nothing ties one
# prompt's scores to another's. The next cell
# samples 8 completions for each of 64 prompts and splits the variance of each reward into
# the part that depends only on which prompt was drawn and the part that depends on the
# answer.

# %%
K = 8  # completions per prompt
g = make_generator(2)
rep_pairs = task.sample_pairs(cfg.batch_size, g, task.train_pairs())
rep_pairs = rep_pairs.repeat_interleave(K, 0)  # (512, 2)
rep_prompts = task.encode_prompts(rep_pairs)  # (512, 6)
rep = generate(policy, rep_prompts, cfg.temperature, generator=g)  # (512, 4)
prompt_share = {}
print("reward     variance   within a prompt   share of the prompt")
for arm, (reward_fn, _) in ARMS.items():
    r = reward_fn(rep_pairs, rep_prompts, rep).float().view(-1, K)  # (64, 8)
    total, within = r.var(unbiased=False), r.var(1, unbiased=False).mean()
    prompt_share[arm] = 1 - (within / total).item()
    print(f"{arm:<9} {total:>9.3f}   {within:>15.3f}   "
          f"{prompt_share[arm]:>19.0%}")

# %% [markdown]
# For the RM, most of what varies in a batch is which prompt was drawn, not how good the
# answer was. The batch-mean baseline leaves that in the advantages: it does not bias the
# policy gradient, but it is noise, and a baseline per prompt would remove it (a learned
# critic $V(\text{prompt})$, or GRPO's mean over several completions of the same prompt
# {cite}`shao2024deepseekmath`). Could that noise, rather than the RM's blind spot, be what
# holds the rm arm back?
#
# Test it. Hand the rm arm a reward with the prompt's share taken out: the RM's score of the
# completion minus its score of the reference policy's greedy answer to the same prompt. The
# subtracted number depends only on the prompt, so it changes no expected gradient, and it
# needs no ground truth. Five seeds again, stored like the experiment.

# %%
@torch.no_grad()
def rm_minus_prompt_baseline(pairs, prompts, completions):
    """Return the RM's score of each completion minus its score of the
    reference's greedy answer to the same prompt (B,)."""
    greedy = generate(reference, prompts, greedy=True)  # (B, 4)
    baseline = reward_scores(rm, prompts, greedy)  # (B,)
    return reward_scores(rm, prompts, completions) - baseline  # (B,)


def run_centred():
    """Return the rm arm's runs with the per-prompt baseline, every seed."""
    out = {}
    for seed in SEEDS:
        _, log = ppo.ppo_train(policy, reference, rm_minus_prompt_baseline,
                               BETA["rm"], ppo.PPOConfig(seed=seed), rm=rm,
                               progress=PROGRESS)
        out[str(seed)] = {k: log[k] for k in ("accuracy", "rm_score", "kl")}
    return {"arms": {"rm": out}}


centred = load_or_run(
    OUTPUTS / "rm_prompt_baseline.json",
    {"seeds": SEEDS, "beta": BETA["rm"], "ppo": asdict(cfg)},
    {("rm", "0"): runs["rm"]}, run_centred)["arms"]["rm"]
control = {}  # baseline -> metric -> (mean, half-width) at the end
print(f"{'rm arm, end of run':<24}{'true accuracy':>16}{'RM score':>15}"
      f"{'KL':>15}")
centred_logs = [centred[str(s)] for s in SEEDS]
for name, arm_logs in (("batch-mean baseline", logs["rm"]),
                       ("per-prompt baseline", centred_logs)):
    control[name] = {
        k: experiment.mean_ci95([log[k][-1] for log in arm_logs])
        for k in ("accuracy", "rm_score", "kl")}
    print(f"{name:<24}{pm(*control[name]['accuracy']):>16}"
          f"{pm(*control[name]['rm_score'], 2, '+'):>15}"
          f"{pm(*control[name]['kl']):>15}")

# %% [markdown]
# With the noise taken out, the rm arm gets better at what it is handed: the RM's score of
# its answers climbs higher than with the batch mean. Its accuracy does not improve.
#
# The comparison is not clean, though, and the KL column shows why: at the same $\beta$ the
# per-prompt arm moved about twice as far from the reference. The recipe standardizes every
# batch of scores (step 2). Take out the prompt's share of the variance and the batch's
# standard deviation shrinks, so each answer's difference from the others is divided by a
# smaller number: the signal grows against $\beta$ and against the learning rate. The control
# changed two things at once, the noise and the step size. The fairer comparison is at equal
# distance from the reference, which the $\beta$ sweep further down supplies for the
# batch-mean arm (seed 0): the next cell finds the sweep's runs whose final KL brackets the
# per-prompt arm's.

# %%
raw = ppo.rm_reward(rm)(batch_pairs, batch_prompts, batch)  # the batch above
centred_scores = rm_minus_prompt_baseline(batch_pairs, batch_prompts, batch)
std_raw = raw.std(unbiased=False)
std_centred = centred_scores.std(unbiased=False)
print("std of the rm arm's scores over one batch:")
print(f"  raw                           {std_raw:.2f}")
print(f"  with the per-prompt baseline  {std_centred:.2f}")
print("after standardizing, a difference between two answers counts "
      f"{std_raw / std_centred:.1f}\n"
      "times more with the per-prompt baseline")

# %% [markdown]
# ## Watching a run: the training statistics
#
# The eval curves above need a verifier, which real RLHF does not have. What a real run has
# is what the trainer logs about its own batches. `ppo_train` logs them under the names TRL's
# PPO trainer uses (`trl/experimental/ppo/ppo_trainer.py`, where the metrics dict is filled),
# so that the plots below read like a real run's dashboard. Here are both
# arms of the seed-0 run your functions drove.
#
# | name | what it is | what to watch for |
# | --- | --- | --- |
# | `objective/scores` | mean reward of the batch, before normalizing | It should rise. If it rises while an independent measure of quality does not, the policy is exploiting the reward. |
# | `objective/kl` | mean per-token log-ratio to the reference on the sampled tokens (k1) | A steady climb is the policy spending its leash; a jump means one update moved it far. TRL logs the sum over a completion's tokens; ours is per token. |
# | `objective/entropy` | mean per-token entropy of the sampling distribution, in nats | A fall toward 0 means the policy has stopped exploring: every sample of a prompt is the same, and the advantages vanish. |
# | `policy/clipfrac_avg` | fraction of completion tokens where the clip binds: the clipped term is the smaller one, so the token's gradient is cut off (TRL's definition, `pg_losses2 > pg_losses`) | Near 0, the updates barely move the policy; above about 0.2, they are too large for the clip to keep them proximal. A ratio outside the band with the advantage pointing back inside does not count: its gradient is not cut. |
# | `policy/approxkl_avg` | $\tfrac12\,\mathrm{mean}\,(\log r)^2$ over the completion tokens, TRL's estimate of the KL between the sampling policy and the updated one (the k2 of Schulman's note) | How far one batch moved the policy; spikes come before instabilities. It is not `objective/kl`. |
# | `val/completion_length` | mean number of completion tokens, up to and including the first `;` | A drift in length is a classic sign of reward hacking; here it also tells whether the answers kept their format. TRL's PPO logs the count of end tokens in the batch (`val/num_eos_tokens`), its GRPO `completions/mean_length` (`trl/trainer/grpo_trainer.py`). |
# | `loss/policy_avg` | the PPO loss, averaged over the updates | Not a progress measure: the advantages are re-centred in every batch. Watch it only for NaN or spikes. |

# %% tags=["hide-input"]
STATS = [("objective/scores", "RM units, or\nfraction right"),
         ("objective/kl", "nats per token"),
         ("objective/entropy", "nats per token"),
         ("policy/clipfrac_avg", "fraction of tokens"),
         ("policy/approxkl_avg", "nats per token"),
         ("val/completion_length", "tokens"), ("loss/policy_avg", "loss")]
it = np.arange(1, cfg.iterations + 1)


def draw_dashboard(narrow=False):
    """Return one panel per statistic, both arms of the seed-0 run: three
    columns (legend in the free slot), or one column on a phone."""
    cols = 1 if narrow else 3
    rows = -(-len(STATS) // cols)
    fig, axes = plt.subplots(
        rows, cols, squeeze=False, constrained_layout=True,
        figsize=(3.6, 1.7 * rows + 0.4) if narrow else (6.8, 2.0 * rows))
    for ax, (key, unit) in zip(axes.flat, STATS):
        for arm in ARMS:
            ax.plot(it, runs[arm][key], color=ARM_COLORS[arm], lw=1.6,
                    label=f"{arm} arm")
        ax.set_title(key, fontsize=9)
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=8)
    # the x label on the lowest panel of each column
    for col in range(cols):
        last = max(k for k in range(col, len(STATS), cols))
        axes.flat[last].set_xlabel("PPO iteration", fontsize=8)
    for ax in axes.flat[len(STATS):]:
        ax.axis("off")
    handles = axes.flat[0].get_legend_handles_labels()
    if narrow:
        fig.legend(*handles, loc="outside upper center", ncol=2,
                   frameon=False, fontsize=9)
    else:
        axes.flat[-1].legend(*handles, loc="center", frameon=False,
                             fontsize=9)
    return fig


show_figure(
    draw_dashboard,
    alt="Seven panels of training statistics per iteration for the seed-0 "
        "run of both arms: objective/scores, objective/kl, "
        "objective/entropy, policy/clipfrac_avg, policy/approxkl_avg, "
        "val/completion_length and loss/policy_avg.",
    caption="The training statistics of one run of each arm (seed 0), "
            "under TRL's names; objective/scores is in the reward's own "
            "units (RM units for the rm arm, the fraction of correct "
            "samples for the verifier arm). Both arms' scores rise, the "
            "clip fraction and the approximate KL fall to almost 0 after "
            "the first iterations, and the entropy and the completion "
            "length hardly move: nothing here tells the arm that learned "
            "sums from the one that did not.",
)
print(f"mean of iterations 1-5 -> 21-25   {'rm arm':>11}  "
      f"{'verifier arm':>16}")
for key, _ in STATS:
    print(f"{key:<24}" + "".join(
        f"{np.mean(runs[arm][key][:5]):>11.3f} -> "
        f"{np.mean(runs[arm][key][-5:]):<6.3f}" for arm in ARMS).rstrip())

# %% [markdown]
# Read the two dashboards as if there were no verifier. Both arms' `objective/scores` rise
# from the first iterations to the last: by its own logs the rm arm trains as well as the
# verifier arm, and it does, at raising the RM's score. `objective/kl` grows faster for the
# arm on the lighter leash. The clip fraction and the approximate KL are largest in the
# first iterations and then fall toward 0: Adam's first steps move every weight by about the
# full learning rate, before its running averages have seen how noisy the gradients are, and
# the learning rate decays to 0 over the run. The entropy and the completion length hardly
# move: neither arm collapsed onto one answer per prompt, and neither changed the format of
# its answers. Nothing on either dashboard says that one arm got better at sums and the other
# did not.

# %% [markdown]
# ## How hard to pull: a $\beta$ slider
#
# Each arm ran at one $\beta$. What does the leash do at other strengths? The next cell runs
# both arms, seed 0, at seven values of $\beta$ from 0 (no leash) to 1, with the full 25
# iterations; the runs at 0.08 and 0.5 are the ones above and are not run again. Like the
# experiment, the sweep is stored in `outputs/beta_sweep.json` and read back when it is
# still valid; a first run takes about a minute.

# %%
BETAS = [0.0, 0.02, 0.05, 0.08, 0.2, 0.5, 1.0]


def run_sweep():
    """Return both arms' runs at every beta (seed 0), reusing the two runs
    made above."""
    out = {arm: {} for arm in ARMS}
    for arm, (_, arm_beta) in ARMS.items():
        for beta in BETAS:
            if beta == arm_beta:
                log = runs[arm]
            else:
                _, log = experiment.run_arm(arm, policy, rm, 0, beta, cfg,
                                            progress=PROGRESS)
            out[arm][str(beta)] = {k: log[k]
                                   for k in ("accuracy", "rm_score", "kl")}
    return {"arms": out}


sweep = load_or_run(
    OUTPUTS / "beta_sweep.json",
    {"betas": BETAS, "seed": 0, "ppo": asdict(cfg)},
    {(arm, str(beta)): runs[arm] for arm, (_, beta) in ARMS.items()},
    run_sweep)["arms"]
print("        rm arm                   verifier arm")
print("beta    accuracy         KL      accuracy         KL")
for beta in BETAS:
    pair = (sweep["rm"][str(beta)], sweep["verifier"][str(beta)])
    print(f"{beta:<6}" + "".join(
        f"  {log['accuracy'][0]:.3f} -> {log['accuracy'][-1]:.3f}"
        f"  {log['kl'][-1]:.3f}" for log in pair))

# %% [markdown]
# The sweep also settles the control of the previous section: here are the batch-mean rm
# arm's runs (seed 0) whose final KL lies on either side of the per-prompt arm's mean, with
# their accuracies.

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
# At a comparable distance from the reference, none of these runs ends above its start, and
# the per-prompt arm, which follows the RM's score more efficiently, ends a little lower than
# the batch-mean runs. The conclusion of the control stands, now for the right reason: the
# noise was slowing the optimizer down; the reward was pointing it the wrong way.
#
# The slider shows the curves behind each row. In JupyterLab it does more: it also offers
# values between the seven above, and when you release it at a $\beta$ not run yet, both arms
# are trained from scratch at that $\beta$ (seed 0), in a few seconds, with a progress bar;
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
    for arm in ARMS:
        if (arm, beta) not in leash_runs:
            _, leash_runs[arm, beta] = experiment.run_arm(
                arm, policy, rm, 0, beta, cfg, progress=PROGRESS)
    return {arm: leash_runs[arm, beta] for arm in ARMS}


def draw_frame(beta, narrow=False):
    """Return the slider's figure at this beta (wide, or for a phone)."""
    return draw_leash(beta, leash_at(beta), narrow)


explore(draw_frame, {"beta": BETAS if building_book() else LIVE_BETAS},
        default={"beta": 0.5}, labels={"beta": "β (uneven steps)"},
        alt=lambda beta: leash_alt(beta, leash_at(beta)),
        continuous_update=False,
        caption="Accuracy and per-token KL to the reference per iteration, "
                "both arms, seed 0, at the β the slider selects. The slider "
                "steps through the values that were run, unevenly spaced: "
                f"{', '.join(f'{b:g}' for b in BETAS)}. Drag it right, to a "
                "tighter leash, and both arms end closer to the reference; "
                "at every β the verifier arm ends above the dotted start "
                "line and the rm arm near it.")


# %% [markdown]
# ## What the experiment says
#
# Five lessons, each with the number from this notebook that carries it:

# %%
ver, rma = summary["verifier"], summary["rm"]
lengths = [np.mean(runs[arm]["val/completion_length"]) for arm in ARMS]
gain = {arm: {b: log["accuracy"][-1] - log["accuracy"][0]
              for b, log in sweep[arm].items()} for arm in ARMS}
kl_end = {arm: {b: log["kl"][-1] for b, log in sweep[arm].items()}
          for arm in ARMS}
n_net = n_params(policy)
# What a critic would know, for the verifier's reward: V(s_t) is the chance
# that the starting policy, sampling at 0.7, completes the right answer
# from state s_t.
truth = task.correct_completions(eval_pairs)  # (400, 4)
with torch.no_grad():
    lp = completion_logprobs(policy, eval_prompts, truth,
                             cfg.temperature)  # (400, 4)
lp = lp * completion_mask(truth)
v_start = lp.sum(1).exp()  # V(s_0): the whole right answer
v_first = lp[:, 1:].sum(1).exp()  # V(s_1) after the right first digit
per_prompt = control["per-prompt baseline"]
d_acc = gap["end accuracy, verifier - rm"][0]
d_rm, h_rm = gap["end RM score, verifier - rm"]
print(f"1. One iteration: {cfg.batch_size} episodes of "
      f"{np.mean(lengths):.2f} tokens on average, "
      f"{cfg.batch_size * np.mean(lengths):.0f} actions;\n"
      "   one reward per episode, on its last token.")
print(f"2. A value head the size of the policy: {n_net:,} more parameters.\n"
      f"   The prompt alone explains {prompt_share['rm']:.0%} of the RM "
      "reward's variance in a batch,\n"
      f"   {prompt_share['verifier']:.0%} of the verifier's.\n"
      "   Verifier's value, mean over the eval prompts: "
      f"V(s_0) = {v_start.mean():.2f};\n"
      f"   after the right first digit {v_first.mean():.2f}, "
      "after a wrong one 0.")
print(f"3. rm arm: RM score {rma['rm_score_start']:+.2f} -> "
      f"{pm(rma['rm_score_end'], rma['rm_score_end_ci'], 2, '+')}; "
      f"accuracy gain {pm(rma['gain'], rma['gain_ci'], 3, '+')}.\n"
      "   rm arm, per-prompt baseline: RM score "
      f"{pm(*per_prompt['rm_score'], 2, '+')},\n"
      f"   accuracy {pm(*per_prompt['accuracy'])}.\n"
      "   verifier arm: accuracy gain "
      f"{pm(ver['gain'], ver['gain_ci'], 3, '+')}.")
print(f"4. Verifier arm minus rm arm at the end: accuracy {d_acc:+.3f},\n"
      f"   RM score {d_rm:+.2f} [{d_rm - h_rm:+.2f}, {d_rm + h_rm:+.2f}].\n"
      f"   RM score of the rm arm's answers ({rma['end']:.0%} correct): "
      f"{rma['rm_score_end']:+.2f};\n"
      f"   of all-correct answers: {yardstick['every answer correct']:+.2f};"
      " all near-misses: "
      f"{yardstick['every answer a near-miss']:+.2f};\n"
      f"   all garbage: {yardstick['every answer garbage']:+.2f}.")
for arm in ARMS:
    print(f"{'5.' if arm == 'rm' else '  '} {arm} arm, beta {BETAS[0]:g} to "
          f"{BETAS[-1]:g}: accuracy gain {min(gain[arm].values()):+.3f} to "
          f"{max(gain[arm].values()):+.3f},\n"
          f"   KL {min(kl_end[arm].values()):.3f} to "
          f"{max(kl_end[arm].values()):.3f}.")

# %% [markdown]
# 1. **RLHF is PPO with text as the environment.** Nothing in the loop is specific to
#    language except the environment: an episode is a completion, an action a token, and
#    the only reward arrives at the end (line 1). The rollout, the advantage, the clipped
#    ratio and the leash are the PPO of any other task {cite}`schulman2017ppo`; what RLHF adds
#    is where the reward comes from and the KL to a frozen reference
#    {cite}`ziegler2019finetuning`.
# 2. **The value head is PPO's heaviest part, and here a batch baseline can stand in for it.**
#    Full PPO learns a critic $V(s_t)$, in InstructGPT a network as large as the reward
#    model, trained alongside the policy, with GAE to turn its predictions into per-token
#    advantages {cite}`ouyang2022instructgpt,schulman2016gae` (line 2). Even at 4 tokens it
#    would have work to do. Its value changes *inside* a completion: with the verifier's
#    reward, a wrong first digit sends it to 0 at once, and a right one raises it (line 2). A critic would credit or blame the digit that did it; the batch
#    baseline gives every token of a completion the same share of the score, and knows only
#    the position, not the state. It could also remove the prompt's share of the noise, large
#    for the RM (line 2), although the control above showed that removing it changes how far
#    the rm arm goes, not where. What it buys is less noise per token, and chapter 7 measures
#    how much, at 4 tokens and at 400: the saving grows with the length, and over hundreds of
#    tokens the critic becomes load-bearing.
# 3. **The optimizer maximizes the number it is handed.** The rm arm raised the RM's score of
#    its answers, and their accuracy did not rise with it; given a cleaner version of the
#    same number, it raised the number faster, and still not the accuracy. The verifier arm,
#    handed the truth, raised the truth (line 3). The algorithm and every setting were
#    the same: the difference is entirely in the reward.
# 4. **A saturated proxy looks like success.** Judged by the RM, the rm arm is the better
#    policy: its answers score a little *higher* than the verifier arm's (the interval of the
#    gap excludes 0, line 4), although the verifier arm is right far more often. The gap is a
#    sliver of the RM's range, from garbage to correct. They score about as high as a sheet of answers
#    that are all correct, too: the RM is saturated on this policy's outputs, which are
#    mostly of the right size, and a near-miss costs a sliver of what garbage costs. Its
#    score can no longer tell a better policy from a worse one. In a real system, where there
#    is no verifier, the RM's score going up is exactly what the dashboard would show
#    {cite}`gao2023scaling`.
# 5. **The leash contains damage but cannot create signal.** Loosening $\beta$ lets the rm
#    arm move several times further from the reference, and no setting turns the RM into a
#    teacher of arithmetic: its accuracy change stays within a few points of zero for every
#    $\beta$ (line 5), while the verifier arm gains at every $\beta$. A tighter leash only
#    slows a good reward down. The leash decides how far a policy may go; where it goes is
#    the reward's doing. Chapter 7 takes the leash off and lets the rm arm run longer.
#
# ## Summary
#
# - One function, `ppo_train`, runs both arms; they differ in the reward function and
#   $\beta$. Each iteration samples 64 completions, scores them once at the end, standardizes
#   the scores over the batch, pays the leash $-\beta\,\mathrm{kl}_t$ as a per-token reward
#   (once: the loss has no KL term), turns the rewards into returns-to-go minus a batch
#   baseline (you wrote that step), and takes two clipped-surrogate steps over the completion
#   tokens (you wrote that loss). It is clipped policy gradient without a critic.
# - Handed the verifier, PPO made the partial policy markedly better at sums; handed the
#   reward model, it raised the RM's score and the accuracy did not follow. Over five seeds
#   the 95% interval of the gap between the arms stays far from zero.
# - How large the verifier arm's gain is depends on the starting checkpoint, and the book's
#   was picked as one that gains clearly: from five partial-SFT starts made the same way, the
#   mean gain was about half of the book's. The direction, verifier arm above rm arm, held
#   from every start.
# - The RM scored the two arms' answers within a sliver of each other, the rm arm's a little
#   higher: a reward model that is saturated on the policy's outputs reports success
#   whichever way the policy goes.
# - The statistics a real trainer logs (`objective/scores`, `objective/kl`,
#   `objective/entropy`, `policy/clipfrac_avg`, `policy/approxkl_avg`, the completion length)
#   are what you have when there is no verifier.
#
# ## Exercises
#
# 1. **More seeds.** Run the experiment with seeds 0 to 9 (set `SEEDS = list(range(10))`
#    and run the cells of that section again). Does the half-width of each
#    interval shrink by about $1/\sqrt{2}$? Which of the claims above would you trust with 2
#    seeds?
# 2. **The learning rate.** Train the verifier arm with `PPOConfig(lr=1e-3)` and with
#    `lr=5e-5`. Watch `policy/clipfrac_avg` and `policy/approxkl_avg` in the first
#    iterations. At which setting does the clip start doing most of the work, and what
#    happens to the accuracy?
# 3. **The KL in the loss instead.** Run both arms with `PPOConfig(kl_placement="loss")`: the
#    advantages come from the score alone and $\beta \cdot \mathrm{mean}_t\, k_3$, computed from
#    `new_logp`, is added to the loss (GRPO's choice, chapter 1; `minirlhf.ppo.k3_loss_term`).
#    How do the final KL and the accuracy compare with the reward placement, over three seeds?
#    Then write the buggy version that does both (a `loss_fn` that adds the k3 term while the
#    leash is also in the reward), and compare its KL with the reward placement at $2\beta$.
#    Chapter 2 predicts what you should see.
# 4. **No standardization.** Give the raw score to the advantages instead of $z$ (write an
#    `advantage_fn` that undoes nothing: it receives $z$, so copy `ppo_train` and change the
#    line that standardizes). For which arm does the meaning of $\beta$ change, and by how
#    much? Use the standard deviations printed at the start of the chapter. This is TRL's
#    choice; it then whitens the advantages, which you can add too.
# 5. **Sampling temperature.** Run both arms at temperature 1.0. The ratio and the KL use
#    the same temperature as the sampling; what happens to `objective/entropy`, and to the
#    gain of the verifier arm?
# 6. **Where did the answers go?** `ppo_train`'s log holds `kinds`: the fraction of greedy
#    answers that are correct, near-misses, other wrong numbers or malformed, per iteration.
#    Plot it for both arms. Does the rm arm trade correct answers for near-misses, which
#    the RM cannot tell apart?
# 7. **A mixed reward.** Hand the optimizer `0.5 * rm + 0.5 * verifier` (write the
#    `reward_fn`). Predict from the lessons above where its accuracy ends, then run it.
# 8. **Without the clamp.** Set `kl_clamp=1e9` and construct a batch where the reference
#    gives a sampled token a log-probability of −40. What does one such token do to the
#    advantages of its completion, and to the loss of the whole batch?
# 9. **Another starting point.** Train another partial policy with `sft.train_sft(config)`
#    and `config = sft.SFTConfig(seed=0, steps=180)` (it returns the model without saving
#    it), check its greedy accuracy with `sft.greedy_accuracy`, and run both arms from it
#    with a few seeds. How large is the verifier arm's gain now? What does that say about
#    reporting one SFT run?
