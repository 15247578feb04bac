"""``diag demo``: the built-in demonstration, a real 4-rank CPU DDP job with one slow rank.

It runs ``diag/selftest/workloads/train_ddp.py`` (a small model, DDP on gloo) under ``diag run``
with rank 2 doing extra compute every step from step 20 on, and ends with the per-rank table in
which that rank stands out and the finding that names it, its cause and the step it started at.

The job runs until diag has decided (``--steps`` is the cap): the live triage, every second
here, names the slow rank; whether its own device or one of its kernels is to blame takes a
profiler window after the onset, which the closed loop asks for (:mod:`diag.analyzer.autocapture`);
once a live finding names the rank with its cause decided, the demo asks the job to stop (every
rank ends at the same step, ``train_ddp --stop-file``). A fixed 60 steps ended the job ~2 s
after the onset, before any live pass: the verdict then hung on whether the periodic window at
step 20 fell after the onset estimate (half the runs said "undecided between node and kernel")."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from diag.cli import run_cmd
from diag.diagnose.coverage import awaits_window
from diag.findings import Finding
from diag.selftest.workloads import TRAIN_DDP


def configure(parser: argparse.ArgumentParser) -> None:
    run_cmd.add_run_arguments(parser)
    # a pass over this small job costs milliseconds: the live triage every second
    parser.set_defaults(gpu_backend="fake", fake_gpus=4, triage_interval=1.0)
    parser.add_argument("--nproc", type=int, default=4, metavar="N", help="ranks (default 4)")
    parser.add_argument(
        "--steps",
        type=int,
        default=1500,
        metavar="N",
        help="training steps at most (default 1500); the job stops once diag has decided",
    )
    parser.add_argument(
        "--slow-rank", type=int, default=2, metavar="RANK", help="the rank made slow (default 2)"
    )
    parser.add_argument(
        "--slow-ms", type=float, default=40.0, metavar="MS", help="its extra compute per step"
    )
    # --onset, as in ``diag faults run``; --slow-from, its first name, still works
    parser.add_argument(
        "--onset", "--slow-from", dest="slow_from", type=int, default=20, metavar="STEP",
        help="the step it slows down at (default 20)",
    )  # fmt: skip


def demo_command(args: argparse.Namespace, stop_file: Path | None = None) -> list[str]:
    """The demo job; ``stop_file``: it ends early once that file exists."""
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nnodes", "1", "--nproc_per_node", str(args.nproc),
        str(TRAIN_DDP),
        "--steps", str(args.steps),
        "--slow-rank", str(args.slow_rank),
        "--slow-ms", str(args.slow_ms),
        "--slow-from-step", str(args.slow_from),
        "--print-every", "50",
        *(("--stop-file", str(stop_file), "--stop-every", "10") if stop_file else ()),
    ]  # fmt: skip


def decided(f: Finding, rank: int) -> bool:
    """``f`` calls ``rank``'s slowdown its node's or a kernel's, and leaves no question open
    between the two. Another cause about the rank (a data stall, a checkpoint) lets the job run
    on: later passes see more, and the final triage says what it says."""
    return rank in f.ranks and f.cause in ("node", "kernel") and not awaits_window(f)


class StopWhenDecided:
    """A live-triage listener that creates ``stop_file`` (once) when a finding decides about
    ``rank``, and says so."""

    def __init__(self, rank: int, stop_file: Path) -> None:
        self.rank = rank
        self.stop_file = stop_file
        self.finding: Finding | None = None

    def __call__(self, result: Any) -> None:
        if self.finding is not None:
            return
        for f in result.findings:
            if decided(f, self.rank):
                self.finding = f
                self.stop_file.touch()
                print(
                    f"diag demo: live triage decided: {f.cause} ({f.severity}, confidence "
                    f"{f.confidence:.2f}) on rank {self.rank} from step {f.onset_step}; "
                    "stopping the job",
                    flush=True,
                )
                return


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        args.out = Path("runs") / f"demo-{run_cmd.new_run_id()}"
    print(
        f"diag demo: {args.nproc} ranks of DDP on gloo (CPU); from step {args.slow_from} rank "
        f"{args.slow_rank} is made slow by {args.slow_ms:.0f} ms of extra compute per step; "
        "GPU telemetry is simulated (fake backend); "
        + (
            f"the job runs until diag has decided (at most {args.steps} steps)"
            if args.analyzer is None
            else f"with --analyzer the demo does not see the live triage: all {args.steps} steps"
        ),
        flush=True,
    )
    tmp = Path(tempfile.mkdtemp(prefix="diag-demo-stop-"))
    try:
        watch = StopWhenDecided(args.slow_rank, tmp / "stop")
        return run_cmd.run_job(demo_command(args, watch.stop_file), args, on_triage=watch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
