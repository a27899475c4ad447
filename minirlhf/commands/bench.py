"""Time the training pipeline: ``make bench`` (or ``python -m minirlhf.commands.bench``).

Each stage runs in a fresh Python process with one torch thread, so that its wall time and
peak memory (maximum resident set size) are its own. Wall time is measured inside the
process, after the imports; the process start is not counted. Models are trained into a
temporary folder, so the stages never reuse (or disturb) the models in ``outputs/models``.
Prints a table and writes ``outputs/bench.json`` (its place is checked before the first
stage runs). Exit status: 0 when every stage keeps within its budgets, 1 when one is over (the
table marks it OVER; ``bench.json`` is written either way), 2 when ``bench.json`` cannot be
written there or an argument is wrong. The two TRL stages run only when the
optional extra is installed (``pip install -e ".[trl]"``); they import TRL before the clock
starts, since importing it takes longer than the run.

The five-seed experiment is timed with one worker (the runs one after another) and with two
worker processes (:mod:`minirlhf.parallel`), each :data:`REPEATS` times, taking turns so that
a change in the machine's load falls on both; the table shows the medians, and the last line
the speed-up of two workers over one. The other stages run the experiment with its default,
one worker process per core.
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
    "ORDER",
    "PAIRED",
    "REPEATS",
    "MEMORY_BUDGET_MB",
    "run_stage",
    "run_paired",
    "speedup",
    "judge",
    "format_table",
    "main",
]

# The DPO stage took 6.7 to 7.2 s (five runs on 2 cores); its budget is twice that, rounded up.
DPO_BUDGET = 15.0
# name -> (what it does, budget in seconds)
STAGES = {
    "sft_and_rm": ("SFT policy and reward model, from scratch", 30.0),
    "one_seed_both_arms": ("both PPO arms, one seed, 25 iterations with the eval", 10.0),
    "pipeline": ("SFT, RM and both arms for one seed, from scratch", 30.0),
    "five_seeds_both_arms": ("both PPO arms, 5 seeds, 25 iterations each, one run after another", 60.0),
    "five_seeds_two_workers": ("the same, 2 worker processes (peak: this one + each worker's)", 40.0),
    "one_seed_grpo_arms": ("both GRPO arms (8 prompts x 8), one seed, 25 iterations", 10.0),
    "one_seed_dpo_arm": ("the DPO arm, one seed, 200 steps of 64 pairs with the eval", DPO_BUDGET),
    # TRL's trainers on the same work (minirlhf.trl); a run took 3 to 5 s, set-up included.
    "trl_grpo_verifier": ("TRL's GRPOTrainer, grpo-verifier, one seed, 25 iterations with our eval", 10.0),
    "trl_ppo_rm": ("TRL's PPO trainer, the rm arm, one seed, 25 batches with our eval", 10.0),
}
TRL_STAGES = {"trl_grpo_verifier": "grpo-verifier", "trl_ppo_rm": "rm"}  # stage -> TRL arm
# The stages run in this order; "pipeline" starts from scratch in a folder of its own.
ORDER = (
    "sft_and_rm",
    "one_seed_both_arms",
    "five_seeds_both_arms",
    "five_seeds_two_workers",
    "one_seed_grpo_arms",
    "one_seed_dpo_arm",
    "trl_grpo_verifier",
    "trl_ppo_rm",
    "pipeline",
)
# Timed REPEATS times each, taking turns; the table shows the medians and the speed-up.
PAIRED = ("five_seeds_both_arms", "five_seeds_two_workers")
REPEATS = 3
MEMORY_BUDGET_MB = 1536.0


def _work(stage: str) -> None:
    import torch

    from ..experiment import run_experiment
    from ..store import load_rm, load_sft

    torch.set_num_threads(1)  # the benchmark is an entry point: it chooses the thread count
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
    if stage in TRL_STAGES:
        from ..trl import run_trl_arm

        run_trl_arm(TRL_STAGES[stage], load_sft(progress=False)[0], load_rm(progress=False)[0], 0, progress=False)


def _has_trl() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl") is not None


def _child(stage: str) -> None:
    # Runs in the child process: time the stage and report it as one JSON line.
    if stage in TRL_STAGES:
        from ..trl import import_trl

        import_trl()
    start = time.perf_counter()
    _work(stage)
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


def run_paired(outputs: Path, repeats: int = REPEATS) -> list[dict]:
    """Return one row per stage of :data:`PAIRED`, each run ``repeats`` times, taking turns:
    ``seconds`` is the median, ``runs_seconds`` every time, ``peak_mb`` the largest."""
    times = {stage: [] for stage in PAIRED}
    peaks = {stage: [] for stage in PAIRED}
    for _ in range(repeats):
        for stage in PAIRED:
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
        for stage in PAIRED
    ]


def speedup(rows: list[dict]) -> float | None:
    """Return the median time of the paired stage with one worker over that with two (None
    when either is missing)."""
    seconds = {row["stage"]: row["seconds"] for row in rows}
    one, two = (seconds.get(stage) for stage in PAIRED)
    return one / two if one and two else None


def judge(rows: list[dict]) -> bool:
    """Add ``what``, ``budget_seconds`` and ``within_budget`` to each row of :func:`run_stage`;
    return True when every stage kept within its time budget and the memory budget."""
    for row in rows:
        what, budget = STAGES[row["stage"]]
        row.update(
            what=what,
            budget_seconds=budget,
            within_budget=row["seconds"] <= budget and row["peak_mb"] < MEMORY_BUDGET_MB,
        )
    return all(row["within_budget"] for row in rows)


def format_table(rows: list[dict]) -> str:
    """Return the table of judged rows: stage, wall time, budget, peak memory, what it does;
    a stage over budget is marked ``OVER``."""
    lines = [f"{'stage':<22} {'wall time':>10} {'budget':>8} {'peak memory':>12}  what"]
    for row in rows:
        mark = "" if row["within_budget"] else "  OVER"
        lines.append(
            f"{row['stage']:<22} {row['seconds']:>8.1f} s {row['budget_seconds']:>6.0f} s "
            f"{row['peak_mb']:>9.0f} MB  {row['what']}{mark}"
        )
    return "\n".join(lines)


class _Parser(cli.Parser):
    hint = "--help says what it does"


def main(argv=None) -> int:
    """Run every stage, print the table, write outputs/bench.json; return the exit status
    (0 all within budget, 1 a stage over budget, 2 bench.json cannot be written)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"] and len(argv) == 2:  # a stage, in the process this one starts
        _child(argv[1])
        return 0
    what = (
        "Time the training pipeline: each stage in a fresh process with one torch thread, its wall time "
        "and peak memory against its budget; prints a table and writes bench.json to the outputs folder "
        "(outputs/, or MINIRLHF_OUTPUTS). Takes a few minutes."
    )
    _Parser(
        prog="python -m minirlhf.commands.bench",
        description=what,
        epilog="Exit status: 0 when every stage keeps within its budgets, 1 when one is over (bench.json "
        "is written either way), 2 when bench.json cannot be written (checked before the first "
        "stage).",
    ).parse_args(argv)
    target = paths.OUTPUTS / "bench.json"
    problem = paths.file_problem(target)  # before minutes of stages, not after
    if problem:
        print(f"python -m minirlhf.commands.bench: error: cannot write the results: {problem}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="minirlhf-bench-") as tmp:
        fresh = Path(tmp) / "fresh"  # nothing trained yet: SFT and RM from scratch
        for stage in ORDER:  # the arms reuse the models trained just before
            if stage in TRL_STAGES and not _has_trl():
                print(f'skipping {stage}: it needs the optional extra (pip install -e ".[trl]")')
                continue
            if stage == PAIRED[0]:
                rows += run_paired(fresh)
            elif stage not in PAIRED:
                rows.append(run_stage(stage, Path(tmp) / "pipeline" if stage == "pipeline" else fresh))
    ok = judge(rows)
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
                "all_within_budget": ok,
                "speedup_two_workers": ratio,
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
        print(f"over budget: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
