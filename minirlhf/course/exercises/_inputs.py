"""Small makers of exercise inputs that several chapters' exercises share (not a chapter: the
registry reads only the ``chNN`` modules)."""

import numpy as np
import torch

__all__ = ["as_tensor", "prefix_mask"]


def as_tensor(values) -> torch.Tensor:
    """Return ``values`` (nested lists or an array) as a float32 torch tensor."""
    return torch.from_numpy(np.asarray(values, dtype=np.float32))


def prefix_mask(rng: np.random.Generator, B: int, T: int) -> np.ndarray:
    """A completion mask (B, T): each row keeps a prefix of 1 to T tokens."""
    lengths = rng.integers(1, T + 1, B)
    return (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
