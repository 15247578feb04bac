"""Torch's profiler race with gloo, measured: how many collective records end after their window
was switched off, without and with :mod:`diag.hook.c10d_workers`' wait.

A 4-rank CPU DDP job (gloo, small buckets: 4 all-reduces a step) takes a one-step profiler window
every step (``torch.profiler.profile``). At each window's end a marker record is taken just
before the stop; a ``gloo:*`` record that ends after the marker's start ended after the window
was being switched off: its worker wrote into records the stop frees (the late write that
corrupted this project's test jobs). ``--mode plain`` stops at once, as ``torch.profiler`` does;
``--mode settle`` first calls :meth:`CollectiveWorkers.settle` (default timeout), as the hook
does. ``--hold-ms`` adds a future callback that holds the worker that long after the waiting
thread was released (0: the natural race only). ``--hog`` runs a CPU-bound process beside the
job (the busy host where the race was seen). Each mode runs in its own torchrun job; a job that
dies is reported with its exit code. Measured numbers only.

    .venv/bin/python bench/profiler_settle.py [--steps 300] [--hold-ms 0] [--hog]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

JOB = r"""
import json, os, sys, time
sys.path.insert(0, REPO)
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from diag.hook.c10d_workers import CollectiveWorkers
steps, mode, hold = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]) / 1000
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
ddp = DDP(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)]), bucket_cap_mb=0.01)
if hold > 0:
    def hook(state, bucket):
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        out = fut.then(lambda f: f.value()[0].div_(world))
        fut.add_done_callback(lambda f: time.sleep(hold))
        return out
    ddp.register_comm_hook(None, hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(32, 64)
workers = CollectiveWorkers()
late = total = 0
waits, unsettled = [], 0
for step in range(steps):
    workers.observe()
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    ddp(x).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    if mode == "settle":
        s = workers.settle()
        waits.append(s.waited_ns)
        unsettled += s.unsettled
    with torch.profiler.record_function("window_end_marker"):
        pass
    prof.stop()
    events = prof.events()
    end = max(e.time_range.start for e in events if e.name == "window_end_marker")
    gloo = [e for e in events if e.name.startswith("gloo:")]
    total += len(gloo)
    late += sum(1 for e in gloo if e.time_range.end > end)
with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
    json.dump({"rank": rank, "late": late, "records": total, "waits_ns": waits,
               "unsettled": unsettled}, f)
time.sleep(0.3)
os._exit(0)  # skip teardown with a Python callback registered on gloo's threads
"""


def run(mode: str, steps: int, hold_ms: float, work: Path) -> dict:
    script = work / "job.py"
    out = work / mode
    out.mkdir()
    script.write_text(f"REPO = {str(REPO)!r}\nOUT = {str(out)!r}\n" + JOB)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
           str(script), str(steps), mode, str(hold_ms)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    waits = sorted(w for r in rows for w in r["waits_ns"])
    return {
        "mode": mode,
        "exit": proc.returncode,
        "ranks": len(rows),
        "windows": steps * len(rows),
        "records": sum(r["records"] for r in rows),
        "late": sum(r["late"] for r in rows),
        "unsettled": sum(r["unsettled"] for r in rows),
        "wait_median_ms": waits[len(waits) // 2] / 1e6 if waits else 0.0,
        "wait_p99_ms": waits[int(len(waits) * 0.99)] / 1e6 if waits else 0.0,
        "wait_max_ms": waits[-1] / 1e6 if waits else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hold-ms", type=float, default=0.0)
    ap.add_argument("--hog", action="store_true", help="a CPU-bound process beside the job")
    ap.add_argument("--modes", nargs="+", default=["plain", "settle"])
    args = ap.parse_args()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = [run(m, args.steps, args.hold_ms, Path(tmp)) for m in args.modes]
    finally:
        if hog is not None:
            hog.kill()
    print(f"{args.steps} one-step windows per rank, 4 ranks, hold {args.hold_ms:g} ms, "
          f"hog {'on' if args.hog else 'off'}")  # fmt: skip
    print(f"{'mode':8} {'exit':>4} {'windows':>8} {'gloo records':>12} {'ended late':>10} "
          f"{'unsettled':>9} {'wait med/p99/max ms':>20}")  # fmt: skip
    for r in results:
        share = f"{r['late']} ({100 * r['late'] / max(1, r['records']):.1f}%)"
        waits = f"{r['wait_median_ms']:.2f}/{r['wait_p99_ms']:.2f}/{r['wait_max_ms']:.2f}"
        print(f"{r['mode']:8} {r['exit']:>4} {r['windows']:>8} {r['records']:>12} {share:>10} "
              f"{r['unsettled']:>9} {waits:>20}")  # fmt: skip


if __name__ == "__main__":
    main()
