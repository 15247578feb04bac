"""Noticing a hook that stopped reporting: its thread died or is stuck, and its rank went blind.

A hook sends a :class:`~diag.schema.HookHealth` when its thread starts and then every
``health_interval_ns`` (the health says its interval). The listener tells the watch about each
health a connection brings (:meth:`HookWatch.health`) and about each connection that closes
(:meth:`HookWatch.closed`); the daemon's loop asks :meth:`HookWatch.check` for the silences to
report. A connection that stays open with no health for ``intervals`` times its hook's interval
(and at least ``min_silence_s``) while the hook's process runs is reported once, as a
:class:`~diag.schema.HookSilent`; a health that comes later ends the silence (a new one is
reported again).

"Runs" is read from ``/proc/<pid>/stat``: a process that is gone or a zombie is not reported (it
is exiting, its connection about to close; the rank watch reports exits), and while it is stopped
(``T``/``t``: a signal, a debugger, a stack sampler) its hook cannot report either, so the silence
starts over when it runs again. Not watched: a connection that never sent a health (the
launcher's), and a hook whose last health said ``final`` (its thread stopped on purpose, at exit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

from diag import schema
from diag.config import HookConfig

#: Silence, in health intervals, after which a hook counts as dead or stuck: a hook thread may
#: legitimately pause for a few seconds (its first Flight Recorder dump, summarizing a large
#: profiler trace), never for several intervals.
SILENT_INTERVALS = 4.0
MIN_SILENCE_S = 20.0
_DEFAULT_INTERVAL_NS = round(HookConfig().health_interval_s * 1e9)  # a hook older than 1.9's


@dataclass(slots=True, eq=False)
class _Watched:
    health: schema.HookHealth  # the latest one
    since_s: float  # when it came (or when the process was last seen stopped)
    reported: bool = False


class HookWatch:
    """The hooks' heartbeats, per connection (thread-safe: the listener thread feeds it, the
    daemon's loop checks it). ``clock`` is monotonic seconds; ``proc_root`` is ``/proc``."""

    def __init__(
        self,
        *,
        intervals: float = SILENT_INTERVALS,
        min_silence_s: float = MIN_SILENCE_S,
        clock: Callable[[], float] = time.monotonic,
        proc_root: Path = Path("/proc"),
    ) -> None:
        self.intervals = intervals
        self.min_silence_s = min_silence_s
        self._clock = clock
        self._proc = proc_root
        self._lock = threading.Lock()
        self._hooks: dict[Hashable, _Watched] = {}
        self.num_reported = 0

    def health(self, conn: Hashable, health: schema.HookHealth) -> None:
        """``conn`` brought ``health`` now."""
        with self._lock:
            if health.final:
                self._hooks.pop(conn, None)
            else:
                self._hooks[conn] = _Watched(health, self._clock())

    def closed(self, conn: Hashable) -> None:
        with self._lock:
            self._hooks.pop(conn, None)

    def _limit_s(self, health: schema.HookHealth) -> float:
        interval_ns = health.health_interval_ns or _DEFAULT_INTERVAL_NS
        return max(self.intervals * interval_ns / 1e9, self.min_silence_s)

    def check(self, now_ns: int) -> list[schema.HookSilent]:
        """The silences to report now (each once), stamped ``now_ns``; the daemon gives them its
        envelope (``host``/``source``/``seq`` left blank here)."""
        now = self._clock()
        out: list[schema.HookSilent] = []
        with self._lock:
            for w in self._hooks.values():
                if w.reported or now - w.since_s <= self._limit_s(w.health):
                    continue
                state = self._state(w.health.pid)
                if state is None or state in "ZXx":
                    continue
                if state in "Tt":
                    w.since_s = now  # it cannot report while stopped: count from when it runs
                    continue
                w.reported = True
                h = w.health
                out.append(
                    schema.HookSilent(
                        ts_ns=now_ns,
                        host="",
                        source="",
                        seq=-1,
                        rank=h.rank,
                        local_rank=h.local_rank,
                        pid=h.pid,
                        hook_source=h.source,
                        silent_ns=round((now - w.since_s) * 1e9),
                        health_interval_ns=h.health_interval_ns,
                        last_health_seq=h.seq,
                        last_error=h.last_error,
                    )
                )
        self.num_reported += len(out)
        return out

    def _state(self, pid: int) -> str | None:
        """The process's state letter (``R``, ``S``, ``D``, ``T``, ...); None when it is gone."""
        try:
            stat = (self._proc / str(pid) / "stat").read_text()
        except (OSError, ValueError):
            return None
        fields = stat[stat.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
        return fields[0] if fields else None
