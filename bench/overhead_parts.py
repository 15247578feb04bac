"""Where the hook's cost on the training thread goes, entry point by entry point.

``bench/overhead.py`` measures whole steps, where the VM's drift between blocks (tens of us at a
~1 ms step) blurs a cost of a few microseconds. This bench times each thing the hook wraps alone,
as the least per-call CPU time of the calling thread over ``--rounds`` rounds of ``--calls``
calls (the least is the cost with the least interference from the host), with the hook off and
on, in one process, world size 1 on gloo:

- ``optimizer``: ``opt.step()`` of a one-layer model (the global step pre/post hooks: step
  accounting, the end of a step and the start of the next);
- ``backward``: ``loss.backward()`` of a one-layer model (the ``torch.autograd.backward``
  wrapper, the loss read, the "local gradients done" mark on the root node, the run-queue reads
  around the gradient sync); the mark is diag's native one where that library is built (the
  hook thread, not started here, would load it: loaded here as it does), else the Python
  pre-hook and callback;
- ``all_reduce``: a Python-level ``dist.all_reduce`` of one float (the collective wrapper,
  including torch's Flight Recorder entry, which the hook enables);
- ``dataloader``: ``next()`` on a DataLoader iterator (the data-wait region);
- ``step``: all of them in one training step, as a job runs them;
- ``step, no backward wrapper``: the same with ``torch.autograd.backward`` left unwrapped;
- ``backward, Python mark`` and ``step, Python mark``: with the Python pre-hook and callback
  for the mark instead of the native one (where the native one is there to compare).

The hook thread is not started (``HookThread.start`` replaced here), so the figures are the
training thread's own code and torch's hook mechanisms, not its competition with the hook
thread for the GIL and the cores (``bench/overhead.py --tier thread`` has that). The numerics
tier is off unless ``--numerics``: its sampled work has its own bench (``--tier numerics``).
Then the function calls the hook adds to a step, counted (``sys.setprofile``: Python functions,
diag's among them, and C functions), the figure a busy host cannot blur; and, for scale, the
Flight Recorder's own cost per collective, in two child processes
(``TORCH_FR_BUFFER_SIZE`` 0 and 512). Measured numbers only, no asserts.

    .venv/bin/python bench/overhead_parts.py [--calls 3000] [--rounds 9] [--numerics]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.config import HookConfig
from diag.hook import core as hook
from diag.hook import opstats as hook_opstats
from diag.hook import thread as hook_thread


def least_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """The least per-call thread CPU time (us) over ``rounds`` rounds of ``calls`` calls."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        c0 = time.thread_time_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time_ns() - c0) / calls)
    return best / 1e3


def calls_per_step(step: Callable[[], object], steps: int) -> Counter[str]:
    """The function calls ``steps`` calls of ``step`` make, per call, by kind (``sys.setprofile``:
    "python" functions, "c" functions, and "diag": the Python ones in diag's modules). A count,
    not a time: the one figure of this bench a busy host cannot blur."""
    seen: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen["python"] += 1
            if f"{os.sep}diag{os.sep}" in frame.f_code.co_filename:
                seen["diag"] += 1
        elif event == "c_call":
            seen["c"] += 1

    step()
    sys.setprofile(profile)
    try:
        for _ in range(steps):
            step()
    finally:
        sys.setprofile(None)
    return Counter({k: v // steps for k, v in seen.items()})


def fr_child(calls: int, rounds: int) -> None:
    """In a child: the least per-call CPU time of a one-float all-reduce (FR size from env)."""
    import torch
    import torch.distributed as dist

    tmp = tempfile.mkdtemp(prefix="diag-bench-fr-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    dist.init_process_group(
        "gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1), rank=0, world_size=1
    )
    t = torch.zeros(1)
    print(f"{least_us(lambda: dist.all_reduce(t), calls, rounds):.3f}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls per round")
    ap.add_argument("--rounds", type=int, default=9, help="rounds; the least is kept")
    ap.add_argument("--numerics", action="store_true", help="the hook with its numerics tier")
    ap.add_argument("--fr-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fr_child:
        fr_child(args.calls, args.rounds)
        return

    hook_thread.HookThread.start = lambda self: None  # type: ignore[method-assign]
    cfg = HookConfig(profile_first_step=10**9, numerics=args.numerics)
    hook.install(cfg)  # before the process group, so the Flight Recorder is sized
    hook.uninstall()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="diag-bench-parts-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # its sockets and store
    dist.init_process_group(
        "gloo", store=dist.FileStore(os.path.join(tmp, "store"), 1), rank=0, world_size=1
    )
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    x, token = torch.randn(2, 4), torch.zeros(1)
    batches = iter(DataLoader(TensorDataset(torch.randn(10**6, 1)), batch_size=1))

    def backward() -> None:
        model(x).sum().backward()

    def step() -> None:
        next(batches)
        opt.zero_grad(set_to_none=False)
        model(x).sum().backward()
        dist.all_reduce(token)
        opt.step()

    parts: dict[str, Callable[[], object]] = {
        "optimizer": opt.step,
        "backward": backward,
        "all_reduce": lambda: dist.all_reduce(token),
        "dataloader": lambda: next(batches),
        "step": step,
    }
    results: dict[tuple[str, str], float] = {}
    counts: dict[str, Counter[str]] = {}
    unwrapped = torch.autograd.backward
    # the hook thread loads diag's native library (the backward's mark in C++) where it is built;
    # not started here, so loaded as it would
    native, why = hook_opstats.load(cfg.opstats_lib)
    arms = ["off", "on", "no_bw"] + (["py_mark"] if native and native.grads_mark() else [])
    for rep in range(2):  # off/on twice, each least kept: a drift between the arms cancels
        for arm in arms if rep % 2 == 0 else arms[::-1]:
            if arm != "off":
                installed = hook.install(cfg)
                if native is not None and arm != "py_mark":
                    installed.use_native(native)
            if arm == "no_bw":  # the hook's own wrapper taken off again (uninstall restores it)
                torch.autograd.backward = unwrapped
            names = {"no_bw": ["step"], "py_mark": ["backward", "step"]}.get(arm, list(parts))
            for name in names:
                us = least_us(parts[name], args.calls, args.rounds)
                key = (name, arm)
                results[key] = min(results.get(key, us), us)
            if rep == 0 and arm in ("off", "on"):
                counts[arm] = calls_per_step(step, 200)
            if arm != "off":
                hook.uninstall()
    numerics = "on" if args.numerics else "off"
    mark = (
        "in C++ (diag's native library)"
        if native is not None and native.grads_mark() is not None
        else f"in Python ({why or 'the native library has none'})"
    )
    print(
        f"the hook's cost on the training thread, per call (least of {args.rounds} rounds of "
        f"{args.calls}; hook thread not started; numerics {numerics}; torch {torch.__version__})"
        f"; the backward's gradients-done mark {mark}"
    )
    for name in parts:
        off, on = results[(name, "off")], results[(name, "on")]
        print(f"  {name:28s} off {off:8.2f} us   on {on:8.2f} us   hook {on - off:+7.2f} us")
    off, on = results[("step", "off")], results[("step", "no_bw")]
    print(f"  {'step, no backward wrapper':28s} off {off:8.2f} us   on {on:8.2f} us   "
          f"hook {on - off:+7.2f} us")  # fmt: skip
    if "py_mark" in arms:
        for name in ("backward", "step"):
            off, on = results[(name, "off")], results[(name, "py_mark")]
            print(f"  {name + ', Python mark':28s} off {off:8.2f} us   on {on:8.2f} us   "
                  f"hook {on - off:+7.2f} us")  # fmt: skip
    summed = sum(results[(n, "on")] - results[(n, "off")] for n in parts if n != "step")
    print(f"  the parts alone sum to {summed:+.2f} us; the step together "
          f"{results[('step', 'on')] - results[('step', 'off')]:+.2f} us")  # fmt: skip
    on, off = counts["on"], counts["off"]
    print(
        f"  function calls the hook adds to a step (sys.setprofile, a count): Python "
        f"{on['python'] - off['python']:+d} (diag's own {on['diag']}), C {on['c'] - off['c']:+d}; "
        f"the step without the hook makes {off['python']} Python and {off['c']} C calls"
    )
    dist.destroy_process_group()

    fr: dict[str, float] = {}
    for size in ("0", "512"):
        env = dict(os.environ, TORCH_FR_BUFFER_SIZE=size)
        cmd = [sys.executable, __file__, "--fr-child", "--calls", str(args.calls),
               "--rounds", str(args.rounds)]  # fmt: skip
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        fr[size] = float(out.strip().splitlines()[-1])
    print(
        f"  the Flight Recorder per collective (no hook): all_reduce {fr['0']:.2f} us without "
        f"it, {fr['512']:.2f} us with 512 entries ({fr['512'] - fr['0']:+.2f} us)"
    )


if __name__ == "__main__":
    main()
