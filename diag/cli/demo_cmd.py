"""``diag demo``: the built-in demonstration, a real 4-rank CPU DDP job with one slow rank.

It runs ``diag/selftest/workloads/train_ddp.py`` (a small model, DDP on gloo) under ``diag run``
with rank 2 doing extra compute every step from step 20 on, and ends with the per-rank table in
which that rank stands out and the finding that names it, its cause and the step it started at."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diag.cli import run_cmd
from diag.selftest.workloads import TRAIN_DDP


def configure(parser: argparse.ArgumentParser) -> None:
    run_cmd.add_run_arguments(parser)
    parser.set_defaults(gpu_backend="fake", fake_gpus=4)
    parser.add_argument("--nproc", type=int, default=4, metavar="N", help="ranks (default 4)")
    parser.add_argument(
        "--steps", type=int, default=60, metavar="N", help="training steps (default 60)"
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


def demo_command(args: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone", "--nnodes", "1", "--nproc_per_node", str(args.nproc),
        str(TRAIN_DDP),
        "--steps", str(args.steps),
        "--slow-rank", str(args.slow_rank),
        "--slow-ms", str(args.slow_ms),
        "--slow-from-step", str(args.slow_from),
        "--print-every", "10",
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        args.out = Path("runs") / f"demo-{run_cmd.new_run_id()}"
    print(
        f"diag demo: {args.nproc} ranks of DDP on gloo (CPU); from step {args.slow_from} rank "
        f"{args.slow_rank} is made slow by {args.slow_ms:.0f} ms of extra compute per step; "
        "GPU telemetry is simulated "
        "(fake backend)",
        flush=True,
    )
    return run_cmd.run_job(demo_command(args), args)
