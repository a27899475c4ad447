"""Time the training pipeline, and ours against TRL's trainers: ``make bench`` (or
``python -m minirlhf.commands.bench``).

Each stage runs in a fresh Python process with one torch thread, so that its wall time and
peak memory (maximum resident set size) are its own. Wall time is measured inside the
process, after the imports; the process start is not counted. Models are trained into a
temporary folder, so the stages never reuse (or disturb) the models in ``outputs/models``.
Prints a table and writes ``outputs/bench.json`` (its place is checked before the first
stage runs). Exit status: 0 when every stage keeps within its budgets and ours is at least
:data:`MIN_RATIO` times as fast as TRL's trainer on each pair, 1 when a stage is over budget
(the table marks it OVER) or a ratio falls short (marked BELOW); ``bench.json`` is written
either way. 2 when ``bench.json`` cannot be written there or an argument is wrong.

**Ours against TRL's trainers** (:data:`TRL_PAIRS`), both in float64: the ``rm`` arm by our
PPO (:func:`minirlhf.experiment.run_arm`) and by TRL's PPO trainer, and the ``grpo-verifier``
arm by ours and by TRL's ``GRPOTrainer`` (:func:`minirlhf.trl.run_trl_arm`). Each side is one
run of one seed (0) in one process, no worker pool, with the same settings (the arm's, 25
iterations of 64 completions, two updates each) and the same evaluation: our
:func:`~minirlhf.evaluation.evaluate` on the 400 eval prompts, with the reward model's score
and the exact KL, before training and after the last iteration (``eval_every`` 25). The pairs
time the trainers, so they leave out the book's evaluation after every iteration: it is the
same work on both sides (about 2.4 s of each run here, about half of ours) and says nothing
of the trainer; with it, the ratios shrink towards 1 (measured: 1.54 for PPO, 1.28 for GRPO).
Before the clock, both
sides load the stored policy and reward model, build the eval prompts, import everything
(TRL's side also TRL, its trainer's modules and GPT-2's, several seconds) and make one
throwaway optimizer step, which imports torch's compiler once per process (seconds, the same
on both sides). The clock then covers, on our
side, the run (a copy of the policy, the optimizer, rollouts, updates, evaluations); on TRL's,
the whole bridge call (converting our models, the scores' spread PPO's ``kl_coef`` needs, the
trainer's set-up, ``trainer.train()`` with ``gc.freeze()`` as the bridge runs it, and the
evaluations, each converting TRL's policy back to ours first). Ours and TRL's take turns,
:data:`REPEATS` times each; the table shows the medians and ``TRL/ours``, how many times
faster ours is. The pairs run only when the optional extra is installed
(``pip install -e ".[trl]"``); otherwise a line says they are skipped.

The five-seed experiment is timed with one worker (the runs one after another) and with two
worker processes (:mod:`minirlhf.parallel`), likewise :data:`REPEATS` times each, taking
turns, so that a change in the machine's load falls on both; the table shows the medians, and
a line the speed-up of two workers over one. The other stages run the experiment with its
default, one worker process per core.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import cli, paths

__all__ = [
    "STAGES",
    "TRL_STAGES",
    "OURS_STAGES",
    "TRL_PAIRS",
    "ORDER",
    "PAIRED",
    "REPEATS",
    "MIN_RATIO",
    "MEMORY_BUDGET_MB",
    "run_stage",
    "run_paired",
    "speedup",
    "trl_ratios",
    "judge",
    "format_table",
    "main",
]

# name -> (what it does, budget in seconds). Each budget is twice the stage's median wall time,
# rounded up to a whole second, measured in float64 on a 2-core machine while another program
# kept it busy (load average 2.5 to 5): medians of four runs (of three for the five-seed stages
# and the pairs with TRL), in seconds: sft_and_rm 30.4, one_seed_both_arms 13.9,
# five_seeds_both_arms 53.6, five_seeds_two_workers 59.0 (the second core was taken: no
# speed-up), one_seed_grpo_arms 12.1, one_seed_dpo_arm 24.3, pipeline 33.8; the pairs, each run
# evaluated at its start and its end: ours_ppo_rm 3.05, trl_ppo_rm 6.16, ours_grpo_verifier 2.87,
# trl_grpo_verifier 3.92. As the other program's load came and went, single runs took up to 1.7
# times their median (2.2 times once, one_seed_grpo_arms): hence twice the median. Measured
# again at a quiet moment (load 1.0), with the last-positions forward: the pairs ours_ppo_rm
# 4.2, trl_ppo_rm 8.9, ours_grpo_verifier 3.4, trl_grpo_verifier 5.1; every stage within budget.
STAGES = {
    "sft_and_rm": ("SFT policy and reward model, from scratch", 61.0),
    "one_seed_both_arms": ("both PPO arms, one seed, 25 iterations with the eval", 28.0),
    "five_seeds_both_arms": ("both PPO arms, 5 seeds, 25 iterations each, one run after another", 108.0),
    "five_seeds_two_workers": ("the same, 2 worker processes (peak: this one + each worker's)", 118.0),
    "one_seed_grpo_arms": ("both GRPO arms (8 prompts x 8), one seed, 25 iterations", 25.0),
    "one_seed_dpo_arm": ("the DPO arm, one seed, 200 steps of 64 pairs with the eval", 49.0),
    "ours_ppo_rm": ("our PPO, the rm arm, one seed, 25 iterations, evaluated at both ends", 7.0),
    "trl_ppo_rm": ("TRL's PPO trainer, the rm arm, one seed, 25 batches, our eval at both ends", 13.0),
    "ours_grpo_verifier": ("our GRPO, grpo-verifier, one seed, 25 iterations, evaluated at both ends", 6.0),
    "trl_grpo_verifier": ("TRL's GRPOTrainer, grpo-verifier, one seed, 25 iterations, our eval at both ends", 8.0),
    "pipeline": ("SFT, RM and both arms for one seed, from scratch", 68.0),
}
OURS_STAGES = {"ours_ppo_rm": "rm", "ours_grpo_verifier": "grpo-verifier"}  # stage -> our arm
TRL_STAGES = {"trl_ppo_rm": "rm", "trl_grpo_verifier": "grpo-verifier"}  # stage -> TRL arm
# name -> (our stage, TRL's stage), the same arm; ours must be MIN_RATIO times as fast on each.
TRL_PAIRS = {"PPO": ("ours_ppo_rm", "trl_ppo_rm"), "GRPO": ("ours_grpo_verifier", "trl_grpo_verifier")}
MIN_RATIO = 1.5
# Timed REPEATS times each, taking turns; the table shows the medians and the speed-up.
PAIRED = ("five_seeds_both_arms", "five_seeds_two_workers")
REPEATS = 3
# The stages run in this order, a pair's taking turns; "pipeline" starts from scratch in a folder of its own.
ORDER = tuple(STAGES)
MEMORY_BUDGET_MB = 1536.0


def _work(stage: str):
    """Do what ``stage`` needs before the clock (one torch thread; for the pairs of
    :data:`TRL_PAIRS` also the models, the eval prompts and the imports) and return the timed
    work, a function of no arguments."""
    import torch

    from ..experiment import run_experiment
    from ..store import load_rm, load_sft

    torch.set_num_threads(1)  # the benchmark is an entry point: it chooses the thread count
    if stage in OURS_STAGES or stage in TRL_STAGES:
        return _one_run(stage)

    def run():
        if stage in ("sft_and_rm", "pipeline"):
            load_sft(progress=False)
            load_rm(progress=False)
        if stage in ("one_seed_both_arms", "pipeline"):
            run_experiment(seeds=1, progress=False)
        if stage == "five_seeds_both_arms":
            run_experiment(seeds=5, progress=False, workers=1)
        if stage == "five_seeds_two_workers":
            run_experiment(seeds=5, progress=False, workers=2)
        if stage == "one_seed_grpo_arms":
            run_experiment(seeds=1, progress=False, arms=("grpo-verifier", "grpo-rm"))
        if stage == "one_seed_dpo_arm":
            run_experiment(seeds=1, progress=False, arms=("dpo",))

    return run


def _one_run(stage: str):
    # One side of a pair: the same models, eval prompts and settings for ours and TRL's.
    from ..evaluation import EvalSet
    from ..experiment import run_arm
    from ..ppo import PPOConfig
    from ..store import load_rm, load_sft
    from ..trl import run_trl_arm

    if stage in TRL_STAGES:
        _import_trl(TRL_STAGES[stage])
    policy, rm = load_sft(progress=False)[0], load_rm(progress=False)[0]
    evalset = EvalSet()
    _warm_up()
    cfg = PPOConfig(eval_every=PPOConfig().iterations)  # evaluated at the start and the end
    if stage in TRL_STAGES:
        return lambda: run_trl_arm(TRL_STAGES[stage], policy, rm, 0, cfg, evalset=evalset, progress=False)
    return lambda: run_arm(OURS_STAGES[stage], policy, rm, 0, None, cfg, evalset, progress=False)


def _import_trl(arm: str) -> None:
    # TRL, the modules of the trainer that runs the TRL arm `arm` (seconds: transformers'
    # Trainer, accelerate) and GPT-2's, which the bridge converts our models to.
    from ..trl import TRL_ARMS, TRL_TRAINERS, import_trl

    import_trl()
    TRL_TRAINERS[TRL_ARMS[arm].trainer].classes()
    from transformers import GPT2ForSequenceClassification, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: F401

    from .. import hf  # noqa: F401


def _warm_up() -> None:
    # The first optimizer step of a process imports torch's compiler (seconds, once per
    # process, whichever trainer): an import, so it is done before the clock on both sides.
    import torch

    weight = torch.zeros(1, requires_grad=True)
    weight.sum().backward()
    torch.optim.Adam([weight]).step()


def _has_trl() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl") is not None


def _child(stage: str) -> None:
    # Runs in the child process: time the stage and report it as one JSON line.
    work = _work(stage)
    start = time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    if stage == "five_seeds_two_workers":  # the largest worker's, counted once per worker (an upper bound)
        peak_kb += 2 * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"stage": stage, "seconds": seconds, "peak_mb": peak_kb / 1024}))


def run_stage(stage: str, outputs: Path) -> dict:
    """Return ``{'stage', 'seconds', 'peak_mb'}`` for ``stage``, run in a fresh process
    whose models live under ``outputs``."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    env = {**os.environ, "MINIRLHF_OUTPUTS": str(outputs), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "minirlhf.commands.bench", "--child", stage],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"stage {stage} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_paired(outputs: Path, repeats: int = REPEATS, stages: tuple = PAIRED) -> list[dict]:
    """Return one row per stage of ``stages`` (default :data:`PAIRED`), each run ``repeats``
    times, taking turns: ``seconds`` is the median, ``runs_seconds`` every time, ``peak_mb``
    the largest."""
    times = {stage: [] for stage in stages}
    peaks = {stage: [] for stage in stages}
    for _ in range(repeats):
        for stage in stages:
            row = run_stage(stage, outputs)
            times[stage].append(row["seconds"])
            peaks[stage].append(row["peak_mb"])
    return [
        {
            "stage": stage,
            "seconds": statistics.median(times[stage]),
            "runs_seconds": times[stage],
            "peak_mb": max(peaks[stage]),
        }
        for stage in stages
    ]


def speedup(rows: list[dict], pair: tuple = PAIRED) -> float | None:
    """Return the median time of the first stage of ``pair`` (default :data:`PAIRED`: one
    worker) over that of the second (two workers); None when either is missing."""
    seconds = {row["stage"]: row["seconds"] for row in rows}
    slow, fast = (seconds.get(stage) for stage in pair)
    return slow / fast if slow and fast else None


def trl_ratios(rows: list[dict]) -> list[dict]:
    """Return, for each pair of :data:`TRL_PAIRS` whose two stages are among ``rows``,
    ``{'pair', 'arm', 'ours_seconds', 'trl_seconds', 'ratio', 'required', 'fast_enough'}``:
    ``ratio`` is TRL's median time over ours (how many times faster ours is), ``fast_enough``
    whether it is at least :data:`MIN_RATIO`."""
    seconds = {row["stage"]: row["seconds"] for row in rows}
    out = []
    for name, (ours, theirs) in TRL_PAIRS.items():
        if ours in seconds and theirs in seconds:
            ratio = speedup(rows, (theirs, ours))
            out.append(
                {
                    "pair": name,
                    "arm": OURS_STAGES[ours],
                    "ours_seconds": seconds[ours],
                    "trl_seconds": seconds[theirs],
                    "ratio": ratio,
                    "required": MIN_RATIO,
                    "fast_enough": ratio is not None and ratio >= MIN_RATIO,
                }
            )
    return out


def judge(rows: list[dict]) -> bool:
    """Add ``what``, ``budget_seconds`` and ``within_budget`` to each row of :func:`run_stage`;
    return True when every stage kept within its time budget and the memory budget, and ours
    was at least :data:`MIN_RATIO` times as fast as TRL's on each pair (:func:`trl_ratios`)."""
    for row in rows:
        what, budget = STAGES[row["stage"]]
        row.update(
            what=what,
            budget_seconds=budget,
            within_budget=row["seconds"] <= budget and row["peak_mb"] < MEMORY_BUDGET_MB,
        )
    return all(row["within_budget"] for row in rows) and all(pair["fast_enough"] for pair in trl_ratios(rows))


def format_table(rows: list[dict]) -> str:
    """Return the table of judged rows: stage, wall time, budget, peak memory, what it does (a
    stage over budget is marked ``OVER``); then a line for each pair of :data:`TRL_PAIRS`: the
    two medians and TRL/ours against :data:`MIN_RATIO` (marked ``BELOW`` when it falls short)."""
    lines = [f"{'stage':<22} {'wall time':>10} {'budget':>8} {'peak memory':>12}  what"]
    for row in rows:
        mark = "" if row["within_budget"] else "  OVER"
        lines.append(
            f"{row['stage']:<22} {row['seconds']:>8.1f} s {row['budget_seconds']:>6.0f} s "
            f"{row['peak_mb']:>9.0f} MB  {row['what']}{mark}"
        )
    for pair in trl_ratios(rows):
        mark = "" if pair["fast_enough"] else "  BELOW"
        lines.append(
            f"{'TRL/ours ' + pair['pair']:<22} {pair['ratio']:>8.2f} x {pair['required']:>5.1f} x min  "
            f"ours {pair['ours_seconds']:.1f} s, TRL's trainer {pair['trl_seconds']:.1f} s, "
            f"arm {pair['arm']}, float64{mark}"
        )
    return "\n".join(lines)


class _Parser(cli.Parser):
    hint = "--help says what it does"


def main(argv=None) -> int:
    """Run every stage, print the table, write outputs/bench.json; return the exit status
    (0 all within budget and fast enough against TRL, 1 a stage over budget or a ratio
    below :data:`MIN_RATIO`, 2 bench.json cannot be written)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"] and len(argv) == 2:  # a stage, in the process this one starts
        _child(argv[1])
        return 0
    what = (
        "Time the training pipeline: each stage in a fresh process with one torch thread, its wall time "
        "and peak memory against its budget; and ours against TRL's trainer on the same arm (PPO on rm, "
        f"GRPO on grpo-verifier, one seed each, float64, taking turns {REPEATS} times), where ours must be "
        f"at least {MIN_RATIO}x as fast. Prints a table and writes bench.json to the outputs folder "
        "(outputs/, or MINIRLHF_OUTPUTS). Takes several minutes."
    )
    _Parser(
        prog="python -m minirlhf.commands.bench",
        description=what,
        epilog="Exit status: 0 when every stage keeps within its budgets and ours is fast enough against "
        f"TRL's trainers, 1 when a stage is over budget or ours is less than {MIN_RATIO}x as fast as TRL's "
        "on a pair (bench.json is written either way), 2 when bench.json cannot be written (checked before "
        "the first stage).",
    ).parse_args(argv)
    target = paths.OUTPUTS / "bench.json"
    problem = paths.file_problem(target)  # before minutes of stages, not after
    if problem:
        print(f"python -m minirlhf.commands.bench: error: cannot write the results: {problem}", file=sys.stderr)
        return 2
    pairs = (PAIRED, *TRL_PAIRS.values())  # each timed REPEATS times, taking turns
    rows = []
    with tempfile.TemporaryDirectory(prefix="minirlhf-bench-") as tmp:
        fresh = Path(tmp) / "fresh"  # nothing trained yet: SFT and RM from scratch
        for stage in ORDER:  # the arms reuse the models trained just before
            pair = next((p for p in pairs if stage in p), None)
            if pair is not None and stage != pair[0]:
                continue
            if pair in TRL_PAIRS.values() and not _has_trl():
                print(f'skipping {" and ".join(pair)}: TRL\'s side needs the optional extra (pip install -e ".[trl]")')
            elif pair is not None:
                rows += run_paired(fresh, stages=pair)
            else:
                rows.append(run_stage(stage, Path(tmp) / "pipeline" if stage == "pipeline" else fresh))
    ok = judge(rows)
    within = all(row["within_budget"] for row in rows)
    ratios = trl_ratios(rows)
    print(format_table(rows))
    ratio = speedup(rows)
    paired = {row["stage"]: row for row in rows if row["stage"] in PAIRED}
    one, two = (paired[stage] for stage in PAIRED)
    print(
        f"five seeds, both arms, medians of {REPEATS}: one worker {one['seconds']:.1f} s, two workers "
        f"{two['seconds']:.1f} s; speed-up of two workers over one {ratio:.2f}x"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"peak memory budget {MEMORY_BUDGET_MB:.0f} MB; load average at the end {load:.2f} "
        f"on {os.cpu_count()} cores (other work on the machine slows every stage)"
    )
    out = paths.write_atomic(
        target,
        json.dumps(
            {
                "stages": rows,
                "memory_budget_mb": MEMORY_BUDGET_MB,
                "all_within_budget": within,
                "speedup_two_workers": ratio,
                "trl_ratios": ratios,
                "min_ratio": MIN_RATIO,
                "all_fast_enough": all(p["fast_enough"] for p in ratios),
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_average_1min": load,
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
            },
            indent=1,
        ),
    )
    print(f"wrote {out}")
    if not ok:
        over = [row["stage"] for row in rows if not row["within_budget"]]
        slow = [p["pair"] for p in ratios if not p["fast_enough"]]
        if over:
            print(f"over budget: {', '.join(over)}", file=sys.stderr)
        if slow:
            print(f"ours less than {MIN_RATIO}x as fast as TRL's trainer: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
