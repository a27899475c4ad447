"""Small makers of exercise inputs that several chapters' exercises share (not a chapter: the
registry reads only the ``chNN`` modules)."""

import numpy as np
import torch

__all__ = ["as_tensor", "prefix_mask", "batch_size", "whole_numbers", "RUN_BATCH"]

RUN_BATCH = 64  # completions (or preference pairs) per batch in the chapters' runs


def batch_size(rng: np.random.Generator, small: int) -> int:
    """A batch size: now and then the runs' own (:data:`RUN_BATCH`), so that a bug that shows
    only at that size is found; else 1 to ``small``."""
    return RUN_BATCH if rng.random() < 0.15 else int(rng.integers(1, small + 1))


def as_tensor(values) -> torch.Tensor:
    """Return ``values`` (nested lists or an array) as a float32 torch tensor."""
    return torch.from_numpy(np.asarray(values, dtype=np.float32))


def prefix_mask(rng: np.random.Generator, B: int, T: int) -> np.ndarray:
    """A completion mask (B, T): each row keeps a prefix of 1 to T tokens."""
    lengths = rng.integers(1, T + 1, B)
    return (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)


def whole_numbers(rng: np.random.Generator, values) -> list | np.ndarray:
    """``values`` rounded to whole numbers and given as ints: a list of Python ints or an int64
    array, by turns. For contracts that take lists or arrays of numbers: a function that makes its
    result with its input's dtype (``np.zeros_like``, a write into ``np.array(ints)``) cuts every
    fraction off there, which inputs that are all floats never show."""
    ints = np.rint(np.asarray(values, dtype=float)).astype(np.int64)
    return ints.tolist() if rng.random() < 0.5 else ints
