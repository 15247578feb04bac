"""A world-size-1 DDP trainer for the hook's profiler-window tests (a process group must exist:
the ``world`` fixture), and the poll they wait with."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

#: products and tanh per step outside the model: the operators a window must show
BURN_ITERS = 8


def wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


class Trainer:
    """One DDP model and optimizer for the whole test (the hook's primary optimizer stays)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.burn = torch.randn(64, 64)

    def steps(self, n: int, settle: Any = None) -> None:
        """``n`` steps; with ``settle`` (a hook), each waits until that hook's thread has taken
        the last window (the next one starts only then), so windows fall where they were asked
        for."""
        for _ in range(n):
            if settle is not None:
                wait_for(lambda: not settle.profiler.busy)
            z = self.burn
            for _ in range(BURN_ITERS):
                z = torch.tanh(z @ self.burn)
            self.opt.zero_grad()
            nn.functional.mse_loss(self.model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
            self.opt.step()
