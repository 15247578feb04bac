"""TCP throughput between two hosts, both ways, run by the two hosts' node daemons.

Group timings and the job's own connections can leave a slow link's end undecided (a ring gives
each host one connection in and one out; :mod:`diag.diagnose.detectors.link_hosts`). This probe
measures one host pair directly: the analyzer asks one daemon for a ``sink`` and the other for a
``source`` on the same ``port`` (:mod:`diag.analyzer.linkprobe`), and each end reports the rate
at which it *received*:

- the sink listens on ``bind:port`` (an address of its own host: the one the job's connections
  use), accepts one connection from ``peer`` (others are closed unread), and reads until the
  source stops sending: the rate ``peer -> bind``; then it sends for the same time and bytes;
- the source connects to ``peer:port`` (retrying while the sink starts: its daemon may still be
  running the previous probe), sends for ``duration_s`` or ``size_bytes``, whichever comes
  first, then reads what the sink sends back: the rate ``peer -> bind``.

The rate is bytes over the time from the first byte received to the last, so connection set-up
and the sender's start are not counted. Small by design (1 MiB or a quarter of a second each way
by default): a probe runs beside a live job at nice 19, and what it sends into a limited link
queues with the job's traffic (8 MiB per pair held a tbf-limited link busy for seconds and slowed
the job's steps about 1.5x while a round ran, on four emulated nodes); a limited link still
shows as a rate many times below its peers' at this size. Addresses are IP
literals (no name lookups), ports 1024 and up; what is sent is zeros.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from probes.base import ProbeContext, ProbeResult, params_dict

ROLES = ("sink", "source")
CHUNK = 64 * 1024
MAX_SIZE = 256 << 20
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
    size_bytes: int = 1 << 20  # most bytes sent each way
    duration_s: float = 0.25  # most time spent sending each way
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


def _send(sock: socket.socket, size: int, duration_s: float) -> int:
    """Zeros until ``size`` bytes or ``duration_s`` have gone; then no more writes."""
    buf = bytes(CHUNK)
    sent, end = 0, time.monotonic() + duration_s
    while sent < size and time.monotonic() < end:
        sent += sock.send(buf[: min(CHUNK, size - sent)])
    sock.shutdown(socket.SHUT_WR)
    return sent


def _receive(sock: socket.socket) -> tuple[int, float]:
    """Read to the end: the bytes and the seconds from the first byte to the last."""
    got, first, last = 0, 0.0, 0.0
    while True:
        data = sock.recv(CHUNK)
        if not data:
            return got, last - first
        now = time.perf_counter()
        if not got:
            first = now
        got += len(data)
        last = now


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET


def _as_sink(p: TcpPairParams, deadline: float) -> tuple[int, float]:
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
            got, secs = _receive(conn)
            _send(conn, p.size_bytes, p.duration_s)
            return got, secs


def _as_source(p: TcpPairParams, deadline: float) -> tuple[int, float]:
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
        _send(sock, p.size_bytes, p.duration_s)
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
            got, secs = run(params, deadline)
        except TimeoutError as exc:
            detail = str(exc) if str(exc) != "timed out" else f"{params.peer} stopped mid-transfer"
            return [ProbeResult(**base, status="timeout", detail=detail)]
        except OSError as exc:
            detail = f"{type(exc).__name__}: {exc.strerror or exc}"
            return [ProbeResult(**base, status="failed", detail=detail)]
        if got <= 0:
            return [ProbeResult(**base, status="failed", detail="the peer sent nothing")]
        rate = got / max(secs, 1e-6) / 1e6
        detail = f"{got} bytes in {secs * 1e3:.1f} ms"
        return [ProbeResult(**base, status="ok", value=rate, detail=detail)]
