"""The command line of the experiment, ``python -m minirlhf.commands.experiment`` (see
:mod:`minirlhf.experiment` for what it runs): options checked before anything runs, an estimate
of a long run's time, Ctrl-C, SIGTERM and SIGHUP keeping the finished seeds, and a write that
fails at the end keeping the results elsewhere."""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from .. import cli, experiment, parallel, paths, trainers
from ..arms import ARMS, DEFAULT_ARMS, DEFAULT_BETA, LABELS, REGISTRY
from ..plots import FIGURES

__all__ = ["MAX_SEEDS", "MAX_ITERATIONS", "OUTPUT_FILES", "main"]

MAX_SEEDS = 1000  # --seeds above this is refused: at a few seconds a seed, that is hours already
MAX_ITERATIONS = 1000  # --iterations above this is refused: 40 times the book's 25, minutes per run already
SECONDS_PER_ARM_ITERATION = 0.17  # a rough cost on a laptop CPU in float64, for the estimate made before the first seed
SECONDS_PER_DPO_RUN = 18.0  # a DPO arm's run with its default settings (200 steps), likewise rough
# The files write_outputs makes, so the command can check their places before it runs.
OUTPUT_FILES = (*FIGURES, "results.json")


def _merge(parts: list[dict]) -> dict:
    """Return the results of several one-seed runs of :func:`run_experiment` as one run's."""
    merged = copy.deepcopy(parts[0])
    for part in parts[1:]:
        for arm, runs in part["arms"].items():
            merged["arms"][arm].update(runs)
            merged["run_seconds"][arm].update(part["run_seconds"][arm])
        merged["settings"]["seeds"] += part["settings"]["seeds"]
        merged["wall_seconds"] += part["wall_seconds"]
    return merged


def _run_seeds(seeds: int, iterations: int, arms: tuple, betas: dict, workers: int = 1) -> tuple[list[dict], bool]:
    """Run the experiment, saying, for a long run, the time it will take. With one worker, one
    seed at a time ("seed k of N"); with more, all the runs at once, a line or a bar per run
    that finishes. Return (the results of the seeds that finished, whether Ctrl-C, SIGTERM or
    SIGHUP stopped it)."""
    parts: list[dict] = []
    # a run whose trainer takes its own config (DPO) ignores --iterations
    n_dpo = sum(trainers.get(REGISTRY[arm].trainer).own_defaults for arm in arms)
    guess = seeds * ((len(arms) - n_dpo) * iterations * SECONDS_PER_ARM_ITERATION + n_dpo * SECONDS_PER_DPO_RUN)
    workers = parallel.resolve_workers(workers, seeds * len(arms))
    if workers > 1:
        guess /= workers
        if guess > 60:
            print(
                f"{seeds} seeds x {len(arms)} arms x {iterations} iterations on {workers} worker processes: "
                f"about {cli.duration(guess)} (a rough estimate); Ctrl-C stops and keeps the finished seeds",
                flush=True,
            )
        try:
            results = experiment.run_experiment(
                seeds, iterations, arms=arms, betas=betas, workers=workers, keep_on_interrupt=True
            )
        except KeyboardInterrupt:
            results = None
        interrupted = results is None or len(results["settings"]["seeds"]) < seeds
        if interrupted and sys.stderr.isatty():
            print(file=sys.stderr)  # off the progress bar's line
        return ([results] if results else []), interrupted
    if guess > 60:
        print(
            f"{seeds} seeds x {len(arms)} arms x {iterations} iterations: about {cli.duration(guess)} "
            "(a rough estimate, measured after the first seed); Ctrl-C stops and keeps the finished seeds",
            flush=True,
        )
    try:
        for k in range(seeds):
            if seeds > 1:
                print(f"seed {k + 1} of {seeds}", flush=True)
            began = time.perf_counter()
            parts.append(experiment.run_experiment([k], iterations, arms=arms, betas=betas, workers=1))
            took, left = time.perf_counter() - began, seeds - k - 1
            if k == 0 and left and took * seeds > 60:
                print(
                    f"seed 1 took {took:.1f} s: about {cli.duration(took * left)} to go for the other {left}",
                    flush=True,
                )
    except KeyboardInterrupt:
        if sys.stderr.isatty():
            print(file=sys.stderr)  # off the progress bar's line
        return parts, True
    return parts, False


def _keep_somewhere(results: dict) -> Path:
    """Write ``results`` (with its summary) to a new file in the system's temporary folder."""
    fd, name = tempfile.mkstemp(prefix="minirlhf-results-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({**results, "summary": experiment.summarize(results), "original": experiment.ORIGINAL}, f, indent=1)
    return Path(name)


def main(argv=None) -> int:
    """Run the experiment from the command line; return the exit status.

    The output folder and the model folder are checked before anything runs, and the output
    folder is held for this run (:func:`minirlhf.paths.output_lock`: a second run into it is
    refused); Ctrl-C, SIGTERM and SIGHUP keep the seeds that finished and say which were not
    kept; a write that fails at the end keeps the results in a file of the system's temporary
    folder and says where.
    """
    w = max(len(name) for name in ARMS)
    arm_list = "\n".join(f"  {name:<{w}}  {arm.help}" for name, arm in REGISTRY.items())
    parser = cli.Parser(
        prog="python -m minirlhf.commands.experiment",
        description=experiment.__doc__.split("\n\n")[0],
        epilog=f"arms (--arms):\n{arm_list}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=ARMS,
        default=list(DEFAULT_ARMS),
        metavar="ARM",
        help=f"the arms to run, in this order (default: {' '.join(DEFAULT_ARMS)}; listed below)",
    )
    parser.add_argument(
        "--seeds",
        type=cli.whole_number(1, MAX_SEEDS, "each seed runs every arm"),
        default=5,
        help=f"number of seeds, 0..n-1 (default 5, at most {MAX_SEEDS})",
    )
    parser.add_argument(
        "--iterations",
        type=cli.whole_number(1, MAX_ITERATIONS, "the book runs 25"),
        default=25,
        help=f"PPO iterations per run (default 25, at most {MAX_ITERATIONS}; a DPO arm runs its own 200 steps)",
    )
    for arm in ARMS:
        what = trainers.get(REGISTRY[arm].trainer).beta
        parser.add_argument(
            f"--beta-{arm}",
            type=cli.finite_number(0.0),
            default=None,
            help=f"{what} of the {LABELS[arm]} (default {DEFAULT_BETA[arm]:g})",
        )
    parser.add_argument(
        "--out",
        type=cli.folder("--out outputs/run1"),
        default=None,
        help="output folder (default: the project's outputs/)",
    )
    parser.add_argument(
        "--workers",
        type=cli.whole_number(1),
        default=None,
        help=f"worker processes that make the runs side by side (default: one per core, "
        f"{parallel.default_workers()} here; 1: one run after another in this process); "
        "the results are the same for any number",
    )
    args = parser.parse_args(argv)
    arms = tuple(args.arms)
    if len(set(arms)) != len(arms):
        parser.error(f"argument --arms: names an arm twice: {' '.join(arms)}")
    betas = {}
    for arm in ARMS:
        value = getattr(args, f"beta_{arm.replace('-', '_')}")
        if value is not None and arm not in arms:
            parser.error(f"argument --beta-{arm}: the arm {arm} is not among --arms ({' '.join(arms)})")
        trainer = trainers.get(REGISTRY[arm].trainer)
        if value == 0 and trainer.beta_zero:
            parser.error(f"argument --beta-{arm}: must be > 0 for {trainer.name.upper()} ({trainer.beta_zero}), got 0")
        if value is not None:
            betas[arm] = value
    out = args.out if args.out is not None else paths.OUTPUTS
    where = "--out" if args.out is not None else "the output folder (MINIRLHF_OUTPUTS, or outputs/)"
    problem = paths.folder_problem(out, OUTPUT_FILES)
    if problem:
        parser.error(f"{where}: {problem}")
    from ..store import models_dir

    problem = paths.folder_problem(models_dir())
    if problem:
        parser.error(f"the models' folder (MINIRLHF_OUTPUTS/models): {problem}")
    import matplotlib

    matplotlib.use("Agg")  # files only; set here, not in write_outputs, which notebooks call too
    torch.set_num_threads(1)  # an entry point's choice: runs are bit-identical at a fixed count
    try:
        with cli.stops_as_interrupt(), paths.output_lock(out, "python -m minirlhf.commands.experiment"):
            return _run_and_write(args, arms, betas, out)
    except paths.FolderInUse as exc:
        parser.error(f"{where}: {exc}")


def _run_and_write(args, arms: tuple, betas: dict, out: Path) -> int:
    """The runs and the writes of :func:`main`, once its checks have passed and it holds ``out``."""
    parts, interrupted = _run_seeds(args.seeds, args.iterations, arms, betas, args.workers)
    with cli.signals_ignored():  # from here on the finished seeds are written whole
        return _write(args, parts, interrupted, out)


def _write(args, parts: list[dict], interrupted: bool, out: Path) -> int:
    """Print the table of the finished seeds, write them to ``out`` and say what was kept."""
    if not parts:
        print(f"{cli.stop_name()} before the first seed finished: nothing written", file=sys.stderr)
        return cli.stop_status()
    results = _merge(parts)
    print(
        f"SFT policy accuracy {results['sft_accuracy']:.3f} (original run {experiment.ORIGINAL['sft_accuracy']:.3f}); "
        f"RM pair accuracy {results['rm_pair_accuracy']:.3f} ({experiment.ORIGINAL['rm_pair_accuracy']:.3f}), "
        f"near-miss accuracy {results['rm_near_miss_accuracy']:.3f} "
        f"({experiment.ORIGINAL['rm_near_miss_accuracy']:.3f})"
    )
    print(experiment.format_table(results))
    try:
        written = experiment.write_outputs(results, out)
    except OSError as exc:
        kept = _keep_somewhere(results)
        print(f"could not write to {out} ({exc.strerror or exc}); the results are kept in {kept}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print(f"wall time {results['wall_seconds']:.1f} s")
    if interrupted:
        kept = results["settings"]["seeds"]
        n = len(kept)
        lost = [seed for seed in range(args.seeds) if seed not in kept]
        if kept == list(range(n)):
            rest = f"seed {n} is" if n == args.seeds - 1 else f"seeds {n} to {args.seeds - 1} are"
            print(
                f"{cli.stop_name()} during seed {n + 1} of {args.seeds}: wrote the {n} finished "
                f"seed{'s' if n > 1 else ''}; {rest} not kept",
                file=sys.stderr,
            )
        else:  # runs in parallel finish out of turn
            print(
                f"{cli.stop_name()} with {len(lost)} of {args.seeds} seeds unfinished: wrote the {n} finished "
                f"seed{'s' if n > 1 else ''} ({', '.join(map(str, kept))}); not kept: "
                f"{', '.join(map(str, lost))}",
                file=sys.stderr,
            )
        return cli.stop_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
