"""The kernel's per-connection TCP statistics, read over netlink ``sock_diag`` (``ss -ti``).

One dump request (``SOCK_DIAG_BY_FAMILY``, ``inet_diag_req_v2`` asking for ``INET_DIAG_INFO``)
per address family returns every TCP socket of the network namespace in the states asked for,
each an ``inet_diag_msg`` (addresses, ports, socket inode, queues) followed by attributes, of
which ``INET_DIAG_INFO`` carries ``struct tcp_info`` (``linux/tcp.h``). :func:`read_tcp` parses
the fields the daemon uses by their fixed offsets; a kernel whose ``tcp_info`` is shorter than a
field's end reports that field as 0 (``tcpi_bytes_sent`` came in 4.19, ``tcpi_busy_time`` in
4.10). Unprivileged processes see every socket's statistics in their namespace.

Written by hand rather than with pyroute2: its ``get_sock_stats`` is marked work in progress
(its signature will change) and it decodes ``tcp_info``'s bit fields wrongly; the protocol is a
120-line, stable kernel ABI.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

from diag.errors import CollectorUnavailable

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
INET_DIAG_INFO = 2
TCP_ESTABLISHED = 1

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ = struct.Struct("=BBBBI")  # family, protocol, ext, pad, states (+ the 48-byte sockid)
_SOCKID = struct.Struct(">HH16s16s4x8x")  # sport, dport (network order), src, dst; if, cookie
_MSG_HEAD = struct.Struct("=BBBB")  # family, state, timer, retrans
_MSG_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_RTA = struct.Struct("=HH")

#: tcp_info fields the daemon reads: name -> (offset, struct format)
_TCP_INFO: dict[str, tuple[int, str]] = {
    "unacked": (24, "I"),
    "lost": (32, "I"),
    "rtt_us": (68, "I"),
    "rttvar_us": (72, "I"),
    "snd_cwnd": (80, "I"),
    "total_retrans": (100, "I"),
    "bytes_acked": (120, "Q"),
    "bytes_received": (128, "Q"),
    "notsent_bytes": (144, "I"),
    "min_rtt_us": (148, "I"),
    "delivery_rate": (160, "Q"),
    "busy_time_us": (168, "Q"),
    "rwnd_limited_us": (176, "Q"),
    "sndbuf_limited_us": (184, "Q"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
}


@dataclass(frozen=True, slots=True)
class TcpSocket:
    """One TCP socket and the ``tcp_info`` fields the daemon uses (0 when the kernel has none)."""

    family: int
    state: int
    local_ip: str
    local_port: int
    remote_ip: str
    remote_port: int
    inode: int
    recv_queue: int
    send_queue: int  # bytes written and not yet acked (unsent included)
    unacked: int = 0
    lost: int = 0
    rtt_us: int = 0
    rttvar_us: int = 0
    snd_cwnd: int = 0
    total_retrans: int = 0
    bytes_acked: int = 0
    bytes_received: int = 0
    notsent_bytes: int = 0
    min_rtt_us: int = 0
    delivery_rate: int = 0  # bytes per second
    busy_time_us: int = 0  # time with data in flight or waiting to be sent (4.10+)
    rwnd_limited_us: int = 0  # ... of which the receiver's window held the sender back
    sndbuf_limited_us: int = 0  # ... of which the sender's buffer ran dry
    bytes_sent: int = 0
    bytes_retrans: int = 0


def read_tcp(
    families: tuple[int, ...] = (socket.AF_INET, socket.AF_INET6),
    states: int = 1 << TCP_ESTABLISHED,
) -> list[TcpSocket]:
    """Every TCP socket of this network namespace in ``states`` (a bit mask of TCP states;
    established by default). Raises :class:`~diag.errors.CollectorUnavailable` when the kernel
    has no ``sock_diag`` (or netlink is not allowed here)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except OSError as exc:
        raise CollectorUnavailable(f"netlink sock_diag unavailable: {exc.strerror}") from exc
    out: list[TcpSocket] = []
    with sock:
        sock.bind((0, 0))
        for seq, family in enumerate(families, start=1):
            sock.send(_request(family, states, seq))
            out.extend(_receive(sock, seq))
    return out


def _request(family: int, states: int, seq: int) -> bytes:
    body = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, states)
    body += bytes(_SOCKID.size)
    head = _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP,
                       seq, 0)  # fmt: skip
    return head + body


def _receive(sock: socket.socket, seq: int) -> list[TcpSocket]:
    out: list[TcpSocket] = []
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return out
        offset = 0
        while offset + _NLMSG.size <= len(data):
            length, kind, _flags, got_seq, _pid = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size or offset + length > len(data):
                raise CollectorUnavailable("sock_diag: a truncated netlink message")
            body = data[offset + _NLMSG.size : offset + length]
            offset += (length + 3) & ~3
            if got_seq != seq:
                continue
            if kind == NLMSG_DONE:
                return out
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", body)[0] if len(body) >= 4 else 0
                if code in (errno.ENOENT, errno.EAFNOSUPPORT, 0):
                    return out  # that family is not there (no IPv6): nothing to report
                raise CollectorUnavailable(f"sock_diag refused the dump: {os.strerror(code)}")
            if kind == SOCK_DIAG_BY_FAMILY:
                parsed = parse_msg(body)
                if parsed is not None:
                    out.append(parsed)


def parse_msg(body: bytes) -> TcpSocket | None:
    """One ``inet_diag_msg`` and its attributes; ``None`` when too short to be one."""
    head = _MSG_HEAD.size + _SOCKID.size + _MSG_TAIL.size
    if len(body) < head:
        return None
    family, state, _timer, _retrans = _MSG_HEAD.unpack_from(body, 0)
    sport, dport, src, dst = _SOCKID.unpack_from(body, _MSG_HEAD.size)
    _exp, rqueue, wqueue, _uid, inode = _MSG_TAIL.unpack_from(body, _MSG_HEAD.size + _SOCKID.size)
    info = b""
    at = head
    while at + _RTA.size <= len(body):
        rta_len, rta_type = _RTA.unpack_from(body, at)
        if rta_len < _RTA.size:
            break
        if rta_type == INET_DIAG_INFO:
            info = body[at + _RTA.size : at + rta_len]
        at += (rta_len + 3) & ~3
    fields = {
        name: struct.unpack_from("=" + fmt, info, off)[0]
        for name, (off, fmt) in _TCP_INFO.items()
        if off + struct.calcsize(fmt) <= len(info)
    }
    return TcpSocket(
        family=family, state=state, local_ip=_address(family, src), local_port=sport,
        remote_ip=_address(family, dst), remote_port=dport, inode=inode, recv_queue=rqueue,
        send_queue=wqueue, **fields,
    )  # fmt: skip


def _address(family: int, raw: bytes) -> str:
    """The address as text; an IPv4-mapped IPv6 address as IPv4 (a dual-stack listener's)."""
    if family == socket.AF_INET:
        return str(ipaddress.IPv4Address(raw[:4]))
    v6 = ipaddress.IPv6Address(raw[:16])
    return str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else str(v6)
