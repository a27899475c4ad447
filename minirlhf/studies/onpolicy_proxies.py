"""Proxies made as Gao et al. made theirs: trained on pairs of the initial policy's own samples.

Gao et al. (2023, "Scaling laws for reward model overoptimization") train each proxy on
comparisons of the initial policy's own answers, labelled by the gold reward. Here the initial
policy is chapter 3's partial-SFT policy, the gold the verifier (1 when the answer states the
right sum), and the answers are drawn at the book's temperature 0.7 on the training prompts,
never the eval prompts (:func:`decisive_pairs`):

    for each prompt drawn, draw two answers; keep the pair when exactly one is right
    (a decisive pair), the right one chosen and the wrong one rejected.

A 0/1 gold gives no label to a pair whose answers are both right or both wrong, so such pairs
are dropped; more prompts are drawn until the wanted number of decisive pairs is reached. The
SFT policy's answers are right about 22% of the time, so about 3.5 prompts are drawn per
decisive pair: 44,520 for the 12,800 pairs, of which 28,249 had two wrong answers and 3,471 two
right ones. The stream of pairs is fixed (one seed, prompts drawn :data:`CHUNK` at a time), so a
smaller set is the beginning of a larger one. Each proxy of :data:`SIZES` is trained like
chapter 4's RM on its set at each seed of :data:`SEEDS` (the seed of the initial weights and of
the minibatch order; the data of a size do not depend on it), for :data:`EPOCHS` passes over its
pairs in steps of :data:`BATCH_SIZE` (:func:`train_steps`), and stored in the models'
folder as ``proxy-onpolicy-<size>-seed<seed>.pt`` (:func:`load`).

The contrast is chapter 11's own proxies (:data:`minirlhf.studies.overoptimization.PROXIES`):
the book's pairs, the right answer against a random wrong number, on the same numbers of pairs.
Seed 0 is chapter 11's proxy itself; seeds 1 and 2 are trained here on the same pairs, stored as
``proxy-<size>-seed<seed>.pt``.

Chapter 11's study reads every proxy as it reads its own (an ``exact`` job naming
``data``, ``pairs`` and ``seed``: :func:`job_proxy`): best-of-n, the tilted optimum and the gold
ceiling of the SFT policy, exactly, from one enumeration on the first 100 eval prompts.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import asdict, replace

import torch

from .. import reward_model, store, task
from ..model import TinyGPT, completion_mask, generate, make_generator, reward_scores, weights_digest
from . import overoptimization as overopt

__all__ = [
    "KINDS",
    "SIZES",
    "SEEDS",
    "EPOCHS",
    "BATCH_SIZE",
    "train_steps",
    "TEMPERATURE",
    "DATA_SEED",
    "CHUNK",
    "decisive_pairs",
    "onpolicy_data",
    "heldout_pairs",
    "heldout_accuracy",
    "proxy_settings",
    "load",
    "job_proxy",
    "prepare",
    "study_code",
]

KINDS = ("on-policy", "off-policy")
SIZES = (800, 3_200, 12_800)  # decisive pairs; chapter 11's off-policy proxies of the same names hold as many
SEEDS = (0, 1, 2)
# Every on-policy proxy sees each of its pairs EPOCHS times, in steps of BATCH_SIZE pairs at
# chapter 4's learning rate of 1e-3: 25, 100 and 400 steps for the three sizes. So a larger set
# also means more steps, as when each proxy is trained to the same number of passes. Longer
# training is not reproducible: trained far past that, a proxy's weights depend on the CPU's
# kernels. Under torch's default kernel set (ATEN_CPU_CAPABILITY=default) against this
# machine's own, the loss of the 800-pair proxy (seed 0) trained for 1,000 steps of 64 differed
# by 2e-14 at step 200, 2e-10 at 300 and 0.1 at 1,000 (the 12,800-pair one by 1e-13 at step
# 500 and 3e-4 at 1,000); its rounding differences grow tenfold every 40 steps once it has
# learnt its pairs. With the recipe here, the largest loss difference at the last step was
# 2e-11 (12,800 pairs, 400 steps) and 3e-16 (800 pairs, 25 steps). Nor does longer training buy
# a better proxy on the small sets: the 800-pair proxy ranked 0.547 of the held-out on-policy
# pairs right (:func:`heldout_accuracy`) after 1,000 steps of 64, 0.554 after 500 of 128 and
# 0.538 with the recipe here. The 12,800-pair one ranked 0.871 right with it, 0.853 after 1,000
# steps of 64. (Chapter 4's 100 steps of 128 are too few for these pairs, which are harder than
# the book's: 0.605 on the 12,800 set.) The off-policy proxies keep chapter 11's 100 steps of
# 128: trained for 1,600 instead (the 12,800 and the 3,200 pairs, seed 0), they still lift
# best-of-n's gold by 0.04 and 0.03 at most.
EPOCHS = 8
BATCH_SIZE = 256
TEMPERATURE = 0.7  # the book's sampling temperature
DATA_SEED = 0  # seeds the prompts and answers of the on-policy pairs
CHUNK = 4_096  # prompts drawn at a time: the stream of pairs does not depend on how many are asked for
HELDOUT_SEED = 7  # draws the held-out on-policy pairs (on the eval prompts)
HELDOUT_REPEATS = 8  # the 400 eval prompts, 8 times each: about 900 decisive pairs


def _sft() -> TinyGPT:
    """Return chapter 3's partial-SFT policy: the initial policy, which draws the on-policy pairs."""
    return store.load_sft(progress=False)[0]


def _check_size(size) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size not in SIZES:
        raise ValueError(f"size must be one of {list(SIZES)}, got {size!r}")
    return size


def _check_kind(kind) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    return kind


def train_steps(size: int) -> int:
    """Return the optimizer steps of the on-policy proxies of ``size`` pairs: :data:`EPOCHS`
    passes over them in steps of :data:`BATCH_SIZE`, rounded up."""
    _check_size(size)
    return -(-EPOCHS * size // BATCH_SIZE)


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    return seed


# ----------------------------------------------------------------------------- the on-policy pairs


@torch.no_grad()
def _decide(policy: TinyGPT, pairs: torch.Tensor, generator: torch.Generator):
    """Return (right (P, 2) bool, answers (P, 2, 4)): two answers of each prompt of ``pairs``
    drawn from ``policy`` at :data:`TEMPERATURE`, `;` after the first `;`, and which are right."""
    prompts = task.encode_prompts(pairs).repeat_interleave(2, 0)  # (2P, 6): each prompt twice, side by side
    answers = generate(policy, prompts, TEMPERATURE, generator=generator)  # (2P, 4)
    answers = torch.where(completion_mask(answers) > 0, answers, task.SEMI)  # one row per answer
    right = task.batch_verify(pairs.repeat_interleave(2, 0), answers) > 0
    return right.reshape(-1, 2), answers.reshape(-1, 2, task.COMPLETION_LEN)


def _split(pairs: torch.Tensor, right: torch.Tensor, answers: torch.Tensor):
    """Return (pairs, chosen, rejected) of the decisive rows: the right answer chosen."""
    decisive = right[:, 0] != right[:, 1]
    first_right = right[decisive, 0]
    a, b = answers[decisive, 0], answers[decisive, 1]
    chosen = torch.where(first_right[:, None], a, b)
    rejected = torch.where(first_right[:, None], b, a)
    return pairs[decisive], chosen, rejected


def decisive_pairs(n: int, policy: TinyGPT | None = None, seed: int = DATA_SEED, chunk: int = CHUNK) -> dict:
    """Return the first ``n`` decisive pairs of the stream of the SFT policy's own answers.

    Prompts are drawn ``chunk`` at a time from the training pairs (uniformly, with replacement,
    with one generator seeded with ``seed`` that also draws the answers); each gets two answers
    from ``policy`` (None: chapter 3's partial-SFT policy) at temperature 0.7. A pair is decisive
    when exactly one answer is right; it becomes (prompt, chosen = the right answer, rejected =
    the wrong one). The stream does not depend on ``n``: the pairs for ``n`` are the first ``n``
    for any larger number.

    ``{'pairs' (n, 2), 'prompts' (n, 6), 'chosen' (n, 4), 'rejected' (n, 4), 'index' (n,)}``
    (``index``: where each pair's prompt stands among the prompts drawn, from 0), and the counts
    among the prompts drawn up to the ``n``-th decisive one: ``drawn`` (prompts), ``both_right``,
    ``both_wrong``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a whole number >= 1, got {n!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a whole number >= 1, got {chunk!r}")
    policy = _sft() if policy is None else policy
    g, pool = make_generator(seed), task.train_pairs()
    parts, index, have, drawn, both_right, both_wrong = [], [], 0, 0, 0, 0
    while have < n:
        pairs = task.sample_pairs(chunk, g, pool)  # (chunk, 2)
        right, answers = _decide(policy, pairs, g)
        decisive = right[:, 0] != right[:, 1]
        if have + int(decisive.sum()) >= n:  # this chunk holds the n-th: count up to its prompt
            last = int(decisive.nonzero()[n - have - 1])
            pairs, right, answers, decisive = (x[: last + 1] for x in (pairs, right, answers, decisive))
        index.append(drawn + decisive.nonzero()[:, 0])
        drawn += len(pairs)
        both_right += int(right.all(1).sum())
        both_wrong += int((~right).all(1).sum())
        parts.append(_split(pairs, right, answers))
        have += len(parts[-1][0])
    pairs, chosen, rejected = (torch.cat(x) for x in zip(*parts))
    out = {"pairs": pairs, "prompts": task.encode_prompts(pairs), "chosen": chosen, "rejected": rejected}
    out["index"] = torch.cat(index)
    return {**out, "drawn": drawn, "both_right": both_right, "both_wrong": both_wrong}


_CACHE: dict = {}  # what this process has drawn: the largest set, the held-out pairs


def _largest(policy: TinyGPT) -> dict:
    """Return :func:`decisive_pairs` of the largest size for ``policy``, drawn once in a process."""
    key = ("train", weights_digest(policy), max(SIZES), DATA_SEED, CHUNK)
    if key not in _CACHE:  # the settings name these (proxy_settings): read them here, not as defaults
        _CACHE[key] = decisive_pairs(max(SIZES), policy, seed=DATA_SEED, chunk=CHUNK)
    return _CACHE[key]


def onpolicy_data(size: int, policy: TinyGPT | None = None):
    """Return ``(prompts, chosen, rejected)``, the first ``size`` decisive pairs of
    :func:`decisive_pairs`, the set the on-policy proxies of that size train on (``size`` one
    of :data:`SIZES`; ``policy`` None: the SFT policy). The largest set is drawn once in a
    process and cut short for the others."""
    _check_size(size)
    data = _largest(_sft() if policy is None else policy)
    return tuple(data[k][:size] for k in ("prompts", "chosen", "rejected"))


def heldout_pairs(policy: TinyGPT | None = None) -> tuple:
    """Return ``(pairs, chosen, rejected)``, the held-out on-policy pairs: decisive pairs of the
    SFT policy's (``policy``'s) answers on the 400 eval prompts, each drawn
    :data:`HELDOUT_REPEATS` times (seed :data:`HELDOUT_SEED`, the same pairs for every RM),
    drawn once in a process."""
    policy = _sft() if policy is None else policy
    key = ("heldout", weights_digest(policy))
    if key not in _CACHE:
        pairs = task.eval_pairs().repeat(HELDOUT_REPEATS, 1)
        right, answers = _decide(policy, pairs, make_generator(HELDOUT_SEED))
        _CACHE[key] = _split(pairs, right, answers)
    return _CACHE[key]


@torch.no_grad()
def heldout_accuracy(rm: TinyGPT, policy: TinyGPT | None = None) -> dict:
    """Return the share of the held-out on-policy pairs (:func:`heldout_pairs`) that ``rm`` ranks
    right, ``{'accuracy', 'pairs'}``; a tie counts as wrong, as in chapter 4's ``rm_report``."""
    pairs, chosen, rejected = heldout_pairs(policy)
    prompts = task.encode_prompts(pairs)
    margin = reward_scores(rm, prompts, chosen).double() - reward_scores(rm, prompts, rejected).double()
    return {"accuracy": float((margin > 0).double().mean()), "pairs": len(pairs)}


# ----------------------------------------------------------------------------- the proxies


def _data_code() -> str:
    # what draws the on-policy pairs: these functions' own code (the package code they call,
    # task and model, is in the fingerprint of reward_model, which imports both)
    return store.code_digest("".join(inspect.getsource(f) for f in (_decide, _split, decisive_pairs)))[:16]


def proxy_settings(kind: str, size: int, seed: int, policy: TinyGPT | None = None) -> tuple:
    """Return ``(file stem, RMConfig, settings)`` of the proxy of ``kind``, ``size`` and ``seed``:
    the settings key the stored model on everything that makes it. The off-policy proxy of seed
    0 is chapter 11's own (:func:`minirlhf.studies.overoptimization.load_proxy`), keyed there."""
    _check_kind(kind), _check_size(size), _check_seed(seed)
    if kind == "off-policy":
        n, share, steps = overopt.PROXIES[str(size)]
        cfg = replace(reward_model.RMConfig(), steps=steps, seed=seed)
        # chapter 11's settings (overoptimization._proxy_settings), the seed in "rm": at seed 0 the same
        settings = {
            "proxy": str(size),
            "pairs": n,
            "near_miss_share": share,
            "rm": asdict(cfg),
            "code": store.code_fingerprint(reward_model, overopt.dpo),
        }
        return (f"proxy-{size}" if seed == 0 else f"proxy-{size}-seed{seed}"), cfg, settings
    policy = _sft() if policy is None else policy
    cfg = replace(reward_model.RMConfig(), steps=train_steps(size), batch_size=BATCH_SIZE, seed=seed)
    settings = {
        "proxy": "on-policy",
        "pairs": size,
        "rm": asdict(cfg),  # the steps and the seed among them
        "data": {
            "policy": weights_digest(policy),
            "temperature": TEMPERATURE,
            "data_seed": DATA_SEED,
            "chunk": CHUNK,
            "largest": max(SIZES),
            "code": _data_code(),
        },
        "code": store.code_fingerprint(reward_model),
    }
    return f"proxy-onpolicy-{size}-seed{seed}", cfg, settings


def load(kind: str, size: int, seed: int, progress: bool = True) -> tuple[TinyGPT, dict]:
    """Return (rm, metrics): the proxy of ``kind`` (:data:`KINDS`), ``size`` (:data:`SIZES`) and
    ``seed``, trained first if it is not stored. ``metrics``: its held-out report (``rm_report``),
    ``final_loss``, ``train_seconds`` (of the run that made it), and for an on-policy proxy
    ``drawn``, the prompts drawn to find its pairs."""
    stem, cfg, settings = proxy_settings(kind, size, seed)
    if kind == "off-policy" and seed == 0:
        return overopt.load_proxy(str(size), progress)

    def train():
        if kind == "off-policy":
            data = overopt.proxy_data(str(size))
            extra = {}
        else:
            data = onpolicy_data(size)
            extra = {"drawn": int(_largest(_sft())["index"][size - 1]) + 1}
        model, log = reward_model.train_reward_model(cfg, progress=progress, data=data)
        return model, {**reward_model.rm_report(model), "final_loss": log["loss"][-1], **extra}

    return store.load_or_train(stem, settings, train, progress=progress)


# ----------------------------------------------------------------------------- the study's jobs


def job_proxy(kind: str, size: int, seed: int) -> tuple[TinyGPT, dict]:
    """Return ``(rm, report)`` for a job of chapter 11's study that names one of these proxies:
    ``kind`` (of :data:`KINDS`), ``size`` (of :data:`SIZES`) and ``seed``; the proxy is trained
    first if it is not stored. ``report``: its held-out accuracies, on chapter 4's pairs
    (``pair_accuracy``, ``near_miss_accuracy``) and on the held-out on-policy pairs
    (``onpolicy_accuracy``), and ``drawn`` for an on-policy proxy."""
    rm, metrics = load(kind, size, seed, progress=False)
    report = {k: metrics[k] for k in ("pair_accuracy", "near_miss_accuracy")}
    report["onpolicy_accuracy"] = heldout_accuracy(rm)["accuracy"]
    if "drawn" in metrics:
        report["drawn"] = metrics["drawn"]
    return rm, report


def prepare(jobs) -> None:
    """Draw, in this process, what the workers that run ``jobs`` would each draw again: the
    on-policy pairs (if a job names an on-policy proxy) and the held-out pairs."""
    if any(job.get("data") == "on-policy" for job in jobs):
        onpolicy_data(max(SIZES))
    if any("data" in job for job in jobs):
        heldout_pairs()


def study_code() -> str:
    """Return the fingerprint of this module's code and every package module it imports."""
    return store.code_fingerprint(sys.modules[__name__])
