"""Profiler windows on a GPU: what a CUDA rank's windows record, and what they cost the step.

A device check (CI has no GPU; run it where one is lent). A world-size-1 job (NCCL when built in,
else gloo) trains a DDP MLP of ``--layers`` small layers on ``cuda:0`` (many short kernels and
CPU operators: the case where recording operators costs most), with the hook sending to a frame
sink in this process, in two arms of ``--steps`` steps: periodic windows every ``--every`` steps
as shipped (the device's activity only: ``ProfileWindow.device_only``) and with
``profile_cpu_ops_on_cuda`` (CPU operators too); in the first arm one on-demand window besides
(CPU operators and shapes, as the closed loop asks). Each step ends with
``torch.cuda.synchronize()`` so its wall time holds its kernels.

Prints, per arm, the windows and the rows they shipped by category, each window step's time
against the median ordinary step, and the checks a user relies on (``ok``/``FAILED``):
periodic windows on CUDA are ``device_only`` with GPU kernels and no ``cpu_op`` rows, the
opted-in arm's carry ``cpu_op`` rows, the on-demand window carries ``cpu_op`` rows with shapes.
Exit status 1 when a check failed or there is no CUDA device (one line says which).

    .venv/bin/python bench/gpu_windows.py [--steps 120] [--every 20] [--layers 24]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag import schema
from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook.profiler import ON_DEMAND, WindowPlan
from tests.fakes.hook_sink import FrameSink


def run_arm(
    cfg: HookConfig, step: Callable[[], int], steps: int, on_demand_at: int
) -> tuple[list[int], list[int]]:
    """Steps with the hook installed: (every step's wall ns, the hook's step index of each)."""
    h = hook.install(cfg)
    times, indices = [], []
    try:
        for i in range(steps):
            if i == on_demand_at:
                h.profiler.inbox.append(
                    WindowPlan("d-gpucheck", ON_DEMAND, h.tracker.step + 2, 1, "gpucheck")
                )
            indices.append(h.tracker.step)
            times.append(step())
    finally:
        hook.uninstall()
    return times, indices


def report(name: str, events: list[schema.Event], times: list[int], indices: list[int]) -> dict:
    windows = [e for e in events if isinstance(e, schema.ProfileWindow)]
    rows = [e for e in events if isinstance(e, schema.KernelSummary)]
    window_steps = {w.step for w in windows if w.ok}
    ordinary = [t for t, i in zip(times, indices, strict=True) if i not in window_steps and i > 5]
    base = statistics.median(ordinary) if ordinary else float("nan")
    print(f"{name}: {len(windows)} windows, ordinary step median {base / 1e6:.2f} ms")
    out: dict = {}
    for w in windows:
        cats = Counter(r.category for r in rows if r.window_id == w.window_id)
        shapes = sum(1 for r in rows if r.window_id == w.window_id and r.input_shapes)
        step_ns = [t for t, i in zip(times, indices, strict=True) if i == w.step]
        extra = (step_ns[0] - base) / 1e6 if step_ns else float("nan")
        print(f"  {w.window_id:12s} {w.trigger:9s} ok={w.ok} device_only={w.device_only} "
              f"ops={w.num_ops} kernels={w.num_kernels} rows={dict(cats)} shapes={shapes} "
              f"step +{extra:.2f} ms ({extra / (base / 1e6) * 100:+.0f} %) {w.error}")  # fmt: skip
        out[w.window_id] = (w, cats, shapes)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--layers", type=int, default=24)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_windows: no CUDA device here (torch.cuda.is_available() is False): nothing "
              "to check")  # fmt: skip
        return 1
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    tmp = tempfile.mkdtemp(prefix="dgw")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    sink = FrameSink(Path(tmp) / "sink")
    sink.start()
    base = HookConfig(daemon_sock=str(Path(tmp) / "sink"), profile_first_step=10,
                      profile_every_steps=args.every, flush_interval_s=0.05)  # fmt: skip
    hook.install(base)  # before the process group, so the Flight Recorder is sized
    hook.uninstall()
    backend = "nccl" if dist.is_nccl_available() else "gloo"
    torch.cuda.set_device(0)  # before the group: NCCL binds its communicator to this device
    dist.init_process_group(backend, store=dist.FileStore(os.path.join(tmp, "store"), 1),
                            rank=0, world_size=1)  # fmt: skip
    layers = [m for _ in range(args.layers) for m in (nn.Linear(512, 512), nn.GELU())]
    model = DistributedDataParallel(nn.Sequential(*layers).cuda(), device_ids=[0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 512, device="cuda")

    def step() -> int:
        t0 = time.perf_counter_ns()
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
        return time.perf_counter_ns() - t0

    for _ in range(10):
        step()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, backend {backend}, "
          f"{args.layers} layers, a window every {args.every} steps")  # fmt: skip
    results = {}
    for name, cfg, on_demand in (
        ("device only (default)", base, args.steps // 2),
        ("cpu ops too", dataclasses.replace(base, profile_cpu_ops_on_cuda=True), -1),
    ):
        before = len(sink.events)
        times, indices = run_arm(cfg, step, args.steps, on_demand)
        time.sleep(0.5)
        results[name] = report(name, sink.events[before:], times, indices)
    dist.destroy_process_group()

    checks = []
    dev = results["device only (default)"]
    periodic = [v for k, v in dev.items() if k.startswith("p")]
    checks.append(("periodic windows taken (device only arm)", bool(periodic)))
    checks.append(("each periodic window device_only, GPU kernels, no cpu_op rows", bool(periodic)
                   and all(w.device_only and c["kernel"] and not c["cpu_op"]
                           for w, c, _ in periodic)))  # fmt: skip
    demand = dev.get("d-gpucheck")
    checks.append(("the on-demand window: cpu_op rows with shapes, not device_only",
                   demand is not None and not demand[0].device_only and demand[1]["cpu_op"] > 0
                   and demand[2] > 0))  # fmt: skip
    opted = [v for k, v in results["cpu ops too"].items() if k.startswith("p")]
    checks.append(("profile_cpu_ops_on_cuda: periodic windows with cpu_op and kernel rows",
                   bool(opted) and all(not w.device_only and c["cpu_op"] and c["kernel"]
                                       for w, c, _ in opted)))  # fmt: skip
    for what, ok in checks:
        print(f"{'ok' if ok else 'FAILED':6s} {what}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
