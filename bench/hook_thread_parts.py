"""Where the hook thread's CPU goes, part by part, in a real job beside a busy training thread.

``bench/overhead.py`` gives the hook thread's CPU per step as one figure; this bench says what it
is made of. A world-size-1 gloo job (FileStore) trains a small DDP model whose forward also does
``--iters`` 128x128 matrix products (about 30 us each here: 1,500 is a ~45 ms step, 150 a ~5 ms
one), ``--collectives`` Python-level ``dist.all_reduce`` per step besides DDP's, for
``--steps`` steps with the hook installed, sending to a frame sink in a process of its own (as
the node daemon does). The hook thread's methods, the gloo worker sampling, the Flight Recorder
dumps (full and probe) and their unpickling are timed by the hook thread's own CPU clock
(``thread_time``), summed per part.
Parts nest: a cycle holds its work, the work a harvest (or a drain), a harvest its dump; the
table is not a partition. Periodic profiler windows are off unless ``--every N``.

Figures measured in a job beside a busy training thread are several times the same calls' cost
alone (on this 2-core VM a probe that costs ~6 us alone takes ~150 us): the two cores' caches and
execution units are shared, and that is the cost the job pays. Measured numbers only, no asserts.

    .venv/bin/python bench/hook_thread_parts.py [--iters 1500] [--steps 300] [--every 0]
        [--collectives 1] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import FrameSink, _fields

from diag.config import HookConfig
from diag.hook import c10d_workers, fr_dump
from diag.hook import core as hook
from diag.hook import sender as hook_sender
from diag.hook import thread as hook_thread

#: the hook thread's methods timed (those it has; a renamed one is left out, not an error)
METHODS = ("_cycle", "_work", "_fr_look", "_fr_due", "_harvest", "_drain", "_release_steps",
           "_control", "_profile_windows", "_layout", "_poll_device", "_health")  # fmt: skip


class Parts:
    """Thread CPU per part: ``totals[name] = [calls, ns]``."""

    def __init__(self) -> None:
        self.totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        totals = self.totals

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            c0 = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                t = totals[name]
                t[0] += 1
                t[1] += time.thread_time_ns() - c0

        return wrapper

    def patch(self, owner: Any, attr: str, name: str) -> None:
        if hasattr(owner, attr):
            setattr(owner, attr, self.timed(name, getattr(owner, attr)))


def instrument(parts: Parts, thread_cpu: list[int]) -> None:
    cls = hook_thread.HookThread
    for name in METHODS:
        parts.patch(cls, name, f"HookThread.{name}")
    parts.patch(hook_sender.FrameSender, "flush", "FrameSender.flush")
    parts.patch(c10d_workers.CollectiveWorkers, "observe", "gloo workers: a sample")
    parts.patch(hook_thread, "load_fr_dump", "Flight Recorder: unpickling")
    parts.patch(cls, "_ring_dump", "HookThread._ring_dump")
    parts.patch(fr_dump.FrDumper, "since", "Flight Recorder: read")
    parts.patch(fr_dump.FrDumper, "next_id", "Flight Recorder: probe (read)")
    run = cls.run
    dump = fr_dump.FrDumper.dump

    def dump_timed(self: Any, *, collectives: bool = True) -> Any:
        name = "Flight Recorder: full dump" if collectives else "Flight Recorder: probe"
        return parts.timed(name, dump)(self, collectives=collectives)

    def run_timed(self: Any) -> None:
        c0 = time.thread_time_ns()
        try:
            run(self)
        finally:
            thread_cpu[0] += time.thread_time_ns() - c0

    fr_dump.FrDumper.dump = dump_timed  # type: ignore[method-assign]
    cls.run = run_timed  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=1500, help="matrix products per forward")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=0, help="a profiler window every N steps")
    ap.add_argument("--collectives", type=int, default=1,
                    help="Python-level all-reduces per step (besides DDP's)")  # fmt: skip
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                    help="HookConfig fields of the hook measured")  # fmt: skip
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dhp")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    sock = os.path.join(tmp, "sink")
    sink = FrameSink(sock)
    cfg = HookConfig(daemon_sock=sock, profile_every_steps=args.every, **_fields(args.set))
    hook.install(cfg)  # before the process group, so the Flight Recorder is sized
    hook.uninstall()
    parts, thread_cpu = Parts(), [0]
    instrument(parts, thread_cpu)

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1),
                            rank=0, world_size=1)  # fmt: skip
    burn = torch.randn(128, 128)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = burn
            for _ in range(args.iters):
                z = torch.tanh(z @ burn)
            return self.net(x)

    model = DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y, token = torch.randn(32, 64), torch.randn(32, 1), torch.zeros(1)
    hook.install(cfg)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        for _ in range(args.collectives):
            dist.all_reduce(token)
        opt.step()
    wall = time.perf_counter() - t0
    hook.uninstall()
    dist.destroy_process_group()
    steps = args.steps
    print(f"{steps} steps of {wall / steps * 1e3:.2f} ms ({wall:.1f} s), torch "
          f"{torch.__version__}; "
          f"hook thread CPU {thread_cpu[0] / 1e6:.1f} ms: {thread_cpu[0] / steps / 1e3:.1f} us "
          f"per step, {thread_cpu[0] / 1e6 / wall:.2f} ms per second")  # fmt: skip
    print(f"  {'part (parts nest)':38s} {'calls':>6s} {'CPU ms':>8s} {'us/call':>8s} "
          f"{'us/step':>8s} {'ms/s':>6s}")  # fmt: skip
    for name, (calls, ns) in sorted(parts.totals.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:38s} {calls:6d} {ns / 1e6:8.1f} {ns / max(calls, 1) / 1e3:8.1f} "
              f"{ns / steps / 1e3:8.1f} {ns / 1e6 / wall:6.2f}")  # fmt: skip
    print(
        f"  sink: {sink.num_bytes / steps:.0f} bytes and {sink.num_events / steps:.2f} events "
        "per step"
    )


if __name__ == "__main__":
    main()
