"""The two trained models every chapter after the third starts from, loaded or trained once.

``load_sft()`` returns the partial-SFT policy and ``load_rm()`` the reward model; both come
from ``outputs/models`` when a file trained with the same settings is there, and are
trained (and saved) otherwise. The numbers that describe them travel with them.
"""

from __future__ import annotations

import torch

from .model import TinyGPT
from .reward_model import RMConfig, rm_report, train_reward_model
from .sft import SFTConfig, greedy_accuracy, train_sft
from .store import load_or_train, settings_hash

__all__ = ["load_sft", "load_rm", "load_all"]


def _file_name(name: str, cfg, default) -> str:
    """Return the file stem for ``cfg``: the book's model keeps ``name``; any other settings
    get their own file, so trying them never replaces the model the chapters use."""
    return name if cfg == default else f"{name}-{settings_hash(cfg)}"


def load_sft(config: SFTConfig | None = None, progress: bool = True, verbose: bool = True) -> tuple[TinyGPT, dict]:
    """Return (policy, metrics): the partial-SFT policy and ``{'accuracy', 'train_seconds'?}``.

    ``accuracy`` is greedy accuracy on the 400 eval prompts.
    """
    torch.set_num_threads(1)
    cfg = config or SFTConfig()

    def train():
        model, log = train_sft(cfg, progress=progress)
        return model, {"accuracy": greedy_accuracy(model), "final_loss": log["loss"][-1]}

    return load_or_train(_file_name("sft_policy", cfg, SFTConfig()), cfg, train, verbose=verbose)


def load_rm(config: RMConfig | None = None, progress: bool = True, verbose: bool = True) -> tuple[TinyGPT, dict]:
    """Return (rm, metrics): the reward model and its held-out report (see :func:`rm_report`)."""
    torch.set_num_threads(1)
    cfg = config or RMConfig()

    def train():
        model, log = train_reward_model(cfg, progress=progress)
        return model, {**rm_report(model), "final_loss": log["loss"][-1]}

    return load_or_train(_file_name("reward_model", cfg, RMConfig()), cfg, train, verbose=verbose)


def load_all(progress: bool = True, verbose: bool = True) -> dict:
    """Return ``{'policy', 'rm', 'sft_metrics', 'rm_metrics'}`` with the book's default settings."""
    policy, sft_metrics = load_sft(progress=progress, verbose=verbose)
    rm, rm_metrics = load_rm(progress=progress, verbose=verbose)
    return {"policy": policy, "rm": rm, "sft_metrics": sft_metrics, "rm_metrics": rm_metrics}
