"""Who else uses the node's CPUs: the busiest processes that are not the job's.

:class:`ProcessScan` reads every ``/proc/<pid>/stat`` once per host cycle (a few hundred small
files: milliseconds of the daemon's time, none of the training's) and returns, as
:class:`~diag.schema.HostProcess` events, the ``top`` processes that used at least ``min_pct``
of a core over the interval (``cpu_pct``, 100 per core: ``utime + stime`` ticks over the
interval), with their command line (``/proc/<pid>/cmdline``, at most ``CMD_CHARS`` characters;
``[comm]`` for a kernel thread) and the CPU they last ran on (``stat`` field 39).

Left out: the job's rank processes and all their descendants (data-loader workers, compile
workers: the job's own load, which the ranks' step times already show), and the daemon itself.
A pid is followed by its start time, so a reused pid is a new process (its first cycle only
primes its counter, as every process's first cycle does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from diag import schema
from diag.daemon.collectors.base import UNSTAMPED

CMD_CHARS = 200


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the daemon uses."""

    pid: int
    comm: str
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
        busy = []
        for pid, s in stats.items():
            before = prev.get(pid)
            if pid in job or before is None or before[0] != s.start_ticks:
                continue
            pct = 100.0 * max(0, s.cpu_ticks - before[1]) / self._ticks / dt_s
            if pct >= self.min_pct:
                busy.append((pct, s))
        busy.sort(key=lambda ps: (-ps[0], ps[1].pid))
        return [
            schema.HostProcess(
                ts_ns=now_ns,
                pid=s.pid,
                interval_ns=t - prev_ns,
                cpu_pct=pct,
                cmd=self._cmd(s),
                last_cpu=s.last_cpu,
                **UNSTAMPED,  # type: ignore[arg-type]
            )
            for pct, s in busy[: self.top]
        ]

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
