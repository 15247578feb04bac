"""The daemon's Unix socket listener: many hooks, bad frames isolated, atomic socket creation."""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from diag import schema
from diag.daemon.listener import HookListener
from diag.errors import ConfigError
from diag.proto import diag_pb2 as pb
from diag.transport import codec
from diag.transport import framing as frames
from tests.fakes.daemon_doubles import FakeHook, hook_events, wait_for


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.protos: list[pb.Event] = []
        self.events: list[schema.Event] = []

    def __call__(self, protos: list[pb.Event], events: list[schema.Event]) -> None:
        with self.lock:
            self.protos.extend(protos)
            self.events.extend(events)

    def count(self) -> int:
        with self.lock:
            return len(self.events)


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "d.sock"


def test_socket_is_private_and_replaces_a_stale_one(sock_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))
    stale.close()  # a dead daemon's socket file stays behind
    listener = HookListener(sock_path, Sink())
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o600
    listener.stop()
    assert not sock_path.exists()


def test_too_long_path_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="longer than"):
        HookListener(tmp_path / ("x" * 120), Sink())


def test_many_hooks_and_a_malformed_one_is_closed_alone(
    sock_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink = Sink()
    listener = HookListener(sock_path, sink)
    listener.start()
    good = [FakeHook(sock_path) for _ in range(3)]
    bad = FakeHook(sock_path)
    for r, hook in enumerate(good):
        hook.send(hook_events("n", r, 100 + r, range(0, 5)))
    bad.send(hook_events("n", 9, 109, range(0, 2)))
    wait_for(lambda: sink.count() == 17, what="first batches")
    with caplog.at_level(logging.WARNING, logger="diag.daemon.listener"):
        bad.send_raw(frames.encode_frame(b"\xff\xff not a batch"))
        wait_for(lambda: listener.num_malformed == 1, what="malformed frame")
    assert len(caplog.records) == 1 and "malformed" in caplog.records[0].getMessage()
    for r, hook in enumerate(good):  # the others carry on, split frames included
        data = frames.encode_frame(
            codec.encode_batch(hook_events("n", r, 100 + r, range(5, 8)), sender="h", sent_ns=0)
        )
        hook.send_raw(data[:3])
        hook.send_raw(data[3:])
    wait_for(lambda: sink.count() == 26, what="later batches")
    assert listener.num_batches == 7 and listener.num_connections == 4
    # Forwarded unchanged: the protos are the hook's own, source and seq included.
    assert {(p.env.source, p.env.seq) for p in sink.protos} == {
        (e.source, e.seq) for e in sink.events
    }
    for hook in [*good, bad]:
        hook.close()
    listener.stop(grace_s=0.2)


def test_stop_reads_what_hooks_already_sent(sock_path: Path) -> None:
    sink = Sink()
    listener = HookListener(sock_path, sink)
    listener.start()
    hook = FakeHook(sock_path)
    hook.send(hook_events("n", 0, 1, range(0, 100)))
    listener.stop(grace_s=0.5)  # the hook stays connected: grace, then whatever is buffered
    assert sink.count() == 100
    with pytest.raises(OSError):
        FakeHook(sock_path)
    hook.close()


def test_a_request_broadcast_while_a_hook_connects_still_reaches_it(sock_path: Path) -> None:
    """The greeting (retained requests) is prepared while the connection is being set up; a
    request relayed in that moment must reach the new hook as well, not fall between the two."""
    holder: list[HookListener] = []

    def on_connect() -> list[bytes]:
        holder[0].broadcast(frames.encode_frame(b"relayed meanwhile"))
        return [frames.encode_frame(b"retained")]

    listener = HookListener(sock_path, Sink(), on_connect)
    holder.append(listener)
    listener.start()
    hook = FakeHook(sock_path)
    decoder, got = frames.FrameDecoder(), []
    hook.sock.settimeout(10)
    try:
        while len(got) < 2:
            data = hook.sock.recv(4096)
            assert data, f"connection closed after {got}"
            got += decoder.feed(data)
    finally:
        hook.close()
        listener.stop()
    assert sorted(got) == [b"relayed meanwhile", b"retained"]
