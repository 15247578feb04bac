"""The job's TCP connections and the node's ports: real sockets of this process read from the
kernel (sock_diag), fake /sys trees for NIC and InfiniBand counters."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from diag import schema
from diag.daemon.collectors.inet_diag import parse_msg, read_tcp
from diag.daemon.collectors.net import NetCollector

S = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100 * S

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback, both ends in this process."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    yield client, accepted
    for s in (client, accepted, server):
        s.close()


def _move(src: socket.socket, dst: socket.socket, n: int) -> None:
    src.sendall(b"x" * n)
    got = 0
    while got < n:
        got += len(dst.recv(1 << 16))


def test_read_tcp_sees_this_process_connection_as_ss_does(pair) -> None:
    client, accepted = pair
    _move(client, accepted, 300_000)
    inode = os.fstat(client.fileno()).st_ino
    (mine,) = [s for s in read_tcp() if s.inode == inode]
    assert (mine.local_ip, mine.local_port) == client.getsockname()
    assert (mine.remote_ip, mine.remote_port) == client.getpeername()
    assert mine.bytes_acked >= 300_000 and mine.rtt_us > 0 and mine.snd_cwnd > 0
    if mine.bytes_sent:  # kernels before 4.19 have no tcpi_bytes_sent
        assert mine.bytes_sent >= 300_000


def test_the_collector_reports_a_rank_connections_per_peer_as_deltas(tmp_path: Path, pair) -> None:
    client, accepted = pair
    clock = Clock()
    net = NetCollector(sys_root=tmp_path, clock=clock)
    assert list(net.collect(1)) == []  # nothing tracked yet
    net.track(os.getpid(), rank=3, local_rank=1)
    _move(client, accepted, 100_000)
    assert list(net.collect(2)) == []  # first sight of the sockets: primes their counters
    _move(client, accepted, 250_000)
    _move(accepted, client, 50_000)
    clock.now += 2 * S
    events = [e for e in net.collect(3) if isinstance(e, schema.TcpPeerSample)]
    (peer,) = [e for e in events if e.remote_ip == "127.0.0.1"]
    assert (peer.rank, peer.local_rank, peer.interval_ns) == (3, 1, 2 * S)
    assert peer.num_conns >= 2  # both ends are this process's
    # the interval's bytes only (both directions of the pair belong to this rank)
    assert 300_000 <= peer.bytes_acked < 400_000 + 10_000
    assert peer.rtt_us > 0 and peer.min_rtt_us > 0 and peer.num_retrans == 0


def test_a_rank_whose_process_is_gone_is_forgotten(tmp_path: Path) -> None:
    net = NetCollector(proc_root=tmp_path / "proc", sys_root=tmp_path, clock=Clock())
    net.track(999_999, rank=0, local_rank=0)
    assert list(net.collect(1)) == [] and net._ranks == {}


def _write(root: Path, values: dict[str, int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (root / name).write_text(f"{value}\n")


def test_nic_and_infiniband_counters_become_rates_and_counts(tmp_path: Path) -> None:
    eth = tmp_path / "class/net/eth0/statistics"
    lo = tmp_path / "class/net/lo/statistics"
    ib = tmp_path / "class/infiniband/mlx5_0/ports/1/counters"
    idle = tmp_path / "class/net/eth1/statistics"
    base_eth = dict(rx_bytes=1000, tx_bytes=2000, rx_dropped=0, tx_dropped=0, rx_errors=0,
                    tx_errors=0)  # fmt: skip
    base_ib = dict(port_rcv_data=100, port_xmit_data=100, port_rcv_errors=0, symbol_error=0,
                   link_downed=0, port_xmit_discards=0, port_xmit_wait=10)  # fmt: skip
    _write(eth, base_eth)
    _write(lo, base_eth)
    _write(idle, base_eth)
    _write(ib, base_ib)
    clock = Clock()
    net = NetCollector(sys_root=tmp_path, clock=clock, read=list)
    assert list(net.collect(1)) == []
    _write(eth, {**base_eth, "rx_bytes": 5000, "tx_bytes": 2000 + 8000, "rx_dropped": 3})
    _write(lo, {**base_eth, "rx_bytes": 10**9})
    _write(ib, {**base_ib, "port_rcv_data": 100 + 500, "symbol_error": 2, "port_xmit_wait": 70})
    clock.now += 2 * S
    events = {e.device: e for e in net.collect(2) if isinstance(e, schema.NicSample)}
    assert set(events) == {"eth0", "mlx5_0"}  # lo is left out, an idle port says nothing
    e = events["eth0"]
    assert (e.rx_bytes_per_s, e.tx_bytes_per_s, e.num_drops, e.num_errors) == (2000, 4000, 3, 0)
    i = events["mlx5_0"]
    assert (i.port, i.link_layer, i.rx_bytes_per_s) == (1, "infiniband", 1000.0)
    assert (i.num_errors, i.num_xmit_wait) == (2, 60)


def test_short_or_truncated_messages_do_not_break_the_reader() -> None:
    assert parse_msg(b"\x02\x01") is None
    # a message with no INET_DIAG_INFO attribute: the statistics read as 0
    head = struct.pack("=BBBB", 2, 1, 0, 0) + struct.pack(">HH", 1234, 80)
    head += bytes([127, 0, 0, 1]) + bytes(12) + bytes([10, 0, 0, 2]) + bytes(12) + bytes(12)
    head += struct.pack("=IIIII", 0, 0, 7, 0, 42)
    s = parse_msg(head)
    assert s is not None and (s.local_ip, s.remote_ip, s.remote_port, s.inode) == (
        "127.0.0.1", "10.0.0.2", 80, 42,
    )  # fmt: skip
    assert (s.send_queue, s.rtt_us, s.bytes_sent) == (7, 0, 0)


def test_an_interval_of_zero_turns_the_collector_off_with_a_reason() -> None:
    from diag.config import DaemonConfig
    from diag.errors import CollectorUnavailable

    with pytest.raises(CollectorUnavailable, match="net_interval_s = 0"):
        NetCollector.from_config(DaemonConfig(net_interval_s=0))
