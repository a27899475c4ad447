"""The command line, ``python -m minirlhf.course.grader NOTEBOOK ...``: parse the options, grade
each notebook, print its report and the closing line, and exit with a status that says how it
went (0 all pass, 1 one fails or is too slow, 2 a notebook could not be graded or an option is
wrong, 130 on Ctrl-C, 128 + the signal on SIGTERM or SIGHUP).

A SIGTERM or SIGHUP that reaches the grader stops the grading with a message, after the kernel
is shut down and the temporary files removed.
"""

from __future__ import annotations

import secrets
import signal
import sys

from ... import cli
from ..plain import RETURN_CAP
from .grading import BUDGET, CELL_TIMEOUT, MAX_SECONDS, MAX_TIME_LIMIT, MIN_TIME_LIMIT, NotebookGrade, grade_notebook
from .render import render, summary_line, use_color


def exit_status(grades: list[NotebookGrade]) -> int:
    """The command's exit status: 2 when a notebook could not be graded, else 0 when all pass, else 1."""
    if any(g.error for g in grades):
        return 2
    return 0 if all(g.passed for g in grades) else 1


def main(argv=None) -> int:
    parser = cli.Parser(
        prog="python -m minirlhf.course.grader",
        description="Grade your notebooks: run each in a fresh kernel and check its exercises on the "
        "cases and on randomized inputs against the reference solutions.",
        epilog=f"Limits: each call of your function gets --time-limit seconds (each exercise sets its own, "
        f"usually 10); the calls of one exercise share --budget seconds ({BUDGET:g}); a returned "
        f"value may hold at most {RETURN_CAP:,} numbers. Exit status: 0 all pass, 1 one fails or is "
        "too slow, 2 a notebook could not be graded.",
    )
    parser.add_argument("notebooks", nargs="+", metavar="NOTEBOOK", help="e.g. notebooks/01_kl_penalty.ipynb")
    parser.add_argument(
        "--seed",
        type=cli.whole_number(0),
        default=None,
        help="seed of the randomized inputs, a whole number >= 0 (default: a new one)",
    )
    parser.add_argument(
        "--time-limit",
        type=cli.seconds(MAX_TIME_LIMIT, least=MIN_TIME_LIMIT),
        default=None,
        help="seconds per call of your function (default: each exercise's own, usually 10)",
    )
    parser.add_argument(
        "--budget",
        type=cli.seconds(MAX_SECONDS),
        default=BUDGET,
        help=f"seconds of calls per exercise, all its inputs together (default {BUDGET:g}); "
        "a function right on every input it finished before the budget ran out is "
        "reported SLOW",
    )
    parser.add_argument(
        "--cell-timeout",
        type=cli.seconds(MAX_SECONDS),
        default=CELL_TIMEOUT,
        help=f"seconds any notebook cell may run (default {CELL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="color the report (auto: on a terminal, unless NO_COLOR is set)",
    )
    args = parser.parse_args(argv)
    color = use_color(sys.stdout, args.color)
    seed = secrets.randbelow(10**6) if args.seed is None else args.seed
    grades, name = [], ""
    try:
        with cli.stops_as_interrupt():
            for name in args.notebooks:
                print(f"grading {name} ...", file=sys.stderr, flush=True)
                grade = grade_notebook(
                    name, seed=seed, time_limit=args.time_limit, cell_timeout=args.cell_timeout, budget=args.budget
                )
                grades.append(grade)
                print(render(grade, color), flush=True)
    except cli.Stopped as stop:  # the kernel was shut down and the temporary files removed on the way out
        print(
            f"grading stopped by {signal.Signals(stop.signum).name} while {name} was graded; if that "
            "notebook's code sends signals (os.kill(os.getppid(), ...)), that code is the cause. The "
            "notebook's kernel was shut down and the temporary files removed.",
            file=sys.stderr,
        )
        return 128 + stop.signum
    except KeyboardInterrupt:  # the kernel was shut down on the way out
        print("interrupted", file=sys.stderr)
        return 130
    if len(grades) > 1 or not grades[0].error:
        print(summary_line(grades, color), flush=True)  # before anything the shell writes next
    return exit_status(grades)
