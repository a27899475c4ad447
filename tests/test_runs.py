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


def test_stored_experiment_runs_once_then_reads_the_file(tmp_path, monkeypatch):
    import json

    from minirlhf.ppo import PPOConfig

    made = []

    def fake_run(seeds, iterations, beta_rm, beta_verifier, cfg, progress=False, workers=None):
        made.append((tuple(seeds), iterations, beta_rm, beta_verifier))
        return {"seeds": list(seeds)}

    def fake_write(done, folder):
        (folder / "results.json").write_text(json.dumps({"arms": {"rm": {}}, **done}))

    monkeypatch.setattr(runs, "OUTPUTS", tmp_path)
    monkeypatch.setattr(runs.experiment, "run_experiment", fake_run)
    monkeypatch.setattr(runs.experiment, "write_outputs", fake_write)
    cfg, beta = PPOConfig(iterations=3), {"rm": 0.5, "verifier": 0.08}
    first = runs.stored_experiment([0, 1], cfg, beta, {})
    again = runs.stored_experiment([0, 1], cfg, beta, {})
    assert made == [((0, 1), 3, 0.5, 0.08)] and first == again
    assert first["settings"]["seeds"] == [0, 1] and first["settings"]["ppo"]["iterations"] == 3
    runs.stored_experiment([0, 1, 2], cfg, beta, {})  # other seeds: run again
    assert len(made) == 2
