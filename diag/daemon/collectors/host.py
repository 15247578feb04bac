"""Node and rank-process telemetry from ``/proc``.

:class:`HostCollector` emits one node-level :class:`~diag.schema.HostSample` per cycle, one
:class:`~diag.schema.ProcSample` per rank process the daemon told it about (:meth:`track`, from
``RankInfo`` events; ``last_cpu`` is the CPU it last ran on) and one
:class:`~diag.schema.HostProcess` per busy process that is not the job's
(:mod:`~diag.daemon.collectors.procs`: who competes with the ranks for the CPUs). Rates are
averaged over the time between two cycles, measured with the injected monotonic ``clock``; the
first cycle only primes the counters and emits nothing (a rate needs two readings).

Between two full samples (``interval_s``) the collector is called every ``state_interval_s``
(0.25 s) to read each rank process's state (``/proc/<pid>/stat`` field 3, its main thread: the
training thread): how often it was found stopped (``T``/``t``: SIGSTOP, a suspend, a tracer)
or in uninterruptible sleep (``D``: I/O, a page fault) goes into its next ``ProcSample``. A
rank that is frozen now and then shows nothing else a daemon can see: it is neither running
nor waiting for a CPU.

Each ``ProcSample`` also carries the process's run-queue delay over its interval, summed over
all its threads (``/proc/<pid>/task/<tid>/schedstat``, schema 1.14): the hook measures its
training thread's, but a rank's gloo, data-loader and hook threads wait for a CPU too, and a
competitor on one CPU can delay the collectives those threads run while the training thread
itself waits little longer. And the CPU quota of its cgroup (schema 1.21,
:mod:`~diag.daemon.collectors.cgroup_cpu`): how long the quota held it throttled over the
interval, and how many cores it allows; a throttled rank waits with no competitor to show for it.
``proc_root`` points at ``/proc`` or at a checked-in fake tree in tests (``cgroup_root`` at
``/sys/fs/cgroup`` or one).

Disk rates count whole physical disks only (partitions, loop, ram, zram, device-mapper and md
devices would count the same bytes twice); network rates count every interface but ``lo``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from diag import schema
from diag.config import DaemonConfig
from diag.daemon.collectors.base import UNSTAMPED, RankRef
from diag.daemon.collectors.cgroup_cpu import CgroupCpu, CpuQuota, throttled_since
from diag.daemon.collectors.procs import ProcessScan, parse_stat

log = logging.getLogger(__name__)
_SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
_VIRTUAL_DISKS = ("loop", "ram", "zram", "dm-", "md", "sr", "fd")


@dataclass(frozen=True, slots=True)
class _HostCounters:
    at_ns: int
    cpu_busy: int  # jiffies, all cores
    cpu_iowait: int
    cpu_total: int
    disk_read_bytes: int
    disk_write_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int


@dataclass(frozen=True, slots=True)
class _ProcCounters:
    at_ns: int
    start_ticks: int  # process start time: tells a reused pid from the rank we tracked
    cpu_ticks: int  # utime + stime
    read_bytes: int
    write_bytes: int
    run_delay: dict[int, int] | None  # thread id -> its run-queue delay so far (ns); None unread
    quota: CpuQuota | None  # its cgroup's CPU controller (None: unreadable)


def _physical_disks(names: list[str]) -> set[str]:
    kept = {n for n in names if not n.startswith(_VIRTUAL_DISKS)}
    return {n for n in kept if not any(o != n and n.startswith(o) for o in kept)}


class HostCollector:
    """Samples the node and the tracked rank processes from ``proc_root``."""

    name: ClassVar[str] = "host"

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        interval_s: float = 1.0,
        state_interval_s: float | None = None,
        clock_ticks_per_s: int | None = None,
        cgroup_root: Path = Path("/sys/fs/cgroup"),
    ) -> None:
        self.proc_root = Path(proc_root)
        self._cgroups = CgroupCpu(self.proc_root, cgroup_root)
        # Called every state_interval_s (when shorter): each call reads the ranks' states; a
        # full sample (rates, the samples' events) every interval_s.
        self.interval_s = min(interval_s, state_interval_s or interval_s)
        self._full_ns = int(interval_s * 1e9)
        self._last_full: int | None = None
        self._states: dict[int, list[int]] = {}  # pid -> [samples, stopped, disk wait]
        self._clock = clock
        self._ticks = clock_ticks_per_s or os.sysconf("SC_CLK_TCK")
        self._prev: _HostCounters | None = None
        self._ranks: dict[int, RankRef] = {}
        self._prev_proc: dict[int, _ProcCounters] = {}
        self._others = ProcessScan(self.proc_root, self._ticks)

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> HostCollector:
        return cls(interval_s=cfg.host_interval_s, state_interval_s=cfg.state_interval_s)

    def track(self, pid: int, rank: int, local_rank: int) -> None:
        """Sample process ``pid`` from now on as rank ``rank`` (until it exits)."""
        self._ranks[pid] = RankRef(rank, local_rank)

    @property
    def tracked_pids(self) -> list[int]:
        return sorted(self._ranks)

    def collect(self, now_ns: int) -> Iterable[schema.Event]:
        t = self._clock()
        # a full sample when its interval is (about) due: calls come every interval_s
        half_call = int(self.interval_s * 5e8)
        if self._last_full is not None and t - self._last_full < self._full_ns - half_call:
            for pid in list(self._ranks):
                self._sample_state(pid)
            return []
        self._last_full = t
        out: list[schema.Event] = []
        host = self._host_sample(now_ns, t)
        if host is not None:
            out.append(host)
        for pid in list(self._ranks):
            sample = self._proc_sample(pid, now_ns, t)
            if sample is not None:
                out.append(sample)
        out.extend(self._others.scan(now_ns, t, set(self._ranks)))
        return out

    def close(self) -> None:
        pass

    # -- node ------------------------------------------------------------------------------------

    def _read(self, *parts: str) -> str:
        return (self.proc_root.joinpath(*parts)).read_text()

    def _host_sample(self, now_ns: int, t: int) -> schema.HostSample | None:
        stat = self._read("stat").splitlines()
        cpu = [int(x) for x in stat[0].split()[1:]]
        # user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
        total = sum(cpu[:8])
        idle, iowait = cpu[3], cpu[4] if len(cpu) > 4 else 0
        num_cpus = sum(1 for line in stat if line.startswith("cpu") and line[3:4].isdigit())
        running = next((int(ln.split()[1]) for ln in stat if ln.startswith("procs_running")), 0)
        mem = {}
        for line in self._read("meminfo").splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                mem[key] = int(rest.split()[0]) * 1024
        load_1m = float(self._read("loadavg").split()[0])
        disk_r, disk_w = self._disk_bytes()
        net_rx, net_tx = self._net_bytes()
        now = _HostCounters(t, total - idle - iowait, iowait, total, disk_r, disk_w, net_rx, net_tx)
        prev, self._prev = self._prev, now
        if prev is None or t <= prev.at_ns:
            return None
        dt_s = (t - prev.at_ns) / 1e9
        d_total = max(now.cpu_total - prev.cpu_total, 1)
        return schema.HostSample(
            ts_ns=now_ns,
            interval_ns=t - prev.at_ns,
            num_cpus=num_cpus,
            cpu_busy_pct=100.0 * (now.cpu_busy - prev.cpu_busy) / d_total,
            cpu_iowait_pct=100.0 * (now.cpu_iowait - prev.cpu_iowait) / d_total,
            load_1m=load_1m,
            mem_total_bytes=mem.get("MemTotal", 0),
            mem_available_bytes=mem.get("MemAvailable", 0),
            disk_read_bytes_per_s=_rate(now.disk_read_bytes, prev.disk_read_bytes, dt_s),
            disk_write_bytes_per_s=_rate(now.disk_write_bytes, prev.disk_write_bytes, dt_s),
            net_rx_bytes_per_s=_rate(now.net_rx_bytes, prev.net_rx_bytes, dt_s),
            net_tx_bytes_per_s=_rate(now.net_tx_bytes, prev.net_tx_bytes, dt_s),
            num_procs_running=running,
            **UNSTAMPED,  # type: ignore[arg-type]
        )

    def _disk_bytes(self) -> tuple[int, int]:
        rows = [line.split() for line in self._read("diskstats").splitlines() if line.strip()]
        disks = _physical_disks([r[2] for r in rows if len(r) >= 10])
        read = sum(int(r[5]) for r in rows if len(r) >= 10 and r[2] in disks)
        written = sum(int(r[9]) for r in rows if len(r) >= 10 and r[2] in disks)
        return read * _SECTOR_BYTES, written * _SECTOR_BYTES

    def _net_bytes(self) -> tuple[int, int]:
        rx = tx = 0
        for line in self._read("net", "dev").splitlines()[2:]:
            iface, _, rest = line.partition(":")
            cols = rest.split()
            if iface.strip() == "lo" or len(cols) < 9:
                continue
            rx += int(cols[0])
            tx += int(cols[8])
        return rx, tx

    # -- rank processes ---------------------------------------------------------------------------

    def _proc_sample(self, pid: int, now_ns: int, t: int) -> schema.ProcSample | None:
        try:
            stat = self._read(str(pid), "stat")
            status = self._read(str(pid), "status")
        except (FileNotFoundError, ProcessLookupError):
            self._forget(pid, "exited")
            return None
        parsed = parse_stat(stat)
        self._count_state(pid, parsed.state)
        samples, stopped, disk_wait = self._states.pop(pid, (0, 0, 0))
        start_ticks, cpu_ticks = parsed.start_ticks, parsed.cpu_ticks
        info = {}
        for line in status.splitlines():
            key, _, rest = line.partition(":")
            info[key] = rest.split()[0] if rest.split() else "0"
        read_b, write_b = self._proc_io(pid)
        delays = self._run_delays(pid)
        quota = self._cgroups.read(pid)
        now = _ProcCounters(t, start_ticks, cpu_ticks, read_b, write_b, delays, quota)
        prev = self._prev_proc.get(pid)
        if prev is not None and prev.start_ticks != start_ticks:
            self._forget(pid, "exited (pid reused)")
            return None
        self._prev_proc[pid] = now
        if prev is None or t <= prev.at_ns:
            return None
        dt_s = (t - prev.at_ns) / 1e9
        who = self._ranks[pid]
        return schema.ProcSample(
            ts_ns=now_ns,
            rank=who.rank,
            local_rank=who.local_rank,
            pid=pid,
            interval_ns=t - prev.at_ns,
            cpu_pct=100.0 * (cpu_ticks - prev.cpu_ticks) / self._ticks / dt_s,
            rss_bytes=int(info.get("VmRSS", "0")) * 1024,
            num_threads=int(info.get("Threads", "0")),
            read_bytes_per_s=_rate(read_b, prev.read_bytes, dt_s),
            write_bytes_per_s=_rate(write_b, prev.write_bytes, dt_s),
            num_ctx_switches_involuntary=int(info.get("nonvoluntary_ctxt_switches", "0")),
            last_cpu=parsed.last_cpu,
            num_state_samples=samples,
            num_stopped=stopped,
            num_disk_wait=disk_wait,
            run_delay_ns=_delay_since(prev.run_delay, delays),
            cpu_throttled_ns=throttled_since(prev.quota, quota),
            cpu_limit_cores=quota.limit_cores if quota is not None else 0.0,
            **UNSTAMPED,  # type: ignore[arg-type]
        )

    def _run_delays(self, pid: int) -> dict[int, int] | None:
        """Each thread's run-queue delay so far (``task/<tid>/schedstat`` field 2, ns: ready to
        run, waiting for a CPU); None when the task list is unreadable. A thread that exits
        between the listing and its read is left out."""
        try:
            tids = os.listdir(self.proc_root / str(pid) / "task")
        except OSError:
            return None
        out: dict[int, int] = {}
        for tid in tids:
            try:
                out[int(tid)] = int(self._read(str(pid), "task", tid, "schedstat").split()[1])
            except (OSError, ValueError, IndexError):
                continue
        return out or None

    def _sample_state(self, pid: int) -> None:
        """Between full samples: count the state of ``pid``'s main thread."""
        try:
            stat = self._read(str(pid), "stat")
            self._count_state(pid, parse_stat(stat).state)
        except (OSError, ValueError, IndexError):
            return  # gone or unreadable: the next full sample says so

    def _count_state(self, pid: int, state: str) -> None:
        counts = self._states.setdefault(pid, [0, 0, 0])
        counts[0] += 1
        counts[1] += state in ("T", "t")
        counts[2] += state == "D"

    def _proc_io(self, pid: int) -> tuple[int, int]:
        """Storage bytes read and written by ``pid``; (0, 0) if ``io`` is unreadable."""
        try:
            text = self._read(str(pid), "io")
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            return 0, 0
        io = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
        return int(io.get("read_bytes", 0)), int(io.get("write_bytes", 0))

    def _forget(self, pid: int, why: str) -> None:
        log.debug("stopped sampling pid %d (rank %d): %s", pid, self._ranks[pid].rank, why)
        del self._ranks[pid]
        self._prev_proc.pop(pid, None)
        self._states.pop(pid, None)


def _delay_since(prev: dict[int, int] | None, now: dict[int, int] | None) -> int | None:
    """The process's run-queue delay over the interval, all its threads: each thread's growth
    since the previous reading (a thread started since counts from zero; one that exited since
    counts nothing for its last moments). None when either reading is missing."""
    if prev is None or now is None:
        return None
    return sum(max(0, ns - prev.get(tid, 0)) for tid, ns in now.items())


def _rate(now: int, prev: int, dt_s: float) -> float:
    """Per-second increase of a counter; 0 if it went backwards (a reset or a device removed)."""
    return max(now - prev, 0) / dt_s
