"""The network as the job's connections see it: per-peer TCP statistics and NIC/IB counters.

:class:`NetCollector` emits, every ``interval_s``:

- one :class:`~diag.schema.TcpPeerSample` per rank and remote address: the TCP sockets the
  rank's process holds (its ``/proc/<pid>/fd`` links ``socket:[inode]``), matched by inode
  with the kernel's per-connection statistics (:func:`~diag.daemon.collectors.inet_diag.
  read_tcp`, what ``ss -ti`` prints) and grouped by remote address. Byte and retransmission
  counters are deltas since the last cycle; a connection seen for the first time only primes
  them (its counters so far are its whole life, not the interval), though its RTT and queue
  count at once;
- one :class:`~diag.schema.NicSample` per Ethernet interface but ``lo`` and per InfiniBand port
  that moved bytes, dropped or erred in the interval (``/sys/class/net/<dev>/statistics``,
  ``/sys/class/infiniband/<dev>/ports/<n>/counters``; InfiniBand data counters count 4-byte
  words).

A slow link shows in the senders' connections towards it: a queue builds (the RTT rises from its
floor and bytes wait in the send queue) or packets are lost (retransmissions); the link detector
compares the hosts' connections (:mod:`diag.diagnose.detectors.link_hosts`). ``proc_root`` and
``sys_root`` point at ``/proc`` and ``/sys`` or at fake trees in tests; ``read_tcp`` is the
kernel reader (injected: a test can hand it real sockets of its own process).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.base import UNSTAMPED, RankRef
from diag.daemon.collectors.inet_diag import TcpSocket, read_tcp
from diag.errors import CollectorUnavailable

log = logging.getLogger(__name__)

_ETH_COUNTERS = ("rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
_IB_COUNTERS = (
    "port_rcv_data", "port_xmit_data", "port_rcv_errors", "port_xmit_discards",
    "symbol_error", "link_downed", "port_xmit_wait",
)  # fmt: skip
_IB_WORD = 4  # port_rcv_data / port_xmit_data count 4-byte words


@dataclass(frozen=True, slots=True)
class _Conn:
    """A connection's cumulative counters at the last cycle."""

    bytes_sent: int
    bytes_acked: int
    bytes_retrans: int
    total_retrans: int
    busy_time_us: int
    rwnd_limited_us: int
    sndbuf_limited_us: int


class NetCollector:
    """Samples the job's TCP connections and the node's ports (module docstring)."""

    name: ClassVar[str] = "net"

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        sys_root: Path = Path("/sys"),
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        interval_s: float = 1.0,
        read: Callable[[], list[TcpSocket]] = read_tcp,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.sys_root = Path(sys_root)
        self.interval_s = interval_s
        self._clock = clock
        self._read = read
        self._ranks: dict[int, RankRef] = {}
        self._conns: dict[int, _Conn] = {}  # inode -> counters at the last cycle
        self._ports: dict[tuple[str, int], dict[str, int]] = {}
        self._prev_t: int | None = None

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> NetCollector:
        if cfg.net_interval_s <= 0:
            raise CollectorUnavailable("turned off (net_interval_s = 0)")
        read_tcp()  # CollectorUnavailable here when the kernel has no sock_diag
        return cls(interval_s=cfg.net_interval_s)

    def track(self, pid: int, rank: int, local_rank: int) -> None:
        """Sample process ``pid``'s connections from now on as rank ``rank``."""
        self._ranks[pid] = RankRef(rank, local_rank)

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        t = self._clock()
        dt_ns = t - self._prev_t if self._prev_t is not None and t > self._prev_t else 0
        self._prev_t = t
        out: list[schema.Event] = []
        out.extend(self._tcp(now_ns, dt_ns))
        out.extend(self._nics(now_ns, dt_ns))
        return out

    def close(self) -> None:
        pass

    # -- TCP ---------------------------------------------------------------------------------

    def _inodes(self) -> dict[int, RankRef]:
        """Socket inode -> the rank holding it (ranks whose process is gone are forgotten)."""
        out: dict[int, RankRef] = {}
        for pid, who in list(self._ranks.items()):
            fd_dir = self.proc_root / str(pid) / "fd"
            try:
                entries = list(os.scandir(fd_dir))
            except FileNotFoundError:
                del self._ranks[pid]
                continue
            except OSError as exc:  # not ours to read: skip this rank this cycle, keep the rest
                log.debug("cannot list %s: %s", fd_dir, exc)
                continue
            for entry in entries:
                try:
                    target = os.readlink(entry.path)
                except OSError:  # closed meanwhile
                    continue
                if target.startswith("socket:["):
                    out[int(target[8:-1])] = who
        return out

    def _tcp(self, now_ns: int, dt_ns: int) -> list[schema.Event]:
        if not self._ranks:
            return []
        owners = self._inodes()
        groups: dict[tuple[RankRef, str, str], list[tuple[TcpSocket, _Conn | None]]] = defaultdict(
            list
        )
        seen: dict[int, _Conn] = {}
        for s in self._read():
            who = owners.get(s.inode)
            if who is None or not s.inode:
                continue
            now = _Conn(s.bytes_sent, s.bytes_acked, s.bytes_retrans, s.total_retrans,
                        s.busy_time_us, s.rwnd_limited_us, s.sndbuf_limited_us)  # fmt: skip
            seen[s.inode] = now
            groups[(who, s.local_ip, s.remote_ip)].append((s, self._conns.get(s.inode)))
        self._conns = seen
        if not dt_ns:
            return []  # the first cycle primes the counters
        return [
            _peer_sample(who, local, remote, conns, now_ns, dt_ns)
            for (who, local, remote), conns in sorted(
                groups.items(), key=lambda kv: (kv[0][0].rank, kv[0][2])
            )
        ]

    # -- ports -------------------------------------------------------------------------------

    def _nics(self, now_ns: int, dt_ns: int) -> list[schema.Event]:
        out: list[schema.Event] = []
        for key, link_layer, counters in self._read_ports():
            before = self._ports.get(key)
            self._ports[key] = counters
            if before is None or not dt_ns:
                continue
            d = {k: max(0, v - before.get(k, v)) for k, v in counters.items()}
            if link_layer == "infiniband":
                rx = d.get("port_rcv_data", 0) * _IB_WORD
                tx = d.get("port_xmit_data", 0) * _IB_WORD
                drops = d.get("port_xmit_discards", 0)
                errors = sum(d.get(k, 0) for k in ("port_rcv_errors", "symbol_error",
                                                    "link_downed"))  # fmt: skip
                wait = d.get("port_xmit_wait", -1) if "port_xmit_wait" in counters else -1
            else:
                rx, tx = d.get("rx_bytes", 0), d.get("tx_bytes", 0)
                drops = d.get("rx_dropped", 0) + d.get("tx_dropped", 0)
                errors = d.get("rx_errors", 0) + d.get("tx_errors", 0)
                wait = -1
            if not (rx or tx or drops or errors or wait > 0):
                continue
            out.append(
                schema.NicSample(
                    ts_ns=now_ns,
                    **UNSTAMPED,  # type: ignore[arg-type]
                    device=key[0],
                    port=key[1],
                    link_layer=link_layer,
                    interval_ns=dt_ns,
                    rx_bytes_per_s=rx / (dt_ns / 1e9),
                    tx_bytes_per_s=tx / (dt_ns / 1e9),
                    num_drops=drops,
                    num_errors=errors,
                    num_xmit_wait=wait,
                )
            )
        return out

    def _read_ports(self) -> list[tuple[tuple[str, int], str, dict[str, int]]]:
        out = []
        net = self.sys_root / "class" / "net"
        for dev in sorted(_names(net)):
            if dev == "lo":
                continue
            counters = _counters(net / dev / "statistics", _ETH_COUNTERS)
            if counters:
                out.append(((dev, 0), "ethernet", counters))
        ib = self.sys_root / "class" / "infiniband"
        for dev in sorted(_names(ib)):
            for port in sorted(_names(ib / dev / "ports")):
                if not port.isdigit():
                    continue
                counters = _counters(ib / dev / "ports" / port / "counters", _IB_COUNTERS)
                if counters:
                    out.append(((dev, int(port)), "infiniband", counters))
        return out


def _names(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _counters(path: Path, names: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for name in names:
        try:
            out[name] = int((path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _peer_sample(
    who: RankRef,
    local: str,
    remote: str,
    conns: list[tuple[TcpSocket, _Conn | None]],
    now_ns: int,
    dt_ns: int,
) -> schema.TcpPeerSample:
    """One rank's connections to one remote address over the interval."""
    sent = acked = retrans_bytes = retrans = busy = rwnd = sndbuf = 0
    active: list[TcpSocket] = []
    for s, before in conns:
        if before is not None:
            sent += max(0, s.bytes_sent - before.bytes_sent)
            acked += max(0, s.bytes_acked - before.bytes_acked)
            retrans_bytes += max(0, s.bytes_retrans - before.bytes_retrans)
            retrans += max(0, s.total_retrans - before.total_retrans)
            busy += max(0, s.busy_time_us - before.busy_time_us)
            rwnd += max(0, s.rwnd_limited_us - before.rwnd_limited_us)
            sndbuf += max(0, s.sndbuf_limited_us - before.sndbuf_limited_us)
            if s.bytes_sent > before.bytes_sent or s.send_queue:
                active.append(s)
        elif s.send_queue:
            active.append(s)
    rtts = [s.rtt_us for s in (active or [s for s, _ in conns]) if s.rtt_us]
    floors = [s.min_rtt_us for s, _ in conns if s.min_rtt_us]
    return schema.TcpPeerSample(
        ts_ns=now_ns,
        **UNSTAMPED,  # type: ignore[arg-type]
        rank=who.rank,
        local_rank=who.local_rank,
        local_ip=local,
        remote_ip=remote,
        interval_ns=dt_ns,
        num_conns=len(conns),
        bytes_sent=sent,
        bytes_acked=acked,
        bytes_retrans=retrans_bytes,
        num_retrans=retrans,
        rtt_us=float(max(rtts)) if rtts else 0.0,
        min_rtt_us=float(min(floors)) if floors else 0.0,
        send_queue_bytes=sum(s.send_queue for s, _ in conns),
        busy_us=busy,
        rwnd_limited_us=rwnd,
        sndbuf_limited_us=sndbuf,
    )
