"""Trained models on disk: written atomically, loaded safely, retrained when they do not fit.

A model file holds the weights, the network's shape, the settings it was trained with, a
hash of those settings, and a few measured numbers. :func:`load_or_train` uses the file when
its hash matches the settings asked for (and the training code, see ``TRAINING_CODE``), and
otherwise trains anew, saying why: the file is *missing*, *stale* (trained under other
settings or code) or *corrupt* (unreadable). Files are read
with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Callable

import torch

from . import paths
from .model import GPTConfig, TinyGPT
from .progress import notify

__all__ = ["MODELS_DIR", "FORMAT", "TRAINING_CODE", "code_fingerprint", "settings_hash", "save_model", "load_model", "load_or_train"]

FORMAT = 1  # bump when the file layout or the training code changes what a setting means


def MODELS_DIR() -> Path:
    """Return the folder of trained models, ``OUTPUTS / "models"`` (created on first save)."""
    return paths.OUTPUTS / "models"


def _plain(settings) -> dict:
    return asdict(settings) if is_dataclass(settings) else dict(settings)


# The modules whose code decides what a trained model is: edit one and old files are stale.
TRAINING_CODE = ("task.py", "model.py", "sft.py", "reward_model.py")


def code_fingerprint(names=TRAINING_CODE) -> str:
    """Return a short digest of the source of the package modules ``names`` (file names)."""
    h = hashlib.sha256()
    for name in names:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def settings_hash(settings) -> str:
    """Return a short hex digest of ``settings`` (a dataclass or dict), the training code and
    the file format."""
    text = json.dumps({"format": FORMAT, "code": code_fingerprint(), **_plain(settings)},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save_model(model: TinyGPT, path: Path, settings, metrics: dict | None = None) -> None:
    """Write ``model`` with its settings and metrics to ``path``: to a temporary file, then rename.

    A crash mid-write leaves the old file (or none), never half a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "gpt_config": asdict(model.cfg),
        "scalar_head": model.scalar_head,
        "state_dict": model.state_dict(),
        "settings": json.loads(json.dumps(_plain(settings), default=str)),
        "settings_hash": settings_hash(settings),
        "metrics": metrics or {},
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a model file is ordinary output
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_model(path: Path, settings) -> tuple[TinyGPT | None, dict, str]:
    """Return (model, metrics, status); status is 'ok', 'missing', 'stale' or 'corrupt'.

    The model is None unless the status is 'ok'.
    """
    path = Path(path)
    if not path.exists():
        return None, {}, "missing"
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        if payload.get("format") != FORMAT or payload.get("settings_hash") != settings_hash(settings):
            return None, {}, "stale"
        model = TinyGPT(GPTConfig(**payload["gpt_config"]), scalar_head=payload["scalar_head"])
        model.load_state_dict(payload["state_dict"])
    except Exception:  # truncated, not a torch file, wrong keys or shapes: all unusable
        return None, {}, "corrupt"
    model.eval()
    return model, payload.get("metrics", {}), "ok"


_REASONS = {
    "missing": "no trained model on disk",
    "stale": "the model on disk was trained with other settings or other code",
    "corrupt": "the model on disk is unreadable",
}


def load_or_train(
    name: str,
    settings,
    train: Callable[[], tuple[TinyGPT, dict]],
    directory: Path | None = None,
    verbose: bool = True,
) -> tuple[TinyGPT, dict]:
    """Return (model, metrics) from ``directory / f"{name}.pt"``, training it first if needed.

    ``train()`` must return (model, metrics) for exactly ``settings``. When the file is
    missing, stale or corrupt, a one-line note says which, the model is trained, and the
    file is replaced. ``metrics`` gains ``train_seconds`` when training ran here.
    """
    path = Path(directory or MODELS_DIR()) / f"{name}.pt"
    model, metrics, status = load_model(path, settings)
    if status == "ok":
        notify(f"{name}: loaded {path.name} (settings {settings_hash(settings)})", verbose)
        return model, metrics
    notify(f"{name}: {_REASONS[status]} ({status}); training it now", verbose)
    start = time.perf_counter()
    model, metrics = train()
    metrics = {**metrics, "train_seconds": time.perf_counter() - start}
    save_model(model, path, settings, metrics)
    notify(f"{name}: trained in {metrics['train_seconds']:.1f} s, saved to {path.name}", verbose)
    return model, metrics
