"""``diag run`` end to end: a real 4-rank torchrun job, an unmodified script, the run directory.

One torchrun launch per test (each costs 5-10 s of start-up on two cores).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.store.run_store import RunStore
from tests.fakes.diagproc import Analyzer, diag, env, printed_losses, torchrun

pytestmark = pytest.mark.integration

STEPS = 16
RESTART_STEPS = 120  # test_analyzer_killed_and_restarted_loses_nothing


def test_diag_run_records_every_step_loss_collective_and_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    job = torchrun(
        4, "--steps", str(STEPS), "--slow-rank", "2", "--slow-ms", "40", "--save-every", "5",
        "--print-every", "1",
    )  # fmt: skip
    res = subprocess.run(
        diag("run", "--out", str(out), "--live", "off", "--", *job),
        env=env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "is not torchrun" not in res.stderr
    verdict = [line for line in res.stdout.splitlines() if line.startswith("verdict: ")]
    assert len(verdict) == 1 and "rank 2" in verdict[0], res.stdout[-3000:]
    store = RunStore.open(out)

    steps = store.frame("step")
    assert len(steps) == STEPS * 4
    assert sorted(steps.groupby("rank")["step"].nunique().to_dict().items()) == [
        (r, STEPS) for r in range(4)
    ]
    # The loss the hook saw is exactly the loss the script printed, for every rank and step.
    printed = printed_losses(res.stdout)
    assert len(printed) == STEPS * 4
    for row in steps.itertuples():
        want = printed[(row.rank, row.step)]
        assert row.loss == want or (math.isnan(want) and math.isnan(row.loss))
    # Phases partition the step; compute and wait split it.
    assert (steps["data_wait_ns"] > 0).mean() > 0.9
    parts = steps[["data_wait_ns", "forward_ns", "backward_ns", "optimizer_ns", "checkpoint_ns",
                   "other_ns"]].sum(axis=1)  # fmt: skip
    assert ((parts - steps["duration_ns"]).abs() <= 1000).all()

    # DDP's gradient all-reduces, issued from C++, come from the Flight Recorder on every rank,
    # matched across ranks by sequence id.
    coll = store.frame("collective")
    allreduce = coll[coll["op"].str.contains("all_reduce")]
    per_seq = allreduce.groupby("seq_id")["rank"].nunique()
    assert len(per_seq) >= STEPS and (per_seq == 4).all()
    assert (allreduce["num_bytes"] > 0).all()

    ckpt = store.frame("checkpoint")
    saves = ckpt[(ckpt["op"] == "save") & (ckpt["rank"] == 0)]
    assert len(saves) == STEPS // 5
    assert (saves["num_bytes"] > 0).all() and (saves["duration_ns"] > 0).all()

    report = json.loads(
        subprocess.run(
            diag("report", str(out), "--json"), env=env(), capture_output=True, text=True,
            check=True,
        ).stdout
    )  # fmt: skip
    assert report["run"]["world_size"] == 4 and report["run"]["exit_code"] == 0
    assert report["run"]["steps"] == STEPS
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert set(ranks) == {0, 1, 2, 3}
    slow = max(ranks.values(), key=lambda r: r["compute_ms_median"])
    assert slow["rank"] == 2
    fast_wait = min(ranks[r]["wait_ms_median"] for r in (0, 1, 3))
    assert fast_wait > ranks[2]["wait_ms_median"]


def test_analyzer_killed_and_restarted_loses_nothing(tmp_path: Path) -> None:
    analyzer = Analyzer(tmp_path / "store", tmp_path / "analyzer.log").start()
    out = tmp_path / "run"
    # 120 steps: the job must outlast the restart (~7 s after the kill). With 40, on a busy
    # machine the restarted analyzer was not up before the job ended, and the daemon's batches
    # stayed in its spool for the next daemon (kept, but not in this store).
    job = torchrun(2, "--steps", str(RESTART_STEPS), "--slow-rank", "1", "--slow-ms", "60",
                   "--print-every", "1")  # fmt: skip
    proc = subprocess.Popen(
        diag("run", "--out", str(out), "--live", "off", "--analyzer", analyzer.target, "--", *job),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "step 5 " not in _read(out / "logs" / "job.log"):
        time.sleep(0.2)
    analyzer.kill()
    time.sleep(2.0)  # the job goes on; the daemon spools
    analyzer.start()
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    assert analyzer.stop() == 0

    store = RunStore.open(tmp_path / "store")
    steps = store.frame("step")
    assert len(steps) == RESTART_STEPS * 2
    assert not steps.duplicated(["source", "seq"]).any()
    # Every event each hook emitted is stored: its final health report's count matches exactly.
    health = store.frame("hook_health")
    final = health[health["final"]]
    assert len(final) == 2 and (final["num_dropped"] == 0).all()
    for row in final.itertuples():
        stored = sum(
            int((store.frame(kind)["source"] == row.source).sum()) for kind in store.kinds()
        )
        assert stored == row.num_emitted
    assert printed_losses(stdout).keys() == {(int(r.rank), int(r.step)) for r in steps.itertuples()}


def test_daemon_killed_job_keeps_its_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "run"
    job = torchrun(2, "--steps", "60", "--slow-ms", "50", "--slow-rank", "0", "--print-every", "1")
    proc = subprocess.Popen(
        diag("run", "--out", str(out), "--live", "off", "--", *job),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    pid = None
    while time.monotonic() < deadline and pid is None:
        with contextlib.suppress(OSError, ValueError):
            pid = json.loads((out / "run.json").read_text()).get("daemon_pid")
        time.sleep(0.1)
    assert pid, "diag run did not record its daemon"
    while time.monotonic() < deadline and "step 3 " not in _read(out / "logs" / "job.log"):
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    assert "rank 0 step 59 " in stdout and "rank 1 step 59 " in stdout
    assert "daemon had exited" in stderr


def test_diag_run_exits_with_the_jobs_exit_code(tmp_path: Path) -> None:
    code = "import sys; print('hello from the job'); sys.exit(7)"
    res = subprocess.run(
        diag("run", "--out", str(tmp_path / "run"), "--live", "off", "--", sys.executable, "-c",
             code),
        env=env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 7, res.stderr[-3000:]
    assert "hello from the job" in res.stdout
    assert "hello from the job" in (tmp_path / "run" / "logs" / "job.log").read_text()
    # not torchrun: said once on stderr; failed before any step: the job's own last lines shown
    assert "is not torchrun" in res.stderr and "diag.hook.install()" in res.stderr
    assert "the job failed before its first step" in res.stdout
    assert res.stdout.count("hello from the job") == 2  # the job's line, then in the tail
    assert "verdict: no rank reported a step" in res.stdout
    assert f"next: diag triage {tmp_path / 'run'}" in res.stdout


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
