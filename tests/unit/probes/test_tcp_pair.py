"""The two-host TCP probe on this machine's loopback: both ends measure what they received, a
stranger's connection is closed unread, a missing peer is a timeout with its reason, and what a
request may ask for is bounded (IP literals, ports >= 1024, small sizes)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from probes import DEFAULT_PROBES, PROBES
from probes.base import ProbeContext, ProbeResult, run_guarded
from probes.tcp_pair import TcpPairParams, TcpPairProbe
from probes.validate import RequestRejected, validate

CTX = ProbeContext()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(params: TcpPairParams, out: list[ProbeResult]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.extend(TcpPairProbe().run(params, CTX)))
    t.start()
    return t


def test_a_sink_and_a_source_each_report_the_rate_they_received() -> None:
    port, sink, source = _free_port(), [], []
    common = {"port": port, "size_bytes": 2 << 20, "timeout_s": 20.0}
    threads = [
        _run(TcpPairParams(role="sink", peer="127.0.0.1", bind="127.0.0.1", **common), sink),
        _run(TcpPairParams(role="source", peer="127.0.0.1", bind="127.0.0.1", **common), source),
    ]
    for t in threads:
        t.join(30)
    for (r,) in (sink, source):
        assert r.status == "ok", r.detail
        assert r.value is not None and r.value > 0 and r.unit == "MB/s"
        assert r.device == "tcp 127.0.0.1 -> 127.0.0.1"
        assert f"{3 * (2 << 20)} bytes in 3 bursts" in r.detail, r.detail
    assert sink[0].params["role"] == "sink" and source[0].params["role"] == "source"


def test_the_rate_is_the_best_burst_timed_by_the_sender() -> None:
    # A receiver that was not running when the first burst came (its acknowledgement 0.3 s
    # late) stretches that burst only: the rate handed over is the best burst's, not the mean.
    port, source, size = _free_port(), [], 1 << 20
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", port))
        srv.listen(1)
        params = TcpPairParams(role="source", peer="127.0.0.1", bind="127.0.0.1", port=port,
                               size_bytes=size, duration_s=5.0, timeout_s=20.0)  # fmt: skip
        t = _run(params, source)
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(20)
            rates = []
            while True:
                (n,) = struct.unpack(">Q", _exactly(conn, 8))
                if not n:
                    (best,) = struct.unpack(">d", _exactly(conn, 8))
                    break
                _exactly(conn, n)
                if not rates:
                    time.sleep(0.3)
                rates.append(n)
                conn.sendall(b"\x06")
            conn.sendall(struct.pack(">Q", size) + bytes(size))  # one burst back
            assert _exactly(conn, 1) == b"\x06"
            conn.sendall(struct.pack(">Q", 0) + struct.pack(">d", 1e8))
    t.join(30)
    assert len(rates) == 3
    assert best > 2 * size / 0.3, best  # the first burst alone would be under size / 0.3 s
    (r,) = source
    assert r.status == "ok" and r.value == 100.0 and "in 1 burst;" in r.detail, r.detail


def _exactly(conn: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = conn.recv(n - len(out))
        assert data, "closed early"
        out += data
    return out


def test_the_sink_closes_a_connection_from_another_address_unread() -> None:
    port, sink = _free_port(), []
    params = TcpPairParams(role="sink", peer="127.0.0.9", bind="127.0.0.1", port=port,
                           timeout_s=2.0)  # fmt: skip
    t = _run(params, sink)
    for _ in range(100):
        try:
            stranger = socket.create_connection(
                ("127.0.0.1", port), timeout=1, source_address=("127.0.0.2", 0)
            )
            break
        except ConnectionRefusedError:
            threading.Event().wait(0.02)
    with stranger:
        stranger.settimeout(5)
        assert stranger.recv(16) == b""  # closed by the sink, nothing sent
    t.join(10)
    (r,) = sink
    assert r.status == "timeout" and "127.0.0.9" in r.detail


def test_a_source_without_a_sink_times_out_saying_where_it_tried() -> None:
    port = _free_port()
    params = TcpPairParams(role="source", peer="127.0.0.1", bind="127.0.0.1", port=port,
                           timeout_s=0.5)  # fmt: skip
    (r,) = run_guarded(TcpPairProbe(), params, CTX, 5.0)
    assert r.status == "timeout" and f"127.0.0.1:{port}" in r.detail


def test_a_bind_address_not_on_this_host_fails_with_the_reason() -> None:
    params = TcpPairParams(role="sink", peer="127.0.0.1", bind="192.0.2.1", port=_free_port(),
                           timeout_s=1.0)  # fmt: skip
    (r,) = TcpPairProbe().run(params, CTX)
    assert r.status == "failed" and "address" in r.detail.lower()


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ('{"peer": "example.com", "port": 2000}', "IP address"),
        ('{"peer": "10.0.0.1; id", "port": 2000}', "IP address"),
        ('{"peer": "224.0.0.1", "port": 2000}', "unicast"),
        ('{"peer": "10.0.0.1", "port": 22}', "port"),
        ('{"peer": "10.0.0.1", "port": 2000, "role": "both"}', "role"),
        ('{"peer": "10.0.0.1", "port": 2000, "size_bytes": 1073741824}', "size_bytes"),
        ('{"peer": "10.0.0.1", "port": "2000"}', "is not int"),
        ('{"peer": "10.0.0.1", "port": 2000, "bursts": 100}', "bursts"),
    ],
)
def test_requests_are_bounded_to_ip_literals_unprivileged_ports_and_small_sizes(
    params: str, why: str
) -> None:
    with pytest.raises(RequestRejected, match=why):
        validate("tcp_pair", params)


def test_it_is_registered_but_not_a_preflight_default() -> None:
    assert PROBES["tcp_pair"] is TcpPairProbe and "tcp_pair" not in DEFAULT_PROBES
