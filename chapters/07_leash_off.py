# %% [markdown]
# # 7. The leash off, and the leash that adjusts itself
#
# Chapter 5 ran the same PPO loop twice. Paid by the verifier, the policy learned arithmetic;
# paid by the reward model (RM) on a strong leash ($\beta = 0.5$), it stayed close to where it
# started, and the RM scored both arms' answers about alike. This chapter takes up three
# questions that chapter 5 left open.
#
# 1. **What does the RM do to the policy when nothing holds it back?** We take the leash off
#    ($\beta = 0$), train longer, and follow every answer: which ones the policy gives up, and
#    where the new ones land.
# 2. **Can the leash set itself?** You will write the adaptive KL controller of Ziegler et al.
#    {cite}`ziegler2019finetuning` and run it against a fixed $\beta$.
# 3. **What did the batch-mean baseline leave out?** You will write generalized advantage
#    estimation (GAE) {cite}`schulman2016gae`, and measure why a value head, which chapter 5
#    could do without, carries the weight once answers are hundreds of tokens long.
#
# ```{admonition} What you need
# :class: tip
# Chapters 4 and 5: the reward model's blind spot, and `ppo_train` (chapter 6 is not needed
# here). The notebook trains seventeen short PPO runs, twelve for the chapter and five for the
# worked answers, each with a progress bar in JupyterLab, and stores what it reads of them in
# `outputs/ch07_*.json`; exercise 1's answer also trains a reward model (chapter 11 reads it
# again). A first run of the whole notebook takes about three minutes on a 2-core CPU; later
# runs read the stored runs back and take about fifteen seconds.
# ```

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from minirlhf import experiment, ppo, store, task
from minirlhf import reward_model as rmlib
from minirlhf.course.exercises import check
from minirlhf.course.explorer import show_figure
from minirlhf.course.frontend import someone_watching
from minirlhf.course.runs import stored_runs
from minirlhf.evaluation import EvalSet
from minirlhf.model import generate, reward_scores
from minirlhf.paths import OUTPUTS
# the Okabe-Ito colors, safe for color blindness
from minirlhf.palette import BLUE, GREEN, ORANGE, PINK, SKY, YELLOW
from minirlhf.studies import variance

torch.set_num_threads(1)  # one thread: runs are bit-identical
# Progress bars and status lines for a person at JupyterLab; none in the
# book build or under nbval.
PROGRESS = someone_watching()
# 9-pt text: figures are drawn 6.8 in wide for the page, 3.6 in for a phone
plt.rcParams["font.size"] = 9

# %% [markdown]
# ## The leash off
#
# The run is chapter 5's RM arm with one setting changed and one extended: $\beta = 0$, so the
# shaped advantage is the standardized RM score alone, and 40 iterations instead of 25. The
# policy, the reference, the RM, the prompts and every other setting are the same. For
# comparison we rerun the chapter 5 arm, $\beta = 0.5$, for the same 40 iterations. Each arm
# runs with three seeds (the seed draws the training prompts and the samples), because one
# run is an anecdote.

# %%
policy, sft_metrics = store.load_sft(progress=PROGRESS)
rm, rm_metrics = store.load_rm(progress=PROGRESS)
print(f"partial-SFT policy: greedy accuracy {sft_metrics['accuracy']:.3f}")
print(f"reward model: pair accuracy {rm_metrics['pair_accuracy']:.3f}, "
      f"near-miss accuracy {rm_metrics['near_miss_accuracy']:.3f}")

# %%
SEEDS = (0, 1, 2)
ITERATIONS = 40
evalset = EvalSet()  # the 400 eval prompts, encoded once for all runs
# what this chapter reads of a run's log
KEPT = ("accuracy", "rm_score", "kl", "kinds", "beta", "objective/kl",
        "val/completion_length")


def runs_of(name, plan, answers=False):
    """Return {(arm, seed): log} for plan {(arm, seed): (reward arm, beta,
    PPO settings)}: chapter 5's run_arm from the partial-SFT policy (both
    the start and the frozen reference). A first execution runs them and
    stores the logs (with `answers`, also each trained policy's greedy
    answers) in outputs/ch07_<name>.json; later ones read them back while
    the engine code, the plan, the policy and the RM are the same."""
    return stored_runs(OUTPUTS / f"ch07_{name}.json", plan, policy, rm,
                       keep=KEPT, answers=answers, progress=PROGRESS)


plan = {(beta, seed): ("rm", beta, {"iterations": ITERATIONS})
        for beta in (0.0, 0.5) for seed in SEEDS}
# the logs, and the greedy answers of the trained policies (read below)
runs = runs_of("leash_off", plan, answers=True)


# %%
def curve(arm, key):
    """Return the per-iteration values of `key`, every seed: (seeds, n)."""
    values = np.array([runs[arm, seed][key] for seed in SEEDS])
    # The exact KL can come out a hair below 0 (float rounding); it is >= 0.
    return values.clip(min=0.0) if key == "kl" else values


print("beta  seed   accuracy          RM score         KL per token")
print("             start    end      start    end      end")
for beta in (0.0, 0.5):
    for seed in SEEDS:
        log = runs[beta, seed]
        print(f"{beta:<5} {seed:>4}   {log['accuracy'][0]:.3f} -> "
              f"{log['accuracy'][-1]:.3f}   {log['rm_score'][0]:+.2f} -> "
              f"{log['rm_score'][-1]:+.2f}    {log['kl'][-1]:.3f}")
for beta in (0.0, 0.5):
    acc, score = curve(beta, "accuracy"), curve(beta, "rm_score")
    print(f"beta = {beta}, mean of {len(SEEDS)} seeds: accuracy "
          f"{acc[:, 0].mean():.3f} -> {acc[:, -1].mean():.3f} "
          f"(seeds {acc[:, -1].min():.3f} to {acc[:, -1].max():.3f}),\n"
          f"{'':>26}RM score {score[:, 0].mean():+.2f} -> "
          f"{score[:, -1].mean():+.2f}")
mean_acc = curve(0.0, "accuracy").mean(0)
print(f"beta = 0: the mean accuracy peaks at {mean_acc.max():.3f} "
      f"(iteration {mean_acc.argmax()}), then falls")
print("\nseed by seed: the highest accuracy in the first 10"
      "\niterations, at which iteration, and its gain over the start")
print(("beta " + "".join(f"   seed {seed:<15}" for seed in SEEDS)).rstrip())
for beta in (0.0, 0.5):
    acc = curve(beta, "accuracy")[:, :11]  # (seeds, 11): the start and 10
    print(f"{beta:<5}" + "".join(
        f"{row[1:].max():>8.3f} at {row[1:].argmax() + 1:<2} "
        f"({row[1:].max() - row[0]:+.3f})" for row in acc))
same_first = all(runs[0.0, seed]["accuracy"][1]
                 == runs[0.5, seed]["accuracy"][1] for seed in SEEDS)
print(f"after iteration 1, beta = 0 and beta = 0.5 give the same accuracy\n"
      f"in every seed: {same_first}")

# %% tags=["hide-input"]
def panels(n, narrow, height, **shared):
    """Return (fig, axes): n panels side by side on the page, 6.8 in wide
    and `height` tall, or one panel per row on a phone, 3.6 in wide."""
    if narrow:
        return plt.subplots(n, 1, figsize=(3.6, 0.7 + 2.3 * n),
                            layout="constrained", **shared)
    return plt.subplots(1, n, figsize=(6.8, height), layout="constrained",
                        **shared)


its = np.arange(ITERATIONS + 1)
acc0, acc5 = curve(0.0, "accuracy"), curve(0.5, "accuracy")
sc0 = curve(0.0, "rm_score")


def draw_leash_off(narrow=False):
    """Return accuracy, RM score and KL against the iteration, both arms."""
    fig, axes = panels(3, narrow, 3.0, sharex=True)
    for ax, key, label in (
            (axes[0], "accuracy", "true accuracy\n(verifier, greedy)"),
            (axes[1], "rm_score", "RM score of the greedy\nanswers "
                                  "(reward-model units)"),
            (axes[2], "kl", "KL to the reference\n(nats per token)")):
        for beta, color in ((0.0, ORANGE), (0.5, BLUE)):
            values = curve(beta, key)
            for row in values:
                ax.plot(its, row, color=color, lw=0.8, alpha=0.35)
            ax.plot(its, values.mean(0), color=color, lw=2.2,
                    label=f"β = {beta:g} (mean of {len(SEEDS)} seeds)")
        ax.set_ylabel(label)
    for ax in axes[-1:] if narrow else axes:
        ax.set_xlabel("PPO iteration")
    fig.legend(*axes[0].get_legend_handles_labels(), frameon=False,
               loc="outside upper center", ncols=1 if narrow else 2)
    return fig


show_figure(
    draw_leash_off,
    alt="Three panels against PPO iteration, 0 to 40, three seeds per arm. "
        "With beta = 0 the true accuracy falls from "
        f"{acc0[:, 0].mean():.3f} to {acc0[:, -1].mean():.3f}, "
        f"while the RM score rises from {sc0[:, 0].mean():+.2f} to "
        f"{sc0[:, -1].mean():+.2f} and the KL to the reference climbs to "
        f"{curve(0.0, 'kl')[:, -1].mean():.2f} nats per token. With beta = "
        f"0.5 the accuracy ends at {acc5[:, -1].mean():.3f} and the KL "
        f"stays below {curve(0.5, 'kl').max():.2f}.",
    caption="The leash off (β = 0, orange) against chapter 5's leash "
            "(β = 0.5, blue). Without the leash the RM score climbs and "
            "the KL to the reference keeps growing, while the true accuracy "
            "falls from the first iterations; the leashed runs reach about "
            "the same RM score and stay close to the reference. Thin lines "
            "are single seeds, thick lines their mean.",
)

# %% [markdown]
# This is reward over-optimization in miniature, and here it costs accuracy from the first
# step. With nothing tying it to the reference, the policy walks far from it (the KL panel),
# and the RM's score of its answers goes up, but only a little and not in every seed: the
# mean goes from +1.67 to +1.74, and one seed ends at +1.68, hardly above its start. The
# leashed runs, which barely move, reach about the same score (+1.73). The true accuracy of
# the unleashed runs falls from the first iteration on, for about twenty iterations, and then
# stays low: from 0.360 to 0.222 on average. The leashed runs dip at first and climb back, to
# 0.355.
#
# There is no early rise to read here (the seed-by-seed table above): in every seed, in both
# arms, the best accuracy of the first ten iterations is below the start. That first loss is
# not the missing leash's doing either. In the first iteration the policy *is* the reference,
# so every $\mathrm{kl}_t$ is 0 and the leash costs nothing: the two arms make the same update
# and reach the same accuracy (the last line above). The arms part later. The KL panel shows
# the price in distance: the unleashed policy walks away from the reference for about twenty
# iterations and stays there, while the leashed one hardly moves.
#
# Nothing went wrong in the code. PPO was handed a number and made it a little larger. With
# $\beta = 0$ the advantage is the RM score standardized within the batch, so even small
# differences between the answers of a batch count in full, and the policy follows them
# wherever they lead. The number is a learned proxy, and in these runs making it larger did not
# make the answers better at any point: the unleashed runs travelled several times as far as
# the leashed ones, for about the same score, and paid for the distance in accuracy.
#
# ## Where the answers go
#
# The accuracy curve says *that* answers stop being right. The verifier can say more: every
# greedy answer on the 400 evaluation prompts is correct, a near-miss (wrong, but within 10
# of the truth: a slipped digit or a missed carry), another wrong number, or malformed.
# `ppo_train` logs the four fractions every iteration.

# %%
kinds = {}  # beta -> kind -> fractions (seeds, 41)
for beta in (0.0, 0.5):
    kinds[beta] = {k: np.array([runs[beta, s]["kinds"][k] for s in SEEDS])
                   for k in task.KINDS}
print("mean of seeds     correct  near-miss  other wrong  malformed")
for beta in (0.5, 0.0):
    for it in (0, ITERATIONS):
        print(f"beta {beta:<3} iter {it:>2}  "
              + "".join(f"{kinds[beta][k][:, it].mean():>9.3f}  "
                        for k in task.KINDS).rstrip())

# %% tags=["hide-input"]
KIND_STYLE = {"correct": (GREEN, "correct"),
              "near_miss": (YELLOW, "near-miss (within 10)"),
              "other_wrong": (ORANGE, "other wrong number"),
              "malformed": (PINK, "malformed")}


def draw_kinds(narrow=False):
    """Return the kinds of greedy answer against the iteration, one panel
    per arm."""
    fig, axes = panels(2, narrow, 3.1, sharex=True, sharey=True)
    for ax, beta in zip(axes, (0.5, 0.0)):
        layers = [kinds[beta][k].mean(0) for k in task.KINDS]
        ax.stackplot(its, layers, alpha=0.9,
                     colors=[KIND_STYLE[k][0] for k in task.KINDS],
                     labels=[KIND_STYLE[k][1] for k in task.KINDS])
        ax.set_xlim(0, ITERATIONS)
        ax.set_ylim(0, 1)
        ax.set_title(f"β = {beta:g}" + (" (chapter 5's leash)" if beta else
                                         " (the leash off)"))
        if narrow or ax is axes[0]:
            ax.set_ylabel("fraction of the 400\ngreedy answers")
    for ax in axes[-1:] if narrow else axes:
        ax.set_xlabel("PPO iteration")
    fig.legend(*axes[0].get_legend_handles_labels(), frameon=False,
               loc="outside upper center", ncols=1 if narrow else 4,
               reverse=True)  # the order of the layers, top first
    return fig


show_figure(
    draw_kinds,
    alt="Two stacked area charts of the kinds of greedy answer against PPO "
        "iteration, mean of three seeds. With beta = 0.5 the layers hardly "
        f"move: correct {kinds[0.5]['correct'][:, 0].mean():.2f} to "
        f"{kinds[0.5]['correct'][:, -1].mean():.2f}. With beta = 0 the "
        f"correct layer ends at {kinds[0.0]['correct'][:, -1].mean():.2f}, "
        f"near-misses go from {kinds[0.0]['near_miss'][:, 0].mean():.2f} to "
        f"{kinds[0.0]['near_miss'][:, -1].mean():.2f}, and other wrong "
        f"numbers from {kinds[0.0]['other_wrong'][:, 0].mean():.2f} to "
        f"{kinds[0.0]['other_wrong'][:, -1].mean():.2f}; nothing is "
        "malformed.",
    caption="What the greedy answers are, iteration by iteration (mean of "
            "three seeds). On chapter 5's leash the layers hardly move; "
            "with the leash off the correct layer thins and the layer of "
            "other wrong numbers thickens, while the near-misses keep "
            "most of the answers and nothing becomes malformed.",
)

# %% [markdown]
# The correct layer thins out and both wrong layers thicken: the near-misses, which already
# held most of the answers, from 0.583 to 0.658, and the other wrong numbers from 0.058 to
# 0.121. Nothing becomes malformed: the policy still writes numbers and ends them with `;`,
# because the RM punishes garbage hard. The layers show only the net change, though. Answers
# flow in and out of every layer, so follow each prompt's answer from the start to the end of
# the unleashed runs:

# %%
eval_pairs = evalset.pairs  # (400, 2)
eval_prompts = evalset.prompts  # (400, 6)


def greedy(model):
    """Return the greedy completions (400, 4) of `model`, eval prompts."""
    return generate(model, eval_prompts, greedy=True)


start = greedy(policy)
# the trained beta = 0 policies' greedy answers, stored with their runs
ends = [torch.tensor(runs[0.0, seed]["answers"]) for seed in SEEDS]
start_kinds = task.batch_kinds(eval_pairs, start)
moves = task.kind_transitions(
    start_kinds * len(SEEDS),
    [k for end in ends for k in task.batch_kinds(eval_pairs, end)])
print("at the start         after 40 iterations at beta = 0 (3 seeds)")
print("kind         count" + "".join(f"{k:>12}" for k in task.KINDS))
for k, row in moves.items():
    print(f"{k:<12} {start_kinds.count(k):>5}"
          + "".join(f"{row[j]:>12.3f}" for j in task.KINDS))

# %% [markdown]
# Read the first row. Of the answers that were correct at the start, fewer than half are
# still correct at the end; most of the others became near-misses. The second row runs the
# other way: a share of the near-misses became correct. The policy is not walking away from
# the truth in one direction. It is *stirring* the answers inside the region where the RM
# cannot tell them apart, and because the truth is one answer among the twenty-one in that
# region, stirring loses correct answers faster than it finds them.
#
# Chapter 4 showed why the region exists: the RM's rejected answers were random numbers, never
# within 10 of the truth, so it learned the rough size of a sum and little more. The next cell
# measures its blind spot as an offset curve. For every offset $d$ from $-25$ to $+25$ it
# scores the answer "truth $+\,d$" on all 400 evaluation prompts and takes the mean of
# $r(\text{truth} + d) - r(\text{truth})$
# (`minirlhf.reward_model.margin_by_offset`, with the sign turned). It also counts how far
# each greedy answer is from the truth, at the start and after the unleashed runs.

# %%
OFFSETS = np.arange(-25, 26)
with torch.no_grad():
    # {d: r(truth) - r(truth + d)}, averaged over the 400 prompts
    margin = rmlib.margin_by_offset(rm, OFFSETS)
# r(truth + d) - r(truth), one per offset
relative = -np.array([margin[int(d)] for d in OFFSETS])
start_offsets = task.answer_offsets(eval_pairs, start).numpy()  # (400,)
end_offsets = np.concatenate([task.answer_offsets(eval_pairs, end).numpy()
                              for end in ends])  # (1200,)
flat = OFFSETS[np.abs(relative) < 0.1]
print(f"offsets the RM scores within 0.1 of the truth, on average: "
      f"{flat.min():+d} to {flat.max():+d}")
print(f"for scale: the RM's mean margin of the truth over garbage is "
      f"{rm_metrics['margin']['random']:+.2f}")


def share(offsets, lo, hi):
    """Return the share of answers at a distance lo..hi from the truth."""
    return np.mean((np.abs(offsets) >= lo) & (np.abs(offsets) <= hi))


print("\nanswer - truth     start (1 policy)   beta = 0, end (3 policies)")
for label, lo, hi in (("0 (correct)", 0, 0), ("1 to 5 away", 1, 5),
                      ("6 to 10 away", 6, 10), ("11 to 15 away", 11, 15),
                      ("more than 15 away", 16, np.inf)):
    print(f"{label:<18} {share(start_offsets, lo, hi):>14.3f}"
          f"   {share(end_offsets, lo, hi):>22.3f}")

# %% tags=["hide-input"]
def draw_offsets(narrow=False):
    """Return the histograms of answer - truth, before and after, over the
    RM's mean score of each offset relative to the truth."""
    fig, ax = plt.subplots(figsize=(3.6, 4.8) if narrow else (6.8, 3.9),
                           layout="constrained")
    edges = np.arange(-25.5, 26.5)
    ax.axvspan(-10.5, 10.5, color=YELLOW, alpha=0.15, lw=0)
    for values, color, label in (
            (start_offsets, BLUE, "partial-SFT policy (start)"),
            (end_offsets, ORANGE,
             f"β = 0, {ITERATIONS} iterations (3 seeds)")):
        ax.hist(values, bins=edges, density=True, histtype="stepfilled",
                alpha=0.35, color=color, label=label)
        ax.hist(values, bins=edges, density=True, histtype="step",
                color=color)
    ax.set_xlabel("answer − true sum" + ("\n" if narrow else " ")
                  + "(the shaded band: near-misses)")
    ax.set_ylabel("fraction of greedy answers")
    ax.set_xlim(-25.5, 25.5)
    rm_ax = ax.twinx()
    rm_ax.plot(OFFSETS, relative, color="black", lw=2,
               label="RM: mean r(truth + d) − r(truth)")
    rm_ax.axhline(0, color="black", lw=0.8, ls=":")
    rm_ax.set_ylabel("RM score relative to the truth\n"
                     "(reward-model units)")
    (h1, n1), (h2, n2) = (a.get_legend_handles_labels() for a in (ax, rm_ax))
    fig.legend(h1 + h2, n1 + n2, frameon=False, loc="outside upper center",
               ncols=1 if narrow else 2)
    return fig


show_figure(
    draw_offsets,
    alt="Histogram of answer minus true sum for the greedy answers, before "
        "and after 40 iterations with beta = 0, with the RM's mean score "
        "relative to the truth as a black curve on a second axis. The RM "
        f"curve is flat, within 0.1 of the truth, from {flat.min():+d} to "
        f"{flat.max():+d}, and falls away outside. The exact answers drop "
        f"from {np.mean(start_offsets == 0):.0%} to "
        f"{np.mean(end_offsets == 0):.0%}; the answers move to about ten "
        "below the truth, at the edge of the near-miss band and just "
        "beyond it.",
    caption="Where the answers go: how far each greedy answer is from the "
            "truth, before (blue) and after (orange) 40 iterations without "
            "a leash, over the RM's average opinion of each offset (black, "
            "right-hand axis). The RM's curve is flat near the truth; the "
            "exact answers lose ground and the answers spread over that "
            "flat stretch, toward the edge of the near-miss band and just "
            "beyond it.",
)

# %% [markdown]
# On average the RM cannot tell the truth from its close neighbours: its curve is flat around
# the truth and only bends away a few units out, gently next to its verdict on garbage, and
# more gently below the truth than above it. The policy's answers move: fewer exact answers and
# close neighbours, fewer answers about ten above the truth, and many more about ten below it
# (a tens digit too low), at the edge of the near-miss band and just beyond it, where the RM's
# average objects only a little; a few go as far as twenty below. But an *average* does not
# say what the policy gains on a single prompt by moving. For that, look at single prompts.
# The next cell scores, for each prompt, every answer within 10 of the truth, and asks how the
# greedy answers compare with the truth *on the same prompt*.

# %%
window = np.arange(-10, 11)


def favourites(rm):
    """Return (each prompt's favourite offset within 10 of the truth, the
    mean of r(favourite) - r(truth), r(truth)) under `rm`, on the 400
    eval prompts."""
    truth = eval_pairs.sum(1)  # (400,)
    with torch.no_grad():
        correct = task.correct_completions(eval_pairs)
        r_truth = reward_scores(rm, eval_prompts, correct)  # (400,)
        r_window = torch.full((len(truth), len(window)), -np.inf,
                              dtype=r_truth.dtype)  # (400, 21)
        for j, d in enumerate(window):
            answer = truth + int(d)
            ok = (answer >= 0) & (answer <= task.MAX_SUM)  # (400,)
            answers = task.encode_answers(answer[ok].tolist())
            r_window[ok, j] = reward_scores(rm, eval_prompts[ok], answers)
    favourite = window[r_window.argmax(1).numpy()]
    return favourite, (r_window.max(1).values - r_truth).mean(), r_truth


favourite, best_gap, r_truth = favourites(rm)
print(f"prompts whose truth is the RM's favourite within 10 of it: "
      f"{np.mean(favourite == 0):.3f}\n(a random pick of 21 would give "
      f"{1 / len(window):.3f}); on average the favourite scores "
      f"{best_gap:+.2f}\nabove the truth\n")
print("greedy answers          r(answer) - r(truth)   share above the truth")
with torch.no_grad():
    r_start = reward_scores(rm, eval_prompts, start)
    print(f"{'start':<23} {(r_start - r_truth).mean():>+20.2f}"
          f" {(r_start > r_truth).float().mean():>23.3f}")
    lost, found = [], []  # r(new) - r(truth); r(old) - r(truth)
    for seed, end in zip(SEEDS, ends):
        r_end = reward_scores(rm, eval_prompts, end)
        print(f"{f'beta = 0, seed {seed}, end':<23} "
              f"{(r_end - r_truth).mean():>+20.2f}"
              f" {(r_end > r_truth).float().mean():>23.3f}")
        end_kinds = task.batch_kinds(eval_pairs, end)
        for i, (was, now) in enumerate(zip(start_kinds, end_kinds)):
            if was == "correct" and now != "correct":
                lost.append((r_end[i] - r_truth[i]).item())
            if was != "correct" and now == "correct":
                found.append((r_start[i] - r_truth[i]).item())
lost, found = np.array(lost), np.array(found)
print(f"\nanswers that stopped being correct ({len(lost)}): the new answer "
      f"scores {lost.mean():+.2f}\nagainst the truth, and higher in "
      f"{np.mean(lost > 0):.0%} of them")
print(f"answers that became correct ({len(found)}): the old answer had "
      f"scored {found.mean():+.2f}\nagainst the truth, and higher in "
      f"{np.mean(found > 0):.0%} of them")

# %% [markdown]
# There is the blind spot, prompt by prompt. Near the truth the RM's scores are not flat but
# *noisy*: for almost every prompt some wrong neighbour scores higher than the truth, and
# which one is an accident of the RM's weights. At the start the policy's answers score below
# the truth on average; after the unleashed runs they score about as high as the truth in two
# seeds and no closer to it in the third, and in every seed more of them score above the truth
# than at the start. The two last lines say how the correct answers went. The answers that
# replaced them score, on average, about what the truth scores (+0.05), and higher than the
# truth in fewer than half of the prompts: the policy did not trade the truth for answers this
# RM clearly prefers, it traded it for neighbours the RM cannot tell from it. The answers it
# made correct had scored well below the truth on average, so that traffic follows a real
# signal (the RM does know a far-off answer from a close one), but it is the smaller stream,
# 95 answers against 261, and the accuracy curve shows it falling behind from the first
# iterations on. By the end the policy has not learned the RM's preferences so much as its
# indifference.
#
# Gao et al. measured this at scale {cite}`gao2023scaling`. They trained a large "gold" reward
# model to play the part of the truth and optimized policies against smaller proxy RMs trained
# on its labels: the proxy score kept rising, while the gold score first rose and then fell,
# as a smooth function of how far the policy had moved from its start. They measure that
# distance as the square root of the KL from the initial policy to the trained one, over
# whole sampled completions. The square root, because the KL behaves like a squared
# distance: a small step away from the start gives a KL that grows with the square of the
# step, so $\sqrt{\mathrm{KL}}$ grows like the step itself. Our verifier plays the gold RM,
# and cannot be wrong. Our distance is not quite theirs: `evaluate` computes the exact KL per
# token, summed over the vocabulary at each position of the greedy answers, not the KL
# between the distributions of sampled answers. It reads the same drift without sampling
# noise, so the shapes can be compared and the numbers cannot. The next cell gives the
# unleashed runs' mean accuracy at each distance travelled, and the figure after it plots
# every run against $\sqrt{\mathrm{KL}}$, as Gao et al. do.

# %%
print("KL per token   mean accuracy of the beta = 0 runs at that distance")
kl_all, acc_all = curve(0.0, "kl").ravel(), curve(0.0, "accuracy").ravel()
BANDS = ((0.0, 0.02), (0.02, 0.05), (0.05, 0.1), (0.1, 0.2), (0.2, 1.0))
for lo, hi in BANDS:
    inside = (kl_all >= lo) & (kl_all < hi)
    if inside.any():
        print(f"{lo:.2f} to {hi:.2f}   {acc_all[inside].mean():.3f}  "
              f"({inside.sum()} evaluations)")

# %% tags=["hide-input"]
def draw_distance(narrow=False):
    """Return true accuracy and RM score against sqrt(KL), every run and
    evaluation, one panel each."""
    fig, (acc_ax, rm_ax) = panels(2, narrow, 3.1, sharex=True)
    for beta, color, marker in ((0.0, ORANGE, "o"), (0.5, BLUE, "s")):
        x = np.sqrt(curve(beta, "kl"))
        for ax, key in ((acc_ax, "accuracy"), (rm_ax, "rm_score")):
            ax.scatter(x, curve(beta, key), s=10, alpha=0.6, color=color,
                       marker=marker, label=f"β = {beta:g}", lw=0)
    acc_ax.axhline(curve(0.0, "accuracy")[0, 0], color="grey", lw=0.8,
                   ls=":")
    acc_ax.set_ylabel("true accuracy\n(verifier, greedy)")
    rm_ax.set_ylabel("RM score of the greedy\nanswers (reward-model units)")
    for ax in (rm_ax,) if narrow else (acc_ax, rm_ax):
        ax.set_xlabel("√KL to the reference\n(√(nats per token))")
    acc_ax.legend(frameon=False, loc="lower left")
    return fig


show_figure(
    draw_distance,
    alt="Two scatter plots against the square root of the per-token KL to "
        "the reference, one point per run and iteration. True accuracy: "
        "the beta = 0 runs fall steadily with distance; the beta = 0.5 "
        "points stay at small distances, about as accurate as the beta = 0 "
        "points early on and more accurate late. RM score: no steady rise "
        "with distance.",
    caption="Over-optimization against distance, in Gao et al.'s "
            "coordinates: every evaluation of every run, against the square "
            "root of the KL (ours per token, on the greedy answers; theirs "
            "over whole sampled completions). Without the leash the true "
            "accuracy falls the further the policy goes (the dotted line "
            "is where it began), and the proxy's score does not keep "
            "rising with it; the leashed runs stay near the start.",
)

# %% [markdown]
# The unleashed runs trace only the falling half of Gao's curve: their accuracy is lower in
# each band of distance than in the one before, from 0.343 below 0.02 nats per token to 0.187
# beyond 0.2, and every band is below the start. The proxy's score does not keep rising with
# the distance either (the right-hand panel): the seed that went furthest ends with about the
# score it started with.
#
# The leashed runs stay near the start of that curve. In their first ten or so iterations they
# are no more accurate than the unleashed runs were at the same distance, at times less. But by
# the end, still at that distance (their KL ends between 0.023 and 0.031 nats per token), they
# have climbed back to 0.355 on average, where the unleashed runs had averaged 0.320 between
# 0.02 and 0.05; in the second half of the run their KL even falls a little (the KL panel of
# the first figure). They win back what the first steps lost, and no more: no leashed run
# ends clearly above its start (0.343 to 0.362, against 0.360). That is the lesson of the
# leash. **The leash buys time; it cannot create signal.** It limits how far the policy can
# travel, and so how much damage a blind proxy can do, but what the policy finds on the way
# comes from the reward alone: against this RM, at best the accuracy it started with; against
# the verifier (chapter 5), a walk uphill.
#
# Gao et al. studied the leash at scale {cite}`gao2023scaling`: in their runs a KL penalty did
# not raise the best gold score reachable at a given distance from the start; its effect was
# like stopping the run early, and they caution that this may depend on their hyperparameters.
# Our leashed runs end more accurate than the unleashed ones were at the same distance, so in
# that detail they do not reproduce Gao's finding; three seeds on one small RM cannot say how
# general either result is.
#
# ## Exercise 7.1: the adaptive KL controller
#
# A fixed $\beta$ buys a distance that depends on everything else: the reward's scale, the
# learning rate, the task. Chapter 5 had to pick its two values by hand, and chapter 6's
# $\beta$ sweep ([`06_robustness.ipynb`](06_robustness.ipynb)) shows how much rides on the
# choice. Ziegler et al.
# instead choose the distance, a *target* KL, and let $\beta$ follow it
# {cite}`ziegler2019finetuning`. Their paper (section 2.2) writes the rule as
# $e_t = \operatorname{clip}\big((\mathrm{KL}_t - \mathrm{KL}_\text{target}) /
# \mathrm{KL}_\text{target}, -0.2, 0.2\big)$ and $\beta_{t+1} = \beta_t (1 + K_\beta e_t)$, with
# $K_\beta = 0.1$, and calls it a log-space proportional controller. Their released code
# (`lm_human_preferences/train_policy.py`, `AdaptiveKLController`), and TRL's PPO trainer up
# to version 0.11 after it, replace the constant $K_\beta$ by the batch's share of a
# *horizon* of samples. That is the form we use. After each batch of $n_\text{steps}$ samples
# whose KL to the reference was measured as $\mathrm{KL}$:
#
# $$
# e = \operatorname{clip}\!\Big(\frac{\mathrm{KL}}{\mathrm{KL}_\text{target}} - 1,\;
# -0.2,\; 0.2\Big),
# \qquad
# \beta \leftarrow \beta\,\Big(1 + e\,\frac{n_\text{steps}}{\text{horizon}}\Big).
# $$
#
# This is chapter 1's second design question, how to choose $\beta$, answered; here the rule
# drives a real run. `ppo_train` calls the
# package's version after every iteration when `PPOConfig.kl_target` is set, with the
# batch's mean per-token k1 estimate as $\mathrm{KL}$ and the batch size as
# $n_\text{steps}$.
#
# **Contract.** `adaptive_kl_update(beta, kl, target, n_steps, horizon)` returns the next
# $\beta$ as a Python `float`, not rounded. `kl` may be negative (a k1 mean over few tokens can
# be); `n_steps` may be 0; `beta` may be 0.
#
# **Examples.** `adaptive_kl_update(0.1, 6.0, 6.0, 1024, 10_000)` returns `0.1` (on target).
# `adaptive_kl_update(0.1, 60.0, 6.0, 1024, 10_000)` returns `0.102048`: the error $9$ is
# clipped to $0.2$, and $0.1 \times (1 + 0.2 \times 0.1024) = 0.102048$.
# `adaptive_kl_update(0.5, 0.11, 0.1, 64, 640)` returns `0.505`: $e = 0.1$ is inside the
# clip and $n_\text{steps}/\text{horizon} = 0.1$.
#
# **How it is judged.** Ten cases worked by hand, each within $10^{-9}$: on target; far
# above and far below (both capped); 10% above and below (not capped); `n_steps = 0`;
# `beta = 0`; a whole horizon at the cap; a negative KL; `n_steps` beyond the horizon.

# %% tags=["solution"]
def adaptive_kl_update(beta, kl, target, n_steps, horizon):
    """Return the next beta of the adaptive KL controller (Ziegler et al.
    2019), a Python float."""
    # BEGIN SOLUTION
    e = float(np.clip(kl / target - 1, -0.2, 0.2))  # relative error, capped
    return float(beta * (1 + e * n_steps / horizon))
    # END SOLUTION

# %% [hints] adaptive_kl_update

# %%
check("adaptive_kl_update", adaptive_kl_update);

# %% [markdown]
# Three properties follow from the two lines, and they are what the cases test. The update
# **multiplies**, so a $\beta$ of 0 can never come back: the controller adjusts a leash, it
# does not put one on. And $\beta$ stays positive as long as the factor does: at the lowest
# error, $e = -0.2$, the factor is $1 - 0.2\, n_\text{steps}/\text{horizon}$, which reaches 0
# at $n_\text{steps} = 5 \times \text{horizon}$. Ziegler et al.'s code measures
# $n_\text{steps}$ in samples per batch against a horizon of 10,000, far from that edge; the
# rule is only meant
# for steps well inside it. The **clip** bounds the step whatever
# the measurement, which matters because a per-batch KL estimate is noisy (chapter 1) and can
# even be negative. The **horizon** sets the speed: over one horizon's worth of samples at
# the cap, $\beta$ changes by a factor of about $e^{\pm 0.2}$. The package's
# `minirlhf.ppo.adaptive_kl_update`, used from here on, also rejects a target or horizon that
# is not positive, a negative `n_steps`, a negative $\beta$, and a step of 5 horizons or more
# (where $\beta$ could turn negative) with a `ValueError`.
#
# The controller was once the default: TRL's original PPO trainer, up to version 0.11,
# switched it on (`adap_kl_ctrl=True` in `trl/trainer/ppo_config.py`), with Ziegler's target of
# 6 nats per completion and horizon of 10,000 samples; the PPO trainer that replaced it has a
# fixed `kl_coef`. Before it drives a run, trace it by hand on a made-up run whose measured KL
# (per completion, as in Ziegler's setting) first overshoots the target of 6 and then falls
# below it, with batches of 1,024 samples. Note how $\beta$ keeps rising while the KL is still
# above the target, and turns only once the KL drops under it: the delay that the runs below
# show too.

# %%
beta, target, n_steps, horizon = 0.1, 6.0, 1024, 10_000
# What a run might measure, batch after batch (nats per completion):
measured_kl = [2.0, 5.0, 9.0, 14.0, 10.0, 7.0, 5.5, 4.0]
print("batch    KL   error   beta after")
for i, kl_batch in enumerate(measured_kl, 1):
    error = float(np.clip(kl_batch / target - 1, -0.2, 0.2))
    beta = ppo.adaptive_kl_update(beta, kl_batch, target, n_steps, horizon)
    print(f"{i:>5} {kl_batch:5.1f}  {error:+.3f}   {beta:.4f}")

# %% [markdown]
# ## The adaptive leash in the loop
#
# The use case: a leash set too loose. We start from $\beta = 0.1$, light enough to let the
# policy drift (chapter 5's verifier arm used 0.08; TRL's default `kl_coef` of 0.05 looks
# similar but is not comparable, because it weighs the KL against the raw reward-model score
# and ours against a standardized one), and compare a fixed $\beta = 0.1$ with the controller starting
# from the same value. Two settings to choose, and both have to fit *this* run, not
# Ziegler's:
#
# - **The target.** The distance we are willing to let the policy travel. The accuracy-by-KL
#   table of the unleashed runs is the price list, and it has no free entry: they had lost
#   accuracy at every distance, a little below 0.05 nats per token (0.320 between 0.02 and
#   0.05, against 0.360 at the start) and more and more beyond. We take 0.05, where the loss
#   was still small. (The controller measures the KL with the k1 estimate of each training
#   batch, a noisier reading of nearly the same distance as the evaluations' exact KL.)
# - **The horizon.** Ziegler et al. used a horizon of 10,000 samples (and a target of 6 nats
#   per *completion*; ours is per token), in runs many horizons long. Our whole run is
#   $40 \times 64 = 2{,}560$ samples: with a horizon of 10,000, $\beta$ could change by at
#   most about 5% in the entire run, and the controller would do nothing. A horizon of 256
#   samples lets $\beta$ move by up to 5% per iteration, a factor of about seven over the
#   run, while one noisy batch still moves it by no more than 5%.

# %%
TARGET = 0.05  # nats per token: where beta = 0 had lost little accuracy
HORIZON = 256  # samples, 4 iterations of 64: beta moves <= 5% per iteration
step = 0.2 * ppo.PPOConfig().batch_size / HORIZON
print(f"target {TARGET} nats per token, horizon {HORIZON} samples: beta "
      f"moves by at most\n{step:.0%} per iteration, a factor of "
      f"{(1 + step) ** ITERATIONS:.1f} up or {(1 - step) ** ITERATIONS:.2f} "
      f"down over {ITERATIONS} iterations")
plan = {}  # fixed beta 0.1 and the adaptive leash from 0.1, every seed
for seed in SEEDS:
    plan[0.1, seed] = ("rm", 0.1, {"iterations": ITERATIONS})
    plan["adaptive", seed] = ("rm", 0.1, {"iterations": ITERATIONS,
                                          "kl_target": TARGET,
                                          "kl_horizon": HORIZON})
runs |= runs_of("adaptive", plan)

print("\narm                 seed   accuracy end   KL end   beta end")
for arm in (0.1, "adaptive", 0.5):
    for seed in SEEDS:
        log = runs[arm, seed]
        name = "adaptive from 0.1" if arm == "adaptive" else f"fixed {arm}"
        print(f"{name:<19} {seed:>4}   {log['accuracy'][-1]:>12.3f}"
              f"   {log['kl'][-1]:>6.3f}   {log['beta'][-1]:>8.3f}")
for arm in (0.1, "adaptive", 0.5):
    name = "adaptive from 0.1" if arm == "adaptive" else f"fixed {arm}"
    print(f"{name:<19} mean   {curve(arm, 'accuracy')[:, -1].mean():>12.3f}"
          f"   {curve(arm, 'kl')[:, -1].mean():>6.3f}")
# What the leash charges one completion in the adaptive runs' last batch:
# beta times the batch's per-token KL times the completion length.
charge = np.mean([log["beta"][-1] * log["objective/kl"][-1]
                  * log["val/completion_length"][-1]
                  for log in (runs["adaptive", s] for s in SEEDS)])
print(f"\nadaptive runs, last batch: the leash charges a completion "
      f"{charge:.2f}\n(the standardized score it competes with has std 1)")

# %% tags=["hide-input"]
arms = ((0.1, ORANGE, "fixed β = 0.1"),
        ("adaptive", GREEN, "adaptive, from β = 0.1"),
        (0.5, BLUE, "fixed β = 0.5"))
train_its = np.arange(1, ITERATIONS + 1)
beta_end = curve("adaptive", "beta")[:, -1]


def draw_adaptive(narrow=False):
    """Return the batch KL, beta and accuracy against the iteration, for
    the two fixed leashes and the adaptive one."""
    fig, axes = panels(3, narrow, 3.1, sharex=True)
    for arm, color, label in arms:
        for ax, x, key in ((axes[0], train_its, "objective/kl"),
                           (axes[1], train_its, "beta"),
                           (axes[2], its, "accuracy")):
            values = curve(arm, key)
            for row in values:
                ax.plot(x, row, color=color, lw=0.7, alpha=0.3)
            ax.plot(x, values.mean(0), color=color, lw=2.2, label=label)
    axes[0].axhline(TARGET, color="black", ls="--", lw=1,
                    label=f"KL target, {TARGET} nats per token")
    axes[0].set_ylabel("KL of the training batch\n(k1, nats per token)")
    axes[1].set_ylabel("β used in the iteration")
    axes[2].set_ylabel("true accuracy\n(verifier, greedy)")
    for ax in axes[-1:] if narrow else axes:
        ax.set_xlabel("PPO iteration")
    fig.legend(*axes[0].get_legend_handles_labels(), frameon=False,
               loc="outside upper center", ncols=1 if narrow else 2)
    return fig


show_figure(
    draw_adaptive,
    alt="Three panels against PPO iteration for three arms with three seeds "
        "each: fixed beta 0.1, the adaptive controller starting at 0.1 with "
        f"target {TARGET} and horizon {HORIZON}, and fixed beta 0.5. The "
        "training-batch KL: the fixed 0.1 arm climbs well past the dashed "
        "target; the adaptive arm's mean follows it closely for the first "
        "half of the run, then falls below it and ends below it. Beta: "
        "the adaptive arm's beta dips, then rises to between "
        f"{beta_end.min():.2f} and {beta_end.max():.2f}. The last panel: "
        "true accuracy.",
    caption="The adaptive leash against two fixed ones: the KL of each "
            "training batch against the dashed target, the β each arm "
            "used, and the true accuracy; thin lines are seeds, thick "
            "lines their mean. The adaptive β dips while the KL is below "
            "the target and climbs once the KL is past it; its runs "
            "overshoot the target, follow the fixed β = 0.1 runs for the "
            "first half of the run and end below them.",
)

# %% [markdown]
# The controller does what it promises, with a delay. While the policy is still close to the
# reference, the KL is below the target and $\beta$ drifts *down*; once the KL passes the
# target, $\beta$ climbs by up to 5% an iteration and keeps climbing as long as the KL stays
# above it. For the first half of the run the adaptive arm's batch KL can hardly be told from
# the fixed $\beta = 0.1$ arm's (the left panel), because its $\beta$ is still near its start,
# at first below it; the two part only once $\beta$ has climbed. The adaptive runs end with a
# leash about three times tighter than where they
# started (between 0.26 and 0.39) and travel less far than the fixed $\beta = 0.1$ runs, but
# they overshoot the target and do not come back to it within the run. Their accuracy ends
# between the two fixed leashes' (0.294 on average, against 0.263 and 0.355): the leash they
# reach late saves part of what the loose one loses, not all of it. Three reasons for the
# overshoot, all general:
#
# - **The controller acts on distance already travelled.** A KL above the target only says the
#   policy has gone too far; raising $\beta$ slows further travel, and pulls the policy back
#   only slowly, against a reward that keeps pushing. Here the learning rate also anneals to 0
#   over the run, so late corrections have little left to act on.
# - **The leash is small next to the reward.** The standardized score is of order 1; the leash
#   charges a completion $\beta$ times the sum of its tokens' KL, and even at the end of the
#   adaptive runs, with $\beta$ about three times its start, that is a small fraction of the
#   score's spread (the last line printed above). It takes a large $\beta$, or a long
#   time, for the leash to win.
# - **It acts on the sum of past errors.** Control theory names a controller by what its
#   output follows: a *proportional* controller's output is proportional to the present
#   error, an *integral* controller's to the sum of all the errors so far. Take logarithms of
#   the update: $\log\beta_{k+1} = \log\beta_k + \log(1 + e_k\, n/\text{horizon}) \approx
#   \log\beta_k + e_k\, n/\text{horizon}$. Each *step* of $\log\beta$ is proportional to the
#   present error, which is why Ziegler et al. call their rule a log-space proportional
#   controller; but $\log\beta$ itself is then a running sum of the clipped errors. In the
#   vocabulary above that is integral action, with no term proportional to the present error
#   and none that anticipates its change. The label differs from the authors'; the arithmetic
#   is the same. While the KL climbs toward the target, the errors are
#   negative and their sum drives $\beta$ *down*; when the KL crosses the target, $\beta$ is
#   at its lowest and has to be summed back up before it can hold the policy. That is the
#   classic overshoot of integral-only control, and it is what the middle panel shows.
#
# An adaptive leash is a way to *choose* how far you trust the reward model, in nats, instead
# of in units of a coefficient whose meaning changes with every run. It does not know which
# distance is safe: that has to be measured against something the policy cannot game, the way
# the first part of this chapter did.
#
# ## What the batch baseline left out
#
# Chapter 5's advantage was the return from each token to the end, minus the batch's mean
# return at that position. The baseline knows the position and nothing else. It ignored two
# things a full PPO implementation uses.
#
# - **Which token did it.** A completion's score is the result of all its tokens, and the
#   return hands the same score to each of them: it credits or blames the lucky and the
#   unlucky tokens alike. With four tokens, little is lost. With four hundred, a token's
#   share of the credit is buried in the luck of the other 399.
# - **What the state already says.** With the KL in the reward, each token earns
#   $r_t = -\beta\,\mathrm{kl}_t$, and the last one also earns the score $R$. The return
#   carries both back to the tokens that led to them, but the baseline cannot tell a state
#   that is going well from one that is not: after a wrong first digit the answer is lost,
#   and a value function would know it.
#
# A *value head* (the critic) estimates $V(s_t)$: the expected return from the state
# $s_t$ = prompt plus the first $t$ tokens of the completion. With it, the advantage of token
# $t$ can be built from *temporal-difference errors*,
#
# $$
# \delta_t = r_t + \gamma\, V(s_{t+1}) - V(s_t), \qquad V(s_T) = 0,
# $$
#
# where $T$ is the completion's length and $\gamma$ the discount: a reward that comes $k$
# tokens later counts $\gamma^k$ times as much as one paid now, so a $\gamma$ below 1 makes
# far-off rewards matter less. In RLHF $\gamma = 1$: the episode is short and has one end,
# and nothing is discounted. $\delta_t$ asks: did the world look better after token
# $t$ than the critic expected before it? Generalized advantage estimation
# {cite}`schulman2016gae` mixes the one-step answer with longer ones through a second
# parameter, $\lambda$:
#
# $$
# A_t = \delta_t + \gamma\lambda\, A_{t+1}
# = \sum_{k \ge 0} (\gamma\lambda)^k\, \delta_{t+k}, \qquad A_T = 0.
# $$
#
# The two ends of the dial:
#
# - $\lambda = 1$: the sum telescopes to $A_t = G_t - V(s_t)$, the return from $t$ minus the
#   value. Unbiased whatever the critic's errors, but every later token's luck is still in it.
# - $\lambda = 0$: $A_t = \delta_t$. Only token $t$'s own step, so little noise, but it leans
#   entirely on the critic: if $V$ is wrong, so is $A_t$.
#
# TRL's PPO trainer (defaults `gamma=1.0`, `lam=0.95` in `trl/experimental/ppo/ppo_config.py`)
# and the original RLHF code use $\gamma = 1$, $\lambda = 0.95$.
#
# **A worked example.** The completion `68;` of `23+45=` has three tokens. The reward model
# pays $R = 1$ at the end and nothing before ($\beta = 0$, so no per-token KL): $r = (0, 0, 1)$.
# A critic values the states before each token at $V = (0.5, 0.6, 0.8)$: it grows more
# confident as the answer takes shape. With $\gamma = 1$:
#
# | token $t$ | $r_t$ | $V(s_t)$ | $V(s_{t+1})$ | $\delta_t$ | $A_t$, $\lambda = 0.5$ |
# | --- | --- | --- | --- | --- | --- |
# | 2 (`;`) | 1 | 0.8 | 0 (the end) | $1 + 0 - 0.8 = 0.2$ | $0.2$ |
# | 1 (`8`) | 0 | 0.6 | 0.8 | $0 + 0.8 - 0.6 = 0.2$ | $0.2 + 0.5 \times 0.2 = 0.3$ |
# | 0 (`6`) | 0 | 0.5 | 0.6 | $0 + 0.6 - 0.5 = 0.1$ | $0.1 + 0.5 \times 0.3 = 0.25$ |
#
# The table is computed from the last token back to the first, the order of its rows: each
# $A_t$ needs $A_{t+1}$. With $\lambda = 1$ the
# last column would read $1 - V(s_t) = (0.5, 0.4, 0.2)$, the return minus the value; with
# $\lambda = 0$ it would be the $\delta$ column, $(0.1, 0.2, 0.2)$. The batch baseline would
# have given all three tokens the same number.
#
# ## Exercise 7.2: `gae`
#
# **Contract.** `gae(rewards, values, gamma, lam)` takes the per-token rewards and the
# critic's values of one completion, shape `(T,)`, or of a batch of completions of equal
# length, shape `(B, T)`, as lists or NumPy arrays, and returns the advantages as a NumPy float
# array of the same shape. `values[..., t]` is $V(s_t)$, the value of the state *before*
# token $t$; the value after the last token is 0. Work along the last axis; do not change the
# inputs. NumPy only.
#
# **Examples.** The worked example: `gae([0, 0, 1], [0.5, 0.6, 0.8], 1.0, 0.5)` returns
# `array([0.25, 0.3, 0.2])`; with `lam=1.0`, `array([0.5, 0.4, 0.2])`; with `lam=0.0`,
# `array([0.1, 0.2, 0.2])`.
#
# **How it is judged.** Thirteen cases worked by hand, compared within $10^{-6}$: the three
# above; a discount of $\gamma = 0.5$; a single token; a reward on every token; KL-shaped
# rewards; a perfect critic; a batch of two completions; $\gamma$ and $\lambda$ both below
# 1; $\gamma = 0.9$ with a value on every token, and $\lambda = 0$ with $\gamma = 0.5$ on a
# batch (the discount inside the TD error, $r_t + \gamma V_{t+1} - V_t$, matters there); and
# the worked example as written, with the rewards a list of ints.

# %% tags=["solution"]
def gae(rewards, values, gamma, lam):
    """Return the generalized advantage estimates, one per token, as a
    NumPy array shaped like `rewards`."""
    # BEGIN SOLUTION
    rewards = np.asarray(rewards, dtype=float)  # (T,) or (B, T)
    values = np.asarray(values, dtype=float)
    adv = np.zeros_like(rewards)
    next_value, next_adv = 0.0, 0.0  # nothing after the last token
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[..., t] + gamma * next_value - values[..., t]
        next_adv = delta + gamma * lam * next_adv
        adv[..., t] = next_adv
        next_value = values[..., t]
    return adv
    # END SOLUTION

# %% [hints] gae

# %%
check("gae", gae);

# %% [markdown]
# The package's `minirlhf.ppo.gae` is the same loop, and rejects rewards and values of
# different shapes, and $\gamma$ or $\lambda$ outside $[0, 1]$. With the KL in the reward the
# per-token rewards are no longer zero before the end, and the same function spreads them:

# %%
kl_t = np.array([0.30, -0.10, 0.05])  # per-token log-ratios of "68;"
beta, R = 0.5, 1.0
r_shaped = -beta * kl_t + np.array([0.0, 0.0, R])  # reward on every token
V = np.array([0.5, 0.6, 0.8])
print("shaped rewards r_t   ", np.round(r_shaped, 3))
for lam in (0.0, 0.95, 1.0):
    adv = ppo.gae(r_shaped, V, 1.0, lam)
    print(f"advantages, lam = {lam:<4}", np.round(adv, 3))

# %% [markdown]
# With $\lambda = 0$ the first token's advantage is its own step only: its KL cost plus the
# critic's change of mind from $V(s_0)$ to $V(s_1)$. With $\lambda = 1$ it also carries the
# costs and gains of every token after it, the end reward included.
#
# ### Two questions from earlier chapters, answered
#
# Chapters 1 and 2 raised two questions whose answers need the return, the critic and GAE.
# They are on the table now.
#
# <details class="answer">
# <summary>Worked answer: penalize every token, or the sequence once? What changes for credit assignment? (chapter 1)</summary>
#
# Both placements charge a completion the same total, $\beta \sum_t \mathrm{kl}_t$; they differ
# in *which* tokens see which part of it.
#
# - **Per token** (InstructGPT; TRL's `trl/experimental/ppo/ppo_trainer.py`): token $t$
#   gets $r_t = -\beta\,\mathrm{kl}_t$, and the last token also gets $R$. The return from token
#   $t$ onwards, $G_t = R - \beta \sum_{t' \ge t} \mathrm{kl}_{t'}$, charges token $t$ for its own
#   divergence and the divergence of what follows it, which it influences, but not for the
#   tokens before it, which it cannot change.
# - **Once per sequence**: all of $R - \beta \sum_t \mathrm{kl}_t$ is paid at the end, so every
#   token's return is the same number, including the divergence of earlier tokens.
#
# Those earlier terms do not depend on the action at $t$, so in expectation the policy
# gradient is the same (they act like a baseline, chapter 2). They add variance, though, and
# with a critic and GAE the per-token placement gives a signal right at the token that
# diverged, instead of one number smeared over the whole completion. The cell below takes the
# completion `68;` of the worked example above ($\beta = 0.5$, $R = 1$, and the per-token
# log-ratios `kl_t` and values `V` of the previous cell) and computes, both ways, the
# returns-to-go and the GAE advantages at $\lambda = 0.95$. With our short completions and
# chapter 5's baseline (the batch's mean return-to-go at each position) the difference is
# small; with 500-token answers it is not.
#
# A related choice is the *mean* in chapter 1's `kl_penalty`: the sum is what a completion
# pays, the mean is what is comparable across lengths. A sum penalty makes long completions
# costlier, which is sometimes wanted and sometimes a bias toward short answers.
#
# </details>

# %% tags=["hide-input"]
def returns_to_go(r):
    """Return G_t = sum of r_t' over t' >= t, for every t."""
    return np.cumsum(r[::-1])[::-1]


per_token = -beta * kl_t + np.array([0.0, 0.0, R])  # R on the last token
per_sequence = np.array([0.0, 0.0, R - beta * kl_t.sum()])
print("token                ", "  ".join(f"{c!r:>6}" for c in "68;"))
for name, r in (("per-token", per_token), ("per-sequence", per_sequence)):
    print(f"{name + ' rewards':<21}", np.round(r, 3))
    print(f"{'  returns-to-go G_t':<21}", np.round(returns_to_go(r), 3))
    print(f"{'  GAE, lam = 0.95':<21}",
          np.round(ppo.gae(r, V, 1.0, 0.95), 3))

# %% [markdown]
# <details class="answer">
# <summary>Worked answer: why can a critic and GAE handle a KL-shaped reward while the separate-term version cannot? (chapter 2)</summary>
#
# When the KL is part of the reward, it is part of the *return*: every token's return includes
# the divergence it will cause later in the completion. The critic $V(s_t)$ then predicts the
# expected shaped return from state $s_t$, KL costs included, and GAE spreads each token's
# $-\beta\,\mathrm{kl}_t$ back to the decisions that led to it, as the cell above shows. A
# token that steers the completion into territory where the policy and the reference disagree
# for many tokens to come gets a low advantage *now*, even if it is cheap itself. The KL is
# treated like any other reward, with all of PPO's machinery for delayed consequences.
#
# As a separate loss term, $\beta\,\mathrm{mean}_t\, k_3(t)$ is differentiated on the spot. Each
# token's log-ratio is pushed toward the reference's, but nothing accounts for how the choice
# of token $t$ changes the *states*, and so the divergence, of the tokens after it. The critic
# never sees the term, because it is not in the reward, so it cannot learn it either. The
# gradient of a per-token estimate is also not, in general, an unbiased estimate of the
# gradient of the sequence-level KL; chapter 1 warned that value and gradient are different
# questions, and the worked answer "why k1 in the reward and not k3", at the end of this
# chapter, works one case out. GRPO gets away with it because it has no critic and scores
# whole answers, and because its $\beta$ is small: there the separate term is a regulariser,
# not a part of the credit assignment.
#
# </details>
#
# ## Why the value head becomes load-bearing
#
# How much does the batch baseline lose, and when? A measurement on a model simple enough to
# solve exactly (`minirlhf.studies.variance`): a completion of $T$ tokens, each independently "good"
# with probability $p = 0.3$, and a reward, paid at the end, equal to the number of good
# tokens. Every token matters, and equally. Each token's policy is a coin with its own logit,
# so the exact gradient of the expected reward with respect to that logit is $p(1-p)$, and one
# completion's estimate of it is $g_t = (a_t - p)\,A_t$ with $a_t \in \{0, 1\}$ the token
# drawn. We compare three advantages $A_t$:
#
# - **batch mean**: $R - \bar R$ over a batch of 64, the same for every token (chapter 5);
# - **value, $\lambda = 1$**: $R - V(s_t)$ with the exact value of the state before token
#   $t$, $V(s_t) = (\text{good tokens so far}) + p\,(T - t)$;
# - **value + GAE**: `gae` with the same values, $\gamma = 1$, $\lambda = 0.95$.
#
# The figure of merit is the noise-to-signal ratio $\mathrm{Var}(g_t) / \mathbb{E}[g_t]^2$:
# the number of completions whose gradients must be averaged before their noise is no larger
# than the gradient itself. `variance.study` samples $64 \times 64$ completions for each
# length; `variance.closed_form` derives the same numbers exactly, as a check.

# %%
study = variance.study(lengths=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512))
print("T     " + "".join(f"{m:>22}" for m in variance.METHODS))
print("      " + "".join(f"{'measured   exact':>22}"
                        for m in variance.METHODS))
for i, T in enumerate(study["T"]):
    print(f"{T:<5} " + "".join(
        f"{study['measured'][m][i]:>12.2f}{study['exact'][m][i]:>10.2f}"
        for m in variance.METHODS))
at4 = {m: study["exact"][m][study["T"].index(4)] for m in variance.METHODS}
saved = {m: 1 - at4[m] / at4["batch mean"] for m in variance.METHODS}
print(f"\nat T = 4 the per-state value removes "
      f"{saved['value, lam = 1']:.0%} of the batch mean's\n"
      f"noise-to-signal, GAE {saved['value + GAE']:.0%}")

# %% tags=["hide-input"]
T_all = np.array(study["T"])
B = study["settings"]["batch_size"]
STYLES = {"batch mean": (ORANGE, "o", "batch-mean baseline (chapter 5)"),
          "value, lam = 1": (BLUE, "s", "per-state value, λ = 1"),
          "value + GAE": (GREEN, "^", "per-state value + GAE, λ = 0.95")}


def draw_noise(narrow=False):
    """Return the noise-to-signal ratio against the completion length, one
    line per baseline: measured (markers) and exact (dashed)."""
    fig, ax = plt.subplots(figsize=(3.6, 4.6) if narrow else (6.8, 3.9),
                           layout="constrained")
    for m in variance.METHODS:
        color, marker, label = STYLES[m]
        ax.plot(T_all, study["exact"][m], color=color, lw=1, ls="--")
        ax.plot(T_all, study["measured"][m], color=color, marker=marker,
                lw=0, label=label)
    ax.axhline(B, color="grey", lw=1, ls=":")
    gap = "\n" if narrow else " "  # two or three lines on a phone
    ax.text(1.05, B * 1.15, f"batch of {B}:{gap}noise = signal",
            color="dimgrey")
    ax.axvspan(3.5, 4.5, color=YELLOW, alpha=0.3, lw=0)
    ax.text(4.6, 0.45, "our answers\n(≤ 4 tokens)")
    ax.axvspan(100, 512, color=SKY, alpha=0.15, lw=0)
    ax.text(110, 0.45, f"a typical{gap}chat{gap}answer")
    ax.set_xscale("log", base=2)
    ticks = T_all[::2] if narrow else T_all  # 1, 4, 16, ... on a phone
    ax.set_xticks(ticks, [str(T) for T in ticks])
    ax.set_yscale("log")
    ax.set_ylim(0.3, 2000)
    ax.set_xlabel("completion length T (tokens)")
    ax.set_ylabel("noise-to-signal ratio of one token's\n"
                  "gradient, Var(g) / E[g]² (completions)")
    if narrow:
        fig.legend(frameon=False, loc="outside upper center")
    else:
        ax.legend(frameon=False, loc="upper left")
    return fig


show_figure(
    draw_noise,
    alt="Log-log plot of the noise-to-signal ratio of one token's policy "
        "gradient against completion length, 1 to 512 tokens; markers are "
        "measured, dashed lines exact. The batch-mean baseline grows in "
        "proportion to the length, from "
        f"{study['exact']['batch mean'][2]:.1f} "
        f"at 4 tokens to {study['exact']['batch mean'][-1]:.0f} at 512. "
        "The per-state value with lambda = 1 grows half as fast. With GAE "
        "at lambda 0.95 it levels off below "
        f"{max(study['exact']['value + GAE']):.0f}.",
    caption="How many completions it takes for one token's gradient to rise "
            "above its noise, by baseline, in a toy where every token "
            "contributes equally to a reward paid at the end. With the "
            "batch mean the count grows in proportion to the length, about "
            "one completion per token; the per-state value halves it, and "
            "GAE levels it off.",
)

# %% [markdown]
# At four tokens, the length of our answers, a critic would already have work to do: the
# per-state value removes a large share of the batch mean's noise (the last line above),
# because the value changes inside a completion, after every good or bad token. But a batch
# of 64 completions leaves every method with far more signal than noise, so the batch mean
# is good enough, and that, not a critic with nothing to do, is why chapter 5 could go
# without one. At a few
# hundred tokens the batch baseline needs a few hundred completions *per update* before a
# token's gradient is worth more than its noise; a batch of 64 would be mostly noise.
#
# The per-state value alone ($\lambda = 1$) only halves the problem: it removes the luck of the
# tokens *before* $t$, which the state already knows, but not of those after. The large
# saving comes from $\lambda < 1$, which stops listening to tokens far ahead and asks the
# critic instead; the noise then levels off at about $1/(1 - \lambda^2)$ tokens' worth,
# whatever the length. That saving is only as good as the critic. Here it is exact; a learned
# value head is not, and every error in $V$ enters $A_t$ through $\delta_t$ as bias. That is
# what "load-bearing" means: at real lengths, the advantage is mostly the critic's opinion,
# so the critic has to be good, and in RLHF it is a network as large as the policy, trained
# alongside it (TRL's value model, with its own loss weight `vf_coef` and clip range
# `cliprange_value`, in `trl/experimental/ppo/ppo_config.py`).
#
# Two caveats keep the toy honest. Real tokens are not independent coins and do not matter
# equally; many are nearly forced, and a few decide the answer, which changes the constants
# but not the growth with length. And GRPO {cite}`shao2024deepseekmath` drops the critic
# and uses the mean reward of several answers *to the same prompt* as a baseline: that removes
# the prompt's difficulty from the noise, not the other tokens' luck, and it pays for it with
# many samples per prompt. Chapter 8 builds it and measures what it buys on this world.
#
# ## Follow-up questions, worked
#
# <details class="answer">
# <summary>Worked answer: why k1 in the reward and not k3, when k3 is the better estimator?</summary>
#
# Chapter 1 showed that k3 $= e^{-\mathrm{kl}} - 1 + \mathrm{kl}$ estimates the KL's *value*
# with less noise than k1 $= \mathrm{kl}$. In the reward, though, what matters is the
# *gradient* the estimator produces, and a reward is not differentiated: PPO treats it as a
# number and moves the policy by the score function, $\mathbb{E}_\pi[\nabla \log \pi(y)\,
# r(y)]$. With $r = -\beta\,\text{k1}$ that is exactly $-\beta\,\nabla\mathrm{KL}(\pi \,\|\,
# \pi_\text{ref})$: the right gradient. With $r = -\beta\,\text{k3}$ it is not. The extra
# term $\pi_\text{ref}/\pi - 1$ (chapter 1's ratio minus 1; in this answer $r$ stays the
# reward) has mean zero, but its score-function gradient does not vanish:
# $\mathbb{E}_\pi[\nabla\log\pi\,(\pi_\text{ref}/\pi - 1)] = \mathbb{E}_{\pi_\text{ref}}[\nabla
# \log \pi] = -\nabla\mathrm{KL}(\pi_\text{ref} \,\|\, \pi)$. So k3 in the reward pushes with
# $\nabla\mathrm{KL}(\pi\,\|\,\pi_\text{ref}) - \nabla\mathrm{KL}(\pi_\text{ref}\,\|\,\pi)$:
# near the reference the two KLs are nearly equal, their gradients nearly cancel, and what is
# left need not point back toward the reference at all.
#
# GRPO puts k3 in the *loss* instead, and differentiates through it with the samples fixed.
# GRPO's paper writes its penalty as $D_\text{KL}[\pi_\theta\,\|\,\pi_\text{ref}]$, the
# *reverse* KL in RLHF's usage (the KL under the policy's own samples, whose gradient the k1
# row gives). But k3 differentiated as a loss follows the gradient of the *forward* KL,
# $\mathrm{KL}(\pi_\text{ref}\,\|\,\pi)$. That is still a proper leash: it too is 0 only at
# the reference, and near the reference the two KLs nearly agree. TRL 1.12.0's
# `GRPOTrainer` changes this by default: it multiplies each token's k3 by the importance
# ratio $\pi_\theta/\pi_\text{old}$, which is 1 in value but not in gradient
# (`use_bias_correction_kl=True` in `trl/trainer/grpo_config.py`, applied in
# `grpo_trainer.py`), and the gradient of that product is the reverse KL's. The
# [From toy to real](../book/toy-to-real.md) page says what this changes in TRL's runs. The
# cell below checks all of this exactly (sums over the vocabulary, no sampling) at one
# position with a five-token vocabulary, TRL's product included. The lesson is chapter 2's: an
# estimator is
# only as good as the way it is used.
#
# </details>

# %% tags=["hide-input"]
logits_ref = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
theta = torch.tensor([2.5, 0.4, 0.3, -1.2, 0.9], requires_grad=True)


def exact_gradient(quantity):
    """Return d quantity / d theta, a tensor (5,)."""
    (grad,) = torch.autograd.grad(quantity, theta, retain_graph=True)
    return grad


logp, logp_ref = theta.log_softmax(0), logits_ref.log_softmax(0)
p, p_ref = logp.exp(), logp_ref.exp()
k1 = (logp - logp_ref).detach()  # per-token values, as rewards: constants
k3 = (torch.exp(-k1) - 1 + k1)
grads = {
    "grad KL(pi||ref), exact": exact_gradient((p * (logp - logp_ref)).sum()),
    "k1 in the reward": exact_gradient((p.detach() * logp * k1).sum()),
    "k3 in the reward": exact_gradient((p.detach() * logp * k3).sum()),
    "grad KL(ref||pi), exact": exact_gradient(
        (p_ref * (logp_ref - logp)).sum()),
    "k3 in the loss (GRPO)": exact_gradient(  # differentiated, samples fixed
        (p.detach() * (torch.exp(logp_ref - logp) - 1
                       - (logp_ref - logp))).sum()),
    # TRL 1.12's default: k3 times the ratio pi / pi_old (1, with gradient)
    "k3 x ratio (TRL 1.12)": exact_gradient(
        (p.detach() * torch.exp(logp - logp.detach())
         * (torch.exp(logp_ref - logp) - 1 - (logp_ref - logp))).sum()),
}
grads["difference of the two"] = (grads["grad KL(pi||ref), exact"]
                                       - grads["grad KL(ref||pi), exact"])
exact = grads["grad KL(pi||ref), exact"]
print(f"{'gradient (5 logits)':<64}{'norm':>7}{'cos':>6}")
for name, g in grads.items():
    cosine = torch.dot(g, exact) / (g.norm() * exact.norm())
    print(f"{name:<24}", " ".join(f"{v:+.4f}" for v in g.tolist()),
          f"{g.norm().item():6.4f}{cosine.item():+6.2f}")

# %% [markdown]
# The k1 row equals the exact gradient of $\mathrm{KL}(\pi\,\|\,\pi_\text{ref})$, the reverse
# KL, and the GRPO row the exact gradient of the forward KL, which points the same way (a
# positive cosine with the first row). TRL's ratio-weighted row equals the first row: the
# reverse KL's gradient.
# The k3-in-the-reward row equals the difference of the two, the last row: it is small next
# to either, and here it even points away from the exact gradient (a negative cosine). As a
# reward, k3 is a number with the right mean and the wrong gradient.
#
# <details class="answer">
# <summary>Worked answer: why clamp the log-ratio in the leash?</summary>
#
# The per-token $\mathrm{kl}_t = \log\pi(y_t) - \log\pi_\text{ref}(y_t)$ is unbounded. A
# sampled token that the reference thought nearly impossible, say
# $\pi_\text{ref}(y_t) = 10^{-13}$ while the policy gives it $0.95$, has
# $\mathrm{kl}_t \approx 29.9$. With $\beta = 0.5$ that one token's shaped advantage is
# about $-15$, five times the largest advantage the clipped, standardized rewards can give
# ($\pm 3$). One token then decides the direction of the whole batch's update. The other
# sign is worse for k3-style terms: $e^{-\mathrm{kl}}$ with $\mathrm{kl} = -100$ is
# $e^{100}$, beyond the largest 32-bit float, so the penalty is infinite and every gradient of
# the batch becomes NaN. `ppo_train` clamps $\mathrm{kl}_t$ to $\pm$`kl_clamp` (10 nats):
# far beyond anything a healthy run produces, so it never bites a normal token, and finite
# for the one that would otherwise poison the batch. Finite is not small, though: clamped at
# $-10$, that token's k3 is still 22015.5 (the last line below), enough to decide a batch on
# its own at $\beta = 0.5$. The clamp prevents the NaN, not the domination; a token like that
# is a sign to find out why the reference gives it so little probability. The cell below
# shows the numbers.
#
# </details>

# %% tags=["hide-input"]
beta = 0.5
logp_policy = torch.tensor(np.log(0.95), dtype=torch.float32)
logp_reference = torch.tensor(np.log(1e-13), dtype=torch.float32)
kl_t = logp_policy - logp_reference
clamp = ppo.PPOConfig().kl_clamp
print(f"kl_t = {kl_t.item():.2f} nats; beta * kl_t = "
      f"{beta * kl_t.item():.2f}; clamped to +-{clamp:g}: "
      f"{beta * kl_t.clamp(-clamp, clamp).item():.2f}")


def k3_of(kl):
    """Return the k3 estimate exp(-kl) - 1 + kl, elementwise."""
    return torch.exp(-kl) - 1 + kl


kl_neg = torch.tensor(-100.0)  # float32
print(f"k3 at kl = -100 in float32: {k3_of(kl_neg).item()}; clamped: "
      f"{k3_of(kl_neg.clamp(-clamp, clamp)).item():.1f}")

# %% [markdown]
# <details class="answer">
# <summary>Worked answer: what would break with 100-token answers?</summary>
#
# Almost every shortcut in chapter 5 leans on the answers being four tokens long.
#
# - **Credit.** The measurement above: with the batch-mean baseline a token's gradient
#   needs about as many completions as there are tokens before it rises above its noise.
#   At 100 tokens a batch of 64 is not enough; a value head and GAE become necessary, and
#   the value head becomes a second model to train, fit and monitor.
# - **The size of the leash.** The penalty is per token, so a completion's total KL cost
#   grows with its length: a $\beta$ that is gentle on four tokens is harsh on a hundred,
#   and a policy can lower its cost by writing less. Real recipes watch the *summed* KL per
#   completion (TRL's `objective/kl`, `kl.sum(1).mean()` in
#   `trl/experimental/ppo/ppo_trainer.py`) and often tune $\beta$ against it, or use a target.
# - **Stopping.** Four tokens always end, or are malformed. Long answers can run to the
#   length limit without an end token; TRL's `missing_eos_penalty` (in `ppo_config.py`) exists
#   for that, and the
#   reward model must be read at the right position.
# - **New blind spots.** A reward model trained on long answers has more ways to be wrong:
#   length, hedging, repetition, formatting. Over-optimization then looks like a policy that
#   writes longer and longer answers that the RM likes, and the verifier we had here usually
#   does not exist.
# - **Cost.** Generation grows with the length and the evaluation with it; our per-iteration
#   evaluation on 400 prompts would cost more than the training.
#
# </details>
#
# The [From toy to real](../book/toy-to-real.md) page maps every piece of our loop to the
# names of a production trainer and says what changes at scale.
#
# ## Summary
#
# You can now:
#
# - run PPO against a reward model with no leash and read what happens: the policy travels far
#   from the reference, the RM's score rises a little, and the true accuracy falls from the
#   start, in every seed (the falling half of Gao et al.'s over-optimization curve), and follow
#   the answers as they are stirred inside the blind spot rather than turned into garbage;
# - compare leashed and unleashed runs at the same distance from the reference, and say what
#   the leash can do and what it cannot: it buys time, and cannot create signal;
# - write and tune the adaptive KL controller (your `adaptive_kl_update`), and predict its
#   overshoot from its acting on the sum of past errors (integral action), with a horizon that
#   must fit the run;
# - write GAE (your `gae`), fill its table by hand, and say when a value head becomes
#   load-bearing: with a batch baseline a token's noise grows with the answer's length, with a
#   critic and $\lambda < 1$ it stays bounded.

# %% [markdown]
# ## Exercises
#
# Each exercise has a worked answer under it. Try the exercise first. The answers that need a
# run use one seed: enough to see what happens, not to measure how large it is.
#
# **1. Close the blind spot.** Chapter 4's first exercise trains a reward model with
# near-misses among its rejected answers. Use it (or train one with rejected answers drawn
# within $\pm 15$ of the truth) in the $\beta = 0$ run. Does the accuracy still fall? Where do
# the answers go now, and what does the RM's preference curve look like?
#
# <details class="answer">
# <summary>Worked answer: close the blind spot</summary>
#
# The cell below runs it. The package keeps such an RM: `load_proxy("near-miss")` of
# `minirlhf.studies.overoptimization` trains chapter 4's RM with half of the rejected answers
# near-misses and 400 steps (the most discerning recipe of chapter 4's exercise 1), on a fixed
# set of the book's pairs; chapter 11 meets it again. The cell runs the $\beta = 0$ arm against
# it for 40 iterations (seed 0), beside this chapter's seed 0 against the book's RM, and measures
# that RM as this chapter measured the book's: its offset curve, and each prompt's favourite
# within 10 of the truth.
#
# Far from the truth the near-miss RM is the sharper judge: its curve falls to -1.55 at -10
# and -2.79 at +10, where the book's RM's falls only to -0.31 and -0.33. Next to the truth it
# is not: within two of it the curve is as flat as the book's RM's, even a hair above the
# truth at -1 and -2. Prompt by prompt, the truth is its favourite within 10 of it on 0.085 of
# the prompts, against 0.043 for the book's RM and 0.048 for a random pick, and the favourite
# scores +0.60 above the truth on average, more than the book's RM's +0.45. So the unleashed
# policy still has somewhere to go, and it goes: in this seed its accuracy falls from 0.360
# to 0.228 (0.260 against the book's RM), and at the end most of its answers are near-misses
# (0.690). One seed cannot say whether it falls faster; it says the fall does not stop. A
# smaller blind spot is still a blind spot: the policy finds what is left of it, and what is
# left sits right next to the truth.
#
# </details>

# %% tags=["hide-input"]
from minirlhf.studies.overoptimization import load_proxy

# chapter 4's near-miss recipe: half near-misses, 400 steps
rm_nm, _ = load_proxy("near-miss", progress=PROGRESS)
nm_runs = stored_runs(OUTPUTS / "ch07_near_miss_rm.json",
                      {(0.0, 0): ("rm", 0.0, {"iterations": ITERATIONS})},
                      policy, rm_nm, keep=KEPT, progress=PROGRESS)
with torch.no_grad():
    margin_nm = rmlib.margin_by_offset(rm_nm, OFFSETS)
relative_nm = -np.array([margin_nm[int(d)] for d in OFFSETS])
shown = [-10, -5, -2, -1, 1, 2, 5, 10]
print("r(truth + d) - r(truth), mean of 400 prompts")
print(f"{'d':<10}" + "".join(f"{d:>+7d}" for d in shown))
for name, curve_of in (("book's RM", relative), ("near-miss", relative_nm)):
    print(f"{name:<10}" + "".join(
        f"{curve_of[list(OFFSETS).index(d)]:>+7.2f}" for d in shown))
print("\n            truth the favourite   favourite - truth   accuracy"
      "\n            (within 10)           (mean)              start -> end")
for name, model, log in (("book's RM", rm, runs[0.0, 0]),
                         ("near-miss", rm_nm, nm_runs[0.0, 0])):
    fav, gap, _ = favourites(model)
    print(f"{name:<12}{np.mean(fav == 0):>8.3f}{gap:>22.2f}"
          f"{log['accuracy'][0]:>14.3f} -> {log['accuracy'][-1]:.3f}")
print("\nwhere the greedy answers are at the end (seed 0)")
print("            correct  near-miss  other wrong  malformed")
for name, log in (("book's RM", runs[0.0, 0]),
                  ("near-miss", nm_runs[0.0, 0])):
    kinds = log["kinds"]
    print(f"{name:<12}" + "".join(
        f"{kinds[k][-1]:>{w}.3f}" for k, w in
        (("correct", 7), ("near_miss", 11), ("other_wrong", 13),
         ("malformed", 11))))

# %% [markdown]
# **2. Longer.** Run $\beta = 0$ for 100 iterations on one seed. Does the fall slow down, stop,
# or speed up? Does the policy ever produce malformed answers, and why would the RM let it or
# not?
#
# <details class="answer">
# <summary>Worked answer: longer</summary>
#
# The cell below runs it (seed 0; the learning rate now anneals over 100 iterations instead of
# 40). In this run the fall slows down, and it does not stop: by iteration 40 the accuracy has
# fallen most of the way (0.360 to 0.225); from there to 100 it stays between 0.15 and 0.25,
# and its mean over those iterations is lower than at iteration 40. The KL keeps growing
# after iteration 40 for a while, while the RM score climbs no further (1.773 at 40): it
# never gets back to that value, and the KL stays below 0.4. The extra distance buys nothing
# on the RM's scale and costs a little more on the verifier's. No answer becomes malformed.
# The RM punishes answers of the wrong size or length
# hard (chapter 4), and a malformed answer has never been scored well, so the policy has no
# reason to go there; what grows instead is the share of wrong numbers, near-misses and other
# wrong numbers alike, at the edge of the near-miss band and just beyond it, where the RM
# objects only a little.
#
# Why does the cell print numbers only up to iteration 40, and claims after that? Because with
# no leash the run magnifies the tiniest difference. Run under torch's other set of CPU kernels
# (which round a few operations differently, far below the printed digits), this run gives
# the same digits as here for most of its length, and then they drift apart: by iteration 100
# its accuracy and KL differ in the third decimal. The shape of the run is the same, so the
# cell states it as claims with a margin wider than that drift; a number printed from the last
# iterations would be true of this CPU only. Chapter 5's runs, with their leash, keep every
# printed digit on any CPU (`make test` checks it).
#
# </details>

# %% tags=["hide-input"]
long_plan = {(0.0, 0): ("rm", 0.0, {"iterations": 100})}  # seed 0
log_long = runs_of("long", long_plan)[0.0, 0]
accuracy_long = np.array(log_long["accuracy"])
score_long = np.array(log_long["rm_score"])
kl_long = np.array(log_long["kl"]).clip(min=0.0)  # the exact KL is >= 0
print("beta = 0, seed 0   iteration:   0      20      40")
for name, values in (("accuracy", accuracy_long), ("RM score", score_long),
                     ("KL per token", kl_long)):
    print(f"{name:<31}" + "".join(f"{values[i]:>8.3f}" for i in (0, 20, 40)))
for kind in task.KINDS:
    print(f"{'  share ' + kind:<31}" + "".join(
        f"{log_long['kinds'][kind][i]:>8.3f}" for i in (0, 20, 40)))
# After iteration 40: claims with a margin wider than the drift between CPUs
later = slice(41, 101)
malformed = np.array(log_long["kinds"]["malformed"])
claims = (
    ("accuracy stays between 0.15 and 0.25",
     0.15 <= accuracy_long[later].min()
     and accuracy_long[later].max() <= 0.25),
    (f"the RM score stays below its value at 40 ({score_long[40]:.3f})",
     score_long[later].max() < score_long[40]),
    ("the KL per token stays below 0.4", kl_long[later].max() < 0.4),
    ("the mean accuracy is at least 0.01 below its value at 40",
     accuracy_long[later].mean() <= accuracy_long[40] - 0.01),
    ("the KL per token rises 0.05 or more above its value at 40",
     kl_long[later].max() >= kl_long[40] + 0.05),
    ("no answer is malformed", malformed[later].max() == 0.0),
)
print("iterations 41 to 100:")
for claim, holds in claims:
    print(f"  {claim:<58}{'HOLDS' if holds else 'DOES NOT HOLD'}")

# %% [markdown]
# **3. Ziegler's horizon.** Rerun the adaptive arm with `kl_horizon=10_000`. How far does
# $\beta$ move in 40 iterations? Then try `kl_horizon=64`: what does the noise of the
# per-batch KL do to $\beta$?
#
# <details class="answer">
# <summary>Worked answer: Ziegler's horizon</summary>
#
# No run is needed for the first part: with 64 samples per iteration and a horizon of 10,000,
# $\beta$ moves by at most $0.2 \times 64 / 10{,}000$ per iteration, a few percent over the
# whole run (the first line below), so the controller does nothing in a run this short. With
# a horizon of 64, one batch is a whole horizon: $\beta$ moves by up to 20% every iteration. The
# run below (seed 0, starting at $\beta = 0.1$, target 0.05) shows the result: nearly every
# iteration moves $\beta$ by the full 20%, up or down, because the per-batch KL is almost never
# within 20% of the target, and $\beta$ swings over a wide range. The controller no longer
# follows the distance; it reacts to each batch's noise and to its own past overshoots. The
# horizon is a low-pass filter, and it has to be long enough to average the noise away.
#
# </details>

# %% tags=["hide-input"]
for horizon_x in (10_000, 64):
    step_x = 0.2 * ppo.PPOConfig().batch_size / horizon_x
    print(f"horizon {horizon_x:>6,}: at most {step_x:.2%} per iteration, "
          f"a factor of {(1 + step_x) ** ITERATIONS:,.2f} in {ITERATIONS}")
horizon_plan = {("adaptive", 0): ("rm", 0.1, {
    "iterations": ITERATIONS, "kl_target": TARGET, "kl_horizon": 64})}
log_h = runs_of("horizon", horizon_plan)["adaptive", 0]
betas_h = np.array(log_h["beta"])  # beta used in each iteration
jumps = np.abs(np.diff(np.log(betas_h)))
print(f"horizon 64, seed 0: beta from {betas_h[0]:.3f} to {betas_h[-1]:.3f}"
      f" (lowest {betas_h.min():.3f}, highest {betas_h.max():.3f});\n"
      f"iterations where beta moved by the full 20%: "
      f"{int((jumps > 0.99 * np.log(1.2)).sum())} of {len(jumps)}; "
      f"final KL {log_h['kl'][-1]:.3f}")

# %% [markdown]
# **4. Adaptive on the verifier.** Run the adaptive controller on the verifier arm of chapter
# 5 with the same target. Does the verifier arm need more or less distance than the target
# allows, and what happens to its accuracy?
#
# <details class="answer">
# <summary>Worked answer: adaptive on the verifier</summary>
#
# The cell below runs the verifier arm (seed 0, 40 iterations, $\beta = 0.08$ as in chapter 5),
# once fixed and once adaptive with this chapter's target and horizon. The verifier arm wants
# more distance than the target allows: at a fixed $\beta$ its batch KL is above the target in
# most iterations, so once its first dip is over the controller keeps tightening, and $\beta$
# ends more than twice as high as it started. The KL ends a little lower than with the fixed
# leash, though still above the target (the controller acts late, as in the rm arm). In this
# seed the accuracy is about the same (0.420 against 0.422): the
# distance the tighter leash denies was not where the verifier's gains came from, at least
# within 40 iterations. So in this run a target chosen to stop the RM arm from exploiting its
# proxy cost the honest reward nothing in accuracy, though it held its KL back; whether it costs
# more over a longer run or other seeds, one seed cannot say. The right distance depends on how
# far the reward can be trusted, and a reward that can be trusted needs less of a leash.
#
# </details>

# %% tags=["hide-input"]
ver_plan = {(name, 0): ("verifier", 0.08,
                        {"iterations": ITERATIONS, **extra})
            for name, extra in (("fixed 0.08", {}),
                                ("adaptive", {"kl_target": TARGET,
                                              "kl_horizon": HORIZON}))}
ver = {name: log for (name, _), log in runs_of("verifier", ver_plan).items()}
print("verifier arm, seed 0   accuracy end   KL end   beta end")
for name, log in ver.items():
    print(f"{name:<22} {log['accuracy'][-1]:>12.3f}   {log['kl'][-1]:>6.3f}"
          f"   {log['beta'][-1]:>8.3f}")
print(f"target {TARGET} nats per token; the fixed arm's batch KL passed it"
      f"\nin {sum(k > TARGET for k in ver['fixed 0.08']['objective/kl'])} "
      f"of {ITERATIONS} iterations")

# %% [markdown]
# **5. A wrong critic.** In `minirlhf.studies.variance.measure`, add Gaussian noise of standard
# deviation 0.5 to `values` before calling `gae`. How do the noise-to-signal ratio and the
# *mean* of $g_t$ (its bias) change for $\lambda = 0.95$ and for $\lambda = 1$?
#
# <details class="answer">
# <summary>Worked answer: a wrong critic</summary>
#
# The cell below copies the toy with the noise added, at $T = 64$. The noise-to-signal ratio
# rises a little for both $\lambda$, and the mean of $g_t$ does not move: it stays at the true
# gradient. This noise is *independent* of the token drawn at $t$, so
# $\mathbb{E}[(a_t - p)\,\epsilon] = 0$, and an error that does not depend on the action cannot
# bias the gradient; it only adds variance. A critic's real errors are not like that: a value
# head that is systematically wrong about the states after good tokens (say, it undervalues
# them) shifts the advantages in a way correlated with $a_t$, and that is bias. With
# $\lambda = 1$ the values cancel out of the sum except for $V(s_t)$, which cannot depend on
# $a_t$, so even such a critic leaves it unbiased; with $\lambda < 1$ the advantage leans on
# $V(s_{t+1})$, which does depend on $a_t$, and the bias enters there.
#
# </details>

# %% tags=["hide-input"]
def noisy_critic(T, lam, sigma, p=0.3, batch=64, n_batches=64, seed=0):
    """Return (noise-to-signal, mean of g_t / true gradient) for the
    value + GAE advantage when the critic's values carry Gaussian noise."""
    rng = np.random.default_rng(seed)
    a = (rng.random((n_batches, batch, T)) < p).astype(float)
    rewards = np.zeros_like(a)
    rewards[..., -1] = a.sum(-1)  # the reward, paid at the end
    values = np.cumsum(a, -1) - a + p * (T - np.arange(T))  # exact V
    values = values + rng.normal(0.0, sigma, a.shape)  # a wrong critic
    g = ((a - p) * ppo.gae(rewards, values, 1.0, lam)).reshape(-1, T)
    return g.var(0).mean() / g.mean() ** 2, g.mean() / (p * (1 - p))


print("T = 64     noise-to-signal       mean g_t / true gradient")
print("lam        exact V   noisy V     exact V   noisy V")
for lam in (0.95, 1.0):
    (n0, m0), (n1, m1) = (noisy_critic(64, lam, s) for s in (0.0, 0.5))
    print(f"{lam:<6} {n0:11.2f} {n1:9.2f} {m0:11.3f} {m1:9.3f}")

# %% [markdown]
# **6. One token decides.** Change the toy so that only the first token matters (the reward is
# $a_0$). What is the batch baseline's noise for tokens $t > 0$, whose true gradient is 0, and
# does it grow with the length?
#
# <details class="answer">
# <summary>Worked answer: one token decides</summary>
#
# For $t > 0$ the estimate is $g_t = (a_t - p)(R - \bar R)$ with $R = a_0$ independent of $a_t$,
# so its mean is 0, the true gradient, and its variance is about
# $\mathrm{Var}(a_t)\,\mathrm{Var}(a_0) = (p(1-p))^2$, whatever the length (the cell below
# measures it at three lengths). The reward's variance does not grow with $T$ here, because
# the later tokens add nothing to it, so neither does each token's noise. The noise-to-signal
# *ratio* is infinite for these tokens, and every one of the $T - 1$ irrelevant tokens still
# gets a random push each update, so the total noise injected into the policy grows with $T$.
# A critic would learn that the value is decided after the first token and give every later
# token an advantage of 0.
#
# </details>

# %% tags=["hide-input"]
def first_token_decides(T, p=0.3, batch=64, n_batches=64, seed=0):
    """Return Var(g_t) of the batch-mean baseline for t > 0, averaged over
    positions, and the mean of g_t there, when the reward is a_0."""
    rng = np.random.default_rng(seed)
    a = (rng.random((n_batches, batch, T)) < p).astype(float)
    R = a[..., 0]  # only the first token matters
    adv = (R - R.mean(1, keepdims=True))[..., None]
    g = ((a - p) * adv).reshape(-1, T)[:, 1:]  # tokens t > 0
    return g.var(0).mean(), g.mean()


print("T     Var(g_t), t > 0   mean g_t   (true gradient 0)")
for T in (4, 64, 512):
    var_t, mean_t = first_token_decides(T)
    print(f"{T:<5} {var_t:15.4f}   {mean_t:+8.4f}")

# %% [markdown]
# **7. GAE in the loop.** Give `TinyGPT` a second scalar head as a critic, fit it to the returns
# with a squared loss, and pass `ppo_train` an `advantage_fn` that replaces the batch baseline
# by `gae` over the same per-token rewards (it needs the critic's values: close over the
# critic). Does the verifier arm learn faster?
#
# <details class="answer">
# <summary>Worked answer: GAE in the loop</summary>
#
# The plan: a `TinyGPT(GPTConfig(), scalar_head=True)` read at every completion position gives
# $V(s_t)$; after each rollout, fit it for a few steps to the returns-to-go with a squared loss;
# in the `advantage_fn`, build the per-token shaped rewards as `kl_shaped_advantages` does,
# then call `ppo.gae(rewards, values, 1.0, 0.95)` on them, with `values` from the critic before
# the fit (the values must not have seen the returns they are compared with). What to expect,
# from this chapter's measurement: at four tokens and a batch of 64 the batch baseline already
# leaves far more signal than noise, so there is little for the critic to win, and a critic that
# starts from scratch is wrong at first, and its errors enter the advantages as bias (exercise
# 5). Expect no clear speed-up, and possibly a slower start; run both arms over several seeds
# before believing either way. The critic pays off with long completions, which this task does
# not have.
#
# </details>
#
# **8. A stubborn KL.** (The adaptive controller, with Ziegler's settings.) Feed
# `ppo.adaptive_kl_update` a constant KL of 12 against a target of 6, with batches of 1,024
# samples and a horizon of 10,000, for 200 batches, starting from $\beta = 0.1$. How fast does
# $\beta$ grow, and why does the clip at 0.2 make that growth exponential rather than
# unbounded in a single step?
#
# <details class="answer">
# <summary>Worked answer: a stubborn KL</summary>
#
# The error $12/6 - 1 = 1$ is clipped to $0.2$ every batch, so every batch multiplies $\beta$ by
# the same factor, $1 + 0.2 \times 1024/10{,}000$: a geometric sequence, exponential growth
# (the cell below: the factor over 200 batches). Without the clip the error would be 1 and
# each batch would multiply $\beta$ by $1 + 1024/10{,}000$, five times the step; and a single
# wild KL estimate, say 600 from one noisy batch, would multiply it by about 11 at once. The
# clip bounds the step, not the total: a KL that stays above target keeps tightening the leash,
# step by bounded step, which is what an integral controller does.
#
# </details>

# %% tags=["hide-input"]
stubborn = 0.1
for batch_i in range(200):
    stubborn = ppo.adaptive_kl_update(stubborn, 12.0, 6.0, 1024, 10_000)
print(f"KL 12 against a target of 6, 200 batches of 1,024 samples, horizon"
      f"\n10,000: beta from 0.1 to {stubborn:.2f}, a factor of "
      f"{stubborn / 0.1:.1f} = {1 + 0.2 * 1024 / 10_000:.5f}^200")
