# %% [markdown]
# # 3. Language modelling as an MDP, and SFT
#
# Chapters 1 and 2 wrote down the two formulas of PPO-based RLHF on made-up numbers. From
# here on the numbers come from a real language model, small enough to train on a CPU in
# seconds. This chapter builds the world that model lives in: a task with a verifier
# that cannot be fooled, a way to see text generation as a reinforcement-learning problem,
# and the *policy* itself, trained by supervised fine-tuning (SFT) on correct examples, the
# first stage of the InstructGPT recipe {cite}`ouyang2022instructgpt`.
#
# You will write the SFT loss, the one function in this chapter the rest of the book cannot
# do without, and see why we stop training it long before it is good.
#
# ```{admonition} What you need
# :class: tip
# Chapters 1 and 2, and a little PyTorch: tensors, `softmax`, `cross_entropy`, `backward`.
# The first run of this notebook trains the policy (about ten seconds) and saves it under
# `outputs/models`; later runs load it. A run of the whole notebook takes about a minute on a
# 2-core CPU, the first one and later ones alike: most of it goes to two cells that compute
# afresh each time, fifteen to twenty seconds each (the learning curve, 300 steps of SFT, which
# also keeps the longer-trained policy of a worked answer; 42,000 answers sampled to check a
# probability).
# ```

# %%
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from minirlhf import sft, store, task
from minirlhf.course.exercises import check
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.experiment import ORIGINAL
from minirlhf.model import (GPTConfig, TinyGPT, completion_logprobs,
                            completion_mask, generate, make_generator,
                            n_params)
from minirlhf.palette import BLUE, ORANGE  # safe for color blindness
from minirlhf.studies import rm_blind_spot

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or nbval.
PROGRESS = someone_watching()

# %% [markdown]
# ## The task: sums, by example
#
# A prompt is the sum of two whole numbers from 0 to 99, such as `23+45=`. The completion
# is the answer followed by `;`, here `68;`. Every character is a token, so the whole
# vocabulary is the 13 characters `0123456789+=;`. The longest prompt, `99+99=`, has 6
# tokens and the longest completion, `198;`, has 4, so one window of 10 tokens always holds
# a prompt and its answer.
#
# Shorter prompts are padded on the left with `;` up to 6 tokens. Left padding puts the first
# answer token at position 6 for every prompt, so a batch of prompts is completed in
# lockstep, one position at a time, without bookkeeping per row. Completions are padded on
# the right with `;`, and everything after the first `;` is ignored.

# %%
a, b = 23, 45
pairs = torch.tensor([[23, 45], [7, 5], [99, 99]])
prompts = task.encode_prompts(pairs)  # (3, 6): left-padded with ';'
answers = task.correct_completions(pairs)  # (3, 4): right-padded with ';'
vocabulary = " ".join(f"{c}:{i}" for i, c in enumerate(task.VOCAB))
rows = [f"prompt {task.format_prompt(a, b)!r}  completion "
        f"{task.format_answer(a + b)!r}",
        f"vocabulary: {vocabulary}", "", "prompt | completion   token ids"]
for p, c in zip(prompts, answers):
    rows.append(f"{task.decode(p)} | {task.decode(c)}      "
                f"{p.tolist()} | {c.tolist()}")
print("\n".join(rows))  # one print per cell keeps the output in one piece

# %% [markdown]
# The verifier reads a completion up to its first `;`, parses the answer and pays 1 when it
# is the true sum, 0 otherwise. An answer that does not parse (no `;` within 4 tokens,
# nothing before the `;`, a leading zero) is *malformed*. Wrong answers come in kinds that
# matter later: a *near-miss* is a wrong answer within 10 of the true sum (for 68, anything
# from 58 to 78), the slip of someone who has the size of the answer right. Compared with
# the truth digit by digit, a near-miss differs in the ones digit only (for 68: 60 to 67,
# and 69), in the tens digit only, by one (58 and 78), or in several digits (59, and 70 to
# 77; near 100 some also change the length, as 98 does for 102). Anything else that parses
# is *other wrong*. The *completion mask* marks the tokens that belong to the answer: 1 up
# to and including the first `;`, 0 after it.

# %%
rows = ["completion  read as  parsed  kind          reward  mask"]
for text in ["68;;", "67;;", "78;;", "71;;", "60;;", "86;;", "6;;;", "068;",
             ";;;;", "6868"]:
    ids = torch.tensor([task.encode(text)])  # (1, 4)
    read = task.decode_completions(ids)[0]
    mask = completion_mask(ids)[0].int().tolist()
    parsed = str(task.parse_completion(read))
    rows.append(f"{text:<11} {read:<8} {parsed:<7} "
                f"{task.answer_kind(a, b, read):<13} "
                f"{task.verify(a, b, read):<7} {mask}")
print("\n".join(rows))

# %% [markdown]
# The verifier cannot be gamed: it checks the arithmetic. That is what makes this toy world
# useful. The reward model of chapter 4 is a learned guess at the same judgement, and
# because the truth is one function call away, we can always measure how far the guess is
# from it.
#
# ## Generating text is a Markov decision process
#
# Reinforcement learning needs states, actions, transitions and rewards. Text generation
# supplies all four:
#
# - **state** $s_t$: the prompt $x$ and the tokens written so far, $s_t = (x, y_1, \dots, y_{t-1})$;
# - **action** $a_t = y_t$: the next token, one of 13;
# - **transition**: append the token, $s_{t+1} = (s_t, a_t)$. It is deterministic, and
#   the environment is nothing but string concatenation;
# - **episode**: one completion. It ends with the first `;`, or after 4 tokens;
# - **reward**: 0 for every token except the last, where the whole text is scored,
#   $r_T = R(x, y)$ (here the verifier; in one arm of chapter 5, a reward model).
#
# The process is *Markov* because what happens next depends only on the current state and
# the action, never on how the state was reached: the next state is the current one with the
# token appended, and the policy chooses from the current state alone. That property is what
# the name Markov decision process (MDP) asks for, and here it holds by construction, since
# the state is the whole text so far.
#
# The *policy* $\pi_\theta(a_t \mid s_t)$ is the language model's softmax over the next token.
# Since every reward but the last is 0, the return of every step is the final score, and the
# probability of a whole completion is the product of its per-token probabilities, so its
# log-probability is the sum $\sum_t \log \pi_\theta(y_t \mid s_t)$. These per-token log-probs
# are what chapters 1 and 2 called `logp_policy` and `new_logp`.
#
# Here is that process, step by step, for two prompts, with the policy trained later in this
# chapter (the cell loads it, or trains it on a first run). The loop is what
# `minirlhf.model.generate` does; the last line checks that both draw the same tokens.

# %%
policy, sft_metrics = store.load_sft(progress=PROGRESS)
policy.eval()

pairs = torch.tensor([[23, 45], [7, 5]])
states = task.encode_prompts(pairs)  # (2, 6): each episode's first state
g = make_generator(0)
history = []  # per step: (states, actions, log-probs of the actions)
with torch.no_grad():
    for t in range(task.COMPLETION_LEN):
        logits = policy(states)[:, -1, :]  # (2, 13): next-token scores
        probs = F.softmax(logits, dim=-1)  # (2, 13): pi(a | s_t)
        actions = torch.multinomial(probs, 1, generator=g)  # (2, 1): a_t
        logp = F.log_softmax(logits, dim=-1).gather(1, actions)  # (2, 1)
        history.append((states, actions[:, 0], logp[:, 0]))
        states = torch.cat([states, actions], dim=1)  # s_{t+1} = s_t + a_t
completions = states[:, task.PROMPT_LEN:]  # (2, 4)

same = torch.equal(completions, generate(
    policy, task.encode_prompts(pairs), temperature=1.0,
    generator=make_generator(0)))
print("the same tokens as generate():", same)

# %%
mask = completion_mask(completions)  # (2, 4): 1 up to the first ';' included
scores = task.batch_verify(pairs, completions)  # (2,): the verifier, 1 or 0
rows = []
for i, (a, b) in enumerate(pairs.tolist()):
    n_tokens = int(mask[i].sum())
    text = task.decode_completions(completions[i:i + 1])[0]
    rows += [f"episode {i + 1}: prompt {a}+{b}=, completion {text!r}",
             "   t  state s_t    action a_t  log pi(a_t|s_t)  reward r_t"]
    for t, (s, act, lp) in enumerate(history):
        token = task.VOCAB[int(act[i])]
        if t >= n_tokens:
            rows.append(f"   {t + 1}  (episode over: {token!r} was drawn in "
                        "lockstep, and is masked away)")
            continue
        reward = float(scores[i]) if t == n_tokens - 1 else 0.0
        rows.append(f"   {t + 1}  {task.decode(s[i]):<12} {token!r:<11} "
                    f"{float(lp[i]):>+15.3f}  {reward:>10.1f}")
    total_logp = sum(float(lp[i]) for _, _, lp in history[:n_tokens])
    rows += [f"   return {float(scores[i]):.1f}; log-prob of the completion "
             f"{total_logp:+.3f} (probability {np.exp(total_logp):.3f})", ""]
print("\n".join(rows))

# %% [markdown]
# Read the two episodes as the optimizer of chapter 5 will. Each has a few actions and one
# reward, paid on the `;` that ends it. The verifier pays for the *whole* answer: when an
# answer is wrong, the `;` that merely closes it gets the same 0 as the wrong digit that
# caused it. Which token deserved the blame is the credit-assignment problem, and with at
# most four tokens it is a small one. The state column shows what the model really sees,
# padding included. The tokens after the `;` were drawn only because the batch moves in
# lockstep, and the completion mask removes them from every loss and statistic: the SFT loss
# below, the PPO objective and the KL penalty all use that same mask.
#
# ## The policy network
#
# The policy is a causal transformer in miniature, in the style of nanoGPT: token and
# position embeddings, two pre-norm blocks of 4-head self-attention and an MLP, and a linear
# head that turns the last layer into 13 logits per position. All of it is one short file,
# `minirlhf/model.py`, written to be read top to bottom. The reward model of chapter 4 is the
# same network with a head that returns one number instead of 13.

# %%
print(textwrap.fill(str(policy.cfg), 77, subsequent_indent="    "))
print(f"{n_params(policy):,} parameters")

# %% [markdown]
# ```{admonition} Why float64
# :class: note
# The last field of the configuration, `dtype`, makes every weight, and so every number the
# book computes from the models, a 64-bit float. Deep learning usually trains in 32 bits or
# fewer. On one machine, with one thread, a float32 run is exactly repeatable; on another CPU
# it is not. The vector width, the matrix-multiply code path and the vectorized `exp` and
# `log` differ from one CPU to another and round differently in the last bit, and training
# amplifies those differences. When we ran the core of the book in float32 with torch's
# portable kernels instead of the vectorized ones of our CPU, many of the numbers the
# chapters print came out with different digits. In float64 the same rounding differences
# stay in the last bits, far below the digits the book prints, so every reader's laptop
# prints the same numbers; `python -m minirlhf.commands.numerics` runs that comparison on
# your machine, and `make test` runs it too. The price is speed: 64-bit arithmetic is slower,
# so every run takes longer than it would in float32. Real RLHF trains in bf16 or float32 on
# GPUs, where the same amplification is one more reason why runs are compared over several
# seeds, as chapter 5 does, and never digit by digit.
# ```

# %% [markdown]
# ## Supervised fine-tuning, with the prompt masked out
#
# SFT is next-token prediction on correct examples. Put prompt and answer into one sequence,
# feed the model all of it but the last token, and ask it at every position for the token
# that comes next (*teacher forcing*). The inputs are the sequence without its last token and
# the targets are the sequence without its first, so position $t$ of the input is trained to
# predict position $t$ of the target:

# %%
batch = torch.tensor([[7, 5], [23, 45]])
inputs, targets, mask = sft.sft_batch(batch)  # (2, 9) each
rows = {"position": range(inputs.shape[1]), "input": task.decode(inputs[0]),
        "target": task.decode(targets[0]), "mask": mask[0].int().tolist()}
for name, row in rows.items():
    print(f"{name:<9}" + "".join(f"{v:>3}" for v in row))

# %% [markdown]
# The last four targets fill the completion slot, and the mask keeps three of them: `1`, `2`
# and the closing `;`. The padding after the `;` is dropped, and so are the first five
# targets, which are prompt tokens. The model is not trained on the prompt, for two reasons.
# The prompt comes from the user, so predicting it is not a skill we want; and most prompt
# tokens cannot be predicted at all (nothing in `;;7+` tells you that `5` comes next), so
# their loss stays high however long we train, and its gradient would drown out the
# answer's. The loss is the cross-entropy averaged over the masked positions only:
#
# $$
# \mathcal{L}_{\text{SFT}}
# = \frac{\sum_{b,t} m_{bt}\,\big(-\log \mathrm{softmax}(z_{bt})_{y_{bt}}\big)}{\sum_{b,t} m_{bt}},
# $$
#
# with logits $z_{bt}$, targets $y_{bt}$ and mask $m_{bt} \in \{0, 1\}$ for row $b$ and
# position $t$.
#
# ## Exercise 3.1: `masked_sft_loss`
#
# Write the loss that trains the policy.
#
# **Contract.** `masked_sft_loss(logits, targets, mask)` takes
#
# - `logits`, a float tensor of shape (B, T, V): a score for each of the V tokens at every
#   position;
# - `targets`, a long tensor of shape (B, T): the token that should come next;
# - `mask`, a tensor of shape (B, T) holding 0s and 1s, as floats or as integers;
#
# and returns the mean cross-entropy over the positions where `mask` is 1, as a **0-d torch
# tensor** (a single number that still carries its gradient: do not call `.item()`).
# Positions where `mask` is 0 must not change the value at all. The mean is over positions,
# all rows pooled: a row with three answer tokens weighs three times as much as a row with
# one. You may assume at least one position has mask 1 and the shapes agree.
#
# **Examples.** With all logits equal, every token has probability $1/V$, so every position
# costs $\log V$ and the loss is $\log 13 \approx 2.565$ for our vocabulary, whatever the
# mask. With a single position whose target has probability $3/4$, the loss is
# $\log(4/3) \approx 0.288$.
#
# **How it is judged.** The check cell runs your function on the cases in its report:
# uniform logits, one position with a known probability, a mask with a single 1, badly
# predicted prompt positions that must not count, rows with different numbers of answer
# tokens, a logit of 1000 (finite only if you stay in log space) and a batch shaped like the
# book's with an integer mask. The result must be a 0-d tensor within $10^{-4}$ of the value
# worked by hand, and its gradient with respect to `logits` must be the package's.

# %% tags=["solution"]
def masked_sft_loss(logits, targets, mask):
    """Return the mean cross-entropy over the positions where mask is 1,
    as a 0-d tensor."""
    # BEGIN SOLUTION
    B, T, V = logits.shape
    ce = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T),
                         reduction="none").view(B, T)  # (B, T): per position
    mask = mask.to(ce.dtype)  # (B, T): 1 where a position counts
    return (ce * mask).sum() / mask.sum()  # mean over the counted positions
    # END SOLUTION

# %% [hints] masked_sft_loss

# %%
check("masked_sft_loss", masked_sft_loss);

# %% [markdown]
# The package's `minirlhf.sft.masked_sft_loss` follows the same contract and also refuses
# shapes that disagree and a mask with no 1 in it, with a `ValueError`. The cells below use
# it, so they run before your version exists.
#
# ### No gradient reaches the prompt
#
# Masking the loss is the same as masking the gradient. The next cell computes the loss on
# the batch above with the policy's real logits, differentiates it with respect to those
# logits, and shows, per position, how large the gradient is (summed over the 13 logits).

# %%
logits = policy(inputs).detach().requires_grad_(True)  # (2, 9, 13), a leaf
loss = sft.masked_sft_loss(logits, targets, mask)
loss.backward()
push = logits.grad.abs().sum(-1)  # (2, 9): gradient size at each position
rows = [f"loss {loss.item():.3f}", ""]
for i in range(2):
    text = task.decode(targets[i])
    rows += [f"{'target':<7}" + "".join(f"{c:>7}" for c in text),
             f"{'mask':<7}" + "".join(f"{int(m):>7}" for m in mask[i]),
             f"{'|grad|':<7}" + "".join(f"{v:7.3f}" for v in push[i]),
             ""]
print("\n".join(rows))

# %% [markdown]
# Every position with mask 0 gets a gradient of exactly zero, the padding after the `;`
# included, so nothing the optimizer does is driven by the prompt. Each answer position gets
# a push whose size is, per logit, $|p_v - [v = y]| / \sum m$: the gap between what the model
# predicted and the one-hot target, shared over the answer tokens of the batch.
#
# ## Training, and stopping early on purpose
#
# The book's SFT run draws a batch of sums per step from the prompts that are not in the
# evaluation set and takes AdamW steps at a constant learning rate (the settings are printed
# below). The next cell reruns it for longer than the book's policy was trained, measuring
# greedy accuracy on the 400 evaluation prompts every 10 steps. The run is deterministic, so
# its first steps are exactly the run that produced the policy, whose accuracy the orange
# dot marks. It is the slowest cell of the chapter, and in JupyterLab it shows a progress bar
# while it trains.

# %%
config = sft.SFTConfig()
# keep: also the model after step 260, which "Stop later" (at the end)
# reads instead of training it again
curve = sft.sft_learning_curve(steps=300, every=10, config=config,
                               keep=(260,), progress=PROGRESS)
steps = np.array(curve["steps"])  # every 10 steps
accuracy = np.array(curve["accuracy"])
stop = curve["stop"]  # where the book's policy stopped
at_stop = sft.greedy_accuracy(policy)  # the policy itself, at step `stop`
near = np.abs(steps - stop) <= 40
print(textwrap.fill(str(config), 77, subsequent_indent="    "))
print(f"training prompts: {len(task.train_pairs()):,}; "
      f"held-out evaluation prompts: {len(task.eval_pairs())}\n\n"
      "step     " + " ".join(f"{s:>5}" for s in steps[near]) + "\n"
      "accuracy " + " ".join(f"{a:5.3f}" for a in accuracy[near]))

# %% tags=["hide-input"]
n_eval = len(task.eval_pairs())  # held-out prompts behind each point


def draw_curve(narrow=False):
    """Return the figure: greedy accuracy against SFT steps, with the
    step where the book's policy stops (narrow: laid out for a phone)."""
    size = 9 if narrow else 10  # font size, points
    fig, ax = plt.subplots(figsize=(3.6, 3.2) if narrow else (6.8, 3.4),
                           constrained_layout=True)
    ax.plot(steps, accuracy, color=BLUE, marker="o", ms=3, lw=1.6,
            label="greedy accuracy")
    ax.axvline(stop, color=ORANGE, ls="--", lw=1.2)
    ax.scatter([stop], [at_stop], color=ORANGE, s=60, zorder=3,
               label=("stop at" if narrow else "partial-SFT policy,")
               + f" step {stop}")
    # Labels placed where the curve is not: left of the dot, above the end.
    ax.annotate(f"{at_stop:.3f}", (stop, at_stop), xytext=(-8, 0),
                textcoords="offset points", color=ORANGE, fontsize=size,
                ha="right", va="bottom")
    ax.annotate(f"{accuracy[-1]:.3f}" + ("" if narrow else
                f" after {steps[-1]} steps"),
                (steps[-1], accuracy[-1]), xytext=(0, 8),
                textcoords="offset points", color=BLUE, fontsize=size,
                ha="right", va="bottom")
    per_step = f" (one batch of {config.batch_size} sums)"
    ax.set_xlabel("SFT step" + ("" if narrow else per_step), fontsize=size)
    ax.set_ylabel("greedy accuracy" + ("" if narrow else
                  " (fraction right)"), fontsize=size)
    ax.set_ylim(0, 1)
    ax.set_xlim(0, steps[-1] + 5)
    ax.tick_params(labelsize=size)
    if narrow:  # above the plot, clear of the curve and the dashed line
        fig.legend(frameon=False, fontsize=size, ncol=2,
                   loc="outside upper center")
    else:
        ax.legend(frameon=False, fontsize=size, loc="upper left")
    return fig


show_figure(
    draw_curve,
    alt=f"Greedy accuracy against SFT steps: at most "
        f"{accuracy[steps <= 100].max():.3f} in the first 100 steps, then "
        f"rising steeply; {at_stop:.3f} at step {stop}, "
        f"where training stops, and {accuracy[-1]:.3f} at step {steps[-1]}.",
    caption=f"The SFT learning curve: greedy accuracy on the {n_eval} "
            f"held-out prompts, measured every {steps[1] - steps[0]} "
            "steps. Training stops at the dashed "
            "line, in the steep part, on purpose; the orange dot is the "
            "policy the rest of the book starts from.",
)

# %% [markdown]
# This book rebuilds the experiment of an earlier project, which published one run of it. We
# call its numbers *the original run* (never "the reference", which in this book is the
# frozen policy the KL is measured to); chapter 5 sets them beside ours. Its partial-SFT
# policy was also stopped on the climb, at about a third right:

# %%
original = ORIGINAL["sft_accuracy"]  # the original project's run
print(f"greedy accuracy on the 400 eval prompts after {stop} steps\n"
      f"  the partial-SFT policy     {at_stop:.3f}\n"
      f"  the original run           {original:.3f}")

# %% [markdown]
# For a hundred steps the model learns the format (digits, then `;`) and little arithmetic;
# then accuracy shoots up, and by step 300 most sums are right. We stop at the dashed line,
# early in the climb, and that is deliberate. Where exactly is set by a rule rather than by
# eye: the book's run stops at the first multiple of 5 steps whose greedy accuracy reaches a
# third, which for seed 1 is step 140 (chapter 6 makes more starting policies by the same
# rule). Why stop there at all:
#
# - **A policy that is already right has nothing left for RL to teach.** PPO learns from the
#   *differences* between the completions it samples: it raises the log-probability of those
#   that scored above the batch average and lowers the rest. If nearly every completion is
#   right, nearly every reward is the same, and there is no signal.
# - **"Partial" means room to improve, in both directions.** Starting at about a third right,
#   chapter 5 can show a reward that makes the policy better and a reward that makes it
#   worse, measured by the verifier.
# - **The curve is steep there**, so the policy sits where small changes to its weights
#   change its answers: a little learning moves the accuracy, which makes the effect of RL
#   visible within a few dozen updates. The flip side is that a few SFT steps more or less
#   would have given a noticeably different starting point (ten steps fewer, 0.278 instead of
#   0.360), which is why the book fixes the seed and the rule that sets the step count.
#
# InstructGPT, far from stopping early, trained its SFT model for 16 epochs, although the
# validation loss showed overfitting after the first, because the further epochs still raised
# the RM score and human preference ratings {cite}`ouyang2022instructgpt`. In real RLHF, the
# room that RL fills comes from everything the demonstrations never covered. Stopping early
# is this book's way of making that room on a task small enough to train in seconds.
#
# ## What the partial policy writes
#
# Greedy completions for the first twelve evaluation prompts, with their kinds:

# %%
eval_pairs = task.eval_pairs()  # (400, 2), fixed
eval_prompts = task.encode_prompts(eval_pairs)  # (400, 6)
greedy = generate(policy, eval_prompts, greedy=True)  # (400, 4)
kinds = task.batch_kinds(eval_pairs, greedy)
texts = task.decode_completions(greedy)
rows = ["prompt   true   policy  kind"]
for (a, b), text, kind in list(zip(eval_pairs.tolist(), texts, kinds))[:12]:
    prompt = task.format_prompt(a, b)
    rows.append(f"{prompt:<8} {a + b:>4}   {text:<7} {kind}")
print("\n".join(rows))

# %% [markdown]
# And the kinds over all 400 prompts, greedy and sampled at temperature 0.7, the temperature
# chapter 5 samples at; then where the greedy near-misses differ from the truth, beside the
# same split of the near-misses of 68 and of every near-miss the 400 sums have:

# %%
sampled = generate(policy, eval_prompts, temperature=0.7,
                   generator=make_generator(1))
rows = [" " * 14 + "".join(f"{k:>13}" for k in task.KINDS)]
for name, done in (("greedy", greedy), ("temp 0.7", sampled)):
    found = task.batch_kinds(eval_pairs, done)
    rows.append(f"{name:<14}"
                + "".join(f"{found.count(k):>13}" for k in task.KINDS))
wrong = [k for k in kinds if k != "correct"]
rows += ["", "share of the greedy mistakes that are near-misses: "
         f"{wrong.count('near_miss') / len(wrong):.2f}", ""]
# Where each near-miss differs from the truth: every near-miss of the 400
# true sums (the window), and the near-misses the policy writes greedily.
truths = eval_pairs.sum(1).tolist()
window = rm_blind_spot.composition(truths)
written = dict.fromkeys(window, 0)
for t, text in zip(truths, texts):
    answer = task.parse_completion(text)
    if answer is not None and task.is_near_miss(t, answer):
        written[rm_blind_spot.near_miss_class(t, answer)] += 1
# One column per class, its name on two lines: ones, tens, several digits.
widths = (12, 12, 9)
head = (("ones digit", "tens digit", "several"), ("only", "only", "digits"))
rows.append("where the near-misses differ from the truth (shares per row)")
rows += [" " * 40 + "".join(f"{h:>{w}}" for h, w in zip(line, widths))
         for line in head]
for name, counts in (
        (f"the {len(task.near_misses(68))} near-misses of 68",
         rm_blind_spot.composition([68])),
        ("every near-miss of the 400 sums", window),
        (f"the policy's {sum(written.values())} greedy near-misses",
         written)):
    total = sum(counts.values())
    shares = [counts[c] / total for c in rm_blind_spot.NEAR_MISS_CLASSES]
    rows.append(f"  {name:<38}"
                + "".join(f"{v:>{w}.2f}" for v, w in zip(shares, widths)))
print("\n".join(rows))

# %% [markdown]
# On all 400 prompts, greedy or sampled, the policy writes a well-formed number, and when it
# is wrong, it is mostly close: near-misses, answers of about the right size. More than half of
# its near-misses get only the ones digit wrong, and a tens digit alone off by one is more
# than twice as common among them as among all the near-misses of the same sums (exercise 4
# asks where those come from).
# Keep that in mind. The next chapter trains a reward model to judge these answers, and
# near-misses, a wrong ones digit above all, are the answers it will find hardest to tell
# from the truth.
#
# ## Summary
#
# You can now:
#
# - encode a sum as tokens, read a completion the way the verifier does, and sort wrong answers
#   into near-misses, other wrong numbers and malformed text;
# - describe text generation as a Markov decision process: state, action, transition, episode
#   and a reward paid on the last token, and compute a completion's log-probability from its
#   tokens';
# - write the masked SFT loss (your `masked_sft_loss`), and show that the prompt and the
#   padding get no gradient; the same completion mask follows the tokens into PPO;
# - explain why the book stops SFT early, in the steep part of the learning curve: a partial
#   policy leaves room for RL to improve it, or to damage it.
#
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first.
#
# **1. No mask.** Train an SFT policy whose loss counts every position: copy the training loop
# of `minirlhf.sft.train_sft`, and replace `mask` by `torch.ones_like(mask)`. Compare greedy
# accuracy after the same number of steps with the masked run. Which positions dominate the
# loss now, and what floor does the loss approach?
#
# <details class="answer">
# <summary>Worked answer: no mask</summary>
#
# Without the mask, every one of the 9 target positions counts (the table of `sft_batch` above):
# the prompt tokens, the answer, and the padding after the `;`. The prompt positions dominate.
# They are the majority of the targets, and three of them cannot be predicted: the operands
# are drawn at random, so a digit of the prompt after the first is a guess among ten (a loss
# near $\log 10$) however long the model trains. Those positions set a floor under the
# loss: three of nine targets at $\log 10$ each, 0.768 on average once everything else is
# learned (a little less, since some operands have one digit). Padding after the `;` is the
# opposite: trivially predictable once the `;` is written, it adds near-zero loss and
# teaches nothing.
#
# The cell below runs the book's SFT loop with the mask replaced by ones, the same initial
# weights and batches for the same 140 steps. The unmasked policy answers 0.075 of the
# evaluation prompts right, against 0.360 for the masked one: the prompt digits' large,
# useless gradients compete with the answer's for the same weights, and the answer loses.
# Its loss, 1.162 over the last ten steps, is still well above the floor, and the
# cross-entropy per position shows where it goes: the three unpredictable prompt digits
# cost 2.33, 2.07 and 2.34 nats, near $\log 10$, the `+` and the `=` almost nothing, and
# the answer's digits still up to 1.63.
#
# </details>

# %% tags=["hide-input"]
def train_unmasked():
    """Return (model, losses): sft.train_sft's run, step for step, with
    the loss counting all 9 target positions instead of the masked ones."""
    cfg = sft.SFTConfig()
    torch.manual_seed(cfg.seed)  # the same initial weights
    model = TinyGPT(GPTConfig(dtype=cfg.dtype))
    g = make_generator(cfg.seed)  # the same batches
    pool = task.train_pairs()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    losses = []
    for _ in range(cfg.steps):
        inputs, targets, mask = sft.sft_batch(
            task.sample_pairs(cfg.batch_size, g, pool))
        loss = sft.masked_sft_loss(model(inputs), targets,
                                   torch.ones_like(mask))  # no mask
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), losses


unmasked, unmasked_losses = train_unmasked()
print(f"greedy accuracy after {sft.SFTConfig().steps} steps: masked "
      f"{sft.greedy_accuracy(policy):.3f}, unmasked "
      f"{sft.greedy_accuracy(unmasked):.3f}")
print(f"unmasked loss, mean of the last 10 steps: "
      f"{np.mean(unmasked_losses[-10:]):.3f}")
inputs, targets, mask = sft.sft_batch(task.eval_pairs())  # (400, 9) each
with torch.no_grad():
    ce = F.cross_entropy(unmasked(inputs).flatten(0, 1), targets.flatten(),
                         reduction="none").view_as(targets)  # (400, 9)
print("its cross-entropy per target position, eval prompts (nats):")
print("  prompt  " + " ".join(f"{v:.2f}" for v in ce.mean(0)[:5].tolist()))
print("  answer  " + " ".join(f"{v:.2f}" for v in ce.mean(0)[5:].tolist()))
print(f"3 unpredictable digits of 9 targets: 3 * ln(10) / 9 = "
      f"{3 * np.log(10) / 9:.3f}")

# %% [markdown]
# **2. Stop later.** Train a policy for 260 steps with `sft.train_sft(sft.SFTConfig(steps=260))`
# (or take it from the learning curve's run, which kept it: the same weights). How accurate
# is it greedily, and how many of 64
# completions sampled at temperature 0.7 for one prompt are right? What would chapter 5 have
# left to teach it?
#
# <details class="answer">
# <summary>Worked answer: stop later</summary>
#
# The cell below takes it from the learning curve's run (the weights `train_sft` makes in
# 260 steps, bit for bit: training is deterministic, and a test of the package checks it) and
# measures both, on the prompt `23+45=`. Past the steep part of
# the curve, the policy answers most prompts right when it writes its most likely answer
# (0.820, against 0.360 for the partial policy), yet at temperature 0.7 its samples for one
# prompt still disagree: 53 of 64 right, the rest wrong. PPO learns from those differences
# between the rewards of a batch, so chapter 5's verifier arm would still have signal, but
# less room: the greedy answers it could still fix are under a fifth of the prompts instead
# of almost two thirds, and the learning curve, at 0.887 by step 300, shows further SFT
# shrinking that share again. The comparison the book is after, a reward that helps against
# one that hurts, needs room in both directions, which the partial policy has and this one
# has less of.
#
# </details>

# %% tags=["hide-input"]
later = curve["models"][260]  # the learning curve's run after step 260
one = torch.tensor([[23, 45]] * 64)  # one prompt, 64 samples
drawn = generate(later, task.encode_prompts(one), temperature=0.7,
                 generator=make_generator(0))
n_right = int(task.batch_verify(one, drawn).sum())
print(f"260 SFT steps: greedy accuracy {sft.greedy_accuracy(later):.3f}; "
      f"{n_right} of 64 samples of 23+45= right")

# %% [markdown]
# **3. Probability of the truth.** For `23+45=`, compute the probability the policy gives the
# completion `68;` from `minirlhf.model.completion_logprobs`, then estimate it by sampling
# 1,000 completions at temperature 1. Do the two agree? Repeat at temperature 0.7, where the
# log-probs need `temperature=0.7`.
#
# <details class="answer">
# <summary>Worked answer: probability of the truth</summary>
#
# The probability of a completion is the product of its tokens' probabilities, so it is the
# exponential of the sum of the three per-token log-probs up to and including the `;` (the
# mask drops the padding). The sampled share estimates the same number, with a standard
# error of $\sqrt{p(1-p)/n}$ for $n$ samples. The cell below prints both at temperatures 1
# and 0.7, the share from 1,000 samples and from 20,000, each with its standard error. All
# four shares sit within about one standard error of the exact value, and the standard error
# shrinks with more samples, from 0.013 to 0.003 at temperature 1; a share from 1,000 may be
# as close as one from 20,000 (at temperature 0.7 it happens to be closer), but only the
# larger sample makes that closeness likely. A lower temperature sharpens every next-token
# distribution: the likeliest tokens gain probability from the rest, and here `68;` gains,
# from 0.230 to 0.318. The log-probs must be computed at the temperature the samples were
# drawn at, or they describe a different policy.
#
# </details>

# %% tags=["hide-input"]
one = torch.tensor([[23, 45]])
truth_ids = task.encode_answers([68])  # (1, 4): "68;" and padding
with torch.no_grad():
    for temp in (1.0, 0.7):
        lp = completion_logprobs(policy, task.encode_prompts(one),
                                 truth_ids, temperature=temp)
        exact_p = float(torch.exp((lp * completion_mask(truth_ids)).sum()))
        shares = []
        for n_draw in (1_000, 20_000):
            many = one.repeat(n_draw, 1)  # (n_draw, 2)
            drawn = generate(policy, task.encode_prompts(many),
                             temperature=temp, generator=make_generator(2))
            right = task.batch_verify(many, drawn)
            se = np.sqrt(exact_p * (1 - exact_p) / n_draw)
            shares.append(f"{float(right.mean()):.3f} ± {se:.3f}")
        print(f"temperature {temp}: P('68;') = {exact_p:.3f}\n  sampled "
              f"share, 1,000: {shares[0]}; 20,000: {shares[1]}")

# %% [markdown]
# **4. Where it fails.** Split the evaluation prompts by whether the ones digits carry
# (`a % 10 + b % 10 >= 10`) and by the number of digits of the sum. Which groups does the
# partial policy get wrong most, and in which digits are its near-misses off
# (`rm_blind_spot.near_miss_class` sorts them)?
#
# <details class="answer">
# <summary>Worked answer: where it fails</summary>
#
# The cell below splits the 400 greedy answers. The guess that a carry is what trips the
# policy up holds here: for sums of the same length, those whose ones digits carry are
# answered right less often than those that do not, 0.256 against 0.397 for two-digit sums
# and 0.340 against 0.435 for three-digit ones. (The two one-digit sums are both wrong, too
# few to say anything.) The weakest sizeable group is the two-digit sums with a carry. The
# tens-digit-only near-misses are another story: the largest number of them comes from the
# three-digit sums without a carry in the ones, where the tens digits carry into the
# hundreds instead. That group, fewer than a quarter of the prompts, has 19 of them, nearly
# as many as its 25 ones-digit ones: answers like `103;` or `123;` for 113, with the
# hundreds right and the tens digit one off. In each of the other three sizeable groups the
# ones digit outnumbers the tens digit at least two to one. So the tens digit of a sum that
# overflows into the hundreds is a weak spot of its own, and a large part of why a tens
# digit alone off by one is more common among the policy's near-misses than among all
# near-misses of the same sums.
#
# </details>

# %% tags=["hide-input"]
a_, b_ = eval_pairs[:, 0], eval_pairs[:, 1]
carry = (a_ % 10 + b_ % 10 >= 10).tolist()
length = [len(str(t)) for t in (a_ + b_).tolist()]
rows = ["carry  digits  prompts  accuracy   near-miss classes "
        "(ones / tens / several)"]
for c in (False, True):
    for d in (1, 2, 3):
        idx = [i for i in range(len(kinds)) if carry[i] == c
               and length[i] == d]
        if not idx:
            continue
        right = np.mean([kinds[i] == "correct" for i in idx])
        counts = dict.fromkeys(rm_blind_spot.NEAR_MISS_CLASSES, 0)
        for i in idx:
            if kinds[i] == "near_miss":
                t = int(a_[i] + b_[i])
                answer = task.parse_completion(texts[i])
                counts[rm_blind_spot.near_miss_class(t, answer)] += 1
        classes = " / ".join(str(counts[k])
                             for k in rm_blind_spot.NEAR_MISS_CLASSES)
        rows.append(f"{'yes' if c else 'no':<6} {d:>6}  {len(idx):>7}"
                    f"  {right:>8.3f}   {classes}")
print("\n".join(rows))

# %% [markdown]
# **5. Discounting.** RL often discounts future rewards by $\gamma < 1$. With a single reward
# at the end of a 2 to 4 token episode, what would $\gamma = 0.9$ change in the returns of the
# table above? Would it favour short answers?
#
# <details class="answer">
# <summary>Worked answer: discounting</summary>
#
# With discounting, the return of token $t$ is $\sum_{k \ge 0} \gamma^k r_{t+k}$, and with one
# reward $R$ on the last token $T$ it is $\gamma^{T-t} R$: the last token keeps $R$, the one
# before it $0.9R$, the one before that $0.81R$ (the cell below prints them for the three
# lengths). So earlier tokens, the digits that decide the answer, get a smaller share of the
# credit than the `;` that merely closes it, the opposite of what we want. It favours short
# answers only where the policy has a choice of length for the same reward: the first token
# of a 2-token answer sees $0.9R$, that of a 4-token answer $0.729R$. For the verifier the
# length of a correct answer is fixed by the sum, so the effect is a rescaling; for a reward
# model that pays wrong answers too, it tilts the policy toward ending early. With episodes
# this short and one end, RLHF sets $\gamma = 1$ (chapter 7).
#
# </details>

# %% tags=["hide-input"]
gamma = 0.9
for n_tok in (2, 3, 4):
    print(f"{n_tok}-token answer, returns of tokens 1..{n_tok}: "
          + " ".join(f"{gamma ** (n_tok - 1 - t):.3f}R"
                     for t in range(n_tok)))

# %% [markdown]
# **6. Row means.** A popular bug averages the loss per row, then over rows. For a batch of
# `1+2=` (answer `3;`) and `99+99=` (answer `198;`), work out by hand the weight each answer
# token gets in the pooled mean and in the mean of row means. Which answers does the bug
# favour, and would it matter on this task?
#
# <details class="answer">
# <summary>Worked answer: row means</summary>
#
# The batch has $2 + 4 = 6$ answer tokens. The pooled mean gives each of them weight $1/6$.
# The mean of row means gives each row weight $1/2$ and splits it over the row's tokens:
# $1/4$ for each token of `3;` and $1/8$ for each token of `198;`. The bug favours short
# answers: a token of a 2-token answer counts twice as much as a token of a 4-token answer.
# On this task answers have 2 to 4 tokens, so the largest distortion is that factor of 2, and
# most sums have 3-token answers; it would change the training a little, not break it. With
# chat answers from 5 to 500 tokens the factor is 100, and the short answers would dominate.
#
# </details>
