"""The command line of the kernel-set comparison, ``python -m minirlhf.commands.numerics`` (see
:mod:`minirlhf.numerics` for what it runs)::

    python -m minirlhf.commands.numerics                  # float64: every metric agrees
    python -m minirlhf.commands.numerics --dtype float32  # float32: many do not

It prints how many metrics differ, and the first ten of them; the exit status is 0 when every
metric agrees, 1 when one differs, 2 when an option is wrong."""

from __future__ import annotations

import sys

from .. import cli, numerics

__all__ = ["main"]


def main(argv=None) -> int:
    """Compare the two kernel sets from the command line; return the exit status."""
    parser = cli.Parser(prog="python -m minirlhf.commands.numerics", description=numerics.__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument(
        "--iterations", type=cli.whole_number(1), default=25, help="PPO and GRPO iterations (default 25)"
    )
    parser.add_argument(
        "--arms",
        nargs="+",
        default=list(numerics.ARMS),
        choices=numerics.ARMS,
        metavar="ARM",
        help=f"the arms run for seed 0 (default: {' '.join(numerics.ARMS)})",
    )
    args = parser.parse_args(argv)
    result = numerics.compare_kernel_sets(args.dtype, args.iterations, args.arms)
    differ = result["differ"]
    other = " ".join(f"{k}={v}" for k, v in numerics.OTHER_KERNELS.items())
    print(
        f"{args.dtype}: {result['n_metrics']} metrics, {len(differ)} differ at {numerics.DIGITS} decimals between "
        f"the default kernels and {other}; the largest difference, relative to max(1, |value|), "
        f"{result['max_diff']:.1e} ({result['max_diff_at']}); {result['seconds']:.0f} s"
    )
    for name, a, b in differ[:10]:
        print(f"  {name}: {numerics.printed(a)} against {numerics.printed(b)}")
    if len(differ) > 10:
        print(f"  ... and {len(differ) - 10} more")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
