"""The book prints the same digits on another CPU: the core runs under two kernel sets.

``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE`` makes torch on this machine round as a CPU
without AVX2 or AVX-512 would. In float64 every metric the chapters print from agrees to the
book's printed precision; in float32 it does not, which shows that the check can fail.
"""

import os
import subprocess
import sys

import pytest

from minirlhf import numerics
from minirlhf.commands import numerics as command
from minirlhf.model import GPTConfig, TinyGPT


def _capability(env: dict) -> str:
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True
    ).stdout.strip()


def _two_kernel_sets() -> bool:
    return _capability({}) != _capability(numerics.OTHER_KERNELS)


needs_two = pytest.mark.skipif(
    not _two_kernel_sets(),
    reason="this CPU has only torch's portable kernels: there is no second kernel set to compare with",
)


def test_the_engine_computes_in_float64_by_default():
    import torch

    assert {p.dtype for p in TinyGPT(GPTConfig()).parameters()} == {torch.float64}
    with pytest.raises(ValueError, match="dtype must be one of"):
        GPTConfig(dtype="float16")


def test_differences_compare_printed_digits():
    assert numerics.differences({"a": 0.12344, "b": 1.0}, {"a": 0.123441, "b": 1.0}) == []
    assert numerics.differences({"a": 0.12344}, {"a": 0.12346}) == [("a", 0.12344, 0.12346)]
    assert [d[0] for d in numerics.differences({"a": 1.0}, {"a": 1.0, "b": 2.0})] == ["b"]


def test_the_command_reports_the_metrics_that_differ_and_fails_on_them(monkeypatch, capsys):
    differ = [(f"m{i}", 0.5, float("nan")) for i in range(12)]
    found = {"n_metrics": 20, "differ": differ, "max_diff": 0.25, "max_diff_at": "m0", "seconds": 3.0}
    monkeypatch.setattr(numerics, "compare_kernel_sets", lambda dtype, iterations, arms: found)
    assert command.main(["--dtype", "float32", "--arms", "verifier"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("float32: 20 metrics, 12 differ at 4 decimals between the default kernels")
    assert lines[1] == "  m0: 0.5000 against nan" and lines[-1] == "  ... and 2 more" and len(lines) == 12
    monkeypatch.setattr(numerics, "compare_kernel_sets", lambda dtype, iterations, arms: {**found, "differ": []})
    assert command.main([]) == 0


@pytest.mark.parametrize("argv", [["--iterations", "0"], ["--arms", "ppo"], ["--dtype", "float16"]])
def test_the_command_refuses_a_wrong_option_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        command.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.endswith("(--help lists the options)\n")


@needs_two
def test_float64_prints_the_same_digits_under_another_kernel_set():
    result = numerics.compare_kernel_sets("float64")
    assert result["n_metrics"] > 1000
    assert not result["differ"], f"{len(result['differ'])} metrics differ, e.g. {result['differ'][:5]}"
    # Far below the printed precision: the differences are the last bits of float64.
    assert result["max_diff"] < 1e-9, (result["max_diff"], result["max_diff_at"])


@needs_two
def test_float32_does_not_so_the_check_can_fail():
    result = numerics.compare_kernel_sets("float32", arms=("verifier",))
    assert result["differ"], "float32 gave the same digits under both kernel sets"
