"""The same digits on every CPU: the core of the book run under two kernel sets, compared.

float32 CPU kernels round differently on different CPUs: the vector width, the BLAS code
path, the vectorized ``exp`` and ``log``. One run is bit-identical on one machine, but a
one-ulp difference in the first SFT step grows through training into a different third
printed digit on another. The engine computes in float64 (:class:`minirlhf.model.GPTConfig`),
where the same differences stay near 1e-15 and every printed number agrees.

A second kernel set can be had on one machine: ``ATEN_CPU_CAPABILITY=default`` makes torch use
its portable kernels instead of the AVX2 or AVX-512 ones, and ``MKL_CBWR=COMPATIBLE`` makes
the BLAS take its most conservative code path. :func:`core_metrics` runs everything a chapter
prints from (SFT, the reward model, chapter 5's two arms, a GRPO arm and a DPO run, seed 0,
models trained here rather than read from disk), and :func:`compare_kernel_sets` runs it once
under each kernel set, each in its own process, and lists every metric whose printed digits
differ::

    python -m minirlhf.commands.numerics                  # float64: every metric agrees
    python -m minirlhf.commands.numerics --dtype float32  # float32: many do not

The command (:mod:`minirlhf.commands.numerics`) exits with status 0 when every metric agrees
and 1 otherwise; ``make test`` compares the kernel sets for both dtypes
(``tests/test_numerics.py``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

__all__ = ["OTHER_KERNELS", "DIGITS", "core_metrics", "run_under", "differences", "compare_kernel_sets", "printed"]

# torch's portable kernels and the BLAS's conservative path: another "CPU" on this one.
OTHER_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
# Decimal places compared: the most the book prints of any metric.
DIGITS = 4
# The arms run for one seed: chapter 5's two, GRPO, DPO. Together they reach every engine path
# a chapter prints from (batch and group advantages, the leash in the reward and in the loss,
# the RM's score and the verifier, DPO's loss and its held-out log-probs).
ARMS = ("rm", "verifier", "grpo-verifier", "dpo")


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flat(f"{prefix}[{i}]", v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)


def core_metrics(dtype: str = "float64", iterations: int = 25, arms=ARMS) -> dict:
    """Return ``{name: value}``: every number the core of the book prints from, flat.

    SFT and the reward model are trained here with the book's settings in ``dtype``; then each
    arm of ``arms`` (default :data:`ARMS`) runs for seed 0 from that policy (``iterations`` for the PPO and GRPO
    arms; DPO runs its own 200 steps).
    """
    from . import experiment
    from .ppo import PPOConfig
    from .reward_model import RMConfig, rm_report, train_reward_model
    from .sft import SFTConfig, greedy_accuracy, train_sft

    policy, sft_log = train_sft(replace(SFTConfig(), dtype=dtype), progress=False)
    rm, rm_log = train_reward_model(replace(RMConfig(), dtype=dtype), progress=False)
    out: dict = {}
    _flat("sft", {"accuracy": greedy_accuracy(policy), "loss": sft_log["loss"]}, out)
    _flat("rm", {**rm_report(rm), "loss": rm_log["loss"]}, out)
    cfg = PPOConfig(iterations=iterations)
    for arm in arms:
        _, log = experiment.run_arm(arm, policy, rm, 0, None, cfg, progress=False)
        log = {k: v for k, v in log.items() if k not in ("config", "settings")}
        _flat(arm, log, out)
    return out


def run_under(env: dict, dtype: str = "float64", iterations: int = 25, arms=ARMS) -> dict:
    """Return :func:`core_metrics` computed in a new process with ``env`` added to the
    environment (one torch thread)."""
    full = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    code = (
        "import json, sys, torch; torch.set_num_threads(1); from minirlhf.numerics import core_metrics; "
        f"json.dump(core_metrics({dtype!r}, {int(iterations)}, {tuple(arms)!r}), sys.stdout)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the run under {env or 'the default kernels'} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def printed(x: float) -> str:
    """Return ``x`` as the comparison prints it: :data:`DIGITS` decimals, or ``nan``."""
    return "nan" if math.isnan(x) else f"{x:.{DIGITS}f}"


def differences(a: dict, b: dict) -> list[tuple[str, float, float]]:
    """Return [(name, a, b)] for every metric whose value printed to :data:`DIGITS` decimals
    differs between ``a`` and ``b`` (a metric missing from one side counts, as NaN)."""
    names = sorted(set(a) | set(b))
    nan = float("nan")
    return [
        (n, a.get(n, nan), b.get(n, nan))
        for n in names
        if printed(a.get(n, nan)) != printed(b.get(n, nan)) or (n in a) != (n in b)
    ]


def compare_kernel_sets(dtype: str = "float64", iterations: int = 25, arms=ARMS) -> dict:
    """Run :func:`core_metrics` under the default kernels and under :data:`OTHER_KERNELS`, at
    the same time in two processes, and return ``{'n_metrics', 'differ': [(name, default,
    other)], 'max_diff', 'max_diff_at', 'seconds'}``."""
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        mine, other = pool.map(lambda env: run_under(env, dtype, iterations, arms), ({}, OTHER_KERNELS))
    # The largest difference of the raw values, relative to the size of the value (at least 1,
    # so that a KL of 1e-15 that is 1.06e-15 on the other side does not count as 6%).
    gaps = [
        (abs(mine[n] - other[n]) / max(abs(mine[n]), 1.0), n)
        for n in mine
        if n in other and not (math.isnan(mine[n]) or math.isnan(other[n]))
    ]
    gap, where = max(gaps, default=(0.0, ""))
    return {
        "n_metrics": len(mine),
        "differ": differences(mine, other),
        "max_diff": gap,
        "max_diff_at": where,
        "seconds": time.perf_counter() - start,
    }
