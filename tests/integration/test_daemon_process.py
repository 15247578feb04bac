"""The daemon with real processes: ``diag daemon`` as a process (no NVML: one note, SIGTERM: exit
0), a hook's HangReport making the rank watch dump a real local rank process and report it when it
disappears, and a real py-spy dumping a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.ranks import RankWatch, find_stack_tool
from diag.daemon.daemon import Daemon
from tests.fakes.daemon_doubles import (
    AnalyzerServer,
    FakeHook,
    RecordingAnalyzer,
    hook_events,
    wait_for,
)
from tests.fakes.paths import REPO

pytestmark = pytest.mark.integration
STACK = '[{"pid": 1, "os_thread_id": 1, "thread_name": "MainThread", "frames": []}]'


@pytest.fixture
def analyzer() -> Iterator[AnalyzerServer]:
    server = AnalyzerServer(RecordingAnalyzer())
    yield server
    server.stop()


@pytest.fixture
def skewed_analyzer() -> Iterator[AnalyzerServer]:
    """An analyzer whose clock is 2 s ahead of the daemon's."""
    server = AnalyzerServer(RecordingAnalyzer(clock_skew_ns=2_000_000_000))
    yield server
    server.stop()


def _cli_daemon(tmp_path: Path, analyzer: AnalyzerServer, *args: str) -> subprocess.Popen[str]:
    """``diag daemon`` as host n9 of job j9, once its socket is up and a hook sent 10 steps."""
    sock = tmp_path / "d.sock"
    cmd = [
        sys.executable, "-m", "diag.cli.main", "daemon", "--listen", str(sock),
        "--analyzer", analyzer.target, "--spool", str(tmp_path / "spool"),
        "--host", "n9", "--job-id", "j9", *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: sock.exists() or proc.poll() is not None, what="the socket")
        hook = FakeHook(sock)
        hook.send(hook_events("n9", 0, 5, range(0, 10)))
        hook.close()
    except BaseException:
        proc.kill()
        raise
    return proc


def test_cli_daemon_reports_missing_nvml_once_and_exits_0_on_sigterm(
    tmp_path: Path, skewed_analyzer: AnalyzerServer
) -> None:
    pytest.importorskip("pynvml")
    proc = _cli_daemon(tmp_path, skewed_analyzer, "--gpu-backend", "nvml")
    try:
        rec = skewed_analyzer.servicer
        wait_for(lambda: len(rec.of_kind(schema.StepEvent)) == 10, what="events")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    gpu_errors = [e for e in rec.of_kind(schema.CollectorError) if e.collector == "gpu"]
    if not gpu_errors:
        pytest.skip("NVML works on this machine")
    (e,) = gpu_errors
    assert e.unavailable and e.message.startswith("no GPU telemetry")
    assert e.host == "n9" and e.job_id == "j9"
    assert err.count("no GPU telemetry") == 1


def test_cli_daemon_flushes_and_exits_when_the_process_that_started_it_is_killed(
    tmp_path: Path, analyzer: AnalyzerServer
) -> None:
    """``diag run``/``diag attach`` killed with SIGKILL cannot stop their daemon: ``--exit-with``
    makes it notice, ship what it holds and exit 0 instead of staying on the node for good."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    proc = _cli_daemon(tmp_path, analyzer, "--gpu-backend", "none", "--exit-with", str(owner.pid))
    try:
        time.sleep(0.5)
        assert proc.poll() is None  # its owner lives: it stays
        owner.kill()
        owner.wait()
        _, err = proc.communicate(timeout=30)
    finally:
        for p in (proc, owner):
            if p.poll() is None:
                p.kill()
    assert proc.returncode == 0, err
    assert len(analyzer.servicer.of_kind(schema.StepEvent)) == 10


def _envelope(rank: int, pid: int, seq: int) -> dict[str, object]:
    return dict(ts_ns=time.time_ns(), host="node1", rank=rank, local_rank=rank,
                source=f"node1/rank{rank}/{pid}", seq=seq)  # fmt: skip


def test_hang_report_brings_py_spy_stacks_and_a_gone_rank_its_exit(
    tmp_path: Path, analyzer: AnalyzerServer
) -> None:
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"), analyzer=analyzer.target,
        spool_dir=str(tmp_path / "spool"), host="node1", flush_interval_s=0.05,
    )  # fmt: skip
    calls: list[list[str]] = []

    def run(cmd: Sequence[str], timeout_s: float) -> tuple[int, str, str]:
        calls.append(list(cmd))
        return 0, STACK.replace('"pid": 1', f'"pid": {cmd[3]}'), ""

    watch = RankWatch(interval_s=0.05, stack_tool="py-spy", run=run)
    daemon = Daemon(cfg, [watch])
    thread = threading.Thread(target=daemon.run)
    thread.start()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hook = FakeHook(tmp_path / "d.sock")
        hook.send([schema.RankInfo(**_envelope(1, worker.pid, 0), pid=worker.pid)])  # type: ignore[arg-type]
        wait_for(lambda: watch.tracked_pids == [worker.pid], what="the rank to be tracked")
        report = schema.HangReport(
            **_envelope(1, worker.pid, 1), pid=worker.pid, stalled_since_ns=1, stall_ns=5,
            threshold_ns=5,
        )  # type: ignore[arg-type]  # fmt: skip
        hook.send([report])
        rec = analyzer.servicer
        wait_for(lambda: bool(rec.of_kind(schema.StackDump)), what="py-spy stacks")
        assert calls == [["py-spy", "dump", "--pid", str(worker.pid), "--json", "--native"]]
        stack = rec.of_kind(schema.StackDump)[0]
        assert (stack.rank, stack.pid, stack.origin, stack.source) == (
            1, worker.pid, "py-spy", daemon.source)  # fmt: skip
        worker.kill()
        worker.wait()
        wait_for(lambda: bool(rec.of_kind(schema.RankExit)), what="the rank's exit")
        (gone,) = rec.of_kind(schema.RankExit)
        assert (gone.rank, gone.pid, gone.observer) == (1, worker.pid, "daemon")
        assert rec.of_kind(schema.HangReport) == [report]  # forwarded unchanged
        hook.close()
    finally:
        worker.kill()
        worker.wait()
        daemon.request_stop()
        thread.join(10)


@pytest.mark.skipif(find_stack_tool("py-spy") is None, reason="py-spy not installed")
def test_real_py_spy_on_a_real_process() -> None:
    code = "import time\ndef blocked():\n    time.sleep(30)\nprint('up', flush=True)\nblocked()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.2)
        watch = RankWatch(stack_tool=find_stack_tool("py-spy"))
        watch.track(proc.pid, 3, 0)
        watch.dump_now([proc.pid])
        stacks = [s for s in watch.collect(1) if isinstance(s, schema.StackDump)]
    finally:
        proc.kill()
        proc.wait()
    if not stacks:
        pytest.skip("py-spy cannot attach here (ptrace not permitted)")
    main = next(s for s in stacks if s.is_main)
    assert main.rank == 3 and main.pid == proc.pid
    assert " blocked" in main.frames and "<string>:3 blocked" in main.frames
