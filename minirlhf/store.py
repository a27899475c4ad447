"""Trained models on disk, and the two the book starts from: ``load_sft`` and ``load_rm``.

A model file holds the weights, the network's shape, the settings it was trained with, a
hash of those settings and of the code that trains, and a few measured numbers.
:func:`load_or_train` uses the file when its hash matches, and otherwise trains anew, saying
why: the file is *missing*, *stale* (other settings or other training code), *corrupt*
(unreadable) or *not a file* (a folder, a named pipe, ... stands at its path; only regular
files are opened, so a pipe cannot hang the load). Files are read with
``torch.load(weights_only=True)``, which unpickles tensors and plain containers only. When the
trained model cannot be saved, the run goes on with it and says why.

Defined in chapters 3 and 4, used by every chapter after them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import io
import json
import time
from dataclasses import asdict, is_dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from . import paths
from .model import GPTConfig, TinyGPT
from .progress import status
from .reward_model import RMConfig, rm_report, train_reward_model
from .sft import SFTConfig, greedy_accuracy, train_sft

__all__ = [
    "FORMAT",
    "models_dir",
    "package_modules",
    "code_digest",
    "code_fingerprint",
    "settings_hash",
    "save_model",
    "load_model",
    "load_or_train",
    "load_sft",
    "load_rm",
    "load_all",
]

FORMAT = 1  # bump when the file layout changes what a stored setting means


def models_dir() -> Path:
    """Return the folder of trained models, ``OUTPUTS / "models"`` (created on first save)."""
    return paths.OUTPUTS / "models"


def _plain(settings) -> dict:
    return asdict(settings) if is_dataclass(settings) else dict(settings)


def _package_imports(module: ModuleType) -> set[str]:
    """Return the names of the package modules that ``module`` imports (its relative imports)."""
    found = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), module.__package__)
            # `from .model import TinyGPT` names a module; `from . import task` names modules in it,
            # and `from . import Leash` a name of the package itself
            if node.module:
                found.add(base)
            for alias in [] if node.module else node.names:
                name = f"{base}.{alias.name}"
                found.add(name if importlib.util.find_spec(name) is not None else base)
    return found


def package_modules(*modules: ModuleType, skip=()) -> dict[str, ModuleType]:
    """Return ``{name: module}`` for ``modules`` and every package module they import,
    directly or not; a module named in ``skip`` (or inside a package named there) is left
    out, and so is what only it imports."""

    def skipped(name):
        return any(name == s or name.startswith(s + ".") for s in skip)

    seen: dict[str, ModuleType] = {}
    todo = list(modules)
    while todo:
        module = todo.pop()
        if module.__name__ not in seen and not skipped(module.__name__):
            seen[module.__name__] = module
            todo += [importlib.import_module(name) for name in _package_imports(module) if not skipped(name)]
    return seen


def _is_string_statement(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _without_docstrings(tree: ast.AST) -> ast.AST:
    # Every string that stands alone as a statement does nothing: a module's, class's or
    # function's docstring, and the docstring under a dataclass field. Drop them all.
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body:
                continue
            kept = [stmt for stmt in body if not _is_string_statement(stmt)]
            setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
    return tree


def code_digest(source: str) -> str:
    """Return a digest of what the Python ``source`` does: its syntax tree without docstrings,
    so that comments, docstrings, blank lines and line breaks do not change it."""
    tree = _without_docstrings(ast.parse(source))
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def code_fingerprint(*modules: ModuleType, skip=()) -> str:
    """Return a short digest of the code of ``modules`` and of every package module they
    import (:func:`package_modules`, ``skip`` as there): change what any of that code does
    and the fingerprint changes; edit a comment or a docstring and it does not
    (:func:`code_digest`)."""
    h = hashlib.sha256()
    for name, module in sorted(package_modules(*modules, skip=skip).items()):
        h.update(name.encode())
        h.update(code_digest(Path(module.__file__).read_text()).encode())
    return h.hexdigest()[:16]


def settings_hash(settings) -> str:
    """Return a short hex digest of ``settings`` (a dataclass or dict), the code that trains
    the models and the file format.
    """
    from . import reward_model, sft

    text = json.dumps(
        {"format": FORMAT, "code": code_fingerprint(sft, reward_model), **_plain(settings)}, sort_keys=True, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save_model(model: TinyGPT, path: Path, settings, metrics: dict | None = None) -> None:
    """Write ``model`` with its settings and metrics to ``path``, atomically."""
    payload = {
        "format": FORMAT,
        "gpt_config": asdict(model.cfg),
        "scalar_head": model.scalar_head,
        "state_dict": model.state_dict(),
        "settings": json.loads(json.dumps(_plain(settings), default=str)),
        "settings_hash": settings_hash(settings),
        "metrics": metrics or {},
    }
    buf = io.BytesIO()
    torch.save(payload, buf)
    paths.write_atomic(path, buf.getvalue())


def load_model(path: Path, settings) -> tuple[TinyGPT | None, dict, str]:
    """Return (model, metrics, status); status is 'ok', 'missing', 'stale', 'corrupt' or
    'not a file' (a folder, a named pipe, ... at the path).

    The model is None unless the status is 'ok'.
    """
    path = Path(path)
    try:
        file = paths.open_regular(path)
    except OSError:  # a folder, a pipe, a device, or no permission: not a model file
        return None, {}, "not a file"
    if file is None:
        return None, {}, "missing"
    try:
        with file:
            payload = torch.load(file, map_location="cpu", weights_only=True)
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
    "not a file": "the model's path holds {kind}, not a model file",
}


def load_or_train(
    name: str,
    settings,
    train: Callable[[], tuple[TinyGPT, dict]],
    directory: Path | None = None,
    progress: bool = True,
) -> tuple[TinyGPT, dict]:
    """Return (model, metrics) from ``directory / f"{name}.pt"``, training it first if needed.

    ``train()`` must return (model, metrics) for exactly ``settings``. When the file is
    missing, stale or corrupt, the model is trained and the file replaced; with ``progress``
    a status line says which. ``metrics`` gains ``train_seconds`` when training ran here.
    While another process trains the same file, this one waits and loads it
    (:func:`minirlhf.paths.making`).
    """
    path = Path(directory or models_dir()) / f"{name}.pt"
    model, metrics, found = load_model(path, settings)
    if found == "ok":
        status(f"{name}: loaded {path.name} (settings {settings_hash(settings)})", progress)
        return model, metrics
    # Another process may be training the same model (two chapters run side by side): wait
    # for it and load what it saved, rather than train it twice.
    with paths.making(path, on_wait=lambda: status(f"{name}: another process is training it; waiting", progress)):
        model, metrics, found = load_model(path, settings)
        if found == "ok":
            status(f"{name}: loaded {path.name} (settings {settings_hash(settings)})", progress)
            return model, metrics
        return _train_and_save(name, path, settings, train, found, progress)


def _train_and_save(name, path, settings, train, found, progress):
    # load_or_train's second half: train, save (or say why not), return (model, metrics).
    reason = _REASONS[found].format(kind=paths.kind_of(path))
    status(f"{name}: {reason} ({found}); training it now", progress)
    start = time.perf_counter()
    model, metrics = train()
    metrics = {**metrics, "train_seconds": time.perf_counter() - start}
    try:
        save_model(model, path, settings, metrics)
    except OSError as exc:  # the model is trained: use it, and say why it is not kept
        status(
            f"{name}: trained in {metrics['train_seconds']:.1f} s, but not saved: {path} "
            f"({paths.kind_of(path) if found == 'not a file' else exc.strerror or exc}); it is used now "
            "and trained again next time",
            progress,
        )
        return model, metrics
    status(f"{name}: trained in {metrics['train_seconds']:.1f} s, saved to {path.name}", progress)
    return model, metrics


# ----------------------------------------------------------------------------- the book's two models


def _file_name(name: str, cfg, default) -> str:
    """Return the file stem for ``cfg``: the book's model keeps ``name``; any other settings
    get their own file, so trying them never replaces the model the chapters use."""
    return name if cfg == default else f"{name}-{settings_hash(cfg)}"


def load_sft(config: SFTConfig | None = None, progress: bool = True) -> tuple[TinyGPT, dict]:
    """Return (policy, metrics): the partial-SFT policy of chapter 3 and ``{'accuracy', ...}``,
    its greedy accuracy on the 400 eval prompts. ``progress`` shows training and status lines.

    Defined in chapter 3.
    """
    cfg = config or SFTConfig()

    def train():
        model, log = train_sft(cfg, progress=progress)
        return model, {"accuracy": greedy_accuracy(model), "final_loss": log["loss"][-1]}

    return load_or_train(_file_name("sft_policy", cfg, SFTConfig()), cfg, train, progress=progress)


def load_rm(config: RMConfig | None = None, progress: bool = True) -> tuple[TinyGPT, dict]:
    """Return (rm, metrics): the reward model of chapter 4 and its held-out report
    (see :func:`minirlhf.reward_model.rm_report`).

    Defined in chapter 4.
    """
    cfg = config or RMConfig()

    def train():
        model, log = train_reward_model(cfg, progress=progress)
        return model, {**rm_report(model), "final_loss": log["loss"][-1]}

    return load_or_train(_file_name("reward_model", cfg, RMConfig()), cfg, train, progress=progress)


def _load_one(which: str, progress: bool) -> tuple[TinyGPT, dict]:
    return load_sft(progress=progress) if which == "sft" else load_rm(progress=progress)


def load_all(progress: bool = True, workers: int | None = None) -> dict:
    """Return ``{'policy', 'rm', 'sft_metrics', 'rm_metrics'}`` with the book's default settings.

    When neither model is on disk (or both are stale), the two are trained side by side by
    ``workers`` worker processes (None: one per core; 1: one after the other here), with the
    same weights either way (:func:`minirlhf.parallel.map_runs`).

    Defined in chapter 5.
    """
    from .parallel import map_runs, resolve_workers

    files = (("sft_policy", SFTConfig()), ("reward_model", RMConfig()))
    found = [load_model(models_dir() / f"{name}.pt", cfg)[2] for name, cfg in files]
    if "ok" not in found and resolve_workers(workers, 2) > 1:
        for (name, _), why in zip(files, found):
            reason = _REASONS[why].format(kind=paths.kind_of(models_dir() / f"{name}.pt"))
            status(f"{name}: {reason} ({why}); training it now, beside the other", progress)
    else:
        workers = 1  # at most one to train: nothing to do side by side
    (policy, sft_metrics), (rm, rm_metrics) = map_runs(
        partial(_load_one, progress=progress),
        ["sft", "rm"],
        workers,
        progress=progress,
        desc="the two models",
        label=lambda which: {"sft": "SFT policy", "rm": "reward model"}[which],
    )
    return {"policy": policy, "rm": rm, "sft_metrics": sft_metrics, "rm_metrics": rm_metrics}
