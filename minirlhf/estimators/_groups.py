"""What every group estimator shares: the check of its inputs, and which groups carry no signal."""

import torch

__all__ = ["check_groups", "same_groups"]


def check_groups(rewards: torch.Tensor, group_size: int, eps: float) -> None:
    """Raise ValueError unless ``rewards`` (B,) holds finite rewards in groups of ``group_size``
    >= 2 side by side, and ``eps`` > 0: what every group estimator needs of its inputs."""
    if rewards.dim() != 1 or rewards.numel() < 1:
        raise ValueError(f"rewards must be a non-empty 1-D tensor, got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite numbers (no NaN or inf)")
    if not isinstance(group_size, int) or group_size < 2:
        raise ValueError(
            f"group_size must be a whole number >= 2 (a group of one has no baseline but itself), got {group_size!r}"
        )
    if rewards.numel() % group_size:
        raise ValueError(
            f"group_size ({group_size}) must divide the number of rewards "
            f"({rewards.numel()}): G completions of each prompt, side by side"
        )
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")


def same_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Return (B / G, 1) booleans: True for each group of ``group_size`` side-by-side rewards
    that are all equal, a group that carries no signal (every group estimator gives it 0).
    """
    grouped = rewards.view(-1, group_size)  # (B / G, G)
    return (grouped == grouped[:, :1]).all(1, keepdim=True)
