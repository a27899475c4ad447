"""Runs in worker processes: the same results as one after another, in order, with a worker's
error raised here, functions defined in a notebook, and Ctrl-C that leaves no process behind."""

import json
import os
import signal
import sys
import time

import pytest
import torch

from minirlhf import dpo, experiment, parallel, task
from minirlhf.commands import experiment as command
from minirlhf.evaluation import EvalSet
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.ppo import PPOConfig
from minirlhf.reward_model import RMConfig

FEW = PPOConfig(iterations=3, batch_size=16)
FORK = pytest.mark.skipif(parallel.start_method() != "fork", reason="workers are forked only where that is safe")


# ----------------------------------------------------------------------------- the same results


def test_runs_are_bit_identical_for_one_and_two_workers(tiny):
    policy, rm, evalset = tiny
    jobs = [("rm", 0, None), ("verifier", 1, 0.2), ("grpo-verifier", 0, None), ("rloo-verifier", 2, None)]
    one = experiment.run_arms(jobs, policy, rm, FEW, evalset, progress=False, workers=1)
    two = experiment.run_arms(jobs, policy, rm, FEW, evalset, progress=False, workers=2)
    assert one == two  # every logged float, to the last bit
    assert [log["config"]["seed"] for log in two] == [0, 1, 0, 2] and two[1]["beta0"] == 0.2
    few_pairs = dpo.DPOConfig(steps=4, batch_size=16, eval_every=2, rm_config=RMConfig(steps=2, batch_size=32))
    dpo_jobs = [("dpo", 0, None), ("sft-chosen", 1, None)]
    assert experiment.run_arms(
        dpo_jobs, policy, rm, few_pairs, evalset, progress=False, workers=1
    ) == experiment.run_arms(dpo_jobs, policy, rm, few_pairs, evalset, progress=False, workers=2)


def test_the_experiment_is_the_same_for_any_number_of_workers(monkeypatch):
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    monkeypatch.setattr(experiment, "load_sft", lambda **kw: (policy, {"accuracy": 0.0}))
    monkeypatch.setattr(experiment, "load_rm", lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5}))
    monkeypatch.setattr(experiment, "EvalSet", lambda: EvalSet(task.eval_pairs()[:40]))
    made = {w: experiment.run_experiment([0, 1, 2], 2, progress=False, workers=w) for w in (1, 2, 3)}
    assert made[1]["arms"] == made[2]["arms"] == made[3]["arms"]
    assert list(made[2]["arms"]["rm"]) == ["0", "1", "2"] and made[2]["settings"] == made[1]["settings"]


# ----------------------------------------------------------------------------- order, errors


def _square_slowly(x):
    time.sleep(0.05 * (4 - x))  # the first items finish last
    return x * x


def test_results_come_in_the_order_of_the_items():
    finished = []
    out = parallel.map_runs(
        _square_slowly, range(5), workers=2, progress=False, on_result=lambda i, r: finished.append((i, r))
    )
    assert out == [0, 1, 4, 9, 16]
    assert sorted(finished) == [(i, i * i) for i in range(5)]  # each reported once, as it finished


def _fails_on_two(x):
    if x == 2:
        raise ValueError(f"no square for {x}")
    return x * x


def test_a_workers_error_is_raised_here_with_the_run_and_its_traceback():
    with pytest.raises(ValueError, match="no square for 2") as info:
        parallel.map_runs(_fails_on_two, range(4), workers=2, progress=False, label=lambda x: f"item {x}")
    cause = str(info.value.__cause__)
    assert "in the run item 2 (a worker process)" in cause and "_fails_on_two" in cause  # its traceback
    if sys.version_info >= (3, 11):
        assert "raised in the run item 2 (a worker process)" in info.value.__notes__[0]


def _dies(x):
    os._exit(3)


def test_a_worker_that_dies_is_named_not_waited_for():
    # both items end their worker: whichever is seen first is named
    with pytest.raises(RuntimeError, match=r"a worker process died \(exit code 3\) during the run [12]: was it"):
        parallel.map_runs(_dies, [1, 2], workers=2, progress=False)


def test_workers_must_be_a_whole_number_or_none():
    assert parallel.resolve_workers(None) == parallel.default_workers() >= 1
    assert parallel.resolve_workers(8, n_runs=3) == 3 and parallel.resolve_workers(2, n_runs=0) == 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers must be a whole number >= 1"):
            parallel.resolve_workers(bad)


def _workers_inside(x):
    return parallel.resolve_workers(None, 10)


def test_a_run_in_a_worker_starts_no_workers_of_its_own():
    assert parallel.map_runs(_workers_inside, [0, 1], workers=2, progress=False) == [1, 1]


# ----------------------------------------------------------------------------- functions from a notebook


NOTEBOOK_CELL = '''
def reward_of(x):
    """A learner's function, defined in a notebook cell: it lives in __main__."""
    return SCALE * x
'''


def _notebook_function():
    namespace = {"__name__": "__main__", "SCALE": 3}
    exec(NOTEBOOK_CELL, namespace)
    return namespace["reward_of"]


@FORK
def test_a_function_defined_in_a_notebook_runs_in_forked_workers():
    fn = _notebook_function()
    offset = 1
    assert parallel.map_runs(fn, [1, 2, 3], workers=2, progress=False) == [3, 6, 9]
    assert parallel.map_runs(lambda x: x + offset, [1, 2], workers=2, progress=False) == [2, 3]  # a closure


def test_where_workers_start_afresh_a_notebook_function_runs_here_and_says_so_once(monkeypatch, capsys):
    monkeypatch.setattr(parallel, "start_method", lambda: "spawn")
    monkeypatch.setattr(parallel, "_SAID", set())
    fn = _notebook_function()
    assert parallel.map_runs(fn, [1, 2, 3], workers=2, progress=True) == [3, 6, 9]
    assert parallel.map_runs(fn, [4], workers=2, progress=True) == [12]
    out = capsys.readouterr().out
    assert out.count("note: the runs are made one after another in this process") == 1
    assert "a function defined in a module (a .py file) can" in out
    assert parallel.map_runs(fn, [1], workers=2, progress=False) == [3]  # no note without progress


def test_where_workers_start_afresh_runs_are_bit_identical_too(tiny, monkeypatch):
    policy, rm, evalset = tiny
    jobs = [("rm", 0, None), ("grpo-verifier", 1, None), ("verifier", 2, 0.3)]
    one = experiment.run_arms(jobs, policy, rm, FEW, evalset, progress=False, workers=1)
    monkeypatch.setattr(parallel, "start_method", lambda: "spawn")  # as on macOS and Windows
    assert experiment.run_arms(jobs, policy, rm, FEW, evalset, progress=False, workers=2) == one


# ----------------------------------------------------------------------------- Ctrl-C


def _pid_then_wait(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    if path.endswith("0"):
        return "done"
    time.sleep(60)  # ended by the caller, long before this


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ctrl_c_ends_every_worker_at_once_and_keeps_what_finished(tmp_path):
    paths = [str(tmp_path / f"pid{i}") for i in range(4)]
    kept = {}

    def first_then_ctrl_c(i, result):
        kept[i] = result
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does to this process

    began = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        parallel.map_runs(_pid_then_wait, paths, workers=2, progress=False, on_result=first_then_ctrl_c)
    assert time.perf_counter() - began < 30 and kept == {0: "done"}
    pids = [int(open(p).read()) for p in paths if os.path.exists(p)]
    assert pids and all(_gone(pid) for pid in pids)  # ended and reaped: nothing left running


def _ctrl_c_to_myself(x):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in a terminal reaches the workers too
    return x


def test_workers_leave_ctrl_c_to_the_caller():
    assert parallel.map_runs(_ctrl_c_to_myself, [1, 2], workers=2, progress=False) == [1, 2]


@FORK  # the patched run_arm below reaches the workers only when they are forked
@pytest.mark.parametrize(
    "name, status, words",
    [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "stopped by SIGTERM"), ("SIGHUP", 129, "stopped by SIGHUP")],
)
def test_the_command_keeps_the_seeds_that_finished_when_runs_are_in_workers(
    tmp_path, monkeypatch, capsys, name, status, words
):
    torch.manual_seed(0)
    small = GPTConfig(n_layer=1, n_embd=16, n_head=2)
    policy, rm = TinyGPT(small).eval(), TinyGPT(small, scalar_head=True).eval()
    monkeypatch.setattr(experiment, "load_sft", lambda **kw: (policy, {"accuracy": 0.0}))
    monkeypatch.setattr(experiment, "load_rm", lambda **kw: (rm, {"pair_accuracy": 0.5, "near_miss_accuracy": 0.5}))
    monkeypatch.setattr(experiment, "EvalSet", lambda: EvalSet(task.eval_pairs()[:40]))
    real_arm, real_map = experiment.run_arm, parallel.map_runs

    def seed_0_only(arm, policy, rm, seed, *args, **kwargs):
        if seed > 0:
            time.sleep(60)  # never finishes: Ctrl-C comes first
        return real_arm(arm, policy, rm, seed, *args, **kwargs)

    def ctrl_c_after_seed_0(fn, items, workers=None, progress=True, desc="runs", label=str, on_result=None):
        seen = []

        def hook(i, result):
            on_result(i, result)
            seen.append(i)
            if len(seen) == 2:  # both runs of seed 0
                os.kill(os.getpid(), getattr(signal, name))

        return real_map(fn, items, workers, progress, desc, label, hook)

    monkeypatch.setattr(experiment, "run_arm", seed_0_only)  # the workers are forked with it
    monkeypatch.setattr(experiment.parallel, "map_runs", ctrl_c_after_seed_0)
    argv = ["--seeds", "3", "--iterations", "2", "--workers", "2", "--out", str(tmp_path)]
    assert command.main(argv) == status  # SIGTERM and SIGHUP as Ctrl-C: the finished seed kept (C11)
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"{words} during seed 2 of 3: wrote the 1 finished seed; seeds 1 to 2 are not kept"
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["settings"]["seeds"] == [0] and set(results["arms"]["verifier"]) == {"0"}


def test_the_command_takes_workers(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["--workers", "0"])
    assert exit_info.value.code == 2 and "argument --workers: must be a whole number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.main(["--help"])
    assert "--workers" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the two models


@FORK  # the small settings below reach the workers only when they are forked
def test_the_two_models_are_trained_side_by_side_with_the_same_weights(tmp_path, monkeypatch, capsys):
    import functools

    from minirlhf import reward_model, sft, store
    from minirlhf.course.runs import weights_digest

    monkeypatch.setattr(store, "SFTConfig", functools.partial(sft.SFTConfig, steps=2, batch_size=8))
    monkeypatch.setattr(store, "RMConfig", functools.partial(reward_model.RMConfig, steps=2, batch_size=8))
    made = {}
    for workers in (1, 2):
        monkeypatch.setattr(store.paths, "OUTPUTS", tmp_path / str(workers))
        made[workers] = store.load_all(progress=True, workers=workers)
    for key in ("policy", "rm"):
        assert weights_digest(made[1][key]) == weights_digest(made[2][key])
    assert made[1]["rm_metrics"]["pair_accuracy"] == made[2]["rm_metrics"]["pair_accuracy"]
    assert capsys.readouterr().out.count("training it now, beside the other") == 2  # only with two workers
    again = store.load_all(progress=True, workers=2)  # both on disk: read here, no worker
    assert weights_digest(again["policy"]) == weights_digest(made[2]["policy"])
    assert "loaded sft_policy.pt" in capsys.readouterr().out


# ----------------------------------------------------------------------------- progress


def _says_and_returns(x):
    from minirlhf.progress import progress_bar, status

    status(f"training {x} now")  # a run's own status line and bar: not shown from a worker
    bar = progress_bar(total=2, desc=f"run {x}")
    bar.update(2)
    bar.close()
    return x


def test_with_workers_this_process_shows_a_line_per_finished_run_and_they_show_nothing(capfd):
    assert parallel.map_runs(
        _says_and_returns, ["a", "b", "c"], workers=2, progress=True, desc="tests", label=lambda x: f"run {x}"
    ) == ["a", "b", "c"]
    out, err = capfd.readouterr()
    assert "training" not in out and "steps in" not in err  # the workers are silent
    lines = [line for line in err.splitlines() if line.startswith("tests (2 worker processes): ")]
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["1/3", "2/3", "3/3"]
    assert all(" s)" in line for line in lines)  # each names its run and its time
    parallel.map_runs(_says_and_returns, ["a"], workers=2, progress=True)  # one run: here, as it always was
    out, err = capfd.readouterr()
    assert "training a now" in out and "run a: 2/2 steps in" in err


# ----------------------------------------------------------------------------- a chapter's kernel


def test_a_chapters_kernel_computes_with_one_thread_as_the_workers_do():
    """Importing the course (every chapter's first cell does) sets one thread, whatever the
    environment asks for; the engine alone leaves torch's choice as it is."""
    import subprocess

    code = (
        "import torch, minirlhf, minirlhf.ppo; before = torch.get_num_threads(); "
        "import minirlhf.course.exercises; print(before, torch.get_num_threads())"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "1"]
