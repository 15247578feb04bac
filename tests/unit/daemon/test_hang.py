"""The daemon on a hang: a hook's HangReport makes the rank watch dump every local rank, and a
rank process that disappears becomes a RankExit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.ranks import RankWatch
from diag.daemon.daemon import Daemon
from tests.fakes.daemon_doubles import AnalyzerServer, FakeHook, RecordingAnalyzer, wait_for

STACK = '[{"pid": 1, "os_thread_id": 1, "thread_name": "MainThread", "frames": []}]'


@pytest.fixture
def analyzer() -> Iterator[AnalyzerServer]:
    server = AnalyzerServer(RecordingAnalyzer())
    yield server
    server.stop()


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
