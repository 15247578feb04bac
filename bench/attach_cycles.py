"""Attach/detach cycles on a live 4-rank CPU torchrun job: does attaching ever hang or kill it?

Starts the demo job (4 ranks, gloo), then injects the real ``diag attach`` payload
(:func:`diag.attach.inject.payload`, the hook with profiler windows every 3 steps) into one worker
after another, ``--cycles`` times. Each hook detaches itself after ``--hold-s`` (its deadline),
so detaches often meet an open profiler window. Counted: injections that returned, injections
that did not return within ``--timeout-s`` (``--host main``; 30 s, diag attach's own limit,
with ``--host idle``) (a hang: the worker is dumped with py-spy and the job
restarted), worker deaths (the job restarted), and the statuses the hooks wrote. ``--host main``
injects into the main thread (how ``diag attach`` did it before), ``--host idle`` into the thread
:func:`diag.attach.inject.host_thread` picks, through :func:`diag.attach.inject.inject` (what
``diag attach`` does now). Measured numbers only.

    .venv/bin/python bench/attach_cycles.py [--cycles 300] [--host idle|main] [--hold-s 0.5]

Needs hypno (Python < 3.14) and ptrace rights over the job (same user).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diag.attach import AttachError, inject
from diag.config import load_config
from diag.selftest.workloads import TRAIN_DDP

RANKS = 4


class Job:
    def __init__(self, work: Path, n: int) -> None:
        self.log = work / f"job{n}.log"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={RANKS}", str(TRAIN_DDP), "--steps", "1000000",
               "--print-every", "100"]  # fmt: skip
        with open(self.log, "wb") as sink:
            self.proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "step 0 loss" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start: {self.log}")
            time.sleep(0.1)

    def workers(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def alive(self) -> bool:
        return self.proc.poll() is None and len(self.workers()) == RANKS

    def kill(self) -> None:
        for pid in self.workers():
            subprocess.run(["kill", "-9", str(pid)], capture_output=True)
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--host", choices=("idle", "main"), default="idle")
    ap.add_argument("--hold-s", type=float, default=0.5)
    ap.add_argument("--timeout-s", type=float, default=15.0)
    args = ap.parse_args()
    injector = inject.choose(sys.version_info[:2])  # one line and exit 2 without an injector
    work = Path(tempfile.mkdtemp(prefix="diag-attach-cycles-"))
    overrides = {
        "daemon_sock": str(work / "no.sock"),
        "job_id": "cycles",
        "trace_dir": str(work / "traces"),
        "profile_first_step": 1,
        "profile_every_steps": 3,
    }
    hook = load_config("hook", overrides=overrides)
    jobs = 1
    job = Job(work, jobs)
    counts: Counter[str] = Counter()
    t0 = time.monotonic()
    for i in range(args.cycles):
        if not job.alive():
            counts["worker died"] += 1
            print(f"cycle {i}: a worker died; log {job.log}", flush=True)
            job.kill()
            jobs += 1
            job = Job(work, jobs)
        workers = job.workers()
        pid = workers[i % len(workers)]
        status = work / f"status-{i}.json"
        spec = {"hook": dataclasses.asdict(hook), "status": str(status), "stop_file": "",
                "owner_pid": 0, "deadline": time.time() + args.hold_s}  # fmt: skip
        tid = pid if args.host == "main" else "idle"
        try:
            if args.host == "main":
                inject.inject_thread(pid, pid, inject.payload(spec), timeout_s=args.timeout_s)
            else:  # what diag attach does (a host thread that ended is retried), 30 s limit
                inject.inject(injector, pid, inject.payload(spec))
            counts["injected"] += 1
        except AttachError as exc:
            if "did not return" in str(exc):
                counts["hung"] += 1
                dump = work / f"hang-{i}.txt"
                spy = Path(sys.executable).parent / "py-spy"
                with open(dump, "w") as f:
                    subprocess.run([str(spy), "dump", "--nonblocking", "--pid", str(pid)], stdout=f,
                                   stderr=subprocess.STDOUT, timeout=60)  # fmt: skip
                print(f"cycle {i}: injection into pid {pid} thread {tid} hung; {dump}", flush=True)
                job.kill()
                jobs += 1
                job = Job(work, jobs)
            else:
                counts["refused"] += 1
                print(f"cycle {i}: {exc}", flush=True)
        time.sleep(0.05)
    time.sleep(args.hold_s + 3)
    if not job.alive():
        counts["worker died"] += 1
    job.kill()
    states = Counter()
    for f in work.glob("status-*.json"):
        try:
            states[json.loads(f.read_text()).get("state", "?")] += 1
        except (OSError, ValueError):
            states["unreadable"] += 1
    print(f"host {args.host}: {args.cycles} cycles in {time.monotonic() - t0:.0f} s on "
          f"{jobs} job(s): injected {counts['injected']}, hung {counts['hung']}, "
          f"worker died {counts['worker died']}, refused {counts['refused']}; hook statuses "
          f"{dict(states)}; work dir {work}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
