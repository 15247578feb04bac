"""The launcher's pieces of ``diag run`` that need no job: flags, worker env, run events."""

from __future__ import annotations

import json
from pathlib import Path

from diag.cli import runtime


def test_run_event_reads_torchrun_shape() -> None:
    launcher = runtime.Launcher(host="h", job_id="j")
    cmd = ["torchrun", "--nnodes=2", "--nproc-per-node", "4", "x.py", "--nnodes", "9"]
    ev = runtime.run_event(launcher, "start", command=cmd)
    assert (ev.nnodes, ev.nproc_per_node, ev.phase, ev.seq) == (2, 4, "start", 0)
    assert ev.source.startswith("h/launcher/")
    assert runtime.run_event(launcher, "end", command=cmd, exit_code=3).seq == 1


def test_worker_env_puts_the_hook_first_and_keeps_user_path() -> None:
    env = runtime.worker_env({"PYTHONPATH": "/user/lib"}, daemon_sock="/tmp/s", job_id="j")
    parts = env["PYTHONPATH"].split(":")
    assert parts[0].endswith("diag/hook/inject") and parts[-1] == "/user/lib"
    assert (env["DIAG_HOOK"], env["DIAG_HOOK_DAEMON_SOCK"], env["DIAG_HOOK_JOB_ID"]) == (
        "1", "/tmp/s", "j",
    )  # fmt: skip
    assert env["KINETO_LOG_LEVEL"] == "6"  # no USDT/STAGE lines around each profiler window
    mine = runtime.worker_env({"KINETO_LOG_LEVEL": "1"}, daemon_sock="/tmp/s", job_id="j")
    assert mine["KINETO_LOG_LEVEL"] == "1"  # the user's choice stands
    # NCCL collective times in the Flight Recorder, unless the user chose (off stays off)
    assert env["TORCH_NCCL_ENABLE_TIMING"] == "1"
    off = runtime.worker_env({"TORCH_NCCL_ENABLE_TIMING": "0"}, daemon_sock="/tmp/s", job_id="j")
    assert off["TORCH_NCCL_ENABLE_TIMING"] == "0"


def test_run_json_is_merged(tmp_path: Path) -> None:
    runtime.write_run_json(tmp_path, run_id="a", command=["x"])
    runtime.write_run_json(tmp_path, exit_code=3)
    assert json.loads((tmp_path / "run.json").read_text()) == {
        "run_id": "a", "command": ["x"], "exit_code": 3,
    }  # fmt: skip


def test_job_log_has_each_line_while_the_job_runs(tmp_path: Path) -> None:
    """``logs/job.log`` follows the job line by line: a user tailing it (or a harness acting at
    a step) sees a line when the job prints it, not once 8 KiB have piled up."""
    import os
    import time
    from types import SimpleNamespace

    log = tmp_path / "job.log"
    read_fd, write_fd = os.pipe()
    stdout = os.fdopen(read_fd, "rb")
    sink = open(log, "ab")  # noqa: SIM115 - the Job owns it
    job = runtime.Job(SimpleNamespace(stdout=stdout, stderr=None), sink)  # type: ignore[arg-type]
    job.sink = lambda line, is_err: None
    try:
        os.write(write_fd, b"rank 0 step 0 loss 1.0\n")
        deadline = time.monotonic() + 30
        while b"step 0" not in log.read_bytes():
            assert time.monotonic() < deadline, "the line never reached the log"
            time.sleep(0.02)
    finally:
        os.close(write_fd)
        for t in job._threads:
            t.join(timeout=10)


def test_what_the_daemon_left_in_its_spool_reaches_the_embedded_analyzer(tmp_path: Path) -> None:
    # A loaded host: the daemon's Ingest calls ran past their deadline and it exited with
    # batches in its spool; diag run / attach own that analyzer and take them before the end.
    from diag.daemon.spool import Spool
    from diag.store.run_store import RunStore
    from tests.fakes.events import Source, batch

    src = Source(rank=1)
    spool = Spool(tmp_path / "spool", fsync=False)
    sent = batch([src.step(0), src.step(1)])
    for b in (sent, batch([src.step(2)]), batch([src.step(3)])):
        spool.append(b.SerializeToString())
    spool.close()
    analyzer = runtime.EmbeddedAnalyzer.start(tmp_path / "run", triage_interval_s=0)
    analyzer._core.ingest(sent)  # delivered before the daemon stopped: not stored twice
    analyzer.stop(tmp_path / "spool")
    steps = RunStore.open(tmp_path / "run").frame("step")
    assert sorted(steps["step"].tolist()) == [0, 1, 2, 3]
    assert Spool(tmp_path / "spool").pending_records == 0  # taken: not replayed again
    # no spool (a run without a daemon) is nothing to take
    other = runtime.EmbeddedAnalyzer.start(tmp_path / "b", triage_interval_s=0)
    try:
        assert other.take_spool(tmp_path / "none") == 0
    finally:
        other.stop()


def test_the_run_ends_in_one_verdict() -> None:
    finding = {"severity": "critical", "cause": "node", "summary": "rank 2 computes 3.10x ..."}
    two = {"ranks": [{"steps": 40}], "findings": [finding, dict(finding, cause="data")]}
    assert runtime.verdict(two) == (
        "verdict: critical node: rank 2 computes 3.10x ... (+1 more: diag triage)"
    )
    clean = {"ranks": [{"steps": 40}, {"steps": 39}], "findings": []}
    assert runtime.verdict(clean) == "verdict: no problem found in 40 steps of 2 ranks"
    assert runtime.verdict(None) == "verdict: unknown (no summary)"


def test_torchrun_is_recognized_behind_wrappers() -> None:
    from diag.cli.run_cmd import is_torchrun

    assert is_torchrun(["torchrun", "--nproc_per_node", "2", "x.py"])
    assert is_torchrun(["/usr/bin/env", "OMP_NUM_THREADS=1", "/opt/bin/torchrun", "x.py"])
    assert is_torchrun(["python", "-m", "torch.distributed.run", "x.py"])
    assert not is_torchrun(["python", "train.py"]) and not is_torchrun(["python", "-m", "x"])
