"""Trained models on disk: atomic writes, and retraining when a file is missing, stale or corrupt."""

import torch

from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.sft import SFTConfig
from minirlhf.store import load_model, load_or_train, save_model, settings_hash

torch.set_num_threads(1)  # runs are bit-identical only at a fixed thread count


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


def test_load_or_train_retrains_only_when_needed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINIRLHF_PROGRESS", "1")  # show the notes, as in a terminal
    trained = []

    def train(seed):
        def run():
            trained.append(seed)
            return small_model(seed), {"seed": seed}
        return run

    m1, info = load_or_train("toy", {"seed": 1}, train(1), directory=tmp_path)
    assert trained == [1] and info["seed"] == 1 and "train_seconds" in info
    assert "missing" in capsys.readouterr().err
    m2, info = load_or_train("toy", {"seed": 1}, train(1), directory=tmp_path)
    assert trained == [1] and same_weights(m1, m2) and "loaded" in capsys.readouterr().err
    m3, _ = load_or_train("toy", {"seed": 2}, train(2), directory=tmp_path)  # other settings
    assert trained == [1, 2] and not same_weights(m1, m3) and "stale" in capsys.readouterr().err
    (tmp_path / "toy.pt").write_bytes(b"\x00" * 10)
    load_or_train("toy", {"seed": 2}, train(2), directory=tmp_path)
    assert trained == [1, 2, 2] and "corrupt" in capsys.readouterr().err


def test_notes_stay_quiet_when_a_machine_runs_the_notebook(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MINIRLHF_PROGRESS", "0")
    load_or_train("toy", {"seed": 1}, lambda: (small_model(), {}), directory=tmp_path)
    assert capsys.readouterr().err == ""


def test_other_settings_never_replace_the_books_model():
    from minirlhf.pipeline import _file_name
    from minirlhf.sft import SFTConfig

    assert _file_name("sft_policy", SFTConfig(), SFTConfig()) == "sft_policy"
    other = _file_name("sft_policy", SFTConfig(steps=10), SFTConfig())
    assert other.startswith("sft_policy-") and other != "sft_policy"
    assert other != _file_name("sft_policy", SFTConfig(steps=11), SFTConfig())
