"""Where TRL's time goes: one more run of each arm under cProfile, its time per iteration split
into the stages of :data:`PROFILE_STAGES`, and for a trainer that calls Python's garbage
collector in its loop (TRL's PPO), the same run as shipped, without ``gc.freeze()``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .run import run_trl_arm
from .settings import TRL_ARMS
from .trainers import TRL_TRAINERS

__all__ = ["PROFILE_STAGES", "profile_stages", "profile_runs", "format_profile"]

# (label, file the function is defined in (its path's end), function name), by trainer: one
# iteration's stages, measured by cProfile's cumulative time. Rows marked "of which" are inside
# the row above them; the others do not overlap.
PROFILE_STAGES = {
    "grpo": (
        ("rollout: sample, score, old and ref. log-probs", "grpo_trainer.py", "_generate_and_score_completions"),
        ("  of which sampling (generate)", "generation/utils.py", "generate"),
        ("  of which the reward function", "trl/trainers.py", "reward_funcs_call"),
        ("loss: forward pass with gradient", "grpo_trainer.py", "compute_loss"),
        ("backward pass", "torch/_tensor.py", "backward"),
        ("gradient clipping", "torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
        ("optimizer step", "torch/optim/optimizer.py", "wrapper"),
        ("our evaluation (not TRL's work)", "trl/run.py", "measure"),
    ),
    "ppo": (
        ("sampling (generate)", "generation/utils.py", "generate"),
        ("policy, reference and value forward", "ppo_trainer.py", "forward"),
        ("reward model and value reads", "experimental/utils.py", "get_reward"),
        ("backward pass", "torch/_tensor.py", "backward"),
        ("optimizer step", "torch/optim/optimizer.py", "wrapper"),
        ("garbage collection (gc.collect)", "~", "<built-in method gc.collect>"),
        ("our evaluation (not TRL's work)", "trl/run.py", "measure"),
    ),
}
PROFILE_STAGES["rloo"] = tuple(
    (label, f.replace("grpo_trainer.py", "rloo_trainer.py"), fn) for label, f, fn in PROFILE_STAGES["grpo"]
)


def profile_stages(stats_file, trainer: str, iterations: int) -> dict:
    """Return {stage: seconds per iteration} from a cProfile of ``trainer.train()``: the stages
    of :data:`PROFILE_STAGES`, ``"total"`` (``train`` itself) and ``"rest"`` (total minus the
    stages that do not overlap)."""
    import pstats

    stats = pstats.Stats(str(stats_file)).stats

    def cumulative(path_end, name):
        # the outermost of the functions of that name (nested calls are inside its time)
        return max(
            (v[3] for (f, _, fn), v in stats.items() if fn == name and f.replace("\\", "/").endswith(path_end)),
            default=0.0,
        )

    total = max(v[3] for (f, _, fn), v in stats.items() if fn == "train" and "trainer" in f)
    out = {label: cumulative(f, fn) / iterations for label, f, fn in PROFILE_STAGES[trainer]}
    out["total"] = total / iterations
    out["rest"] = out["total"] - sum(v for label, v in out.items() if not label.startswith(" ") and label != "total")
    return out


def profile_runs(arms, policy, rm, seed: int, cfg, evalset, progress: bool, timed: dict) -> dict:
    """Return ``{"profile": {arm: stages}}``: :func:`profile_stages` of one more run of each of
    ``arms`` for ``seed``, after the timed ones (``timed``: {arm: the timed run's log}).

    For a trainer that calls ``gc.collect()`` in its loop, also ``"gc"``: the same run as shipped,
    without ``gc.freeze()``, its training time beside the timed run's, and whether the two agree.
    """
    out = {"profile": {}}
    with tempfile.TemporaryDirectory(prefix="minirlhf-profile-") as tmp:
        for arm in arms:
            path = Path(tmp) / f"{arm}.prof"
            run_trl_arm(arm, policy, rm, seed, cfg, evalset=evalset, progress=progress, profile=str(path))
            out["profile"][arm] = profile_stages(path, TRL_ARMS[arm].trainer, cfg.iterations)
            collects = TRL_TRAINERS[TRL_ARMS[arm].trainer].gc_per_batch
            if collects:
                shipped = run_trl_arm(arm, policy, rm, seed, cfg, evalset=evalset, progress=progress, freeze_gc=False)
                out["gc"] = _gc_saving(arm, seed, timed[arm], shipped, collects * cfg.iterations)
    return out


def _gc_saving(arm: str, seed: int, frozen: dict, shipped: dict, collections: int) -> dict:
    return {
        "arm": arm,
        "seed": seed,
        "train_seconds_frozen": frozen["train_seconds"],
        "train_seconds_shipped": shipped["train_seconds"],
        "collections": collections,
        "same_results": all(shipped[k] == frozen[k] for k in ("accuracy", "kl", "trl_log")),
    }


def format_profile(results: dict) -> str:
    """Return the profile of each arm's TRL run as text: milliseconds per iteration by stage,
    then what ``gc.freeze()`` saves a trainer that calls the collector in its loop (TRL's PPO)."""
    lines = []
    for arm, stages in results.get("profile", {}).items():
        lines.append(f"TRL {TRL_ARMS[arm].trainer.upper()} ({arm}), ms per iteration, under the profiler:")
        lines += [f"  {label:<50} {ms * 1000:7.1f}" for label, ms in stages.items()]
    if "gc" in results:
        g = results["gc"]
        per_call = (g["train_seconds_shipped"] - g["train_seconds_frozen"]) / g["collections"]
        lines.append(
            f"TRL {TRL_ARMS[g['arm']].trainer.upper()} ({g['arm']}, seed {g['seed']}), training alone: "
            f"{g['train_seconds_shipped']:.1f} s as shipped,"
        )
        lines.append(
            f"  {g['train_seconds_frozen']:.1f} s after gc.freeze() "
            f"(x{g['train_seconds_shipped'] / g['train_seconds_frozen']:.1f} faster); "
            f"{per_call:.2f} s saved per gc.collect()"
        )
        lines.append(f"  same results either way: {'yes' if g['same_results'] else 'NO'}")
    return "\n".join(lines)
