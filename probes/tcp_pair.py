"""TCP throughput between two hosts, both ways, run by the two hosts' node daemons.

Group timings and the job's own connections can leave a slow link's end undecided (a ring gives
each host one connection in and one out; :mod:`diag.diagnose.detectors.link_hosts`). This probe
measures one host pair directly: the analyzer asks one daemon for a ``sink`` and the other for a
``source`` on the same ``port`` (:mod:`diag.analyzer.linkprobe`), and each end reports the rate
at which it *received*:

- the sink listens on ``bind:port`` (an address of its own host: the one the job's connections
  use), accepts one connection from ``peer`` (others are closed unread), and receives; then it
  sends the same way;
- the source connects to ``peer:port`` (retrying while the sink starts: its daemon may still be
  running the previous probe), sends, then receives.

Each way goes in ``bursts`` bursts of ``size_bytes`` (no new burst after ``duration_s``), each
timed **by the sender** from its first byte to the receiver's one-byte acknowledgement of the
last, the next burst starting only then; the sender hands its best burst's rate to the receiver,
which reports it. The best of several, timed at the sender: a limit on the link caps every
burst, while a CPU taken from either end (a nice-19 probe beside a busy job) only ever stretches
some; and a receiver that was not running when the data came cannot make a burst look faster
than the link (timed at the receiver, the bytes it found waiting were counted as if they had
arrived at once). Measured on four emulated nodes beside a CPU hog, single 1 MiB transfers timed
at the receiver ranged from 45 to 1,291 MB/s between healthy hosts (a lost time slice is longer
than the transfer), so the pair of a starved probe looked slower than the limited host.
Small by design (3 bursts of 1 MiB each way by default): a probe runs beside a live job at nice
19, and what it sends into a limited link queues with the job's traffic (8 MiB per pair held a
tbf-limited link busy for seconds and slowed the job's steps about 1.5x while a round ran, on
four emulated nodes); a limited link still shows as a rate many times below its peers' at this
size. Addresses are IP
literals (no name lookups), ports 1024 and up; what is sent is zeros.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from probes.base import ProbeContext, ProbeResult, params_dict

ROLES = ("sink", "source")
CHUNK = 64 * 1024
MAX_SIZE = 256 << 20
MAX_BURSTS = 8
_HEAD = struct.Struct(">Q")  # a burst's length (0: no more bursts, the best rate follows)
_RATE = struct.Struct(">d")  # the sender's best burst, bytes per second
_ACK = b"\x06"
CONNECT_RETRY_S = 0.1


def _ip(text: str, what: str) -> None:
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{what} must be an IP address, got {text[:60]!r}") from None
    if addr.is_multicast or addr.is_unspecified:
        raise ValueError(f"{what} must be a unicast address, got {text}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TcpPairParams:
    role: str = "sink"
    peer: str = "127.0.0.1"  # the other end's address
    bind: str = "127.0.0.1"  # this end's address (the sink listens on it)
    port: int = 0  # the sink's port (both ends get the same)
    size_bytes: int = 1 << 20  # bytes of one burst
    duration_s: float = 0.25  # no new burst after this long sending each way
    bursts: int = 3  # timed bursts each way; the best is reported
    timeout_s: float = 30.0  # for the whole probe, waiting for the other end included

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role[:20]!r}")
        _ip(self.peer, "peer")
        _ip(self.bind, "bind")
        if not 1024 <= self.port <= 65535:
            raise ValueError(f"port must be in [1024, 65535], got {self.port}")
        if not 1 <= self.size_bytes <= MAX_SIZE or not 0 < self.duration_s <= 10:
            raise ValueError("size_bytes must be in [1, 256 MiB] and duration_s in (0, 10]")
        if not 0 < self.timeout_s <= 300:
            raise ValueError("timeout_s must be in (0, 300]")
        if not 1 <= self.bursts <= MAX_BURSTS:
            raise ValueError(f"bursts must be in [1, {MAX_BURSTS}], got {self.bursts}")


@dataclass(frozen=True, slots=True)
class Way:
    """One direction's outcome: its bursts' rates (bytes/s, as the sender timed them), the
    sender's best (what the receiver reports) and the bytes received."""

    best: float
    received: int
    bursts: int


def _send(sock: socket.socket, p: TcpPairParams) -> None:
    """``p.bursts`` timed bursts of ``p.size_bytes`` zeros (none started after ``p.duration_s``),
    each acknowledged before the next; then the end mark and the best rate."""
    buf = bytes(CHUNK)
    best, end = 0.0, time.monotonic() + p.duration_s
    for i in range(p.bursts):
        if i and time.monotonic() >= end:
            break
        t0 = time.perf_counter()
        sock.sendall(_HEAD.pack(p.size_bytes))
        left = p.size_bytes
        while left:
            left -= sock.send(buf[: min(CHUNK, left)])
        if _exactly(sock, 1) != _ACK:
            raise ConnectionError("the peer did not acknowledge a burst")
        best = max(best, p.size_bytes / max(time.perf_counter() - t0, 1e-9))
    sock.sendall(_HEAD.pack(0) + _RATE.pack(best))


def _receive(sock: socket.socket) -> Way:
    """The peer's bursts, each acknowledged once whole; the best rate it measured."""
    got = bursts = 0
    while True:
        (size,) = _HEAD.unpack(_exactly(sock, _HEAD.size))
        if not size:
            (best,) = _RATE.unpack(_exactly(sock, _RATE.size))
            return Way(best=best, received=got, bursts=bursts)
        if size > MAX_SIZE:
            raise ConnectionError(f"the peer announced a burst of {size} bytes")
        left = size
        while left:
            data = sock.recv(min(CHUNK, left))
            if not data:
                raise ConnectionError("the peer stopped mid-burst")
            left -= len(data)
        got += size
        bursts += 1
        sock.sendall(_ACK)


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            raise ConnectionError("the peer closed the connection")
        out += data
    return out


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET


def _as_sink(p: TcpPairParams, deadline: float) -> Way:
    with socket.socket(_family(p.bind), socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((p.bind, p.port))
        srv.listen(1)
        peer = ipaddress.ip_address(p.peer)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no connection from {p.peer} within the timeout")
            srv.settimeout(left)
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                raise TimeoutError(f"no connection from {p.peer} within the timeout") from None
            if ipaddress.ip_address(addr[0].removeprefix("::ffff:")) == peer:
                break
            conn.close()  # not the peer asked for: closed unread
        with conn:
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            way = _receive(conn)
            _send(conn, p)
            return way


def _as_source(p: TcpPairParams, deadline: float) -> Way:
    while True:
        sock = socket.socket(_family(p.peer), socket.SOCK_STREAM)
        try:
            sock.bind((p.bind, 0))
            sock.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
            sock.connect((p.peer, p.port))
            break
        except (ConnectionRefusedError, TimeoutError):
            sock.close()
            if time.monotonic() + CONNECT_RETRY_S >= deadline:
                raise TimeoutError(f"{p.peer}:{p.port} did not accept within the timeout") from None
            time.sleep(CONNECT_RETRY_S)
        except BaseException:
            sock.close()
            raise
    with sock:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _send(sock, p)
        return _receive(sock)


class TcpPairProbe:
    name: ClassVar[str] = "tcp_pair"
    Params: ClassVar[type] = TcpPairParams

    def run(self, params: TcpPairParams, ctx: ProbeContext) -> list[ProbeResult]:
        deadline = time.monotonic() + params.timeout_s
        base: dict[str, Any] = {
            "probe": self.name,
            "device": f"tcp {params.peer} -> {params.bind}",
            "metric": "tcp_recv",
            "unit": "MB/s",
            "params": params_dict(params),
        }
        try:
            run = _as_sink if params.role == "sink" else _as_source
            way = run(params, deadline)
        except TimeoutError as exc:
            detail = str(exc) if str(exc) != "timed out" else f"{params.peer} stopped mid-transfer"
            return [ProbeResult(**base, status="timeout", detail=detail)]
        except OSError as exc:
            detail = f"{type(exc).__name__}: {exc.strerror or exc}"
            return [ProbeResult(**base, status="failed", detail=detail)]
        if way.received <= 0:
            return [ProbeResult(**base, status="failed", detail="the peer sent nothing")]
        if not 0 < way.best < 1e13:  # NaN, inf or negative: not a rate any link has
            detail = f"the peer handed over no usable rate ({way.best!r})"
            return [ProbeResult(**base, status="failed", detail=detail)]
        rate = way.best / 1e6
        detail = (
            f"{way.received} bytes in {way.bursts} burst{'s' if way.bursts != 1 else ''}; "
            f"the best {rate:.1f} MB/s, timed by "
            "the sender to the acknowledgement"
        )
        return [ProbeResult(**base, status="ok", value=rate, detail=detail)]
