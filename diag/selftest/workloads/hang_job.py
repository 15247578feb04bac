"""A small gloo DDP job that hangs or fails on purpose: the real jobs of diag's hang tests.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        diag/selftest/workloads/hang_job.py --steps 30 --at-step 10 --stuck-loader-rank 1 \\
        --timeout-s 40

Each step takes a batch from a ``DataLoader`` (in the training process), runs forward and backward
(DDP's gradient all-reduce), steps the optimizer, then meets the other ranks in a
``dist.barrier()``, and sleeps ``--step-ms``. At step ``--at-step`` one rank does its fault:

- ``--skip-collective-rank R``: R skips that step's barrier and goes on into the next step's
  all-reduce, which the others' barrier cannot match: a hang until the collective timeout;
- ``--stuck-loader-rank R``: R's dataset blocks in ``__getitem__`` (for good);
- ``--raise-rank R``: R raises ``RuntimeError("injected failure at step S")``;
- ``--kill-self-rank R``: R sends itself SIGKILL;
- ``--abort-rank R``: R aborts (``os.abort()``: SIGABRT, as a failed heap check or C assertion
  ends a process) after printing glibc's heap-check message.

Just before, the rank prints ``FAULT rank R <kind> step S at <time.time()>`` (flushed), which the
tests use to time the detection. ``--timeout-s`` is the process group's collective timeout: the
hung ranks end with gloo's timeout error after it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH = 4


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--at-step", type=int, default=10)
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--timeout-s", type=float, default=40.0)
    p.add_argument("--skip-collective-rank", type=int, default=-1)
    p.add_argument("--stuck-loader-rank", type=int, default=-1)
    p.add_argument("--raise-rank", type=int, default=-1)
    p.add_argument("--kill-self-rank", type=int, default=-1)
    p.add_argument("--abort-rank", type=int, default=-1)
    return p.parse_args(argv)


def fault_line(rank: int, kind: str, step: int) -> None:
    print(f"FAULT rank {rank} {kind} step {step} at {time.time():.3f}", flush=True)


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random regression samples; ``stuck_from`` (an index) makes ``__getitem__`` block."""

    def __init__(self, n: int, rank: int, stuck_from: int) -> None:
        g = torch.Generator().manual_seed(rank)
        self.x = torch.randn(n, 32, generator=g)
        self.y = torch.randn(n, 32, generator=g)
        self.rank = rank
        self.stuck_from = stuck_from

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if 0 <= self.stuck_from <= i:
            fault_line(self.rank, "stuck-loader", i // BATCH)
            while True:  # a storage mount that never answers
                time.sleep(3600)
        return self.x[i], self.y[i]


def abort_natively() -> None:
    """What native code does on a failed heap check: glibc's message on stderr, then abort()."""
    os.write(2, b"malloc(): unsorted double linked list corrupted\n")
    os.abort()


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               *, step: int, args: argparse.Namespace, rank: int) -> None:  # fmt: skip
    if rank == args.raise_rank and step == args.at_step:
        fault_line(rank, "raise", step)
        raise RuntimeError(f"injected failure at step {step}")
    if rank == args.kill_self_rank and step == args.at_step:
        fault_line(rank, "kill-self", step)
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == args.abort_rank and step == args.at_step:
        fault_line(rank, "abort", step)
        abort_natively()
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stuck = args.at_step * BATCH if rank == args.stuck_loader_rank else -1
    loader = DataLoader(Samples(args.steps * BATCH, rank, stuck), batch_size=BATCH)
    for step, (x, y) in enumerate(loader):
        train_step(model, opt, x, y, step=step, args=args, rank=rank)
        if rank == args.skip_collective_rank and step == args.at_step:
            fault_line(rank, "skip-collective", step)
        else:
            dist.barrier()
        time.sleep(args.step_ms / 1e3)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
