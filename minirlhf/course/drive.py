"""Hand a learner's function to a training run only when it can drive it.

The drive cells of chapters 5, 8 and 9 give the runs the learner's own functions once their
checks pass. Two more things stand between a function and a run, so that a run never dies
deep inside the engine, or "finishes" with NaN, because of the learner's code:

- :func:`preflight` calls the function once, before the run, on a batch of the runs' size
  (:data:`~minirlhf.course.exercises._inputs.RUN_BATCH`), and compares its answer, its shape,
  and for a loss its gradient, with the reference's. A function it refuses is named in one line
  that says what is wrong, and the run uses the package's function instead.
- :func:`guard` wraps the function for the run: every call's result is checked (a tensor, finite,
  and for a loss a gradient, itself finite when the run takes its backward pass), and the first
  bad one stops the run with one line that names the function, the call and what came back
  (:class:`YourFunctionStopped`).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from ..safe_text import printable, shorten
from .cases import Case, run_case
from .exercises import get
from .exercises._inputs import RUN_BATCH

__all__ = ["preflight", "guard", "YourFunctionStopped", "run_batch"]


class YourFunctionStopped(RuntimeError):
    """Raised in a run when the learner's function returns what the run cannot use."""


RUN_TOKENS = 4  # tokens per completion in the runs (the answer and its end mark)


def _run_sized(kwargs: dict) -> bool:
    """True when the inputs are a batch of the runs' size: RUN_BATCH rows, and RUN_TOKENS tokens
    where they have a token axis."""
    shapes = [tuple(v.shape) for v in kwargs.values() if getattr(v, "shape", None) is not None and len(v.shape)]
    return bool(shapes) and shapes[0][0] == RUN_BATCH and all(len(s) < 2 or s[1] == RUN_TOKENS for s in shapes)


def run_batch(name: str, seed: int = 0) -> dict:
    """Return inputs of exercise ``name`` at the runs' batch size (64 completions of 4 tokens, or
    64 pairs), drawn by the exercise's own generator of randomized inputs (the first draw of that size
    from ``seed``)."""
    exercise = get(name)
    rng = np.random.default_rng(seed)
    for _ in range(10_000):
        kwargs = exercise.random_kwargs(rng)
        if _run_sized(kwargs):
            return kwargs
    raise RuntimeError(f"the inputs of {name} never come at the runs' batch size {RUN_BATCH}")


def preflight(name: str, fn: Callable) -> str:
    """Return "" when ``fn`` gives the reference's answer (and, for a loss, its gradient) on a
    batch of the runs' size; else one line saying what is wrong with the learner's ``name``."""
    exercise = get(name)
    kwargs = run_batch(name)
    expected = exercise.reference(**kwargs)
    result = run_case(fn, Case(kwargs, expected, f"a batch of {RUN_BATCH}, the runs' size"), exercise)
    if result.passed:
        return ""
    return (
        f"Your {name} is refused before the run: on a batch of {RUN_BATCH}, the runs' size, "
        f"{shorten(printable(result.message), 400).rstrip('.')}."
    )


def _bad_result(value, loss: bool) -> str:
    """What is wrong with one result the run got, or ""."""
    import torch

    if not isinstance(value, torch.Tensor):
        return f"returned {type(value).__name__}, not a torch tensor"
    if value.is_floating_point() and not bool(torch.isfinite(value.detach()).all()):
        return "returned NaN or an infinity"
    if loss and value.grad_fn is None:
        return "returned a loss with no gradient (computed under no_grad, or rebuilt from .item()?)"
    return ""


def _batch(inputs: tuple):
    """The batch size of a call: the first axis of its first input that has one (NaN if none)."""
    sizes = [getattr(a, "shape", None) for a in inputs]
    return next((s[0] for s in sizes if s is not None and len(s)), math.nan)


def guard(name: str, fn: Callable, loss: bool | None = None) -> Callable:
    """Return ``fn`` wrapped for a run: each result is checked, and the first one the run cannot
    use stops it with :class:`YourFunctionStopped`, naming ``name``, the call and the batch.
    ``loss`` (default: whether the exercise's answer has a gradient) asks for a gradient too.

    A loss's value can be finite while its gradient is not (``torch.where`` over a ``log(0)``
    branch): the update would fill the weights with NaN and the next rollout die inside the
    engine. So for a loss, the gradient the backward pass sends back through ``fn`` to each of
    its differentiable inputs is checked too (a hook on each; one ``isfinite`` a backward pass),
    and a NaN or an infinity there stops the run in the backward pass, before the weights move.
    That gradient is ``fn``'s alone: what comes after it in the backward pass is the engine's."""
    import torch

    loss = bool(get(name).expect.grad_wrt) if loss is None else loss
    calls = {"n": 0, "backward": (0, math.nan)}  # backward: (call, batch) of the loss being differentiated

    def stop(bad: str, n: int, batch) -> YourFunctionStopped:
        return YourFunctionStopped(
            f"your {name} {bad} on call {n} of the run (a batch of {batch}), "
            "so the run is stopped: fix it, run its check, then this cell again"
        )

    def check_gradient(grad):
        if not bool(torch.isfinite(grad).all()):
            raise stop("returned a finite loss whose gradient is NaN or an infinity", *calls["backward"])

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        calls["n"] += 1
        n, inputs = calls["n"], (*args, *kwargs.values())
        value = fn(*args, **kwargs)
        bad, batch = _bad_result(value, loss), _batch(inputs)
        if bad:
            raise stop(bad, n, batch)
        if loss:
            # the loss's own hook runs first in its backward pass: it names the call being differentiated
            value.register_hook(lambda grad: calls.update(backward=(n, batch)))
            for x in inputs:
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    x.register_hook(check_gradient)
        return value

    return checked
