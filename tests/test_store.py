"""Trained models on disk: atomic writes, and retraining when a file is missing, stale or corrupt."""

import torch

from minirlhf import paths
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.reward_model import RMConfig
from minirlhf.sft import SFTConfig, greedy_accuracy
from minirlhf.store import code_fingerprint, load_model, load_or_train, load_rm, load_sft, save_model, settings_hash


def small_model(seed=0, scalar_head=False):
    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(n_layer=1, n_embd=16, n_head=2), scalar_head=scalar_head)


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_settings_hash_tracks_every_setting():
    assert settings_hash(SFTConfig()) == settings_hash(SFTConfig())
    assert settings_hash(SFTConfig()) != settings_hash(SFTConfig(steps=SFTConfig().steps + 1))
    assert settings_hash({"a": 1, "b": 2}) == settings_hash({"b": 2, "a": 1})


def test_round_trip_keeps_weights_shape_and_metrics(tmp_path):
    model = small_model(scalar_head=True)
    save_model(model, tmp_path / "m.pt", {"x": 1}, {"accuracy": 0.5})
    loaded, metrics, status = load_model(tmp_path / "m.pt", {"x": 1})
    assert status == "ok" and metrics == {"accuracy": 0.5}
    assert loaded.scalar_head and loaded.cfg.n_embd == 16 and same_weights(model, loaded)
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # no temporary file left behind


def test_missing_stale_corrupt(tmp_path):
    path = tmp_path / "m.pt"
    assert load_model(path, {"x": 1})[2] == "missing"
    save_model(small_model(), path, {"x": 1})
    assert load_model(path, {"x": 2})[2] == "stale"
    path.write_bytes(path.read_bytes()[:100])  # a write cut short
    assert load_model(path, {"x": 1})[2] == "corrupt"
    path.write_text("not a model")
    assert load_model(path, {"x": 1})[2] == "corrupt"


def test_load_or_train_retrains_only_when_needed(tmp_path, capsys):
    trained = []

    def train(seed):
        def run():
            trained.append(seed)
            return small_model(seed), {"seed": seed}

        return run

    m1, info = load_or_train("toy", {"seed": 1}, train(1), directory=tmp_path)
    assert trained == [1] and info["seed"] == 1 and "train_seconds" in info
    out = capsys.readouterr()
    assert "no trained model on disk (missing)" in out.out and out.err == ""  # status on stdout
    m2, info = load_or_train("toy", {"seed": 1}, train(1), directory=tmp_path)
    assert trained == [1] and same_weights(m1, m2) and "toy: loaded toy.pt" in capsys.readouterr().out
    m3, _ = load_or_train("toy", {"seed": 2}, train(2), directory=tmp_path)  # other settings
    assert trained == [1, 2] and not same_weights(m1, m3) and "(stale)" in capsys.readouterr().out
    (tmp_path / "toy.pt").write_bytes(b"\x00" * 10)
    load_or_train("toy", {"seed": 2}, train(2), directory=tmp_path)
    assert trained == [1, 2, 2] and "(corrupt)" in capsys.readouterr().out


def test_status_lines_stay_quiet_when_progress_is_off(tmp_path, capsys):
    load_or_train("toy", {"seed": 1}, lambda: (small_model(), {}), directory=tmp_path, progress=False)
    assert capsys.readouterr() == ("", "")


def test_the_book_loaders_train_once_then_load(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path)
    cfg = SFTConfig(steps=2, batch_size=8)
    policy, metrics = load_sft(cfg, progress=False)
    stored = list((tmp_path / "models").iterdir())
    assert [p.name for p in stored] == [f"sft_policy-{settings_hash(cfg)}.pt"]  # not the book's file
    assert metrics["accuracy"] == greedy_accuracy(policy) and metrics["train_seconds"] > 0
    written = stored[0].stat().st_mtime_ns
    again, metrics_again = load_sft(cfg, progress=False)
    assert same_weights(policy, again) and metrics_again == metrics  # loaded, not trained
    assert stored[0].stat().st_mtime_ns == written
    rm, report = load_rm(RMConfig(steps=2, batch_size=8), progress=False)
    assert rm.scalar_head and set(report) >= {"pair_accuracy", "near_miss_accuracy", "final_loss"}
    assert capsys.readouterr() == ("", "")


def test_the_fingerprint_follows_the_code_a_module_imports():
    from minirlhf import experiment, model, ppo, reward_model, sft, task
    from minirlhf.store import package_modules

    assert set(package_modules(sft, reward_model)) == {
        "minirlhf.sft",
        "minirlhf.reward_model",
        "minirlhf.model",
        "minirlhf.task",
        "minirlhf.progress",
    }
    assert {"minirlhf.ppo", "minirlhf.store", "minirlhf.palette"} <= set(package_modules(experiment))
    assert code_fingerprint(sft) != code_fingerprint(ppo) and code_fingerprint(model, task) == code_fingerprint(
        task, model
    )


def test_other_settings_never_replace_the_books_model():
    from minirlhf.sft import SFTConfig
    from minirlhf.store import _file_name

    assert _file_name("sft_policy", SFTConfig(), SFTConfig()) == "sft_policy"
    other = _file_name("sft_policy", SFTConfig(steps=10), SFTConfig())
    assert other.startswith("sft_policy-") and other != "sft_policy"
    assert other != _file_name("sft_policy", SFTConfig(steps=11), SFTConfig())


# ---- the model's path must hold a regular file; anything else is retrained, never opened


def test_a_folder_or_a_pipe_at_the_model_path_is_retrained(tmp_path, capsys):
    import os
    import stat
    import time

    (tmp_path / "dir.pt").mkdir()
    os.mkfifo(tmp_path / "pipe.pt")
    start = time.perf_counter()
    assert load_model(tmp_path / "pipe.pt", {"x": 1})[2] == "not a file"  # refused, not waited on
    assert load_model(tmp_path / "dir.pt", {"x": 1})[2] == "not a file"
    assert time.perf_counter() - start < 1
    model, _ = load_or_train("dir", {"x": 1}, lambda: (small_model(), {}), directory=tmp_path)
    out = capsys.readouterr().out
    assert "dir: the model's path holds a folder, not a model file (not a file); training it now" in out
    assert "but not saved" in out and "(a folder); it is used now and trained again next time" in out
    assert model is not None and (tmp_path / "dir.pt").is_dir()  # the folder is left alone
    model, _ = load_or_train("pipe", {"x": 1}, lambda: (small_model(), {}), directory=tmp_path)
    out = capsys.readouterr().out
    assert "holds a named pipe (FIFO)" in out and "(a named pipe (FIFO)); it is used now" in out
    assert model is not None and stat.S_ISFIFO(os.lstat(tmp_path / "pipe.pt").st_mode)  # never replaced


def test_a_models_folder_that_cannot_be_made_does_not_lose_the_trained_model(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    model, metrics = load_or_train(
        "m", {"x": 1}, lambda: (small_model(), {"a": 1}), directory=tmp_path / "file" / "models"
    )
    assert model is not None and metrics["a"] == 1
    assert "but not saved" in capsys.readouterr().out


def test_the_fingerprint_ignores_docstrings_and_comments_but_not_code():
    from minirlhf.store import code_digest

    code = 'def f(x):\n    """Add one."""\n    return x + 1  # one\n'
    assert code_digest(code) == code_digest('def f(x):\n    """Add one, said otherwise."""\n\n    return x + 1\n')
    assert code_digest(code) == code_digest("def f(x):\n    return (x\n            + 1)\n")
    assert code_digest(code) != code_digest('def f(x):\n    """Add one."""\n    return x + 2\n')
    assert code_digest(code) != code_digest('def f(y):\n    """Add one."""\n    return y + 1\n')
    assert code_digest('x = "a string, not a docstring"\n') != code_digest('x = "another"\n')
    # the docstring under a dataclass field (PPOConfig's glossary) is a docstring too
    field = 'class C:\n    a: int = 1\n    """What a does."""\n    b: int = 2\n'
    assert code_digest(field) == code_digest(field.replace("What a does.", "What a does, said otherwise."))
    assert code_digest(field) == code_digest("class C:\n    a: int = 1\n    b: int = 2\n")
    assert code_digest(field) != code_digest(field.replace("b: int = 2", "b: int = 3"))


def test_a_skipped_module_and_what_only_it_imports_leave_the_fingerprint():
    from minirlhf import experiment
    from minirlhf.store import package_modules

    everything = set(package_modules(experiment))
    without = set(package_modules(experiment, skip=("minirlhf.palette",)))
    assert "minirlhf.palette" in everything and "minirlhf.palette" not in without
    assert without == everything - {"minirlhf.palette"}  # nothing else is imported only by it
    assert code_fingerprint(experiment, skip=("minirlhf.palette",)) != code_fingerprint(experiment)
