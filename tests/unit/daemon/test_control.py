"""The control path end to end: a real analyzer (``serve`` on 127.0.0.1:0), a real daemon polling
it, and fake hooks that read control frames back from their daemon connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from diag.analyzer.service import serve
from diag.config import AnalyzerConfig, DaemonConfig
from diag.daemon.daemon import Daemon
from diag.proto import diag_pb2 as pb
from diag.transport import framing as frames
from tests.fakes.daemon_doubles import (
    FakeHook,
    ReadingHook,
    RunningDaemon,
    ServedAnalyzer,
    hook_events,
    wait_for,
)


@pytest.fixture
def analyzer(tmp_path: Path) -> Iterator[ServedAnalyzer]:
    a = ServedAnalyzer(tmp_path / "run")
    yield a
    a.stop()


@pytest.fixture
def daemon(tmp_path: Path, analyzer: ServedAnalyzer) -> Iterator[RunningDaemon]:
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"),
        analyzer=analyzer.target,
        spool_dir=str(tmp_path / "spool"),
        host="node1",
        gpu_backend="none",
        flush_interval_s=0.05,
        rpc_timeout_s=2.0,
    )  # control_poll_interval_s: the default 0.5 s
    running = RunningDaemon(Daemon(cfg, final_flush_s=2.0))
    yield running
    if running.thread.is_alive():
        running.stop()


def _profiles(msgs: list[pb.ControlMessage]) -> list[pb.ProfileRequest]:
    assert all(m.WhichOneof("body") == "profile" for m in msgs)
    return [m.profile for m in msgs]


def test_a_request_reaches_connected_and_later_hooks(
    tmp_path: Path, analyzer: ServedAnalyzer, daemon: RunningDaemon
) -> None:
    early = ReadingHook(tmp_path / "d.sock")
    wait_for(lambda: daemon.daemon.listener.num_open == 1, what="the hook connection")
    assert early.read_for(0.7) == []  # nothing to say yet
    t0 = time.monotonic()
    req = analyzer.core.request_profile(num_steps=2, ranks=[0, 1], at_step=40)
    assert _profiles(early.read_for(2.0, until_count=1)) == [req]
    assert time.monotonic() - t0 < 2.0

    late = ReadingHook(tmp_path / "d.sock")  # connects after the request: gets it on connect
    assert _profiles(late.read_for(1.0, until_count=1)) == [req]
    early.close()
    again = ReadingHook(tmp_path / "d.sock")  # a reconnecting hook gets it again
    assert _profiles(again.read_for(1.0, until_count=1)) == [req]

    second = analyzer.core.request_profile(at_step=50)
    for hook in (late, again):
        assert _profiles(hook.read_for(2.0, until_count=2)) == [req, second]
    # Each message once per connection: the next polls bring nothing new.
    assert len(late.read_for(1.2)) == 2
    stats = daemon.stop()
    assert stats.num_control_messages == 2 and stats.num_control_skipped == 0


def test_expired_requests_are_not_given_to_new_connections(
    tmp_path: Path, analyzer: ServedAnalyzer, daemon: RunningDaemon
) -> None:
    analyzer.core.request_profile(ttl_s=0.8, at_step=50)
    wait_for(lambda: daemon.daemon.num_control_messages == 1, what="the relay")
    time.sleep(0.9)
    late = ReadingHook(tmp_path / "d.sock")
    assert late.read_for(1.0) == []


def test_a_hook_that_never_reads_stalls_nothing(
    tmp_path: Path, analyzer: ServedAnalyzer, daemon: RunningDaemon
) -> None:
    d = daemon.daemon
    stuck = FakeHook(tmp_path / "d.sock")  # never reads
    junk = frames.encode_frame(b"\x00" * (1 << 20))
    # The listener counts a connection open before it has given it an outbox (it asks the daemon
    # for the greeting in between), and a broadcast in that gap reaches nobody: so broadcast until
    # the first frame is queued to the stuck connection, not once num_open says it is there.
    wait_for(lambda: d.listener.broadcast(junk) == 1, timeout_s=60, what="the stuck connection")
    for _ in range(7):  # with the first, far more than its socket buffer and outbox hold
        d.listener.broadcast(junk)
    wait_for(
        lambda: d.listener.num_control_skipped > 0,
        timeout_s=60,
        what="frames skipped for the stuck hook",
    )

    hook = ReadingHook(tmp_path / "d.sock")
    req = analyzer.core.request_profile(at_step=50)
    assert _profiles(hook.read_for(2.0, until_count=1)) == [req]
    # Ingest goes on: the reading hook's events (and the stuck one's) reach the analyzer.
    hook.send(hook_events("node1", 0, 11, range(0, 20)))
    stuck.send(hook_events("node1", 1, 12, range(0, 20)))
    wait_for(
        lambda: (
            analyzer.core.high_water().get("node1/rank0/11") == 19
            and analyzer.core.high_water().get("node1/rank1/12") == 19
        ),
        what="both hooks' events at the analyzer",
    )
    t0 = time.monotonic()
    stats = daemon.stop()
    assert time.monotonic() - t0 < 5.0
    assert stats.num_hook_events == 40 and stats.num_control_messages == 1


def test_an_unreachable_analyzer_only_delays_the_control_path(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = DaemonConfig(
        listen_sock=str(tmp_path / "d.sock"),
        analyzer=f"127.0.0.1:{port}",
        spool_dir=str(tmp_path / "spool"),
        host="node1",
        gpu_backend="none",
        flush_interval_s=0.05,
        control_poll_interval_s=0.1,
        rpc_timeout_s=1.0,
    )
    running = RunningDaemon(Daemon(cfg, final_flush_s=0.5))
    try:
        hook = ReadingHook(tmp_path / "d.sock")
        hook.send(hook_events("node1", 0, 11, range(0, 5)))
        assert hook.read_for(0.5) == []
        wait_for(lambda: running.daemon.listener.num_events == 5, what="events in")
        server, bound, core = serve(
            AnalyzerConfig(bind=f"127.0.0.1:{port}", run_dir=str(tmp_path / "run"))
        )
        try:
            assert bound == port
            req = core.request_profile(at_step=50)
            assert _profiles(hook.read_for(5.0, until_count=1)) == [req]
        finally:
            running.stop()
            server.stop(None).wait()
            core.close()
    finally:
        if running.thread.is_alive():
            running.stop()
