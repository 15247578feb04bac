"""One real ``torchrun --nproc_per_node 2`` of the demo with the hook injected by sitecustomize.

Checks what only a real multi-process job shows: one step event per step and rank with the losses
the script printed, DDP's gradient all-reduces (C++, invisible to Python) recorded from the Flight
Recorder with the same sequence ids on both ranks, and the compute / collective-wait split naming
the rank that was made slow (``--slow-rank 1``): its compute is the largest, its wait the smallest.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from diag import schema
from diag.selftest.workloads import TRAIN_DDP
from tests.fakes.hook_sink import FrameSink, of_kind
from tests.fakes.paths import REPO

STEPS = 30


@pytest.mark.integration
def test_torchrun_two_ranks_slow_rank_split() -> None:
    short = Path(tempfile.mkdtemp(prefix="dh"))  # AF_UNIX paths must stay short
    sink = FrameSink(short / "daemon.sock")
    sink.start()
    env = dict(os.environ)
    env.update(
        DIAG_HOOK="1",
        DIAG_HOOK_DAEMON_SOCK=sink.path,
        DIAG_HOOK_JOB_ID="itest",
        DIAG_HOOK_FR_POLL_INTERVAL_S="0.5",
        PYTHONPATH=os.pathsep.join([str(REPO / "diag/hook/inject"), str(REPO)]),
    )
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(TRAIN_DDP),
        "--steps", str(STEPS), "--slow-rank", "1",
        "--slow-ms", "30", "--save-every", "10", "--ckpt-dir", str(short),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    finally:
        events = sink.close()
        shutil.rmtree(short, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "diag: hook not installed" not in proc.stderr

    printed = {
        (int(r), int(s)): float(v)
        for r, s, v in re.findall(r"rank (\d+) step (\d+) loss (\S+)", proc.stdout)
    }
    assert len(printed) == 2 * STEPS
    steps = of_kind(events, schema.StepEvent)
    assert sorted((s.rank, s.step) for s in steps) == sorted(printed)
    assert all(s.loss == printed[(s.rank, s.step)] for s in steps)
    assert all(s.job_id == "itest" for s in events)
    assert {i.rank for i in of_kind(events, schema.RankInfo) if i.backend == "gloo"} == {0, 1}
    assert len(of_kind(events, schema.CheckpointEvent)) == STEPS // 10  # rank 0 saves

    reduces = {
        r: {c.seq_id: c for c in of_kind(events, schema.CollectiveEvent)
            if c.rank == r and c.op == "all_reduce" and c.step >= 0}
        for r in (0, 1)
    }  # fmt: skip
    assert len(reduces[0]) >= STEPS and reduces[0].keys() == reduces[1].keys()
    for seq_id, c0 in reduces[0].items():
        c1 = reduces[1][seq_id]
        assert (c0.origin, c0.pg_size, c0.num_bytes) == ("fr", 2, c1.num_bytes)

    def median(rank: int, field: str) -> float:
        return statistics.median(getattr(s, field) for s in steps if s.rank == rank and s.step > 0)

    split = {r: (median(r, "compute_ns") / 1e6, median(r, "collective_wait_ns") / 1e6)
             for r in (0, 1)}  # fmt: skip
    print("median (compute_ms, collective_wait_ms) by rank:", split)
    assert split[1][0] > split[0][0]
    assert split[0][1] > split[1][1]


@pytest.mark.integration
def test_a_stopped_demo_job_leaves_its_newest_checkpoint_not_all(tmp_path: Path) -> None:
    """Most tests and users stop the demo workload before its end (SIGTERM: no cleanup runs):
    its temporary checkpoint folder keeps only the newest save (it kept every one, ~100 MB per
    stopped run in /tmp), and the rank that saves nothing makes no folder."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        str(TRAIN_DDP), "--steps", "100000", "--save-every", "2", "--print-every", "1",
    ]  # fmt: skip
    job = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert job.stdout is not None
        for line in job.stdout:  # saves at steps 0, 2, ..., 20 have been made
            if line.startswith("rank 0 step 21 "):
                break
    finally:
        job.terminate()
        job.wait(timeout=60)
    (folder,) = tmp_path.glob("diag-demo-*")  # rank 0's: the rank that saves nothing has none
    saves = sorted(p.name for p in folder.iterdir())
    assert len(saves) <= 2, saves  # the newest, and the one before when stopped between the two
