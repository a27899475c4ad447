"""Stored chapter runs: reused only when this code made them, with these settings, from this start."""

from minirlhf.course import runs


def test_load_or_run_reuses_only_what_this_code_made_with_these_settings(tmp_path, monkeypatch):
    calls = []

    def run():
        calls.append(1)
        return {"arms": {"rm": {"0": {"accuracy": [0.5, 0.6], "rm_score": [1.0, 1.1], "kl": [0.0, 0.1]}}}}

    path = tmp_path / "stored.json"
    first = runs.load_or_run(path, {"beta": 0.5}, {}, run)
    again = runs.load_or_run(path, {"beta": 0.5}, {}, run)
    assert first == again and len(calls) == 1 and first["arms"] == run()["arms"]
    calls.pop()
    runs.load_or_run(path, {"beta": 0.2}, {}, run)  # other settings: run again
    assert len(calls) == 2
    start = {("rm", "0"): {"accuracy": [0.4], "rm_score": [1.0], "kl": [0.0]}}  # other start
    runs.load_or_run(path, {"beta": 0.2}, start, run)
    assert len(calls) == 3
    same_start = {("rm", "0"): {"accuracy": [0.5], "rm_score": [1.0], "kl": [0.0]}}
    runs.load_or_run(path, {"beta": 0.2}, same_start, run)
    assert len(calls) == 3
    monkeypatch.setattr(runs, "code_fingerprint", lambda *modules: "other code")
    runs.load_or_run(path, {"beta": 0.2}, {}, run)  # the engine's code changed: run again
    assert len(calls) == 4
    path.write_text("{not json")  # corrupt: run again
    runs.load_or_run(path, {"beta": 0.2}, {}, run)
    assert len(calls) == 5
    assert [p.name for p in tmp_path.iterdir()] == ["stored.json"]  # written atomically


def test_same_curves_compares_to_the_last_digit():
    a = {"accuracy": [0.5, 0.6], "rm_score": [1.0, 1.1], "kl": [0.0, 0.1]}
    b = {**a, "kl": [0.0, 0.1 + 1e-12]}
    assert runs.same_curves(a, a) and not runs.same_curves(a, b) and runs.same_curves(a, b, upto=1)
