"""Every test runs at one torch thread: runs are bit-identical only at a fixed thread count.
The copies a command keeps of a learner's notebook go to a temporary folder, not the repository's.
Ctrl-C raises KeyboardInterrupt in every test process, as in a terminal, even when the test run
was started in the background by a shell without job control (which starts it with SIGINT
ignored, and Python then keeps it ignored): the tests of what a stop keeps send it."""

import atexit
import os
import shutil
import signal
import tempfile

os.environ["MINIRLHF_KEPT"] = tempfile.mkdtemp(prefix="minirlhf-kept-")  # before minirlhf.paths is imported
atexit.register(shutil.rmtree, os.environ["MINIRLHF_KEPT"], True)

import pytest  # noqa: E402
import torch  # noqa: E402

from minirlhf import task  # noqa: E402
from minirlhf.evaluation import EvalSet  # noqa: E402
from minirlhf.model import GPTConfig, TinyGPT  # noqa: E402

torch.set_num_threads(1)
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tilted_policy():
    """Return a maker of a small random policy (seed 0), its head sharpened twofold and its bias
    toward `;` raised by ``semi_bias``, so that answers end early and an enumeration stays small:
    ``make(semi_bias) -> (cfg, policy)``. Models made after it follow the same seeded stream."""

    def make(semi_bias: float):
        cfg = GPTConfig(n_layer=1, n_embd=16, n_head=2)
        torch.manual_seed(0)
        policy = TinyGPT(cfg).eval()
        with torch.no_grad():
            policy.head.weight.mul_(2.0)
            policy.head.bias[task.SEMI] += semi_bias
        return cfg, policy

    return make


@pytest.fixture(scope="module")
def tiny():
    """An untrained policy and reward model (seed 0) and 32 eval prompts: small PPO and GRPO
    runs in seconds."""
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).eval()
    rm = TinyGPT(GPTConfig(), scalar_head=True).eval()
    return policy, rm, EvalSet(task.eval_pairs()[:32])


@pytest.fixture(autouse=True)
def chapter_10_runs(monkeypatch):
    """Chapter 10's answer keys are measured on its stored runs; every test reads them from
    made-up runs (tests/tell_runs.py) instead, whatever is stored. A test of the stored runs
    themselves sets ``ch10.stored_runs`` back to ``REAL_STORED_RUNS``."""
    from tell_runs import runs

    from minirlhf.course.exercises import ch10

    made_up = runs()
    monkeypatch.setattr(ch10, "stored_runs", lambda: made_up)
    return made_up
