"""Who else uses the node's CPUs: the busiest processes that are not the job's.

:class:`ProcessScan` reads every ``/proc/<pid>/stat`` once per host cycle (a few hundred small
files: milliseconds of the daemon's time, none of the training's) and returns, as
:class:`~diag.schema.HostProcess` events, the ``top`` processes that used at least ``min_pct``
of a core over the interval (``cpu_pct``, 100 per core: ``utime + stime`` ticks over the
interval), with their command line (``/proc/<pid>/cmdline``, at most ``CMD_CHARS`` characters;
``[comm]`` for a kernel thread) and the CPU they last ran on (``stat`` field 39).

Left out: the job's rank processes and all their descendants (data-loader workers, compile
workers: the job's own load, which the ranks' step times already show), and the daemon itself.
A pid is followed by its start time, so a reused pid is a new process. A process that started
since the last scan is reported over its life so far (its CPU ticks over its age, from its start
time and ``/proc/uptime``; at least ``MIN_AGE_S`` old): a competitor that starts mid-run is seen
one cycle sooner, which for a short job is the difference between seen and not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from diag import schema
from diag.daemon.collectors.base import UNSTAMPED

CMD_CHARS = 200
#: a process younger than this is not reported yet (its CPU share over a few ticks is noise)
MIN_AGE_S = 0.2


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the daemon uses."""

    pid: int
    comm: str
    state: str  # R running, S sleeping, D disk (uninterruptible) wait, T/t stopped, Z zombie
    ppid: int
    cpu_ticks: int  # utime + stime
    start_ticks: int
    last_cpu: int  # field 39; -1 when the line is shorter (very old kernels)


def parse_stat(text: str) -> ProcStat:
    """A ``stat`` line (``comm`` may hold spaces and parentheses: it ends at the last ``)``)."""
    open_at, close_at = text.index("("), text.rfind(")")
    fields = text[close_at + 2 :].split()
    return ProcStat(
        pid=int(text[:open_at]),
        comm=text[open_at + 1 : close_at],
        state=fields[0],
        ppid=int(fields[1]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
        start_ticks=int(fields[19]),
        last_cpu=int(fields[36]) if len(fields) > 36 else -1,
    )


class ProcessScan:
    """The busiest processes of ``proc_root`` that are not the job's (module docstring)."""

    def __init__(
        self,
        proc_root: Path,
        ticks_per_s: int,
        *,
        top: int = 5,
        min_pct: float = 10.0,
        self_pid: int | None = None,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.top = top
        self.min_pct = min_pct
        self._ticks = ticks_per_s
        self._self = os.getpid() if self_pid is None else self_pid
        self._prev: dict[int, tuple[int, int]] = {}  # pid -> (start ticks, cpu ticks)
        self._prev_ns = 0

    def _stats(self) -> dict[int, ProcStat]:
        out = {}
        for entry in os.scandir(self.proc_root):
            if not entry.name.isdigit():
                continue
            try:
                stat = parse_stat(Path(entry.path, "stat").read_text())
            except (OSError, ValueError, IndexError):  # gone meanwhile, or unreadable
                continue
            out[stat.pid] = stat
        return out

    def scan(self, now_ns: int, t: int, ranks: set[int]) -> list[schema.Event]:
        """The competing processes over the interval since the last scan (monotonic ``t``);
        ``ranks``: the job's rank pids. The first scan only primes the counters."""
        stats = self._stats()
        prev, prev_ns = self._prev, self._prev_ns
        self._prev = {p: (s.start_ticks, s.cpu_ticks) for p, s in stats.items()}
        self._prev_ns = t
        if not prev_ns or t <= prev_ns:
            return []
        job = _descendants(ranks, stats) | {self._self}
        dt_s = (t - prev_ns) / 1e9
        uptime = self._uptime_ticks()
        busy = []
        for pid, s in stats.items():
            before = prev.get(pid)
            if pid in job:
                continue
            if before is not None and before[0] == s.start_ticks:
                used, over_s = s.cpu_ticks - before[1], dt_s
            elif uptime is not None:  # started since the last scan: its CPU over its life
                age_s = (uptime - s.start_ticks) / self._ticks
                if not MIN_AGE_S <= age_s <= dt_s + 1.0:
                    continue
                used, over_s = s.cpu_ticks, min(age_s, dt_s)
            else:
                continue
            pct = 100.0 * max(0, used) / self._ticks / over_s
            if pct >= self.min_pct:
                busy.append((pct, over_s, s))
        busy.sort(key=lambda ps: (-ps[0], ps[2].pid))
        return [
            schema.HostProcess(
                ts_ns=now_ns,
                pid=s.pid,
                interval_ns=int(over_s * 1e9),
                cpu_pct=pct,
                cmd=self._cmd(s),
                last_cpu=s.last_cpu,
                **UNSTAMPED,  # type: ignore[arg-type]
            )
            for pct, over_s, s in busy[: self.top]
        ]

    def _uptime_ticks(self) -> float | None:
        """Seconds since boot (``/proc/uptime``) in clock ticks, the unit of a process's start
        time; ``None`` when unreadable."""
        try:
            return float(Path(self.proc_root, "uptime").read_text().split()[0]) * self._ticks
        except (OSError, ValueError, IndexError):
            return None

    def _cmd(self, s: ProcStat) -> str:
        try:
            raw = Path(self.proc_root, str(s.pid), "cmdline").read_bytes()
        except OSError:
            raw = b""
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        return cmd[:CMD_CHARS] if cmd else f"[{s.comm}]"


def _descendants(roots: set[int], stats: dict[int, ProcStat]) -> set[int]:
    """``roots`` and every process below them in ``stats``' parent links."""
    children: dict[int, list[int]] = {}
    for s in stats.values():
        children.setdefault(s.ppid, []).append(s.pid)
    out, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out
