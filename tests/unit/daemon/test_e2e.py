"""The daemon end to end in this process: real Unix sockets, a real gRPC analyzer that goes away
and comes back (``diag daemon`` as a process: tests/integration/test_daemon_process.py)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.daemon import Daemon, DaemonStats
from diag.errors import CollectorUnavailable
from diag.proto import diag_pb2 as pb
from tests.fakes.daemon_doubles import (
    AnalyzerServer,
    FakeHook,
    RecordingAnalyzer,
    hook_events,
    wait_for,
)


def config(tmp_path: Path, target: str, **kw: object) -> DaemonConfig:
    values: dict[str, object] = dict(
        listen_sock=str(tmp_path / "d.sock"),
        analyzer=target,
        spool_dir=str(tmp_path / "spool"),
        host="node1",
        job_id="job7",
        gpu_backend="fake",
        fake_gpus=2,
        gpu_interval_s=0.1,
        host_interval_s=0.1,
        flush_interval_s=0.05,
        clock_sync_interval_s=0.3,
        batch_max_events=50,
        rpc_timeout_s=2.0,
    )
    values.update(kw)
    return DaemonConfig(**values)  # type: ignore[arg-type]


class Running:
    """A daemon serving on a thread."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.stats: DaemonStats | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        self.stats = self.daemon.run()

    def stop(self, timeout_s: float = 10.0) -> DaemonStats:
        self.daemon.request_stop()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "daemon did not stop"
        assert self.stats is not None
        return self.stats


@pytest.fixture
def analyzer() -> Iterator[AnalyzerServer]:
    server = AnalyzerServer(RecordingAnalyzer(clock_skew_ns=2_000_000_000))
    yield server
    server.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_outage_and_restart_every_event_arrives_once(
    tmp_path: Path, analyzer: AnalyzerServer
) -> None:
    rec = analyzer.servicer
    running = Running(Daemon.from_config(config(tmp_path, analyzer.target)))
    daemon = running.daemon
    hooks = [FakeHook(tmp_path / "d.sock") for _ in range(2)]
    me = os.getpid()  # rank 0 announces this process, so the host collector samples it

    def send(lo: int, hi: int) -> None:
        for start in range(lo, hi, 10):
            hooks[0].send(hook_events("node1", 0, me, range(start, start + 10), info=start == 0))
            hooks[1].send(hook_events("node1", 1, 424242, range(start, start + 10)))

    def hook_keys() -> set[tuple[str, int]]:
        return {k for k in rec.received() if "/rank" in k[0]}

    send(0, 100)
    wait_for(lambda: len(hook_keys()) == 200, what="events before the outage")
    analyzer.stop()
    send(100, 200)
    wait_for(lambda: daemon.listener.num_events == 400, what="the daemon to read the hooks")
    wait_for(lambda: daemon.shipper.num_failures >= 1, what="a failed send")
    wait_for(lambda: daemon.spool.pending_records > 0, what="spooling")
    assert daemon.spool.pending_records > 0
    analyzer.start()  # same port
    wait_for(lambda: len(hook_keys()) == 400, what="the spool to be replayed")
    for hook in hooks:
        hook.close()
    stats = running.stop()

    keys = rec.received()
    assert max(Counter(keys).values()) == 1
    expected = {
        (f"node1/rank{r}/{pid}", s) for r, pid in ((0, me), (1, 424242)) for s in range(200)
    }
    assert hook_keys() == expected
    # The daemon's own events: its source, seq 0.. without a gap, all delivered by the final flush.
    own = sorted(s for src, s in keys if src == daemon.source)
    assert daemon.source.startswith(f"node1/daemon/{os.getpid()}.")
    assert own == list(range(stats.num_own_events)) and stats.num_own_events > 0
    gpus = rec.of_kind(schema.GpuSample)
    assert {g.gpu_index for g in gpus} == {0, 1}
    assert all(g.job_id == "job7" and g.host == "node1" and g.rank == -1 for g in gpus)
    assert rec.of_kind(schema.HostSample)
    procs = rec.of_kind(schema.ProcSample)
    assert procs and all(p.pid == me and p.rank == 0 for p in procs)
    clocks = rec.of_kind(schema.ClockSync)
    # each estimate within its own bound (the analyzer read its clock somewhere in the round
    # trip: at most half of it off, + 1 ms of rounding), however long a busy machine made the
    # trip (CI beside a busy loop: one estimate was over 100 ms off, so its trip over 200 ms)
    assert clocks and all(
        abs(c.offset_ns - 2_000_000_000) <= c.rtt_ns // 2 + 1_000_000 for c in clocks
    ), [(c.offset_ns, c.rtt_ns) for c in clocks]
    assert not rec.of_kind(schema.CollectorError)
    assert stats.num_batches_pending == 0 and stats.num_malformed_connections == 0
    assert stats.num_hook_events == 400
    assert not (tmp_path / "d.sock").exists()


def test_unsent_batches_stay_in_the_spool_for_the_next_daemon(tmp_path: Path) -> None:
    port = free_port()
    cfg = config(tmp_path, f"127.0.0.1:{port}", gpu_backend="none")
    first = Running(Daemon(cfg, final_flush_s=1.0))  # no collectors; the analyzer is not up yet
    hook = FakeHook(tmp_path / "d.sock")
    hook.send(hook_events("node1", 0, 77, range(0, 50)))
    wait_for(lambda: first.daemon.listener.num_events == 50, what="events in")
    hook.close()
    t0 = time.monotonic()
    stats1 = first.stop()
    assert time.monotonic() - t0 < 3  # shutdown is bounded when the analyzer is away
    assert stats1.num_batches_pending > 0 and stats1.num_batches_sent == 0

    server = AnalyzerServer(RecordingAnalyzer(), port=port)
    try:
        # Same spool dir; another pid, as a restarted daemon has.
        second = Running(Daemon(cfg, pid=os.getpid() + 1))
        rec = server.servicer
        wait_for(lambda: len(rec.of_kind(schema.StepEvent)) == 50, what="replay")
        second.stop()
    finally:
        server.stop()
    assert sorted(e.seq for e in rec.of_kind(schema.StepEvent)) == list(range(50))
    first_own = sorted(s for src, s in rec.received() if src == first.daemon.source)
    assert first_own == list(range(stats1.num_own_events))


class Boom:
    name: ClassVar[str] = "boom"
    interval_s = 0.02

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        raise RuntimeError("disk on fire\nsecond line")

    def close(self) -> None:
        pass


class GoesAway:
    name: ClassVar[str] = "goes_away"
    interval_s = 0.02

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        raise CollectorUnavailable("device removed")

    def close(self) -> None:
        pass


def test_failing_collectors_and_rejected_batches_do_not_stop_the_daemon(
    tmp_path: Path, analyzer: AnalyzerServer, caplog: pytest.LogCaptureFixture
) -> None:
    rec = analyzer.servicer
    daemon = Daemon(config(tmp_path, analyzer.target), [Boom(), GoesAway()])
    daemon.spool.append(pb.EventBatch(schema_version="9.0").SerializeToString())  # refused
    with caplog.at_level(logging.WARNING, logger="diag.daemon"):
        running = Running(daemon)
        wait_for(lambda: len(rec.of_kind(schema.CollectorError)) >= 5, what="collector errors")
        stats = running.stop()
    errors = rec.of_kind(schema.CollectorError)
    boom = [e for e in errors if e.collector == "boom"]
    gone = [e for e in errors if e.collector == "goes_away"]
    assert boom[0].message == "RuntimeError: disk on fire"
    assert len(gone) == 1 and gone[0].unavailable
    lines = [r.getMessage() for r in caplog.records if r.name == "diag.daemon.daemon"]
    assert sum("disk on fire" in ln for ln in lines) == 1
    assert sum("device removed" in ln for ln in lines) == 1
    assert stats.num_batches_rejected == 1


def test_a_clock_sync_during_the_final_flush_is_not_counted_as_sent(
    tmp_path: Path, analyzer: AnalyzerServer
) -> None:
    # CI flake: the shipper synced the clock while draining the last batches; that sample was
    # counted among the daemon's own events but queued after the final flush, so never sent.
    cfg = config(tmp_path, analyzer.target, clock_sync_interval_s=0.001)
    running = Running(Daemon.from_config(cfg))
    hook = FakeHook(tmp_path / "d.sock")
    hook.send(hook_events("node1", 0, 424242, range(20), info=True))
    wait_for(lambda: running.daemon.listener.num_events == 20, what="the daemon to read the hook")
    hook.close()
    stats = running.stop()
    own = sorted(s for src, s in analyzer.servicer.received() if src == running.daemon.source)
    assert own == list(range(stats.num_own_events)) and stats.num_own_events > 0
    assert stats.num_batches_pending == 0


def test_batches_go_by_columns_where_the_analyzer_reads_them_and_by_rows_after_a_downgrade(
    tmp_path: Path,
) -> None:
    """An analyzer of schema 1.13 gets column blocks; replaced on the same port by an older one
    (which skips column blocks as an unknown field and says so by its reply's empty version),
    the batch it did not read goes again as rows: every event arrives once either way."""
    rec = RecordingAnalyzer(version=schema.SCHEMA_VERSION)
    server = AnalyzerServer(rec)
    running = Running(Daemon.from_config(config(tmp_path, server.target)))
    daemon = running.daemon
    hook = FakeHook(tmp_path / "d.sock")

    def hook_keys() -> set[tuple[str, int]]:
        return {k for k in rec.received() if "/rank" in k[0]}

    try:
        for start in range(0, 100, 10):
            hook.send(hook_events("node1", 0, 4242, range(start, start + 10), info=start == 0))
        wait_for(lambda: len(hook_keys()) == 100, what="the events by columns")
        assert rec.num_column_batches >= 1 and daemon.shipper.num_sent_columns >= 1
        server.stop()
        rec.version = ""  # an analyzer from before column blocks takes the port
        server.start()
        for start in range(100, 200, 10):
            hook.send(hook_events("node1", 0, 4242, range(start, start + 10)))
        wait_for(lambda: len(hook_keys()) == 200, what="the events by rows")
        hook.close()
        stats = running.stop()
    finally:
        server.stop()
    assert max(Counter(rec.received()).values()) == 1
    assert hook_keys() == {("node1/rank0/4242", s) for s in range(200)}
    assert stats.num_batches_pending == 0
