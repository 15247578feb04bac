"""A small, ordinary DDP training script (gloo, CPU) to run under ``torchrun``; it knows no diag.

    torchrun --standalone --nproc_per_node 2 -m diag.selftest.workloads.train_ddp \\
        --steps 60 --slow-rank 1

It is also the fault-injection suite's job (:mod:`diag.selftest.live`): each fault has a rank, an
onset step and a size. Every rank prints ``rank <r> step <i> loss <repr(float)>`` after each
optimizer step (the exact float, so a test can compare it with what the hook recorded).

Faults (each off by default):

- ``--slow-rank``: about ``--slow-ms`` of extra real compute (matrix products) inside its forward
  each step from ``--slow-from-step`` on (a slow GPU / node);
- ``--data-stall-rank``: about ``--data-stall-ms`` of CPU work per batch inside its dataset from
  ``--data-stall-from-step`` on (a slow input pipeline);
- ``--slow-kernel-rank``: every rank passes its input through one custom operator,
  ``diagfault::scale_input``; on this rank, from ``--slow-kernel-from-step`` on, the operator
  itself takes ``--slow-kernel-ms`` longer (work done inside it, outside any other torch op, so a
  profiler sees that one operator slower);
- ``--slow-ckpt-ms``: rank 0 saves a checkpoint with ``torch.save`` every ``--save-every`` steps;
  from ``--slow-ckpt-from-step`` on each save stalls that long inside ``torch.save`` (which still
  gets the file's path, so a hook that times it sees the path and the file's size).

More mechanisms of other natures, for the held-out part of the suite
(:mod:`diag.selftest.mechanisms`):

- ``--data-sleep``: the data-stall rank's loader sleeps instead of computing (I/O-like: it frees
  its CPU while it stalls);
- ``--skew-from-step``: from that step each step one rank, drawn anew every step (the same draw on
  every rank), gets a longer batch to compute (uneven sequence lengths: an imbalance that moves);
- ``--linear-mode-rank R --linear-mode double|naive --linear-mode-from-step S``: from step S the
  model's second linear layer on rank R runs in float64, or as a broadcast multiply-and-sum
  instead of a matrix product (another dtype, another algorithm: a different kernel, not extra
  work inside the same one);
- ``--ckpt-file-object``: rank 0's saves go through a file object whose writes stall (slow storage
  behind a stream: ``torch.save`` sees no path);
- ``--dcp``: every rank saves its share with ``torch.distributed.checkpoint`` (a collective
  save); slow saves stall in each rank's storage writer (a slow shared file system);
- ``--fsdp``: the model fully sharded (``torch.distributed.fsdp.fully_shard``, one unit:
  parameters all-gathered before the forward, gradients reduce-scattered after the backward)
  instead of DDP's replicas and gradient all-reduce: the same faults under another layout;
- ``--gc-pause-rank R --gc-pause-from-step S --gc-pause-share P``: from step S rank R keeps a
  runs a full garbage collection before its forward in a share P of its steps (a seeded draw):
  stop-the-world pauses on the training thread, on the CPU, in some steps and not others. Sized
  by the severity: when one collection is longer than the loss per step / P, the share drops
  (rarer, longer pauses); when shorter, a graph of live objects makes each collection longer.

``--severity S`` sizes every enabled fault by the job itself instead of milliseconds: at its onset
the fault's rank takes the median of its own last ``--calibrate-steps`` step times (before the
onset) as the job step ``base`` and sets the fault's extra time per step to ``base x S / (1 - S)``
(checkpoint stalls: ``--save-every`` times that), so the job loses the fraction S of its step time.

A clean run's ordinary irregularities: ``--warmup-steps`` first steps with ``--warmup-ms`` extra
compute on every rank; an evaluation pass every ``--eval-every`` steps (``--eval-batches`` forward
passes without gradients and an all-reduce of the eval loss, on every rank); periodic saves.

``--stop-file PATH`` ends the job early, at the same step on every rank, once ``PATH`` exists
(checked every ``--stop-every`` steps): a test that waits for something the job must show (an
automatic profiler window) runs it until then, with ``--steps`` as the cap.

Resuming (for ``diag diff``): a save after step ``i`` holds the model, the optimizer and the next
step ``K = i + 1`` (file ``step<K>.pt``). ``--resume-from FILE`` loads it on every rank and trains
from step ``K`` on the same data as an uninterrupted run (the sampler's epoch ``K // batches`` and
the batches of that epoch already trained on skipped), so a correct resume repeats the
uninterrupted run's steps from ``K``; ``--forget-optimizer`` loads the model only (a fresh Adam).

Numerics faults (a NaN in a module's output or the input batch, one flipped bit in one replica's
parameters): ``--nan-*`` and ``--bitflip-*``, see :mod:`diag.selftest.workloads.numerics_faults`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import itertools
import os
import pickle
import random
import shutil
import statistics
import sys
import tempfile
import time
import types
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

from diag.selftest.workloads.numerics_faults import NumericsFaults, add_args


class Burner:
    """Real CPU work of about ``ms`` milliseconds: repeated 128x128 matrix products."""

    def __init__(self, ms: float) -> None:
        self.a = torch.randn(128, 128)
        self.iters = 0
        self.active = True
        self.set_ms(ms)

    def set_ms(self, ms: float) -> None:
        if ms <= 0:
            self.iters = 0
            return
        self.run(20)  # warm up
        t0 = time.thread_time()  # CPU time: a rank descheduled meanwhile measures the same
        self.run(100)
        per_iter_s = max(1e-7, time.thread_time() - t0) / 100
        self.iters = max(1, round(ms / 1000 / per_iter_s))

    def run(self, iters: int | None = None) -> None:
        x = self.a
        for _ in range(self.iters if iters is None else iters):
            x = torch.tanh(x @ self.a)


class GcPauses:
    """Full garbage collections in a random share of steps: stop-the-world pauses.

    :meth:`set_ms` sizes them so that the rank loses ``mean_ms`` per step on average: a full
    collection in a process with torch loaded already takes a while (~100 ms on this VM), so
    when that alone is longer than ``mean_ms / share`` the share drops to ``mean_ms / pause``
    (rarer, long pauses, as real ones are); when shorter, a graph of live Python objects (small
    dicts the collector must traverse) grows until one collection takes ``mean_ms / share``.
    :meth:`maybe_pause` collects in a share ``share`` of the calls (a seeded draw)."""

    PROBE = 100_000  # objects timed first
    MAX_OBJECTS = 8_000_000

    def __init__(self, share: float, seed: int) -> None:
        self.share = min(1.0, max(0.01, share))
        self.rng = random.Random(seed)
        self.graph: list[dict[str, object]] = []
        self.active = False

    def set_ms(self, mean_ms: float) -> None:
        base = self._collect_ms()
        want = mean_ms / self.share
        if base >= want:
            self.share = max(0.01, mean_ms / base)
        else:
            self._grow(self.PROBE)
            per_object = max(1e-7, (self._collect_ms() - base) / self.PROBE)
            self._grow(min(self.MAX_OBJECTS, self.PROBE + int((want - base) / per_object)))
        self.active = True

    def _collect_ms(self) -> float:
        t0 = time.thread_time()
        gc.collect()
        return (time.thread_time() - t0) * 1000

    def _grow(self, total: int) -> None:
        self.graph.extend({"i": i, "next": [i]} for i in range(len(self.graph), total))

    def maybe_pause(self) -> None:
        if self.active and self.rng.random() < self.share:
            gc.collect()


class NumpyBurner:
    """About ``ms`` milliseconds of real work outside torch (numpy matrix products), so that a
    torch profiler attributes it to the operator it runs in, not to ``aten`` ops beneath."""

    def __init__(self) -> None:
        self.a = np.random.default_rng(0).random((128, 128), dtype=np.float32) / 128
        self.iters = 0

    def set_ms(self, ms: float) -> None:
        self.run(20)
        t0 = time.thread_time()  # CPU time: a rank descheduled meanwhile measures the same
        self.run(100)
        per_iter_s = max(1e-7, time.thread_time() - t0) / 100
        self.iters = max(1, round(ms / 1000 / per_iter_s)) if ms > 0 else 0

    def run(self, iters: int | None = None) -> None:
        x = self.a
        for _ in range(self.iters if iters is None else iters):
            x = np.tanh(x @ self.a)


#: the slow-kernel fault's burner; ``None`` (or 0 iterations) on every other rank.
_KERNEL_BURNER: NumpyBurner | None = None


@torch.library.custom_op("diagfault::scale_input", mutates_args=())
def scale_input(x: torch.Tensor) -> torch.Tensor:
    """Input scaling, as its own operator: the one the slow-kernel fault slows down."""
    if _KERNEL_BURNER is not None:
        _KERNEL_BURNER.run()
    return x * 0.5


@scale_input.register_fake
def _scale_input_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Net(nn.Module):
    def __init__(self, dim: int, hidden: int, burners: list[Burner]) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(hidden, 1))
        self.burners = burners

        self.linear_mode = ""  # "", "double" or "naive": how body[2] computes (a kernel fault)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for burner in self.burners:
            if burner.active:
                burner.run()
        h = self.body[1](self.body[0](scale_input(x)))
        lin: nn.Linear = self.body[2]  # type: ignore[assignment]
        if self.linear_mode == "double":
            h = nn.functional.linear(h.double(), lin.weight.double(), lin.bias.double()).float()
        elif self.linear_mode == "naive":
            h = (h.unsqueeze(2) * lin.weight.t().unsqueeze(0)).sum(dim=1) + lin.bias
        else:
            h = lin(h)
        return self.head(h)


class Stalling(Dataset[tuple[torch.Tensor, ...]]):
    """A slow input pipeline: about ``ms`` of real CPU work (numpy, as decoding or augmentation
    would do) once every ``batch`` items fetched. CPU work rather than a sleep: on a host whose
    CPUs are all busy a sleeping loader would hand its core to the other ranks and cost the job
    nothing, which no slow real loader does."""

    def __init__(self, inner: TensorDataset, ms: float, batch: int, *, sleep: bool = False) -> None:
        self.inner = inner
        self.batch = batch
        self.fetched = 0
        self.sleep_s = ms / 1000 if sleep else 0.0  # sleep: an I/O-like stall that frees the CPU
        self.sleeps = sleep
        self.work = NumpyBurner()
        if not sleep:
            self.work.set_ms(ms)
        self.active = True

    def set_ms(self, ms: float) -> None:
        if self.sleeps:
            self.sleep_s = ms / 1000
        else:
            self.work.set_ms(ms)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if self.active and self.fetched % self.batch == 0:
            if self.sleeps:
                time.sleep(self.sleep_s)
            else:
                self.work.run()
        self.fetched += 1
        return self.inner[index]


class SlowFile(io.RawIOBase):
    """A writable file object whose writes stall about ``ms`` per save in all (spread over the
    writes by size): storage behind a stream, where ``torch.save`` sees no path."""

    def __init__(self, path: str, ms: float, expected_bytes: int) -> None:
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._s_per_byte = ms / 1000 / max(1, expected_bytes)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = self._fh.write(data)
        time.sleep(n * self._s_per_byte)
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def dcp_save(state: dict[str, Any], path: str, stall_ms: float) -> None:
    """``torch.distributed.checkpoint.save`` of ``state`` on every rank, each rank's writes
    stalling ``stall_ms`` in its storage writer."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    class SlowWriter(FileSystemWriter):
        def write_data(self, plan: Any, planner: Any) -> Any:
            time.sleep(stall_ms / 1000)
            return super().write_data(plan, planner)

    dcp.save(state, storage_writer=SlowWriter(path))


class SlowStorage:
    """A ``pickle_module`` for ``torch.save`` that stalls ``ms`` per save before pickling.

    The stall happens inside ``torch.save(obj, path)``, so the call is timed as a checkpoint and a
    hook sees the real path (a file object would hide it); the file written is an ordinary one.
    """

    def __init__(self, ms: float) -> None:
        self.ms = ms
        storage = self

        class Pickler(pickle.Pickler):
            def dump(self, obj: object) -> None:
                time.sleep(storage.ms / 1000)
                super().dump(obj)

        module = types.ModuleType("slow_storage_pickle")
        module.Pickler = Pickler  # type: ignore[attr-defined]
        self.module = module


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
    p.add_argument("--slow-kernel-rank", type=int, default=-1)
    p.add_argument("--slow-kernel-ms", type=float, default=20.0)
    p.add_argument("--slow-kernel-from-step", type=int, default=0)
    p.add_argument("--save-every", type=int, default=20, help="0 = never")
    p.add_argument("--ckpt-dir", default="", help="default: a new temporary directory")
    p.add_argument(
        "--slow-ckpt-ms", type=float, default=0.0, help="extra ms per checkpoint save (0 = off)"
    )
    p.add_argument(
        "--slow-ckpt-from-step", type=int, default=-1,
        help="saves are slow from this step on (default: from the start if --slow-ckpt-ms > 0)",
    )  # fmt: skip
    p.add_argument("--data-sleep", action="store_true", help="the data stall sleeps (I/O-like)")
    p.add_argument("--skew-from-step", type=int, default=-1, help="moving imbalance from here")
    p.add_argument("--skew-ms", type=float, default=20.0)
    p.add_argument("--linear-mode-rank", type=int, default=-1)
    p.add_argument("--linear-mode", choices=("double", "naive"), default="double")
    p.add_argument("--linear-mode-from-step", type=int, default=0)
    p.add_argument("--dcp", action="store_true", help="every rank saves with DCP (collective)")
    p.add_argument(
        "--fsdp", action="store_true", help="fully sharded (FSDP2 fully_shard) instead of DDP"
    )
    p.add_argument(
        "--stop-file",
        default="",
        help="end early once this file exists (every rank checks every --stop-every steps and "
        "all agree, by an all-reduce, on the same step)",
    )
    p.add_argument("--stop-every", type=int, default=25)
    p.add_argument("--gc-pause-rank", type=int, default=-1)
    p.add_argument("--gc-pause-from-step", type=int, default=0)
    p.add_argument("--gc-pause-share", type=float, default=0.3, help="share of steps with a pause")
    p.add_argument("--gc-pause-ms", type=float, default=30.0, help="mean extra ms per step")
    p.add_argument(
        "--ckpt-file-object", action="store_true",
        help="slow checkpoint saves stall in the writes of a file object instead (no path)",
    )  # fmt: skip
    p.add_argument(
        "--severity", type=float, default=0.0,
        help="size each fault to lose this fraction of the job step (0: use the --*-ms values)",
    )  # fmt: skip
    p.add_argument("--calibrate-steps", type=int, default=10)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--warmup-ms", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=0, help="0 = never")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-every", type=int, default=1, help="print the loss every N steps")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code at the end")
    p.add_argument(
        "--resume-from", default="", help="a checkpoint this script saved: continue from its step"
    )
    p.add_argument(
        "--forget-optimizer", action="store_true",
        help="with --resume-from: load the model only (a broken resume: fresh optimizer state)",
    )  # fmt: skip
    add_args(p)  # --nan-*, --bitflip-* (diag.selftest.workloads.numerics_faults)
    args = p.parse_args(argv)
    if not 0.0 <= args.severity < 1.0:
        p.error("--severity must be in [0, 1)")
    if args.severity:
        onsets = {
            "--slow-from-step": (args.slow_rank >= 0, args.slow_from_step),
            "--data-stall-from-step": (args.data_stall_rank >= 0, args.data_stall_from_step),
            "--slow-kernel-from-step": (args.slow_kernel_rank >= 0, args.slow_kernel_from_step),
            "--slow-ckpt-from-step": (args.slow_ckpt_from_step >= 0, args.slow_ckpt_from_step),
            "--skew-from-step": (args.skew_from_step >= 0, args.skew_from_step),
            "--gc-pause-from-step": (args.gc_pause_rank >= 0, args.gc_pause_from_step),
        }
        for name, (on, step) in onsets.items():
            if on and step < 2:
                p.error(f"with --severity, {name} must be >= 2 (step times are measured first)")
    return args


class Calibrator:
    """The rank's own step times; at a fault's onset, the extra ms that loses ``severity``."""

    def __init__(self, severity: float, calibrate_steps: int) -> None:
        self.severity = severity
        self.calibrate_steps = calibrate_steps
        self.durations: list[float] = []  # ms, index = step
        self.last = time.perf_counter()

    def step_done(self) -> None:
        now = time.perf_counter()
        self.durations.append((now - self.last) * 1000)
        self.last = now

    def extra_ms(self, given_ms: float) -> float:
        """``given_ms`` without a severity; else ``base x s / (1 - s)`` with ``base`` the median
        of the last ``calibrate_steps`` step times (step 0, the slowest, only if alone)."""
        if self.severity <= 0:
            return given_ms
        recent = self.durations[-self.calibrate_steps :]
        if len(recent) > 1 and len(self.durations) <= self.calibrate_steps:
            recent = recent[1:]
        base = statistics.median(recent) if recent else 0.0
        return base * self.severity / (1.0 - self.severity)


def _stop_asked(path: str) -> bool:
    """Whether any rank sees ``path``: an all-reduce, so that every rank ends at the same step
    (a rank leaving alone would leave the others in their next collective)."""
    flag = torch.tensor([1.0 if os.path.exists(path) else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def evaluate(model: nn.Module, loader: DataLoader, batches: int) -> None:
    """A real evaluation pass: forward without gradients, then the mean loss all-reduced."""
    model.eval()
    total = torch.zeros(1)
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            if i >= batches:
                break
            total += nn.functional.mse_loss(model(x), y)
    dist.all_reduce(total)
    model.train()


def resume(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, forget: bool) -> int:
    """Load a checkpoint this script saved (every rank reads it) and return the step to continue
    from (0 without ``path``). ``forget``: the model only, the optimizer keeps its fresh state."""
    if not path:
        return 0
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    if not forget:
        optimizer.load_state_dict(ckpt["optimizer"])
    return int(ckpt["step"])


def main(argv: list[str] | None = None) -> int:
    global _KERNEL_BURNER
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    calib = Calibrator(args.severity, args.calibrate_steps)

    n = args.batch * world * 16
    data = TensorDataset(torch.randn(n, args.dim), torch.randn(n, 1))
    dataset: Dataset[tuple[torch.Tensor, ...]] = data
    stalling = None
    if rank == args.data_stall_rank:
        stalling = Stalling(data, args.data_stall_ms, args.batch, sleep=args.data_sleep)
        stalling.active = args.data_stall_from_step <= 0
        dataset = stalling
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        dataset, num_replicas=world, rank=rank, seed=args.seed
    )
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    eval_loader = DataLoader(data, batch_size=args.batch, shuffle=False)

    burner = Burner(0.0 if args.severity else args.slow_ms) if rank == args.slow_rank else None
    if burner is not None:
        burner.active = False
    warmup = Burner(args.warmup_ms) if args.warmup_steps and args.warmup_ms > 0 else None
    skew = Burner(0.0) if args.skew_from_step >= 0 else None  # the moving imbalance's extra work
    if skew is not None:
        skew.active = False
    burners = [b for b in (burner, warmup, skew) if b is not None]
    kernel_burner = NumpyBurner() if rank == args.slow_kernel_rank else None
    gc_pauses = GcPauses(args.gc_pause_share, args.seed) if rank == args.gc_pause_rank else None
    net = Net(args.dim, args.hidden, burners)
    if args.fsdp:  # fully sharded: one unit, all-gathered before forward, reduce-scattered after
        from torch.distributed.fsdp import fully_shard

        fully_shard(net)  # in place: net is now the sharded module
        model: nn.Module = net
    else:
        model = DistributedDataParallel(net)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    faults = NumericsFaults(args, rank, net)
    saves = bool(args.save_every) and (rank == 0 or args.dcp)  # rank 0 saves, or DCP on all
    tmp = tempfile.TemporaryDirectory(prefix="diag-demo-") if saves and not args.ckpt_dir else None
    ckpt_dir = args.ckpt_dir or (tmp.name if tmp else "")
    slow_ckpt = args.slow_ckpt_ms > 0 or args.slow_ckpt_from_step >= 0
    storage = SlowStorage(0.0) if slow_ckpt else None

    prev_ckpt = ""  # the last save: its size spreads a file-object stall over the writes
    step = resume(args.resume_from, net, optimizer, args.forget_optimizer)
    epoch, skip = divmod(step, len(loader))
    while step < args.steps:
        sampler.set_epoch(epoch)
        # a resumed run skips the batches its epoch already trained on: the same data order
        for x, y in itertools.islice(loader, skip, None):
            if warmup is not None:
                warmup.active = step < args.warmup_steps
            if burner is not None and step == args.slow_from_step:
                if args.severity:
                    burner.set_ms(calib.extra_ms(args.slow_ms))
                burner.active = True
            if skew is not None and step >= args.skew_from_step:
                if skew.iters == 0:
                    skew.set_ms(calib.extra_ms(args.skew_ms))
                # the same draw on every rank: one rank's batch is longer this step
                skew.active = random.Random(args.seed * 100_003 + step).randrange(world) == rank
            if rank == args.linear_mode_rank and step == args.linear_mode_from_step:
                net.linear_mode = args.linear_mode
            if gc_pauses is not None:
                if step == args.gc_pause_from_step:
                    gc_pauses.set_ms(calib.extra_ms(args.gc_pause_ms))
                gc_pauses.maybe_pause()
            if kernel_burner is not None and step == args.slow_kernel_from_step:
                kernel_burner.set_ms(calib.extra_ms(args.slow_kernel_ms))
                _KERNEL_BURNER = kernel_burner
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(faults.batch(step, x)), y)
            loss.backward()
            optimizer.step()
            faults.after_step(step)
            if step % args.print_every == 0 or step == args.steps - 1:
                # one write per line: ranks share the launcher's stdout
                sys.stdout.write(f"rank {rank} step {step} loss {loss.item()!r}\n")
                sys.stdout.flush()
            step += 1
            if args.eval_every and step % args.eval_every == 0 and step < args.steps:
                evaluate(model, eval_loader, args.eval_batches)
            if stalling is not None and step == args.data_stall_from_step:
                # the next batch is fetched for this (new) step
                stalling.set_ms(calib.extra_ms(args.data_stall_ms))
                stalling.active = True
            if args.dcp and args.save_every and step % args.save_every == 0:
                stall = 0.0
                if storage is not None and step >= max(0, args.slow_ckpt_from_step):
                    if not storage.ms:
                        storage.ms = args.save_every * calib.extra_ms(
                            args.slow_ckpt_ms / args.save_every
                        )
                    stall = storage.ms
                dcp_save({"model": net.state_dict()},
                         os.path.join(ckpt_dir, f"dcp-step{step}"), stall)  # fmt: skip
                if tmp is not None and rank == 0 and prev_ckpt:
                    shutil.rmtree(prev_ckpt, ignore_errors=True)  # the newest only, as below
                prev_ckpt = os.path.join(ckpt_dir, f"dcp-step{step}")
            elif rank == 0 and args.save_every and step % args.save_every == 0:
                pickle_module: Any = pickle
                if storage is not None and step >= max(0, args.slow_ckpt_from_step):
                    if not storage.ms:
                        storage.ms = args.save_every * calib.extra_ms(
                            args.slow_ckpt_ms / args.save_every
                        )
                    pickle_module = storage.module
                state = {
                    "model": net.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                }
                path = os.path.join(ckpt_dir, f"step{step}.pt")
                if args.ckpt_file_object and pickle_module is not pickle:
                    assert storage is not None
                    size = os.path.getsize(prev_ckpt) if prev_ckpt else 1 << 20
                    with SlowFile(path, storage.ms, size) as fh:
                        torch.save(state, fh)  # type: ignore[arg-type]
                else:
                    torch.save(state, path, pickle_module=pickle_module)
                if tmp is not None and prev_ckpt:
                    # a temporary folder keeps only the newest save: a job killed before its
                    # end (most tests stop theirs) never runs the folder's cleanup, and left
                    # every save behind (~100 MB per run in /tmp)
                    with contextlib.suppress(OSError):
                        os.remove(prev_ckpt)
                prev_ckpt = path
            calib.step_done()
            if args.stop_file and step % args.stop_every == 0 and _stop_asked(args.stop_file):
                args.steps = step  # every rank stops here: the flag was all-reduced
            if step >= args.steps:
                break
        epoch, skip = epoch + 1, 0
    dist.barrier()
    dist.destroy_process_group()
    if tmp is not None:
        tmp.cleanup()
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
