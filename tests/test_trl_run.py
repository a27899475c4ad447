"""The TRL bridge: the mapping of our settings to TRL's (no TRL needed), the stored
side-by-side results reproduced by a fresh run, and the two-process launch."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from minirlhf import trl as bridge
from minirlhf.arms import DEFAULT_BETA
from minirlhf.commands import trl_run as trl_command
from minirlhf.paths import ROOT
from minirlhf.ppo import PPOConfig

STORED = ROOT / "book" / "trl" / "trl_results.json"
NEEDS_TRL = os.environ.get("MINIRLHF_REQUIRE_TRL") == "1"


def _trl():
    if not NEEDS_TRL:
        pytest.importorskip("trl", reason='the TRL bridge needs pip install -e ".[trl]"')


# ----------------------------------------------------------------------------- the mapping


def test_grpo_settings_are_ours():
    s = bridge.trl_settings("grpo-verifier", seed=3)
    assert s["num_generations"] == 8 and s["per_device_train_batch_size"] == 64
    assert s["num_iterations"] == 2 and s["max_steps"] == 50  # 25 rollouts of 2 optimizer steps
    assert s["beta"] == DEFAULT_BETA["grpo-verifier"] and s["epsilon"] == 0.2 and s["temperature"] == 0.7
    assert s["learning_rate"] == 2e-4 and s["lr_scheduler_type"] == "linear" and s["weight_decay"] == 0.0
    assert s["max_grad_norm"] == 0.5 and s["scale_rewards"] == "group" and s["loss_type"] == "dapo"
    assert s["max_completion_length"] == 4 and s["seed"] == 3 and s["report_to"] == "none"
    # the policy and its reference load in the folder's dtype (float64), not TRL's float32
    assert s["model_init_kwargs"] == {"dtype": "auto"} and s["bf16"] is False and s["fp16"] is False
    assert bridge.trl_settings("grpo-rm")["beta"] == DEFAULT_BETA["grpo-rm"]


def test_grpo_leash_is_ours_not_trls_default():
    # TRL 1.12.0 multiplies GRPO's k3 by the ratio new/old unless told not to
    # (use_bias_correction_kl, default True): our k3 loss has no such factor.
    for arm in ("grpo-verifier", "grpo-rm"):
        assert bridge.trl_settings(arm)["use_bias_correction_kl"] is False
    assert "use_bias_correction_kl" not in bridge.trl_settings("rloo-verifier")  # k1 in the reward
    if not NEEDS_TRL:
        pytest.importorskip("trl")
    import trl

    assert trl.GRPOConfig.__dataclass_fields__["use_bias_correction_kl"].default is True
    assert not hasattr(trl.RLOOConfig, "use_bias_correction_kl")


def test_the_leash_gradients_the_page_names():
    # On a 5-token vocabulary, exactly (the expectation is a sum over the tokens): k3
    # differentiated as a loss follows the gradient of the forward KL, KL(ref || pi); k3 times
    # the ratio new/old (TRL 1.12.0's default) follows that of the reverse KL, KL(pi || ref).
    import torch

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(5, generator=g, dtype=torch.float64).log_softmax(0)
    theta = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)

    def expected_grad(term):
        new = theta.log_softmax(0)
        old = new.detach()  # on-policy: the sampling policy is the current one
        k3 = torch.exp(ref - new) - (ref - new) - 1
        loss = (old.exp() * term(k3, new, old)).sum()  # E over tokens drawn from old
        return torch.autograd.grad(loss, theta)[0]

    def kl_grad(forward):
        new = theta.log_softmax(0)
        kl = (ref.exp() * (ref - new)).sum() if forward else (new.exp() * (new - ref)).sum()
        return torch.autograd.grad(kl, theta)[0]

    plain = expected_grad(lambda k3, new, old: k3)
    corrected = expected_grad(lambda k3, new, old: k3 * torch.exp(new - old))
    assert torch.allclose(plain, kl_grad(forward=True), atol=1e-12)
    assert torch.allclose(corrected, kl_grad(forward=False), atol=1e-12)
    assert not torch.allclose(plain, corrected, atol=1e-3)


def test_rloo_settings():
    s = bridge.trl_settings("rloo-verifier")
    assert s["num_generations"] == 8 and s["normalize_advantages"] is False
    assert "scale_rewards" not in s and "loss_type" not in s


def test_ppo_settings_and_kl_coef():
    with pytest.raises(ValueError, match="score_std"):
        bridge.trl_settings("rm")
    s = bridge.trl_settings("rm", score_std=2.0)
    assert s["kl_coef"] == pytest.approx(1.0)  # our beta 0.5 times the raw scores' spread
    assert s["total_episodes"] == 64 * 25 and s["num_ppo_epochs"] == 2 and s["num_mini_batches"] == 1
    assert s["stop_token_id"] == 12 and s["response_length"] == 4 and s["cliprange"] == 0.2
    assert s["kl_estimator"] == "k1" and s["missing_eos_penalty"] is None
    assert bridge.kl_coef_for(0.5, 3.0) == pytest.approx(1.5)


def test_the_page_table_is_the_mapping():
    # Every field trl_settings gives TRL's PPO carries one of ours (PPO_NAMES) or is housekeeping,
    # and every field the table names is set: the page's table cannot drift from the code.
    named = {f for _, fields, _ in bridge.PPO_NAMES for f in fields}
    keys = set(bridge.trl_settings("rm", score_std=1.0))
    assert keys - set(bridge.HOUSEKEEPING) == named
    assert set(bridge.HOUSEKEEPING) <= keys
    html = bridge.ppo_names_html()
    assert html.count("<tr>") == len(bridge.PPO_NAMES) + 1
    assert "<code>kl_coef</code>" in html and "<code>updates_per_batch</code>" in html


def test_processes_share_the_batch():
    assert bridge.trl_settings("grpo-verifier", n_processes=2)["per_device_train_batch_size"] == 32
    assert bridge.trl_settings("rm", n_processes=2, score_std=1.0)["local_rollout_forward_batch_size"] == 32
    with pytest.raises(ValueError, match="whole groups"):
        bridge.trl_settings("grpo-verifier", n_processes=16)  # 4 completions a process: half a group
    with pytest.raises(ValueError, match="arm must be one of"):
        bridge.trl_settings("verifier")


def test_settings_follow_our_config():
    s = bridge.trl_settings("grpo-verifier", config=PPOConfig(iterations=3, anneal_lr=False), beta=0.3)
    assert s["max_steps"] == 6 and s["lr_scheduler_type"] == "constant" and s["beta"] == 0.3


def test_every_trl_arm_names_a_trainer_of_the_table():
    # TRL's trainers are data: what differs by trainer is read from TRL_TRAINERS, never from its name
    for spec in bridge.TRL_ARMS.values():
        assert spec.trainer in bridge.TRL_TRAINERS and spec.trainer in bridge.PROFILE_STAGES
    assert [t.needs_score_std for t in bridge.TRL_TRAINERS.values()].count(True) == 1  # TRL's PPO alone


# ----------------------------------------------------------------------------- stored results


@pytest.fixture(scope="module")
def stored():
    return json.loads(STORED.read_text())


def test_stored_results_cover_every_arm(stored):
    assert stored["settings"]["arms"] == list(bridge.TRL_ARMS)
    assert len(stored["settings"]["seeds"]) >= 3
    assert stored["versions"]["trl"] == bridge.TRL_VERSION
    for arm in bridge.TRL_ARMS:
        for side in ("ours", "trl"):
            assert set(stored[side][arm]) == {str(s) for s in stored["settings"]["seeds"]}
            for log in stored[side][arm].values():
                assert len(log["accuracy"]) == stored["settings"]["iterations"] + 1


def test_stored_settings_are_todays_mapping(stored):
    # A change of the mapping that was not rerun fails here.
    for arm in ("grpo-verifier", "grpo-rm", "rloo-verifier"):
        for seed, log in stored["trl"][arm].items():
            assert log["settings"] == bridge.trl_settings(arm, int(seed))
    for seed, log in stored["trl"]["rm"].items():
        kl_coef = log["settings"]["kl_coef"]
        assert log["settings"] == bridge.trl_settings("rm", int(seed), score_std=kl_coef / 0.5)


def test_side_by_side_table(stored):
    s = bridge.side_by_side(stored)
    table = bridge.format_side_by_side(stored)
    for arm in bridge.TRL_ARMS:
        assert s[arm]["ours"]["n_seeds"] == s[arm]["trl"]["n_seeds"] >= 3
        assert s[arm]["time_ratio"] > 0
        assert arm in table
    assert "TRL PPO" in table and "TRL GRPO" in table and "TRL RLOO" in table


def test_the_page_code_and_tables_fit_the_column(stored):
    # The toy-to-real page is executed only when the book is built; its code and the tables it
    # prints keep to the book's 77 columns (tests/test_page_fit.py checks the chapters).
    page = (ROOT / "book" / "toy-to-real.md").read_text(encoding="utf-8")
    cells = [block.split("```", 1)[0] for block in page.split("```{code-cell} ipython3")[1:]]
    printed = bridge.format_side_by_side(stored) + "\n" + bridge.format_profile(stored)
    long = [line for text in (*cells, printed) for line in text.splitlines() if len(line.rstrip()) > 77]
    assert cells and not long, long


def test_our_rows_are_chapter_8s(stored):
    # The page's "ours" rows are the runs of chapters 5 and 8 made again, seed for seed: each
    # arm's gain and KL at the end, as chapter 8's tables print them (over the same 5 seeds).
    nb = json.loads((ROOT / "solutions" / "08_grpo.ipynb").read_text(encoding="utf-8"))
    printed = "".join(
        "".join(out.get("text", ""))
        for cell in nb["cells"]
        if cell["cell_type"] == "code"
        for out in cell.get("outputs", [])
    )
    lines = {line.split()[0]: line for line in printed.splitlines() if line.strip() and "±" in line}
    assert stored["settings"]["seeds"] == [0, 1, 2, 3, 4]
    for arm, row in bridge.side_by_side(stored).items():
        gain, kl = row["ours"]["gain"], row["ours"]["kl_end"]
        assert f"{gain[0]:+.3f} ± {gain[1]:.3f}" in lines[arm], arm
        assert f"{kl[0]:.3f} ± {kl[1]:.3f}" in lines[arm], arm


@pytest.fixture(scope="module")
def starts():
    from minirlhf.store import load_rm, load_sft

    return load_sft(progress=False)[0], load_rm(progress=False)[0]


# How close a fresh run must come to the stored one, on any CPU. Accuracies and the answers of
# each kind are counts out of 400: equal. TRL runs our models in float64, and a float64 run on
# another CPU's kernels lands within about 1e-15 of it (measured between AVX-512, AVX2 and
# torch's portable kernels): 1e-9 here, to spare CPUs not measured. TRL's PPO is the exception:
# its rollout log-probs are float32, because transformers' generate casts the sampler's logits
# to float32 (transformers/generation/utils.py, 5.23.0, line 3247) and the trainer takes its
# log-probs from them (trl/experimental/ppo/ppo_trainer.py, 1.12.0, lines 110 and 703). Moving
# every one of them one unit in the last place, up or down at random, moved the measured KL by
# 1e-8 and TRL's logged KL by 2e-7, so that arm is compared within 1e-5: a hundredth of the
# third decimal, the last the book prints of a KL. (GRPO draws its tokens from float32
# probabilities too, but recomputes their log-probs in float64.)
TOLERANCE = {"grpo": {"rel": 1e-9, "abs": 1e-10}, "ppo": {"rel": 1e-5, "abs": 1e-5}}


@pytest.mark.parametrize("arm", ["grpo-verifier", "rm"])
def test_a_fresh_run_reproduces_the_stored_one(stored, starts, arm):
    _trl()
    policy, rm = starts
    log = bridge.run_trl_arm(arm, policy, rm, 0, progress=False)
    want = stored["trl"][arm]["0"]
    tol = TOLERANCE[bridge.TRL_ARMS[arm].trainer]
    assert log["dtype"] == want["dtype"] == "float64"
    # kl_coef is the spread of a float64 batch of scores: the same within 1e-9, perhaps not to the bit
    settings, want_settings = dict(log["settings"]), dict(want["settings"])
    if "kl_coef" in settings:
        assert settings.pop("kl_coef") == pytest.approx(want_settings.pop("kl_coef"), rel=1e-9)
    assert settings == want_settings
    assert log["accuracy"] == want["accuracy"]
    assert log["kinds"] == want["kinds"]
    assert log["kl"] == pytest.approx(want["kl"], **tol)
    assert log["rm_score"] == pytest.approx(want["rm_score"], **tol)
    assert log["trl_log"].keys() == want["trl_log"].keys()
    for key, values in log["trl_log"].items():
        assert values == pytest.approx(want["trl_log"][key], **tol), key


def test_trls_run_is_measured_where_ours_would_be(starts):
    """With eval_every, TRL's run is evaluated at the iterations ppo_train evaluates (the
    benchmark times both sides so). Unlike ours, TRL's run is not the same on another
    schedule: converting its policy back for an evaluation makes a TinyGPT, whose
    initialization draws from torch's global generator, which TRL samples with."""
    _trl()
    policy, rm = starts
    cfg = PPOConfig(iterations=3, batch_size=16)
    every, sparse = (
        bridge.run_trl_arm("grpo-verifier", policy, rm, 0, replace(cfg, eval_every=k), progress=False) for k in (1, 2)
    )
    assert every["eval_iterations"] == [0, 1, 2, 3] and sparse["eval_iterations"] == [0, 2, 3]
    assert len(sparse["accuracy"]) == len(sparse["kl"]) == 3 and sparse["accuracy"][0] == every["accuracy"][0]


def test_missing_trl_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl now raises ImportError
    assert trl_command.main(["--arm", "grpo-verifier"]) == 1
    assert 'pip install -e ".[trl]"' in capsys.readouterr().err


def test_bad_command_line_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        trl_command.main(["--arm", "dpo"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "--help" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- two processes


def test_two_process_launch(tmp_path):
    _trl()
    out = tmp_path / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        "--config_file",
        str(ROOT / "configs" / "cpu_two_processes.yaml"),
        "-m",
        "minirlhf.commands.trl_run",
        "--arm",
        "grpo-verifier",
        "--arm",
        "rm",
        "--iterations",
        "3",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "processes: 2" in done.stdout
    results = json.loads((out / "trl_results.json").read_text())
    for arm in ("grpo-verifier", "rm"):
        log = results["trl"][arm]["0"]
        assert log["n_processes"] == 2 and len(log["accuracy"]) == 4 and log["dtype"] == "float64"
        assert log["settings"]["per_device_train_batch_size"] == 32
        assert all(0.0 <= a <= 1.0 for a in log["accuracy"])
    # every process trains the whole group of each of its prompts; the logged batch is global
    assert len(results["trl"]["grpo-verifier"]["0"]["trl_log"]["reward"]) == 3


# ----------------------------------------------------------------------------- the command line keeps what finished


def _one_line_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        trl_command.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_the_output_folder_and_the_counts_are_checked_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bridge, "import_trl", lambda: pytest.fail("TRL was imported: the runs would start"))
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "out" / "trl_results.json").mkdir(parents=True)
    for out, words in (
        (tmp_path / "file", "is a regular file, not a folder"),  # D3: not after the runs
        (tmp_path / "pipe", "is a named pipe (FIFO), not a folder"),
        (tmp_path / "out", "trl_results.json is a folder, where the output file should go"),
        ("", "is empty"),
    ):
        assert words in _one_line_error(["--out", str(out)], capsys)
    assert f"must be at most {trl_command.MAX_SEEDS}, got 1000000000" in _one_line_error(  # D5
        ["--seeds", "1000000000"], capsys
    )
    assert f"must be at most {trl_command.MAX_ITERATIONS}, got 100000" in _one_line_error(
        ["--iterations", "100000"], capsys
    )


STOPPED_TRL_RUN = """
import os, signal, sys
from minirlhf import store
from minirlhf import trl as bridge
from minirlhf.commands import trl_run as trl_command
from minirlhf.trl import compare

bridge.import_trl = lambda: None
compare._versions = lambda: {}
store.load_sft = lambda progress: ("policy", {})
store.load_rm = lambda progress: ("rm", {})

def fake_run(arm, policy, rm, seed, config, evalset=None, progress=True, **kwargs):
    if seed == 1:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        signal.pause()
    return {"accuracy": [0.1, 0.2], "kl": [0.0, 0.1], "rm_score": [1.0, 1.1], "seconds": 1.0}

compare.run_trl_arm = fake_run
compare.EvalSet = lambda: None
sys.exit(trl_command.main(["--seeds", "3", "--iterations", "1", "--out", sys.argv[2]]))
"""


@pytest.mark.parametrize("name, status", [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_stop_signal_writes_the_finished_seeds(tmp_path, name, status):
    out = tmp_path / "trl"
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_TRL_RUN, name, str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == status, done.stderr  # D4: no traceback, the finished seed kept
    assert "Traceback" not in done.stderr
    stopped = "interrupted" if name == "SIGINT" else f"stopped by {name}"
    assert done.stderr.strip().splitlines()[-1] == (f"{stopped}: wrote the 1 finished seed; seeds 1 to 2 are not kept")
    results = json.loads((out / "trl_results.json").read_text())
    assert results["settings"]["seeds"] == [0] and list(results["trl"]["grpo-verifier"]) == ["0"]
    assert sorted(p.name for p in out.iterdir()) == sorted(trl_command.OUTPUT_FILES)  # no lock or .tmp left


# N9: the signal lands while a finaliser runs (datasets' Dataset.__del__, in TRL's runs), where
# Python prints the handler's exception ("Exception ignored in ...") and drops it. The stand-in
# run of seed 1 raises the signal inside a __del__ and returns as if nothing happened.
DROPPED_STOP_RUN = STOPPED_TRL_RUN.replace(
    """    if seed == 1:
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))
        signal.pause()
""",
    """    print(f"seed {seed} ran", file=sys.stderr, flush=True)
    if seed == 1:
        class Finaliser:
            def __del__(self):
                signal.raise_signal(getattr(signal, sys.argv[1]))
        Finaliser()
        print("seed 1 went on", file=sys.stderr, flush=True)
""",
)


@pytest.mark.parametrize("name, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_dropped_in_a_finaliser_still_stops_the_runs(tmp_path, name, status):
    assert DROPPED_STOP_RUN != STOPPED_TRL_RUN
    out = tmp_path / "trl"
    done = subprocess.run(
        [sys.executable, "-c", DROPPED_STOP_RUN, name, str(out)], capture_output=True, text=True, timeout=300
    )
    assert "seed 1 went on" in done.stderr  # the handler's exception was dropped, as in TRL's runs
    assert done.returncode == status, done.stderr  # not 0 after running every seed
    assert "seed 2 ran" not in done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr  # the stop is acted on
    stopped = "interrupted" if name == "SIGINT" else f"stopped by {name}"
    assert done.stderr.strip().splitlines()[-1] == (f"{stopped}: wrote the 1 finished seed; seeds 1 to 2 are not kept")
    results = json.loads((out / "trl_results.json").read_text())
    assert results["settings"]["seeds"] == [0] and list(results["trl"]["grpo-verifier"]) == ["0"]


WHOLE_RUN = STOPPED_TRL_RUN.replace("if seed == 1:", "if seed == 99:")


def test_a_stop_after_the_last_run_keeps_every_seed_and_still_says_stopped(tmp_path, monkeypatch, capsys):
    import argparse
    import signal

    from minirlhf import cli

    out = tmp_path / "trl"
    done = subprocess.run([sys.executable, "-c", WHOLE_RUN, "SIGTERM", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "trl_results.json").read_text())
    again = tmp_path / "again"
    again.mkdir()
    monkeypatch.setattr(cli, "_stopped_by", [signal.SIGTERM])  # it came once the last seed was counted
    status = trl_command._write(argparse.Namespace(seeds=3, profile=False), results, again)
    assert status == 143  # not 0: a supervisor learns of the stop
    assert (
        capsys.readouterr().err.strip().splitlines()[-1] == "stopped by SIGTERM after the last run: wrote all 3 seeds"
    )
    assert json.loads((again / "trl_results.json").read_text())["settings"]["seeds"] == [0, 1, 2]


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_dropped_in_a_finaliser_stops_trls_run_at_the_next_step(monkeypatch, name):
    # The callback run_trl_arm gives TRL's trainer checks for a stop at every step, so that a
    # run stops within a step of the signal wherever it landed; outside a command nothing is checked.
    import signal
    from types import SimpleNamespace

    from minirlhf import cli
    from minirlhf.trl.run import _callback

    pytest.importorskip("transformers")
    printed, finalised = [], []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)  # what Python would print: nothing

    class Finaliser:
        def __del__(self):
            finalised.append(True)
            signal.raise_signal(getattr(signal, name))

    measured = []
    evaluator = SimpleNamespace(every=1, measure_at=lambda iteration, policy: measured.append(iteration))
    bar = SimpleNamespace(update=lambda n: None, set_postfix_str=lambda text: None)
    step = _callback(evaluator, lambda: None, bar).on_step_end
    expected = KeyboardInterrupt if name == "SIGINT" else cli.Stopped
    with cli.stops_as_interrupt():
        step(None, SimpleNamespace(global_step=1), None)
        Finaliser()  # freed at once: the handler raises inside __del__, and Python drops it
        assert finalised and not printed
        with pytest.raises(expected):
            step(None, SimpleNamespace(global_step=2), None)
        with pytest.raises(expected):  # and at every later check
            cli.raise_if_stopped()
    assert measured == [1]
    cli.raise_if_stopped()  # the command's block has ended: no stop is raised again


def test_a_dropped_stop_is_printed_until_the_work_checks_for_stops(monkeypatch):
    # A command whose work never calls raise_if_stopped (nothing would act on a dropped Ctrl-C)
    # still shows Python's "Exception ignored in ..."; once the work checks, the stop is acted on.
    import signal

    from minirlhf import cli

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", printed.append)

    class Finaliser:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    with cli.stops_as_interrupt():
        Finaliser()
        assert [u.exc_type for u in printed] == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            cli.raise_if_stopped()
        Finaliser()
        assert len(printed) == 1
    assert sys.unraisablehook == printed.append  # the hook before the block is back


def test_the_pages_verdicts_are_the_stored_runs(stored):
    # The toy-to-real page's prose reads the verdicts of the stored runs: which gains rise,
    # fall or hold 0, and that every gain difference, ours minus TRL's, holds 0. A rerun of
    # `make trl` that changes one fails here until the prose is read again.
    from minirlhf.stats import mean_ci95

    def verdict(mean, half):
        return "rises" if mean - half > 0 else "falls" if mean + half < 0 else "0 inside"

    s = bridge.side_by_side(stored)
    said = {"grpo-verifier": ("rises", "rises"), "grpo-rm": ("0 inside", "0 inside"),
            "rloo-verifier": ("rises", "0 inside"), "rm": ("falls", "falls")}  # fmt: skip
    assert {arm: (verdict(*s[arm]["ours"]["gain"]), verdict(*s[arm]["trl"]["gain"])) for arm in s} == said
    page = (ROOT / "book" / "toy-to-real.md").read_text(encoding="utf-8")
    assert "both PPO arms lower it, and both GRPO arms\nhave 0 inside" in page
    for arm in s:
        ours, trl = stored["ours"][arm], stored["trl"][arm]
        m, h = mean_ci95(
            [
                (ours[k]["accuracy"][-1] - ours[k]["accuracy"][0]) - (trl[k]["accuracy"][-1] - trl[k]["accuracy"][0])
                for k in ours
            ]
        )
        assert abs(m) <= h, arm
    assert "For all four arms 0 is inside the interval" in page
