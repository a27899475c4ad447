"""The command line of the TRL bridge, ``python -m minirlhf.commands.trl_run`` (see
:mod:`minirlhf.trl` for what it runs): the output folder checked and held before anything
runs, and Ctrl-C, SIGTERM and SIGHUP keeping the seeds whose every run had finished."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from .. import cli, paths, plots
from .. import trl as bridge
from ..trl.compare import compare

__all__ = ["MAX_SEEDS", "MAX_ITERATIONS", "OUTPUT_FILES", "main"]


MAX_SEEDS = 100  # --seeds above this is refused: the book's comparison runs 5
MAX_ITERATIONS = 1000  # --iterations above this is refused: the book runs 25
OUTPUT_FILES = ("trl_results.json", "trl_accuracy.png", "trl_kl.png")


def main(argv=None) -> int:
    """Run TRL's arms (and ours, with --compare) from the command line; return the exit status.

    The output folder is checked and held (one writer per folder) before anything runs;
    Ctrl-C, SIGTERM and SIGHUP write the seeds whose every run had finished and say which
    were not kept."""
    parser = cli.Parser(
        prog="python -m minirlhf.commands.trl_run",
        description=bridge.__doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--arm",
        choices=tuple(bridge.TRL_ARMS),
        action="append",
        help="a TRL arm (repeat for several; default: every arm with --compare, else grpo-verifier)",
    )
    parser.add_argument(
        "--seeds",
        type=cli.whole_number(1, MAX_SEEDS, "the book's comparison runs 5"),
        default=1,
        help=f"seeds 0..n-1 (default 1, at most {MAX_SEEDS})",
    )
    parser.add_argument(
        "--iterations",
        type=cli.whole_number(1, MAX_ITERATIONS, "the book runs 25"),
        default=25,
        help=f"rollout batches (default 25, at most {MAX_ITERATIONS})",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run our arm, seed for seed, in the same process, for the side-by-side table",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile one more run of the first seed of each arm and print where TRL's time goes",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="folder for trl_results.json, trl_accuracy.png and trl_kl.png (default: outputs/trl)",
    )
    args = parser.parse_args(argv)
    arms = tuple(dict.fromkeys(args.arm or (bridge.TRL_ARMS if args.compare else ("grpo-verifier",))))
    if args.out is not None and not args.out.strip():
        parser.error("argument --out: is empty: name a folder, e.g. --out outputs/trl")
    out = Path(args.out) if args.out is not None else paths.OUTPUTS / "trl"
    problem = paths.folder_problem(out, OUTPUT_FILES)  # before minutes of runs, not after
    if problem:
        parser.error(f"{'--out' if args.out is not None else 'the output folder (MINIRLHF_OUTPUTS/trl)'}: {problem}")
    try:
        bridge.import_trl()
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    main_process = os.environ.get("RANK", "0") == "0"  # under accelerate, one process reports
    try:
        with cli.stops_as_interrupt():
            return _run(args, arms, out, main_process)
    except paths.FolderInUse as exc:
        parser.error(f"--out: {exc}")
    except KeyboardInterrupt:  # before the first seed finished, or in a process that does not write
        where = "before the first seed finished" if main_process else "in a process that does not write"
        print(f"{cli.stop_name()} {where}: nothing written", file=sys.stderr)
        return cli.stop_status()


def _run(args, arms: tuple, out: Path, main_process: bool) -> int:
    if not main_process:
        compare(arms, args.seeds, args.iterations, progress=False, ours=args.compare, profile=args.profile)
        return 0
    with paths.output_lock(out, "python -m minirlhf.commands.trl_run"):
        return _run_and_write(args, arms, out)


def _run_and_write(args, arms: tuple, out: Path) -> int:
    """The runs and the writes of :func:`main`, once its checks have passed and it holds ``out``."""
    results = compare(
        arms,
        args.seeds,
        args.iterations,
        progress=True,
        ours=args.compare,
        profile=args.profile,
        keep_on_interrupt=True,
    )
    with cli.signals_ignored():  # from here on the finished seeds are written whole
        return _write(args, results, out)


def _write(args, results: dict, out: Path) -> int:
    """Write the finished seeds to ``out``, print the tables and say what was kept."""
    kept = results["settings"]["seeds"]
    # a stop that came after the last seed, too late to cut any run short, is still a stop
    stopped = len(kept) < args.seeds or (args.profile and "profile" not in results) or cli.stop_arrived()
    import matplotlib

    matplotlib.use("Agg")
    try:
        paths.write_atomic(out / "trl_results.json", json.dumps(results, indent=1))
        for key in ("accuracy", "kl"):
            paths.save_figure(plots.side_by_side_figure(results, key), out / f"trl_{key}.png", dpi=120)
    except OSError as exc:  # checked before the runs; kept all the same if the disk fails now
        fd, name = tempfile.mkstemp(prefix="minirlhf-trl-results-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        print(f"could not write to {out} ({exc.strerror or exc}); the results are kept in {name}", file=sys.stderr)
        return 1
    print(bridge.format_side_by_side(results))
    if args.profile and "profile" in results:
        print(bridge.format_profile(results))
    print(f"processes: {os.environ.get('WORLD_SIZE', '1')}; results: {out / 'trl_results.json'}")
    if stopped:
        n = len(kept)
        if n == args.seeds and (not args.profile or "profile" in results):  # it came after the last run
            print(f"{cli.stop_name()} after the last run: wrote all {n} seeds", file=sys.stderr)
            return cli.stop_status()
        rest = (
            (f"seeds {n} to {args.seeds - 1} are" if n < args.seeds - 1 else f"seed {n} is")
            if n < args.seeds
            else "the profile is"
        )
        print(f"{cli.stop_name()}: wrote the {n} finished seed{'s' if n > 1 else ''}; {rest} not kept", file=sys.stderr)
        return cli.stop_status()
    return 0


if __name__ == "__main__":
    sys.exit(main())
