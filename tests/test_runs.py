"""Stored chapter runs: reused only when this code made them, with these settings, from this start."""

import json
import os
import sys

import pytest

from minirlhf.course import runs


def test_load_or_run_reuses_only_what_this_code_made_with_these_settings(tmp_path, monkeypatch):
    calls = []

    def run():
        calls.append(1)
        return {"arms": {"rm": {"0": {"accuracy": [0.5, 0.6], "rm_score": [1.0, 1.1], "kl": [0.0, 0.1]}}}}

    path = tmp_path / "stored.json"
    first = runs.load_or_run(path, {"beta": 0.5}, {}, run, arms=())
    again = runs.load_or_run(path, {"beta": 0.5}, {}, run, arms=())
    assert first == again and len(calls) == 1 and first["arms"] == run()["arms"]
    calls.pop()
    runs.load_or_run(path, {"beta": 0.2}, {}, run, arms=())  # other settings: run again
    assert len(calls) == 2
    start = {("rm", "0"): {"accuracy": [0.4], "rm_score": [1.0], "kl": [0.0]}}  # other start
    runs.load_or_run(path, {"beta": 0.2}, start, run, arms=())
    assert len(calls) == 3
    same_start = {("rm", "0"): {"accuracy": [0.5], "rm_score": [1.0], "kl": [0.0]}}
    runs.load_or_run(path, {"beta": 0.2}, same_start, run, arms=())
    assert len(calls) == 3
    monkeypatch.setattr(runs, "code_fingerprint", lambda *modules, skip=(): "other code")
    runs.load_or_run(path, {"beta": 0.2}, {}, run, arms=())  # the engine's code changed: run again
    assert len(calls) == 4
    path.write_text("{not json")  # corrupt: run again
    runs.load_or_run(path, {"beta": 0.2}, {}, run, arms=())
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
        log = {"accuracy": [0.5], "rm_score": [1.0], "kl": [0.0]}
        arms = {arm: {str(s): log for s in done["seeds"]} for arm in ("rm", "verifier")}
        (folder / "results.json").write_text(json.dumps({"arms": arms, **done}))

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


# ----------------------------------------------------------------------------- what sits at the path


LOG = {"accuracy": [0.5, 0.6], "rm_score": [1.0, 1.1], "kl": [0.0, 0.1]}


def _counting():
    calls = []

    def run():
        calls.append(1)
        return {"arms": {"rm": {"0": dict(LOG)}}}

    return run, calls


def _stored_ok(path, run):
    return runs.load_or_run(path, {"beta": 0.5}, {}, run, arms=())


@pytest.mark.parametrize(
    "content, why",
    [
        ('{"settings": {"beta"', "not readable JSON"),  # C1: cut short
        ("[]", "a JSON list, not an object"),  # C2
        ("null", "a JSON NoneType, not an object"),
        ('{"arms": {}}', "it has no settings"),
    ],
)
def test_a_damaged_file_is_run_again_and_said_so(tmp_path, capsys, content, why):
    run, calls = _counting()
    path = tmp_path / "stored.json"
    path.write_text(content)
    assert _stored_ok(path, run)["arms"] == run()["arms"] and len(calls) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"stored runs: {path} cannot be used: ") and why in out[0]
    assert _stored_ok(path, run) and len(calls) == 2  # stored whole this time


def test_right_settings_with_a_wrong_layout_or_non_numbers_are_run_again(tmp_path, capsys):
    run, calls = _counting()
    path = tmp_path / "stored.json"
    first = _stored_ok(path, run)
    stored = json.loads(path.read_text())
    for arms, words in (
        ([], "its arms are not a table of runs"),  # C2
        ({"rm": {"0": {**LOG, "accuracy": "not numbers"}}}, "is not a list of numbers"),
    ):  # C7
        bad = {**stored, "arms": arms}
        bad.pop("digest")
        path.write_text(json.dumps(bad))
        assert _stored_ok(path, run) == first
        assert words in capsys.readouterr().out
    assert len(calls) == 3


def test_numbers_edited_after_the_run_make_the_file_stale(tmp_path, capsys):
    run, calls = _counting()
    path = tmp_path / "stored.json"
    first = _stored_ok(path, run)
    assert "digest" not in first and "digest" in json.loads(path.read_text())
    stored = json.loads(path.read_text())
    stored["arms"]["rm"]["0"]["accuracy"][-1] = 0.637  # C6: tampered, settings untouched
    path.write_text(json.dumps(stored))
    assert _stored_ok(path, run) == first and len(calls) == 2
    assert "do not match the fingerprint" in capsys.readouterr().out
    stored = json.loads(path.read_text())
    stored["arms"]["rm"]["0"]["accuracy"][-1] = 0.637
    stored.pop("digest")  # C6: tampered, and the fingerprint deleted with it
    path.write_text(json.dumps(stored))
    assert _stored_ok(path, run) == first and len(calls) == 3
    assert "it has no fingerprint of its numbers" in capsys.readouterr().out


def _frames() -> int:
    frame, count = sys._getframe(1), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1
    return count


def test_json_nested_deeper_than_any_stored_run_is_run_again_at_any_depth(tmp_path, capsys, monkeypatch):
    """N21: a file with a digest and a list nested 990 deep passed json.loads, then the digest's
    json.dumps raised RecursionError out of load_or_run. Now a bad store, at any depth. Which
    depths slip past json.loads depends on how deep the caller's stack is: every depth near
    the recursion limit, from here, is tried, and a few far from it."""
    monkeypatch.setattr(runs, "runs_code", lambda settings: "this code")  # fast: the key is not tested here
    run, calls = _counting()
    path = tmp_path / "stored.json"
    first = _stored_ok(path, run)
    good = json.loads(path.read_text())
    near = sys.getrecursionlimit() - _frames()
    for depth in [70, *range(near - 60, near + 10), 100_000]:
        deep = "[" * depth + "]" * depth
        path.write_text(json.dumps({"settings": good["settings"], "digest": "x"})[:-1] + f', "deep": {deep}}}')
        assert _stored_ok(path, run) == first, depth
        out = capsys.readouterr().out.strip().splitlines()
        assert len(out) == 1 and out[0].startswith(f"stored runs: {path} cannot be used: "), depth
        assert out[0].endswith("; running again")
    assert _stored_ok(path, run) == first and capsys.readouterr().out == ""  # stored whole again


def test_a_folder_or_pipe_at_the_path_is_never_read_and_the_run_is_not_lost(tmp_path, capsys):
    run, calls = _counting()
    folder = tmp_path / "results.json"
    folder.mkdir()  # C3
    assert _stored_ok(folder, lambda: print("the run") or run())["arms"] == run()["arms"]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"stored runs: {folder} cannot be used: it is a folder, not a stored file; running again"
    assert out[1].startswith(f"stored runs: {folder} is a folder, not a file that can be replaced")
    assert out[2] == "the run" and len(out) == 3  # said before the run, once
    assert folder.is_dir()
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)  # C5: would block forever if opened for reading
    assert _stored_ok(pipe, run)["arms"] == run()["arms"]
    assert "it is a named pipe (FIFO), not a stored file" in capsys.readouterr().out


def test_a_file_larger_than_the_cap_is_not_read(tmp_path, monkeypatch, capsys):
    run, calls = _counting()
    path = tmp_path / "huge.json"
    with open(path, "wb") as f:  # C4, a symlink to /dev/zero in the report: here a sparse file
        f.truncate(50_000_000)
    monkeypatch.setattr(runs, "MAX_STORED_BYTES", 1000)
    assert _stored_ok(path, run)["arms"] == run()["arms"]
    assert "larger than any stored run" in capsys.readouterr().out
    assert path.stat().st_size < 1000  # replaced by the run's own results


def test_chapter_5s_experiment_is_not_lost_when_results_json_is_a_folder(tmp_path, monkeypatch, capsys):
    from minirlhf import paths
    from minirlhf.ppo import PPOConfig

    done = {"arms": {arm: {"0": dict(LOG)} for arm in ("rm", "verifier")}, "seeds": [0]}
    monkeypatch.setattr(runs, "OUTPUTS", tmp_path)
    monkeypatch.setattr(runs.experiment, "run_experiment", lambda *a, **k: done)
    monkeypatch.setattr(runs.experiment, "summarize", lambda results: {"rows": 1})
    monkeypatch.setattr(
        runs.experiment, "write_outputs", lambda results, folder: paths.write_atomic(folder / "results.json", "{}")
    )
    (tmp_path / "results.json").mkdir()
    got = runs.stored_experiment([0], PPOConfig(iterations=1), {"rm": 0.5, "verifier": 0.08}, {})
    assert got["arms"] == done["arms"] and got["summary"] == {"rows": 1}  # C3: the run is returned, not lost
    assert "so the results of this run will not be kept" in capsys.readouterr().out


# ---- the key holds what the runs depend on, and nothing else


def _counting_run(calls):
    def run():
        calls.append(1)
        return {"arms": {"rm": {"0": {"accuracy": [0.5], "rm_score": [1.0], "kl": [0.0]}}}}

    return run


def test_a_new_arm_or_a_changed_label_reruns_nothing(tmp_path, monkeypatch):
    import dataclasses

    from minirlhf import arms

    calls, path = [], tmp_path / "stored.json"
    settings = {"ppo": {"advantages": "batch"}}
    runs.load_or_run(path, settings, {}, _counting_run(calls), arms=("rm",))
    extra = arms.Arm("an-arm-added-later", "verifier", 0.3, "new", "a test arm")
    relabelled = dataclasses.replace(arms.REGISTRY["rm"], label="the RM arm, renamed", help="other words")
    monkeypatch.setitem(arms.REGISTRY, "an-arm-added-later", extra)
    monkeypatch.setitem(arms.REGISTRY, "rm", relabelled)
    runs.load_or_run(path, settings, {}, _counting_run(calls), arms=("rm",))
    assert len(calls) == 1
    monkeypatch.setitem(arms.REGISTRY, "rm", dataclasses.replace(relabelled, beta=0.25))  # what the run depends on
    runs.load_or_run(path, settings, {}, _counting_run(calls), arms=("rm",))
    assert len(calls) == 2


def test_the_code_key_follows_the_estimators_used_and_leaves_out_presentation():
    from minirlhf.store import package_modules

    batch, group = runs.runs_code({"ppo": {"advantages": "batch"}}), runs.runs_code({"x": [{"advantages": "group"}]})
    assert batch != group and batch == runs.runs_code({"a": {"advantages": "batch"}, "b": 1})
    modules = set(package_modules(runs.experiment, skip=runs.NOT_THE_RUNS_CODE))
    assert {"minirlhf.ppo", "minirlhf.dpo", "minirlhf.model", "minirlhf.estimators"} <= modules
    assert not modules & {
        "minirlhf.paths",  # where and how files are written: no number of a run
        "minirlhf.arms",
        "minirlhf.plots",
        "minirlhf.palette",
        "minirlhf.stats",
        "minirlhf.estimators.group",
        "minirlhf.estimators.batch",
    }


def test_a_run_must_say_which_arms_it_uses(tmp_path):
    import pytest

    with pytest.raises(TypeError, match="arms"):
        runs.load_or_run(tmp_path / "a.json", {}, {}, _counting_run([]))
    with pytest.raises(ValueError, match="arms must name registered arms"):
        runs.load_or_run(tmp_path / "a.json", {}, {}, _counting_run([]), arms=("grpo",))
