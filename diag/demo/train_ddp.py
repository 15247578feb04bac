"""A small, ordinary DDP training script (gloo, CPU) to run under ``torchrun``; it knows no diag.

    torchrun --standalone --nproc_per_node 2 -m diag.demo.train_ddp --steps 60 --slow-rank 1

Every rank prints ``rank <r> step <i> loss <repr(float)>`` after each optimizer step (the exact
float, so a test can compare it with what the hook recorded). ``--slow-rank`` does about
``--slow-ms`` of extra real compute (matrix products) inside its forward each step from
``--slow-from-step`` on; a
``--data-stall-rank`` sleeps ``--data-stall-ms`` per batch inside its dataset from
``--data-stall-from-step`` on. Rank 0 saves a checkpoint with ``torch.save`` every ``--save-every``
steps; ``--slow-ckpt-ms`` simulates slow checkpoint storage: each of those saves stalls that long
in total inside ``torch.save`` (which still gets the file's path, so a hook that times it sees the
path and the file's size).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time
import types
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset


class Burner:
    """Real CPU work of about ``ms`` milliseconds: repeated 128x128 matrix products."""

    def __init__(self, ms: float) -> None:
        self.a = torch.randn(128, 128)
        self.iters = 0
        self.active = True
        if ms > 0:
            self.run(20)  # warm up
            t0 = time.perf_counter()
            self.run(50)
            per_iter_s = (time.perf_counter() - t0) / 50
            self.iters = max(1, round(ms / 1000 / per_iter_s))

    def run(self, iters: int | None = None) -> None:
        x = self.a
        for _ in range(self.iters if iters is None else iters):
            x = torch.tanh(x @ self.a)


class Net(nn.Module):
    def __init__(self, dim: int, hidden: int, burner: Burner | None) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(hidden, 1))
        self.burner = burner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.burner is not None and self.burner.active:
            self.burner.run()
        return self.head(self.body(x))


class Stalling(Dataset[tuple[torch.Tensor, ...]]):
    """Sleeps ``per_item_s`` in every ``__getitem__`` of a dataset (a slow input pipeline)."""

    def __init__(self, inner: TensorDataset, per_item_s: float) -> None:
        self.inner = inner
        self.per_item_s = per_item_s
        self.active = True

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if self.active:
            time.sleep(self.per_item_s)
        return self.inner[index]


def slow_storage(ms: float) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.save`` that stalls ``ms`` per save before pickling.

    The stall happens inside ``torch.save(obj, path)``, so the call is timed as a checkpoint and a
    hook sees the real path (a file object would hide it); the file written is an ordinary one.
    """
    delay_s = ms / 1000

    class Pickler(pickle.Pickler):
        def dump(self, obj: object) -> None:
            time.sleep(delay_s)
            super().dump(obj)

    module = types.ModuleType("slow_storage_pickle")
    module.Pickler = Pickler  # type: ignore[attr-defined]
    return module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--slow-from-step", type=int, default=0, help="the slow rank slows from here")
    p.add_argument("--data-stall-rank", type=int, default=-1)
    p.add_argument("--data-stall-ms", type=float, default=20.0)
    p.add_argument(
        "--data-stall-from-step", type=int, default=0, help="the data-stall rank stalls from here"
    )
    p.add_argument("--save-every", type=int, default=20, help="0 = never")
    p.add_argument("--ckpt-dir", default="", help="default: a new temporary directory")
    p.add_argument(
        "--slow-ckpt-ms", type=float, default=0.0, help="extra ms per checkpoint save (0 = off)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-every", type=int, default=1, help="print the loss every N steps")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    n = args.batch * world * 16
    data = TensorDataset(torch.randn(n, args.dim), torch.randn(n, 1))
    dataset: Dataset[tuple[torch.Tensor, ...]] = data
    stalling = None
    if rank == args.data_stall_rank:
        stalling = Stalling(data, args.data_stall_ms / 1000 / args.batch)
        stalling.active = args.data_stall_from_step <= 0
        dataset = stalling
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        dataset, num_replicas=world, rank=rank, seed=args.seed
    )
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)

    burner = Burner(args.slow_ms) if rank == args.slow_rank else None
    model = DistributedDataParallel(Net(args.dim, args.hidden, burner))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    tmp = tempfile.TemporaryDirectory(prefix="diag-demo-") if not args.ckpt_dir else None
    ckpt_dir = args.ckpt_dir or (tmp.name if tmp else "")
    pickle_module: Any = slow_storage(args.slow_ckpt_ms) if args.slow_ckpt_ms > 0 else pickle

    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if burner is not None:
                burner.active = step >= args.slow_from_step
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            if step % args.print_every == 0 or step == args.steps - 1:
                # one write per line: ranks share the launcher's stdout
                sys.stdout.write(f"rank {rank} step {step} loss {loss.item()!r}\n")
                sys.stdout.flush()
            step += 1
            if stalling is not None:  # the next batch is fetched for this (new) step
                stalling.active = step >= args.data_stall_from_step
            if rank == 0 and args.save_every and step % args.save_every == 0:
                torch.save(
                    {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
                    os.path.join(ckpt_dir, f"step{step}.pt"),
                    pickle_module=pickle_module,
                )
            if step >= args.steps:
                break
        epoch += 1
    dist.barrier()
    dist.destroy_process_group()
    if tmp is not None:
        tmp.cleanup()
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
