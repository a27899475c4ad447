"""Every test runs at one torch thread: runs are bit-identical only at a fixed thread count."""

import torch

torch.set_num_threads(1)
