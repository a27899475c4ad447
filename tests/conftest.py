"""Every test runs at one torch thread: runs are bit-identical only at a fixed thread count."""

import pytest
import torch

from minirlhf import task
from minirlhf.model import GPTConfig, TinyGPT
from minirlhf.ppo import EvalSet

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    """An untrained policy and reward model (seed 0) and 32 eval prompts: small PPO and GRPO
    runs in seconds."""
    torch.manual_seed(0)
    policy = TinyGPT(GPTConfig()).eval()
    rm = TinyGPT(GPTConfig(), scalar_head=True).eval()
    return policy, rm, EvalSet(task.eval_pairs()[:32])
